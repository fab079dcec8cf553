//! Files kept cached after their last close, as the kernel keeps a file's pages after its
//! last close: a program that closes and reopens a file (fio between its layout and its jobs,
//! a database reopening its tables) finds its pages still there.
//!
//! Close-to-open consistency, as NFS has: the last close writes the file back and records
//! its size, mtime and ctime; an open that finds a kept copy uses it only if the OS file still
//! has them, and drops it otherwise (another process changed the file meanwhile). A change
//! within one tick of the file system's clock that keeps the size is not seen: that is the
//! limit of the check. Unlinks and renames over a kept file drop it (`namespace.rs`), so its
//! space is freed; at most `MAX` files are kept, the oldest dropped first.

use crate::backend::File;
use std::collections::VecDeque;
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;

/// Files kept after their last close.
const MAX: usize = 128;

/// What must not have changed for a kept copy to be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Signature {
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Signature {
    pub fn of_meta(m: &std::fs::Metadata) -> Signature {
        Signature { len: m.size(), mtime: (m.mtime(), m.mtime_nsec()), ctime: (m.ctime(), m.ctime_nsec()) }
    }

    pub fn of_stat(st: &libc::stat64) -> Signature {
        Signature {
            len: st.st_size as u64,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }
}

struct Kept {
    key: (u64, u64),
    file: File,
    signature: Signature,
}

#[derive(Default)]
pub(crate) struct Retained {
    /// Oldest first.
    kept: Mutex<VecDeque<Kept>>,
}

impl Retained {
    /// Keeps `file` (written back, no descriptor left) as it is now. Returns the files pushed
    /// out, for the caller to close.
    pub fn keep(&self, key: (u64, u64), file: File, signature: Signature) -> Vec<File> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.push_back(Kept { key, file, signature });
        let excess = kept.len().saturating_sub(MAX);
        kept.drain(..excess).map(|k| k.file).collect()
    }

    /// Takes every kept copy.
    pub fn take_all(&self) -> Vec<File> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.drain(..).map(|k| k.file).collect()
    }

    /// Takes the kept copy of `key`, with its signature.
    pub fn take(&self, key: (u64, u64)) -> Option<(File, Signature)> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let at = kept.iter().position(|k| k.key == key)?;
        kept.remove(at).map(|k| (k.file, k.signature))
    }
}
