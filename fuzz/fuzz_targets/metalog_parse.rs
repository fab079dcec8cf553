//! The metadata-log parser on any log body after a valid header: never a panic, and the
//! records it accepts re-encode to exactly the bytes they came from (so no malformed record
//! is accepted as another). Each input byte run is also decoded as a record body directly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use upcache::internals::meta::metalog::{header, parse, Record};

fuzz_target!(|data: &[u8]| {
    let _ = Record::decode(data);
    let mut log = header(7, 3).to_vec();
    log.extend_from_slice(data);
    let parsed = parse(&log, 7, 3).expect("a log with this array's header parses");
    let mut again = Vec::new();
    for r in &parsed.records {
        r.encode_into(&mut again);
    }
    assert_eq!(&data[..again.len()], &again[..], "accepted records re-encode to their bytes");
    // Another array's or generation's header is refused, never misread.
    assert!(parse(&log, 8, 3).is_err() && parse(&log, 7, 4).is_err());
});
