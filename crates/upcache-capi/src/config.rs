//! `upcache_config`: the array's device directories, memory budget and settings.

use crate::error::{guard, status, Fail};
use std::ffi::{c_char, CStr};
use std::path::PathBuf;
use upcache::Config;

/// An opaque configuration.
pub struct upcache_config {
    _opaque: [u8; 0],
}

/// What an `upcache_config` points to.
#[repr(C)]
pub(crate) struct ConfigHandle {
    /// First, at the same offset in every handle kind, read before anything else.
    tag: u64,
    pub(crate) config: Config,
}

const CONFIG_TAG: u64 = 0x7563_636f_6e66_6967; // "ucconfig"
const DEAD: u64 = 0;

/// A UTF-8 string argument.
///
/// # Safety
/// `p` is null or a NUL-terminated string.
pub(crate) unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(Fail::invalid(format!("{what} is null")));
    }
    // SAFETY: the caller passes a NUL-terminated string (the function's contract).
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| Fail::invalid(format!("{what} is not UTF-8")))
}

/// The live configuration behind `p`.
///
/// # Safety
/// `p` is null or a pointer from `upcache_config_new` (possibly freed: then its tag says so,
/// as long as the memory was not reused).
pub(crate) unsafe fn config_ref<'a>(p: *const upcache_config) -> Result<&'a ConfigHandle, Fail> {
    // SAFETY: the caller's contract: null or a handle (of any kind, all `repr(C)` with the tag
    // first), so reading the tag alone is in bounds.
    if unsafe { crate::error::tag_of(p.cast()) } != Some(CONFIG_TAG) {
        return Err(Fail::invalid(if p.is_null() { "config is null" } else { "not a live upcache_config" }));
    }
    // SAFETY: the tag says it is a live config.
    Ok(unsafe { &*p.cast::<ConfigHandle>() })
}

unsafe fn config_mut<'a>(p: *mut upcache_config) -> Result<&'a mut ConfigHandle, Fail> {
    // SAFETY: as in `config_ref`.
    if unsafe { crate::error::tag_of(p.cast_const().cast()) } != Some(CONFIG_TAG) {
        return Err(Fail::invalid(if p.is_null() { "config is null" } else { "not a live upcache_config" }));
    }
    // SAFETY: a live config, not shared during the call (a config is set up by one thread).
    Ok(unsafe { &mut *p.cast::<ConfigHandle>() })
}

/// A configuration over `ndirs` device directories (one per SSD) with `memory_bytes` of page
/// frames; NULL on a bad argument (see `upcache_last_error`). Settings are checked when the
/// cache is created or opened.
///
/// # Safety
/// `dirs` points to `ndirs` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn upcache_config_new(
    dirs: *const *const c_char,
    ndirs: usize,
    memory_bytes: u64,
) -> *mut upcache_config {
    guard(
        |_| std::ptr::null_mut(),
        || {
            if dirs.is_null() || ndirs == 0 || ndirs > upcache::MAX_DEVICES {
                return Err(Fail::invalid(format!("need 1 to {} device directories", upcache::MAX_DEVICES)));
            }
            let mut paths = Vec::with_capacity(ndirs);
            for i in 0..ndirs {
                // SAFETY: `dirs` has `ndirs` entries (the function's contract).
                let p = unsafe { *dirs.add(i) };
                // SAFETY: each entry is NUL-terminated (the function's contract).
                paths.push(PathBuf::from(unsafe { text(p, "a device directory") }?));
            }
            let config = Config::new(paths, memory_bytes);
            Ok(Box::into_raw(Box::new(ConfigHandle { tag: CONFIG_TAG, config })).cast::<upcache_config>())
        },
    )
}

/// Frees a configuration (NULL is ignored). Caches made from it are not affected.
///
/// # Safety
/// `config` is NULL or from `upcache_config_new`, not freed before.
#[no_mangle]
pub unsafe extern "C" fn upcache_config_free(config: *mut upcache_config) -> i32 {
    status(|| {
        if config.is_null() {
            return Ok(());
        }
        // SAFETY: the function's contract.
        let c = unsafe { config_mut(config) }?;
        c.tag = DEAD;
        // SAFETY: allocated by `Box::into_raw` in `upcache_config_new`, freed only here.
        drop(unsafe { Box::from_raw(config.cast::<ConfigHandle>()) });
        Ok(())
    })
}

/// Applies `f` to a live configuration.
unsafe fn update(config: *mut upcache_config, f: impl FnOnce(Config) -> Result<Config, Fail>) -> i32 {
    status(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { config_mut(config) }?;
        // On a bad value the configuration stays as it was.
        c.config = f(c.config.clone())?;
        Ok(())
    })
}

/// Sets the page size (a power of two from 4 KiB to 64 KiB; default 4 KiB).
///
/// # Safety
/// `config` is from `upcache_config_new`.
#[no_mangle]
pub unsafe extern "C" fn upcache_config_set_page_size(config: *mut upcache_config, bytes: usize) -> i32 {
    // SAFETY: the function's contract.
    unsafe { update(config, |c| Ok(c.with_page_size(bytes))) }
}

/// Sets the stripe unit (a multiple of the page size; default 128 KiB).
///
/// # Safety
/// `config` is from `upcache_config_new`.
#[no_mangle]
pub unsafe extern "C" fn upcache_config_set_stripe_unit(config: *mut upcache_config, bytes: u64) -> i32 {
    // SAFETY: the function's contract.
    unsafe { update(config, |c| Ok(c.with_stripe_unit(bytes))) }
}

/// Sets the number of flusher threads (default 2).
///
/// # Safety
/// `config` is from `upcache_config_new`.
#[no_mangle]
pub unsafe extern "C" fn upcache_config_set_flushers(config: *mut upcache_config, threads: usize) -> i32 {
    // SAFETY: the function's contract.
    unsafe { update(config, |c| Ok(c.with_flusher_threads(threads))) }
}

/// Sets the replacement policy by name: clock, gclock, lru, lfu, s3fifo or sieve.
///
/// # Safety
/// `config` is from `upcache_config_new`; `policy` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn upcache_config_set_policy(
    config: *mut upcache_config,
    policy: *const c_char,
) -> i32 {
    // SAFETY: the function's contract (`policy` is read inside the guard, as `config`).
    unsafe { update(config, |c| Ok(c.with_policy(text(policy, "policy")?.parse::<upcache::PolicyKind>()?))) }
}

/// Allows buffered backing files where the file system refuses O_DIRECT (default: refuse).
///
/// # Safety
/// `config` is from `upcache_config_new`.
#[no_mangle]
pub unsafe extern "C" fn upcache_config_set_allow_buffered(config: *mut upcache_config, allow: bool) -> i32 {
    // SAFETY: the function's contract.
    unsafe { update(config, |c| Ok(c.with_allow_buffered(allow))) }
}

/// Makes the whole frame memory resident when the cache is created (default: off), so that no
/// miss pays the first touch of its frame's memory; creation then takes that time.
///
/// # Safety
/// `config` is from `upcache_config_new`.
#[no_mangle]
pub unsafe extern "C" fn upcache_config_set_prefault(config: *mut upcache_config, on: bool) -> i32 {
    // SAFETY: the function's contract.
    unsafe { update(config, |c| Ok(c.with_prefault(on))) }
}

/// Turns a technique on or off by the name of its `upcache bench` flag: "range-lock",
/// "hot-index", "run-merging", "bundling" or "streams" (all on by default), so that each
/// one's effect can be measured. `UPCACHE_EINVAL` for another name.
///
/// # Safety
/// `config` is from `upcache_config_new`; `name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn upcache_config_set_switch(
    config: *mut upcache_config,
    name: *const c_char,
    on: bool,
) -> i32 {
    // SAFETY: the function's contract (`name` is read inside the guard, as `config`).
    unsafe {
        update(config, |c| {
            Ok(match text(name, "name")? {
                "range-lock" => c.with_range_lock(on),
                "hot-index" => c.with_hot_index(on),
                "run-merging" => c.with_run_merging(on),
                "bundling" => c.with_bundling(on),
                "streams" => c.with_streams(on),
                other => return Err(Fail::invalid(format!("no switch named {other:?}"))),
            })
        })
    }
}
