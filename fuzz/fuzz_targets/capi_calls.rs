//! The C ABI's argument checks: the input is a program of calls (pread, pwrite, ftruncate,
//! size, syncs, opens and creates with arbitrary name bytes, removes, closes, null handles,
//! null buffers, huge lengths and offsets) on one array; every call must return a known code
//! (never UPCACHE_EPANIC) and the process must not crash. Buffers are real and as long as the
//! length passed, except where the call passes NULL on purpose.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::ffi::{c_char, CString};
use std::sync::OnceLock;
use upcache_capi::*;

struct Array {
    _dir: tempfile::TempDir,
    cache: usize, // *mut upcache_cache, shared by the runs of this process
}

fn array() -> &'static Array {
    static A: OnceLock<Array> = OnceLock::new();
    A.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let d = CString::new(dir.path().join("dev0").to_str().unwrap()).unwrap();
        let dirs = [d.as_ptr()];
        // SAFETY: one valid NUL-terminated directory.
        let cfg = unsafe { upcache_config_new(dirs.as_ptr(), 1, 4 << 20) };
        // SAFETY: a live config.
        unsafe { upcache_config_set_allow_buffered(cfg, true) };
        let mut cache = std::ptr::null_mut();
        // SAFETY: a live config and a writable out pointer.
        assert_eq!(unsafe { upcache_create(cfg, &mut cache) }, UPCACHE_OK);
        // SAFETY: the config is live and not used after.
        unsafe { upcache_config_free(cfg) };
        Array { _dir: dir, cache: cache as usize }
    })
}

fn known(code: i64) -> bool {
    code >= 0 || (UPCACHE_EFBIG as i64..=UPCACHE_EINVAL as i64).contains(&code) && code != UPCACHE_EPANIC as i64
}

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u64(&mut self) -> u64 {
        let mut v = 0u64;
        for _ in 0..8 {
            v = v << 8 | u64::from(self.byte().unwrap_or(0));
        }
        v
    }
    fn name(&mut self) -> CString {
        let n = usize::from(self.byte().unwrap_or(0) % 8);
        let bytes: Vec<u8> = (0..n).map(|_| self.byte().unwrap_or(b'a')).map(|b| if b == 0 { b'/' } else { b }).collect();
        CString::new(bytes).unwrap()
    }
}

fuzz_target!(|data: &[u8]| {
    let cache = array().cache as *mut upcache_cache;
    let mut input = Input(data);
    let mut files: Vec<*mut upcache_file> = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while let Some(op) = input.byte() {
        let pick = |files: &Vec<*mut upcache_file>, b: u8| -> *mut upcache_file {
            if files.is_empty() || b == 0 { std::ptr::null_mut() } else { files[usize::from(b) % files.len()] }
        };
        let code: i64 = match op % 12 {
            0 | 1 => {
                let name = input.name();
                let mut f = std::ptr::null_mut();
                // SAFETY: a live cache, a NUL-terminated name, a writable out pointer.
                let rc = unsafe {
                    if op % 12 == 0 { upcache_file_create(cache, name.as_ptr(), &mut f) } else { upcache_file_open(cache, name.as_ptr(), &mut f) }
                };
                if rc == UPCACHE_OK {
                    files.push(f);
                }
                rc.into()
            }
            2 | 3 => {
                let f = pick(&files, input.byte().unwrap_or(0));
                let len = (input.u64() % (buf.len() as u64 + 1)) as usize;
                let off = input.u64() >> (input.byte().unwrap_or(0) % 64);
                let p = if input.byte().unwrap_or(1) == 0 { std::ptr::null_mut() } else { buf.as_mut_ptr() };
                // SAFETY: `p` is null or `buf`, which is `len` bytes or more; `f` is null or live.
                unsafe {
                    if op % 12 == 2 { upcache_pread(f, p.cast(), len, off) } else { upcache_pwrite(f, p.cast(), len, off) }
                }
            }
            4 => {
                let f = pick(&files, input.byte().unwrap_or(0));
                let len = input.u64() >> (input.byte().unwrap_or(0) % 64);
                // SAFETY: `f` is null or live.
                unsafe { upcache_ftruncate(f, len) }.into()
            }
            5 => {
                let f = pick(&files, input.byte().unwrap_or(0));
                let mut size = 0u64;
                // SAFETY: `f` is null or live; `size` is writable.
                unsafe { upcache_size(f, &mut size) }.into()
            }
            6 => {
                let f = pick(&files, input.byte().unwrap_or(0));
                // SAFETY: `f` is null or live.
                unsafe { upcache_fdatasync(f) }.into()
            }
            7 => {
                let f = pick(&files, input.byte().unwrap_or(0));
                // SAFETY: `f` is null or live.
                unsafe { upcache_fsync(f) }.into()
            }
            8 => {
                // Close one handle (it leaves the list: closed handles are never passed again).
                if files.is_empty() {
                    // SAFETY: NULL is allowed and refused.
                    unsafe { upcache_file_close(std::ptr::null_mut()) }.into()
                } else {
                    let i = usize::from(input.byte().unwrap_or(0)) % files.len();
                    // SAFETY: a live handle, not used after.
                    unsafe { upcache_file_close(files.swap_remove(i)) }.into()
                }
            }
            9 => {
                let name = input.name();
                // SAFETY: a live cache and a NUL-terminated name.
                unsafe { upcache_remove(cache, name.as_ptr()) }.into()
            }
            10 => {
                let name = input.name();
                let mut f = std::ptr::null_mut();
                // Null cache, null name, null out: all refused.
                // SAFETY: null pointers are allowed and refused.
                let a = unsafe { upcache_file_open(std::ptr::null_mut(), name.as_ptr(), &mut f) };
                // SAFETY: as above.
                let b = unsafe { upcache_file_create(cache, std::ptr::null::<c_char>(), &mut f) };
                // SAFETY: as above.
                let c = unsafe { upcache_file_create(cache, name.as_ptr(), std::ptr::null_mut()) };
                assert!(a == UPCACHE_EINVAL && b == UPCACHE_EINVAL && c == UPCACHE_EINVAL);
                a.into()
            }
            _ => {
                // SAFETY: a live cache.
                unsafe { upcache_sync(cache) }.into()
            }
        };
        assert!(known(code), "op {op}: unknown or panic code {code}");
    }
    for f in files {
        // SAFETY: live handles, closed once.
        assert_eq!(unsafe { upcache_file_close(f) }, UPCACHE_OK);
    }
});
