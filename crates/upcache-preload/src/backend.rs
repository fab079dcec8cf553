//! Which cache serves the shim's files: the machine's shared cache (issue 17, the default),
//! which every process attaches to through its service, or a private cache of this process
//! (`UPCACHE_SHARED=0`). The rest of the shim sees one `File` and one `Backend` whatever the
//! choice.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use upcache::shared::{serve, SharedCache, SharedConfig, SharedFile};
use upcache::{Cache, Result};

/// A cached file of either cache. Cloning shares it; a shared file closes when its last clone
/// goes.
#[derive(Clone)]
pub(crate) enum File {
    Private(upcache::File),
    Shared(Arc<SharedFile>),
}

macro_rules! both {
    ($self:ident, $f:ident => $e:expr) => {
        match $self {
            File::Private($f) => $e,
            File::Shared($f) => $e,
        }
    };
}

impl File {
    pub fn name(&self) -> &str {
        both!(self, f => f.name())
    }
    /// Whether writes go through (a private cache's files always open for writing).
    pub fn writable(&self) -> bool {
        match self {
            File::Private(_) => true,
            File::Shared(f) => f.writable(),
        }
    }
    pub fn len(&self) -> u64 {
        both!(self, f => f.len())
    }
    pub fn read_at(&self, buf: &mut [u8], at: u64) -> Result<usize> {
        both!(self, f => f.read_at(buf, at))
    }
    pub fn write_at(&self, buf: &[u8], at: u64) -> Result<usize> {
        both!(self, f => f.write_at(buf, at))
    }
    pub fn write_all_at(&self, buf: &[u8], at: u64) -> Result<()> {
        both!(self, f => f.write_all_at(buf, at))
    }
    pub fn set_len(&self, len: u64) -> Result<()> {
        both!(self, f => f.set_len(len))
    }
    pub fn write_back(&self) -> Result<()> {
        both!(self, f => f.write_back())
    }
    /// Starts the write-back without waiting for it (the shared cache's service does it); the
    /// private cache writes back here.
    pub fn start_write_back(&self) -> Result<()> {
        match self {
            File::Private(f) => f.write_back(),
            File::Shared(f) => f.start_write_back(),
        }
    }
    /// As the process dies of a signal: on the shared cache, pages another process holds are
    /// passed over (it may be stopped; the cache keeps them).
    pub fn write_back_dying(&self) -> Result<()> {
        match self {
            File::Private(f) => f.write_back(),
            File::Shared(f) => f.write_back_unwaiting(),
        }
    }
    pub fn sync_data(&self) -> Result<()> {
        both!(self, f => f.sync_data())
    }
    pub fn sync_all(&self) -> Result<()> {
        both!(self, f => f.sync_all())
    }
    pub fn refresh_len(&self) -> Result<u64> {
        both!(self, f => f.refresh_len())
    }
    pub fn evict(&self, offset: u64, len: u64) -> Result<()> {
        both!(self, f => f.evict(offset, len))
    }
    /// Looks at the OS file for a change made without the cache, and takes one in (the shared
    /// cache's; a private cache is its process's alone, as the README says).
    pub fn look_outside(&self) -> Result<()> {
        match self {
            File::Private(_) => Ok(()),
            File::Shared(f) => f.look_outside(),
        }
    }
    /// Runs `change`, an OS change of the file made for the program, as the cache's own.
    pub fn changing_os<T>(&self, change: impl FnOnce() -> T) -> T {
        match self {
            File::Private(_) => change(),
            File::Shared(f) => f.changing_os(change),
        }
    }
    /// Bytes `from..to` set aside (or freed) on the file system by the program's `fallocate`
    /// (`SharedFile::note_space`); a private cache reserves as it writes.
    pub fn note_space(&self, from: u64, to: u64, set_aside: bool) {
        if let File::Shared(f) = self {
            f.note_space(from, to, set_aside);
        }
    }
    pub fn os_metadata(&self) -> Result<std::fs::Metadata> {
        both!(self, f => f.os_metadata())
    }
    /// What a new open description of the file has reported of its write-back errors: none
    /// yet (the kernel reports each error once to each description).
    pub fn description(&self) -> Reported {
        match self {
            File::Private(f) => Reported::Private(f.reopen()),
            File::Shared(f) => Reported::Shared(std::sync::atomic::AtomicU64::new(f.errors_sample())),
        }
    }
    /// fsync (`all`) or fdatasync, reporting write-back errors as to the description `r`.
    pub fn sync_for(&self, r: &Reported, all: bool) -> Result<()> {
        match (self, r) {
            (File::Shared(f), Reported::Shared(seen)) => f.sync_as(all, seen),
            (_, Reported::Private(f)) if all => f.sync_all(),
            (_, Reported::Private(f)) => f.sync_data(),
            (_, Reported::Shared(_)) if all => self.sync_all(),
            (_, Reported::Shared(_)) => self.sync_data(),
        }
    }
    /// Stops caching the file before libc reaches it: writes it back, and on the shared cache
    /// makes every process read and write it without the cache (`SharedFile::bypass`).
    pub fn stop_caching(&self) -> Result<()> {
        match self {
            File::Private(f) => f.write_back(),
            File::Shared(f) => f.bypass(),
        }
    }
    /// Whether another process stopped caching the shared file (never for a private one).
    pub fn bypassed(&self) -> bool {
        matches!(self, File::Shared(f) if f.bypassed())
    }
}

/// One open description's share of its file's write-back errors (`File::description`).
pub(crate) enum Reported {
    /// Another `upcache::File` of the same file: its own description.
    Private(upcache::File),
    /// The description's count of the errors it has reported (`SharedFile::sync_as`).
    Shared(std::sync::atomic::AtomicU64),
}

/// The cache the shim's files are in.
pub(crate) enum Backend {
    Private(Cache),
    Shared(SharedCache),
}

impl Backend {
    /// Attaches to the shared cache at the default socket, starting its service if none
    /// answers (with `config`, exiting after `idle` with nobody attached).
    pub fn shared(config: &SharedConfig, idle: Duration) -> Result<Backend> {
        serve::connect_or_start(&serve::default_socket(), config, idle).map(Backend::Shared)
    }

    /// The shared cache's size and write-back settings (its service's); None for a private one.
    pub fn shared_config(&self) -> Option<SharedConfig> {
        match self {
            Backend::Private(_) => None,
            Backend::Shared(c) => Some(c.config()),
        }
    }

    /// At exit: on the shared cache, a service put back if it died (`SharedCache::before_exit`).
    pub fn before_exit(&self) {
        if let Backend::Shared(c) = self {
            c.before_exit();
        }
    }

    /// On the shared cache, leaves it for good (`SharedCache::retire`).
    pub fn retire(&self) {
        if let Backend::Shared(c) = self {
            c.retire();
        }
    }

    pub fn is_shared(&self) -> bool {
        matches!(self, Backend::Shared(_))
    }

    /// Caches the OS file at `path` (a `/proc/self/fd/N` of the program's descriptor), named
    /// `name` in messages; on the shared cache, for writing only if `write` (a writable
    /// descriptor of the cache's would make an exec of the file fail with ETXTBSY, where the
    /// program itself only reads it).
    pub fn open(&self, path: &Path, name: &str, write: bool) -> Result<File> {
        match self {
            Backend::Private(c) => c.open_path_as(path, false, name).map(File::Private),
            Backend::Shared(c) => match c.open_path_as(path, write, name) {
                Err(e) if write && e.kind() == upcache::ErrorKind::PermissionDenied => {
                    c.open_path_as(path, false, name)
                }
                r => r,
            }
            .map(|f| File::Shared(Arc::new(f))),
        }
    }

    /// Closes `file` after the program's last descriptor of it went; the error of its
    /// write-back, if it had one.
    pub fn close(&self, file: File) -> Result<()> {
        match (self, file) {
            (Backend::Private(c), File::Private(f)) => c.close_plain(&f),
            (_, File::Shared(f)) => match Arc::try_unwrap(f) {
                Ok(f) => f.close(),
                Err(_) => Ok(()), // a write-back of every file holds it for a moment
            },
            (Backend::Shared(_), File::Private(_)) => Ok(()),
        }
    }

    /// Forgets `file` without writing it back (its OS file is libc's now).
    pub fn discard(&self, file: &File) -> Result<()> {
        match (self, file) {
            (Backend::Private(c), File::Private(f)) => c.discard_plain(f),
            _ => Ok(()),
        }
    }

    pub fn written_back_bytes(&self) -> u64 {
        match self {
            Backend::Private(c) => c.written_back_bytes(),
            Backend::Shared(c) => c.written_back_bytes(),
        }
    }

    /// (hits, misses, bytes written back) for the statistics line: this process's lookups; on
    /// the shared cache the bytes written back by every process (a page is written back by
    /// whichever process or service comes first).
    pub fn counts(&self) -> (u64, u64, u64) {
        match self {
            Backend::Private(c) => {
                let s = c.stats();
                (s.hits, s.misses, s.writeback_bytes)
            }
            Backend::Shared(c) => {
                let (hits, misses) = c.own_counts();
                (hits, misses, c.written_back_bytes())
            }
        }
    }
}
