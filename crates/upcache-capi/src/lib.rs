//! The C ABI of upcache: `include/upcache.h` (generated from this crate by cbindgen).
//!
//! Conventions:
//! - Handles (`upcache_config`, `upcache_cache`, `upcache_file`, `upcache_page`,
//!   `upcache_queue`) are opaque pointers made by `*_new`, `upcache_create`/`upcache_open`,
//!   `upcache_file_create`/`upcache_file_open` and `upcache_pin`, and given back by the
//!   matching `*_free`/`*_close`/`upcache_unpin`. NULL is reported as `UPCACHE_EINVAL`.
//!   Each handle starts with a tag that every call checks, which catches a handle of another
//!   kind and, often, one already closed; but using a closed handle is undefined behaviour
//!   (its memory may have been reused by a new handle), as with a closed file descriptor.
//! - Functions return `UPCACHE_OK` (0) or a negative `UPCACHE_E*` code; `upcache_pread` and
//!   `upcache_pwrite` return a byte count or a negative code. `upcache_last_error` gives the
//!   calling thread's last error message.
//! - No panic crosses the boundary: every entry point catches one and reports
//!   `UPCACHE_EPANIC`.
//! - Cache and file handles may be used from any thread, and shared by threads (not across
//!   their close). A config is set up by one thread, then read by any; a queue is used by
//!   one thread at a time.

#![allow(non_camel_case_types)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod cache;
mod config;
mod error;
mod file;
mod pin;
mod queue;
mod version;

pub use cache::*;
pub use config::*;
pub use error::*;
pub use file::*;
pub use pin::*;
pub use queue::*;
pub use version::*;
