//! Huge pages of shared memory on request, whatever the administrator allowed.
//!
//! A random hit copies from a 4 KiB page whose translation is seldom in the TLB: through the
//! shim, warm random reads of 512 MiB ran 1.15x faster with the cache's frames on 2 MiB pages
//! (bench/RESULTS.md, issue 34, eighth session). Linux puts a /dev/shm file or a memfd on huge
//! pages only where the administrator said so (`huge=` on the mount, `shmem_enabled`), which
//! is seldom. `MADV_COLLAPSE` (Linux 6.1) makes them on request whatever those settings say,
//! short of `deny`: it puts a 2 MiB aligned range of the file on one huge page, copying the
//! pages present and zeroing the rest; the caller maps it whole at once, and other processes
//! from their next fault once their small mappings are gone (Linux 6.5 removes them; before,
//! khugepaged does, in its time).
//! It wants at least one page present. The kernel keeps every byte of a range that processes
//! read and write meanwhile: it locks each small page, unmaps it everywhere and copies it; a
//! page pinned for I/O makes the collapse give up.

/// A huge page: 2 MiB, the alignment of a segment's regions and of its mapping.
pub const HUGE_PAGE: usize = 2 << 20;
const PAGE: usize = 4096;
/// `MADV_COLLAPSE`, not in every libc crate's list yet.
const MADV_COLLAPSE: libc::c_int = 25;

/// Collapses the 2 MiB at `at` (2 MiB aligned, mapped shared, at least one page present) into
/// one huge page, copying the pages present and zeroing the holes. Ok if it is one now;
/// otherwise the kernel's error: EINVAL where it never will (no `MADV_COLLAPSE` before 6.1,
/// huge pages denied) but for some passing failures too (a swap-in, a charge, a page pinned
/// on early 6.1), another where it cannot now (no huge page free, a page in use).
pub fn collapse(at: *mut u8) -> std::io::Result<()> {
    // SAFETY: advice on the caller's range of its own mapping; the kernel moves the pages'
    // bytes into a huge page and changes none.
    if unsafe { libc::madvise(at.cast(), HUGE_PAGE, MADV_COLLAPSE) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether `len` bytes at `at` (page-aligned, mapped shared) are all in their file, whoever
/// touched them; `resident` is room for a byte a page.
pub fn all_present(at: *mut u8, len: usize, resident: &mut Vec<u8>) -> bool {
    resident.resize(len.div_ceil(PAGE), 0);
    // SAFETY: the caller's range is mapped; mincore writes one byte per page into `resident`.
    let r = unsafe { libc::mincore(at.cast(), len, resident.as_mut_ptr()) };
    r == 0 && resident.iter().all(|b| b & 1 != 0)
}

/// Bytes of the mapping that holds `at` that this process maps with huge pages
/// (`ShmemPmdMapped` and `AnonHugePages` in /proc/self/smaps); None if it cannot tell. For
/// tests.
#[cfg(all(test, not(loom)))]
pub(crate) fn mapped_huge(at: *const u8) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let at = at as u64;
    let (mut inside, mut found) = (false, None);
    for line in smaps.lines() {
        let head = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = head.split_once('-').filter(|_| !head.ends_with(':')) {
            let range = u64::from_str_radix(lo, 16).ok().zip(u64::from_str_radix(hi, 16).ok());
            inside = range.is_some_and(|(lo, hi)| (lo..hi).contains(&at));
        } else if inside && (head == "ShmemPmdMapped:" || head == "AnonHugePages:") {
            // Shared memory's huge pages, or a private cache's (`Segment::make_private`).
            let kb = line.split_whitespace().nth(1)?.parse::<u64>().ok()?;
            found = Some(found.unwrap_or(0) + (kb << 10));
        }
    }
    found
}

/// Whether the running kernel is `major.minor` or later. For tests.
#[cfg(all(test, not(loom)))]
pub(crate) fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let v: Vec<u32> = release.split(['.', '-']).take(2).map(|x| x.parse().unwrap_or(0)).collect();
    v >= vec![major, minor]
}

/// Whether this kernel collapses shared memory on request (6.1 and later, not denied).
#[cfg(all(test, not(loom)))]
pub(crate) fn kernel_collapses() -> bool {
    let denied = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .map_or(true, |s| s.contains("[deny]"));
    kernel_at_least(6, 1) && !denied
}
