//! GC-aware eviction for the shared cache's files (ScalaCache §5.4): whether the device that
//! holds a file is collecting garbage, inferred from the latency of the write-backs that
//! reach it, as the private engine infers it for its arrays (`io/device/gc_watch.rs`, whose
//! per-device state lives here in the segment, fed by every process's write-backs).
//!
//! A device is a file's `st_dev` (an array file's page's: its device's directory's, or a
//! simulated device's own number, `backing::device_number`), up to
//! [`GC_DEVICES`] of them; files on further devices are never taken to be collecting. Only write-backs through `O_DIRECT` (whole pages, with
//! `SharedConfig::direct_write_back`) or to a simulated device are timed: a buffered one is a copy into the kernel's
//! page cache, whose time says nothing of the device. Times are `CLOCK_MONOTONIC`
//! nanoseconds, the same clock in every process. Every value is a hint (Relaxed atomics); a
//! process that dies mid write-back leaves a slot that stops counting after a minute.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Inner;
use crate::io::device::gc_watch::GcDevice;

/// Devices the segment tracks.
pub(crate) const GC_DEVICES: usize = 8;

/// The segment's GC table: device numbers (`st_dev + 1`, 0 free) and their states.
#[repr(C)]
#[derive(Default)]
pub(crate) struct GcTable {
    devs: [AtomicU64; GC_DEVICES],
    states: [GcDevice; GC_DEVICES],
}

/// Nanoseconds on `CLOCK_MONOTONIC`.
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we pass; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl GcTable {
    /// The state of device `dev`, taking a free entry for it if it has none; None if the
    /// table is full of other devices.
    pub(crate) fn device(&self, dev: u64) -> Option<&GcDevice> {
        let want = dev.wrapping_add(1).max(1);
        for (i, d) in self.devs.iter().enumerate() {
            // Relaxed: an entry is never given back, so a device seen is its entry's for good.
            let seen = d.load(Ordering::Relaxed);
            if seen == want
                || (seen == 0
                    && match d.compare_exchange(0, want, Ordering::Relaxed, Ordering::Relaxed) {
                        Ok(_) => true,
                        Err(now) => now == want,
                    })
            {
                return Some(&self.states[i]);
            }
        }
        None
    }

    /// The state of device `dev` if it has an entry.
    fn find(&self, dev: u64) -> Option<&GcDevice> {
        let want = dev.wrapping_add(1).max(1);
        // Relaxed: as in `device`.
        let i = self.devs.iter().position(|d| d.load(Ordering::Relaxed) == want)?;
        Some(&self.states[i])
    }
}

impl Inner {
    /// The GC state of the device holding file `slot`, taken if new.
    pub(crate) fn gc_device(&self, slot: u32) -> Option<&GcDevice> {
        // Relaxed: fixed while the file is open, as the caller has it.
        let dev = self.view.files()[slot as usize].dev.load(Ordering::Relaxed);
        self.view.gc().device(dev)
    }

    /// Whether the device holding page key `k` is taken to be collecting garbage now: an
    /// array file's page's own device (this process's backing of the file says which), else
    /// its file's.
    pub(crate) fn collecting_key(&self, k: u64) -> bool {
        let slot = super::frame::key_slot(k);
        let dev = {
            let fds = self.fds.lock().unwrap_or_else(|p| p.into_inner());
            fds.get(&slot).and_then(|o| o.fd.array().map(|a| a.device_number_of(super::frame::key_page(k))))
        };
        match dev {
            Some(dev) => self.device_collecting(dev),
            None => self.collecting(slot),
        }
    }

    /// Whether device `dev` (its number in the table, `backing::device_number`) is taken to
    /// be collecting garbage now.
    pub(crate) fn device_collecting(&self, dev: u64) -> bool {
        self.view.gc().find(dev).is_some_and(|d| d.collecting_at(now_ns()))
    }

    /// Whether the device holding file `slot` is taken to be collecting garbage now.
    pub(crate) fn collecting(&self, slot: u32) -> bool {
        // Relaxed: a hint (the entry may be another file's by now: one eviction choice).
        let dev = self.view.files()[slot as usize].dev.load(Ordering::Relaxed);
        self.view.gc().find(dev).is_some_and(|d| d.collecting_at(now_ns()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Devices get entries of their own, found again; past the table's size, none.
    #[test]
    fn each_device_has_its_own_entry_until_the_table_is_full() {
        let t = GcTable::default();
        let a = t.device(7).unwrap() as *const GcDevice;
        assert_eq!(t.device(7).unwrap() as *const GcDevice, a);
        assert_eq!(t.find(7).unwrap() as *const GcDevice, a);
        assert!(t.find(8).is_none());
        for dev in 100..100 + GC_DEVICES as u64 - 1 {
            assert_ne!(t.device(dev).unwrap() as *const GcDevice, a);
        }
        assert!(t.device(1000).is_none(), "full");
        assert!(t.device(u64::MAX).is_none(), "a device number that wraps");
    }
}
