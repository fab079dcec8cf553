//! The limit engine (`--engine memory`): each file's data in one anonymous mapping of its
//! size, advised for transparent huge pages (as upcache's frame arena is), read and written with
//! one copy per op (`--api copy`) or one byte touched per page (`--api pin`, what upcache's pin
//! path does). No page cache can do less than this for a hit, so hit figures are ratios to it.
//!
//! The one extra cost: pages hash to 256 spin locks, and an op holds those of its pages while
//! it copies, so that threads touching the same bytes do not race (a data race is undefined
//! behaviour, and any correct cache keeps a writer off the bytes others read). With one
//! thread that is one uncontended atomic swap per op, on a lock table of 16 KiB that stays in
//! cache.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// Plain memory: the ceiling for any cache's hits.
pub struct MemoryEngine {
    files: Vec<Mapping>,
    stripes: Box<[Stripe]>,
    /// Reads touch one byte per page instead of copying (`--api pin`).
    pin: bool,
    page_size: usize,
}

impl MemoryEngine {
    /// `files` mappings of `size` bytes; reads touch a byte per page of `page_size` if `pin`.
    fn new(files: usize, size: u64, pin: bool, page_size: usize) -> Result<Self> {
        let Ok(len) = usize::try_from(size) else { bail!("--size is too large for memory") };
        let files = (0..files).map(|_| Mapping::new(len)).collect::<Result<Vec<_>>>()?;
        let stripes = (0..STRIPES).map(|_| Stripe(AtomicBool::new(false))).collect();
        Ok(MemoryEngine { files, stripes, pin, page_size })
    }

    /// Runs `f` on file `file`'s bytes `offset..offset + len`, holding the lock of every
    /// stripe its pages hash to; an error if the range is outside the mapping.
    fn locked<R>(&self, file: usize, offset: u64, len: usize, f: impl FnOnce(*mut u8) -> R) -> Result<R> {
        let m = &self.files[file];
        if offset.checked_add(len as u64).is_none_or(|end| end > m.len as u64) {
            bail!("{len} bytes at {offset} are past the memory engine's {} bytes (it does not grow)", m.len);
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
        // SAFETY: offset + len is inside the mapping (checked above).
        let r = f(unsafe { m.ptr.as_ptr().add(offset as usize) });
        // Release: our bytes are visible to the next holder.
        each(&mut |s| self.stripes[s].0.store(false, Ordering::Release));
        Ok(r)
    }
}

impl Engine for MemoryEngine {
    fn setup(s: &Setup) -> Result<Self> {
        MemoryEngine::new(s.files, s.size, s.upcache.api == Api::Pin, s.upcache.page_size)
    }

    fn read_all(&self, file: usize, buf: &mut [u8], offset: u64) -> Result<()> {
        // SAFETY: `locked` gives a pointer to `buf.len()` bytes of the mapping, which no other
        // thread touches while it runs; `buf` is a distinct allocation.
        self.locked(file, offset, buf.len(), |p| unsafe {
            std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len())
        })
    }

    #[inline]
    fn read(&self, file: usize, buf: &mut [u8], offset: u64) -> Result<()> {
        if !self.pin {
            return self.read_all(file, buf, offset);
        }
        let ps = self.page_size as u64;
        // As upcache's pin path in the bench: one byte of each page the block covers.
        self.locked(file, offset, buf.len(), |p| {
            let mut i = 0;
            while i < buf.len() {
                // SAFETY: i < buf.len(), so p + i is inside the locked range.
                buf[i] = unsafe { p.add(i).read() };
                let pos = offset + i as u64;
                i += (pos - pos % ps + ps - pos) as usize;
            }
        })
    }

    #[inline]
    fn write(&self, file: usize, buf: &[u8], offset: u64) -> Result<()> {
        // SAFETY: as in `read_all`, copying the other way.
        self.locked(file, offset, buf.len(), |p| unsafe {
            std::ptr::copy_nonoverlapping(buf.as_ptr(), p, buf.len())
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(api: Api) -> MemoryEngine {
        MemoryEngine::new(2, 5 * 4096, api == Api::Pin, 4096).unwrap()
    }

    #[test]
    fn files_hold_what_was_written_and_refuse_ops_past_their_size() {
        let e = engine(Api::Copy);
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

    #[test]
    fn the_pin_api_reads_one_byte_per_page() {
        let e = engine(Api::Pin);
        let data: Vec<u8> = (0..2 * 4096).map(|i| (i % 200 + 1) as u8).collect();
        e.write(0, &data, 4096).unwrap();
        let mut back = vec![0u8; 2 * 4096 - 100];
        e.read(0, &mut back, 4096 + 100).unwrap();
        // The first byte of the op, then the first byte of each next page.
        let touched: Vec<usize> = back.iter().enumerate().filter(|(_, &b)| b != 0).map(|(i, _)| i).collect();
        assert_eq!(touched, [0, 4096 - 100]);
        assert_eq!(back[0], data[100]);
        assert_eq!(back[4096 - 100], data[4096]);
        let mut all = vec![0u8; data.len()];
        e.read_all(0, &mut all, 4096).unwrap();
        assert_eq!(all, data);
    }
}
