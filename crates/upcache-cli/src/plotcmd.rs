//! `upcache plot`: charts from `upcache bench --json` (and `replay --json`) output files:
//! throughput against threads or devices (one line per engine, medians of the runs at each
//! point), or the latency CDF of each run.

use crate::bench::report::median;
use crate::output::OutputArgs;
use crate::plot::{draw, Chart, Series};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct PlotArgs {
    /// What to draw
    #[arg(long, value_enum)]
    kind: Kind,
    /// The x axis of a throughput chart
    #[arg(long, value_enum, default_value_t = XAxis::Threads)]
    x: XAxis,
    #[command(flatten)]
    out: OutputArgs,
    /// The old name of --plot
    #[arg(long = "out", value_name = "FILE", hide = true, conflicts_with = "plot")]
    out_file: Option<PathBuf>,
    /// Files of `upcache bench --json` output (a report or an array of them each)
    #[arg(required = true, value_name = "JSON")]
    files: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Kind {
    /// Operations per second against --x, a line per engine
    Throughput,
    /// Latency CDF of each run
    Cdf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum XAxis {
    Threads,
    Devices,
}

/// Every report in `files`.
fn reports(files: &[PathBuf]) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).with_context(|| format!("read {}", f.display()))?;
        let v: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", f.display()))?;
        match v {
            Value::Array(a) => out.extend(a),
            v => out.push(v),
        }
    }
    for r in &out {
        if r.get("engine").and_then(Value::as_str).is_none()
            || r.get("iops").and_then(Value::as_f64).is_none()
        {
            bail!(
                "not an `upcache bench --json` report: {}",
                r.to_string().chars().take(200).collect::<String>()
            );
        }
    }
    Ok(out)
}

fn num(r: &Value, key: &str) -> Result<f64> {
    r.get(key).and_then(Value::as_f64).with_context(|| format!("a report has no {key}"))
}

/// Draws latency CDFs: one line per (label, (fraction, µs) points).
pub fn draw_cdf(curves: &[(String, Vec<(f64, f64)>)], title: &str, out: &Path) -> Result<()> {
    draw(&cdf_chart(curves, title), out)
}

/// The chart of `draw_cdf`.
fn cdf_chart(curves: &[(String, Vec<(f64, f64)>)], title: &str) -> Chart {
    let series = curves
        .iter()
        .filter(|(_, pts)| !pts.is_empty())
        .map(|(name, pts)| Series {
            name: name.clone(),
            // Latency on x (log), the share of ops on a tail axis; zero latencies cannot be on a
            // log axis.
            points: pts.iter().filter(|p| p.1 > 0.0).map(|&(q, us)| (us, q)).collect(),
        })
        .collect();
    Chart {
        title: title.to_string(),
        x_label: "latency (µs)".into(),
        y_label: "percentile of ops at or under".into(),
        x_log: true,
        y_tail: true,
        series,
    }
}

/// What the reports measured, for a chart's title: "randread 4 KiB, 1 GiB" or "mixed
/// workloads" (never a file's path).
fn workload(reports: &[Value]) -> String {
    let of = |r: &Value| {
        let size = |k: &str| r.get(k).and_then(Value::as_u64).map(crate::size::fmt_size).unwrap_or_default();
        format!("{} {}, {}", r["rw"].as_str().unwrap_or("?"), size("bs"), size("size"))
    };
    let first = reports.first().map(of).unwrap_or_default();
    if reports.iter().all(|r| of(r) == first) {
        first
    } else {
        "mixed workloads".into()
    }
}

pub fn run(a: PlotArgs) -> Result<()> {
    let Some(path) = a.out.plot.clone().or(a.out_file.clone()) else {
        bail!("give the chart's file: --plot FILE (.png or .svg)");
    };
    crate::output::check_chart_path(&path)?;
    a.out.start()?;
    let reports = reports(&a.files)?;
    let what = workload(&reports);
    let chart = match a.kind {
        Kind::Cdf => {
            let mut curves = Vec::new();
            for r in &reports {
                let pts: Vec<(f64, f64)> =
                    serde_json::from_value(r.get("lat_cdf").cloned().unwrap_or(Value::Null))
                        .context("a report has no lat_cdf (made by an older upcache?)")?;
                let label = format!(
                    "{} {} t{} run {}",
                    r["engine"].as_str().unwrap_or("?"),
                    r["rw"],
                    num(r, "threads")?,
                    r["run"]
                );
                curves.push((label.replace('"', ""), pts));
            }
            cdf_chart(&curves, &format!("Latency CDF: {what}"))
        }
        Kind::Throughput => {
            let key = match a.x {
                XAxis::Threads => "threads",
                XAxis::Devices => "devices",
            };
            // engine → x → iops of each run
            let mut by: BTreeMap<String, BTreeMap<u64, Vec<f64>>> = BTreeMap::new();
            for r in &reports {
                let x = num(r, key)? as u64;
                by.entry(r["engine"].as_str().unwrap_or("?").to_string())
                    .or_default()
                    .entry(x)
                    .or_default()
                    .push(num(r, "iops")?);
            }
            let series = by
                .into_iter()
                .map(|(engine, xs)| Series {
                    name: engine,
                    points: xs.into_iter().map(|(x, mut v)| (x as f64, median(&mut v))).collect(),
                })
                .collect();
            Chart {
                title: format!("Throughput against {key}: {what}"),
                x_label: key.into(),
                y_label: "ops/s (median of runs)".into(),
                x_log: false,
                y_tail: false,
                series,
            }
        }
    };
    if a.out.json() {
        println!("{}", serde_json::to_string_pretty(&chart.series)?);
    }
    draw(&chart, &path)?;
    eprintln!("plot: {}", path.display());
    Ok(())
}
