//! The library's version, for C programs: macros for the header they compiled against and
//! functions for the library they run with (a shared library may be newer than the header).

use std::ffi::c_char;

/// Major version of the header (`UPCACHE_VERSION_MAJOR`): a change breaks the C ABI.
pub const UPCACHE_VERSION_MAJOR: u32 = 0;
/// Minor version of the header: additions only.
pub const UPCACHE_VERSION_MINOR: u32 = 1;
/// Patch version of the header: fixes only.
pub const UPCACHE_VERSION_PATCH: u32 = 0;

/// "MAJOR.MINOR.PATCH" of the running library, NUL-terminated, static (never freed).
#[no_mangle]
pub extern "C" fn upcache_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The running library's version as one number, MAJOR * 10000 + MINOR * 100 + PATCH, to
/// compare with the same sum of the header's `UPCACHE_VERSION_*` macros.
#[no_mangle]
pub extern "C" fn upcache_version_number() -> u32 {
    const fn digits(s: &str) -> u32 {
        let b = s.as_bytes();
        let mut n = 0;
        let mut i = 0;
        while i < b.len() {
            n = n * 10 + (b[i] - b'0') as u32;
            i += 1;
        }
        n
    }
    const N: u32 = digits(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
        + digits(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + digits(env!("CARGO_PKG_VERSION_PATCH"));
    N
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header's macros are the crate's version (bump them with Cargo.toml's).
    #[test]
    fn the_header_version_is_the_crate_version() {
        let want = format!("{UPCACHE_VERSION_MAJOR}.{UPCACHE_VERSION_MINOR}.{UPCACHE_VERSION_PATCH}");
        assert_eq!(want, env!("CARGO_PKG_VERSION"));
        // SAFETY: upcache_version returns a static NUL-terminated string.
        let s = unsafe { std::ffi::CStr::from_ptr(upcache_version()) };
        assert_eq!(s.to_str().unwrap(), want);
        assert_eq!(
            upcache_version_number(),
            UPCACHE_VERSION_MAJOR * 10000 + UPCACHE_VERSION_MINOR * 100 + UPCACHE_VERSION_PATCH
        );
    }
}
