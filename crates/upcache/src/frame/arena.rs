//! One aligned mapping holding every page frame, made once when the cache starts.
//!
//! The arena is an anonymous private mapping: aligned to a huge page (2 MiB, which satisfies
//! O_DIRECT's buffer alignment, starts every frame at a multiple of the page size, and lets
//! every 2 MiB of frames be one huge page, so that frames side by side make one memory
//! segment for the block layer), zero-filled lazily by the kernel so resident memory grows only as frames are
//! used, and advised for transparent huge pages so that random hits over a large cache do
//! not miss the TLB on every access (the kernel's own page cache is read through its
//! huge-page direct map). It is never resized, so a frame's address is stable for the life
//! of the cache and can later be registered with io_uring.

use std::ptr::NonNull;

use super::huge::HUGE_PAGE;
use crate::error::{Error, ErrorKind, Result};

/// Index of a frame in the arena.
pub type FrameId = u32;

/// The frame arena: `count` frames of `page_size` bytes.
pub struct Arena {
    base: NonNull<u8>,
    size: usize,
    page_size: usize,
    count: usize,
    /// Bytes of the arena known to be physically contiguous from any multiple of this size
    /// (a huge page when the kernel backs the arena with them, else a page).
    contiguous: usize,
}

// SAFETY: the arena is plain memory; who may read or write which frame is governed by the
// frame state words (see `state.rs`), not by the arena itself.
unsafe impl Send for Arena {}
// SAFETY: as above; the arena hands out raw pointers only, never references.
unsafe impl Sync for Arena {}

impl Arena {
    /// Maps `count` zeroed frames of `page_size` bytes.
    pub fn new(count: usize, page_size: usize) -> Result<Self> {
        let size = count
            .checked_mul(page_size)
            .filter(|&s| s > 0)
            .ok_or_else(|| Error::new(ErrorKind::InvalidConfig, "bad frame arena size"))?;
        // Mapped with a huge page to spare and trimmed to a huge-page boundary, so that every
        // whole huge page of the arena can be one (`contiguous`).
        let span = size
            .checked_add(HUGE_PAGE)
            .ok_or_else(|| Error::new(ErrorKind::InvalidConfig, "bad frame arena size"))?;
        // SAFETY: an anonymous private mapping of `span` bytes at an address of the kernel's
        // choosing; no existing memory is affected.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(Error::with_source(
                ErrorKind::InvalidConfig,
                format!("cannot map a {size}-byte frame arena"),
                std::io::Error::last_os_error(),
            ));
        }
        let head = (HUGE_PAGE - raw as usize % HUGE_PAGE) % HUGE_PAGE;
        let tail = span - head - size;
        // SAFETY: head and tail are the parts of our own fresh mapping outside `size` bytes
        // from the aligned start; nothing uses them. A failure only leaves them mapped.
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((raw as *mut u8).add(head + size) as *mut libc::c_void, tail);
            }
        }
        // SAFETY: head < HUGE_PAGE <= span - size, so the start stays inside the mapping.
        let ptr = unsafe { (raw as *mut u8).add(head) } as *mut libc::c_void;
        // SAFETY: advice on the mapping we just made; failure only loses the optimization.
        let advised = unsafe { libc::madvise(ptr, size, libc::MADV_HUGEPAGE) } == 0;
        if !advised {
            log::debug!("MADV_HUGEPAGE refused: {}", std::io::Error::last_os_error());
        }
        let contiguous = if advised && thp_enabled() { HUGE_PAGE } else { page_size };
        let base = NonNull::new(ptr as *mut u8).expect("mmap returned null without MAP_FIXED");
        Ok(Arena { base, size, page_size, count, contiguous })
    }

    /// Makes every frame resident now (`Config::with_prefault`, [`populate`]).
    pub fn prefault(&self) -> std::io::Result<()> {
        // SAFETY: exactly the arena's mapping, before any frame is handed out.
        unsafe { populate(self.base.as_ptr(), self.size) }
    }

    /// Bytes per frame.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Frames side by side are physically contiguous within each aligned block of this many
    /// bytes: a huge page if the kernel may back the arena with them, else one frame. A hint
    /// for sizing I/O, never relied on for correctness (the kernel may still split a huge
    /// page, e.g. under `MADV_DONTNEED` of one frame).
    pub fn contiguous_bytes(&self) -> usize {
        self.contiguous
    }

    /// Start and length of the mapping.
    pub fn region(&self) -> (*mut u8, usize) {
        (self.base.as_ptr(), self.size)
    }

    /// Gives frame `id`'s memory back to the kernel; it reads as zeros when next touched. The
    /// caller must own the frame (`UNOWNED` and taken out of use), so nobody touches its bytes
    /// meanwhile.
    pub fn discard(&self, id: FrameId) {
        let p = self.frame_ptr(id);
        // SAFETY: the range is exactly one frame inside our mapping; MADV_DONTNEED on private
        // anonymous memory only drops its contents, which the caller says nobody uses.
        let rc = unsafe { libc::madvise(p as *mut libc::c_void, self.page_size, libc::MADV_DONTNEED) };
        if rc != 0 {
            log::debug!("MADV_DONTNEED refused: {}", std::io::Error::last_os_error());
        }
    }

    /// Start of frame `id`. The caller must hold the right to the bytes it touches (a pin
    /// with `VALID` to read, `LOCKED` to write).
    pub fn frame_ptr(&self, id: FrameId) -> *mut u8 {
        assert!((id as usize) < self.count, "frame {id} out of range");
        // SAFETY: id < count, so the offset stays inside the mapping.
        unsafe { self.base.as_ptr().add(id as usize * self.page_size) }
    }
}

/// Whether transparent huge pages may back memory advised `MADV_HUGEPAGE`.
fn thp_enabled() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|s| s.contains("[always]") || s.contains("[madvise]"))
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: base and size describe exactly the mapping made in `new`, unmapped once; no
        // frame pointer outlives the arena (the frame table owns it and every user borrows
        // the table).
        unsafe { libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.size) };
    }
}

/// Makes the `len` bytes at `base` resident and writable now: MADV_POPULATE_WRITE, or a write
/// to each 4 KiB page where the kernel predates it (Linux 5.14).
///
/// # Safety
/// `base..base + len` is a writable mapping of the caller's whose bytes no one uses yet: the
/// fallback writes a zero over each page's first byte (a zero over the zeros of memory not
/// yet handed out).
pub unsafe fn populate(base: *mut u8, len: usize) -> std::io::Result<()> {
    // SAFETY: advice on the caller's mapping (the contract); it changes no byte.
    let rc = unsafe { libc::madvise(base.cast(), len, libc::MADV_POPULATE_WRITE) };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EINVAL) {
        return Err(e);
    }
    for at in (0..len).step_by(4096) {
        // SAFETY: inside the mapping, whose bytes no one uses yet (the contract).
        unsafe { std::ptr::write_volatile(base.add(at), 0) };
    }
    Ok(())
}

/// 4 KiB pages of the `len` bytes at `p` resident in this process (mincore), for tests.
#[cfg(all(test, not(loom)))]
pub(crate) fn resident_pages(p: *mut u8, len: usize) -> usize {
    let mut v = vec![0u8; len.div_ceil(4096)];
    // SAFETY: `p..p + len` is a page-aligned mapping of the caller's; `v` has a byte per page.
    assert_eq!(unsafe { libc::mincore(p.cast(), len, v.as_mut_ptr()) }, 0);
    v.iter().filter(|&&b| b & 1 != 0).count()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn frames_are_aligned_disjoint_and_zeroed() {
        let a = Arena::new(8, 8192).unwrap();
        for i in 0..8 {
            let p = a.frame_ptr(i);
            assert_eq!(a.frame_ptr(0) as usize % HUGE_PAGE, 0, "the arena starts on a huge page");
            assert_eq!(p as usize % 4096, 0);
            assert_eq!(p as usize - a.frame_ptr(0) as usize, i as usize * 8192);
            // SAFETY: the frame is inside the mapping and nobody else uses this arena.
            assert!(unsafe { std::slice::from_raw_parts(p, 8192) }.iter().all(|&b| b == 0));
        }
        assert!([8192, HUGE_PAGE].contains(&a.contiguous_bytes()));
    }

    #[test]
    fn prefault_makes_every_frame_resident_and_zero() {
        let fresh = Arena::new(512, 4096).unwrap();
        let (p, len) = fresh.region();
        assert!(resident_pages(p, len) < len / 4096, "a new arena is not all resident");
        let a = Arena::new(512, 4096).unwrap();
        a.prefault().unwrap();
        let (p, len) = a.region();
        assert_eq!(resident_pages(p, len), len / 4096);
        // SAFETY: the whole arena, which nobody else uses.
        assert!(unsafe { std::slice::from_raw_parts(p, len) }.iter().all(|&b| b == 0));
    }

    #[test]
    #[should_panic]
    fn out_of_range_frame_panics() {
        let a = Arena::new(2, 4096).unwrap();
        a.frame_ptr(2);
    }
}
