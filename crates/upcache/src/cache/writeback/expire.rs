//! Age-based write-back (the kernel's `dirty_expire_centisecs`): a file whose pages have been
//! dirty for longer than `Config::with_dirty_expire` is written back by a flusher, however few
//! pages are dirty, so that data written under the dirty ratios does not stay only in memory
//! for long.
//!
//! The age is the file's (the kernel's inode `dirtied_when`), not each page's: it is set when
//! the file goes from clean to dirty (`account_dirtied`), and a file still dirty after its
//! write-back (written again meanwhile) counts as dirtied at that moment. One flusher looks
//! every `Writeback::expiry_interval`, so pages reach the device between the expiry and the
//! expiry plus that interval after they were first dirtied.

use crate::cache::CacheInner;
use crate::file::FileInner;
use crate::sync::{self, Arc, Ordering};

impl CacheInner {
    /// Writes back every file dirty for at least the expiry at `now_ms` (the write-back
    /// clock, `Writeback::now_ms`). Failures stick to their files, as with any write-back.
    /// Returns how many files had expired (written back now, or found cleaned meanwhile).
    pub(crate) fn write_back_expired(&self, now_ms: u64) -> usize {
        let expire = self.writeback.expire.as_millis() as u64;
        let expired = |f: &FileInner| {
            // Relaxed: ages only; flush_file re-checks every page's state.
            let at = f.dirtied_at.load(Ordering::Relaxed);
            at != 0 && now_ms.saturating_sub(at) >= expire
        };
        let due: Vec<Arc<FileInner>> =
            sync::read(&self.files).values().filter(|f| expired(f)).cloned().collect();
        for file in &due {
            let seen = file.dirtied_at.load(Ordering::Relaxed);
            if file.dirty_pages.load(Ordering::Relaxed) == 0 {
                // Cleaned by a sync or other write-back. Unless dirtied again meanwhile (a new
                // age), it is clean.
                let _ = file.dirtied_at.compare_exchange(seen, 0, Ordering::Relaxed, Ordering::Relaxed);
                continue;
            }
            if let Err(e) = self.flush_file(file) {
                log::warn!("write-back of expired {:?} failed, its pages stay dirty: {e}", file.name);
            }
            // Written again meanwhile: from now on, as the kernel's redirty. Cleaned: 0.
            let next = if file.dirty_pages.load(Ordering::Relaxed) == 0 { 0 } else { now_ms };
            let _ = file.dirtied_at.compare_exchange(seen, next, Ordering::Relaxed, Ordering::Relaxed);
        }
        due.len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;
    use std::time::Duration;

    use crate::{Cache, Config};

    #[test]
    fn a_file_is_written_back_once_dirty_for_the_expiry_and_not_before() {
        let tmp = tempfile::tempdir().unwrap();
        let config =
            Config::new([tmp.path().join("dev0")], 64 * 4096).with_dirty_expire(Duration::from_secs(30));
        let cache = Cache::create(config).unwrap();
        let inner = cache.inner();
        let (old, young) = (cache.create_file("old").unwrap(), cache.create_file("young").unwrap());
        old.write_all_at(b"old", 0).unwrap();
        young.write_all_at(b"young", 0).unwrap();
        let t0 = old.inner().dirtied_at.load(Relaxed);
        assert_ne!(t0, 0, "a dirtied file has an age");
        // As if `young` were dirtied 10 s after `old`.
        young.inner().dirtied_at.store(t0 + 10_000, Relaxed);
        // Far under the ratios (2 pages of 64): only the age writes them back.
        assert_eq!(inner.write_back_expired(t0 + 29_999), 0);
        assert_eq!(cache.stats().dirty_pages, 2);
        assert_eq!(inner.write_back_expired(t0 + 30_000), 1, "the old file only");
        assert_eq!((old.inner().dirty_pages.load(Relaxed), young.inner().dirty_pages.load(Relaxed)), (0, 1));
        assert_eq!(old.inner().dirtied_at.load(Relaxed), 0, "clean again");
        assert_eq!(cache.stats().writeback_bytes, 4096);
        assert_eq!(inner.write_back_expired(t0 + 40_000), 1, "the young file at its own 30 s");
        assert_eq!(cache.stats().dirty_pages, 0);
        // Written back, not dropped: a new cache over the same devices reads both.
        drop((old, young));
        drop(cache);
        let cache = Cache::open(Config::new([tmp.path().join("dev0")], 64 * 4096)).unwrap();
        let mut buf = [0u8; 5];
        cache.open_file("young").unwrap().read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"young");
    }

    #[test]
    fn a_cleaned_file_gets_a_new_age_when_dirtied_again() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::create(Config::new([tmp.path().join("dev0")], 64 * 4096)).unwrap();
        let f = cache.create_file("f").unwrap();
        f.write_all_at(b"a", 0).unwrap();
        let t0 = f.inner().dirtied_at.load(Relaxed);
        f.sync_data().unwrap();
        let inner = cache.inner();
        // Cleaned by the sync: nothing to write, and seen clean.
        assert_eq!(inner.write_back_expired(t0 + 30_000), 1);
        assert_eq!(f.inner().dirtied_at.load(Relaxed), 0);
        f.write_all_at(b"c", 0).unwrap();
        let t1 = f.inner().dirtied_at.load(Relaxed);
        assert!(t1 >= t0, "a new age on the next dirtying");
        assert_eq!(inner.write_back_expired(t1 + 29_999), 0);
        assert_eq!(inner.write_back_expired(t1 + 30_000), 1);
        assert_eq!(cache.stats().dirty_pages, 0);
    }
}
