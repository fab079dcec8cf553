//! What a shared file's pages are loaded from and written back to: a program's OS file (a
//! [`HeldFd`]), or an array file, whose stripe units lie on each device's backing file
//! (SAFS §3.3; `io/layout.rs` places them, `meta/` keeps the array's names and lengths).
//!
//! An array file is the cache's own: nothing else writes its backing files (the array's lock
//! keeps other openers out), so it has no outside changes to look for and is never bypassed.
//! Its pages go to and from its backing files whole: the bytes of the last page past the
//! length are zeros in the frame (loads zero them, cuts zero them), and a device file may end
//! short of a page it never had written (a hole: it loads as zeros). The length is the
//! metadata log's, logged at sync once the data is durable (F2FS's fsync, seed 001 §3.4).

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use super::bounce::Bounce;
use super::held::HeldFd;
use super::page_size::PageSize;
use crate::error::{Error, ErrorKind, Result};
use crate::io::device::{self, BackingFile};
use crate::io::durable_len::DurableLen;
use crate::io::engine::sim::SimRouted;
use crate::io::engine::unbundled::Unbundled;
use crate::io::engine::{IoEngine, IoReq, PsyncEngine, UringEngine};
use crate::meta::array::{ArrayMeta, LenSync};

/// A shared file's backing (module docs).
pub(crate) enum Backing {
    /// A program's OS file.
    File(HeldFd),
    /// An array file.
    Array(ArrayFile),
}

/// An array file's backing files and its logged length.
pub(crate) struct ArrayFile {
    pub(crate) array: Arc<ArrayMeta>,
    /// Its id in the array's namespace.
    pub(crate) id: u64,
    /// Its backing file on each device, in device order.
    devices: Vec<BackingFile>,
    /// Its length as last logged durably (`io/durable_len.rs`).
    durable_len: DurableLen,
    /// The engine the backing files' I/O goes through, where not through the descriptors
    /// themselves (and io_uring): the array's per-device I/O threads (SAFS §3.1,
    /// `ArraySpec::io_threads`), and, where a device is a simulated SSD, the routing of its
    /// files' I/O to it (`io/engine/sim.rs`) over them (or one request after another).
    routed: Option<Arc<dyn IoEngine>>,
}

/// Where the numbers that stand for simulated devices in the GC table (`gc.rs`) begin: past
/// any `st_dev` (the kernel's is 32 bits).
const SIM_DEVICE_NUMBERS: u64 = 1 << 62;

/// The number that stands for `array`'s device `dev` in the GC table (`gc.rs`), whose
/// garbage collection write-backs to it time: the `st_dev` of its directory's file system,
/// or, for a simulated device, one of its own (simulated devices share a file system, tmpfs
/// as a rule).
pub(crate) fn device_number(array: &ArrayMeta, dev: usize) -> u64 {
    match array.sim(dev) {
        Some(sim) => SIM_DEVICE_NUMBERS + sim.id(),
        None => array.dir_dev(dev),
    }
}

/// Pages of a run that lie side by side on one device: `pages` (indices into the run) from
/// byte `at` of device `dev`'s backing file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceRun {
    pub dev: usize,
    pub at: u64,
    pub pages: std::ops::Range<usize>,
}

impl Backing {
    /// The program's OS file, if that is the backing.
    pub(crate) fn held(&self) -> Option<&HeldFd> {
        match self {
            Backing::File(h) => Some(h),
            Backing::Array(_) => None,
        }
    }

    /// The array file, if that is the backing.
    pub(crate) fn array(&self) -> Option<&ArrayFile> {
        match self {
            Backing::File(_) => None,
            Backing::Array(a) => Some(a),
        }
    }

    /// The program's OS file, if that is the backing, as a file.
    pub(crate) fn os(&self) -> Option<&std::fs::File> {
        self.held().map(|h| &**h)
    }

    /// The program's OS file, for what only an OS file has (a bypass, its metadata); an
    /// array file refuses `what` (`NotFound`: see below).
    pub(crate) fn os_file(&self, what: &str) -> Result<&std::fs::File> {
        match self {
            Backing::File(h) => Ok(h),
            // An array file is read past the cache only once it was removed while open
            // (`SharedFile::remove_cached`): its opens fail from then on, as the in-process
            // handles of a removed file did.
            Backing::Array(_) => {
                Err(Error::new(ErrorKind::NotFound, format!("{what}: the file was removed")))
            }
        }
    }

    /// Makes the file's written-back data durable (`fdatasync`; `fsync` with `all`); an array
    /// file logs its length, `len()`, as well (`ArrayFile::sync`).
    pub(crate) fn sync(&self, len: &dyn Fn() -> u64, all: bool) -> Result<()> {
        match self {
            Backing::File(h) => {
                let r = if all { h.sync_all() } else { h.sync_data() };
                r.map_err(|e| Error::io("flush a shared file", e))
            }
            Backing::Array(a) => a.sync(len, all),
        }
    }

    /// Sets the length of what backs the file to `len` (the file is cut or grown to it).
    pub(crate) fn set_len(&self, len: u64) -> std::io::Result<()> {
        match self {
            Backing::File(h) => h.set_len(len),
            Backing::Array(a) => a.set_len(len),
        }
    }
}

impl ArrayFile {
    /// Array file `id` of `array`, over its backing files `devices`, at length `len` as
    /// logged; its I/O through `engine`, the array's (the caller's, or its per-device I/O
    /// threads), if it has one.
    pub(crate) fn new(
        array: Arc<ArrayMeta>,
        id: u64,
        devices: Vec<BackingFile>,
        len: u64,
        engine: Option<Arc<dyn IoEngine>>,
        bundled: bool,
    ) -> ArrayFile {
        let routed = if devices.iter().any(|b| b.sim().is_some()) {
            let under = engine.unwrap_or_else(|| Arc::new(PsyncEngine));
            Some(Arc::new(SimRouted::new(under)) as Arc<dyn IoEngine>)
        } else {
            engine
        };
        // Without bundling (`SharedConfig::bundling`), its requests one at a time.
        let routed = routed.map(|r| match bundled {
            true => r,
            false => Arc::new(Unbundled::new(r)) as Arc<dyn IoEngine>,
        });
        ArrayFile { array, id, devices, durable_len: DurableLen::new(len), routed }
    }

    /// The GC table's number for the device page `page` lies on (`device_number`).
    pub(crate) fn device_number_of(&self, page: u64) -> u64 {
        device_number(&self.array, self.array.layout.locate(page).0)
    }

    /// The engine the backing files' I/O goes through where no ring is used: its routing
    /// (`routed`), else one syscall after another.
    fn io(&self) -> &dyn IoEngine {
        match &self.routed {
            Some(engine) => &**engine,
            None => &PsyncEngine,
        }
    }

    /// Its length as last logged (durably, but at open: the namespace's).
    pub(crate) fn logged_len(&self) -> u64 {
        self.durable_len.get()
    }

    /// Its backing file on device 0, which names it in the file table.
    pub(crate) fn first(&self) -> &std::fs::File {
        self.devices[0].file()
    }

    /// The size of its pages (the cache's, checked at the array's making).
    fn page_size(&self) -> PageSize {
        PageSize::new(self.array.layout.page_size() as usize).expect("a page size the cache took")
    }

    /// The run of `count` pages from page `first`, cut where the next page is not right after
    /// the last on the same device (at stripe-unit boundaries), or, unless `merge`, at every
    /// page.
    pub(crate) fn device_runs(&self, first: u64, count: usize, merge: bool) -> Vec<DeviceRun> {
        let (layout, page) = (&self.array.layout, self.page_size().bytes());
        let mut runs: Vec<DeviceRun> = Vec::new();
        for i in 0..count {
            let (dev, at) = layout.locate(first + i as u64);
            match runs.last_mut() {
                Some(r) if merge && r.dev == dev && r.at + ((i - r.pages.start) * page) as u64 == at => {
                    r.pages.end = i + 1
                }
                _ => runs.push(DeviceRun { dev, at, pages: i..i + 1 }),
            }
        }
        runs
    }

    /// The descriptor of device `dev`'s backing file.
    pub(crate) fn fd(&self, dev: usize) -> RawFd {
        self.devices[dev].file().as_raw_fd()
    }

    /// Whether its I/O goes through an engine of its own (per-device I/O threads, simulated
    /// devices that book time on it), not a ring or the descriptors: loads and write-backs
    /// go through [`Self::load`] and [`Self::write_devices`].
    pub(crate) fn routed(&self) -> bool {
        self.routed.is_some()
    }

    /// Whether device `dev`'s backing file is written past the kernel's page cache.
    pub(crate) fn is_direct(&self, dev: usize) -> bool {
        self.devices[dev].is_direct()
    }

    /// Whether a write to device `dev`'s backing file takes the device's time (`O_DIRECT`, or
    /// a simulated device), so that it says whether the device is collecting (`gc.rs`).
    pub(crate) fn reaches_device(&self, dev: usize) -> bool {
        self.devices[dev].is_direct() || self.devices[dev].sim().is_some()
    }

    /// Runs `writes` (device, byte offset, pages) through [`Self::io`] as one batch: each
    /// device's thread takes its own at once; on simulated devices, booked on every device
    /// before the last is waited for, as a batch of real writes overlaps.
    pub(crate) fn write_devices(&self, writes: &[(usize, u64, &[IoSlice<'_>])]) -> Vec<std::io::Result<()>> {
        let mut reqs: Vec<IoReq<'_, '_>> = writes
            .iter()
            .map(|&(dev, at, bufs)| IoReq::Write { file: &self.devices[dev], offset: at, bufs })
            .collect();
        self.io().run_batch(&mut reqs).into_iter().map(|r| r.map(|_| ())).collect()
    }

    /// Fills `pages` (whole frames) with pages `first..` of the file: a read per device run
    /// (per page without `merged`, `SharedConfig::run_merging`), all at once through `ring`
    /// if given (one after another without `bundled`, `SharedConfig::bundling`); a device
    /// file that ends before a page (a hole) gives zeros. The reads made.
    pub(crate) fn load(
        &self,
        first: u64,
        pages: &mut [&mut [u8]],
        ring: Option<&UringEngine>,
        (merged, bundled): (bool, bool),
    ) -> std::io::Result<usize> {
        if let [page] = pages {
            return self.load_one(first, page).map(|()| 1);
        }
        let runs = self.device_runs(first, pages.len(), merged);
        let ring = ring.filter(|_| bundled && self.routed.is_none() && runs.len() > 1);
        let results: Vec<std::io::Result<usize>> = if let Some(ring) = ring {
            self.read_bounced(&runs, pages, ring)
        } else {
            let mut bufs = run_slices(&runs, pages);
            if let Some(engine) = &self.routed {
                let mut reqs: Vec<IoReq<'_, '_>> = runs
                    .iter()
                    .zip(bufs.iter_mut())
                    .map(|(r, b)| IoReq::Read { file: &self.devices[r.dev], offset: r.at, bufs: &mut b[..] })
                    .collect();
                engine.run_batch(&mut reqs)
            } else {
                let mut reads: Vec<(RawFd, u64, &mut [IoSliceMut<'_>])> = runs
                    .iter()
                    .zip(bufs.iter_mut())
                    .map(|(r, b)| (self.fd(r.dev), r.at, &mut b[..]))
                    .collect();
                reads.iter_mut().map(|(fd, at, b)| crate::io::sys::preadv_all(*fd, *at, b)).collect()
            }
        };
        // Past a device file's end, a hole: zeros, counted on the pages themselves (a short
        // read advanced the slices it was given).
        let page = self.page_size().bytes();
        for (r, got) in runs.iter().zip(results) {
            let got = got?;
            for (i, p) in pages[r.pages.clone()].iter_mut().enumerate() {
                p[got.saturating_sub(i * page).min(page)..].fill(0);
            }
        }
        Ok(runs.len())
    }

    /// A one-page load, a random read's miss: one read of one device, with none of a run's
    /// lists (six allocations were a tenth of a miss's own time).
    fn load_one(&self, first: u64, page: &mut [u8]) -> std::io::Result<()> {
        let (dev, at) = self.array.layout.locate(first);
        let len = page.len();
        let got = {
            let mut buf = [IoSliceMut::new(&mut page[..])];
            match &self.routed {
                Some(engine) => {
                    let mut req = [IoReq::Read { file: &self.devices[dev], offset: at, bufs: &mut buf[..] }];
                    engine.run_batch(&mut req).pop().unwrap_or(Ok(0))?
                }
                None => crate::io::sys::preadv_all(self.fd(dev), at, &mut buf)?,
            }
        };
        // Past a device file's end, a hole: zeros.
        page[got.min(len)..].fill(0);
        Ok(())
    }

    /// `runs` (of `pages`) read by `ring`'s batch (which may end after a kill: `bounce.rs`)
    /// into a bounce, then copied into the frames: each run's bytes read, or its error.
    fn read_bounced(
        &self,
        runs: &[DeviceRun],
        pages: &mut [&mut [u8]],
        ring: &UringEngine,
    ) -> Vec<std::io::Result<usize>> {
        let mut bounce = Bounce::new(pages.len(), self.page_size());
        let results = {
            let mut into = bounce.pages_mut();
            let mut bufs = run_slices(runs, &mut into);
            let mut reads: Vec<(RawFd, u64, &mut [IoSliceMut<'_>])> =
                runs.iter().zip(bufs.iter_mut()).map(|(r, b)| (self.fd(r.dev), r.at, &mut b[..])).collect();
            ring.read_batch(&mut reads)
        };
        for (r, got) in runs.iter().zip(&results) {
            let Ok(got) = got else { continue };
            // The pages the read reached; the rest are zeroed by the caller.
            for p in r.pages.clone().take(got.div_ceil(bounce.page_len())) {
                pages[p].copy_from_slice(bounce.page_bytes(p));
            }
        }
        results
    }

    /// The writes of a run of whole frames `bufs` holding pages `first..` of the file: one
    /// per device run, its descriptor, offset and pages.
    pub(crate) fn writes<'a>(&self, first: u64, bufs: &[IoSlice<'a>]) -> Vec<(usize, u64, Vec<IoSlice<'a>>)> {
        let page = self.page_size().bytes() as u64;
        let mut out: Vec<(usize, u64, Vec<IoSlice<'a>>)> = Vec::new();
        // A device's stripe units of the run lie back to back on it: one write each device.
        for r in self.device_runs(first, bufs.len(), true) {
            let next =
                out.iter_mut().find(|(dev, at, b)| *dev == r.dev && at + b.len() as u64 * page == r.at);
            match next {
                Some((_, _, b)) => b.extend_from_slice(&bufs[r.pages]),
                None => out.push((r.dev, r.at, bufs[r.pages].to_vec())),
            }
        }
        out
    }

    /// Cuts the file's backing files to `len`: each device's to its stripe units' pages below
    /// it (growth changes none). The bytes past `len` in its last page are the cache's to
    /// zero: the page is written back whole (`SharedFile::cut_to`).
    pub(crate) fn set_len(&self, len: u64) -> std::io::Result<()> {
        let pages = self.page_size().pages_in(len);
        for (dev, b) in self.devices.iter().enumerate() {
            let want = self.array.layout.device_len(dev, pages);
            if b.file().metadata()?.len() > want {
                device::truncate(b, want).map_err(std::io::Error::other)?;
            }
        }
        Ok(())
    }

    /// Puts the backing files back to the logged length `len` at the file's first open since
    /// the array was (nothing caches it yet): what a crash left past it goes, the pages past
    /// it cut and the bytes past it in its last page zeroed on its device, so that growth
    /// shows zeros there.
    pub(crate) fn recover(&self, len: u64) -> std::io::Result<()> {
        self.set_len(len)?;
        let size = self.page_size();
        let from = size.in_page(len);
        if from == 0 {
            return Ok(());
        }
        let (dev, at) = self.array.layout.locate(size.page_of(len));
        let b = &self.devices[dev];
        if b.file().metadata()?.len() <= at {
            return Ok(()); // a hole: zeros already
        }
        // Page-aligned, as O_DIRECT wants.
        let mut bounce = Bounce::new(1, size);
        let mut pages = bounce.pages_mut();
        let page = &mut pages[0];
        let got = self.io().read_vectored(b, at, &mut [IoSliceMut::new(page)])?;
        page[from.min(got)..].fill(0);
        self.io().write_vectored(b, at, &[IoSlice::new(page)])
    }

    /// Whether device `dev`'s backing file may leave its flush to the metadata log's commit:
    /// written with `O_DIRECT` on the log's ext4 or XFS file system (`io/zero_window.rs`).
    fn may_defer(&self, dev: usize) -> bool {
        self.devices[dev].is_direct() && self.array.log_shares_device[dev]
    }

    /// Write-back wrote (or failed to write) bytes `start..end` of device `dev`'s backing file.
    pub(crate) fn written(&self, dev: usize, start: u64, end: u64) {
        self.devices[dev].zeros().after_write(start, end);
    }

    /// Sets space aside on every device for the file's bytes `from..to` (`io/reserve.rs`),
    /// so that a write that cannot be stored fails at once, not at its write-back; a
    /// simulated device decides itself (`SimDevice::reserve`).
    pub(crate) fn set_aside(&self, from: u64, to: u64) -> std::io::Result<()> {
        let layout = &self.array.layout;
        let page = layout.page_size();
        self.devices.iter().enumerate().try_for_each(|(dev, b)| {
            let (dev_from, dev_to) =
                (layout.device_len(dev, from.div_ceil(page)), layout.device_len(dev, to.div_ceil(page)));
            match b.sim() {
                Some(sim) => sim.reserve(dev_to),
                None => crate::io::reserve::set_aside(b.file(), dev_from, dev_to),
            }
        })
    }

    /// A sync found the file `len` bytes long: the devices whose backing files are being
    /// appended to and near the end of their windows of zeros, to extend ahead
    /// ([`Self::zero_ahead`]).
    pub(crate) fn appending(&self, len: u64) -> Vec<usize> {
        let pages = self.page_size().pages_in(len);
        (0..self.devices.len())
            .filter(|&dev| {
                self.may_defer(dev)
                    && self.devices[dev].zeros().note_sync(self.array.layout.device_len(dev, pages))
            })
            .collect()
    }

    /// Writes zeros ahead of device `dev`'s data for the file `len` bytes long, with the
    /// file's lock held and no range writer at work (nothing is written past the length
    /// meanwhile), so that appends land in blocks already allocated and inside the size: their
    /// syncs have no metadata to commit. Counts as a change, so the sync that follows
    /// `fdatasync`s the backing file.
    pub(crate) fn zero_ahead(&self, dev: usize, len: u64) {
        let data_end = self.array.layout.device_len(dev, self.page_size().pages_in(len));
        let b = &self.devices[dev];
        if b.zeros().near_end(data_end) {
            if let Err(e) = b.zeros().extend(b.file(), data_end) {
                log::warn!("zero-filling ahead of an array file's appends failed: {e}");
            }
        }
    }

    /// `fdatasync` of backing file `b` (`BackingFile::sync_covering`); a simulated device's
    /// flush (its backing file is only its medium).
    fn sync_device(&self, b: &BackingFile) -> Result<()> {
        b.sync_covering(|| self.io().sync_data(b))
            .map_err(|e| Error::io(format!("flush an array file's backing file on device {}", b.device()), e))
    }

    /// Makes what was written back durable, and the length `len()` (logged unless the file's
    /// latest record carries it: `ArrayMeta::len_to_sync`); with `all`, everything logged
    /// before too (F2FS's fsync, seed 001 §3.4): a backing file whose writes since its last `fdatasync`
    /// changed no metadata (all inside its window of zeros) and that may leave its flush to
    /// the log is not synced on its own when a length is logged: the log's commit flushes its
    /// device. An append + sync is then one data write, one record write and one flush.
    pub(crate) fn sync(&self, len: &dyn Fn() -> u64, all: bool) -> Result<()> {
        let meta = &self.array;
        // A hint: if no record is appended below, the deferred files are synced after all.
        let logs_len = self.durable_len.may_log(len());
        let mut deferred = Vec::new();
        for (dev, b) in self.devices.iter().enumerate() {
            if logs_len && self.may_defer(dev) && b.zeros().pending().is_none() {
                deferred.push(b);
                continue;
            }
            self.sync_device(b)?;
        }
        // The length is read again, under the namespace's lock: a sync that read an older
        // length cannot log it after a newer one. (Bytes a write made after this sync's
        // write-back may be past what is durable; a sync promises only those written before.)
        let (ticket, len) = match meta.len_to_sync(self.id, len) {
            LenSync::Appended(ticket, len) => (ticket, len),
            other => {
                // No record of ours: no commit that begins after our writes, so the deferred
                // files are synced on their own.
                for b in deferred {
                    self.sync_device(b)?;
                }
                match other {
                    LenSync::Pending(ticket, len) => {
                        meta.metalog.commit(if all { meta.metalog.last() } else { ticket })?;
                        meta.len_durable(self.id, &self.durable_len, ticket, len);
                    }
                    _ if all => meta.metalog.commit(meta.metalog.last())?,
                    _ => {}
                }
                meta.checkpoint_if_wanted();
                return Ok(());
            }
        };
        // A deferred backing file changed (a cut) since: its metadata must be durable before a
        // record of a length that covers the change is.
        for b in deferred.iter().filter(|b| b.zeros().pending().is_some()) {
            self.sync_device(b)?;
        }
        if let Err(e) = meta.metalog.commit(ticket) {
            // The record is not durable, and its commit was the deferred files' flush.
            for b in deferred {
                let _ = self.sync_device(b);
            }
            return Err(e);
        }
        meta.len_durable(self.id, &self.durable_len, ticket, len);
        meta.checkpoint_if_wanted();
        Ok(())
    }
}

/// `pages` cut into one vector of buffers per run of `runs` (which cover them in order), for a
/// vectored read each.
fn run_slices<'a>(runs: &[DeviceRun], pages: &'a mut [&mut [u8]]) -> Vec<Vec<IoSliceMut<'a>>> {
    let mut bufs = Vec::with_capacity(runs.len());
    let mut rest: &mut [&mut [u8]] = pages;
    let mut taken = 0;
    for r in runs {
        let (mine, after) = std::mem::take(&mut rest).split_at_mut(r.pages.end - taken);
        taken = r.pages.end;
        rest = after;
        bufs.push(mine.iter_mut().map(|p| IoSliceMut::new(p)).collect());
    }
    bufs
}
