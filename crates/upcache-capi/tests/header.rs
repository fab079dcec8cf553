//! `include/upcache.h` is what cbindgen makes of the crate today. Regenerate with
//! `UPCACHE_BLESS=1 cargo test -p upcache-capi --test header`.

use std::path::Path;

#[test]
fn the_header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::generate_with_config(dir, config).expect("cbindgen runs on the crate");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let path = dir.join("include/upcache.h");
    if std::env::var_os("UPCACHE_BLESS").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/upcache.h is stale: run UPCACHE_BLESS=1 cargo test -p upcache-capi --test header"
    );
}
