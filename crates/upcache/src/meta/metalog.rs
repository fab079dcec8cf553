//! The metadata log (seed 001 §3.3-3.5, adapted to user space): file creations, removals and
//! lengths as small checksummed records appended to a log, instead of a rewrite of the whole
//! catalog each time.
//!
//! A `sync_data` that changed a file's length appends one record (about 30 bytes) and makes
//! it durable with one write and one fdatasync of a region that was zero-filled in advance,
//! so the file system has no metadata to commit; concurrent syncs share that write (group
//! commit). The catalog (`meta/catalog.rs`) becomes a checkpoint: a background checkpoint
//! switches appends to a new log, writes the namespace as of the switch as the catalog of the
//! new generation, and deletes the older logs. Data writes never wait for it (with one
//! flusher thread, write-back pauses while it runs); a sync waits only for the moment of the
//! switch.
//!
//! # Files
//! In the metadata directory (the first device directory unless `Config::with_meta_dir`
//! names a faster device), one log per generation: `upcache.<array id>.metalog.<generation>`,
//! both in hex, created zero-filled in 1 MiB chunks.
//! ```text
//! header (32 bytes): "UPCLOG\0\0"  u32 version  u64 array_id  u64 generation  u32 crc32c(previous 28)
//! record:            u32 body_len  u32 crc32c(body)  body
//! body:              u8 kind  u64 id  then  Create: u16 name_len  name | Remove: same | SetLen: u64 len
//! ```
//! A record of length 0 (zeros) is the clean end of the log.
//!
//! # Recovery
//! Load the catalog (generation G), replay every log of generation G and later in order,
//! each up to its first record that is not whole and valid: a write torn by a crash, or
//! damage, is dropped with a warning. The records of one commit are one write after all
//! earlier commits were durable, so what survives is a prefix of the records, and every
//! record whose commit returned is in it. A failed write may still have reached the device,
//! and its records may be abandoned (a create that failed is undone): the next write covers
//! the failed one's bytes with zeros past its own records, and a switch to a new log zeroes
//! them first, so no abandoned record is ever followed by a clean end. Then checkpoint at once: new log G'+1, catalog
//! G'+1, older logs deleted; a crash anywhere in there replays the same records again.
//!
//! Records set state absolutely (a name to an id, an id's length), so replaying a record
//! that the catalog already reflects changes nothing: the records pending at a switch go to
//! the new log though they are also in the checkpoint.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::catalog::sync_dir;
use crate::error::{Error, ErrorKind, Result};
use crate::sync::{self, AtomicBool, Condvar, Mutex, Ordering};

const MAGIC: &[u8; 8] = b"UPCLOG\0\0";
const VERSION: u32 = 1;
/// Bytes of the log header.
pub const HEADER_LEN: u64 = 32;
/// The log is zero-filled ahead of appends this much at a time.
const CHUNK: u64 = 1 << 20;
/// A log past this size asks for a checkpoint.
pub const CHECKPOINT_BYTES: u64 = 4 << 20;
/// Largest record body: kind, id, name length and a 255-byte name.
const MAX_BODY: usize = 1 + 8 + 2 + 255;

const CREATE: u8 = 1;
const REMOVE: u8 = 2;
const SET_LEN: u8 = 3;

/// One change to the namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// File `name` now exists with id `id` and length 0 (replacing any file of that name).
    Create {
        /// The new file's id.
        id: u64,
        /// Its name.
        name: String,
    },
    /// File `name` with id `id` no longer exists.
    Remove {
        /// The removed file's id.
        id: u64,
        /// Its name.
        name: String,
    },
    /// The file with id `id` is `len` bytes long.
    SetLen {
        /// The file's id.
        id: u64,
        /// Its length.
        len: u64,
    },
}

impl Record {
    /// Appends the framed record to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let mut body = Vec::with_capacity(32);
        let (kind, id) = match self {
            Record::Create { id, .. } => (CREATE, id),
            Record::Remove { id, .. } => (REMOVE, id),
            Record::SetLen { id, .. } => (SET_LEN, id),
        };
        body.push(kind);
        body.extend_from_slice(&id.to_le_bytes());
        match self {
            Record::Create { name, .. } | Record::Remove { name, .. } => {
                body.extend_from_slice(&(name.len() as u16).to_le_bytes());
                body.extend_from_slice(name.as_bytes());
            }
            Record::SetLen { len, .. } => body.extend_from_slice(&len.to_le_bytes()),
        }
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        out.extend_from_slice(&body);
    }

    /// Decodes a body whose checksum matched; None if it is not a well-formed record. Never
    /// panics (public for fuzzing).
    pub fn decode(body: &[u8]) -> Option<Record> {
        let (&kind, rest) = body.split_first()?;
        let id = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
        let rest = &rest[8..];
        match kind {
            CREATE | REMOVE => {
                let n = u16::from_le_bytes(rest.get(..2)?.try_into().ok()?) as usize;
                if rest.len() != 2 + n {
                    return None;
                }
                let name = std::str::from_utf8(&rest[2..]).ok()?.to_owned();
                Some(if kind == CREATE { Record::Create { id, name } } else { Record::Remove { id, name } })
            }
            SET_LEN if rest.len() == 8 => {
                Some(Record::SetLen { id, len: u64::from_le_bytes(rest.try_into().ok()?) })
            }
            _ => None,
        }
    }
}

/// The log file name of `generation` of array `array_id`.
pub fn log_name(array_id: u64, generation: u64) -> String {
    format!("upcache.{array_id:016x}.metalog.{generation:016x}")
}

/// The header of log `generation` of array `array_id` (public for tests and fuzzing, which
/// build logs around it).
pub fn header(array_id: u64, generation: u64) -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&array_id.to_le_bytes());
    h[20..28].copy_from_slice(&generation.to_le_bytes());
    let crc = crc32c::crc32c(&h[..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

/// A parsed log: its records, in order, and why parsing stopped early, if it did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The whole, valid records, in order.
    pub records: Vec<Record>,
    /// Where and why the rest was dropped (a torn or damaged tail), if anything was.
    pub dropped: Option<String>,
}

/// Parses the bytes of log `generation` of array `array_id`. A header that is torn (its
/// creation never finished, so nothing was appended) gives no records and a note; a valid
/// header of another array or generation is an error. Never panics.
pub fn parse(bytes: &[u8], array_id: u64, generation: u64) -> Result<Parsed> {
    let h = &bytes[..bytes.len().min(HEADER_LEN as usize)];
    if h.len() < HEADER_LEN as usize
        || &h[..8] != MAGIC
        || crc32c::crc32c(&h[..28]) != u32::from_le_bytes(h[28..32].try_into().expect("4 bytes"))
    {
        let dropped = Some(format!("the log header is torn ({} bytes)", bytes.len()));
        return Ok(Parsed { records: Vec::new(), dropped });
    }
    if h != header(array_id, generation) {
        return Err(Error::new(
            ErrorKind::NotAnArray,
            format!("metadata log of generation {generation} belongs to another array or generation"),
        ));
    }
    let mut out = Parsed::default();
    let mut at = HEADER_LEN as usize;
    loop {
        let rest = &bytes[at..];
        let word = |i: usize| rest.get(i..i + 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
        let (Some(len), Some(crc)) = (word(0), word(4)) else {
            if rest.iter().any(|&b| b != 0) {
                out.dropped = Some(format!("a torn record header at byte {at}"));
            }
            return Ok(out);
        };
        if len == 0 && crc == 0 {
            // The zero-filled end, unless something follows it.
            if rest.iter().any(|&b| b != 0) {
                out.dropped = Some(format!("non-zero bytes after the end at byte {at}"));
            }
            return Ok(out);
        }
        let body = if len as usize <= MAX_BODY { rest.get(8..8 + len as usize) } else { None };
        match body.filter(|b| crc32c::crc32c(b) == crc).and_then(Record::decode) {
            Some(r) => {
                out.records.push(r);
                at += 8 + len as usize;
            }
            None => {
                out.dropped = Some(format!("a torn or damaged record at byte {at}"));
                return Ok(out);
            }
        }
    }
}

/// The generations of array `array_id`'s logs in `dir`, ascending.
pub fn log_generations(dir: &Path, array_id: u64) -> Result<Vec<u64>> {
    let prefix = format!("upcache.{array_id:016x}.metalog.");
    let entries = fs::read_dir(dir).map_err(|e| Error::io(format!("list {}", dir.display()), e))?;
    let mut gens = Vec::new();
    for e in entries {
        let e = e.map_err(|e| Error::io(format!("list {}", dir.display()), e))?;
        if let Some(g) = e.file_name().to_str().and_then(|n| n.strip_prefix(&prefix)) {
            if let Ok(g) = u64::from_str_radix(g, 16) {
                gens.push(g);
            }
        }
    }
    gens.sort_unstable();
    Ok(gens)
}

/// Replays, in order, every log of array `array_id` in `dir` from generation `from` on into
/// `apply`, warning about dropped tails. Returns the highest generation replayed, or `from`
/// if there was none.
pub fn replay(dir: &Path, array_id: u64, from: u64, mut apply: impl FnMut(&Record)) -> Result<u64> {
    let mut top = from;
    for g in log_generations(dir, array_id)?.into_iter().filter(|&g| g >= from) {
        let path = dir.join(log_name(array_id, g));
        let bytes = fs::read(&path).map_err(|e| Error::io(format!("read {}", path.display()), e))?;
        let parsed = parse(&bytes, array_id, g)
            .map_err(|e| Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        if let Some(why) = &parsed.dropped {
            log::warn!(
                "{}: dropped {why} after {} records (a crash during a metadata write, or damage)",
                path.display(),
                parsed.records.len()
            );
        }
        parsed.records.iter().for_each(&mut apply);
        top = g;
    }
    Ok(top)
}

/// Deletes array `array_id`'s logs in `dir` older than `generation`.
pub fn remove_logs_before(dir: &Path, array_id: u64, generation: u64) -> Result<()> {
    for g in log_generations(dir, array_id)?.into_iter().filter(|&g| g < generation) {
        let path = dir.join(log_name(array_id, g));
        fs::remove_file(&path).map_err(|e| Error::io(format!("remove {}", path.display()), e))?;
    }
    Ok(())
}

/// A new, empty log file, durable (header, first zero-filled chunk, directory entry).
pub struct NewLog {
    file: File,
    generation: u64,
}

impl NewLog {
    /// Creates log `generation` of array `array_id` in `dir`, replacing a leftover one.
    pub fn create(dir: &Path, array_id: u64, generation: u64) -> Result<NewLog> {
        let path = dir.join(log_name(array_id, generation));
        let err = |what: &str, e| Error::io(format!("{what} {}", path.display()), e);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| err("create", e))?;
        let mut first = vec![0u8; CHUNK as usize];
        first[..HEADER_LEN as usize].copy_from_slice(&header(array_id, generation));
        file.write_all_at(&first, 0).map_err(|e| err("write", e))?;
        file.sync_all().map_err(|e| err("sync", e))?;
        sync_dir(dir)?;
        Ok(NewLog { file, generation })
    }
}

/// The appending side of the log, shared by all threads.
pub(crate) struct MetaLog {
    state: Mutex<LogState>,
    /// A write finished (or failed): waiters look again.
    written: Condvar,
    /// The current log passed `CHECKPOINT_BYTES`.
    checkpoint_wanted: AtomicBool,
}

struct LogState {
    file: std::sync::Arc<File>,
    generation: u64,
    /// Where the next write goes in the current file, and how far it is zero-filled.
    end: u64,
    zeroed: u64,
    /// How far failed writes may have written: bytes past `end` up to here may hold records
    /// that were never committed, and the next write zeroes them.
    attempted: u64,
    /// Encoded records not yet written: bytes `taken..appended` of everything ever appended.
    pending: Vec<u8>,
    appended_bytes: u64,
    taken_bytes: u64,
    /// Sequence numbers: the last record appended, and the last one durable.
    appended: u64,
    durable: u64,
    /// A thread is writing (outside the mutex).
    writing: bool,
}

/// Where a record went: its sequence number, and the byte count before it (to abandon it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket {
    seq: u64,
    mark: u64,
}

impl Ticket {
    /// The record's sequence number (records are numbered from 1 in append order).
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// A ticket to commit every record up to `seq` (not to abandon any).
    pub(crate) fn through(seq: u64) -> Ticket {
        Ticket { seq, mark: u64::MAX }
    }
}

impl MetaLog {
    pub(crate) fn new(log: NewLog) -> MetaLog {
        MetaLog {
            state: Mutex::new(LogState {
                file: std::sync::Arc::new(log.file),
                generation: log.generation,
                end: HEADER_LEN,
                zeroed: CHUNK,
                attempted: HEADER_LEN,
                pending: Vec::new(),
                appended_bytes: 0,
                taken_bytes: 0,
                appended: 0,
                durable: 0,
                writing: false,
            }),
            written: Condvar::new(),
            checkpoint_wanted: AtomicBool::new(false),
        }
    }

    /// Appends `r` in memory. The caller holds the namespace lock and has applied `r` to the
    /// namespace, so the log's order is the namespace's.
    pub(crate) fn append(&self, r: &Record) -> Ticket {
        let mut s = sync::lock(&self.state);
        let mark = s.appended_bytes;
        r.encode_into(&mut s.pending);
        s.appended_bytes = s.taken_bytes + s.pending.len() as u64;
        s.appended += 1;
        Ticket { seq: s.appended, mark }
    }

    /// The sequence number of the last record appended (to make everything so far durable).
    pub(crate) fn last(&self) -> Ticket {
        let s = sync::lock(&self.state);
        Ticket { seq: s.appended, mark: s.appended_bytes }
    }

    /// Whether every record up to `seq` is durable (or was abandoned).
    pub(crate) fn is_durable(&self, seq: u64) -> bool {
        let s = sync::lock(&self.state);
        s.durable >= seq.min(s.appended)
    }

    /// Makes every record up to `t` durable: writes what is pending, or waits for the write
    /// in flight and then writes the rest (group commit).
    pub(crate) fn commit(&self, t: Ticket) -> Result<()> {
        self.commit_inner(t, false)
    }

    /// As [`Self::commit`], and if this thread's write fails, drops the records from `t` on
    /// (the caller holds the namespace lock, so they are its own, and undoes them there).
    pub(crate) fn commit_or_abandon(&self, t: Ticket) -> Result<()> {
        self.commit_inner(t, true)
    }

    fn commit_inner(&self, t: Ticket, abandon: bool) -> Result<()> {
        let mut s = sync::lock(&self.state);
        loop {
            // At most what is appended: records after it were abandoned (a ticket taken by
            // `last` may name one), and the rest is all there is to make durable.
            if s.durable >= t.seq.min(s.appended) {
                return Ok(());
            }
            if s.writing {
                s = match self.written.wait(s) {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
                continue;
            }
            s.writing = true;
            let bytes = std::mem::take(&mut s.pending);
            let (file, at, zeroed, upto, attempted) =
                (s.file.clone(), s.end, s.zeroed, s.appended, s.attempted);
            s.taken_bytes += bytes.len() as u64;
            drop(s);
            let r = write_durably(&file, at, &bytes, zeroed, attempted);
            s = sync::lock(&self.state);
            s.writing = false;
            self.written.notify_all();
            match r {
                Ok(zeroed) => {
                    s.end = at + bytes.len() as u64;
                    s.attempted = s.end;
                    s.zeroed = zeroed;
                    s.durable = upto;
                    if s.end > CHECKPOINT_BYTES {
                        // Relaxed: a hint polled by the flushers; the checkpoint locks.
                        self.checkpoint_wanted.store(true, Ordering::Relaxed);
                    }
                }
                Err(e) => {
                    s.attempted = s.attempted.max(at + bytes.len() as u64);
                    // Back in front of what was appended meanwhile, for the next commit.
                    s.taken_bytes -= bytes.len() as u64;
                    let later = std::mem::replace(&mut s.pending, bytes);
                    s.pending.extend_from_slice(&later);
                    if abandon && t.mark >= s.taken_bytes {
                        let keep = (t.mark - s.taken_bytes) as usize;
                        s.pending.truncate(keep);
                        s.appended_bytes = t.mark;
                        s.appended = t.seq - 1;
                    }
                    let path = format!("metadata log generation {}", s.generation);
                    return Err(Error::io(format!("write {path}"), e));
                }
            }
        }
    }

    /// The current log's generation.
    pub(crate) fn generation(&self) -> u64 {
        sync::lock(&self.state).generation
    }

    /// Whether the log has grown enough to checkpoint.
    pub(crate) fn wants_checkpoint(&self) -> bool {
        // Relaxed: see commit.
        self.checkpoint_wanted.load(Ordering::Relaxed)
    }

    /// Sends later writes to `next`. Records not yet written go there too. The caller holds
    /// the namespace lock and snapshots the namespace in the same critical section. Fails,
    /// changing nothing, if the bytes of an earlier failed write cannot be zeroed (the old log
    /// is replayed until a checkpoint completes, so they must not stay).
    pub(crate) fn switch_to(&self, next: NewLog) -> Result<()> {
        let mut s = sync::lock(&self.state);
        while s.writing {
            s = match self.written.wait(s) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
        if s.attempted > s.end {
            let (end, attempted, zeroed) = (s.end, s.attempted, s.zeroed);
            write_durably(&s.file, end, &[], zeroed, attempted)
                .map_err(|e| Error::io(format!("zero a failed write in metadata log {}", s.generation), e))?;
        }
        s.file = std::sync::Arc::new(next.file);
        s.generation = next.generation;
        s.end = HEADER_LEN;
        s.zeroed = CHUNK;
        s.attempted = HEADER_LEN;
        // Relaxed: as in commit.
        self.checkpoint_wanted.store(false, Ordering::Relaxed);
        Ok(())
    }
}

/// Writes `bytes` at `at`, then zeros up to `attempted` (what a failed write may have left),
/// and makes them durable, zero-filling whole chunks past `zeroed` first (in the same sync)
/// so that appends rarely change the file's size. Returns the new `zeroed`.
fn write_durably(file: &File, at: u64, bytes: &[u8], zeroed: u64, attempted: u64) -> std::io::Result<u64> {
    let end = at + bytes.len() as u64;
    let mut z = zeroed;
    if end > z {
        let to = end.div_ceil(CHUNK) * CHUNK;
        file.write_all_at(&vec![0u8; (to - z) as usize], z)?;
        z = to;
    }
    let mut out = bytes.to_vec();
    out.resize(bytes.len() + attempted.saturating_sub(end) as usize, 0);
    if !out.is_empty() {
        file.write_all_at(&out, at)?;
        file.sync_data()?;
    }
    Ok(z)
}

/// Resolves the metadata directory of an array: the one the config names, else the one the
/// catalog records, else the first device directory. A config that names another directory
/// than the catalog's is refused, since the log there would be missed.
pub(crate) fn resolve_dir(configured: Option<&Path>, recorded: Option<&str>, dev0: &Path) -> Result<PathBuf> {
    match (configured, recorded) {
        (None, None) => Ok(dev0.to_path_buf()),
        (None, Some(r)) => Ok(PathBuf::from(r)),
        (Some(c), recorded) => {
            let canon = fs::canonicalize(c)
                .map_err(|e| Error::io(format!("metadata directory {}", c.display()), e))?;
            let want = match recorded {
                Some(r) => PathBuf::from(r),
                None => {
                    fs::canonicalize(dev0).map_err(|e| Error::io(format!("open {}", dev0.display()), e))?
                }
            };
            if canon != want {
                return Err(Error::new(
                    ErrorKind::LayoutMismatch,
                    format!("the array's metadata log is in {}, not {}", want.display(), c.display()),
                ));
            }
            Ok(canon)
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        vec![
            Record::Create { id: 1, name: "a".into() },
            Record::SetLen { id: 1, len: 4096 },
            Record::Create { id: 2, name: "ünï".into() },
            Record::Remove { id: 1, name: "a".into() },
            Record::SetLen { id: 2, len: u64::MAX },
        ]
    }

    /// A log file's bytes: header, records, then `zeros` zero bytes.
    fn log_bytes(records: &[Record], zeros: usize) -> (Vec<u8>, Vec<usize>) {
        let mut b = header(7, 3).to_vec();
        let mut ends = Vec::new();
        for r in records {
            r.encode_into(&mut b);
            ends.push(b.len());
        }
        b.resize(b.len() + zeros, 0);
        (b, ends)
    }

    #[test]
    fn records_round_trip() {
        let (b, _) = log_bytes(&sample(), 100);
        assert_eq!(parse(&b, 7, 3).unwrap(), Parsed { records: sample(), dropped: None });
        let (b, _) = log_bytes(&sample(), 0);
        assert_eq!(parse(&b, 7, 3).unwrap(), Parsed { records: sample(), dropped: None });
    }

    /// A crash can stop a write anywhere: every truncation (then zeros, as in the file) and
    /// every bit flip gives exactly the records wholly before the damage, and says so.
    #[test]
    fn damage_leaves_exactly_the_prefix_before_it() {
        let records = sample();
        let (full, ends) = log_bytes(&records, 64);
        let whole_before = |at: usize| ends.iter().filter(|&&e| e <= at).count();
        let body_end = *ends.last().unwrap();
        for cut in HEADER_LEN as usize..body_end {
            let mut b = full[..cut].to_vec();
            b.resize(full.len(), 0);
            let p = parse(&b, 7, 3).unwrap();
            // A record whose cut-off bytes were zeros anyway is still whole.
            let intact =
                ends.iter().take_while(|&&e| e <= cut || full[cut..e].iter().all(|&x| x == 0)).count();
            assert!(intact >= whole_before(cut));
            assert_eq!(p.records, records[..intact], "cut at {cut}");
            let start_of_next = if intact == 0 { HEADER_LEN as usize } else { ends[intact - 1] };
            let torn = intact < records.len() && start_of_next < cut;
            assert_eq!(p.dropped.is_some(), torn, "cut at {cut}: {:?}", p.dropped);
        }
        for i in HEADER_LEN as usize..body_end {
            for bit in 0..8 {
                let mut b = full.clone();
                b[i] ^= 1 << bit;
                let p = parse(&b, 7, 3).unwrap();
                let n = whole_before(i);
                assert_eq!(p.records, records[..n], "flip of byte {i} bit {bit}");
                assert!(p.dropped.is_some(), "flip of byte {i} bit {bit} unnoticed");
            }
        }
        // Garbage after the clean end is reported, the records kept.
        let mut b = full.clone();
        *b.last_mut().unwrap() = 1;
        let p = parse(&b, 7, 3).unwrap();
        assert_eq!((p.records.len(), p.dropped.is_some()), (records.len(), true));
    }

    #[test]
    fn a_torn_header_is_an_empty_log_and_a_foreign_one_an_error() {
        let (b, _) = log_bytes(&sample(), 10);
        for cut in 0..HEADER_LEN as usize {
            let p = parse(&b[..cut], 7, 3).unwrap();
            assert!(p.records.is_empty() && p.dropped.is_some());
        }
        assert_eq!(parse(&b, 8, 3).unwrap_err().kind(), ErrorKind::NotAnArray);
        assert_eq!(parse(&b, 7, 4).unwrap_err().kind(), ErrorKind::NotAnArray);
    }

    #[test]
    fn appends_commit_in_groups_and_replay_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let log = MetaLog::new(NewLog::create(dir.path(), 7, 1).unwrap());
        let mut tickets = Vec::new();
        for r in &sample() {
            tickets.push(log.append(r));
        }
        // One commit of the last makes all durable.
        log.commit(*tickets.last().unwrap()).unwrap();
        for t in &tickets {
            log.commit(*t).unwrap();
        }
        let more = Record::SetLen { id: 2, len: 5 };
        let t = log.append(&more);
        log.commit(t).unwrap();
        let mut got = Vec::new();
        let top = replay(dir.path(), 7, 1, |r| got.push(r.clone())).unwrap();
        assert_eq!(top, 1);
        let mut want = sample();
        want.push(more);
        assert_eq!(got, want);
    }

    #[test]
    fn a_switch_carries_pending_records_to_the_new_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = MetaLog::new(NewLog::create(dir.path(), 7, 1).unwrap());
        log.commit(log.append(&sample()[0])).unwrap();
        let pending = log.append(&sample()[1]);
        log.switch_to(NewLog::create(dir.path(), 7, 2).unwrap()).unwrap();
        log.commit(pending).unwrap();
        assert_eq!(log.generation(), 2);
        let mut got = Vec::new();
        assert_eq!(replay(dir.path(), 7, 2, |r| got.push(r.clone())).unwrap(), 2);
        assert_eq!(got, sample()[1..2]);
        got.clear();
        replay(dir.path(), 7, 1, |r| got.push(r.clone())).unwrap();
        assert_eq!(got, sample()[..2]);
        remove_logs_before(dir.path(), 7, 2).unwrap();
        assert_eq!(log_generations(dir.path(), 7).unwrap(), vec![2]);
    }

    /// A write that fails but reached the disk anyway leaves an abandoned record there: the
    /// next write zeroes it, so replay never sees it; and a commit of a ticket whose record
    /// was abandoned returns instead of spinning.
    #[test]
    fn an_abandoned_record_never_replays() {
        let dir = tempfile::tempdir().unwrap();
        let created = NewLog::create(dir.path(), 7, 1).unwrap();
        let path = dir.path().join(log_name(7, 1));
        // Writes through a read-only handle fail.
        let read_only = File::open(&path).unwrap();
        let log = MetaLog::new(NewLog { file: read_only, generation: 1 });
        let abandoned = Record::Create { id: 9, name: "a-long-name-that-outlasts-the-next-record".into() };
        let t = log.append(&abandoned);
        let waiting = log.last();
        assert!(log.commit_or_abandon(t).is_err());
        log.commit(waiting).unwrap(); // its record is gone: nothing to wait for
                                      // As if the failed write had reached the disk all the same.
        let mut bytes = Vec::new();
        abandoned.encode_into(&mut bytes);
        created.file.write_all_at(&bytes, HEADER_LEN).unwrap();
        // The device works again.
        sync::lock(&log.state).file = std::sync::Arc::new(created.file);
        let kept = Record::SetLen { id: 1, len: 2 };
        log.commit(log.append(&kept)).unwrap();
        let parsed = parse(&fs::read(&path).unwrap(), 7, 1).unwrap();
        assert_eq!(parsed, Parsed { records: vec![kept], dropped: None });
    }

    #[test]
    fn growth_past_a_chunk_keeps_every_record() {
        let dir = tempfile::tempdir().unwrap();
        let log = MetaLog::new(NewLog::create(dir.path(), 7, 1).unwrap());
        let n = (CHUNK as usize / 20) + 100; // SetLen records are 25 bytes: past one chunk
        for i in 0..n as u64 {
            let t = log.append(&Record::SetLen { id: 1, len: i });
            if i % 1000 == 0 {
                log.commit(t).unwrap();
            }
        }
        log.commit(log.last()).unwrap();
        let mut count = 0u64;
        replay(dir.path(), 7, 1, |r| {
            assert_eq!(r, &Record::SetLen { id: 1, len: count });
            count += 1;
        })
        .unwrap();
        assert_eq!(count, n as u64);
    }
}
