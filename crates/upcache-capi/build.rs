//! The shared library's soname carries the part of the version that may break the C ABI:
//! the major, or while that is 0 the minor too (Cargo's semver for 0.x), so that programs
//! linked against one ABI never load an incompatible one.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap();
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").unwrap();
    let abi = if major == "0" { format!("0.{minor}") } else { major };
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libupcache_capi.so.{abi}");
    }
}
