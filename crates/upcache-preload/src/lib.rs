//! LD_PRELOAD shim (issue 7): unmodified programs' data I/O on regular files under
//! `UPCACHE_PREFIX` is served by upcache's shared cache, which every process attaches to
//! (issue 17, [`upcache::shared`]), or by the same engine on a segment of this process alone
//! (`UPCACHE_SHARED=0`, [`upcache::shared::SharedCache::create_private`]; `backend.rs`). Every
//! other call, and every file outside the prefix, goes to libc untouched.
//!
//! ```text
//! UPCACHE_PREFIX=/data/db LD_PRELOAD=libupcache_preload.so sqlite3 /data/db/x.sqlite
//! ```
//!
//! Environment:
//! - `UPCACHE_PREFIX`: the directory whose files are cached (resolved, symlinks and all).
//!   Unset: the shim does nothing.
//! - `UPCACHE_MEMORY`: the cache's memory for pages, bytes with an optional K/M/G suffix;
//!   default 256M (for the shared cache: when this process starts its service).
//! - `UPCACHE_SHARED`: 1 (the default) for the shared cache, 0 for a cache of this process's
//!   own (the same engine and settings; its write-back done by a thread of the process).
//! - `UPCACHE_SOCKET`: the shared cache's socket; default `/tmp/upcache-<uid>/cache.sock`.
//!   The first process to find none there starts the service (`upcache serve`, forked).
//! - `UPCACHE_IDLE`: seconds a service this process starts stays with nobody attached;
//!   default 60.
//! - `UPCACHE_STATS`: a file that each process appends a line of counters to at exit (its
//!   own, then the cache's `upcache::Stats` as `cache.<name>=`).
//! - `UPCACHE_DIRECT`: 0 to read and write the files through the kernel's page cache (misses
//!   then find pages other processes left there, for twice the memory): the default of
//!   `UPCACHE_DIRECT_WRITE_BACK` and `UPCACHE_DIRECT_LOADS` then off; 1 (the default) leaves
//!   them on.
//!
//! How a call is served:
//! - the app's file descriptor is always a real one, opened by libc, so locks, `fstat`,
//!   `fcntl` and `poll` work as before; the shim keeps a table from descriptor to cached file
//!   (`table.rs`), and the file offset stays in the kernel (`read`/`write` read it and move
//!   it), so dup'ed, inherited and exec'ed descriptors agree on it;
//! - a file is adopted after libc opened it, if the descriptor's resolved path
//!   (`/proc/self/fd`) is under the prefix: paths outside are never cached or changed;
//! - the last close of a file writes its dirty pages back to it (no fsync, as close(2)),
//!   and so do exit, `_exit`, exec (the execl family through assembly trampolines),
//!   posix_spawn, system, popen, a kernel copy (`sendfile`, `splice`, ...) from it, and a
//!   fatal signal (`signals.rs`: the process then dies as it would have);
//! - a file that something else is about to write or read without the shim is *demoted*:
//!   written back, and every descriptor of it handed to libc, and never cached again in the
//!   process (on the shared cache, in any attached process: `SharedFile::bypass`, while
//!   the cache's file table remembers the file). That is done to files a forked child inherits (not close-on-exec), that reach
//!   stdin, stdout, stderr or a descriptor a stdio stream wraps (`stdio.rs`: a shell's
//!   `echo hello > f`), by `fdopen`, `fopen`, `freopen` and `mmap` of them, and by POSIX or
//!   Linux AIO and `dprintf` on them (`bypass.rs`); an io_uring stops caching for the
//!   process; kernel copies into a cached file are served (`copy.rs`);
//! - growth of a cached file by another process is seen by `fstat`, `lseek(SEEK_END)`,
//!   appends and reads past the cached end (`tail -f`), and a write-back never cuts it;
//! - the file system's largest file and RLIMIT_FSIZE fail the write that crosses them (EFBIG);
//!   a full file system fails the write that does not fit (ENOSPC, or a short count), since
//!   the cache reserves space as a write extends a file (`io/reserve.rs`);
//! - a forked child of a process on the shared cache serves the cached descriptors it
//!   inherited (close-on-exec ones; inheritable ones are demoted before the fork) through the
//!   same cache as a client of its own, from its first use of one (`Shim::take_over`); on a
//!   private cache it starts without one: inherited descriptors go to libc, new opens make the
//!   child's own cache (`shim.rs`; the parent's segment, mapped shared, stays untouched in the
//!   child); `vfork` is a fork (its child would share the table);
//! - the program's POSIX record locks (`fcntl`, `lockf`) are never dropped by the cache's own
//!   descriptors: those of a file the program locked are closed only when the program closes
//!   one of its own (`locks.rs`, `upcache::shared::note_lock`); a file read only is cached
//!   through a read-only descriptor (an exec of it would fail with ETXTBSY otherwise);
//! - an O_APPEND write finds the end and writes in one step against every appender in any
//!   process on the shared cache (a private cache's, against those of its process);
//! - a process that changes its user or groups (setuid and kin) leaves the shared cache first
//!   (`creds.rs`): its files are libc's from then on, and the cache out of its reach (a
//!   private cache, which holds only the process's own files, stays);
//! - the last close keeps the file's pages in the cache, as the kernel does: a later open
//!   finds them (`SharedFile::kept`, counted as `reopened`) unless the OS file changed
//!   meanwhile (`upcache::shared`'s `outside.rs`);
//! - the shim's own libc calls, and the library's, pass through (`guard.rs`);
//! - if the shim cannot start (bad environment, no memory), it says so once on stderr and
//!   passes everything through.
//!
//! Not served: a process that opens a cached file without the shim sees the cache's writes
//! only once they are written back (the last writable close, fsync, exit, a fatal signal), and
//! the cache sees its changes not at once but at the next open, lock or clock tick (1-4 ms)
//! after its last look (`upcache::shared`'s `outside.rs`); with a private cache SIGKILL and the OOM killer lose what is not written back yet (the shared
//! cache keeps it, and its service writes it back through a descriptor the writer lent it);
//! the `__xstat` family of binaries built for glibc < 2.33 reports the OS
//! size; the execl family and `dprintf` are interposed only on x86-64. Nor are the raw system
//! calls of statically linked programs, which load no shim. `open` and `fcntl` are declared
//! with fixed arguments, correct on the x86-64 and aarch64 Linux ABIs only (other targets do
//! not compile). A bad buffer pointer other than null faults where the kernel would return
//! EFAULT.
//!
//! # Structure
//! A cached descriptor leads to its `Description` (one per open: access mode, O_APPEND, the
//! offset lock), which leads to its `Shared` (one per inode, found by (device, inode) in a
//! map of weak references; the last reference to go closes the file) (`shim.rs`).
//!
//! Modules, from the leaves up (no file imports one above it; `tests/imports.rs` checks that
//! no circle forms): `real`, `errno`, `guard`, `settings`, `backend`, `stdio`, `table`
//! (generic), `os`, `limits`, `signals` (knows the running shim's `Rescue`, not the shim);
//! `shim` (state, start, fork and exit); `locks`, `creds`; `open`, `meta`; `data`; `copy`;
//! `bypass`; `process`.
//!
//! Unsafe code: the workspace denies `unsafe_op_in_unsafe_fn` and
//! `clippy::undocumented_unsafe_blocks`, so every call into libc or through a caller's pointer
//! is an unsafe block with its own SAFETY comment, in the C entry points too. Entry points that
//! differ only by name (the 64-bit twins; the open, stat, exec, AIO and data families) are
//! generated by one macro per family from a table (`served!`, `adopted!`, `stats!`,
//! `written_back_first!`, ...).

#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
compile_error!("the shim interposes glibc on x86-64 and aarch64 Linux only (variadic open/fcntl)");

mod backend;
mod bypass;
mod copy;
mod creds;
mod data;
mod errno;
mod guard;
mod limits;
mod locks;
mod meta;
mod open;
mod os;
mod process;
mod real;
mod settings;
mod shim;
mod signals;
mod stdio;
mod table;

pub use settings::parse_size;
