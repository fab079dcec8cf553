//! The library's inner layers, public for upcache's own benchmarks (`upcache index-bench`,
//! `alloc-bench`, `hit-ratio`) and tests. **Not part of the API**: they change in any
//! release, patch releases included, and semver does not cover them. A program needs none of
//! them: the crate root has every type the API takes or returns.
//!
//! Inside the crate they are the top-level modules (`crate::frame`, ...), as the crate's
//! "Inside" section and ARCHITECTURE.md name them; this file only declares them.

#[path = "alloc/mod.rs"]
pub mod alloc;
#[path = "file/mod.rs"]
pub mod file;
#[path = "frame/mod.rs"]
pub mod frame;
#[path = "index/mod.rs"]
pub mod index;
#[path = "io/mod.rs"]
pub mod io;
#[path = "meta/mod.rs"]
pub mod meta;
#[path = "policy/mod.rs"]
pub mod policy;
#[path = "shm/mod.rs"]
pub mod shm;
