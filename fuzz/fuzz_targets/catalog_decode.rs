//! The catalog and device-marker decoders on any bytes: never a panic; and a catalog that
//! decodes encodes back to itself. The input is tried as a whole file and as a body framed
//! with a valid checksum (every format version), so the body parser is reached.
#![no_main]

use libfuzzer_sys::fuzz_target;
use upcache::internals::meta::catalog::{frame_catalog_body, Catalog, DeviceMarker, FORMAT_VERSION};

fuzz_target!(|data: &[u8]| {
    let _ = DeviceMarker::decode(data);
    let _ = Catalog::decode(data);
    for version in 1..=FORMAT_VERSION + 1 {
        if let Ok(c) = Catalog::decode(&frame_catalog_body(version, data)) {
            let again = Catalog::decode(&c.encode()).expect("an encoded catalog decodes");
            assert_eq!(again.encode(), c.encode());
        }
    }
});
