//! A file that no process caches any more: something reads or writes it without the cache
//! (a process's shim demoted it: a shell redirect, a mapping, a forked child's inherited
//! descriptor), so every open of it in every process reads and writes the OS file directly
//! (`SharedFile::bypass`), as the kernel's page cache alone would serve it.

use std::io::IoSliceMut;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use super::backing::Backing;
use crate::error::{Error, Result};
use crate::io::sys::preadv_all;

/// Reads at `offset` until `buf` is full or the file ends; the bytes read.
pub(crate) fn read(fd: &Backing, buf: &mut [u8], offset: u64, name: &str) -> Result<usize> {
    let fd = fd.os_file("reads past the cache")?;
    preadv_all(fd.as_raw_fd(), offset, &mut [IoSliceMut::new(buf)])
        .map_err(|e| Error::io(format!("read {name}"), e))
}

/// Writes `buf` at `offset`: all of it, or, if an error stops it after some bytes, how many
/// were written (the error if none were).
pub(crate) fn write(fd: &Backing, buf: &[u8], offset: u64, name: &str) -> Result<usize> {
    let fd = fd.os_file("writes past the cache")?;
    let mut done = 0;
    while done < buf.len() {
        match fd.write_at(&buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if done == 0 => return Err(Error::io(format!("write {name}"), e)),
            Err(_) => break,
        }
    }
    Ok(done)
}

/// The OS file's length.
pub(crate) fn len(fd: &Backing, name: &str) -> Result<u64> {
    fd.os_file("OS length")?.metadata().map(|md| md.len()).map_err(|e| Error::io(format!("stat {name}"), e))
}
