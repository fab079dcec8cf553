//! An attached process's link to the service: the connection whose hang-up tells each side
//! the other is gone, the descriptors lent over it, and what happens when the service goes.
//!
//! The service is replaceable, as the kernel's page cache outlives any process: when it dies,
//! each attached process's watcher reconnects, starting a new service if none answers; the
//! new one adopts the segment from a live process that maps it (`holder.rs`) instead of
//! making another, repairs what the dead one held, and is lent every writable descriptor
//! again. While the service is stopped, the watcher waits (attaches go around it, through
//! `/proc`). Only if the service that answers serves another segment (two caches of one file
//! would not be coherent) does the process write back and fail its calls, as before.

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::{serve, Inner};
use crate::error::{Error, Result};

/// The link of one attachment.
pub(crate) struct Link {
    /// The service's socket, to reconnect to; None for a cache attached by hand.
    pub socket: Option<PathBuf>,
    /// The idle time of a service this process starts to replace a dead one.
    pub idle: Duration,
    /// The connection, None while there is no service to talk to.
    pub stream: Mutex<Option<UnixStream>>,
}

impl Link {
    pub fn new(socket: Option<PathBuf>, idle: Duration, stream: Option<UnixStream>) -> Link {
        Link { socket, idle, stream: Mutex::new(stream) }
    }

    fn current(&self) -> Option<UnixStream> {
        let s = self.stream.lock().unwrap_or_else(|p| p.into_inner());
        s.as_ref().and_then(|s| s.try_clone().ok())
    }

    /// Sends one message (with a descriptor) to the service, if there is one, without waiting
    /// for a service that reads nothing (stopped): such a lend is lost, and the service writes
    /// back through the file's recorded path if it must.
    pub fn send(&self, msg: &[u8], fd: Option<i32>) -> Result<()> {
        let s = self.stream.lock().unwrap_or_else(|p| p.into_inner());
        match s.as_ref() {
            Some(stream) => crate::shm::handoff::send_msg_now(stream, msg, fd),
            None => Ok(()), // lent again when the link is back
        }
    }

    /// Whether there is a service to talk to.
    pub fn linked(&self) -> bool {
        self.stream.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Sends one message (no descriptor) to the service; false if there is none to send it to
    /// (or it could not be sent now).
    pub fn tell(&self, msg: &[u8]) -> bool {
        let s = self.stream.lock().unwrap_or_else(|p| p.into_inner());
        s.as_ref().is_some_and(|stream| crate::shm::handoff::send_msg_now(stream, msg, None).is_ok())
    }

    /// Shuts the connection down: the service sees us go, and our watcher wakes and ends.
    pub fn shut(&self) {
        if let Some(s) = self.stream.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Starts the watcher of `inner`'s link (a cache attached through a socket).
pub(crate) fn watch(inner: &Arc<Inner>) -> Result<()> {
    let (link, weak) = (inner.link.clone(), Arc::downgrade(inner));
    std::thread::Builder::new()
        .name("upcache-service-watch".into())
        .spawn(move || {
            super::quiet::library_thread();
            watcher(&link, weak)
        })
        .map(|_| ())
        .map_err(|e| Error::io("start the service watcher", e))
}

/// Waits for the service's hang-up, then puts a service back (or gives up, see the module's
/// documentation); ends when the attachment goes. It holds the attachment only while it
/// reconnects: a strong reference held by the watcher when the program lets go of the cache
/// would make the watcher run the detach, which the process's exit may then cut short (its
/// client slot left taken until the service reaps it).
fn watcher(link: &Link, weak: Weak<Inner>) {
    let mut pause = Duration::from_millis(10);
    loop {
        if let Some(stream) = link.current() {
            hung_up(&stream, -1);
            pause = Duration::from_millis(10);
        }
        // Gone, or never there (attached beside a stopped service).
        let Some(inner) = weak.upgrade() else { return };
        if inner.retired() {
            return;
        }
        match reconnect(&inner) {
            Ok(true) => continue,
            Ok(false) => {
                drop(inner);
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(e) => {
                log::error!("upcache: the shared cache's service is gone ({e}); writing back and stopping");
                inner.write_back_all_open();
                // Relaxed: a flag each call checks; our write-back is done either way.
                inner.lost.store(true, Ordering::Relaxed);
                return;
            }
        }
    }
}

/// Before `inner` detaches (or its process exits), with pages dirty: what dead writers left is
/// written back by us, through the paths their opens recorded (the service may be dying too,
/// unseen yet: a SIGKILL takes effect after `kill` returns, and ours may be the last mapping);
/// and if the service is gone, a service is put back (it adopts the segment from us) for
/// what we could not write. Gives up after a few seconds, and at once beside a stopped service.
pub(crate) fn before_leaving(inner: &Inner) {
    if inner.link.socket.is_none() || inner.forked() || inner.retired() {
        return;
    }
    // Relaxed: a count read as a hint; a page dirtied meanwhile is its writer's to write back.
    if inner.view.header().dirty.load(Ordering::Relaxed) == 0 {
        return;
    }
    inner.repair_dead();
    let stranded = inner.write_back_orphans(&mut std::collections::HashMap::new());
    // Relaxed: as above.
    if stranded == 0 && inner.view.header().dirty.load(Ordering::Relaxed) == 0 {
        return;
    }
    if inner.link.current().is_some_and(|s| !hung_up(&s, 0)) {
        return; // linked
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut pause = Duration::from_millis(5);
    while std::time::Instant::now() < deadline {
        // A stopped service of this segment still maps it, so nothing goes with ours; waiting
        // for it stalled every exit beside it (5 s at the exit handler, 5 s more at the detach).
        if inner.link.socket.as_deref().is_some_and(|s| serve::stopped_service_maps(s, &inner.view.seg)) {
            return;
        }
        match reconnect(inner) {
            Ok(true) | Err(_) => return,
            Ok(false) => std::thread::sleep(pause),
        }
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// Whether the service hung up on `stream` within `timeout_ms` (-1: waits for it). The service
/// never writes to an attached process, so any event is a hang-up (its, or our own shutdown
/// when we detach).
fn hung_up(stream: &UnixStream, timeout_ms: libc::c_int) -> bool {
    let mut pfd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(stream),
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd for the call.
        match unsafe { libc::poll(&mut pfd, 1, timeout_ms) } {
            n if n < 0 => continue, // interrupted
            n => return n != 0,
        }
    }
}

/// One try at linking `inner` to a service of its segment: true once linked (the writable
/// descriptors lent again), false to try again later (none answers yet, or it is stopped: a
/// replacement is started when none runs), an error if the service serves another segment.
fn reconnect(inner: &Inner) -> Result<bool> {
    let Some(socket) = inner.link.socket.clone() else {
        return Err(Error::new(crate::error::ErrorKind::Io, "no socket to find a new service at"));
    };
    *inner.link.stream.lock().unwrap_or_else(|p| p.into_inner()) = None;
    let stream = match serve::attach_to_segment(&socket, &inner.view.seg) {
        Ok(Some(stream)) => stream,
        Ok(None) => return Ok(false), // stopped or slow: wait for it
        Err(e) if e.kind() == crate::error::ErrorKind::LayoutMismatch => return Err(e),
        Err(_) => {
            // Nobody listens: a replacement, which adopts our segment (`holder.rs`). Another
            // process may be starting one at the same moment: only one gets the lock.
            let config = inner.config();
            if let Err(e) = serve::start_replacement(&socket, &config, inner.link.idle) {
                log::warn!("upcache: starting a service in place of the dead one: {e}");
            }
            return Ok(false);
        }
    };
    let stream = UnixStream::from(crate::shm::high_fd::out_of_the_way(stream.into()));
    *inner.link.stream.lock().unwrap_or_else(|p| p.into_inner()) = Some(stream);
    for (slot, fd) in inner.writable_fds() {
        if let Some(os) = fd.os() {
            inner.lend_fd(slot, os);
        }
    }
    log::warn!("upcache: linked to the shared cache's service again");
    Ok(true)
}
