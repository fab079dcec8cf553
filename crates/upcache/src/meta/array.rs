//! An open array's metadata, whichever engine caches its files: the device directories and
//! their layout, the namespace, the metadata log it is kept by, and the array's lock.
//!
//! Creating and opening check every directory's marker against the catalog, replay the log
//! over the catalog, and then checkpoint (a new, empty log; the catalog of its generation;
//! older logs deleted), so an open array's log holds only what changed since it was opened.

use std::collections::hash_map::RandomState;
use std::fs::{self, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::catalog::{ArrayLayout, Catalog, DeviceMarker, CATALOG_NAME, MARKER_NAME};
use super::metalog::{self, MetaLog, NewLog, Record, Ticket};
use super::namespace::{NameEntry, Namespace};
use crate::error::{Error, ErrorKind, Result};
use crate::io::device::sim::SimDevice;
use crate::io::device::BackingFile;
use crate::io::durable_len::DurableLen;
use crate::io::engine::IoEngine;
use crate::io::layout::{LayoutKind, StripeLayout};
use crate::sync::{self, AtomicBool, Mutex, Ordering};

const LOCK_NAME: &str = "upcache.lock";

/// What a sync of a file at some length must make durable for it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LenSync {
    /// Nothing: its latest record carries the length and is durable.
    Durable,
    /// Its latest record carries the length but may not be durable yet: another sync
    /// appended it, whose commit may have begun before this sync's writes.
    Pending(Ticket, u64),
    /// A record appended now: its commit begins after this sync's writes.
    Appended(Ticket, u64),
}

/// What an array is asked to be: its device directories (device 0 first), where its log goes
/// if not in the first, and its layout; and how its backing files are reached.
#[derive(Clone, Copy)]
pub struct ArraySpec<'a> {
    /// One directory per device, in device order.
    pub dirs: &'a [PathBuf],
    /// The metadata log's directory, if not the first device directory's.
    pub meta_dir: Option<&'a Path>,
    /// Bytes per page.
    pub page_size: usize,
    /// Bytes per stripe unit, a multiple of the page size.
    pub stripe_unit: u64,
    /// How stripe units are placed on devices.
    pub kind: LayoutKind,
    /// Devices that are simulated SSDs (`io/device/sim.rs`), by index: their backing files
    /// hold the device's data and their I/O goes through it. Empty: none.
    pub sims: &'a [(usize, Arc<SimDevice>)],
    /// Where a device's file system refuses `O_DIRECT`, open its backing files buffered
    /// (through the kernel's page cache) rather than fail (`Config::with_allow_buffered`).
    pub allow_buffered: bool,
    /// Who submits the backing files' I/O: the thread that needs it, or one thread per
    /// device (SAFS §3.1, `Config::with_io_threads`).
    pub io_threads: crate::io::engine::SubmitKind,
    /// The caller's engine for the backing files' I/O, in place of the cache's and of
    /// `io_threads` (`Config::with_io_engine`): to inject faults in tests, or to try another.
    pub engine: Option<&'a Arc<dyn IoEngine>>,
}

impl std::fmt::Debug for ArraySpec<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArraySpec")
            .field("dirs", &self.dirs)
            .field("meta_dir", &self.meta_dir)
            .field("page_size", &self.page_size)
            .field("stripe_unit", &self.stripe_unit)
            .field("kind", &self.kind)
            .field("sims", &self.sims.len())
            .field("allow_buffered", &self.allow_buffered)
            .field("io_threads", &self.io_threads)
            .field("engine", &self.engine.map(|e| e.name()))
            .finish()
    }
}

/// An open array's metadata (module docs). Its lock is held for its life.
pub(crate) struct ArrayMeta {
    pub(crate) dirs: Vec<PathBuf>,
    pub(crate) layout: StripeLayout,
    pub(crate) namespace: Mutex<Namespace>,
    /// Namespace changes since the last checkpoint (the catalog).
    pub(crate) metalog: MetaLog,
    /// Where the metadata log lives.
    pub(crate) meta_dir: PathBuf,
    /// By device: whether its directory is on the metadata directory's file system and that
    /// is ext4 or XFS (`device::fdatasync_flushes_device`), so that the log's `fdatasync`
    /// flushes the device's cache after the data written to its O_DIRECT backing files.
    pub(crate) log_shares_device: Vec<bool>,
    /// By device: the `st_dev` of its directory's file system.
    dir_devs: Vec<u64>,
    /// By device: the simulated SSD it is, if it is one (`ArraySpec::sims`).
    sims: Vec<Option<Arc<SimDevice>>>,
    /// Held by the one checkpoint running.
    checkpointing: Mutex<()>,
    /// A thread is checkpointing: the others go on with their work.
    checkpoint_running: AtomicBool,
    /// Holds an exclusive flock on the array.
    _lock: fs::File,
}

/// `spec.sims` by device; `InvalidConfig` for an index past the devices or given twice.
fn sims_by_device(spec: &ArraySpec<'_>) -> Result<Vec<Option<Arc<SimDevice>>>> {
    let mut by_device = vec![None; spec.dirs.len()];
    for (dev, sim) in spec.sims {
        match by_device.get_mut(*dev) {
            Some(slot @ None) => *slot = Some(sim.clone()),
            Some(Some(_)) => {
                return Err(Error::new(
                    ErrorKind::InvalidConfig,
                    format!("simulated device {dev} given twice"),
                ))
            }
            None => {
                return Err(Error::new(
                    ErrorKind::InvalidConfig,
                    format!("simulated device {dev} of an array of {} devices", spec.dirs.len()),
                ))
            }
        }
    }
    Ok(by_device)
}

fn random_id() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish()
}

fn lock_array(dir: &Path) -> Result<fs::File> {
    let path = dir.join(LOCK_NAME);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| Error::io(format!("open {}", path.display()), e))?;
    // A holder that just let go may not have yet: the last handle of an array closed on one
    // thread can be dropped a few milliseconds later on another of ours that held it a moment
    // (a background pass), and the kernel lets a lock go only when every reference to its
    // description is; an open right after a close retries that long before it says Busy.
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(100);
    let locked = loop {
        // SAFETY: flock on an fd we own; no memory is involved.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            break Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) || std::time::Instant::now() >= deadline {
            break Err(e);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    if let Err(e) = locked {
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(Error::with_source(
                ErrorKind::Busy,
                format!("the array in {} is already open", dir.display()),
                e,
            ));
        }
        return Err(Error::io(format!("lock {}", path.display()), e));
    }
    Ok(f)
}

impl ArrayMeta {
    /// Makes a new array in `spec`'s directories (created if missing). Fails with
    /// `AlreadyExists` if any directory already holds an array.
    pub(crate) fn create(spec: ArraySpec<'_>) -> Result<ArrayMeta> {
        let sims = sims_by_device(&spec)?;
        for dir in spec.dirs {
            fs::create_dir_all(dir).map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
            for name in [CATALOG_NAME, MARKER_NAME] {
                if dir.join(name).exists() {
                    return Err(Error::new(
                        ErrorKind::AlreadyExists,
                        format!(
                            "{} already holds an upcache array (or an interrupted create: remove \
                             its upcache.* files)",
                            dir.display()
                        ),
                    ));
                }
            }
        }
        let lock = lock_array(&spec.dirs[0])?;
        let meta_dir = match spec.meta_dir {
            Some(d) => {
                fs::create_dir_all(d).map_err(|e| Error::io(format!("create {}", d.display()), e))?;
                Some(fs::canonicalize(d).map_err(|e| Error::io(format!("open {}", d.display()), e))?)
            }
            None => None,
        };
        let layout = ArrayLayout {
            array_id: random_id(),
            devices: spec.dirs.len() as u32,
            page_size: spec.page_size as u32,
            stripe_unit: spec.stripe_unit,
            kind: spec.kind,
        };
        for (i, dir) in spec.dirs.iter().enumerate() {
            DeviceMarker { array_id: layout.array_id, index: i as u32, devices: layout.devices }
                .store(dir)?;
        }
        let meta_dir_name = match &meta_dir {
            Some(d) => Some(
                d.to_str()
                    .ok_or_else(|| {
                        Error::new(ErrorKind::InvalidConfig, format!("{} is not UTF-8", d.display()))
                    })?
                    .to_owned(),
            ),
            None => None,
        };
        let catalog =
            Catalog { layout, generation: 0, meta_dir: meta_dir_name, next_file_id: 1, files: Vec::new() };
        let meta_dir = meta_dir.unwrap_or_else(|| spec.dirs[0].clone());
        // `start` writes the catalog last: a crash before it leaves markers without a catalog,
        // which `open` refuses as not an array and `create` refuses as taken.
        ArrayMeta::start(spec, sims, Namespace::from_catalog(catalog), 0, meta_dir, lock)
    }

    /// Opens an existing array. Fails with `NotAnArray` if a directory is not part of an
    /// array (or is in the wrong position) and `LayoutMismatch` if the stored layout differs
    /// from `spec`'s.
    pub(crate) fn open(spec: ArraySpec<'_>) -> Result<ArrayMeta> {
        let sims = sims_by_device(&spec)?;
        let dir0 = &spec.dirs[0];
        if !dir0.is_dir() {
            return Err(Error::new(ErrorKind::NotAnArray, format!("{} is not a directory", dir0.display())));
        }
        // Locked before reading: a process closing the array meanwhile checkpoints, which
        // replaces the catalog and deletes the log it follows.
        let lock = lock_array(dir0)?;
        let catalog = Catalog::load(dir0)?;
        let l = catalog.layout;
        let want = (spec.dirs.len() as u32, spec.page_size as u32, spec.stripe_unit, spec.kind);
        if (l.devices, l.page_size, l.stripe_unit, l.kind) != want {
            return Err(Error::new(
                ErrorKind::LayoutMismatch,
                format!(
                    "array in {} has {} devices, page size {}, stripe unit {}, layout {}; the config \
                     asks for {} devices, page size {}, stripe unit {}, layout {}",
                    dir0.display(),
                    l.devices,
                    l.page_size,
                    l.stripe_unit,
                    l.kind.name(),
                    want.0,
                    want.1,
                    want.2,
                    want.3.name()
                ),
            ));
        }
        for (i, dir) in spec.dirs.iter().enumerate() {
            let m = DeviceMarker::load(dir)?;
            if m.array_id != l.array_id {
                return Err(Error::new(
                    ErrorKind::NotAnArray,
                    format!("{} belongs to another array", dir.display()),
                ));
            }
            if m.index != i as u32 || m.devices != l.devices {
                return Err(Error::new(
                    ErrorKind::LayoutMismatch,
                    format!(
                        "{} is device {} of {}, but is listed as device {i}",
                        dir.display(),
                        m.index,
                        m.devices
                    ),
                ));
            }
        }
        let meta_dir = metalog::resolve_dir(spec.meta_dir, catalog.meta_dir.as_deref(), dir0)?;
        let from = catalog.generation;
        let mut ns = Namespace::from_catalog(catalog);
        let top = metalog::replay(&meta_dir, l.array_id, from, |r| ns.apply(r))?;
        let known = ns.names.values().map(|e| e.id).collect();
        for dir in spec.dirs {
            crate::io::device::remove_orphans(dir, &known)?;
        }
        ArrayMeta::start(spec, sims, ns, top, meta_dir, lock)
    }

    /// Opens the array in `spec`'s directories, or makes a new one there if the first holds
    /// none (missing, or without an array's catalog). Errors as `open` and `create`.
    pub(crate) fn open_or_create(spec: ArraySpec<'_>) -> Result<ArrayMeta> {
        match ArrayMeta::open(spec) {
            Err(e) if e.kind() == ErrorKind::NotAnArray && !spec.dirs[0].join(CATALOG_NAME).exists() => {
                ArrayMeta::create(spec)
            }
            r => r,
        }
    }

    /// The array over namespace `ns`, replayed up to log generation `top`: first a
    /// checkpoint (a new log of generation `top + 1`, then the catalog of that generation,
    /// then older logs deleted), so that the log starts empty.
    fn start(
        spec: ArraySpec<'_>,
        sims: Vec<Option<Arc<SimDevice>>>,
        ns: Namespace,
        top: u64,
        meta_dir: PathBuf,
        lock: fs::File,
    ) -> Result<ArrayMeta> {
        let generation = top + 1;
        let array_id = ns.layout.array_id;
        let fs_of = |d: &Path| {
            use std::os::unix::fs::MetadataExt;
            fs::metadata(d).map(|m| m.dev()).map_err(|e| Error::io(format!("stat {}", d.display()), e))
        };
        let log_fs = fs_of(&meta_dir)?;
        let flushes = crate::io::device::fdatasync_flushes_device(&meta_dir);
        let dir_devs = spec.dirs.iter().map(|d| fs_of(d)).collect::<Result<Vec<_>>>()?;
        let log_shares_device = dir_devs.iter().map(|&f| flushes && f == log_fs).collect();
        let log = NewLog::create(&meta_dir, array_id, generation)?;
        ns.catalog(generation).store(&spec.dirs[0])?;
        metalog::remove_logs_before(&meta_dir, array_id, generation)?;
        Ok(ArrayMeta {
            dirs: spec.dirs.to_vec(),
            layout: StripeLayout::new(spec.page_size, spec.stripe_unit, spec.dirs.len(), spec.kind),
            namespace: Mutex::new(ns),
            metalog: MetaLog::new(log),
            meta_dir,
            log_shares_device,
            dir_devs,
            sims,
            checkpointing: Mutex::new(()),
            checkpoint_running: AtomicBool::new(false),
            _lock: lock,
        })
    }

    /// Creates file `name` in `ns` (the namespace locked): `AlreadyExists` if the name is
    /// taken; else a new id, its backing files opened (and created) by `open` and emptied (a
    /// crash after an earlier create with the same id may have left some), and the creation
    /// logged and committed. On failure the namespace is as before. The id and backing files.
    pub(crate) fn create_file(
        &self,
        ns: &mut Namespace,
        name: &str,
        open: impl FnOnce(u64) -> Result<Vec<BackingFile>>,
    ) -> Result<(u64, Vec<BackingFile>)> {
        if ns.names.contains_key(name) {
            return Err(Error::new(ErrorKind::AlreadyExists, format!("file {name:?} already exists")));
        }
        let id = ns.next_file_id;
        let backing = open(id)?;
        for b in &backing {
            crate::io::device::truncate(b, 0)?;
        }
        let created = Record::Create { id, name: name.to_owned() };
        ns.apply(&created);
        let ticket = self.metalog.append(&created);
        self.metalog
            .commit_or_abandon(ticket)
            .inspect_err(|_| ns.apply(&Record::Remove { id, name: name.to_owned() }))?;
        Ok((id, backing))
    }

    /// The simulated SSD device `dev` is, if it is one.
    pub(crate) fn sim(&self, dev: usize) -> Option<&Arc<SimDevice>> {
        self.sims[dev].as_ref()
    }

    /// The `st_dev` of device `dev`'s directory, where its backing files are.
    pub(crate) fn dir_dev(&self, dev: usize) -> u64 {
        self.dir_devs[dev]
    }

    /// Deletes file `id`'s backing files (its removal logged): one that cannot be is left
    /// behind, with a warning (the next open removes orphans).
    pub(crate) fn delete_backing_files(&self, id: u64) {
        for dir in &self.dirs {
            let p = crate::io::device::backing_path(dir, id);
            if let Err(err) = fs::remove_file(&p) {
                if err.kind() != std::io::ErrorKind::NotFound {
                    log::warn!("removing {}: {err}", p.display());
                }
            }
        }
    }

    /// What a sync of file `id` must make durable for its length, read by `len` under the
    /// namespace's lock so that one file's records are logged in the order of the lengths
    /// they carry: nothing, its latest record (which carries the length), or a record appended
    /// now (`io/durable_len.rs`). A file removed has nothing to log.
    pub(crate) fn len_to_sync(&self, id: u64, len: impl FnOnce() -> u64) -> LenSync {
        let mut ns = sync::lock(&self.namespace);
        let len = len();
        match ns.latest_len(id) {
            None => return LenSync::Durable,
            Some((logged, seq)) if logged == len => {
                return match seq == 0 || self.metalog.is_durable(seq) {
                    true => LenSync::Durable,
                    false => LenSync::Pending(Ticket::through(seq), len),
                };
            }
            Some(_) => {}
        }
        let r = Record::SetLen { id, len };
        ns.apply(&r);
        let ticket = self.metalog.append(&r);
        ns.set_record(id, ticket.seq());
        LenSync::Appended(ticket, len)
    }

    /// The record `ticket` of file `id`'s length `len` (from `len_to_sync`) is durable:
    /// `durable` takes the length, unless a later record of the file was appended meanwhile
    /// (a sync storing its length late could make a newer, unlogged length look durable).
    pub(crate) fn len_durable(&self, id: u64, durable: &DurableLen, ticket: Ticket, len: u64) {
        let ns = sync::lock(&self.namespace);
        if ns.latest_len(id).is_some_and(|(_, seq)| seq == ticket.seq()) {
            durable.set(len);
        }
    }

    /// Logs the removal of file `name` (entry `e` of `ns`, the namespace locked) and commits
    /// it; on failure the namespace is as before.
    pub(crate) fn commit_remove(&self, ns: &mut Namespace, name: &str, e: NameEntry) -> Result<()> {
        let removed = Record::Remove { id: e.id, name: name.to_owned() };
        ns.apply(&removed);
        let ticket = self.metalog.append(&removed);
        self.metalog.commit_or_abandon(ticket).inspect_err(|_| ns.restore(name, e))
    }

    /// A checkpoint (module docs of `meta/metalog.rs`): a new log, the namespace as of the
    /// switch to it as the catalog, older logs deleted.
    pub(crate) fn checkpoint(&self) -> Result<()> {
        let _one = sync::lock(&self.checkpointing);
        let array_id = sync::lock(&self.namespace).layout.array_id;
        let generation = self.metalog.generation() + 1;
        // Made durable before any lock: syncs wait only for the switch below.
        let next = NewLog::create(&self.meta_dir, array_id, generation)?;
        let catalog = {
            let ns = sync::lock(&self.namespace);
            self.metalog.switch_to(next)?;
            ns.catalog(generation)
        };
        catalog.store(&self.dirs[0])?;
        metalog::remove_logs_before(&self.meta_dir, array_id, generation)
    }

    /// Checkpoints if the log asked for it and no other thread is checkpointing; errors are
    /// logged (the log keeps growing).
    pub(crate) fn checkpoint_if_wanted(&self) {
        if self.metalog.wants_checkpoint() && !self.checkpoint_running.swap(true, Ordering::Acquire) {
            // Checked again: a checkpoint may have ended between the check and the swap.
            if self.metalog.wants_checkpoint() {
                if let Err(e) = self.checkpoint() {
                    log::warn!("metadata checkpoint failed, the log keeps growing: {e}");
                }
            }
            // Release: pairs with the Acquire above.
            self.checkpoint_running.store(false, Ordering::Release);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// File `name`'s length as the disk has it: the catalog, then the logs replayed over it
    /// (what an open after a crash would find).
    fn durable_len(meta: &ArrayMeta, name: &str) -> u64 {
        let catalog = Catalog::load(&meta.dirs[0]).unwrap();
        let (array_id, from) = (catalog.layout.array_id, catalog.generation);
        let mut ns = Namespace::from_catalog(catalog);
        metalog::replay(&meta.meta_dir, array_id, from, |r| ns.apply(r)).unwrap();
        ns.entry(name).unwrap().len
    }

    /// A sync compares the length with the file's latest record, not the last durable one: a
    /// record of another length still pending (a truncate's, whose sync has not committed
    /// yet) would be replayed after the durable one. A sync at the durable length then logs
    /// it again, and a sync at the pending record's length commits that record.
    #[test]
    fn a_sync_logs_its_length_over_a_pending_record_of_another() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = [dir.path().join("d0")];
        let spec = ArraySpec {
            dirs: &dirs,
            meta_dir: None,
            page_size: 4096,
            stripe_unit: 4096,
            kind: LayoutKind::Stripe,
            sims: &[],
            allow_buffered: false,
            io_threads: crate::io::engine::SubmitKind::Caller,
            engine: None,
        };
        let meta = ArrayMeta::create(spec).unwrap();
        let open = |id| Ok(vec![crate::io::device::open_backing(&dirs[0], 0, id, true, true, None)?]);
        let mut ns = sync::lock(&meta.namespace);
        let (id, _backing) = meta.create_file(&mut ns, "f", open).unwrap();
        let durable = DurableLen::new(ns.entry("f").unwrap().len);
        drop(ns);
        assert!(matches!(meta.len_to_sync(id, || 0), LenSync::Durable));

        // A sync at 8192, committed.
        let LenSync::Appended(t, len) = meta.len_to_sync(id, || 8192) else { panic!("8192 is new") };
        meta.metalog.commit(t).unwrap();
        meta.len_durable(id, &durable, t, len);
        assert_eq!((durable_len(&meta, "f"), durable.get()), (8192, 8192));
        assert!(matches!(meta.len_to_sync(id, || 8192), LenSync::Durable));

        // A truncate to 4096 whose sync has appended its record and not committed it.
        let LenSync::Appended(cut, _) = meta.len_to_sync(id, || 4096) else { panic!("4096 is new") };
        // Another sync at that length commits that record, and nothing else would.
        let LenSync::Pending(t, len) = meta.len_to_sync(id, || 4096) else { panic!("pending") };
        assert_eq!((t.seq(), len), (cut.seq(), 4096));
        meta.metalog.commit(t).unwrap();
        assert_eq!(durable_len(&meta, "f"), 4096);
        meta.len_durable(id, &durable, t, len);
        assert!(matches!(meta.len_to_sync(id, || 4096), LenSync::Durable));

        // Extended to 8192 again and a record appended, not committed; then cut back to 4096:
        // its durable length, but not its latest record's.
        let LenSync::Appended(_, _) = meta.len_to_sync(id, || 8192) else { panic!("8192 again") };
        let LenSync::Appended(t, len) = meta.len_to_sync(id, || 4096) else {
            panic!("a sync at the durable length with a pending record of another logs it again")
        };
        meta.metalog.commit(t).unwrap();
        meta.len_durable(id, &durable, t, len);
        assert_eq!(durable_len(&meta, "f"), 4096);
    }
}
