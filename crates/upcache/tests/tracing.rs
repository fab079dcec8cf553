//! The slow paths open `tracing` spans (a miss's device read, a load of runs, a write-back,
//! a sync), which a subscriber sees with their fields; nothing is recorded without one.

mod common;

use std::sync::{Arc, Mutex};

use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Records the name of every span opened.
#[derive(Default)]
struct Names(Mutex<Vec<String>>);

struct Recorder(Arc<Names>);

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut names = self.0 .0.lock().unwrap();
        names.push(span.metadata().name().to_string());
        Id::from_u64(names.len() as u64)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn misses_write_backs_and_syncs_open_spans() {
    let tmp = tempfile::tempdir().unwrap();
    // No readahead: the second read must load its own pages.
    let cache = upcache::Cache::create(common::config(tmp.path(), 2, 4096, 64).with_readahead(0)).unwrap();
    let f = cache.create_file("f").unwrap();
    f.write_all_at(&common::pattern(3, 3 * 4096), 0).unwrap();
    let names = Arc::new(Names::default());
    tracing::subscriber::with_default(Recorder(names.clone()), || {
        f.sync_data().unwrap(); // writes back, then syncs
        f.evict(0, 0).unwrap();
        let mut one = [0u8; 100];
        f.read_exact_at(&mut one, 10).unwrap(); // a single-page miss
        f.read_exact_at(&mut vec![0u8; 2 * 4096], 4096).unwrap(); // a load of runs
    });
    let names = names.0.lock().unwrap().clone();
    for want in ["upcache.sync", "upcache.write_back", "upcache.miss", "upcache.load"] {
        assert!(names.iter().any(|n| n == want), "no {want} span in {names:?}");
    }
}
