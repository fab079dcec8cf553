//! Trace file formats: the CloudPhysics block trace (`../shared/traces/`), MSR Cambridge
//! CSV, and upcache's own (what `bench --record-trace` writes). A bad line is an error that
//! names the file, the line and what is wrong, never a panic or a silently skipped request.

use super::{Access, Trace};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::Path;

/// A trace file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `version,time,op,size,lbn`: time in µs, op a SCSI opcode in hex (28 read, 2a write),
    /// size in bytes, lbn in 512-byte sectors. One volume.
    CloudPhysics,
    /// `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`: Windows file time
    /// (100 ns units), Read or Write, bytes. A volume per (host, disk).
    Msr,
    /// `time_us,op,volume,offset,len` with op `r` or `w`, after a `# upcache trace v1` line.
    Upcache,
}

/// The first line of an upcache trace.
pub const UPCACHE_HEADER: &str = "# upcache trace v1: time_us,op,volume,offset,len";

impl Format {
    pub const ALL: [Format; 3] = [Format::CloudPhysics, Format::Msr, Format::Upcache];

    pub fn name(self) -> &'static str {
        match self {
            Format::CloudPhysics => "cloudphysics",
            Format::Msr => "msr",
            Format::Upcache => "upcache",
        }
    }
}

impl std::str::FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Format::ALL.into_iter().find(|f| f.name() == s).ok_or_else(|| {
            let names: Vec<_> = Format::ALL.iter().map(|f| f.name()).collect();
            format!("unknown trace format {s:?}; expected one of {}", names.join(", "))
        })
    }
}

/// Reads a whole trace file.
pub fn load(path: &Path, format: Format) -> Result<Trace> {
    let file = std::fs::File::open(path).with_context(|| format!("open trace {}", path.display()))?;
    parse(std::io::BufReader::new(file), format).with_context(|| format!("read trace {}", path.display()))
}

/// The end of a request (offset + length) must stay under this: 64 PiB.
pub const MAX_END: u64 = 1 << 56;
/// The longest request accepted: 1 GiB.
pub const MAX_LEN: u64 = 1 << 30;

/// Parses a trace in `format`. Volumes are numbered from 0 in order of appearance, times
/// become relative to the earliest request, and requests are put in time order (stable, so
/// a trace already in order keeps it). A request past [`MAX_END`] or longer than [`MAX_LEN`]
/// is an error.
pub fn parse(input: impl BufRead, format: Format) -> Result<Trace> {
    let mut trace = Trace::default();
    let mut volumes: HashMap<String, u32> = HashMap::new();
    let mut dense: HashMap<u32, u32> = HashMap::new();
    let mut times = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line = line.with_context(|| format!("line {}", i + 1))?;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let parsed = match format {
            Format::CloudPhysics => cloudphysics_line(line),
            Format::Msr => msr_line(line, &mut volumes),
            Format::Upcache => upcache_line(line),
        };
        let Some((time, mut access)) = parsed.with_context(|| format!("line {}: {line:?}", i + 1))? else {
            continue; // a header
        };
        if access.len > MAX_LEN || access.offset.checked_add(access.len).is_none_or(|end| end > MAX_END) {
            bail!("line {}: {line:?}: a request must end before byte 2^56 and be at most 1 GiB long", i + 1);
        }
        // Dense volume numbers, whatever the trace calls them.
        let next = dense.len() as u32;
        access.volume = *dense.entry(access.volume).or_insert(next);
        trace.volumes = dense.len() as u32;
        times.push(time);
        trace.accesses.push(access);
    }
    let t0 = times.iter().copied().min().unwrap_or(0);
    for (a, t) in trace.accesses.iter_mut().zip(&times) {
        a.time_us = t - t0;
    }
    trace.accesses.sort_by_key(|a| a.time_us);
    Ok(trace)
}

fn field<'a>(fields: &[&'a str], i: usize, name: &str) -> Result<&'a str> {
    fields.get(i).map(|f| f.trim()).with_context(|| format!("missing field {name}"))
}

fn number(fields: &[&str], i: usize, name: &str) -> Result<u64> {
    let f = field(fields, i, name)?;
    f.parse().with_context(|| format!("field {name} is not a whole number: {f:?}"))
}

/// A request, or None for the header line.
fn cloudphysics_line(line: &str) -> Result<Option<(u64, Access)>> {
    let f: Vec<&str> = line.split(',').collect();
    if f[0].trim() == "version" {
        return Ok(None);
    }
    let time = number(&f, 1, "time")?;
    let write = match field(&f, 2, "op")?.to_ascii_lowercase().as_str() {
        "28" => false,
        "2a" => true,
        op => bail!("unknown SCSI opcode {op:?} (expected 28 for READ(10) or 2a for WRITE(10))"),
    };
    let len = number(&f, 3, "size")?;
    let lbn = number(&f, 4, "lbn")?;
    let offset = lbn.checked_mul(512).context("lbn too large")?;
    Ok(Some((time, Access { time_us: 0, write, volume: 0, offset, len })))
}

fn msr_line(line: &str, volumes: &mut HashMap<String, u32>) -> Result<Option<(u64, Access)>> {
    let f: Vec<&str> = line.split(',').collect();
    if f[0].trim().eq_ignore_ascii_case("timestamp") {
        return Ok(None);
    }
    // Windows file time: 100 ns ticks.
    let time = number(&f, 0, "Timestamp")? / 10;
    let disk = format!("{}/{}", field(&f, 1, "Hostname")?, field(&f, 2, "DiskNumber")?);
    let next = volumes.len() as u32;
    let volume = *volumes.entry(disk).or_insert(next);
    let write = match field(&f, 3, "Type")?.to_ascii_lowercase().as_str() {
        "read" => false,
        "write" => true,
        t => bail!("unknown request type {t:?} (expected Read or Write)"),
    };
    let offset = number(&f, 4, "Offset")?;
    let len = number(&f, 5, "Size")?;
    Ok(Some((time, Access { time_us: 0, write, volume, offset, len })))
}

fn upcache_line(line: &str) -> Result<Option<(u64, Access)>> {
    let f: Vec<&str> = line.split(',').collect();
    let time = number(&f, 0, "time_us")?;
    let write = match field(&f, 1, "op")? {
        "r" => false,
        "w" => true,
        op => bail!("unknown op {op:?} (expected r or w)"),
    };
    let volume = u32::try_from(number(&f, 2, "volume")?).context("volume too large")?;
    let offset = number(&f, 3, "offset")?;
    let len = number(&f, 4, "len")?;
    Ok(Some((time, Access { time_us: 0, write, volume, offset, len })))
}

/// Writes one request in upcache's format.
pub fn write_upcache(out: &mut impl Write, a: &Access) -> std::io::Result<()> {
    writeln!(out, "{},{},{},{},{}", a.time_us, if a.write { 'w' } else { 'r' }, a.volume, a.offset, a.len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str, f: Format) -> Result<Trace> {
        parse(std::io::Cursor::new(s), f)
    }

    #[test]
    fn cloudphysics_sample() {
        let t = parse_str(
            "version,time,op,size,lbn\n1,5633898,2a,512,42932745\n1,5633900,28,6656,40409911\n",
            Format::CloudPhysics,
        )
        .unwrap();
        assert_eq!(t.volumes, 1);
        assert_eq!(
            t.accesses,
            vec![
                Access { time_us: 0, write: true, volume: 0, offset: 42932745 * 512, len: 512 },
                Access { time_us: 2, write: false, volume: 0, offset: 40409911 * 512, len: 6656 },
            ]
        );
    }

    #[test]
    fn msr_sample_numbers_volumes_by_host_and_disk() {
        let t = parse_str(
            "128166372003061629,hm,1,Read,3154152960,32768,1331\n\
             128166372016382155,hm,0,Write,3154152960,4096,1331\n\
             128166372026382245,hm,1,Write,0,512,72\n",
            Format::Msr,
        )
        .unwrap();
        assert_eq!(t.volumes, 2);
        let a = &t.accesses;
        assert_eq!((a[0].volume, a[0].write, a[0].len), (0, false, 32768));
        assert_eq!((a[1].volume, a[1].time_us), (1, 128166372016382155 / 10 - 128166372003061629 / 10));
        assert_eq!((a[2].volume, a[2].offset), (0, 0));
    }

    #[test]
    fn upcache_format_round_trips() {
        let accesses = vec![
            Access { time_us: 0, write: false, volume: 0, offset: 4096, len: 8192 },
            Access { time_us: 15, write: true, volume: 1, offset: 0, len: 512 },
        ];
        let mut out = format!("{UPCACHE_HEADER}\n").into_bytes();
        for a in &accesses {
            write_upcache(&mut out, a).unwrap();
        }
        let t = parse_str(std::str::from_utf8(&out).unwrap(), Format::Upcache).unwrap();
        assert_eq!((t.accesses, t.volumes), (accesses, 2));
    }

    #[test]
    fn bad_lines_are_errors_that_say_where() {
        for (text, format, want) in [
            ("1,5,2b,512,7\n", Format::CloudPhysics, "opcode"),
            ("1,5,28,512\n", Format::CloudPhysics, "missing field lbn"),
            ("1,x,28,512,7\n", Format::CloudPhysics, "time"),
            ("12,hm,1,Trim,0,512,1\n", Format::Msr, "Trim"),
            ("0,r,0,4096\n", Format::Upcache, "missing field len"),
            ("0,r,0,-1,4096\n", Format::Upcache, "offset"),
        ] {
            let e = format!("{:#}", parse_str(text, format).unwrap_err());
            assert!(e.contains("line 1") && e.contains(want), "{e}");
        }
    }

    #[test]
    fn huge_or_overflowing_requests_are_errors_and_volumes_are_dense_and_times_sorted() {
        for bad in
            ["0,r,0,18446744073709551000,4096\n", "0,r,0,0,2147483648\n", "0,w,0,72057594037927936,1\n"]
        {
            let e = format!("{:#}", parse_str(bad, Format::Upcache).unwrap_err());
            assert!(e.contains("line 1") && e.contains("2^56"), "{e}");
        }
        let t = parse_str("50,r,4000000000,0,4096\n10,w,7,4096,4096\n", Format::Upcache).unwrap();
        assert_eq!(t.volumes, 2);
        let got: Vec<(u64, u32)> = t.accesses.iter().map(|a| (a.time_us, a.volume)).collect();
        assert_eq!(got, [(0, 1), (40, 0)]);
    }

    #[test]
    fn pages_cover_partial_pages_at_both_ends() {
        let a = Access { time_us: 0, write: false, volume: 0, offset: 4095, len: 2 };
        assert_eq!(a.pages(4096), 0..2);
        let a = Access { len: 0, ..a };
        assert_eq!(a.pages(4096), 0..1);
    }
}
