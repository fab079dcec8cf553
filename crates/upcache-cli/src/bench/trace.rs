//! The trace a run replays (`--trace`, `--synth`), and the recording of one
//! (`--record-trace`) in upcache's own format.

use std::path::Path;
use std::sync::Arc;

use anyhow::{ensure, Context, Result};
use serde_json::{json, Map, Value};

use super::flags::BenchArgs;
use crate::trace::replay::{self, ReplayOps};
use crate::trace::synth::Synth;
use crate::trace::Access;

/// The trace to replay (`--trace`, `--synth`), prepared, if any.
pub(super) fn load_trace(a: &BenchArgs) -> Result<Option<Arc<ReplayOps>>> {
    let trace = match (&a.trace, a.synth) {
        (Some(path), _) => crate::trace::formats::load(path, a.trace_format)?,
        (None, Some(kind)) => {
            let pages = a.footprint.unwrap_or(1 << 30) / replay::ALIGN;
            let ops = a.ops.unwrap_or(1_000_000);
            crate::trace::synth::generate(kind, ops, pages, replay::ALIGN, a.seed)
                .map_err(anyhow::Error::msg)?
        }
        (None, None) => return Ok(None),
    };
    ensure!(a.speed.is_finite() && a.speed > 0.0, "--speed must be a positive number, got {}", a.speed);
    let prepared = replay::prepare(&trace, MAX_TRACE_REQUEST).map_err(anyhow::Error::msg)?;
    Ok(Some(Arc::new(prepared)))
}

/// The longest request a replay accepts.
const MAX_TRACE_REQUEST: u64 = 64 << 20;

/// The flags that chose the trace replayed, if any (`--trace`, `--synth`): the plan keeps
/// only the prepared requests.
pub(super) fn trace_flags(a: &BenchArgs) -> Map<String, Value> {
    let mut m = Map::new();
    match (&a.trace, a.synth) {
        (Some(path), _) => {
            m.insert("trace".into(), json!(path));
            m.insert("trace-format".into(), json!(a.trace_format.name()));
        }
        (None, Some(kind)) => {
            let name = match kind {
                Synth::Zipf(t) => format!("zipf:{t}"),
                Synth::Uniform => "uniform".into(),
                Synth::Scan => "scan".into(),
                Synth::Ycsb(c) => format!("ycsb-{c}"),
            };
            m.insert("synth".into(), json!(name));
            m.insert("footprint".into(), json!(a.footprint.unwrap_or(1 << 30)));
            // --ops made the trace; the run replays all of it.
            m.insert("ops".into(), json!(a.ops.unwrap_or(1_000_000)));
        }
        (None, None) => {}
    }
    m
}

/// Writes a recorded measured phase as an upcache trace.
pub(super) fn write_recorded(path: &Path, accesses: &[Access]) -> Result<()> {
    use std::io::Write;
    let f = std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
    let mut out = std::io::BufWriter::new(f);
    writeln!(out, "{}", crate::trace::formats::UPCACHE_HEADER)?;
    for a in accesses {
        crate::trace::formats::write_upcache(&mut out, a)?;
    }
    out.flush().with_context(|| format!("write {}", path.display()))
}
