//! The size of a shared cache's pages, fixed when the cache is made
//! (`SharedConfig::page_size`): a power of two from 4 KiB to 64 KiB, as the private engine's.
//! A frame holds one page; a 2 MiB chunk of the frames' bytes (`chunk.rs`) holds
//! `chunk_frames` of them.

use crate::shm::huge::HUGE_PAGE;

/// The bytes of a load or write-back run at most.
pub(crate) const RUN_BYTES: usize = 1 << 20;

/// A page size, as its power of two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PageSize {
    shift: u32,
}

impl PageSize {
    /// 4 KiB, the default.
    pub const DEFAULT: PageSize = PageSize { shift: 12 };

    /// `bytes` as a page size, if it is one the shared cache takes.
    pub fn new(bytes: usize) -> Option<PageSize> {
        let ok = bytes.is_power_of_two()
            && (crate::config::MIN_PAGE_SIZE..=crate::config::MAX_PAGE_SIZE).contains(&bytes);
        ok.then(|| PageSize { shift: bytes.trailing_zeros() })
    }

    /// The page size whose power of two is `shift`, if the shared cache takes it.
    pub fn from_shift(shift: u32) -> Option<PageSize> {
        (shift < usize::BITS).then(|| 1usize << shift).and_then(PageSize::new)
    }

    #[inline]
    pub const fn bytes(self) -> usize {
        1 << self.shift
    }

    #[inline]
    pub const fn shift(self) -> u32 {
        self.shift
    }

    /// The page holding byte `offset` of a file.
    #[inline]
    pub const fn page_of(self, offset: u64) -> u64 {
        offset >> self.shift
    }

    /// Where byte `offset` of a file is in its page.
    #[inline]
    pub const fn in_page(self, offset: u64) -> usize {
        (offset & (self.bytes() as u64 - 1)) as usize
    }

    /// Where page `page` of a file starts.
    #[inline]
    pub const fn start(self, page: u64) -> u64 {
        page << self.shift
    }

    /// Pages that `len` bytes from a page's start reach into.
    #[inline]
    pub const fn pages_in(self, len: u64) -> u64 {
        len.div_ceil(self.bytes() as u64)
    }

    /// Pages in a load or write-back run at most: 1 MiB, one system call (256 pages of 4 KiB,
    /// 16 of 64 KiB).
    #[inline]
    pub const fn run_pages(self) -> usize {
        RUN_BYTES >> self.shift
    }

    /// Frames in a 2 MiB chunk.
    #[inline]
    pub const fn chunk_frames(self) -> usize {
        HUGE_PAGE >> self.shift
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_private_engines_sizes_only() {
        for bytes in [4096, 8192, 16384, 32768, 65536] {
            let p = PageSize::new(bytes).unwrap();
            assert_eq!((p.bytes(), PageSize::from_shift(p.shift())), (bytes, Some(p)));
            assert_eq!(p.chunk_frames() * bytes, HUGE_PAGE);
            assert_eq!(p.run_pages() * bytes, RUN_BYTES);
        }
        for bytes in [0, 1, 2048, 3000, 12288, 128 << 10] {
            assert_eq!(PageSize::new(bytes), None, "{bytes}");
        }
        assert_eq!((PageSize::from_shift(11), PageSize::from_shift(64)), (None, None));
        let p = PageSize::new(16384).unwrap();
        assert_eq!((p.page_of(16383), p.page_of(16384), p.in_page(16385), p.start(3)), (0, 1, 1, 49152));
        assert_eq!((p.pages_in(0), p.pages_in(1), p.pages_in(16384), p.pages_in(16385)), (0, 1, 1, 2));
    }
}
