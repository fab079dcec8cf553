//! `upcache_file`: an open file; reads, writes, syncs, truncation and size.

use crate::cache::{cache_ref, upcache_cache, CacheHandle};
use crate::config::text;
use crate::error::{guard, status, Fail, UPCACHE_OK};
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use upcache::File;

/// An opaque open file.
pub struct upcache_file {
    _opaque: [u8; 0],
}

/// What an `upcache_file` points to.
#[repr(C)]
pub(crate) struct FileHandle {
    /// First, at the same offset in every handle kind, read before anything else.
    tag: u64,
    pub(crate) file: File,
    /// The cache handle's count of open files.
    open_files: Arc<AtomicUsize>,
    /// Pins of the file out (`upcache_pin`): it does not close while there are any.
    pub(crate) pins: Arc<AtomicUsize>,
}

const FILE_TAG: u64 = 0x7563_6669_6c65_2121; // "ucfile!!"
const DEAD: u64 = 0;

/// # Safety
/// `p` is null or from `upcache_file_create`/`upcache_file_open`.
pub(crate) unsafe fn file_ref<'a>(p: *const upcache_file) -> Result<&'a FileHandle, Fail> {
    // SAFETY: the caller's contract: null or a handle, every kind `repr(C)` with the tag first.
    if unsafe { crate::error::tag_of(p.cast()) } != Some(FILE_TAG) {
        return Err(Fail::invalid(if p.is_null() { "file is null" } else { "not a live upcache_file" }));
    }
    // SAFETY: the tag says it is a live file.
    Ok(unsafe { &*p.cast::<FileHandle>() })
}

unsafe fn open(
    cache: *mut upcache_cache,
    name: *const c_char,
    out: *mut *mut upcache_file,
    create: bool,
) -> i32 {
    status(|| {
        if out.is_null() {
            return Err(Fail::invalid("out is null"));
        }
        // SAFETY: the caller's contract.
        let c = unsafe { cache_ref(cache) }?;
        // SAFETY: the caller's contract.
        let name = unsafe { text(name, "name") }?;
        let file = if create { c.cache.create_file(name) } else { c.cache.open_file(name) }?;
        // SAFETY: `out` is non-null and writable (the caller's contract).
        unsafe { hand_out(c, file, out) };
        Ok(())
    })
}

/// Makes a handle of `file`, counted open on `c`, and stores it in `*out`.
///
/// # Safety
/// `out` is non-null and writable.
unsafe fn hand_out(c: &CacheHandle, file: File, out: *mut *mut upcache_file) {
    // SeqCst: see `upcache_close`.
    c.open_files.fetch_add(1, Ordering::SeqCst);
    let handle =
        Box::new(FileHandle { tag: FILE_TAG, file, open_files: c.open_files.clone(), pins: Arc::default() });
    // SAFETY: the function's contract.
    unsafe { *out = Box::into_raw(handle).cast::<upcache_file>() };
}

/// Creates file `name` (empty) and opens it into `*out`.
///
/// # Safety
/// `cache` is from `upcache_create`/`upcache_open`; `name` is NUL-terminated; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn upcache_file_create(
    cache: *mut upcache_cache,
    name: *const c_char,
    out: *mut *mut upcache_file,
) -> i32 {
    // SAFETY: the function's contract.
    unsafe { open(cache, name, out, true) }
}

/// Opens existing file `name` into `*out`.
///
/// # Safety
/// As `upcache_file_create`.
#[no_mangle]
pub unsafe extern "C" fn upcache_file_open(
    cache: *mut upcache_cache,
    name: *const c_char,
    out: *mut *mut upcache_file,
) -> i32 {
    // SAFETY: the function's contract.
    unsafe { open(cache, name, out, false) }
}

/// Opens the OS file at `path` through the cache (plain-file mode: an existing file, not one
/// of the array's), creating it if `create`, into `*out`. Its size is the OS file's, exact
/// after each sync. `upcache_close_path` stops caching it. On a shared cache
/// (`upcache_attach`) the file is opened with this process's permissions, for writing if it
/// may (else for reading), and every attached process sees its pages; closing its last handle
/// in the last process to write it writes it back.
///
/// # Safety
/// As `upcache_file_create`, with `path` NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn upcache_file_open_path(
    cache: *mut upcache_cache,
    path: *const c_char,
    create: bool,
    out: *mut *mut upcache_file,
) -> i32 {
    status(|| {
        if out.is_null() {
            return Err(Fail::invalid("out is null"));
        }
        // SAFETY: the function's contract.
        let c = unsafe { cache_ref(cache) }?;
        // SAFETY: the function's contract.
        let path = unsafe { text(path, "path") }?;
        let file = c.cache.open_path(path, create)?;
        // SAFETY: `out` is non-null and writable (checked, and the function's contract).
        unsafe { hand_out(c, file, out) };
        Ok(())
    })
}

/// Stops caching the OS file at `path` (opened with `upcache_file_open_path`): writes its
/// dirty pages back and makes its size exact (no fsync, as close(2)), and drops its cached
/// pages: its handles then read what the OS file holds. `UPCACHE_ENOENT` if no handle has it
/// open.
///
/// # Safety
/// `cache` is from `upcache_create`/`upcache_open`; `path` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn upcache_close_path(cache: *mut upcache_cache, path: *const c_char) -> i32 {
    status(|| {
        // SAFETY: the function's contract.
        let c = unsafe { cache_ref(cache) }?;
        // SAFETY: the function's contract.
        Ok(c.cache.close_path(unsafe { text(path, "path") }?)?)
    })
}

/// Closes a file handle (its written data stays cached until written back or synced);
/// `UPCACHE_EBUSY`, still open, while pins of it are out (`upcache_pin`).
///
/// # Safety
/// `file` is from `upcache_file_create`/`upcache_file_open`, not closed before, and no other
/// thread uses it during or after the call.
#[no_mangle]
pub unsafe extern "C" fn upcache_file_close(file: *mut upcache_file) -> i32 {
    status(|| {
        // SAFETY: the function's contract.
        let f = unsafe { file_ref(file) }?;
        // SeqCst: against `upcache_pin`'s count.
        let pins = f.pins.load(Ordering::SeqCst);
        if pins > 0 {
            return Err(Fail {
                code: crate::error::UPCACHE_EBUSY,
                msg: format!("{pins} pins of the file are out"),
            });
        }
        // SAFETY: allocated by `Box::into_raw` in `open`, freed only here.
        let mut handle = unsafe { Box::from_raw(file.cast::<FileHandle>()) };
        handle.tag = DEAD;
        // SeqCst: see `upcache_close`.
        handle.open_files.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    })
}

/// Checks a buffer argument: a null pointer is only allowed with length 0.
pub(crate) fn buffer_ok(p: *const c_void, len: usize) -> Result<(), Fail> {
    if len > isize::MAX as usize {
        return Err(Fail::invalid("length over SSIZE_MAX"));
    }
    if p.is_null() && len > 0 {
        return Err(Fail::invalid("buffer is null"));
    }
    Ok(())
}

/// Reads up to `len` bytes at `offset` into `buf`, as pread(2): the bytes read, fewer at the
/// end of the file (0 past it), or a negative code.
///
/// # Safety
/// `file` is live; `buf` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn upcache_pread(
    file: *mut upcache_file,
    buf: *mut c_void,
    len: usize,
    offset: u64,
) -> i64 {
    guard(i64::from, || {
        // SAFETY: the function's contract.
        let f = unsafe { file_ref(file) }?;
        buffer_ok(buf, len)?;
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: `buf` is non-null and writable for `len` bytes (checked, and the contract).
        let b = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        Ok(f.file.read_at(b, offset)? as i64)
    })
}

/// Writes `len` bytes of `buf` at `offset`, as pwrite(2): the bytes written, `len` unless an
/// error (the file system full: `UPCACHE_ENOSPC` on the next call) stopped the write after
/// some of them, or a negative code if none was written.
///
/// # Safety
/// `file` is live; `buf` is readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn upcache_pwrite(
    file: *mut upcache_file,
    buf: *const c_void,
    len: usize,
    offset: u64,
) -> i64 {
    guard(i64::from, || {
        // SAFETY: the function's contract.
        let f = unsafe { file_ref(file) }?;
        buffer_ok(buf, len)?;
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: `buf` is non-null and readable for `len` bytes (checked, and the contract).
        let b = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
        Ok(f.file.write_at(b, offset)? as i64)
    })
}

/// Makes the file's data and length durable (fsync(2)).
///
/// # Safety
/// `file` is live.
#[no_mangle]
pub unsafe extern "C" fn upcache_fsync(file: *mut upcache_file) -> i32 {
    // SAFETY: the function's contract.
    status(|| Ok(unsafe { file_ref(file) }?.file.sync_all()?))
}

/// Makes the file's data durable, and its length if it changed (fdatasync(2)).
///
/// # Safety
/// `file` is live.
#[no_mangle]
pub unsafe extern "C" fn upcache_fdatasync(file: *mut upcache_file) -> i32 {
    // SAFETY: the function's contract.
    status(|| Ok(unsafe { file_ref(file) }?.file.sync_data()?))
}

/// Sets the file's length (ftruncate(2)): bytes past it are dropped, a longer file reads as
/// zeros past the old end.
///
/// # Safety
/// `file` is live.
#[no_mangle]
pub unsafe extern "C" fn upcache_ftruncate(file: *mut upcache_file, len: u64) -> i32 {
    // SAFETY: the function's contract.
    status(|| Ok(unsafe { file_ref(file) }?.file.set_len(len)?))
}

/// Stores the file's length in bytes in `*out`.
///
/// # Safety
/// `file` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn upcache_size(file: *mut upcache_file, out: *mut u64) -> i32 {
    status(|| {
        // SAFETY: the function's contract.
        let f = unsafe { file_ref(file) }?;
        if out.is_null() {
            return Err(Fail::invalid("out is null"));
        }
        // SAFETY: `out` is non-null and writable (the contract).
        unsafe { *out = f.file.len() };
        Ok(())
    })
}

const _: () = assert!(UPCACHE_OK == 0);
