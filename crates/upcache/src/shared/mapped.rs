//! Which 2 MiB chunks of the frames' bytes this process has mapped, so that each is mapped
//! with one call instead of a page fault per frame.
//!
//! The segment is a memfd mapped shared: every process that touches a frame's bytes for the
//! first time takes a page fault to map it, about a microsecond each. The clock hand hands out
//! frames all over the cache, so a writer touches every frame in time: random 4 KiB writes
//! through the shim spent a tenth of their time in those faults (bench/RESULTS.md, issue 34).
//! `MADV_POPULATE_WRITE` (Linux 5.14) maps a whole chunk at once, as writable, allocating what
//! no process has touched yet, at a small part of the faults' cost. Elsewhere (an older
//! kernel, a mapping it refuses) the chunk is marked anyway and pages fault in as before.
//!
//! A forked child inherits the bits but not the mappings (the kernel does not copy a shared
//! mapping's page tables): it faults its pages in one by one, as before.

use std::sync::atomic::{AtomicU64, Ordering};

use super::page_size::PageSize;
/// `MADV_POPULATE_WRITE`, not in every libc crate's list yet.
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// A bit per chunk of the frames' bytes, this process's alone.
struct ChunkBits(Box<[AtomicU64]>);

impl ChunkBits {
    fn new(chunks: usize) -> Self {
        ChunkBits((0..chunks.div_ceil(64)).map(|_| AtomicU64::new(0)).collect())
    }

    /// Whether chunk `c`'s bit is set.
    #[inline]
    fn has(&self, c: usize) -> bool {
        // Relaxed: a hint; a thread that misses a bit set goes the slow way, which finds it.
        self.0[c / 64].load(Ordering::Relaxed) & (1u64 << (c % 64)) != 0
    }

    /// Sets chunk `c`'s bit; whether this thread was the first to.
    fn mark(&self, c: usize) -> bool {
        // Relaxed: as in `has`; the bit guards no memory.
        self.0[c / 64].fetch_or(1u64 << (c % 64), Ordering::Relaxed) & (1u64 << (c % 64)) == 0
    }
}

/// Which chunks of the frames' bytes this process asked to map, and which it mapped as the
/// huge pages they became.
pub(crate) struct Mapped {
    bits: ChunkBits,
    huge: ChunkBits,
    page: PageSize,
}

impl Mapped {
    pub fn new(n_frames: usize, page: PageSize) -> Self {
        let chunks = n_frames.div_ceil(page.chunk_frames());
        Mapped { bits: ChunkBits::new(chunks), huge: ChunkBits::new(chunks), page }
    }

    /// Frame `f`'s chunk.
    #[inline]
    fn chunk_of(&self, f: usize) -> usize {
        f / self.page.chunk_frames()
    }

    /// Whether this process mapped frame `f`'s chunk as a huge page.
    #[inline]
    pub fn has_huge(&self, f: usize) -> bool {
        self.huge.has(self.chunk_of(f))
    }

    /// Marks chunk `c` mapped as a huge page; whether this thread was the first to (the others
    /// go on with what they map).
    pub fn mark_huge(&self, c: usize) -> bool {
        self.huge.mark(c)
    }

    /// Whether this process has asked for frame `f`'s chunk's mapping.
    #[inline]
    pub fn has(&self, f: usize) -> bool {
        self.bits.has(self.chunk_of(f))
    }

    /// Maps frame `f`'s chunk of `pages` (the first frame's bytes; `n_frames` frames) if no
    /// thread of this process has yet; the advice's error, if this thread gave it and it
    /// failed (which only leaves the pages to fault in one by one).
    #[cold]
    pub fn map(&self, pages: *mut u8, n_frames: usize, f: usize) -> std::io::Result<()> {
        let c = self.chunk_of(f);
        // The first thread to mark the chunk maps it; the others go on (a page they touch first
        // faults in, as without this): threads that start together and take frames of one
        // chunk would otherwise all map it at once, each page contended by all.
        if !self.bits.mark(c) {
            return Ok(());
        }
        let (chunk, page) = (self.page.chunk_frames(), self.page.bytes());
        let first = c * chunk;
        let len = (n_frames - first).min(chunk) * page;
        // SAFETY: the chunk lies inside the frames' bytes, mapped for as long as the view
        // lives; the advice maps its pages (as a write to each would) and changes no byte.
        match unsafe { libc::madvise(pages.add(first * page).cast(), len, MADV_POPULATE_WRITE) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::chunk::CHUNK_FRAMES;
    use super::super::frame::PAGE;
    use super::*;
    use crate::frame::arena::resident_pages;

    #[test]
    fn a_frame_maps_its_whole_chunk_once() {
        let n = CHUNK_FRAMES * 2 + 10;
        let len = n * PAGE;
        // SAFETY: a fresh shared anonymous mapping (shmem, as a memfd's), unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let p = p.cast::<u8>();
        let m = Mapped::new(n, PageSize::DEFAULT);
        assert_eq!(resident_pages(p, len), 0);
        let mapped = m.map(p, n, CHUNK_FRAMES + 3);
        assert!(m.has(CHUNK_FRAMES + 511) && !m.has(0));
        let supported = crate::shm::huge::kernel_at_least(5, 14);
        if supported {
            mapped.unwrap();
            assert_eq!(resident_pages(p, len), CHUNK_FRAMES, "the second chunk, whole");
        }
        let mapped = m.map(p, n, 2 * CHUNK_FRAMES + 9);
        if supported {
            mapped.unwrap();
            assert_eq!(resident_pages(p, len), CHUNK_FRAMES + 10, "the last chunk is short");
        }
        // SAFETY: mapped above, no reference into it remains.
        unsafe { libc::munmap(p.cast(), len) };
    }

    /// `SharedConfig::prefault` makes every frame resident as the cache is made, its own or
    /// one on a segment others map; without it a new cache's frames are not.
    #[test]
    fn prefault_makes_every_frame_of_a_new_cache_resident() {
        use super::super::{SharedCache, SharedConfig};
        let memory = (3 * CHUNK_FRAMES + 7) as u64 * PAGE as u64;
        for private in [true, false] {
            for prefault in [false, true] {
                let config = SharedConfig { memory, prefault, huge_pages: false, ..SharedConfig::default() };
                let cache = if private {
                    SharedCache::create_private(&config).unwrap()
                } else {
                    SharedCache::create(&config).unwrap()
                };
                let view = &cache.inner.view;
                let got = resident_pages(view.pages.as_ptr(), view.n_frames * PAGE);
                assert_eq!(cache.config().prefault, prefault);
                if prefault {
                    assert_eq!(got, view.n_frames, "private {private}: every frame");
                } else {
                    assert!(got < view.n_frames / 2, "private {private}: {got} resident unasked");
                }
            }
        }
    }
}
