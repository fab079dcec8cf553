//! `upcache_page`: a page of a file pinned in the cache, its bytes read in place (no copy):
//! `File::pin` for C.

use crate::error::{status, Fail};
use crate::file::{file_ref, upcache_file};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// An opaque pinned page.
pub struct upcache_page {
    _opaque: [u8; 0],
}

/// What an `upcache_page` points to.
#[repr(C)]
struct PageHandle {
    /// First, at the same offset in every handle kind, read before anything else.
    tag: u64,
    /// Dropped before `pins` goes down (field order), while the file it borrows is open.
    page: upcache::PageRef<'static>,
    /// The file handle's count of pins out, which keeps it from closing.
    pins: Arc<AtomicUsize>,
}

const PAGE_TAG: u64 = 0x7563_7061_6765_2121; // "ucpage!!"
const DEAD: u64 = 0;

/// Pins the page of `file` that holds byte `offset` and gives its bytes in place: `*data` the
/// page's first byte, `*len` its bytes up to the end of the file, `*start` (if not NULL) the
/// file offset of `*data`, `*out` the pin, to give back to `upcache_unpin`. Until then the
/// bytes stay as they are and the page stays cached: a write or truncation of it, in this
/// process or (on a shared cache) any other, waits for the unpin, so the pin holder must not
/// write, extend or truncate the file itself. The file cannot be closed while pins of it are
/// out (`UPCACHE_EBUSY`). `UPCACHE_EINVAL` at or past the end of the file; `UPCACHE_EBUSY` past
/// 64 pins of a process on a shared cache; `UPCACHE_EUNSUPPORTED` for a file a shared cache
/// no longer caches (another process reached it past the cache).
///
/// # Safety
/// `file` is live; `data`, `len` and `out` are writable; `start` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn upcache_pin(
    file: *mut upcache_file,
    offset: u64,
    data: *mut *const c_void,
    len: *mut usize,
    start: *mut u64,
    out: *mut *mut upcache_page,
) -> i32 {
    status(|| {
        if data.is_null() || len.is_null() || out.is_null() {
            return Err(Fail::invalid("data, len or out is null"));
        }
        // SAFETY: the function's contract.
        let f = unsafe { file_ref(file) }?;
        let page = f.file.pin(offset)?;
        // SAFETY: the page borrows the file handle's file, which lives on the heap until
        // `upcache_file_close` frees it; that refuses while `pins` (counted below, before
        // the handle goes out) is not zero, and the page is dropped before its count goes
        // down (`upcache_unpin`). So the borrow outlives no file.
        let page: upcache::PageRef<'static> = unsafe { std::mem::transmute(page) };
        // SeqCst: against `upcache_file_close`'s check, as the cache's count of open files.
        f.pins.fetch_add(1, Ordering::SeqCst);
        let bytes: &[u8] = &page;
        // SAFETY: the pointers are non-null (checked) and writable (the contract).
        unsafe {
            *data = bytes.as_ptr().cast();
            *len = bytes.len();
            if !start.is_null() {
                *start = page.offset();
            }
        }
        let handle = Box::new(PageHandle { tag: PAGE_TAG, page, pins: f.pins.clone() });
        // SAFETY: as above.
        unsafe { *out = Box::into_raw(handle).cast::<upcache_page>() };
        Ok(())
    })
}

/// Gives back a pin from `upcache_pin`; its bytes must not be read after. Any thread may.
///
/// # Safety
/// `page` is from `upcache_pin`, not unpinned before, and no other thread uses it during or
/// after the call.
#[no_mangle]
pub unsafe extern "C" fn upcache_unpin(page: *mut upcache_page) -> i32 {
    status(|| {
        // SAFETY: the caller's contract: null or a handle, every kind `repr(C)` with the tag first.
        if unsafe { crate::error::tag_of(page.cast()) } != Some(PAGE_TAG) {
            return Err(Fail::invalid(if page.is_null() {
                "page is null"
            } else {
                "not a live upcache_page"
            }));
        }
        // SAFETY: allocated by `Box::into_raw` in `upcache_pin`, freed only here.
        let mut handle = unsafe { Box::from_raw(page.cast::<PageHandle>()) };
        handle.tag = DEAD;
        let pins = handle.pins.clone();
        drop(handle);
        // SeqCst: as in `upcache_pin`; after the page's drop.
        pins.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    })
}
