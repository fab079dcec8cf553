//! std's I/O traits on [`File`] and [`SharedFile`], so an upcache file can stand in for
//! `std::fs::File` in generic code: [`FileExt`] for positioned reads and writes
//! (pread/pwrite), and [`Read`]/[`Write`]/[`Seek`] through a [`FileCursor`], which owns the
//! position that a file (shared by clones and threads, like an fd used only with pread) does
//! not have.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
#[cfg(not(loom))]
use std::sync::Arc;

use super::file::File;
// The shared cache is left out of loom builds.
#[cfg(not(loom))]
use crate::shared::SharedFile;

/// `FileExt` for each engine's file, by its inherent calls.
macro_rules! file_ext {
    ($file:ty) => {
        impl FileExt for $file {
            fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
                Ok(<$file>::read_at(self, buf, offset)?)
            }

            fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
                Ok(<$file>::write_at(self, buf, offset)?)
            }

            fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
                Ok(<$file>::read_exact_at(self, buf, offset)?)
            }

            fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
                Ok(<$file>::write_all_at(self, buf, offset)?)
            }
        }
    };
}

file_ext!(File);
#[cfg(not(loom))]
file_ext!(SharedFile);

/// A file a [`FileCursor`] can move over: either engine's ([`File`], or a [`SharedFile`] in
/// an `Arc`, so the cursor can share it).
pub trait Positioned: sealed::Sealed {
    /// As [`FileExt::read_at`].
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// As [`FileExt::write_at`].
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize>;
    /// The file's length now.
    fn size(&self) -> u64;
    /// Its name, for messages.
    fn name(&self) -> &str;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::File {}
    #[cfg(not(loom))]
    impl Sealed for std::sync::Arc<super::SharedFile> {}
}

impl Positioned for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        Ok(File::read_at(self, buf, offset)?)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        Ok(File::write_at(self, buf, offset)?)
    }
    fn size(&self) -> u64 {
        File::len(self)
    }
    fn name(&self) -> &str {
        File::name(self)
    }
}

#[cfg(not(loom))]
impl Positioned for Arc<SharedFile> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        Ok(SharedFile::read_at(self, buf, offset)?)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        Ok(SharedFile::write_at(self, buf, offset)?)
    }
    fn size(&self) -> u64 {
        SharedFile::len(self)
    }
    fn name(&self) -> &str {
        SharedFile::name(self)
    }
}

/// A [`File`] with a position: [`Read`], [`Write`] and [`Seek`] as on `std::fs::File`.
/// Returned by [`File::cursor`]; each cursor has its own position, starting at 0.
///
/// `flush` does nothing, as on `std::fs::File`: written bytes are in the cache, visible to
/// every reader; [`File::sync_data`] makes them durable.
///
/// ```
/// use std::io::{Read, Seek, SeekFrom, Write};
/// # let dir = tempfile::tempdir()?;
/// # let cache = upcache::Cache::create(upcache::Config::new([dir.path()], 1 << 20))?;
/// let mut c = cache.create_file("log")?.cursor();
/// c.write_all(b"hello, ")?;
/// c.write_all(b"world")?;
/// c.seek(SeekFrom::Start(7))?;
/// let mut s = String::new();
/// c.read_to_string(&mut s)?;
/// assert_eq!(s, "world");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A [`SharedFile`]'s cursor is `FileCursor::new(Arc<SharedFile>)`.
#[derive(Debug, Clone)]
pub struct FileCursor<F: Positioned = File> {
    file: F,
    pos: u64,
}

impl<F: Positioned> FileCursor<F> {
    /// A cursor over `file` at position 0.
    pub fn new(file: F) -> Self {
        FileCursor { file, pos: 0 }
    }

    /// The file.
    pub fn file(&self) -> &F {
        &self.file
    }

    /// The position the next read or write starts at.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The file, giving up the position.
    pub fn into_inner(self) -> F {
        self.file
    }
}

impl<F: Positioned> Read for FileCursor<F> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl<F: Positioned> Write for FileCursor<F> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<F: Positioned> Seek for FileCursor<F> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let (base, delta) = match to {
            SeekFrom::Start(n) => (n, 0),
            SeekFrom::End(d) => (self.file.size(), d),
            SeekFrom::Current(d) => (self.pos, d),
        };
        match base.checked_add_signed(delta) {
            Some(p) => {
                self.pos = p;
                Ok(p)
            }
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "seek to {to:?} from {base} is before the start of {:?} or overflows",
                    self.file.name()
                ),
            )),
        }
    }

    fn stream_position(&mut self) -> io::Result<u64> {
        Ok(self.pos)
    }
}

impl File {
    /// A cursor over this file (a clone of it) at position 0, for [`Read`], [`Write`] and
    /// [`Seek`].
    pub fn cursor(&self) -> FileCursor {
        FileCursor::new(self.clone())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{Cache, Config};

    fn cache(dir: &std::path::Path) -> Cache {
        Cache::create(Config::new([dir], 1 << 20)).unwrap()
    }

    /// Generic code over `FileExt` sees the same bytes as the inherent calls.
    fn copy_with_file_ext(from: &impl FileExt, to: &impl FileExt, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0; len];
        from.read_exact_at(&mut buf, 0)?;
        to.write_all_at(&buf, 100)?;
        Ok(buf)
    }

    #[test]
    fn generic_file_ext_code_works_on_an_upcache_file() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path());
        let a = c.create_file("a").unwrap();
        let b = c.create_file("b").unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        a.write_all_at(&data, 0).unwrap();
        assert_eq!(copy_with_file_ext(&a, &b, data.len()).unwrap(), data);
        let mut back = vec![0; data.len()];
        b.read_exact_at(&mut back, 100).unwrap();
        assert_eq!(back, data);
        assert_eq!(b.len(), 100 + data.len() as u64);
        // Past the end: an io::Error of kind UnexpectedEof, as std's.
        let e = FileExt::read_exact_at(&a, &mut back, 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    /// Generic code over `Read + Seek` and `Write`, checked against `std::io::Cursor` doing
    /// the same steps on a `Vec`.
    fn steps<T: Read + Write + Seek>(t: &mut T) -> io::Result<Vec<u8>> {
        t.write_all(&[1; 5000])?;
        t.seek(SeekFrom::Start(10))?;
        t.write_all(&[2; 20])?;
        t.seek(SeekFrom::Current(-5))?;
        let mut five = [0; 5];
        t.read_exact(&mut five)?;
        assert_eq!(five, [2; 5]);
        assert_eq!(t.seek(SeekFrom::End(-1))?, 4999);
        t.write_all(&[3; 3])?;
        assert_eq!(t.stream_position()?, 5002);
        t.rewind()?;
        let mut all = Vec::new();
        t.read_to_end(&mut all)?;
        assert!(t.seek(SeekFrom::Current(-6000)).is_err(), "before the start");
        Ok(all)
    }

    #[test]
    fn a_cursor_reads_writes_and_seeks_like_std() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path());
        let f = c.create_file("f").unwrap();
        let mut ours = f.cursor();
        let got = steps(&mut ours).unwrap();
        let want = steps(&mut io::Cursor::new(Vec::new())).unwrap();
        assert_eq!(got, want);
        assert_eq!(f.len(), want.len() as u64);
        // Two cursors keep their own positions.
        let mut a = f.cursor();
        let mut b = f.cursor();
        a.seek(SeekFrom::Start(11)).unwrap();
        let (mut x, mut y) = ([0; 1], [0; 1]);
        a.read_exact(&mut x).unwrap();
        b.read_exact(&mut y).unwrap();
        assert_eq!((x[0], y[0], a.position(), b.position()), (2, 1, 12, 1));
    }

    /// The same generic code on a shared cache's files: `FileExt` on a `SharedFile`, and a
    /// cursor over an `Arc<SharedFile>`.
    #[test]
    fn a_shared_file_stands_in_for_std_s_too() {
        let dir = tempfile::tempdir().unwrap();
        let config = crate::shared::SharedConfig { memory: 1 << 20, ..Default::default() };
        let cache = crate::shared::SharedCache::create_private(&config).unwrap();
        let (pa, pb) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&pa, b"").unwrap();
        std::fs::write(&pb, b"").unwrap();
        let a = cache.open_path(&pa, true).unwrap();
        let b = Arc::new(cache.open_path(&pb, true).unwrap());
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        a.write_all_at(&data, 0).unwrap();
        assert_eq!(copy_with_file_ext(&a, &*b, data.len()).unwrap(), data);
        let e = FileExt::read_exact_at(&a, &mut vec![0; data.len()], 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        b.set_len(0).unwrap();
        let mut ours = FileCursor::new(b.clone());
        assert_eq!(steps(&mut ours).unwrap(), steps(&mut io::Cursor::new(Vec::new())).unwrap());
        assert_eq!(b.len(), 5002);
    }
}
