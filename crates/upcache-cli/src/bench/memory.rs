//! The limit engines. `--engine memory`: each file's data in one anonymous mapping of its
//! size, advised for transparent huge pages (as upcache's frame arena is), read and written with
//! one copy per op (`--api copy`; writes with upcache's own copy into frames,
//! `frame::copy::into_frame`) or one byte touched per page (`--api pin`, what upcache's pin
//! path does). No page cache can do less than this for a hit, so hit figures are ratios to it.
//!
//! `--engine memory-indexed`: the same, plus the least that any cache which finds a page's
//! frame through an index, and lends pages, must add. Every file's pages live in one arena in
//! shuffled order (a cache's frames hold pages in no file order); each page of an op is found
//! through a flat table of frame numbers (4 bytes a page: no index is denser), so the page's
//! address depends on a load from a table larger than the CPU's near caches, as in any cache;
//! with `--api pin` each page's frame is pinned and unpinned (one atomic add each, on a
//! 32-byte per-frame word as upcache's frame descriptor). Hits are then ratios to the floor of
//! the design, not only of the data.
//!
//! The one extra cost: pages hash to 256 spin locks, and an op holds those of its pages while
//! it copies, so that threads touching the same bytes do not race (a data race is undefined
//! behaviour, and any correct cache keeps a writer off the bytes others read). With one
//! thread that is one uncontended atomic swap per op, on a lock table of 16 KiB that stays in
//! cache.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use anyhow::{bail, Result};

use super::engine::{Api, Engine, Setup};

/// Lock stripes (one per 64-byte line): few enough to stay in the L1/L2 cache; a multiple of 64.
const STRIPES: usize = 256;

#[repr(align(64))]
struct Stripe(AtomicBool);

/// One file: an anonymous private mapping of `len` bytes.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; every access to its bytes after
// setup goes through `MemoryEngine::locked`, which excludes other threads from them.
unsafe impl Send for Mapping {}
// SAFETY: as for Send.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(len: usize) -> Result<Mapping> {
        // SAFETY: a new anonymous mapping; no existing memory is involved.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len.max(1),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            bail!("mmap {len} bytes for the memory engine: {}", std::io::Error::last_os_error());
        }
        // SAFETY: advice on the mapping just made. Refused (THP off): 4 KiB pages, still valid.
        unsafe { libc::madvise(p, len.max(1), libc::MADV_HUGEPAGE) };
        Ok(Mapping { ptr: NonNull::new(p.cast()).expect("mmap gave a non-null address"), len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped, once; no reference into it outlives self.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len.max(1)) };
    }
}

/// A frame's pin count, on a line of its own stride as upcache's 32-byte frame descriptor.
#[repr(align(32))]
struct PinWord(AtomicU64);

/// `--engine memory-indexed`: where each page lives, and the frames' pin counts.
struct Index {
    /// Per file, page → frame (together, a random permutation of every frame).
    tables: Vec<Box<[u32]>>,
    pins: Box<[PinWord]>,
    /// Every file's pages, frame after frame.
    arena: Mapping,
}

/// Plain memory: the ceiling for any cache's hits.
pub struct MemoryEngine {
    /// One mapping per file, unless `index` holds them all.
    files: Vec<Mapping>,
    index: Option<Index>,
    /// Bytes in each file.
    len: usize,
    stripes: Box<[Stripe]>,
    /// Reads touch one byte per page instead of copying (`--api pin`).
    pin: bool,
    page_size: usize,
    /// Writes stream past the CPU's caches (`stream_writes`).
    stream: bool,
}

/// Whether writes over `bytes` of data stream as upcache's do: when the data is far larger
/// than the last-level cache (4x: a random write then rarely finds its lines cached).
fn stream_writes(bytes: u64) -> bool {
    let llc = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index3/size")
        .ok()
        .and_then(|s| crate::size::parse_size(s.trim()).ok())
        .unwrap_or(32 << 20);
    bytes > 4 * llc
}

impl MemoryEngine {
    /// `files` mappings of `size` bytes (pages found through a shuffled index if `indexed`);
    /// reads touch a byte per page of `page_size` if `pin`.
    fn new(files: usize, size: u64, pin: bool, page_size: usize, indexed: bool) -> Result<Self> {
        let Ok(len) = usize::try_from(size) else { bail!("--size is too large for memory") };
        let stripes = (0..STRIPES).map(|_| Stripe(AtomicBool::new(false))).collect();
        if !indexed {
            let files = (0..files).map(|_| Mapping::new(len)).collect::<Result<Vec<_>>>()?;
            let stream = stream_writes(size * files.len() as u64);
            return Ok(MemoryEngine { files, index: None, len, stripes, pin, page_size, stream });
        }
        let per_file = len.div_ceil(page_size);
        let Some(frames) = per_file.checked_mul(files).filter(|&n| u32::try_from(n).is_ok()) else {
            bail!("{files} files of {size} bytes are too many pages for the indexed memory engine")
        };
        let mut order: Vec<u32> = (0..frames as u32).collect();
        order.shuffle(&mut SmallRng::seed_from_u64(0x5eed));
        let tables = order.chunks(per_file.max(1)).map(|c| c.into()).collect();
        let pins = (0..frames).map(|_| PinWord(AtomicU64::new(0))).collect();
        let arena = Mapping::new(frames * page_size)?;
        let index = Some(Index { tables, pins, arena });
        let stream = stream_writes(size * files as u64);
        Ok(MemoryEngine { files: Vec::new(), index, len, stripes, pin, page_size, stream })
    }

    /// Calls `f(address, bytes, frame)` for each page's part of `offset..offset + len` of
    /// `file`, in order: contiguous in a file's own mapping (no frame), or page by page through
    /// the index (the page's frame).
    fn each_page(
        &self,
        file: usize,
        base: Option<*mut u8>,
        offset: u64,
        len: usize,
        mut f: impl FnMut(*mut u8, usize, Option<usize>),
    ) {
        if let Some(p) = base {
            return f(p, len, None);
        }
        let Some(ix) = &self.index else { return };
        let ps = self.page_size;
        let (mut at, end) = (offset as usize, offset as usize + len);
        while at < end {
            let n = (ps - at % ps).min(end - at);
            let frame = ix.tables[file][at / ps] as usize;
            // SAFETY: frame < frames, and the arena holds frames * ps bytes.
            f(unsafe { ix.arena.ptr.as_ptr().add(frame * ps + at % ps) }, n, Some(frame));
            at += n;
        }
    }

    /// Runs `f` on file `file`'s bytes `offset..offset + len`, holding the lock of every
    /// stripe its pages hash to; `f` gets the start of the bytes in the file's own mapping
    /// (None when they are found page by page through the index); an error if the range is
    /// past the file's size.
    fn locked<R>(
        &self,
        file: usize,
        offset: u64,
        len: usize,
        f: impl FnOnce(Option<*mut u8>) -> R,
    ) -> Result<R> {
        if offset.checked_add(len as u64).is_none_or(|end| end > self.len as u64) {
            bail!(
                "{len} bytes at {offset} are past the memory engine's {} bytes (it does not grow)",
                self.len
            );
        }
        // The stripes as a bit set, taken in ascending order so that two ops cannot deadlock.
        let first_page = offset as usize / self.page_size;
        let pages = (offset as usize + len.max(1) - 1) / self.page_size - first_page + 1;
        // Files' pages hash apart, so page 0 of every file is not one stripe.
        let first = first_page + file * 7919;
        let mut set = [0u64; STRIPES / 64];
        for p in first..first + pages.min(STRIPES) {
            set[p % STRIPES / 64] |= 1 << (p % 64);
        }
        let each = |f: &mut dyn FnMut(usize)| {
            for (w, &bits) in set.iter().enumerate() {
                let mut b = bits;
                while b != 0 {
                    f(w * 64 + b.trailing_zeros() as usize);
                    b &= b - 1;
                }
            }
        };
        each(&mut |s| {
            // Acquire: what the last holder wrote under the lock is visible to us.
            while self.stripes[s].0.swap(true, Ordering::Acquire) {
                std::hint::spin_loop();
            }
        });
        // SAFETY: offset + len is inside the file's mapping (checked above).
        let base = self.files.get(file).map(|m| unsafe { m.ptr.as_ptr().add(offset as usize) });
        let r = f(base);
        // Release: our bytes are visible to the next holder.
        each(&mut |s| self.stripes[s].0.store(false, Ordering::Release));
        Ok(r)
    }
}

/// `--engine memory-indexed`: [`MemoryEngine`] finding pages through an index.
pub struct IndexedMemoryEngine(MemoryEngine);

impl MemoryEngine {
    fn setup_as(s: &Setup, indexed: bool) -> Result<Self> {
        MemoryEngine::new(s.files, s.size, s.upcache.api == Api::Pin, s.upcache.page_size, indexed)
    }

    fn copy_out(&self, file: usize, buf: &mut [u8], offset: u64) -> Result<()> {
        self.locked(file, offset, buf.len(), |base| {
            let mut at = 0;
            self.each_page(file, base, offset, buf.len(), |p, n, _| {
                // SAFETY: `each_page` gives `n` bytes of the file's data, which no other
                // thread touches while the stripes are held; `buf` is a distinct allocation
                // with `n` bytes from `at`.
                unsafe { std::ptr::copy_nonoverlapping(p, buf[at..].as_mut_ptr(), n) };
                at += n;
            })
        })
    }

    fn touch_pages(&self, file: usize, buf: &mut [u8], offset: u64) -> Result<()> {
        let ps = self.page_size as u64;
        // As upcache's pin path in the bench: one byte of each page the block covers.
        self.locked(file, offset, buf.len(), |base| {
            let Some(p) = base else {
                let mut at = 0;
                let ix = self.index.as_ref().expect("no mapping without an index");
                return self.each_page(file, None, offset, buf.len(), |p, n, frame| {
                    let pin = &ix.pins[frame.expect("pages found through the index have a frame")].0;
                    // Acquire/Release: a pin orders the reads of the page after it and
                    // before the unpin, as a cache's pin must.
                    pin.fetch_add(1, Ordering::Acquire);
                    // SAFETY: `p` is the page's first byte in the op, in the arena.
                    buf[at] = unsafe { p.read() };
                    pin.fetch_sub(1, Ordering::Release);
                    at += n;
                });
            };
            let mut i = 0;
            while i < buf.len() {
                // SAFETY: i < buf.len(), so p + i is inside the locked range.
                buf[i] = unsafe { p.add(i).read() };
                let pos = offset + i as u64;
                i += (pos - pos % ps + ps - pos) as usize;
            }
        })
    }

    fn copy_in(&self, file: usize, buf: &[u8], offset: u64) -> Result<()> {
        self.locked(file, offset, buf.len(), |base| {
            let mut at = 0;
            self.each_page(file, base, offset, buf.len(), |p, n, _| {
                // SAFETY: as in `copy_out`, copying the other way. The copy upcache writes its
                // frames with, streaming whole lines when the data set is far larger than the
                // CPU's caches (where upcache streams nearly every write: a page is rarely
                // written twice within `COLD_AFTER`), so the limit does the same work.
                unsafe { upcache::internals::frame::copy::into_frame(&buf[at..at + n], p, self.stream) };
                at += n;
            })
        })
    }
}

impl Engine for MemoryEngine {
    fn setup(s: &Setup) -> Result<Self> {
        MemoryEngine::setup_as(s, false)
    }

    fn read_all(&self, file: usize, buf: &mut [u8], offset: u64) -> Result<()> {
        self.copy_out(file, buf, offset)
    }

    #[inline]
    fn read(&self, file: usize, buf: &mut [u8], offset: u64) -> Result<()> {
        if self.pin {
            self.touch_pages(file, buf, offset)
        } else {
            self.copy_out(file, buf, offset)
        }
    }

    #[inline]
    fn write(&self, file: usize, buf: &[u8], offset: u64) -> Result<()> {
        self.copy_in(file, buf, offset)
    }

    fn settle(&mut self, _warm: bool) -> Result<()> {
        Ok(()) // nothing to make durable, nothing to drop: memory is always warm
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn sync_data(&self, _file: usize) -> Result<()> {
        Ok(())
    }

    fn teardown(self, _keep: bool) -> Result<()> {
        Ok(())
    }
}

impl Engine for IndexedMemoryEngine {
    fn setup(s: &Setup) -> Result<Self> {
        MemoryEngine::setup_as(s, true).map(IndexedMemoryEngine)
    }

    fn read_all(&self, file: usize, buf: &mut [u8], offset: u64) -> Result<()> {
        self.0.read_all(file, buf, offset)
    }

    #[inline]
    fn read(&self, file: usize, buf: &mut [u8], offset: u64) -> Result<()> {
        self.0.read(file, buf, offset)
    }

    #[inline]
    fn write(&self, file: usize, buf: &[u8], offset: u64) -> Result<()> {
        self.0.write(file, buf, offset)
    }

    fn settle(&mut self, warm: bool) -> Result<()> {
        self.0.settle(warm)
    }

    fn flush(&self) -> Result<()> {
        self.0.flush()
    }

    fn sync_data(&self, file: usize) -> Result<()> {
        self.0.sync_data(file)
    }

    fn teardown(self, keep: bool) -> Result<()> {
        self.0.teardown(keep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engines(api: Api) -> [MemoryEngine; 2] {
        [false, true].map(|indexed| MemoryEngine::new(2, 5 * 4096, api == Api::Pin, 4096, indexed).unwrap())
    }

    #[test]
    fn files_hold_what_was_written_and_refuse_ops_past_their_size() {
        for e in engines(Api::Copy) {
            let data: Vec<u8> = (0..3 * 4096 + 17).map(|i| (i * 7 % 251) as u8).collect();
            e.write(1, &data, 4096 - 9).unwrap();
            let mut back = vec![0u8; data.len()];
            e.read(1, &mut back, 4096 - 9).unwrap();
            assert_eq!(back, data);
            e.read(0, &mut back, 4096 - 9).unwrap();
            assert!(back.iter().all(|&b| b == 0), "files are apart");
            assert!(e.write(0, &[1], 5 * 4096).is_err());
            assert!(e.read(0, &mut [0u8; 2], 5 * 4096 - 1).is_err());
        }
    }

    #[test]
    fn the_pin_api_reads_one_byte_per_page() {
        for e in engines(Api::Pin) {
            let data: Vec<u8> = (0..2 * 4096).map(|i| (i % 200 + 1) as u8).collect();
            e.write(0, &data, 4096).unwrap();
            let mut back = vec![0u8; 2 * 4096 - 100];
            e.read(0, &mut back, 4096 + 100).unwrap();
            // The first byte of the op, then the first byte of each next page.
            let touched: Vec<usize> =
                back.iter().enumerate().filter(|(_, &b)| b != 0).map(|(i, _)| i).collect();
            assert_eq!(touched, [0, 4096 - 100]);
            assert_eq!(back[0], data[100]);
            assert_eq!(back[4096 - 100], data[4096]);
            let mut all = vec![0u8; data.len()];
            e.read_all(0, &mut all, 4096).unwrap();
            assert_eq!(all, data);
        }
    }

    #[test]
    fn the_indexed_engine_scatters_pages_and_leaves_no_pins() {
        let [_, e] = engines(Api::Pin);
        let ix = e.index.as_ref().unwrap();
        let mut frames: Vec<u32> = ix.tables.iter().flat_map(|t| t.iter().copied()).collect();
        assert_ne!(frames, (0..10).collect::<Vec<u32>>(), "shuffled, not in file order");
        frames.sort_unstable();
        assert_eq!(frames, (0..10).collect::<Vec<u32>>(), "every frame once");
        e.read(1, &mut vec![0u8; 5 * 4096], 0).unwrap();
        assert!(ix.pins.iter().all(|p| p.0.load(Ordering::Relaxed) == 0));
    }
}
