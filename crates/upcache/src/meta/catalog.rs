//! The catalog: the array's layout and every file's name, id and size, kept crash-safe.
//!
//! # Format (version 3, little-endian)
//! ```text
//! "UPCACHE\0"  u32 version  u32 body_len  u32 crc32c(body)  body
//! body: u64 array_id  u32 devices  u32 page_size  u64 stripe_unit  u32 layout_kind
//!       u64 generation  u16 meta_dir_len  meta_dir bytes
//!       u64 next_file_id  u32 file_count  { u64 id  u64 len  u16 name_len  name bytes } * file_count
//! ```
//! Version 1 (before layouts) has no `layout_kind`; it is read as plain striping. Version 2
//! (before the metadata log) has no `generation` and `meta_dir`: generation 0, log in the
//! first device directory. Writes are always version 3. Device markers use the same frame.
//! The catalog lives in the first device directory. It is replaced whole: written to a
//! temporary file, synced, renamed over the old one and the directory synced, so a crash at
//! any point leaves either the old or the new catalog, and the checksum catches anything
//! else. Every device directory also holds a small marker naming the array and the device's
//! position, so a directory given in the wrong order or from another array is refused.
//!
//! The catalog is a checkpoint: changes since it are records in the metadata log
//! (`meta/metalog.rs`), replayed over it at open. `generation` says which logs follow it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use crate::error::{Error, ErrorKind, Result};
use crate::io::layout::LayoutKind;

/// Current on-disk format version.
pub const FORMAT_VERSION: u32 = 3;
/// Oldest format version this build reads.
const OLDEST_VERSION: u32 = 1;
const CATALOG_MAGIC: &[u8; 8] = b"UPCACHE\0";
const MARKER_MAGIC: &[u8; 8] = b"UPCDEV\0\0";
/// File name of the catalog in the first device directory.
pub const CATALOG_NAME: &str = "upcache.catalog";
const CATALOG_TMP: &str = "upcache.catalog.tmp";
/// File name of the device marker in every device directory.
pub const MARKER_NAME: &str = "upcache.device";

/// The array's fixed layout, recorded at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrayLayout {
    /// Random id shared by the catalog and every device marker.
    pub array_id: u64,
    /// Number of devices.
    pub devices: u32,
    /// Page size in bytes.
    pub page_size: u32,
    /// Stripe unit in bytes.
    pub stripe_unit: u64,
    /// How stripe units are placed on devices.
    pub kind: LayoutKind,
}

/// One file's catalog entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// Stable id; names the backing files.
    pub id: u64,
    /// Length in bytes.
    pub len: u64,
    /// The file's name.
    pub name: String,
}

/// The whole catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    /// Layout of the array.
    pub layout: ArrayLayout,
    /// Checkpoint generation: the metadata logs numbered from this one on hold the changes
    /// made since.
    pub generation: u64,
    /// Where the metadata log lives, if not in the first device directory.
    pub meta_dir: Option<String>,
    /// Next id to give a new file.
    pub next_file_id: u64,
    /// Every file.
    pub files: Vec<FileEntry>,
}

fn corrupt(what: impl Into<String>) -> Error {
    Error::new(ErrorKind::NotAnArray, what)
}

/// A bounds-checked little-endian reader: decoding never panics on bad input.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(corrupt("catalog is truncated"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
}

fn frame(magic: &[u8; 8], body: &[u8]) -> Vec<u8> {
    frame_version(magic, FORMAT_VERSION, body)
}

/// `body` framed as a catalog of format `version` (magic, version, length, checksum), so that
/// fuzzing reaches [`Catalog::decode`]'s body parser instead of stopping at the checksum.
#[doc(hidden)]
pub fn frame_catalog_body(version: u32, body: &[u8]) -> Vec<u8> {
    frame_version(CATALOG_MAGIC, version, body)
}

/// `body` framed as a file of format `version` (older versions only in tests).
fn frame_version(magic: &[u8; 8], version: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + body.len());
    out.extend_from_slice(magic);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// The body of a framed file and its format version.
fn unframe<'a>(magic: &[u8; 8], bytes: &'a [u8], what: &str) -> Result<(u32, &'a [u8])> {
    let mut r = Reader(bytes);
    if r.take(8).ok() != Some(&magic[..]) {
        return Err(corrupt(format!("{what}: not an upcache file (bad magic)")));
    }
    let version = r.u32()?;
    if !(OLDEST_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(corrupt(format!(
            "{what}: format version {version}, this build reads {OLDEST_VERSION} to {FORMAT_VERSION}"
        )));
    }
    let len = r.u32()? as usize;
    let crc = r.u32()?;
    let body = r.take(len)?;
    if !r.0.is_empty() {
        return Err(corrupt(format!("{what}: trailing bytes")));
    }
    if crc32c::crc32c(body) != crc {
        return Err(corrupt(format!("{what}: checksum mismatch")));
    }
    Ok((version, body))
}

impl Catalog {
    /// Serializes the catalog.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(64 + self.files.len() * 32);
        let l = &self.layout;
        b.extend_from_slice(&l.array_id.to_le_bytes());
        b.extend_from_slice(&l.devices.to_le_bytes());
        b.extend_from_slice(&l.page_size.to_le_bytes());
        b.extend_from_slice(&l.stripe_unit.to_le_bytes());
        b.extend_from_slice(&l.kind.code().to_le_bytes());
        b.extend_from_slice(&self.generation.to_le_bytes());
        let meta_dir = self.meta_dir.as_deref().unwrap_or("");
        b.extend_from_slice(&(meta_dir.len() as u16).to_le_bytes());
        b.extend_from_slice(meta_dir.as_bytes());
        b.extend_from_slice(&self.next_file_id.to_le_bytes());
        b.extend_from_slice(&(self.files.len() as u32).to_le_bytes());
        for f in &self.files {
            b.extend_from_slice(&f.id.to_le_bytes());
            b.extend_from_slice(&f.len.to_le_bytes());
            b.extend_from_slice(&(f.name.len() as u16).to_le_bytes());
            b.extend_from_slice(f.name.as_bytes());
        }
        frame(CATALOG_MAGIC, &b)
    }

    /// Parses a catalog, checking magic, version and checksum. Never panics.
    pub fn decode(bytes: &[u8]) -> Result<Catalog> {
        let (version, body) = unframe(CATALOG_MAGIC, bytes, "catalog")?;
        let mut r = Reader(body);
        let (array_id, devices, page_size, stripe_unit) = (r.u64()?, r.u32()?, r.u32()?, r.u64()?);
        let kind = if version >= 2 {
            let code = r.u32()?;
            LayoutKind::from_code(code)
                .ok_or_else(|| corrupt(format!("catalog: unknown layout kind {code}")))?
        } else {
            LayoutKind::Stripe
        };
        let layout = ArrayLayout { array_id, devices, page_size, stripe_unit, kind };
        let (generation, meta_dir) = if version >= 3 {
            let generation = r.u64()?;
            let n = r.u16()? as usize;
            let dir = std::str::from_utf8(r.take(n)?)
                .map_err(|_| corrupt("catalog: metadata directory is not UTF-8"))?;
            (generation, (!dir.is_empty()).then(|| dir.to_owned()))
        } else {
            (0, None)
        };
        let next_file_id = r.u64()?;
        let count = r.u32()? as usize;
        let mut files = Vec::with_capacity(count.min(r.0.len() / 18));
        for _ in 0..count {
            let id = r.u64()?;
            let len = r.u64()?;
            let n = r.u16()? as usize;
            let name = std::str::from_utf8(r.take(n)?)
                .map_err(|_| corrupt("catalog: file name is not UTF-8"))?
                .to_owned();
            files.push(FileEntry { id, len, name });
        }
        if !r.0.is_empty() {
            return Err(corrupt("catalog: trailing bytes in body"));
        }
        Ok(Catalog { layout, generation, meta_dir, next_file_id, files })
    }

    /// Reads and decodes the catalog in `dir`.
    pub fn load(dir: &Path) -> Result<Catalog> {
        load_decoded(dir, CATALOG_NAME, "an upcache array", Catalog::decode)
    }

    /// Atomically replaces the catalog in `dir` (write temp, sync, rename, sync directory).
    pub fn store(&self, dir: &Path) -> Result<()> {
        write_atomic(dir, CATALOG_TMP, CATALOG_NAME, &self.encode())
    }
}

/// Reads `dir/name` and decodes it; a missing file means `dir` is not `what`.
fn load_decoded<T>(dir: &Path, name: &str, what: &str, decode: fn(&[u8]) -> Result<T>) -> Result<T> {
    let path = dir.join(name);
    let bytes = fs::read(&path).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            let msg = format!("{} is not {what} (no {name})", dir.display());
            Error::with_source(ErrorKind::NotAnArray, msg, e)
        } else {
            Error::io(format!("read {}", path.display()), e)
        }
    })?;
    decode(&bytes).map_err(|e| Error::new(e.kind(), format!("{}: {}", path.display(), e)))
}

fn write_atomic(dir: &Path, tmp: &str, name: &str, bytes: &[u8]) -> Result<()> {
    let tmp_path = dir.join(tmp);
    let io_err = |what: &str, e: io::Error| Error::io(format!("{what} {}", tmp_path.display()), e);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode_0600()
        .open(&tmp_path)
        .map_err(|e| io_err("create", e))?;
    f.write_all(bytes).map_err(|e| io_err("write", e))?;
    f.sync_all().map_err(|e| io_err("sync", e))?;
    drop(f);
    fs::rename(&tmp_path, dir.join(name)).map_err(|e| io_err("rename", e))?;
    sync_dir(dir)
}

/// Syncs a directory so that renames and creations in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format!("sync directory {}", dir.display()), e))
}

trait Mode0600 {
    fn mode_0600(&mut self) -> &mut Self;
}

impl Mode0600 for OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.mode(0o600)
    }
}

/// The marker that ties a device directory to its array and position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceMarker {
    /// The array's id.
    pub array_id: u64,
    /// Position of this directory in the array.
    pub index: u32,
    /// Number of devices in the array.
    pub devices: u32,
}

impl DeviceMarker {
    /// Serializes the marker.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(16);
        b.extend_from_slice(&self.array_id.to_le_bytes());
        b.extend_from_slice(&self.index.to_le_bytes());
        b.extend_from_slice(&self.devices.to_le_bytes());
        frame(MARKER_MAGIC, &b)
    }

    /// Parses a marker. Never panics.
    pub fn decode(bytes: &[u8]) -> Result<DeviceMarker> {
        let mut r = Reader(unframe(MARKER_MAGIC, bytes, "device marker")?.1);
        let m = DeviceMarker { array_id: r.u64()?, index: r.u32()?, devices: r.u32()? };
        if !r.0.is_empty() {
            return Err(corrupt("device marker: trailing bytes"));
        }
        Ok(m)
    }

    /// Reads the marker in `dir`.
    pub fn load(dir: &Path) -> Result<DeviceMarker> {
        load_decoded(dir, MARKER_NAME, "an upcache device directory", DeviceMarker::decode)
    }

    /// Atomically writes the marker into `dir`.
    pub fn store(&self, dir: &Path) -> Result<()> {
        write_atomic(dir, "upcache.device.tmp", MARKER_NAME, &self.encode())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn sample() -> Catalog {
        Catalog {
            layout: ArrayLayout {
                array_id: 42,
                devices: 3,
                page_size: 4096,
                stripe_unit: 65536,
                kind: LayoutKind::Rotate,
            },
            generation: 5,
            meta_dir: Some("/fast/meta".into()),
            next_file_id: 9,
            files: vec![
                FileEntry { id: 1, len: 12345, name: "a".into() },
                FileEntry { id: 7, len: 0, name: "ünïcode name".into() },
            ],
        }
    }

    #[test]
    fn round_trips() {
        let c = sample();
        assert_eq!(Catalog::decode(&c.encode()).unwrap(), c);
        let m = DeviceMarker { array_id: 5, index: 2, devices: 4 };
        assert_eq!(DeviceMarker::decode(&m.encode()).unwrap(), m);
    }

    /// A catalog file of format `version` with body `body`.
    fn framed(version: u32, body: &[u8]) -> Vec<u8> {
        frame_version(CATALOG_MAGIC, version, body)
    }

    #[test]
    fn older_versions_read_with_defaults() {
        let mut c = sample();
        c.layout.kind = LayoutKind::Stripe;
        c.generation = 0;
        c.meta_dir = None;
        let v3 = c.encode();
        // The version-3 body after the 28 bytes of id, devices, page size, stripe unit and
        // layout kind holds the generation (8) and an empty metadata directory (2).
        let body = &v3[20..];
        let v2_body: Vec<u8> = body[..28].iter().chain(&body[38..]).copied().collect();
        assert_eq!(Catalog::decode(&framed(2, &v2_body)).unwrap(), c);
        // Version 1 also lacks the layout kind: plain striping.
        let v1_body: Vec<u8> = body[..24].iter().chain(&body[38..]).copied().collect();
        assert_eq!(Catalog::decode(&framed(1, &v1_body)).unwrap(), c);
    }

    #[test]
    fn every_truncation_and_bit_flip_is_refused() {
        let bytes = sample().encode();
        for n in 0..bytes.len() {
            assert!(Catalog::decode(&bytes[..n]).is_err(), "truncated to {n}");
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                let r = Catalog::decode(&b);
                assert!(r.is_err(), "flip of byte {i} bit {bit} accepted");
                assert_eq!(r.unwrap_err().kind(), ErrorKind::NotAnArray);
            }
        }
    }

    #[test]
    fn store_replaces_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = sample();
        c.store(dir.path()).unwrap();
        c.files.pop();
        c.store(dir.path()).unwrap();
        assert_eq!(Catalog::load(dir.path()).unwrap(), c);
        assert!(!dir.path().join(CATALOG_TMP).exists());
        // A stale temp file from a crash does not matter.
        fs::write(dir.path().join(CATALOG_TMP), b"junk").unwrap();
        assert_eq!(Catalog::load(dir.path()).unwrap(), c);
    }

    #[test]
    fn missing_catalog_is_not_an_array() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Catalog::load(dir.path()).unwrap_err().kind(), ErrorKind::NotAnArray);
        assert_eq!(DeviceMarker::load(dir.path()).unwrap_err().kind(), ErrorKind::NotAnArray);
    }
}
