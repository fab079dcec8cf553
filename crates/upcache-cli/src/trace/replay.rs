//! A trace made ready for replay by `upcache bench --trace`: every request aligned out to
//! whole 4 KiB blocks (so the O_DIRECT engine can run it and every engine does the same
//! work), and each volume's touched 1 MiB regions packed together in address order, so a
//! trace of a 20 GiB disk that touches 1 GiB needs files of about 1 GiB, not sparse 20 GiB
//! ones whose holes the kernel would read without any I/O. Order and distance within a
//! region, and the order of regions, are kept: sequential runs stay sequential.

use super::Trace;
use std::collections::{BTreeSet, HashMap};

/// Requests are aligned to this.
pub const ALIGN: u64 = 4096;
/// Address ranges are packed in units of this.
pub const REGION: u64 = 1 << 20;

/// One request of a prepared trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceOp {
    /// Microseconds after the first request.
    pub time_us: u64,
    pub write: bool,
    pub file: u32,
    pub offset: u64,
    pub len: u32,
}

/// A prepared trace: its requests, and the files they need.
#[derive(Debug)]
pub struct ReplayOps {
    pub ops: Vec<TraceOp>,
    /// Files (one per volume) and the size each needs (the largest of them).
    pub files: usize,
    pub file_size: u64,
    /// The longest request.
    pub max_len: u64,
}

/// Prepares `trace` for replay (see the module docs). Requests longer than `max_request`
/// bytes are an error, not silently cut.
pub fn prepare(trace: &Trace, max_request: u64) -> Result<ReplayOps, String> {
    if trace.accesses.is_empty() {
        return Err("the trace has no requests".into());
    }
    let aligned = |offset: u64, len: u64| {
        let start = offset / ALIGN * ALIGN;
        let end = (offset + len.max(1)).div_ceil(ALIGN) * ALIGN;
        (start, end)
    };
    // Each volume's touched regions, in address order, numbered densely.
    let mut regions: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); trace.volumes as usize];
    for a in &trace.accesses {
        let (start, end) = aligned(a.offset, a.len);
        if end - start > max_request {
            return Err(format!(
                "a request of {} bytes is longer than the most the replay allows ({max_request})",
                a.len
            ));
        }
        regions[a.volume as usize].extend(start / REGION..end.div_ceil(REGION));
    }
    let dense: Vec<HashMap<u64, u64>> =
        regions.iter().map(|set| set.iter().enumerate().map(|(i, &r)| (r, i as u64)).collect()).collect();
    let mut ops = Vec::with_capacity(trace.accesses.len());
    let (mut max_len, mut file_size) = (0, 0);
    for a in &trace.accesses {
        let (start, end) = aligned(a.offset, a.len);
        // Regions a request spans are consecutive, so they stay adjacent when packed.
        let offset = dense[a.volume as usize][&(start / REGION)] * REGION + start % REGION;
        let len = end - start;
        max_len = max_len.max(len);
        file_size = file_size.max(offset + len);
        ops.push(TraceOp { time_us: a.time_us, write: a.write, file: a.volume, offset, len: len as u32 });
    }
    Ok(ReplayOps { ops, files: trace.volumes as usize, file_size, max_len })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Access;

    fn access(volume: u32, offset: u64, len: u64) -> Access {
        Access { time_us: offset, write: false, volume, offset, len }
    }

    #[test]
    fn aligns_requests_and_packs_regions_in_order() {
        let gib = 1u64 << 30;
        let trace = Trace {
            accesses: vec![
                access(0, 20 * gib + 512, 512),
                access(0, 3 * gib + REGION - 4096, 8192), // spans two regions
                access(1, 5 * gib, 4096),
                access(0, 20 * gib + 8192, 4096),
            ],
            volumes: 2,
        };
        let r = prepare(&trace, 1 << 20).unwrap();
        let got: Vec<(u32, u64, u32)> = r.ops.iter().map(|o| (o.file, o.offset, o.len)).collect();
        // Volume 0 touches regions 3Gi/1Mi, +1, and 20Gi/1Mi: packed as 0, 1, 2.
        assert_eq!(
            got,
            vec![(0, 2 * REGION, 4096), (0, REGION - 4096, 8192), (1, 0, 4096), (0, 2 * REGION + 8192, 4096)]
        );
        assert_eq!((r.files, r.file_size, r.max_len), (2, 2 * REGION + 12288, 8192));
        assert!(prepare(&trace, 4096).is_err());
        assert!(prepare(&Trace::default(), 4096).is_err());
    }
}
