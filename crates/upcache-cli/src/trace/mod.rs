//! Block I/O traces: what one request did, read from the trace formats upcache replays
//! (`formats.rs`) or generated (`synth.rs`), and cut into the cache pages it touches.

pub mod formats;
pub mod replay;
pub mod synth;

pub use formats::Format;

/// One request of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// Microseconds since the first request.
    pub time_us: u64,
    pub write: bool,
    /// Which of the trace's volumes (disks, files), numbered from 0 in order of appearance.
    pub volume: u32,
    /// Byte offset and length within the volume.
    pub offset: u64,
    pub len: u64,
}

impl Access {
    /// The pages of `page_size` bytes it touches.
    pub fn pages(&self, page_size: u64) -> std::ops::Range<u64> {
        let end = self.offset + self.len.max(1);
        self.offset / page_size..end.div_ceil(page_size)
    }
}

/// A whole trace, in request order.
#[derive(Debug, Default)]
pub struct Trace {
    pub accesses: Vec<Access>,
    /// Volumes seen: one more than the largest `Access::volume`.
    pub volumes: u32,
}
