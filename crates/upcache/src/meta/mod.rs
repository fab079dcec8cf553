//! The array's metadata: the catalog (layout, files, checkpoint generation), the metadata log
//! of namespace and length changes since (F2FS §3.3-3.5), and the namespace they rebuild.
//!
//! # On disk
//! Every file an array keeps, little-endian, each checksummed with crc32c:
//! - `upcache.catalog` (first device directory): the checkpoint, format version 3 (layout,
//!   generation, metadata directory, next id, every file's id, length and name). Replaced
//!   whole by write-temp, fsync, rename, fsync of the directory, so a crash leaves the old or
//!   the new one; a bad checksum is refused as `NotAnArray` (`catalog.rs`).
//! - `upcache.<array id>.metalog.<generation>` (metadata directory): a 32-byte header, then
//!   records until zeros; the logs from the catalog's generation on are replayed
//!   (`metalog.rs`).
//! - `upcache.device` (every device directory): the catalog's framing around the array id,
//!   the directory's position and the number of devices, so a directory from another array or
//!   in the wrong order is refused.
//! - `f<id>.data` (every device directory): a file's stripe units for that device, back to
//!   back, row `r` of the layout at slot `r` (the layout kind only decides which unit of each
//!   row a device gets); O_DIRECT unless `Config::with_allow_buffered`, mode 0600
//!   (`io/device/mod.rs`, `io/layout.rs`).
//! - `upcache.lock` (first device directory): an exclusive `flock`, taken without waiting
//!   and held as long as a `Cache` has the array open, so a second opener fails at once.
//!
//! Plain files (`Cache::open_path`) keep nothing here: the OS file is their only backing file.

pub mod array;
pub mod catalog;
pub mod metalog;
pub mod namespace;
