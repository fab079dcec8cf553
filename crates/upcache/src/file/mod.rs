//! Files: names, sizes, chunking of a request into pages, stream detection and the range
//! lock's model (the engine's file state lives in its segment, `shared/files.rs`).
//!
//! # The zero invariant
//! Every byte at or past a file's length reads as zero from wherever it is kept: a cached
//! frame or a backing file. Writes extend the length as they go, a shrink zeroes the tail of
//! the last page and drops or truncates everything after it, and opening a file after a crash
//! re-establishes it. This is what lets `set_len` extend a file without writing anything.
//! (It does not let a partial write of a page past the end skip reading it: see `Fill::Read`.)

pub(crate) mod chunk;
pub mod stream;

use crate::error::{Error, ErrorKind, Result};

/// Largest file size: keeps every byte and device offset representable as a signed 64-bit
/// `off_t` with room for page rounding.
pub const MAX_FILE_SIZE: u64 = 1 << 62;

/// Reads exactly `buf.len()` bytes at `offset` with `read_at` (a file's, by either engine),
/// until a short read says the file (`name`) ends first: `UnexpectedEof`.
pub(crate) fn read_exact(
    mut buf: &mut [u8],
    mut offset: u64,
    name: &str,
    mut read_at: impl FnMut(&mut [u8], u64) -> Result<usize>,
) -> Result<()> {
    while !buf.is_empty() {
        match read_at(buf, offset)? {
            0 => {
                return Err(Error::new(ErrorKind::UnexpectedEof, format!("end of file {name:?} at {offset}")))
            }
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

/// Checks a file name: 1 to 255 bytes, no `/`, no NUL, not `.` or `..`.
pub fn validate_name(name: &str) -> Result<()> {
    let bad =
        |why: &str| Err(Error::new(ErrorKind::InvalidName, format!("invalid file name {name:?}: {why}")));
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > 255 {
        return bad("longer than 255 bytes");
    }
    if name.contains('/') {
        return bad("contains '/'");
    }
    if name.contains('\0') {
        return bad("contains NUL");
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are reserved");
    }
    Ok(())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "file.dat", "..a", ".hidden", &"x".repeat(255), "ünï"] {
            assert!(validate_name(ok).is_ok(), "{ok:?}");
        }
        for bad in ["", ".", "..", "a/b", "/", "a\0b", &"x".repeat(256)] {
            assert_eq!(validate_name(bad).unwrap_err().kind(), ErrorKind::InvalidName, "{bad:?}");
        }
    }
}
