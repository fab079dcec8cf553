//! Results: latency histograms, one report per engine run, the table and the JSON.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latencies are recorded in nanoseconds, up to this (longer ops are clamped to it).
const MAX_LATENCY_NS: u64 = 3_600 * 1_000_000_000;

/// A per-thread latency histogram (ns, 3 significant digits: about 300 KiB each).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("constant histogram bounds are valid")
}

/// Merges the threads' histograms into one.
pub fn merge(hists: &[Histogram<u64>]) -> Histogram<u64> {
    let mut all = new_histogram();
    for h in hists {
        // Same bounds and precision, so adding cannot fail.
        all.add(h).expect("histograms with equal bounds merge");
    }
    all
}

/// The latency CDF of `h` as (fraction of ops at or under, microseconds) points: every
/// percent, then finer towards the tail (per mille up to 99.9%, then 99.99%, 99.999%, max).
pub fn cdf_points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut qs: Vec<f64> = (1..100).map(|p| p as f64 / 100.0).collect();
    qs.extend((991..1000).map(|p| p as f64 / 1000.0));
    qs.extend([0.9999, 0.99999, 1.0]);
    qs.into_iter().map(|q| (q, h.value_at_quantile(q) as f64 / 1000.0)).collect()
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl Latency {
    pub fn from_histogram(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Latency {
            p50: us(h.value_at_quantile(0.5)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
            mean: h.mean() / 1000.0,
        }
    }
}

/// One engine's run of the measured phase.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The upcache that ran it.
    pub tool_version: &'static str,
    /// When the run ended, in seconds since the Unix epoch.
    pub timestamp: u64,
    /// The command line, to run it again (`upcache` and its arguments).
    pub argv: Vec<String>,
    /// Every setting the run used, defaults included, keyed by its flag (`bench/config.rs`).
    pub config: serde_json::Map<String, serde_json::Value>,
    pub engine: String,
    /// 1-based index of the repetition (`--repeat`).
    pub run: usize,
    pub rw: String,
    pub bs: u64,
    pub threads: usize,
    /// upcache devices (the other engines use one directory).
    pub devices: usize,
    pub files: usize,
    /// Bytes per file.
    pub size: u64,
    pub warm: bool,
    pub zipf: Option<f64>,
    /// Each thread on a file of its own (`--file-per-thread`).
    pub file_per_thread: bool,
    /// Wall time of the measured phase: first thread's start to last thread's end.
    pub seconds: f64,
    pub ops: u64,
    pub read_ops: u64,
    pub write_ops: u64,
    pub bytes: u64,
    pub iops: f64,
    pub mib_s: f64,
    pub lat_us: Latency,
    /// The latency CDF: (fraction of ops, µs) points (`cdf_points`).
    pub lat_cdf: Vec<(f64, f64)>,
    /// Latency of reads alone, and of writes alone (when the run has both, they differ).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_lat_us: Option<Latency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_lat_us: Option<Latency>,
    /// User + system CPU time of the process during the measured phase (all threads).
    pub cpu_seconds: f64,
    pub cpu_us_per_op: f64,
    /// Busy CPU time of the whole machine during the measured phase (`/proc/stat`): also the
    /// interrupt work done while the process slept, and anything else running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_cpu_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_cpu_us_per_op: Option<f64>,
    /// upcache's I/O engine (uring or psync).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io: Option<String>,
    /// upcache counters over the measured phase only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hits: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub misses: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evictions: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writeback_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_bytes: Option<u64>,
    /// Requests that loaded `read_bytes`, and that wrote back `writeback_bytes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_ios: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writeback_ios: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dflush_pages: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writeback_errors: Option<u64>,
    /// Evictions done ahead of demand by background reclaim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reclaimed: Option<u64>,
    /// Pins served by the pinning thread's hot index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hot_hits: Option<u64>,
    /// Simulated devices (`--devices sim:N`): garbage-collection episodes during the measured
    /// phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sim_gc_episodes: Option<u64>,
    /// Simulated device requests that garbage collection delayed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sim_gc_delayed: Option<u64>,
    /// Pages loaded ahead of sequential readers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readahead_pages: Option<u64>,
    /// Hits served by the lock-free read path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_free_hits: Option<u64>,
    /// Per-frame metadata bytes (descriptors, bitmaps, wait table).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata_bytes: Option<u64>,
    /// Page index bytes of the open files at the end of the measured phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index_bytes: Option<u64>,
    /// Untimed write-back after the measured phase (sync / fsync), in seconds.
    pub flush_seconds: f64,
    /// Peak resident set (VmHWM) during this engine's run, if the peak could be reset before
    /// it; else the process-wide peak so far.
    pub rss_peak_mib: f64,
    /// Resident set at the end of the measured phase (VmRSS).
    pub rss_mib: f64,
}

/// The median of `v` (mean of the two middle values for an even count); 0 for none.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One table row: an engine's median over its runs (each column's own median).
struct Row {
    engine: String,
    iops: f64,
    mib_s: f64,
    lat: Latency,
    cpu_us: f64,
    hits: Option<f64>,
    misses: Option<f64>,
    rss_peak: f64,
}

fn median_of(runs: &[&Report], f: impl Fn(&Report) -> f64) -> f64 {
    median(&mut runs.iter().map(|r| f(r)).collect::<Vec<_>>())
}

fn median_opt(runs: &[&Report], f: impl Fn(&Report) -> Option<u64>) -> Option<f64> {
    let v: Option<Vec<f64>> = runs.iter().map(|r| f(r).map(|x| x as f64)).collect();
    v.map(|mut v| median(&mut v))
}

fn row(engine: &str, runs: &[&Report]) -> Row {
    Row {
        engine: engine.to_owned(),
        iops: median_of(runs, |r| r.iops),
        mib_s: median_of(runs, |r| r.mib_s),
        lat: Latency {
            p50: median_of(runs, |r| r.lat_us.p50),
            p99: median_of(runs, |r| r.lat_us.p99),
            p999: median_of(runs, |r| r.lat_us.p999),
            max: median_of(runs, |r| r.lat_us.max),
            mean: median_of(runs, |r| r.lat_us.mean),
        },
        cpu_us: median_of(runs, |r| r.cpu_us_per_op),
        hits: median_opt(runs, |r| r.hits),
        misses: median_opt(runs, |r| r.misses),
        rss_peak: median_of(runs, |r| r.rss_peak_mib),
    }
}

fn num(v: f64) -> String {
    if v >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The table: one row per engine, in `engines` order, with medians over `repeat` runs.
pub fn table(engines: &[&str], reports: &[Report], repeat: usize) -> String {
    let rows: Vec<Row> = engines
        .iter()
        .map(|e| row(e, &reports.iter().filter(|r| r.engine == *e).collect::<Vec<_>>()))
        .collect();
    let head = ["engine", "iops", "MiB/s", "p50 µs", "p99 µs", "p99.9 µs", "CPU µs/op", "hit %", "peak MiB"];
    let mut cells: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    for r in &rows {
        let hit = match (r.hits, r.misses) {
            (Some(h), Some(m)) if h + m > 0.0 => format!("{:.1}", 100.0 * h / (h + m)),
            _ => "-".into(),
        };
        cells.push(vec![
            r.engine.clone(),
            format!("{:.0}", r.iops),
            num(r.mib_s),
            num(r.lat.p50),
            num(r.lat.p99),
            num(r.lat.p999),
            num(r.cpu_us),
            hit,
            format!("{:.0}", r.rss_peak),
        ]);
    }
    let widths: Vec<usize> =
        (0..head.len()).map(|c| cells.iter().map(|row| row[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in &cells {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, s)| {
                // The engine name reads best left-aligned, numbers right-aligned.
                if c == 0 {
                    format!("{s:<w$}", w = widths[c])
                } else {
                    format!("{s:>w$}", w = widths[c])
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    // What is compared, and which way is better: the first engine against each other one.
    if let Some((first, others)) = rows.split_first() {
        let times = |a: f64, b: f64| if b > 0.0 { format!("{:.2}x", a / b) } else { "-".into() };
        for o in others {
            out.push_str(&wrap(
                &format!(
                "{} / {}: {} the iops (higher is better); {} the p99 and {} the CPU per op (lower is better)",
                first.engine,
                o.engine,
                times(first.iops, o.iops),
                times(first.lat.p99, o.lat.p99),
                times(first.cpu_us, o.cpu_us),
            ),
                WIDTH,
            ));
        }
    }
    if repeat > 1 {
        out.push_str(&format!("medians of {repeat} runs; iops per run:\n"));
        for e in engines {
            let v: Vec<String> =
                reports.iter().filter(|r| r.engine == *e).map(|r| format!("{:.0}", r.iops)).collect();
            out.push_str(&wrap(&format!("  {e}: {}", v.join(", ")), WIDTH));
        }
    }
    out.push_str("max latency, misses, evictions, write-back, index memory and more: --json\n");
    out
}

/// The widest line the table and the header print.
pub const WIDTH: usize = 100;

/// `text` broken at spaces into lines of at most `width` characters (a longer word stands
/// alone), each line keeping the paragraph's indent and continuation lines two more, each
/// ending in a newline.
pub fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    for para in text.lines() {
        let indent: String = para.chars().take_while(|&c| c == ' ').collect();
        let mut line = indent.clone();
        let mut empty = true;
        for word in para.split_whitespace() {
            if !empty && line.chars().count() + 1 + word.chars().count() > width {
                out.push_str(&line);
                out.push('\n');
                line = format!("{indent}  ");
                empty = true;
            }
            if !empty {
                line.push(' ');
            }
            line.push_str(word);
            empty = false;
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_breaks_at_spaces_within_the_width_and_keeps_the_indent() {
        let text = "  upcache: 1, 2, 3, 4, 5, 6 and a verylongwordthatdoesnotfit here";
        let out = wrap(text, 20);
        for line in out.lines() {
            assert!(line.chars().count() <= 20 || !line.trim().contains(' '), "{line:?}");
            assert!(line.starts_with("  "), "{line:?} lost the indent");
        }
        let words = |t: &str| t.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(words(&out), words(text), "no word lost or split");
        assert_eq!(wrap("short", 100), "short\n");
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.0]), 3.0);
        assert_eq!(median(&mut [5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn merged_percentiles() {
        let mut a = new_histogram();
        let mut b = new_histogram();
        for ns in 1..=500u64 {
            a.record(ns * 1000).unwrap();
            b.record((500 + ns) * 1000).unwrap();
        }
        let lat = Latency::from_histogram(&merge(&[a, b]));
        assert!((lat.p50 - 500.0).abs() < 1.0, "{lat:?}");
        assert!((lat.max - 1000.0).abs() < 1.0, "{lat:?}");
    }
}
