//! The shim's files in its cache: one engine, on the machine's shared segment (issue 17, the
//! default), which every process attaches to through its service, or on a segment of this
//! process alone (`UPCACHE_SHARED=0`, `SharedCache::create_private`; both made in
//! `Shim::new`). The rest of the shim sees the same cache and files either way; what differs
//! is only what other processes share (`SharedCache::is_private`).

use std::path::Path;
use std::sync::Arc;

use upcache::shared::{SharedCache, SharedFile};
use upcache::Result;

/// A cached file. Cloning shares it; it closes in the cache when its last clone goes.
pub(crate) type File = Arc<SharedFile>;

/// Caches the OS file at `path` (a `/proc/self/fd/N` of the program's descriptor), named `name`
/// in messages, for writing only if `write` (a writable descriptor of the cache's would make an
/// exec of the file fail with ETXTBSY, where the program itself only reads it).
pub(crate) fn open(cache: &SharedCache, path: &Path, name: &str, write: bool) -> Result<File> {
    match cache.open_path_as(path, write, name) {
        Err(e) if write && e.kind() == upcache::ErrorKind::PermissionDenied => {
            cache.open_path_as(path, false, name)
        }
        r => r,
    }
    .map(Arc::new)
}

/// Closes `file` after the program's last descriptor of it went; the error of its write-back,
/// if it had one.
pub(crate) fn close(file: File) -> Result<()> {
    match Arc::try_unwrap(file) {
        Ok(f) => f.close(),
        Err(_) => Ok(()), // a write-back of every file holds it for a moment
    }
}
