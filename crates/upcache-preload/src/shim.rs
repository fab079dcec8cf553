//! The shim's state: its settings, its cache (made when the first file under the prefix
//! opens), its descriptor table and its cached files; and what fork and exit do to them.
//!
//! One `Shim` per process image, leaked (libc calls may come from any thread at any time,
//! exit handlers included, so it is never freed). A forked child leaks its parent's too:
//! the parent's cache threads do not exist in the child, so the child never touches it, and
//! makes its own on its first open under the prefix.

use crate::backend::File;
use crate::errno;
use crate::settings::Settings;
use crate::signals::Rescue;
use crate::table::FdTable;
use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use upcache::shared::SharedCache;

/// A cached OS file, shared by every descriptor of it; the last one to go closes it.
pub(crate) struct Shared {
    file: Option<File>,
    /// The file opened again for writing: it was first cached for read-only descriptors, and
    /// then a writable one came (`Shim::shared`). Serves every descriptor from then on.
    writer: std::sync::OnceLock<File>,
    key: (u64, u64),
    shim: &'static Shim,
    /// Handed to libc (`Shim::demote`): not to be kept, copied to a new descriptor or shared
    /// with a new open.
    pub demoted: AtomicBool,
}

impl Shared {
    fn new(file: File, key: (u64, u64), shim: &'static Shim) -> Shared {
        Shared {
            file: Some(file),
            writer: std::sync::OnceLock::new(),
            key,
            shim,
            demoted: AtomicBool::new(false),
        }
    }

    pub fn file(&self) -> &File {
        match self.writer.get() {
            Some(w) => w,
            None => self.file.as_ref().expect("taken only on drop or last close"),
        }
    }

    /// Makes the file writable for a writable descriptor `fd` of it, if it is not: opened
    /// again for writing.
    fn make_writable(&self, fd: i32) -> upcache::Result<()> {
        self.make_writable_at(&crate::os::fd_path(fd))
    }

    /// As `make_writable`, opening `path`, which must still be the file (a path may have
    /// been renamed over since: then the file is not made writable, and the caller demotes
    /// it, since a writer of it will reach it without the cache).
    pub fn make_writable_at(&self, path: &Path) -> upcache::Result<()> {
        if self.file().writable() {
            return Ok(());
        }
        let writer = crate::backend::open(&self.shim.cache, path, self.file().name(), true)?;
        let same = writer.os_metadata().is_ok_and(|md| (md.dev(), md.ino()) == self.key);
        if !same || !writer.writable() {
            let _ = crate::backend::close(writer);
            return Err(upcache::Error::new(
                upcache::ErrorKind::PermissionDenied,
                format!("{}: cannot be opened again for writing", self.file().name()),
            ));
        }
        if let Err(extra) = self.writer.set(writer) {
            let _ = crate::backend::close(extra); // another thread's came first
        }
        Ok(())
    }

    /// The file's (device, inode).
    pub fn key(&self) -> (u64, u64) {
        self.key
    }

    /// Closes the file in the cache, which keeps its pages for a later open (as the kernel
    /// does, `SharedFile::kept`); the last writer's close in any process writes it back. On a
    /// private cache, a file that could not be written back stays open in it and is written
    /// back again at exit (nothing else would: no service holds a descriptor of it).
    fn close(&mut self) -> upcache::Result<()> {
        // The last reference may go in any thread, outside the shim (a reader that outlived a
        // close): the library's own libc calls must pass through, or its stat of the file
        // would wait for the files map, which an open of this file holds while it waits for
        // this close.
        let _inside = crate::guard::enter();
        let reader = self.file.take().expect("closed once");
        // The writer, if any, is the file's: the read-only open only counts an open.
        let file = match self.writer.take() {
            Some(writer) => {
                let _ = crate::backend::close(reader);
                writer
            }
            None => reader,
        };
        let shim = self.shim;
        // Relaxed: set before the table entries went; this is the last reference. A demoted
        // file was written back when demoted, and is libc's now.
        let closed = if shim.cache.is_private() && !self.demoted.load(Ordering::Relaxed) {
            match file.write_back() {
                Ok(()) => crate::backend::close(file),
                Err(e) => {
                    lock(&shim.orphans).push((self.key, file));
                    Err(e)
                }
            }
        } else {
            crate::backend::close(file)
        };
        // Opens of the file wait while its dead entry is in the map (`Shim::shared`): the
        // library would hand them this closing copy.
        let mut files = lock(&shim.files);
        if files.get(&self.key).is_some_and(|w| w.strong_count() == 0) {
            files.remove(&self.key);
        }
        drop(files);
        shim.closed.notify_all();
        closed
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if self.file.is_some() {
            let _ = self.close(); // reported by `release` when it is the last close
        }
    }
}

/// An open file description of a cached file: one per open, shared by dup'ed descriptors.
pub(crate) struct Description {
    pub shared: Arc<Shared>,
    pub readable: bool,
    pub writable: bool,
    /// O_APPEND, which fcntl(F_SETFL) may change.
    pub append: AtomicBool,
    /// Held by calls that use the kernel's file offset, which must read and move it as one.
    pub offset: Mutex<()>,
    /// The write-back errors this description has reported: each reaches each `open(2)` (and
    /// its dups) once, as the kernel's errseq does, though the descriptions share one file.
    pub reported: AtomicU64,
}

/// Counters for UPCACHE_STATS (Relaxed: statistics, read at exit).
#[derive(Default)]
pub(crate) struct Counters {
    pub opens: AtomicU64,
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub syncs: AtomicU64,
    /// Opens under the prefix that the cache refused (left to libc).
    pub uncached: AtomicU64,
    /// Opens that found the file kept in the cache since its last close
    /// (`SharedFile::kept`).
    pub reopened: AtomicU64,
    /// Opens under the prefix of demoted files (left to libc).
    pub demoted_opens: AtomicU64,
}

pub(crate) struct Shim {
    pub settings: &'static Settings,
    pub cache: SharedCache,
    pub table: FdTable<Description>,
    /// Every cached file by (device, inode), while a descriptor of it is open, and until its
    /// close ends (a dead entry: the close is under way).
    files: Mutex<HashMap<(u64, u64), Weak<Shared>>>,
    /// Signalled when a close removes its dead entry.
    closed: Condvar,
    /// Files of a private cache whose last close failed to write them back: tried again at
    /// exit.
    orphans: Mutex<Vec<((u64, u64), File)>>,
    pub counters: Counters,
    /// Write-back failures said so far.
    said: Mutex<BTreeSet<String>>,
    pid: u32,
    reported: AtomicBool,
}

/// This process's shim, once started.
static SHIM: AtomicPtr<Shim> = AtomicPtr::new(std::ptr::null_mut());

const UNKNOWN: u8 = 0;
const OFF: u8 = 1;
const READY: u8 = 2;
/// Whether the settings were read: OFF when there is no prefix, or the shim failed to start.
static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
/// The settings, once read (READY); leaked, as the environment is read once per process.
static SETTINGS: AtomicPtr<Settings> = AtomicPtr::new(std::ptr::null_mut());
/// Serializes starting the shim, and is held across fork so that no child starts with it held.
static START: Mutex<()> = Mutex::new(());
/// Files demoted: never cached again in this process image, since descriptors of them that
/// libc serves may still be open, and so may mappings and streams. Outside any `Shim`: a
/// stream or mapping made before the shim started counts, and a forked child inherits the
/// set with the descriptors. Held across fork, as START.
static DEMOTED: Mutex<BTreeSet<(u64, u64)>> = Mutex::new(BTreeSet::new());

/// The shim of the process this one was forked from, if it cached files in the shared cache:
/// the child serves the descriptors it inherited through the same cache, as its own client,
/// once it first uses one (`Shim::take_over`). Its table is only read (lock-free loads), never
/// its locks, which another of the parent's threads may have held at the fork.
static PARENT: AtomicPtr<Shim> = AtomicPtr::new(std::ptr::null_mut());

/// The descriptors of a forked child that its parent's shim cached, and may still be the same
/// files (each is checked again when taken over); empty in any other process.
fn inherited() -> Vec<(i32, Arc<Description>)> {
    // Acquire: pairs with the Release in `after_fork_child`.
    let parent = PARENT.load(Ordering::Acquire);
    // SAFETY: a leaked `Shim`, never freed.
    let Some(parent) = (unsafe { parent.as_ref() }) else { return Vec::new() };
    // Relaxed: as in `Shim::demote` (a demoted file is libc's in the child too: `DEMOTED`).
    parent.table.all().into_iter().filter(|(_, d)| !d.shared.demoted.load(Ordering::Relaxed)).collect()
}

/// In a forked child, the shim started for `fd`, a descriptor its parent's shim cached; None in
/// any other case.
pub(crate) fn start_for_inherited(fd: i32) -> Option<&'static Shim> {
    // Relaxed: a hint; `inherited` loads it again.
    if PARENT.load(Ordering::Relaxed).is_null() || !enabled() || !inherited().iter().any(|(f, _)| *f == fd) {
        return None;
    }
    // Acquire: as in `for_path`.
    // SAFETY: non-null only once made, and never freed.
    let settings: &'static Settings = unsafe { SETTINGS.load(Ordering::Acquire).as_ref() }?;
    current().or_else(|| start(settings, -1))
}

/// Demotes every regular file under `prefix` that a descriptor other than `except` and those
/// in `keep` has open; returns the descriptors and keys.
fn demote_open_files(prefix: &Path, except: i32, keep: &[i32]) -> Vec<(i32, (u64, u64))> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return found };
    for entry in dir.flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if fd == except || keep.contains(&fd) {
            continue;
        }
        let Ok(path) = std::fs::read_link(entry.path()) else { continue };
        if !path.starts_with(prefix) {
            continue;
        }
        if let Some(st) = crate::os::fd_stat(fd).filter(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG) {
            mark_demoted((st.st_dev, st.st_ino));
            found.push((fd, (st.st_dev, st.st_ino)));
        }
    }
    found
}

/// Records that the file (device, inode) is libc's for good.
pub(crate) fn mark_demoted(key: (u64, u64)) {
    lock(&DEMOTED).insert(key);
}

/// Whether the file (device, inode) was demoted.
pub(crate) fn is_demoted(key: (u64, u64)) -> bool {
    lock(&DEMOTED).contains(&key)
}

/// Set once the program drives I/O the shim cannot see the files of (an io_uring): from then
/// on, nothing is cached in this process image (a forked child inherits it, and the ring).
static STOPPED: AtomicBool = AtomicBool::new(false);

/// Stops caching in this process image for good: every cached file is demoted (written back
/// and handed to libc) and no open is cached from now on. Said once, with `why`.
pub(crate) fn stop_caching(why: &str) {
    if stop_caching_quietly(why) {
        warn(&format!("{why}: caching stops in this process (pid {})", std::process::id()));
    }
}

/// `stop_caching` without its message (a failure to demote is said all the same); false if
/// caching had stopped already.
fn stop_caching_quietly(why: &str) -> bool {
    // SeqCst: an open racing this either sees the flag (`Shim::shared` checks it under the
    // map lock) or put its file in the map before the scan below takes that lock.
    if STOPPED.swap(true, Ordering::SeqCst) {
        return false;
    }
    let Some(_inside) = crate::guard::enter() else { return false };
    if let Some(shim) = current() {
        let open: Vec<Arc<Shared>> = lock(&shim.files).values().filter_map(Weak::upgrade).collect();
        for shared in &open {
            if let Err(code) = shim.demote(shared) {
                warn(&format!(
                    "{}: {}; it stays cached while {why}",
                    shared.file().name(),
                    crate::errno::describe(code)
                ));
            }
        }
    }
    true
}

/// Leaves the shared cache for good (`creds.rs`): caching stops (every file demoted) and the
/// cache is retired, its mapping and descriptor gone from this process. Nothing is said: a
/// program that drops privileges does nothing wrong.
pub(crate) fn leave_shared_cache(why: &str) {
    let Some(shim) = current().filter(|s| !s.cache.is_private()) else { return };
    stop_caching_quietly(why);
    let Some(_inside) = crate::guard::enter() else { return };
    shim.cache.retire();
}

/// Once per process image: the fork and exit handlers (inherited by forked children).
static HOOKED: AtomicBool = AtomicBool::new(false);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The running shim, if any (no starting).
pub(crate) fn current() -> Option<&'static Shim> {
    // Acquire: pairs with the Release that published it.
    let p = SHIM.load(Ordering::Acquire);
    // SAFETY: published only fully made, and never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Whether the shim is to cache anything (a prefix is set), reading the settings the first time.
pub(crate) fn enabled() -> bool {
    // A cache service forked from a shimmed program runs none of it.
    if upcache::shared::serve::is_service() {
        return false;
    }
    // Acquire: see the settings stored before it (they are read under START anyway).
    match STATE.load(Ordering::Acquire) {
        OFF => false,
        READY => true,
        _ => {
            let _start = lock(&START);
            if STATE.load(Ordering::Acquire) == UNKNOWN {
                let next = match Settings::from_env() {
                    Ok(Some(s)) => {
                        SETTINGS.store(Box::into_raw(Box::new(s)), Ordering::Release); // Release: made
                        READY
                    }
                    Ok(None) => OFF,
                    Err(msg) => {
                        warn(&format!("{msg}; passing everything through"));
                        OFF
                    }
                };
                STATE.store(next, Ordering::Release); // Release: after the settings
            }
            STATE.load(Ordering::Acquire) == READY
        }
    }
}

/// The shim, started if need be, for a file at the resolved path `path`: None if the file
/// is not to be cached (outside the prefix, no prefix, or the shim could not start).
pub(crate) fn for_path(path: &Path, adopting: i32) -> Option<&'static Shim> {
    if !enabled() {
        return None;
    }
    // Acquire: pairs with the Release that stored it (before READY).
    let settings = SETTINGS.load(Ordering::Acquire);
    // SAFETY: non-null only once made, and never freed.
    let settings: &'static Settings = unsafe { settings.as_ref() }?;
    // SeqCst: see `stop_caching`.
    if !path.starts_with(&settings.prefix) || STOPPED.load(Ordering::SeqCst) {
        return None;
    }
    let shim = match current() {
        Some(s) => s,
        None => start(settings, adopting)?,
    };
    Some(shim)
}

/// Starts the shim for the open of `adopting`.
fn start(settings: &'static Settings, adopting: i32) -> Option<&'static Shim> {
    let _start = lock(&START);
    if let Some(s) = current() {
        return Some(s);
    }
    // Acquire: as in `enabled` (a failed start of another thread turned it OFF).
    if STATE.load(Ordering::Acquire) != READY {
        return None;
    }
    // Descriptors of files under the prefix open already were opened by libc (inherited
    // across an exec, or before the shim could see them): those files are libc's. Those a
    // forked child inherited from a shim on the shared cache are taken over instead.
    // Acquire: pairs with the Release in `after_fork_child`.
    let taking = inherited();
    PARENT.store(std::ptr::null_mut(), Ordering::Release); // taken over once
    let keep: Vec<i32> = taking.iter().map(|(fd, _)| *fd).collect();
    let libcs = demote_open_files(&settings.prefix, adopting, &keep);
    // The cache's threads and the rescuer start with every signal blocked: fatal signals go
    // to the program's threads, whose handler waits for the rescuer (`signals.rs`).
    let made = crate::signals::with_signals_blocked(|| {
        let shim: &'static Shim = Box::leak(Box::new(Shim::new(settings)?));
        let rescue: &'static Rescue = Box::leak(Box::new(Rescue::new(&shim.cache)));
        std::thread::Builder::new()
            .name("upcache-rescue".into())
            .spawn(move || {
                crate::signals::rescuer(rescue, |each| {
                    shim.write_back_all_with(
                        "as the process dies of a signal",
                        "what it holds of it is lost",
                        true,
                        each,
                    )
                })
            })
            .map_err(|e| format!("start a thread: {e}"))?;
        Ok::<_, String>((shim, rescue))
    });
    match made {
        Ok((shim, rescue)) => {
            SHIM.store(shim as *const Shim as *mut Shim, Ordering::Release); // Release: made
            hook();
            crate::signals::install(rescue);
            shim.bypass_libcs(&libcs);
            shim.take_over(taking);
            Some(shim)
        }
        Err(msg) => {
            warn(&format!("cannot start: {msg}; passing everything through"));
            STATE.store(OFF, Ordering::Release); // Release: as in `enabled`
            None
        }
    }
}

impl Shim {
    fn new(settings: &'static Settings) -> Result<Shim, String> {
        // Before the cache starts any thread (its flusher, its service watcher).
        upcache::shared::on_library_thread(crate::guard::stay_inside);
        let pid = std::process::id();
        let config = upcache::shared::SharedConfig { memory: settings.memory, ..Default::default() };
        let asked = settings.cache.shared(config);
        if !settings.shared {
            let cache =
                SharedCache::create_private(&asked).map_err(|e| format!("a cache of this process: {e}"))?;
            return Ok(Shim::with(settings, cache, pid));
        }
        // Started with `asked` if no service answers, exiting `settings.idle` after the last
        // process detaches.
        let socket = upcache::shared::serve::default_socket();
        let cache = upcache::shared::serve::connect_or_start(&socket, &asked, settings.idle)
            .map_err(|e| format!("the shared cache at {}: {e}", socket.display()))?;
        let running = cache.config();
        if let Some(differs) = settings.cache.differs(&running) {
            warn(&format!(
                "{differs}, but the shared cache at {} runs with dirty ratios {},{}, expiry {:?}, \
                 flush interval {:?}, range lock {}, run merging {}, bundling {}, direct write-back {}, direct loads {}, \
                 readahead {} bytes, \
                 the {} index, the {} policy, {} eviction, streams {}, {} and {} write-back (its service's, \
                 set when it started); this process follows them",
                socket.display(),
                running.dirty_ratios.0,
                running.dirty_ratios.1,
                running.dirty_expire,
                running.flush_interval,
                upcache::on_off(running.range_lock),
                upcache::on_off(running.run_merging),
                upcache::on_off(running.bundling),
                upcache::on_off(running.direct_write_back),
                upcache::on_off(running.direct_loads),
                running.readahead,
                running.index.name(),
                running.policy.name(),
                running.clean_first.name(),
                upcache::on_off(running.streams),
                running.flush.name(),
                running.io.name(),
            ));
        }
        let has = running.memory;
        // Its size is its service's, set when that started (frames of whole pages).
        if settings.memory_asked && has.abs_diff(settings.memory) >= upcache::shared::PAGE_SIZE as u64 {
            warn(&format!(
                "UPCACHE_MEMORY asks for {} MiB, but the shared cache at {} has {} MiB (its service \
                 started with that size, and keeps it until it exits, UPCACHE_IDLE seconds after the \
                 last process detaches); this process uses it as it is. For a cache of the size \
                 asked, set UPCACHE_SOCKET to a path of its own",
                settings.memory >> 20,
                socket.display(),
                has >> 20
            ));
        }
        Ok(Shim::with(settings, cache, pid))
    }

    fn with(settings: &'static Settings, cache: SharedCache, pid: u32) -> Shim {
        Shim {
            settings,
            cache,
            table: FdTable::new(),
            files: Mutex::new(HashMap::new()),
            closed: Condvar::new(),
            orphans: Mutex::new(Vec::new()),
            counters: Counters::default(),
            said: Mutex::new(BTreeSet::new()),
            pid,
            reported: AtomicBool::new(false),
        }
    }

    /// The cached file `key`, cached now through `fd` (a descriptor of it) if it is not yet;
    /// None if it is demoted (checked under the map lock, after any close under way).
    pub fn shared(
        &'static self,
        key: (u64, u64),
        fd: i32,
        path: &Path,
        writable: bool,
    ) -> upcache::Result<Option<Arc<Shared>>> {
        let mut files = lock(&self.files);
        while let Some(w) = files.get(&key) {
            match w.upgrade() {
                // Relaxed: a demotion sets it before it writes back; a miss here is a race
                // with it, as any open racing an fdopen of the file.
                Some(s) if !s.demoted.load(Ordering::Relaxed) => {
                    if writable {
                        if let Err(e) = s.make_writable(fd) {
                            // This descriptor goes to libc: so must every other of the file.
                            drop(files);
                            let _ = self.demote(&s);
                            return Err(e);
                        }
                    }
                    return Ok(Some(s));
                }
                // Being closed (or demoted, closed when its operations in flight end): wait
                // until the close has forgotten it.
                other => {
                    drop(other);
                    files = self.closed.wait(files).unwrap_or_else(|p| p.into_inner());
                }
            }
        }
        // SeqCst: see `stop_caching` (checked under the map lock, which its scan takes).
        if is_demoted(key) || STOPPED.load(Ordering::SeqCst) {
            return Ok(None);
        }
        // The descriptor's own inode, whatever its path has become since; named by the path
        // it was opened at, for messages.
        let file = crate::backend::open(
            &self.cache,
            &crate::os::fd_path(fd),
            &path.display().to_string(),
            writable,
        )?;
        if file.bypassed() {
            // Another process stopped caching it (or this one did): libc's, here too.
            mark_demoted(key);
            let _ = crate::backend::close(file);
            return Ok(None);
        }
        if file.kept() {
            self.counters.reopened.fetch_add(1, Ordering::Relaxed); // Relaxed: a statistic
        }
        let shared = Arc::new(Shared::new(file, key, self));
        files.insert(key, Arc::downgrade(&shared));
        Ok(Some(shared))
    }

    /// Files libc has open in this process (found at start): on the shared cache, every
    /// process stops caching them too (`SharedFile::bypass`), since this one reads and writes
    /// them past the cache.
    fn bypass_libcs(&self, libcs: &[(i32, (u64, u64))]) {
        if self.cache.is_private() {
            return;
        }
        for (fd, _) in libcs {
            let name = std::fs::read_link(crate::os::fd_path(*fd))
                .map_or_else(|_| format!("descriptor {fd}"), |p| p.display().to_string());
            let stopped = crate::backend::open(&self.cache, &crate::os::fd_path(*fd), &name, false)
                .and_then(|file| file.bypass().and_then(|()| crate::backend::close(file)));
            if let Err(e) = stopped {
                warn(&format!("{name}: open before the shim started, and other processes cache it: {e}"));
            }
        }
    }

    /// A forked child's descriptors that its parent's shim cached in the shared cache: served
    /// through it by this process too (one description for descriptors that shared one), each
    /// still a descriptor of its file; one that cannot be is libc's, for every process.
    fn take_over(&'static self, inherited: Vec<(i32, Arc<Description>)>) {
        let mut made: Vec<(*const Description, Arc<Description>)> = Vec::new();
        for (fd, old) in inherited {
            let key = old.shared.key();
            // SAFETY: F_GETFL takes no argument; the 0 is ignored.
            let flags = unsafe { crate::real::fcntl()(fd, libc::F_GETFL, 0 as libc::c_int) };
            let access = flags & libc::O_ACCMODE;
            if flags < 0
                || crate::os::fd_stat(fd).is_none_or(|st| (st.st_dev, st.st_ino) != key)
                || (access != libc::O_WRONLY) != old.readable
                || (access != libc::O_RDONLY) != old.writable
            {
                continue; // closed, or another open of it (or another file) now
            }
            if let Some((_, desc)) = made.iter().find(|(p, _)| std::ptr::eq(*p, Arc::as_ptr(&old))) {
                self.install(fd, Some(desc.clone()));
                continue;
            }
            let path = std::fs::read_link(crate::os::fd_path(fd)).unwrap_or_default();
            match self.shared(key, fd, &path, old.writable) {
                Ok(Some(shared)) => {
                    let desc = Arc::new(Description {
                        reported: AtomicU64::new(shared.file().errors_sample()),
                        shared,
                        readable: old.readable,
                        writable: old.writable,
                        append: AtomicBool::new(flags & libc::O_APPEND != 0),
                        offset: Mutex::new(()),
                    });
                    self.install(fd, Some(desc.clone()));
                    made.push((Arc::as_ptr(&old), desc));
                }
                Ok(None) => {} // demoted: libc's
                Err(e) => {
                    mark_demoted(key);
                    self.bypass_libcs(&[(fd, key)]);
                    warn(&format!("{}: inherited, not cached in the child: {e}", path.display()));
                }
            }
        }
    }

    /// Makes `fd` a descriptor of `desc` (or of nothing), unless its file is demoted
    /// meanwhile; returns what the slot held.
    pub fn install(&self, fd: i32, desc: Option<Arc<Description>>) -> Option<Arc<Description>> {
        let old = self.table.set(fd, desc.clone());
        if let Some(d) = desc {
            // SeqCst: see `demote`.
            if d.shared.demoted.load(Ordering::SeqCst) {
                self.table.remove_if(fd, &d);
            }
        }
        old
    }

    /// The cached file with this (device, inode), if a descriptor of it is open.
    pub fn lookup(&self, key: (u64, u64)) -> Option<Arc<Shared>> {
        lock(&self.files).get(&key).and_then(Weak::upgrade)
    }

    /// Stops caching `shared`'s file: writes it back and hands every descriptor of it to libc
    /// (the file is closed in the cache when the caller's reference, the last, goes). For
    /// ways to the file that would write past the cache: streams, mappings, other processes.
    pub fn demote(&self, shared: &Arc<Shared>) -> Result<(), i32> {
        shared.file().bypass().map_err(|e| errno::of(&e))?;
        mark_demoted(shared.key);
        // SeqCst: a descriptor made meanwhile (`Shim::install`) is either seen by the scan
        // below or sees this flag: this store and that load are SeqCst, and so is at least one
        // read-write operation in every arc-swap operation (its documented guarantee), the
        // slot's swap and the scan's loads included.
        shared.demoted.store(true, Ordering::SeqCst);
        for (fd, desc) in self.table.all() {
            if Arc::ptr_eq(&desc.shared, shared) {
                self.table.remove_if(fd, &desc); // unless closed and reused meanwhile
            }
        }
        Ok(())
    }

    /// Demotes every file with a descriptor a child process would inherit (not close-on-exec):
    /// the child writes it through libc, so this process must too.
    fn demote_inherited(&self) {
        let mut inherited: Vec<Arc<Shared>> = Vec::new();
        for (fd, desc) in self.table.all() {
            // SAFETY: F_GETFD takes no argument; the 0 is ignored.
            let flags = unsafe { crate::real::fcntl()(fd, libc::F_GETFD, 0 as libc::c_int) };
            if flags >= 0
                && flags & libc::FD_CLOEXEC == 0
                && !inherited.iter().any(|s| Arc::ptr_eq(s, &desc.shared))
            {
                inherited.push(desc.shared.clone());
            }
        }
        for shared in &inherited {
            if let Err(code) = self.demote(shared) {
                warn(&format!(
                    "fork: writing {} back failed (errno {code}); it stays cached",
                    shared.file().name()
                ));
            }
        }
    }

    /// Makes every cached file durable (sync(2) has no error to report: failures are said).
    pub(crate) fn sync_all_files(&self) {
        for file in self.live_files() {
            if let Err(e) = file.sync_all() {
                warn(&format!("sync {}: {e}", file.name()));
            }
        }
    }

    /// Writes back every cached file, so that the OS files hold what the cache does. A
    /// failure is said with `when` (what is happening) and `then` (what follows for the data).
    pub(crate) fn write_back_all(&self, when: &str, then: &str) {
        self.write_back_all_with(when, then, false, || {});
    }

    /// `write_back_all`, calling `each` after each file (`dying`: as the process dies of a
    /// signal, passing over the pages a thread holds, `SharedFile::write_back_unwaiting`: the
    /// one the signal interrupted may hold one). A failure said already in the same words is
    /// not said again (exit writes back twice: `at_exit`).
    pub(crate) fn write_back_all_with(&self, when: &str, then: &str, dying: bool, mut each: impl FnMut()) {
        // Dying, the files map may be held by the thread the signal interrupted (asleep on a
        // lock of the cache's, `signals.rs`), so it is not waited for. The loaders stop first:
        // a write-behind under way holds its frames. On the shared cache what is left stays in
        // it for the service; a private cache dies with the process, so without the map every
        // file open for writing is written back from the cache's own list.
        let files = if dying {
            self.cache.stop_loaders();
            match self.files.try_lock() {
                Ok(map) => {
                    let mut files = cached_files(&map);
                    if let Ok(orphans) = self.orphans.try_lock() {
                        files.extend(live_orphans(&orphans));
                    }
                    files
                }
                Err(_) => {
                    if self.cache.is_private() {
                        if let Err(e) = self.cache.write_back_open_unwaiting() {
                            warn(&format!("writing the cache back {when}: {e}; {then}"));
                        }
                    }
                    Vec::new()
                }
            }
        } else {
            self.live_files()
        };
        for file in files {
            let written = if dying { file.write_back_unwaiting() } else { file.write_back() };
            if let Err(e) = written {
                let msg = format!("writing {} back {when}: {e}; {then}", file.name());
                if lock(&self.said).insert(msg.clone()) {
                    warn(&msg);
                }
            }
            each();
        }
    }

    /// Handles of every file this cache owns the OS copy of: open ones and ones whose close
    /// failed to write them back, but not demoted ones (libc's now: a write-back or sync
    /// would cut the OS file to a stale length).
    fn live_files(&self) -> Vec<File> {
        let mut files = cached_files(&lock(&self.files));
        files.extend(live_orphans(&lock(&self.orphans)));
        files
    }

    fn report(&self) {
        let Some(path) = &self.settings.stats else { return };
        let c = &self.counters;
        let (hits, misses) = self.cache.own_counts();
        let mut line = format!(
            "pid={} opens={} uncached={} reopened={} demoted_opens={} reads={} writes={} read_bytes={} write_bytes={} syncs={} hits={} misses={}",
            self.pid,
            c.opens.load(Ordering::Relaxed),
            c.uncached.load(Ordering::Relaxed),
            c.reopened.load(Ordering::Relaxed),
            c.demoted_opens.load(Ordering::Relaxed),
            c.reads.load(Ordering::Relaxed),
            c.writes.load(Ordering::Relaxed),
            c.read_bytes.load(Ordering::Relaxed),
            c.write_bytes.load(Ordering::Relaxed),
            c.syncs.load(Ordering::Relaxed),
            hits,
            misses,
        );
        // The cache's counts, of every process attached to it, as everything reports them.
        for (name, value) in self.cache.status().stats.fields() {
            line.push_str(&format!(" cache.{name}={value}"));
        }
        line.push('\n');
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = appended {
            warn(&format!("UPCACHE_STATS={}: {e}", path.display()));
        }
    }
}

/// The orphans (files whose last close failed to write them back) that are not demoted.
fn live_orphans(orphans: &[((u64, u64), File)]) -> impl Iterator<Item = File> + '_ {
    orphans.iter().filter(|(key, _)| !is_demoted(*key)).map(|(_, f)| f.clone())
}

/// The open files of a files map that are not demoted.
fn cached_files(map: &HashMap<(u64, u64), Weak<Shared>>) -> Vec<File> {
    // Relaxed: as in `Shared::close`; a demotion racing this is the program's own race.
    map.values()
        .filter_map(Weak::upgrade)
        .filter(|s| !s.demoted.load(Ordering::Relaxed))
        .map(|s| s.file().clone())
        .collect()
}

/// Releases a descriptor's hold on its description. The last close of a file writes it
/// back; its error is the close's.
pub(crate) fn release(desc: Arc<Description>) -> Result<(), i32> {
    let Some(desc) = Arc::into_inner(desc) else { return Ok(()) };
    match Arc::into_inner(desc.shared) {
        Some(mut shared) => shared.close().map_err(|e| errno::of(&e)),
        None => Ok(()),
    }
}

pub(crate) fn warn(msg: &str) {
    let line = format!("upcache-preload: {msg}\n");
    // A broken pipe on stderr must not kill the process for the shim's own message: SIGPIPE
    // is blocked around the write, and one it raised is taken back (unless one was pending).
    // SAFETY: valid sigset and timespec storage; a valid buffer of that length (stderr may be
    // closed, then nothing is written).
    unsafe {
        let mut pipe: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pipe);
        libc::sigaddset(&mut pipe, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old);
        libc::sigpending(&mut pending);
        let was_pending = libc::sigismember(&pending, libc::SIGPIPE) == 1;
        let wrote = crate::real::write()(2, line.as_ptr().cast(), line.len());
        if wrote < 0 && crate::errno::get() == libc::EPIPE && !was_pending {
            let now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            libc::sigtimedwait(&pipe, std::ptr::null_mut(), &now);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

/// Installs the fork and exit handlers, once per process image.
fn hook() {
    if HOOKED.swap(true, Ordering::AcqRel) {
        return; // AcqRel: one caller installs
    }
    // SAFETY: the handlers are `extern "C" fn()` that live as long as the process.
    unsafe {
        libc::pthread_atfork(Some(before_fork), Some(after_fork_parent), Some(after_fork_child));
        libc::atexit(at_exit);
    }
}

/// Run by the dynamic linker's own exit handler, registered before any of the program's, so
/// after them all: writes that a program's exit handlers made after `at_exit` ran are written
/// back too.
#[used]
#[link_section = ".fini_array"]
static AT_FINI: extern "C" fn() = at_exit;

/// The locks held by the forking thread from before the fork until after it.
type ForkHold =
    (MutexGuard<'static, ()>, MutexGuard<'static, BTreeSet<(u64, u64)>>, upcache::shared::ForkHold);

thread_local! {
    static FORK_HOLD: std::cell::RefCell<Option<ForkHold>> = const { std::cell::RefCell::new(None) };
}

extern "C" fn before_fork() {
    let Some(_inside) = crate::guard::enter() else { return };
    // The child reads the files through libc or its own cache: give it what ours holds, and
    // stop caching what it inherits (both would write it).
    if let Some(shim) = current() {
        shim.demote_inherited();
        shim.write_back_all("before a fork", "the child reads the file without it");
    }
    let held = (lock(&START), lock(&DEMOTED), upcache::shared::hold_for_fork());
    let _ = FORK_HOLD.try_with(|h| *h.borrow_mut() = Some(held));
}

extern "C" fn after_fork_parent() {
    let _ = FORK_HOLD.try_with(|h| h.borrow_mut().take());
}

extern "C" fn after_fork_child() {
    // The parent's shim is leaked, not dropped: its cache's threads are not in this process.
    // The settings stay: the same environment.
    let parent = SHIM.swap(std::ptr::null_mut(), Ordering::AcqRel); // AcqRel: as in `start`
                                                                    // SAFETY: a leaked `Shim`, never freed.
    if unsafe { parent.as_ref() }.is_some_and(|p| !p.cache.is_private()) {
        PARENT.store(parent, Ordering::Release); // Release: its table, for `inherited`
    }
    crate::signals::forget();
    let _ = FORK_HOLD.try_with(|h| h.borrow_mut().take());
}

/// vfork's child shares this process's memory, so it would change the parent's table (a
/// close_range before exec, for one) and run its cache: it is a fork here, which POSIX allows.
#[no_mangle]
pub extern "C" fn vfork() -> libc::pid_t {
    // SAFETY: fork has no arguments; the fork handlers above run.
    unsafe { libc::fork() }
}

/// _exit(2) skips exit handlers, but the kernel keeps what a process wrote before it: so
/// does the shim. (A vfork child has another pid than the shim's and writes nothing.)
#[no_mangle]
pub extern "C" fn _exit(status: libc::c_int) -> ! {
    at_exit();
    // SAFETY: no arguments but the status.
    unsafe { crate::real::_exit()(status) }
}

#[no_mangle]
pub extern "C" fn _Exit(status: libc::c_int) -> ! {
    at_exit();
    // SAFETY: as above.
    unsafe { crate::real::_Exit()(status) }
}

/// Writes every cached file back; the first time, reports the counters.
extern "C" fn at_exit() {
    let Some(_inside) = crate::guard::enter() else { return };
    if let Some(shim) = current() {
        if shim.pid == std::process::id() {
            shim.write_back_all("at exit", "what the cache holds of it is lost with the process");
            // The shared cache lives on in other processes, but if its service died it must
            // have one again before this mapping of it goes (dead writers' pages in it).
            shim.cache.before_exit();
            // AcqRel: one report per process.
            if !shim.reported.swap(true, Ordering::AcqRel) {
                shim.report();
            }
        }
    }
}

/// Whether a shim runs in this process, without starting one: for calls that only matter
/// when files are cached.
pub(crate) fn enabled_quick() -> bool {
    // Relaxed: a hint; `current` itself synchronizes.
    !SHIM.load(Ordering::Relaxed).is_null()
}
