//! The cache: an array of devices, a frame table, and the files on top.
//!
//! [`Cache`] is the user's handle; [`CacheInner`] is shared by the handle, every [`File`],
//! and the flusher threads. Page access (hit, miss, eviction) is in [`page`].

pub(crate) mod async_load;
pub(crate) mod background;
pub(crate) mod batch;
pub(crate) mod page;
pub(crate) mod placement;
mod plain;
pub(crate) mod readahead;
pub(crate) mod writeback;

use std::collections::HashMap;

use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::file::FileInner;
use crate::frame::FrameTable;
use crate::io::device::gc_watch::GcWatch;
use crate::io::device::{self, BackingFile};
use crate::io::engine::IoEngine;
use crate::io::layout::StripeLayout;
use crate::meta::array::{ArrayMeta, LenSync};
use crate::meta::catalog::sync_dir;
use crate::metrics::{Metrics, Stats};
use crate::sync::{self, Arc, AtomicU64, Ordering, RwLock};
use placement::Placement;
use readahead::Inbox;
use writeback::Writeback;

/// What a sync of one file makes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SyncKind {
    /// Its data and length (`File::sync_data`).
    Data,
    /// Its data and length, and every namespace change logged so far, even if its length is
    /// unchanged (`File::sync_all`).
    All,
}

/// Who commits the length record of a file a sync wrote back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LenLog {
    /// The sync itself, as its kind says.
    Now(SyncKind),
    /// Its caller, with other files' lengths in one commit (`sync_everything`).
    ByCaller,
}

/// State shared by the cache handle, files and flusher threads.
pub(crate) struct CacheInner {
    pub(crate) config: Config,
    pub(crate) layout: StripeLayout,
    /// A std Arc even under loom: engines are outside the concurrency model. Declared before
    /// `frames` so that it drops first: rings that registered the arena close before it is
    /// unmapped.
    pub(crate) engine: std::sync::Arc<dyn IoEngine>,
    /// Each device's garbage collection, as its write-backs show it (the GC-aware rule's).
    pub(crate) gc: std::sync::Arc<GcWatch>,
    pub(crate) frames: FrameTable,
    /// Where a missing page gets its frame, and where frames come back to.
    pub(crate) placement: Box<dyn Placement>,
    /// Files opened since the cache started, by id. Held briefly; never while waiting.
    pub(crate) files: RwLock<HashMap<u64, Arc<FileInner>>>,
    /// The array: its namespace, metadata log and lock.
    pub(crate) array: ArrayMeta,
    /// OS files cached by path (`Cache::open_path`), by (device, inode).
    pub(crate) plain_files: sync::Mutex<HashMap<(u64, u64), Arc<FileInner>>>,
    /// The next plain file's id, past every catalog id (`plain::PLAIN_ID`).
    pub(crate) next_plain_id: crate::sync::AtomicU64,
    pub(crate) writeback: Writeback,
    /// Panics of the background threads, for the next sync to report.
    pub(crate) background: background::BackgroundFailures,
    pub(crate) metrics: Metrics,
    /// Windows for the readahead loader.
    pub(crate) readahead: Inbox,
    /// What one read request may carry on every device (`io::device::request_limits`),
    /// pages at most `batch::MAX_RUN_PAGES`.
    pub(crate) limits: device::RequestLimits,
    /// Frames side by side in each aligned block of this many bytes make one memory segment
    /// (`batch::runs`): the arena's contiguous block, at most a device's segment size.
    pub(crate) segment_block: usize,
}

impl CacheInner {
    /// The cache core over `array` (just opened and checkpointed): frames, allocator, policy,
    /// engine and write-back accounting, with no thread started.
    pub(crate) fn new(config: Config, array: ArrayMeta) -> Result<CacheInner> {
        let frames = FrameTable::new(config.frame_count(), config.page_size)?;
        if config.prefault {
            frames.prefault().map_err(|e| {
                Error::with_source(
                    crate::error::ErrorKind::InvalidConfig,
                    "cannot make the frame arena resident (prefault)",
                    e,
                )
            })?;
        }
        let layout = array.layout;
        let gc = std::sync::Arc::new(GcWatch::new(config.device_dirs.len()));
        let placement = placement::build(&config, frames.len(), gc_probe(&config, layout, &gc));
        // A resizable cache gives frame memory back with MADV_DONTNEED, which would detach
        // registered buffers from the arena: it does not register them.
        let registrable = (!placement.resizable()).then(|| frames.region());
        let mut engine = config
            .engine
            .clone()
            .unwrap_or_else(|| config.io.build(registrable, config.device_dirs.len(), config.submit));
        if !config.sim_devices.is_empty() {
            engine = std::sync::Arc::new(crate::io::engine::sim::SimRouted::new(engine));
        }
        if !config.bundling {
            engine = std::sync::Arc::new(crate::io::engine::unbundled::Unbundled::new(engine));
        }
        let mut limits = device::request_limits(&config.device_dirs, config.page_size, batch::MAX_RUN_PAGES);
        if !config.run_merging {
            limits.pages = 1;
        }
        let writeback = Writeback::new(&config, frames.len(), limits.pages);
        // A resizable cache splits huge pages as it gives frames back: count no joins there.
        let contiguous = if placement.resizable() { config.page_size } else { frames.contiguous_bytes() };
        // The largest power of two within the device's segment size.
        let segment_limit = limits.segment_bytes.checked_ilog2().map_or(1, |l| 1 << l);
        let segment_block = contiguous.min(segment_limit).max(config.page_size);
        Ok(CacheInner {
            layout,
            placement,
            frames,
            engine,
            gc,
            files: RwLock::new(HashMap::new()),
            array,
            plain_files: sync::Mutex::new(HashMap::new()),
            next_plain_id: crate::sync::AtomicU64::new(plain::PLAIN_ID),
            writeback,
            background: background::BackgroundFailures::default(),
            metrics: Metrics::new(config.device_dirs.len()),
            readahead: Inbox::default(),
            limits,
            segment_block,
            config,
        })
    }

    /// Takes a file out of the cache: drops its pages (dirty ones too), gives its free-frame
    /// cache back to the pool and removes it from the open-files map. The caller holds the
    /// whole file exclusive in its range lock.
    pub(crate) fn forget_file(&self, file: &FileInner) {
        self.drop_pages_from(file, 0);
        self.placement.file_closed(file);
        sync::write(&self.files).remove(&file.id);
    }

    pub(crate) fn new_index(&self, file: u64) -> Box<dyn crate::index::PageIndex> {
        self.placement.new_index(file)
    }

    pub(crate) fn open_backing(&self, id: u64, create: bool) -> Result<Vec<BackingFile>> {
        let dirs = &self.config.device_dirs;
        let mut out = Vec::with_capacity(dirs.len());
        for (i, dir) in dirs.iter().enumerate() {
            out.push(device::open_backing(
                dir,
                i,
                id,
                create,
                self.config.allow_buffered,
                self.config.sim_device(i),
            )?);
        }
        Ok(out)
    }

    /// The open file with id `id`, if any.
    pub(crate) fn file_by_id(&self, id: u64) -> Option<Arc<FileInner>> {
        sync::read(&self.files).get(&id).cloned()
    }

    /// Re-establishes the zero invariant on a file opened for the first time since start: a
    /// crash may have left written-back pages past its recorded length.
    pub(crate) fn recover_tail(&self, file: &FileInner) -> Result<()> {
        let ps = self.config.page_size as u64;
        let len = file.len.load(Ordering::Relaxed); // Relaxed: the file is not shared yet.
        let pages = len.div_ceil(ps);
        for b in &file.backing {
            let want = file.layout.device_len(b.device(), pages);
            let have = b.file().metadata().map_err(|e| Error::io("stat backing file", e))?.len();
            if have > want {
                device::truncate(b, want)?;
            }
        }
        if !len.is_multiple_of(ps) {
            // Zero the tail of the last page through the cache; it is written back as usual.
            let page = len / ps;
            let lp = self.page_for_write(file, page, page::Fill::Read, page::Lookup::Index)?;
            let tail = (len % ps) as usize;
            // SAFETY: we hold the frame LOCKED, so no one else writes it, and readers of this
            // file cannot exist yet (the file is not published).
            let bytes = unsafe { std::slice::from_raw_parts(lp.ptr().add(tail), ps as usize - tail) };
            if bytes.iter().any(|&b| b != 0) {
                // SAFETY: as above; the range is inside the frame.
                unsafe { std::ptr::write_bytes(lp.ptr().add(tail), 0, ps as usize - tail) };
                lp.commit(page::Commit::Dirty);
            } else {
                lp.commit(page::Commit::AsBefore);
            }
        }
        Ok(())
    }

    /// Logs the file's length unless its latest record carries it (`ArrayMeta::len_to_sync`),
    /// and makes the record that does durable (`SyncKind::All`: also every record appended before, so that a create
    /// or a remove made by another thread is durable too). Only this file's length is written,
    /// never the whole catalog (seed 001 §3.3).
    /// Returns whether it committed a length record of its own (whose flush therefore began
    /// after the call did).
    /// `before_commit` runs once the record's length is chosen and before it commits: what
    /// the record promises must be durable by then.
    pub(crate) fn persist_len(
        &self,
        file: &FileInner,
        kind: SyncKind,
        before_commit: impl FnOnce() -> Result<()>,
    ) -> Result<bool> {
        let all = || match kind {
            SyncKind::All => self.array.metalog.commit(self.array.metalog.last()),
            SyncKind::Data => Ok(()),
        };
        // Outside the namespace lock: syncs of other files join these writes.
        let own = match self.len_to_sync(file) {
            LenSync::Appended(ticket, len) => {
                before_commit()?;
                self.array.metalog.commit(ticket)?;
                self.array.len_durable(file.id, &file.durable_len, ticket, len);
                true
            }
            LenSync::Pending(ticket, len) => {
                before_commit()?;
                match kind {
                    SyncKind::All => all()?,
                    SyncKind::Data => self.array.metalog.commit(ticket)?,
                }
                self.array.len_durable(file.id, &file.durable_len, ticket, len);
                false
            }
            LenSync::Durable => {
                all()?;
                false
            }
        };
        self.kick_checkpoint_if_wanted();
        Ok(own)
    }

    /// What a sync of the file must make durable for its length (`ArrayMeta::len_to_sync`).
    fn len_to_sync(&self, file: &FileInner) -> LenSync {
        if file.plain {
            return LenSync::Durable; // its length is the OS file's, set by `sync_plain`
        }
        // Acquire: see every write that extended it.
        self.array.len_to_sync(file.id, || file.len.load(Ordering::Acquire))
    }

    fn kick_checkpoint_if_wanted(&self) {
        if self.array.metalog.wants_checkpoint() {
            self.writeback.kick_flushers();
        }
    }

    /// `File::sync_data` (`SyncKind::Data`) and `File::sync_all` (`SyncKind::All`): the
    /// file's dirty pages written back, its backing files synced, its length logged.
    ///
    /// Seed 001 §3.4 in user space: a backing file whose writes since its last `fdatasync`
    /// all landed in its window of zeros (`io/zero_window.rs`) has no metadata to commit, only
    /// a device cache to flush. If this sync logs a length and the log is on that device,
    /// the log's commit is that flush (it starts after these writes ended), so the backing
    /// file is not synced on its own: an append + sync is one data write, one record write
    /// and one flush. A backing file that needs a real `fdatasync` and is being appended to
    /// gets zeros written ahead first, so that the next appends do not.
    /// Write-back errors are reported as to the open description whose errors `seen` counts
    /// (`FileInner::unseen_error`).
    pub(crate) fn sync_file(&self, file: &FileInner, kind: SyncKind, seen: &AtomicU64) -> Result<()> {
        self.sync_file_then(file, LenLog::Now(kind), seen)
    }

    /// As `sync_file`, with the length logged as `log_len` says.
    fn sync_file_then(&self, file: &FileInner, log_len: LenLog, seen: &AtomicU64) -> Result<()> {
        if file.plain {
            let kind = match log_len {
                LenLog::Now(kind) => kind,
                LenLog::ByCaller => SyncKind::Data,
            };
            return self.sync_plain(file, kind, seen);
        }
        let mut first = self.flush_file_as(file, seen).err();
        // A hint: if no record of ours is appended below (`persist_len`), the deferred backing
        // files are synced after all.
        let logs_len =
            log_len != LenLog::ByCaller && file.durable_len.may_log(file.len.load(Ordering::Acquire));
        let mut deferred = Vec::new();
        for b in &file.backing {
            // Only such backing files can ever let the log's flush stand in for theirs, so
            // only they are worth zero-filling ahead.
            let may_defer = b.is_direct() && self.array.log_shares_device[b.device()];
            if first.is_none() && logs_len && may_defer && b.zeros().pending().is_none() {
                deferred.push(b);
                continue;
            }
            if may_defer {
                if let Err(e) = self.extend_zeros_if_appending(file, b) {
                    log::warn!("zero-filling ahead of appends to {:?} failed: {e}", file.name);
                }
            }
            if let Err(e) = self.sync_backing(file, b, seen) {
                first.get_or_insert(e);
            }
        }
        // A backing file changed (a truncate) after it was deferred, and before the length
        // was read for the record, which then covers that change: its metadata must be
        // durable before the record is, so it is synced after all. (SeqCst in `pending`: a
        // truncate counts its change before it publishes the length that the record read.)
        let recheck = || {
            deferred
                .iter()
                .filter(|b| b.zeros().pending().is_some())
                .try_for_each(|b| self.sync_backing(file, b, seen))
        };
        // Not if the data failed: a logged length would promise bytes that may be missing.
        let logged = match (&first, log_len) {
            (Some(_), _) | (None, LenLog::ByCaller) => false,
            (None, LenLog::Now(kind)) => match self.persist_len(file, kind, recheck) {
                Ok(logged) => logged,
                Err(e) => {
                    first = Some(e);
                    false
                }
            },
        };
        if !logged {
            for b in deferred {
                if let Err(e) = self.sync_backing(file, b, seen) {
                    first.get_or_insert(e);
                }
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// `flush_file`, then the write-back error the description whose count is `seen` has not
    /// reported yet: the flush's own error if it failed (which it reports now, not again).
    pub(crate) fn flush_file_as(&self, file: &FileInner, seen: &AtomicU64) -> Result<()> {
        let flushed = self.flush_file(file);
        let unseen = file.unseen_error(seen);
        flushed?;
        unseen.map_or(Ok(()), Err)
    }

    /// fdatasync of one backing file, recording what it covered.
    /// A failure is recorded on the file for its other open descriptions (the kernel told
    /// only this one) and counted as reported to this one (`seen`): `FileInner::failed_flush`.
    fn sync_backing(&self, file: &FileInner, b: &BackingFile, seen: &AtomicU64) -> Result<()> {
        b.sync_covering(|| self.engine.sync_data(b)).map_err(|e| {
            file.failed_flush(
                Error::io(format!("sync file {:?} on device {}", file.name, b.device()), e),
                seen,
            )
        })
    }

    /// Writes zeros ahead of the file's data on `b`'s device if the file is being appended
    /// to and its data ends near or past its window of zeros, holding the file's range from
    /// its length on so that nothing is written there meanwhile (if that range is free now:
    /// a sync never waits for it). Its caller syncs `b` next.
    fn extend_zeros_if_appending(&self, file: &FileInner, b: &BackingFile) -> Result<()> {
        let ps = self.config.page_size as u64;
        // Acquire: see the writes that extended it.
        let len = file.len.load(Ordering::Acquire);
        let data_end = file.layout.device_len(b.device(), len.div_ceil(ps));
        if !b.zeros().note_sync(data_end) {
            return Ok(());
        }
        let Some(_tail) = file.range.try_write(len, u64::MAX) else { return Ok(()) };
        // Checked again under the range: it may have grown, or another sync extended.
        if file.len.load(Ordering::Acquire) != len || !b.zeros().near_end(data_end) {
            return Ok(());
        }
        b.zeros().extend(b.file(), data_end).map_err(|e| Error::io("zero-fill a backing file ahead", e))
    }

    /// `Unsupported` for the pin and queue APIs (`what`) with the range lock off: a pin held
    /// while its thread writes elsewhere in the file would wait for ever for the file's one
    /// writer, which waits for the pin (`Config::with_range_lock`).
    pub(crate) fn check_range_lock(&self, what: &str) -> Result<()> {
        if self.config.range_lock {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "{what} needs the range lock, which this cache has off (Config::with_range_lock): a pin \
                 held while its thread writes the file could wait for ever for a writer waiting for it"
            ),
        ))
    }

    pub(crate) fn sync_everything(&self) -> Result<()> {
        let files: Vec<_> = sync::read(&self.files).values().cloned().collect();
        let mut first = None;
        // Data first; then the lengths of the files whose data is durable, in one commit
        // (with everything else logged: creates and removes too).
        let mut lengths = Vec::new();
        for f in files {
            if f.removed.load(Ordering::Acquire) {
                continue;
            }
            // As a description opened now: errors nobody has reported yet.
            match self.sync_file_then(&f, LenLog::ByCaller, &AtomicU64::new(f.errors_sample())) {
                Ok(()) => match self.len_to_sync(&f) {
                    LenSync::Appended(t, len) | LenSync::Pending(t, len) => lengths.push((f, t, len)),
                    LenSync::Durable => {}
                },
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        match self.array.metalog.commit(self.array.metalog.last()) {
            Ok(()) => {
                for (f, t, len) in lengths {
                    self.array.len_durable(f.id, &f.durable_len, t, len);
                }
            }
            Err(e) => {
                first.get_or_insert(e);
            }
        }
        for dir in self.config.device_dirs.iter().chain([&self.array.meta_dir]) {
            if let Err(e) = sync_dir(dir) {
                first.get_or_insert(e);
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    pub(crate) fn stats(&self) -> Stats {
        // Relaxed: a gauge for reports.
        let dirty = self.writeback.dirty.load(Ordering::Relaxed) as u64;
        let index: usize = sync::read(&self.files).values().map(|f| f.index.memory_bytes()).sum::<usize>()
            + self.placement.memory_bytes();
        let gauges = [self.frames.len() as u64, self.frames.metadata_bytes() as u64, index as u64];
        self.metrics.snapshot(dirty, gauges)
    }

    pub(crate) fn latencies(&self) -> crate::metrics::latency::Latencies {
        self.metrics.latency.snapshot()
    }
}

impl Drop for CacheInner {
    fn drop(&mut self) {
        // Handles that outlived the Cache may have dirtied pages after it was dropped.
        if self.writeback.dirty.load(Ordering::Acquire) > 0 {
            if let Err(e) = self.sync_everything() {
                log::error!("final write-back failed: {e}");
            }
        }
    }
}

/// Whether the device holding a page is collecting garbage, for the GC-aware rule: inferred
/// from the device's write-back latency (`io/device/gc_watch.rs`), for simulated devices as
/// for real ones (a simulated device's own flag is the tests' oracle, never the policy's).
/// None unless the rule asks.
fn gc_probe(
    config: &Config,
    layout: StripeLayout,
    gc: &std::sync::Arc<GcWatch>,
) -> Option<crate::policy::GcProbe> {
    if config.clean_first != crate::policy::CleanFirst::WhileGc {
        return None;
    }
    let gc = gc.clone();
    Some(std::sync::Arc::new(move |key: crate::frame::PageKey| {
        // Plain files (`Cache::open_path`) are OS files on no device of the array.
        key.file < plain::PLAIN_ID && gc.collecting(layout.locate(key.page).0)
    }))
}
