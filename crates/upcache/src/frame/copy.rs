//! Copies into frames. A write that covers whole cache lines of a frame not written for a
//! while copies with streaming (non-temporal) stores: an ordinary copy first reads every
//! destination line into the cache (a read for ownership) only to overwrite it, doubling the
//! memory traffic of a stream of writes, and fills the caches with pages that write-back reads
//! much later. Random 4 KiB writes into a cache in memory are bound by that traffic
//! (bench/RESULTS.md, issue 18). A frame written recently is likely still in the caches,
//! where an ordinary copy is cheaper and keeps it for the reads that often follow (streaming
//! every write made 8 MiB of random reads and writes 35% slower).

/// Smaller copies go through the caches: a few lines, likely read again soon.
const STREAM_FROM: usize = 1024;

/// A frame last written more than this long ago (in `now`'s ticks, about 4 ms at 2-3 GHz)
/// counts as out of the CPU's caches: at the memory bandwidth of a stream of writes, a
/// 32 MiB last-level cache turns over in about that time.
pub const COLD_AFTER: u64 = 1 << 23;

/// A cheap clock for `COLD_AFTER`: the time-stamp counter (no system call, no shared line);
/// elsewhere 0, which makes every frame look recently written (so nothing streams).
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc has no preconditions.
    return unsafe { std::arch::x86_64::_rdtsc() };
    #[cfg(not(target_arch = "x86_64"))]
    0
}

/// Copies `src` to `dst`, streaming when `cold` (the destination is likely out of the CPU's
/// caches), `dst` is 64-byte aligned and the length a multiple of 64 of at least
/// `STREAM_FROM`; the streamed bytes are ordered before any later store (a fence), so an
/// unlock that publishes the frame publishes them.
///
/// # Safety
/// `dst` is valid for `src.len()` bytes that no other thread reads or writes meanwhile, and
/// does not overlap `src`.
pub unsafe fn into_frame(src: &[u8], dst: *mut u8, cold: bool) {
    #[cfg(target_arch = "x86_64")]
    if cold && src.len() >= STREAM_FROM && src.len().is_multiple_of(64) && (dst as usize).is_multiple_of(64) {
        // SAFETY: as the caller promises; the length and alignment were checked.
        unsafe { stream(src, dst) };
        return;
    }
    // SAFETY: as the caller promises.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
}

/// SSE2 (every x86-64) streaming stores of whole 64-byte lines, then `sfence`.
///
/// # Safety
/// As `into_frame`, with `dst` 64-byte aligned and `src.len()` a multiple of 64.
#[cfg(target_arch = "x86_64")]
unsafe fn stream(src: &[u8], dst: *mut u8) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let (s, d) = (src.as_ptr().cast::<__m128i>(), dst.cast::<__m128i>());
    for i in (0..src.len() / 16).step_by(4) {
        // SAFETY: `i + 3 < len / 16`, so the four 16-byte loads are inside `src` (unaligned
        // loads) and the four stores inside `dst`, 16-byte aligned as `dst` is 64-aligned.
        unsafe {
            let (a, b, c, e) = (
                _mm_loadu_si128(s.add(i)),
                _mm_loadu_si128(s.add(i + 1)),
                _mm_loadu_si128(s.add(i + 2)),
                _mm_loadu_si128(s.add(i + 3)),
            );
            _mm_stream_si128(d.add(i), a);
            _mm_stream_si128(d.add(i + 1), b);
            _mm_stream_si128(d.add(i + 2), c);
            _mm_stream_si128(d.add(i + 3), e);
        }
    }
    // Streaming stores are weakly ordered: this orders them before the unlock's Release store,
    // which readers and write-back synchronize with.
    // SAFETY: sfence has no preconditions.
    unsafe { _mm_sfence() };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_and_alignment_copies_exactly() {
        let src: Vec<u8> = (0..9000u32).map(|i| (i * 7 + 3) as u8).collect();
        // A 64-aligned destination with room to be misaligned on purpose.
        let mut buf = vec![0u64; 9000 / 8 + 16];
        let base = buf.as_mut_ptr().cast::<u8>();
        let aligned = (64 - base as usize % 64) % 64;
        for len in [0, 1, 63, 64, 1000, 1024, 1088, 4096, 8192] {
            for skew in [0, 8, 1] {
                let dst = base.wrapping_add(aligned + skew);
                // SAFETY: `dst..dst + len` is inside `buf` (9000 + 64 bytes of room).
                unsafe {
                    std::ptr::write_bytes(dst, 0xee, len + 8);
                    into_frame(&src[..len], dst, skew != 8);
                    let got = std::slice::from_raw_parts(dst, len + 8);
                    assert_eq!(&got[..len], &src[..len], "len {len} skew {skew}");
                    assert!(got[len..].iter().all(|&b| b == 0xee), "wrote past the end: len {len}");
                }
            }
        }
    }
}
