//! One error type with a set of kinds callers match on, a human context and an optional OS source.

use std::fmt;
use std::io;

/// What went wrong, for callers to match on (the C ABI maps each to a code). Non-exhaustive:
/// later releases may add kinds, so a match needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A configuration value is out of range or inconsistent.
    InvalidConfig,
    /// A file name is empty, too long, contains `/` or NUL, or is `.` / `..`.
    InvalidName,
    /// An argument (offset, length) is out of range.
    InvalidInput,
    /// The named file does not exist (or was removed while a handle was open).
    NotFound,
    /// A file with that name already exists, or an array already exists in the directory.
    AlreadyExists,
    /// The directory is not an upcache array, or its catalog is damaged.
    NotAnArray,
    /// The array's stored layout (devices, page size, stripe unit) differs from the config.
    LayoutMismatch,
    /// The file system refused something upcache needs (for example O_DIRECT).
    Unsupported,
    /// A device read, write or sync failed; dirty data stays in the cache.
    Io,
    /// A device ran out of space; dirty data stays in the cache.
    NoSpace,
    /// Every frame is pinned or under I/O, so no page could be made resident.
    CacheFull,
    /// A read reached end of file before filling the buffer (`read_exact_at`).
    UnexpectedEof,
    /// A write could not write the whole buffer (`write_all_at`).
    WriteZero,
    /// The array is already open, in this process or another.
    Busy,
    /// A write or length at or past the largest file its file system allows (EFBIG).
    FileTooLarge,
    /// A bug: a background thread of the cache panicked (reported by the next sync).
    Internal,
    /// The caller may not do this: another user's process asked to attach to a shared cache,
    /// or a file could not be opened with the caller's own permissions (EACCES).
    PermissionDenied,
}

/// An upcache error: a kind, what was being done, and the OS error underneath if any.
pub struct Error {
    kind: ErrorKind,
    context: String,
    source: Option<io::Error>,
}

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error of `kind` while doing `context`.
    pub fn new(kind: ErrorKind, context: impl Into<String>) -> Self {
        Error { kind, context: context.into(), source: None }
    }

    /// An OS error while doing `context`; ENOSPC maps to [`ErrorKind::NoSpace`], the rest to
    /// [`ErrorKind::Io`].
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        let kind = match source.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => ErrorKind::NoSpace,
            _ => ErrorKind::Io,
        };
        Error { kind, context: context.into(), source: Some(source) }
    }

    /// An error of `kind` with an OS error underneath.
    pub fn with_source(kind: ErrorKind, context: impl Into<String>, source: io::Error) -> Self {
        Error { kind, context: context.into(), source: Some(source) }
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// What upcache was doing when it failed.
    pub fn context(&self) -> &str {
        &self.context
    }

    /// The OS error number underneath, if any.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.source.as_ref().and_then(|e| e.raw_os_error())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.context)?;
        if let Some(src) = &self.source {
            write!(f, ": {src}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("context", &self.context)
            .field("source", &self.source)
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match e.kind {
            ErrorKind::NotFound => io::ErrorKind::NotFound,
            ErrorKind::AlreadyExists => io::ErrorKind::AlreadyExists,
            ErrorKind::InvalidInput | ErrorKind::InvalidName | ErrorKind::InvalidConfig => {
                io::ErrorKind::InvalidInput
            }
            ErrorKind::UnexpectedEof => io::ErrorKind::UnexpectedEof,
            ErrorKind::WriteZero => io::ErrorKind::WriteZero,
            ErrorKind::Unsupported => io::ErrorKind::Unsupported,
            ErrorKind::FileTooLarge => io::ErrorKind::FileTooLarge,
            ErrorKind::PermissionDenied => io::ErrorKind::PermissionDenied,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}
