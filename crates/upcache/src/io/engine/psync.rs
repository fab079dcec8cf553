//! The synchronous engine: `preadv` / `pwritev` / `fdatasync` from the calling thread. Its
//! loops also finish what io_uring left short.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::AsRawFd;

use super::IoEngine;
use crate::io::device::BackingFile;
use crate::io::sys::{preadv_all, pwritev_all};

/// Positional vectored syscalls, issued by whichever thread needs the I/O.
#[derive(Debug, Default)]
pub struct PsyncEngine;

impl IoEngine for PsyncEngine {
    fn name(&self) -> &'static str {
        "psync"
    }

    fn read_vectored(
        &self,
        file: &BackingFile,
        offset: u64,
        bufs: &mut [IoSliceMut<'_>],
    ) -> io::Result<usize> {
        preadv_all(file.as_raw_fd(), offset, bufs)
    }

    fn write_vectored(&self, file: &BackingFile, offset: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        pwritev_all(file.as_raw_fd(), offset, &mut bufs.to_vec())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::io::sys::preadv_on;
    use std::alloc::{alloc_zeroed, dealloc, Layout};
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;

    /// A page-aligned page, as O_DIRECT wants.
    struct Page(*mut u8);

    impl Page {
        const LAYOUT: Layout = match Layout::from_size_align(4096, 4096) {
            Ok(l) => l,
            Err(_) => panic!("a valid layout"),
        };

        fn new() -> Page {
            // SAFETY: a non-zero size.
            Page(unsafe { alloc_zeroed(Self::LAYOUT) })
        }

        fn bytes(&mut self) -> &mut [u8] {
            // SAFETY: 4096 bytes allocated by `new`, borrowed through `&mut self`.
            unsafe { std::slice::from_raw_parts_mut(self.0, 4096) }
        }
    }

    impl Drop for Page {
        fn drop(&mut self) {
            // SAFETY: allocated by `new` with this layout.
            unsafe { dealloc(self.0, Self::LAYOUT) }
        }
    }

    /// A read that came back short at an unaligned end of file, which has grown since: with
    /// O_DIRECT the rest cannot be read from that offset (EINVAL), and the read ends there.
    #[test]
    fn a_short_direct_read_ends_where_it_stopped_if_the_file_grew() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("grown");
        std::fs::write(&path, vec![7u8; 3 * 4096]).unwrap();
        let direct = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&path);
        let Ok(file) = direct else {
            eprintln!("no O_DIRECT in {}: nothing to check", tmp.path().display());
            return;
        };
        let mut page = Page::new();
        let (_, rest) = page.bytes().split_at_mut(904);
        assert_eq!(preadv_on(file.as_raw_fd(), 4096, &mut [IoSliceMut::new(rest)], 904).unwrap(), 904);
        // From an aligned offset the same call reads on.
        let mut page = Page::new();
        assert_eq!(preadv_on(file.as_raw_fd(), 4096, &mut [IoSliceMut::new(page.bytes())], 0).unwrap(), 4096);
        assert!(page.bytes().iter().all(|&b| b == 7));
    }
}
