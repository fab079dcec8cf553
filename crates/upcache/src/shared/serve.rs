//! The service (`upcache serve`): it makes the shared segment, hands it to processes of its own
//! user over a 0600 socket, holds it so the cache outlives them, notices their deaths (the
//! socket's hang-up) and repairs what they held, and exits once nobody has been attached for
//! its idle time. Processes find it by the socket's path, and start it when it is not there
//! ([`connect_or_start`]), as ssh-agent or sccache are started.
//!
//! One service per socket: it holds an exclusive `flock` on `<socket>.lock` for its whole life,
//! so a second one started at the same moment exits at once and a stale socket left by a
//! killed one is replaced safely. In that file it records itself (`holder.rs`): a service
//! started after one died adopts the dead one's segment from any process still mapping it,
//! and a process that finds the service stopped attaches to the segment without it.
//!
//! A request is one byte: `A` to attach (answered by the segment, or a refusal), `S` for a
//! status report in text, `J` for the same in JSON. An attached process keeps its connection
//! open; when it closes, whatever the process died holding is repaired at once. Over it, a process lends the service
//! a descriptor of each file it opens for writing (`F` and the file's slot, the descriptor
//! attached), so that dirty pages whose every writer died are written back all the same; the
//! service does not exit while dirty pages remain. It asks for a file's write-back (`W` and
//! the slot: POSIX_FADV_DONTNEED) or, past the background dirty ratio, for a pass that writes
//! back until the cache is below it (`B`).

use std::collections::HashMap;

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::holder::{self, Record};
use super::named;
pub use super::named::segment_file;
use super::{Lent, SharedCache, SharedConfig};
use crate::error::{Error, ErrorKind, Result};
use crate::shm::{handoff, Segment};

/// Set in a service process: one forked from a program under the LD_PRELOAD shim inherits the
/// shim, which must pass all of the service's calls through (its opens of files under the
/// prefix, to write back what dead writers left, would otherwise start a shim that attaches
/// to this very service, and wait for its answer).
static SERVICE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process is a cache service ([`serve`] runs in it).
pub fn is_service() -> bool {
    // Relaxed: set once, before the service does anything the answer matters for.
    SERVICE.load(Ordering::Relaxed)
}

/// How long a service stays with nobody attached before it exits, unless told otherwise
/// (`upcache serve --idle`, the shim's `UPCACHE_IDLE`).
pub const DEFAULT_IDLE: Duration = Duration::from_secs(60);

/// How long an attach waits for the service's answer: one that does not answer in this time
/// is hung (stopped, or wedged), and the caller gets an error instead of hanging with it.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// How a service runs.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The socket's path; its directory is made 0700 if missing.
    pub socket: PathBuf,
    /// The cache's size.
    pub config: SharedConfig,
    /// How long the service stays with nobody attached before it exits.
    pub idle: Duration,
}

/// The socket a process of this user uses unless told otherwise: `$UPCACHE_SOCKET`, else
/// `/tmp/upcache-<uid>/cache.sock`.
pub fn default_socket() -> PathBuf {
    if let Some(p) = std::env::var_os("UPCACHE_SOCKET") {
        return PathBuf::from(p);
    }
    // SAFETY: geteuid has no arguments and cannot fail.
    let uid = unsafe { libc::geteuid() };
    PathBuf::from(format!("/tmp/upcache-{uid}/cache.sock"))
}

/// Makes `socket`'s directory (0700) if missing, and refuses one that another user owns or
/// that others may write: they could put their own socket there.
fn private_dir(socket: &Path) -> Result<()> {
    let dir = socket.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("make {}", dir.display()), e))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::io(format!("chmod {}", dir.display()), e))?;
    }
    // Not followed: a link another user planted would send our socket where they choose.
    let md = std::fs::symlink_metadata(dir).map_err(|e| Error::io(format!("stat {}", dir.display()), e))?;
    if !md.is_dir() {
        return Err(Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "{} is not a directory (a symbolic link?); the cache's socket needs a private one",
                dir.display()
            ),
        ));
    }
    // SAFETY: as in `default_socket`.
    let uid = unsafe { libc::geteuid() };
    if md.uid() != uid || md.mode() & 0o022 != 0 {
        return Err(Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "{} belongs to uid {} or others may write it; the cache's socket needs a private directory",
                dir.display(),
                md.uid()
            ),
        ));
    }
    Ok(())
}

fn lock_path(socket: &Path) -> PathBuf {
    let mut p = socket.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

/// The socket file this service bound, by identity: at exit it goes only if the path still
/// names it. A program that removed the socket's directory and made it again (a benchmark
/// between runs) may have started another service there meanwhile, whose socket the path
/// names now.
struct OwnSocket {
    path: PathBuf,
    id: Option<(u64, u64)>,
}

impl OwnSocket {
    fn of(path: &Path) -> OwnSocket {
        OwnSocket { path: path.to_path_buf(), id: file_id(path) }
    }

    fn remove(&self) {
        if self.id.is_some() && file_id(&self.path) == self.id {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The device and inode of what `path` names (not following a last symbolic link).
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Runs the service until it is idle; false (at once) if another service has the socket.
/// `ready` is called once the socket listens, with the cache (for a status or metrics
/// reader: a clone does not count as an attached process).
pub fn serve(opts: &ServeOptions, ready: impl FnOnce(&SharedCache)) -> Result<bool> {
    SERVICE.store(true, Ordering::Relaxed); // Relaxed: see `is_service`
    STOP.store(false, Ordering::Relaxed); // Relaxed: see `on_stop`
    private_dir(&opts.socket)?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode_0600()
        .open(lock_path(&opts.socket))
        .map_err(|e| Error::io("open the service's lock file", e))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Ok(false);
    }
    // The record of the service before us, if it died: its segment lives while any process
    // maps it, and is this service's then (`holder.rs`).
    let before = Record::read(&lock_path(&opts.socket));
    // Ours now: a socket file left here is a dead service's.
    let _ = std::fs::remove_file(&opts.socket);
    // Listening before the segment is made: a process that connects meanwhile waits for its
    // answer instead of finding no socket.
    let listener = UnixListener::bind(&opts.socket)
        .map_err(|e| Error::io(format!("listen on {}", opts.socket.display()), e))?;
    std::fs::set_permissions(&opts.socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io("chmod the socket", e))?;
    let socket = OwnSocket::of(&opts.socket);
    let named = named::segment_file(&opts.socket);
    let made = match adopt(before, named.as_deref()) {
        Ok(Some(c)) => {
            log::info!("upcache serve: took over the cache of a service that died");
            Ok(c)
        }
        Ok(None) => create(&opts.config, named.as_deref()),
        Err(e) => Err(e),
    };
    let cache = match made {
        Ok(c) => c,
        Err(e) => {
            socket.remove();
            return Err(e);
        }
    };
    // Where to find the segment without us (while we are stopped, or once we are gone).
    if let Some(rec) = Record::of(std::process::id(), &cache.segment_fd()) {
        let written = lock
            .set_len(0)
            .and_then(|()| std::os::unix::fs::FileExt::write_all_at(&lock, rec.text().as_bytes(), 0));
        if let Err(e) = written {
            log::warn!("upcache serve: recording the service in its lock file: {e}");
        }
    }
    listener.set_nonblocking(true).map_err(|e| Error::io("set the socket non-blocking", e))?;
    log::info!(
        "upcache serve: pid {} on {}, {} MiB of pages",
        std::process::id(),
        opts.socket.display(),
        cache.memory() >> 20
    );
    let in_file = named.as_deref().is_some_and(|p| named::is_named(p, &cache.segment_fd()));
    ready(&cache);
    let lent: Mutex<HashMap<u32, Arc<Lent>>> = Mutex::new(HashMap::new());
    let asked: Mutex<Vec<u32>> = Mutex::new(Vec::new());
    let stop = AtomicBool::new(false);
    let alone = std::thread::scope(|s| {
        let flusher = s.spawn(|| flush(&cache, &lent, &asked, &stop));
        let huge = s.spawn(|| super::huge::make_huge(&cache, in_file, &stop));
        let alone = serve_loop(opts, &cache, &listener, &lent, &|slot| {
            if let Some(slot) = slot {
                let mut a = asked.lock().unwrap_or_else(|p| p.into_inner());
                if !a.contains(&slot) {
                    a.push(slot);
                }
            }
            flusher.thread().unpark();
        });
        // Relaxed: the unpark that follows wakes the flusher to see it.
        stop.store(true, Ordering::Relaxed);
        flusher.thread().unpark();
        huge.thread().unpark();
        alone
    });
    socket.remove();
    // Nothing dirty is left and no other process maps it or is about to (one accepted is in
    // `alone`'s count): the file goes with us. Else it stays for the next service, which
    // finds it kept by none: the keeper goes before the socket's lock, whatever else holds
    // the cache (a metrics reader's clone).
    // Relaxed: a count; every other process has gone.
    let clean = cache.inner.view.header().dirty.load(Ordering::Relaxed) == 0;
    if let Some(path) = named.as_deref().filter(|_| alone && clean && cache.client_count() <= 1) {
        named::remove_named(path, &cache.segment_fd());
    }
    cache.inner.view.seg.release_keeper();
    // Relaxed: see `on_stop`.
    let why = if STOP.load(Ordering::Relaxed) {
        "stopped by a signal".to_string()
    } else {
        format!("idle for {:?}", opts.idle)
    };
    log::info!("upcache serve: {why}, exiting");
    drop(lock);
    Ok(true)
}

/// How long a service waits for a segment file's keeper lock before it takes the file for a
/// live service's: the service before it lets the lock go just before its socket's lock, and
/// a killed one in the same exit, but not at the same instant.
const KEEPER_WAIT: Duration = Duration::from_millis(200);

/// The keeper lock of the segment file behind `fd` (`shm::take_keeper`), waiting up to
/// [`KEEPER_WAIT`] for a service that is going; None if a live one keeps it.
fn wait_for_keeper(fd: &OwnedFd) -> Result<Option<OwnedFd>> {
    let deadline = Instant::now() + KEEPER_WAIT;
    loop {
        if let Some(k) = crate::shm::take_keeper(fd)? {
            return Ok(Some(k));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The segment of a service that died, if one is left: the one its record names, from a
/// process that maps it, else the file `named` (which outlives every process). Not one that
/// a live service keeps (`shm::take_keeper`: one whose socket was removed and made again, as
/// a benchmark does between runs): that file's name is taken from it, and None. A file this
/// build cannot read is moved aside (its pages are another format's), and None. An error if
/// the file is this user's cache but cannot be adopted now (no memory, no descriptor): a
/// service beside it would be a second cache of the same files.
fn adopt(before: Option<Record>, named: Option<&Path>) -> Result<Option<SharedCache>> {
    if let Some(fd) = before.and_then(|r| holder::find(&r)) {
        let named_here = named.is_some_and(|p| named::is_named(p, &fd));
        let keeper = if named_here { wait_for_keeper(&fd)? } else { None };
        if !named_here || keeper.is_some() {
            let seg = Segment::attach(fd)?;
            if let Some(k) = keeper {
                seg.keep_with(k);
            } else {
                log::warn!(
                    "upcache serve: the dead service's cache has no file in /dev/shm (a memfd, or its \
                     file removed): taken over, its dirty pages die with the last of its processes"
                );
            }
            return SharedCache::adopt(seg).map(Some);
        }
    }
    let Some(path) = named else { return Ok(None) };
    let Some(fd) = named::open_named(path) else { return Ok(None) };
    if !named::private_to_me(&fd) {
        log::warn!("upcache serve: {} is not this user's cache file; it is left alone", path.display());
        return Ok(None);
    }
    let Some(keeper) = wait_for_keeper(&fd)? else {
        log::info!(
            "upcache serve: {} is the cache of a live service (whose socket was removed); it keeps \
             it, and a new one is made",
            path.display()
        );
        let _ = std::fs::remove_file(path);
        return Ok(None);
    };
    let unreadable = |e: &Error| {
        let aside = path.with_extension("unreadable");
        let moved = std::fs::rename(path, &aside);
        log::error!(
            "upcache serve: {} was left by a service before, and cannot be read ({e}); {}",
            path.display(),
            match moved {
                Ok(()) => format!("moved to {}, a new cache made", aside.display()),
                Err(e) => format!("it could not be moved aside ({e})"),
            }
        );
    };
    // A size or header that is not a segment's, or a cache of another format (another build).
    let format = |e: &Error| matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::Unsupported);
    let seg = match Segment::attach(fd) {
        Ok(seg) => seg,
        Err(e) if format(&e) => {
            unreadable(&e);
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    seg.keep_with(keeper);
    match SharedCache::adopt(seg) {
        Ok(c) => Ok(Some(c)),
        Err(e) if format(&e) => {
            unreadable(&e);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// A new cache for the service: its segment the file `named` if it can be made (or if
/// `named` is None, or it cannot: a memfd, which dies with the last process that maps it).
/// Not beside a cache file of this user's that `adopt` left (one made meanwhile): an error.
fn create(config: &SharedConfig, named: Option<&Path>) -> Result<SharedCache> {
    if let Some(path) = named {
        if let Some(fd) = named::open_named(path).filter(named::private_to_me) {
            drop(fd);
            return Err(Error::new(
                ErrorKind::Io,
                format!("{} is a cache file of this user's that no service took over", path.display()),
            ));
        }
        match SharedCache::create_in(config, Some(path)) {
            Ok(c) => return Ok(c),
            Err(e) => log::warn!(
                "upcache serve: no cache file in /dev/shm ({e}); the cache is a memfd, and its dirty \
                 pages die with the last of its processes (the service included) if all are killed"
            ),
        }
    }
    SharedCache::create(config)
}

/// Set by SIGTERM or SIGINT once [`stop_on_signals`] is called: the service stops as if idle.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    // Relaxed: a flag the service's loop reads at each wake-up; a store is async-signal-safe.
    STOP.store(true, Ordering::Relaxed);
}

/// Makes SIGTERM and SIGINT end the service in this process in order: its loop ends (within
/// its poll's second), and its cache's file in `/dev/shm` goes with it if nothing is dirty
/// and no other process is attached (`named.rs`). Processes still attached put a service
/// back (`link.rs`), which takes the cache over, as after its death. Once, in a service's own
/// process (the daemon, `upcache serve`); a second signal kills it.
pub fn stop_on_signals() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: a zeroed sigaction with a handler that only stores to an atomic; no
        // SA_RESTART, so the signal ends the loop's poll at once; SA_RESETHAND, so a second
        // one kills a service whose exit hangs.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
            act.sa_flags = libc::SA_RESETHAND;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut());
        }
    }
}

/// The service's flusher: every flush interval of the cache's config (the kernel's
/// `dirty_writeback_centisecs`), the write-back of files dirty for long or of a crowded cache
/// (`SharedCache::write_back_due`), through the descriptors writers lent; at once, for the
/// files a process asked for (`asked`, emptied by each pass); then, with the set-associative
/// index, the dirty pages the sets' hands reach next (`SharedCache::write_back_next_to_go`);
/// and, with the two-layer allocator, reclaim into its pool while it is short
/// (`Inner::reclaim`), which a miss that finds it short asks for as a writer asks for
/// write-back.
fn flush(
    cache: &SharedCache,
    lent: &Mutex<HashMap<u32, Arc<Lent>>>,
    asked: &Mutex<Vec<u32>>,
    stop: &AtomicBool,
) {
    let mut hands = Vec::new();
    // Relaxed: set before the unpark that ends a park.
    while !stop.load(Ordering::Relaxed) {
        if asked.lock().unwrap_or_else(|p| p.into_inner()).is_empty() {
            std::thread::park_timeout(cache.inner.view.header().flush_interval());
        }
        let now = std::mem::take(&mut *asked.lock().unwrap_or_else(|p| p.into_inner()));
        let files: Vec<(u32, Arc<Lent>)> =
            lent.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(s, f)| (*s, f.clone())).collect();
        cache.write_back_due(&files, &now);
        cache.write_back_next_to_go(&files, &mut hands);
        cache.inner.reclaim();
    }
}

/// Answers attaches, keeps lent descriptors, passes requests for write-back to the flusher
/// (`ask`: a file's slot, or None for a pass over the crowd), repairs after hang-ups and
/// writes back orphans, until the service has been idle for `opts.idle` or a signal stops it
/// ([`stop_on_signals`]); whether no process was attached through it at the end.
fn serve_loop(
    opts: &ServeOptions,
    cache: &SharedCache,
    listener: &UnixListener,
    lent: &Mutex<HashMap<u32, Arc<Lent>>>,
    ask: &dyn Fn(Option<u32>),
) -> bool {
    let mut attached: Vec<UnixStream> = Vec::new();
    let mut idle_since = Instant::now();
    let mut said_stuck = false;
    // Relaxed: see `on_stop`.
    while !STOP.load(Ordering::Relaxed) {
        let mut fds: Vec<libc::pollfd> = std::iter::once(listener.as_raw_fd())
            .chain(attached.iter().map(|s| s.as_raw_fd()))
            .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 })
            .collect();
        // SAFETY: `fds` is a valid array of its length for the call.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 1000) };
        let mut hung_up = false;
        for i in (1..fds.len()).rev() {
            if fds[i].revents == 0 {
                continue;
            }
            let mut msg = [0u8; 5];
            match handoff::recv_msg(&attached[i - 1], &mut msg) {
                Ok((5, fd)) if msg[0] == b'F' => {
                    let slot = u32::from_le_bytes([msg[1], msg[2], msg[3], msg[4]]);
                    // Without its descriptor (we were out of them): nothing to keep.
                    if let Some(fd) = fd.filter(|fd| cache.accept_lent_fd(slot, fd)) {
                        let direct = cache.inner.direct_write_back();
                        lent.lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(slot, Arc::new(Lent::new(std::fs::File::from(fd), direct)));
                    }
                }
                Ok((5, None)) if msg[0] == b'W' => {
                    let slot = u32::from_le_bytes([msg[1], msg[2], msg[3], msg[4]]);
                    // `asked` is cleared by the pass that writes the file back.
                    if cache.inner.view.files().get(slot as usize).is_some() {
                        ask(Some(slot));
                    }
                }
                // A writer past the background ratio: a pass now (`Inner::kick_write_back`).
                Ok((5, None)) if msg[0] == b'B' => ask(None),
                // A hang-up, or what a peer should not send: it goes.
                _ => {
                    attached.swap_remove(i - 1);
                    hung_up = true;
                }
            }
        }
        if fds[0].revents != 0 {
            while let Ok((sock, _)) = listener.accept() {
                if let Some(s) = answer(cache, sock) {
                    attached.push(s);
                }
            }
        }
        if hung_up || cache.repair_dead() > 0 {
            cache.repair_dead();
        }
        // At every wake-up: it also closes lent descriptors of files closed and unlinked (a
        // journal per transaction), whose inodes and blocks wait for that close.
        let stranded = cache.write_back_orphans(&mut lent.lock().unwrap_or_else(|p| p.into_inner()));
        if !attached.is_empty() || cache.client_count() > 1 {
            idle_since = Instant::now();
        } else if idle_since.elapsed() >= opts.idle {
            if stranded == 0 {
                break;
            }
            if !std::mem::replace(&mut said_stuck, true) {
                log::error!(
                    "upcache serve: {stranded} dirty pages of files no process can write back; staying until one opens them"
                );
            }
        }
    }
    attached.is_empty()
}

/// The forked service's log: one line per record, appended to a file.
struct FileLog(std::sync::Mutex<std::fs::File>);

impl log::Log for FileLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Info
    }

    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            let mut f = self.0.lock().unwrap_or_else(|p| p.into_inner());
            let _ = writeln!(f, "{} {} {}", utc(now), r.level(), r.args());
        }
    }

    fn flush(&self) {}
}

/// Writes `title` over this process's argument area, as setproctitle(3) does, so that its
/// command line (`/proc/self/cmdline`, what `ps` shows) is the title, cut to the area's
/// length: a service forked from a program must not pass for it.
fn set_title(title: &str) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return };
    // The fields after the command name's ")": the third field first; arg_start is the 48th,
    // arg_end the 49th (proc(5)).
    let Some(close) = stat.rfind(')') else { return };
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<usize>().ok());
    let (Some(start), Some(end)) = (field(48), field(49)) else { return };
    if start == 0 || end <= start + 1 {
        return;
    }
    let area = end - start;
    let n = title.len().min(area - 1);
    // SAFETY: [start, end) is this process's argument area (the kernel's mm->arg_start..
    // arg_end, in its stack, writable), which nothing in this process reads any more: the
    // service is a fork that runs only `serve`.
    unsafe {
        std::ptr::copy_nonoverlapping(title.as_ptr(), start as *mut u8, n);
        std::ptr::write_bytes((start + n) as *mut u8, 0, area - n);
    }
}

/// `since_epoch` as an RFC 3339 UTC time with milliseconds, "2026-11-27T21:30:00.123Z".
fn utc(since_epoch: Duration) -> String {
    let secs = since_epoch.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days to a civil date (Howard Hinnant's algorithm, in eras of 400 years from 0000-03-01).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        since_epoch.subsec_millis()
    )
}

trait Mode0600 {
    fn mode_0600(&mut self) -> &mut Self;
}

impl Mode0600 for std::fs::OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::mode(self, 0o600)
    }
}

/// Serves one connection's request; the stream if the process attached.
fn answer(cache: &SharedCache, mut sock: UnixStream) -> Option<UnixStream> {
    let _ = sock.set_nonblocking(false);
    let _ = sock.set_read_timeout(Some(Duration::from_secs(5)));
    let mut req = [0u8];
    if sock.read_exact(&mut req).is_err() {
        return None;
    }
    match req[0] {
        b'A' => match handoff::offer(&sock, cache.segment()) {
            Ok(()) => Some(sock),
            Err(e) => {
                log::warn!("upcache serve: refused an attach: {e}");
                None
            }
        },
        b'S' => {
            let _ = sock.write_all(status_text(cache).as_bytes());
            None
        }
        b'J' => {
            let _ = sock.write_all(json_of(cache).as_bytes());
            None
        }
        _ => None,
    }
}

fn status_text(cache: &SharedCache) -> String {
    status_fields(cache).iter().map(|(name, text, _)| format!("{name} {text}\n")).collect()
}

/// The status as one JSON object: the service's pid, the cache's size in bytes, and every
/// count of [`super::SharedStatus`].
fn json_of(cache: &SharedCache) -> String {
    let fields: Vec<String> = status_fields(cache)
        .into_iter()
        .filter(|(name, _, _)| *name != "hit_ratio")
        .map(|(name, _, json)| format!("\"{name}\":{json}"))
        .collect();
    format!("{{{}}}\n", fields.join(","))
}

/// The status's fields, in order: name, value as text, value as JSON.
fn status_fields(cache: &SharedCache) -> Vec<(&'static str, String, String)> {
    let (s, c, chunks, l) = (cache.status(), cache.inner.config(), cache.chunks(), cache.latencies());
    // A histogram's median and 99th percentile (bucket bounds), in microseconds, and count.
    let quantiles = |h: &crate::metrics::latency::LatencyHistogram| {
        let us = |q: f64| h.quantile(q).map_or(0.0, |d| d.as_secs_f64() * 1e6);
        let (p50, p99, n) = (us(0.5), us(0.99), h.count());
        (
            format!("p50 {p50:.1} p99 {p99:.1} (of {n})"),
            format!("{{\"p50\":{p50},\"p99\":{p99},\"count\":{n}}}"),
        )
    };
    let mb = |frames: u64| frames as f64 * cache.page_size() as f64 / (1 << 20) as f64;
    let same = |v: String| (v.clone(), v);
    let count = |v: u64| same(v.to_string());
    let name = |v: &str| (v.to_string(), format!("\"{v}\""));
    let switch = |on: bool| (crate::units::on_off(on).to_string(), on.to_string());
    let pair = |a: String, b: String| (format!("{a},{b}"), format!("[{a},{b}]"));
    let clients: Vec<String> = s.clients.iter().map(u32::to_string).collect();
    let st = &s.stats;
    let head = [
        ("service_pid", count(std::process::id() as u64)),
        (
            "memory_bytes",
            (format!("{} ({:.0} MiB)", cache.memory(), mb(st.frames)), cache.memory().to_string()),
        ),
        ("memory_made_bytes", count(c.memory)),
        ("page_size", count(c.page_size as u64)),
        (
            "cached",
            (
                format!("{} ({:.1}%)", s.cached, 100.0 * s.cached as f64 / st.frames.max(1) as f64),
                s.cached.to_string(),
            ),
        ),
        ("locked", count(s.locked)),
        ("files", count(s.files)),
        ("hit_ratio", same(format!("{:.1}%", 100.0 * st.hits as f64 / (st.hits + st.misses).max(1) as f64))),
    ];
    // The counts every cache reports, by their names in `Stats`.
    let counts = st.fields().map(|(n, v)| (n, count(v)));
    let rest = [
        ("free_frames", count(s.free_frames)),
        ("read_latency_us", quantiles(&l.read)),
        ("write_latency_us", quantiles(&l.write)),
        ("sync_latency_us", quantiles(&l.sync)),
        ("repairs", count(s.repairs)),
        ("write_back_batches", count(s.write_back_batches)),
        ("index", name(c.index.name())),
        ("set_ways", count(c.set_ways as u64)),
        ("numa", name(&c.numa.name())),
        ("index_nodes", pair(s.index_nodes.0.to_string(), s.index_nodes.1.to_string())),
        ("index_full", count(s.index_full)),
        ("flushers", count(c.flushers as u64)),
        ("flusher_files", same(format!("{:?}", s.flusher_files))),
        ("writer_write_backs", count(s.writer_write_backs)),
        ("writer_pauses", count(s.writer_pauses)),
        ("next_to_go_written", count(s.next_to_go_written)),
        ("behind_pages", count(s.behind_pages)),
        ("dirty_ratios", pair(c.dirty_ratios.0.to_string(), c.dirty_ratios.1.to_string())),
        ("dirty_expire_ms", count(c.dirty_expire.as_millis() as u64)),
        ("flush_interval_ms", count(c.flush_interval.as_millis() as u64)),
        ("range_lock", switch(c.range_lock)),
        ("run_merging", switch(c.run_merging)),
        ("bundling", switch(c.bundling)),
        ("direct_write_back", switch(c.direct_write_back)),
        ("direct_loads", switch(c.direct_loads)),
        ("io", name(c.io.name())),
        ("policy", name(c.policy.name())),
        ("clean_first", name(c.clean_first.name())),
        ("flush", name(c.flush.name())),
        ("streams", switch(c.streams)),
        ("huge_pages", switch(c.huge_pages)),
        ("hot_index", switch(c.hot_index)),
        ("alloc", name(c.alloc.name())),
        ("prefault", switch(c.prefault)),
        ("reclaimed", count(st.reclaimed)),
        ("huge_chunks", pair(chunks.0.to_string(), chunks.1.to_string())),
        ("chunks", count(chunks.2)),
        ("readahead", count(c.readahead)),
        ("clients", (format!("{}: {:?}", s.clients.len(), s.clients), format!("[{}]", clients.join(",")))),
    ];
    let fields = head.into_iter().chain(counts).chain(rest);
    fields.into_iter().map(|(n, (text, json))| (n, text, json)).collect()
}

/// The status report of the service at `socket`.
pub fn status(socket: &Path) -> Result<String> {
    ask(socket, b'S')
}

/// The status report of the service at `socket` as one JSON object: `service_pid`,
/// `memory_bytes`, `cached`, `locked`, `files`; every count of [`crate::Stats`] by its name
/// (`hits`, `misses`, `evictions`, `read_bytes`, `writeback_bytes`, `dirty_pages`, `frames`, ...);
/// the shared cache's own counts (`repairs`, `write_back_batches`, `index_nodes`, `index_full`,
/// `flusher_files`, `writer_write_backs`, `writer_pauses`, `next_to_go_written`,
/// `behind_pages`); its settings (`index`, `set_ways`, `numa`, `flushers`, `dirty_ratios`,
/// `dirty_expire_ms`, `flush_interval_ms`, `range_lock`, `run_merging`, `bundling`,
/// `direct_write_back`, `direct_loads`, `io`, `policy`, `clean_first`, `flush`, `streams`,
/// `huge_pages`, `hot_index`, `readahead`); `huge_chunks` (the frames' 2 MiB chunks on huge
/// pages, and those in use not known to be), `chunks` (their number) and `clients`.
pub fn status_json(socket: &Path) -> Result<String> {
    ask(socket, b'J')
}

fn ask(socket: &Path, request: u8) -> Result<String> {
    let mut sock =
        UnixStream::connect(socket).map_err(|e| Error::io(format!("connect to {}", socket.display()), e))?;
    // A stopped service must not hang the asker.
    let _ = sock.set_read_timeout(Some(Duration::from_secs(10)));
    sock.write_all(&[request]).map_err(|e| Error::io("ask for the status", e))?;
    let mut out = String::new();
    sock.read_to_string(&mut out).map_err(|e| Error::io("read the status", e))?;
    Ok(out)
}

/// Attaches to the service at `socket`; an `Io` error if it does not answer in 30 s. A
/// stopped service is not waited for: its cache is attached to through `/proc` at once, and
/// linked to once it answers.
pub fn connect(socket: &Path) -> Result<SharedCache> {
    connect_within(socket, ANSWER_TIMEOUT)
}

/// As [`connect`], waiting at most `timeout` for the service's answer.
pub fn connect_within(socket: &Path, timeout: Duration) -> Result<SharedCache> {
    connect_for(socket, timeout, DEFAULT_IDLE)
}

/// How often a process waiting for a service's answer looks whether the service is stopped.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// What an attach request came to.
enum Answer {
    /// The service's connection and its segment.
    Segment(UnixStream, OwnedFd),
    /// The service is stopped; its record says where its segment is.
    Stopped(Record),
    /// No answer in the time given.
    Silent,
}

/// The record of the service at `socket`, if that service is stopped.
fn stopped_service(socket: &Path) -> Option<Record> {
    Record::read(&lock_path(socket)).filter(|r| holder::stopped(r.pid))
}

/// Whether the service at `socket` is stopped (SIGSTOP, or traced) and serves `seg` (its
/// record names the segment's identity): then it still maps `seg`.
pub(crate) fn stopped_service_maps(socket: &Path, seg: &Segment) -> bool {
    let ours = holder::identity(&seg.as_fd());
    stopped_service(socket).is_some_and(|r| ours == Some((r.dev, r.ino)))
}

/// Connects to `socket` and asks for the segment, waiting up to `timeout` for the answer but
/// not for a stopped service.
fn ask_for_segment(socket: &Path, timeout: Duration) -> Result<Answer> {
    // Not even a connection for a stopped service: each would wait in its backlog, which a
    // newcomer's connect then waits for once full.
    if let Some(rec) = stopped_service(socket) {
        return Ok(Answer::Stopped(rec));
    }
    let mut sock = UnixStream::connect(socket).map_err(|e| {
        let what = format!("connect to {}", socket.display());
        match e.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => {
                Error::with_source(ErrorKind::PermissionDenied, what, e)
            }
            _ => Error::io(what, e),
        }
    })?;
    let hung = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::with_source(
            ErrorKind::Io,
            format!("the cache service at {} did not answer in {timeout:?}", socket.display()),
            e,
        ),
        _ => Error::io("attach to the cache service", e),
    };
    sock.set_write_timeout(Some(timeout)).map_err(hung)?;
    sock.write_all(b"A").map_err(hung)?;
    sock.set_read_timeout(Some(LOOK_EVERY.min(timeout))).map_err(hung)?;
    let deadline = Instant::now() + timeout;
    loop {
        match handoff::receive_fd(&sock) {
            Ok(fd) => {
                // Attached: from now on a read waits for the service's hang-up.
                sock.set_read_timeout(None).map_err(hung)?;
                sock.set_write_timeout(None).map_err(hung)?;
                return Ok(Answer::Segment(sock, fd));
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ETIMEDOUT)) => {
                if let Some(rec) = stopped_service(socket) {
                    return Ok(Answer::Stopped(rec));
                }
                if Instant::now() >= deadline {
                    return Ok(Answer::Silent);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// As [`connect`], a service started in place of a dead one staying `idle` with nobody
/// attached.
fn connect_for(socket: &Path, timeout: Duration, idle: Duration) -> Result<SharedCache> {
    match ask_for_segment(socket, timeout)? {
        Answer::Segment(sock, fd) => SharedCache::join_with(Segment::attach(fd)?, Some(sock), socket, idle),
        Answer::Silent => Err(Error::new(
            ErrorKind::Io,
            format!("the cache service at {} did not answer in {timeout:?}", socket.display()),
        )),
        Answer::Stopped(rec) => {
            // Or its file, if that is the segment the record names.
            let named = || named::segment_file(socket).and_then(|p| holder::open_if(&p, &rec));
            let fd = holder::find(&rec).or_else(named).ok_or_else(|| {
                Error::new(
                    ErrorKind::Io,
                    format!(
                        "the cache service at {} is stopped, and its cache cannot be reached",
                        socket.display()
                    ),
                )
            })?;
            log::warn!("upcache: the cache service (pid {}) is stopped; attached without it", rec.pid);
            SharedCache::join_with(Segment::attach(fd)?, None, socket, idle)
        }
    }
}

/// For a process attached to `seg` whose service went: the connection to the service at
/// `socket` if it serves `seg`; None if it does not answer soon or is stopped (ask again
/// later); `LayoutMismatch` if it serves another segment; another error if none listens.
pub(crate) fn attach_to_segment(socket: &Path, seg: &Segment) -> Result<Option<UnixStream>> {
    match ask_for_segment(socket, Duration::from_secs(2)) {
        Ok(Answer::Segment(sock, fd)) => {
            let served = holder::identity(&fd);
            if served.is_some() && served == holder::identity(&seg.as_fd()) {
                Ok(Some(sock))
            } else {
                Err(Error::new(
                    ErrorKind::LayoutMismatch,
                    format!("the service at {} now serves another cache", socket.display()),
                ))
            }
        }
        Ok(Answer::Stopped(_) | Answer::Silent) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Starts a service at `socket` in place of a dead one (it adopts the dead one's segment
/// from a process that maps it); returns once it listens or another did first.
pub(crate) fn start_replacement(socket: &Path, config: &SharedConfig, idle: Duration) -> Result<()> {
    let opts = ServeOptions { socket: socket.to_path_buf(), config: config.clone(), idle };
    start(&opts).map(|_| ())
}

/// Attaches to the service at `socket`, starting one (a detached process forked from this one,
/// which runs [`serve`] with `config` and `idle`) if none answers.
pub fn connect_or_start(socket: &Path, config: &SharedConfig, idle: Duration) -> Result<SharedCache> {
    let connect = |socket: &Path| connect_for(socket, ANSWER_TIMEOUT, idle);
    match connect(socket) {
        Ok(c) => return Ok(c),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => return Err(e),
        Err(_) => {}
    }
    let opts = ServeOptions { socket: socket.to_path_buf(), config: config.clone(), idle };
    let mut pause = Duration::from_millis(1);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if start(&opts)? != b'L' {
            return connect(socket);
        }
        // Another process started one at the same moment: ours found its lock taken and left,
        // and that one may not listen yet, or may have failed since: tried again, backing off,
        // starting one anew while none answers.
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
        match connect(socket) {
            Err(e) if e.kind() != ErrorKind::PermissionDenied && Instant::now() < deadline => {}
            r => return r,
        }
    }
}

/// Forks a detached service and waits until its socket listens, it finds another's lock
/// (`L`), or it fails (neither `R` nor `L`).
fn start(opts: &ServeOptions) -> Result<u8> {
    let mut pipe = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `pipe`.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::io("make a pipe", std::io::Error::last_os_error()));
    }
    // SAFETY: fresh descriptors we own.
    let (rx, tx) = unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
    // SAFETY: fork; the child only calls `daemon_main`, which never returns.
    match unsafe { libc::fork() } {
        -1 => return Err(Error::io("fork the cache service", std::io::Error::last_os_error())),
        0 => daemon_main(opts, tx),
        child => {
            drop(tx);
            let mut status = 0;
            // SAFETY: waits for our own child, which exits as soon as it forked again.
            unsafe { libc::waitpid(child, &mut status, 0) };
        }
    }
    // `R` once the socket listens, `L` if another service had the lock, end of file if it
    // failed.
    let mut byte = [0u8];
    let _ = std::fs::File::from(rx).read(&mut byte);
    Ok(byte[0])
}

fn daemon_main(opts: &ServeOptions, tx: OwnedFd) -> ! {
    // Relaxed: see `is_service`.
    SERVICE.store(true, Ordering::Relaxed);
    // SAFETY: setsid and fork in the child; the intermediate child exits at once, so the
    // service is re-parented and never becomes a zombie of the program that started it. The
    // name, for ps and top, is a static C string.
    unsafe {
        libc::setsid();
        if libc::fork() != 0 {
            libc::_exit(0);
        }
        libc::prctl(libc::PR_SET_NAME, c"upcache-serve".as_ptr());
    }
    // And for `ps`'s command line, which would show the program that started us.
    set_title(&format!("upcache serve --socket {}", opts.socket.display()));
    // SAFETY: as above: signal and resource calls of this child on its own state.
    unsafe {
        // Nothing of the starting program's signal state: the shim starts the cache with every
        // signal blocked, and a C program may ignore or handle any; the service must die of
        // SIGTERM as a service does.
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        for sig in 1..libc::SIGRTMIN() {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        // But for a broken pipe: a process that stopped waiting for an answer (a status asked
        // of a service that was stopped) must not end the service by hanging up.
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    // And SIGTERM ends it as idleness does, so its cache's file does not outlive it for nothing.
    stop_on_signals();
    // SAFETY: as above.
    unsafe {
        // Nor its working directory (a mount kept busy), and room for two descriptors per
        // file written: the hard limit.
        libc::chdir(c"/".as_ptr());
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
    // Nothing of the program that started us stays open here: a pipe held open would keep its
    // reader waiting for end of file for as long as the service lives.
    let keep = tx.as_raw_fd();
    // SAFETY: closes descriptors this process inherited and does not use; reopens 0-2 on
    // /dev/null.
    unsafe {
        let devnull = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        for fd in 0..3 {
            libc::dup2(devnull, fd);
        }
        // close_range (Linux 5.9) in one call each side of `keep`; a loop where it is missing.
        let below =
            if keep > 3 { libc::syscall(libc::SYS_close_range, 3u32, (keep - 1) as u32, 0u32) } else { 0 };
        let above = libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32);
        if below != 0 || above != 0 {
            let max = libc::sysconf(libc::_SC_OPEN_MAX).clamp(1024, 1 << 20) as i32;
            for fd in 3..max {
                if fd != keep {
                    libc::close(fd);
                }
            }
        }
    }
    // What it does and refuses goes to `<socket>.log`, its stderr being gone.
    let _ = private_dir(&opts.socket);
    let mut log_path = opts.socket.as_os_str().to_owned();
    log_path.push(".log");
    if let Ok(f) = std::fs::OpenOptions::new().create(true).append(true).mode_0600().open(&log_path) {
        if log::set_logger(Box::leak(Box::new(FileLog(std::sync::Mutex::new(f))))).is_ok() {
            log::set_max_level(log::LevelFilter::Info);
        }
    }
    let tx = std::cell::RefCell::new(Some(std::fs::File::from(tx)));
    let r = serve(opts, |_| {
        if let Some(mut t) = tx.borrow_mut().take() {
            let _ = t.write_all(b"R");
        }
    });
    let code = match r {
        Ok(true) => 0,
        Ok(false) => {
            if let Some(mut t) = tx.borrow_mut().take() {
                let _ = t.write_all(b"L");
            }
            0
        }
        Err(e) => {
            log::error!("upcache serve: {e}");
            1
        }
    };
    // SAFETY: ends the service without running the starting program's exit handlers.
    unsafe { libc::_exit(code) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_times_are_utc_dates() {
        assert_eq!(utc(Duration::ZERO), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(Duration::from_secs(951_868_799)), "2000-02-29T23:59:59.000Z");
        assert_eq!(utc(Duration::from_millis(1_795_815_000_250)), "2026-11-27T21:30:00.250Z");
    }

    /// The status reports every count of `Stats` under its own name, with the cache's value,
    /// in the JSON and in the text.
    #[test]
    fn the_status_reports_the_stats_by_their_names() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 64 << 10]).unwrap();
        let cache = SharedCache::create(&super::super::tests::small()).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let mut buf = vec![0u8; 8 << 10];
        for at in [0, 4096, 0, 32 << 10] {
            f.read_at(&mut buf, at).unwrap();
        }
        f.write_at(&[1u8; 4096], 8192).unwrap();
        cache.wait_for_readahead();
        let (json, text) = (json_of(&cache), status_text(&cache));
        let stats = cache.status().stats;
        let json: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert!(stats.hits > 0 && stats.misses > 0 && stats.dirty_pages == 1, "{stats:?}");
        for (name, value) in stats.fields() {
            assert_eq!(json[name].as_u64(), Some(value), "{name} in {json}");
            assert!(text.contains(&format!("\n{name} {value}\n")), "{name} {value} in:\n{text}");
        }
        drop(f);
    }
}
