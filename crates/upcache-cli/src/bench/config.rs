//! The whole resolved configuration of a run, for its JSON report: every value the run used,
//! defaults included, keyed by the flag that sets it, so that passing each key back as
//! `--key value` (a switch for `true`) runs the same workload on the same settings.

use serde_json::{json, Map, Value};

use super::plan::{Plan, Stop};
use super::workload::Rw;

/// The run's configuration (see the module's doc).
pub(super) fn resolved(p: &Plan) -> Map<String, Value> {
    let mut m = p.trace_flags.clone();
    let mut put = |k: &str, v: Value| {
        m.entry(k.to_string()).or_insert(v);
    };
    put("compare", json!(p.engines.iter().map(|e| e.name()).collect::<Vec<_>>().join(",")));
    if p.trace.is_none() {
        // A trace sets these itself (the flags conflict with --trace and --synth).
        put("rw", json!(p.rw.name()));
        if p.rw == Rw::Randrw {
            put("rwmixread", json!(p.read_pct));
        }
        put("bs", json!(p.bs));
        put("size", json!(p.size));
        put("files", json!(p.shape.files));
        if let Some(z) = p.zipf {
            put("zipf", json!(z));
        }
        put("file-per-thread", json!(p.file_per_thread));
        match p.stop {
            Stop::Runtime(d) => put("runtime", json!(format!("{}ms", d.as_millis()))),
            Stop::Ops(n) => put("ops", json!(n)),
        }
    } else {
        if let Stop::Ops(n) = p.stop {
            put("ops", json!(n)); // a file's trace cut to --ops (a synth's was put above)
        }
        put("timing", json!(if p.speed.is_some() { "trace" } else { "fast" }));
        if let Some(x) = p.speed {
            put("speed", json!(x));
        }
    }
    put("threads", json!(p.threads));
    put("warm", json!(p.warm));
    put("seed", json!(p.seed));
    put("repeat", json!(p.repeat));
    put("lat-every", json!(p.lat_every));
    put("fsync", json!(p.fsync));
    let u = &p.upcache;
    put("cache", json!(u.cache));
    match (&u.device_dirs, &u.sim) {
        (Some(dirs), _) => put(
            "device-dirs",
            json!(dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(",")),
        ),
        (None, Some(sim)) => {
            put("devices", json!(format!("sim:{}", u.devices)));
            put("sim", json!(sim_settings(sim)));
        }
        (None, None) => put("devices", json!(u.devices)),
    }
    if let Some(d) = &u.meta_dir {
        put("meta-dir", json!(d));
    }
    put("page-size", json!(u.page_size));
    put("stripe-unit", json!(u.stripe_unit));
    put("flushers", json!(u.flushers));
    put("flush", json!(u.flush.name()));
    let on_off = |on: bool| json!(upcache::on_off(on));
    put("streams", on_off(u.streams));
    put("huge-pages", on_off(u.shared.huge_pages));
    put("numa", json!(u.shared.numa.name()));
    put("direct-loads", on_off(u.shared.direct_loads));
    put("range-lock", on_off(u.range_lock));
    put("hot-index", on_off(u.hot_index));
    put("run-merging", on_off(u.run_merging));
    put("bundling", on_off(u.bundling));
    put("policy", json!(format!("{}+{}", u.policy.name(), u.clean_first.name())));
    put("dirty-ratios", json!(format!("{},{}", u.dirty_ratios.0, u.dirty_ratios.1)));
    put("allow-buffered", json!(u.allow_buffered));
    put("prefault", json!(u.prefault));
    put("index", json!(u.index.name()));
    put("set-ways", json!(u.sets.0));
    put("set-policy", json!(u.sets.1.name()));
    put("alloc", json!(u.alloc.name()));
    put("layout", json!(u.layout.name()));
    put("api", json!(u.api.name()));
    put("iodepth", json!(u.iodepth));
    put("iodepth-batch", json!(u.iodepth_batch));
    put("io", json!(u.io.name()));
    put("io-threads", json!(u.io_threads.name()));
    put("readahead", json!(u.readahead));
    m
}

/// `--sim`'s settings that make `sim` again.
fn sim_settings(s: &upcache::SimConfig) -> String {
    format!(
        "channels={},read-latency={}ns,write-latency={}ns,bandwidth={},gc-every={},gc-time={}ns,\
         gc-read-slowdown={},volatile={},jitter={},seed={}",
        s.channels,
        s.read_latency.as_nanos(),
        s.write_latency.as_nanos(),
        s.bandwidth,
        s.gc_every,
        s.gc_time.as_nanos(),
        s.gc_read_slowdown,
        s.volatile_bytes,
        s.jitter_pct,
        s.seed
    )
}
