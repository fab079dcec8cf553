//! `upcache_cache`: an open array.

use crate::config::{config_ref, text, upcache_config};
use crate::error::{status, Fail, UPCACHE_EBUSY};
use std::ffi::c_char;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use upcache::Cache;

/// An opaque open cache.
pub struct upcache_cache {
    _opaque: [u8; 0],
}

/// What an `upcache_cache` points to.
#[repr(C)]
pub(crate) struct CacheHandle {
    /// First, at the same offset in every handle kind, read before anything else.
    tag: u64,
    pub(crate) cache: Cache,
    /// File handles open on it: the cache cannot be closed under them.
    pub(crate) open_files: Arc<AtomicUsize>,
}

const CACHE_TAG: u64 = 0x7563_6361_6368_6521; // "uccache!"
const DEAD: u64 = 0;

/// The live cache behind `p`.
///
/// # Safety
/// `p` is null or from `upcache_create`/`upcache_open`.
pub(crate) unsafe fn cache_ref<'a>(p: *const upcache_cache) -> Result<&'a CacheHandle, Fail> {
    // SAFETY: the caller's contract: null or a handle, every kind `repr(C)` with the tag first.
    if unsafe { crate::error::tag_of(p.cast()) } != Some(CACHE_TAG) {
        return Err(Fail::invalid(if p.is_null() { "cache is null" } else { "not a live upcache_cache" }));
    }
    // SAFETY: the tag says it is a live cache.
    Ok(unsafe { &*p.cast::<CacheHandle>() })
}

unsafe fn start(config: *const upcache_config, out: *mut *mut upcache_cache, create: bool) -> i32 {
    status(|| {
        if out.is_null() {
            return Err(Fail::invalid("out is null"));
        }
        // SAFETY: the caller's contract.
        let c = unsafe { config_ref(config) }?;
        let cache = if create { Cache::create(c.config.clone()) } else { Cache::open(c.config.clone()) }?;
        let handle = Box::new(CacheHandle { tag: CACHE_TAG, cache, open_files: Arc::default() });
        // SAFETY: `out` is non-null and writable (the caller's contract).
        unsafe { *out = Box::into_raw(handle).cast::<upcache_cache>() };
        Ok(())
    })
}

/// Creates a new array in the configuration's directories and opens it into `*out`.
///
/// # Safety
/// `config` is from `upcache_config_new`; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn upcache_create(config: *const upcache_config, out: *mut *mut upcache_cache) -> i32 {
    // SAFETY: the function's contract.
    unsafe { start(config, out, true) }
}

/// Opens an existing array into `*out` (replaying its metadata log).
///
/// # Safety
/// `config` is from `upcache_config_new`; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn upcache_open(config: *const upcache_config, out: *mut *mut upcache_cache) -> i32 {
    // SAFETY: the function's contract.
    unsafe { start(config, out, false) }
}

/// Writes everything back, makes it durable and closes the cache. Fails with
/// `UPCACHE_EBUSY` while file handles are open on it, and with the sync's error if the data
/// could not be made durable: in both cases nothing is closed and no data is dropped (close
/// the files, or clear the device's fault, and call again).
///
/// # Safety
/// `cache` is from `upcache_create`/`upcache_open`, not closed before.
#[no_mangle]
pub unsafe extern "C" fn upcache_close(cache: *mut upcache_cache) -> i32 {
    status(|| {
        // SAFETY: the function's contract.
        let c = unsafe { cache_ref(cache) }?;
        // SeqCst: pairs with the increments of file opens; no open may slip past the check
        // (opens on a cache being closed are the caller's race, as with close(2)).
        let open = c.open_files.load(Ordering::SeqCst);
        if open > 0 {
            return Err(Fail { code: UPCACHE_EBUSY, msg: format!("{open} file handle(s) still open") });
        }
        c.cache.sync()?;
        // SAFETY: allocated by `Box::into_raw` in `start`, freed only here.
        let mut handle = unsafe { Box::from_raw(cache.cast::<CacheHandle>()) };
        handle.tag = DEAD;
        drop(handle);
        Ok(())
    })
}

/// Makes every file's written data and length durable.
///
/// # Safety
/// `cache` is from `upcache_create`/`upcache_open`.
#[no_mangle]
pub unsafe extern "C" fn upcache_sync(cache: *mut upcache_cache) -> i32 {
    status(|| {
        // SAFETY: the function's contract.
        Ok(unsafe { cache_ref(cache) }?.cache.sync()?)
    })
}

/// Removes file `name` (its handles must be closed).
///
/// # Safety
/// `cache` is from `upcache_create`/`upcache_open`; `name` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn upcache_remove(cache: *mut upcache_cache, name: *const c_char) -> i32 {
    status(|| {
        // SAFETY: the function's contract.
        let c = unsafe { cache_ref(cache) }?;
        // SAFETY: the function's contract.
        Ok(c.cache.remove_file(unsafe { text(name, "name") }?)?)
    })
}
