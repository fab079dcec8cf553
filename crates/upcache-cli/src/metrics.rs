//! A Prometheus endpoint (`--metrics ADDR`): the cache's counters, gauges and latency
//! histograms, encoded by prometheus-client in the OpenMetrics text format and served over
//! plain HTTP on `GET /metrics`, read fresh from the cache at each scrape. `bench` publishes
//! each cache it measures; `serve` the shared cache it serves (every process's counts).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Mutex;

use anyhow::{Context, Result};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use upcache::shared::SharedCache;
use upcache::{Latencies, LatencyHistogram, Stats};

/// A cache a scrape reads.
#[derive(Clone)]
enum Source {
    /// A process's own cache (`bench`).
    Private(upcache::StatsReader),
    /// The shared cache (`serve`).
    Shared(SharedCache),
}

/// What a scrape reads: the cache being measured, if one is open now (a bench opens one per
/// engine and run, and publishes each), or the shared cache served.
static CURRENT: Mutex<Option<Source>> = Mutex::new(None);

/// Makes `reader` (or none) the cache that scrapes read.
pub fn publish(reader: Option<upcache::StatsReader>) {
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = reader.map(Source::Private);
}

/// Makes the shared cache `cache` the one that scrapes read.
pub fn publish_shared(cache: SharedCache) {
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = Some(Source::Shared(cache));
}

/// The published cache's metrics, read at each scrape.
#[derive(Debug)]
struct CacheCollector;

fn counter(e: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(e: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let g = ConstGauge::new(v as i64);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

/// A histogram in seconds: per-bucket counts with their upper bounds (the last `+Inf`).
fn buckets(h: &LatencyHistogram) -> (f64, u64, Vec<(f64, u64)>) {
    let bounds = h.buckets.iter().enumerate().map(|(i, &c)| {
        let le = LatencyHistogram::bucket_bound(i).map_or(f64::MAX, |d| d.as_secs_f64());
        (le, c)
    });
    (h.sum_ns as f64 / 1e9, h.count(), bounds.collect())
}

fn histogram(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    h: &LatencyHistogram,
) -> std::fmt::Result {
    let (sum, count, b) = buckets(h);
    e.encode_descriptor(name, help, None, MetricType::Histogram)?
        .encode_histogram::<NoLabelSet>(sum, count, &b, None)
}

fn per_device(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    hs: &[LatencyHistogram],
) -> std::fmt::Result {
    let mut family = e.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (dev, h) in hs.iter().enumerate() {
        let (sum, count, b) = buckets(h);
        let labels = [("device", dev.to_string())];
        family.encode_family(&labels)?.encode_histogram::<NoLabelSet>(sum, count, &b, None)?;
    }
    Ok(())
}

impl Collector for CacheCollector {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> std::fmt::Result {
        let current = CURRENT.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let reader = match current {
            None => return Ok(()),
            Some(Source::Shared(cache)) => return shared(&mut e, &cache),
            Some(Source::Private(reader)) => reader,
        };
        let (s, l): (Stats, Latencies) = (reader.stats(), reader.latencies());
        counts(&mut e, &s)?;
        latencies(&mut e, &l)
    }
}

/// The histograms of `upcache::Latencies`, which both kinds of cache report.
fn latencies(e: &mut DescriptorEncoder<'_>, l: &Latencies) -> std::fmt::Result {
    let sampled = format!("(one in {} per thread)", upcache::LATENCY_SAMPLE_EVERY);
    histogram(e, "upcache_read_latency_seconds", &format!("read_at latency {sampled}"), &l.read)?;
    histogram(e, "upcache_write_latency_seconds", &format!("write_at latency {sampled}"), &l.write)?;
    histogram(e, "upcache_sync_latency_seconds", "sync_data and sync_all latency", &l.sync)?;
    per_device(
        e,
        "upcache_device_read_latency_seconds",
        "Device reads the cache waited for",
        &l.device_read,
    )?;
    per_device(e, "upcache_device_write_latency_seconds", "Write-back batches per device", &l.device_write)
}

/// The counters of `upcache::Stats`, which both kinds of cache report.
fn counts(e: &mut DescriptorEncoder<'_>, s: &Stats) -> std::fmt::Result {
    counter(e, "upcache_hits", "Page lookups that found the page resident", s.hits)?;
    counter(e, "upcache_lock_free_hits", "Of those, pages copied with no lock and no pin", s.lock_free_hits)?;
    counter(e, "upcache_misses", "Page lookups that loaded or created the page", s.misses)?;
    counter(e, "upcache_evictions", "Pages evicted to make room", s.evictions)?;
    counter(e, "upcache_readahead_pages", "Pages loaded ahead of sequential readers", s.readahead_pages)?;
    counter(e, "upcache_read_bytes", "Bytes read from the devices", s.read_bytes)?;
    counter(e, "upcache_read_ios", "Read requests", s.read_ios)?;
    counter(e, "upcache_writeback_bytes", "Bytes written back to the devices", s.writeback_bytes)?;
    counter(e, "upcache_writeback_ios", "Write-back requests", s.writeback_ios)?;
    counter(e, "upcache_writeback_errors", "Write-back requests that failed", s.writeback_errors)?;
    counter(e, "upcache_dflush_pages", "Pages written back by writers themselves", s.dflush_pages)?;
    gauge(e, "upcache_dirty_pages", "Pages dirty now", s.dirty_pages)?;
    gauge(e, "upcache_frames", "Page frames in the cache", s.frames)?;
    gauge(e, "upcache_index_bytes", "Bytes of the open files' page indexes", s.index_bytes)
}

/// The shared cache's counts, of every process attached since it was made (`upcache::Stats`,
/// those it does not keep 0), and its own gauges. It keeps no latency histograms (a process's
/// own are in its `Cache::latencies`).
fn shared(e: &mut DescriptorEncoder<'_>, cache: &SharedCache) -> std::fmt::Result {
    let s = cache.status();
    counts(e, &s.stats)?;
    counter(e, "upcache_repairs", "Frames taken over from processes that died holding them", s.repairs)?;
    gauge(e, "upcache_cached_pages", "Frames holding a page", s.cached)?;
    gauge(e, "upcache_locked_frames", "Frames locked now (loads, writes, write-backs)", s.locked)?;
    gauge(e, "upcache_files", "Files in the file table", s.files)?;
    gauge(e, "upcache_clients", "Processes attached (the service counts as one)", s.clients.len() as u64)?;
    latencies(e, &cache.latencies())
}

/// The text a scrape returns (no cache metrics while no cache is published).
pub fn render() -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(CacheCollector));
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// Serves `GET /metrics` (any path, in fact) at `addr` from a thread of its own until the
/// process exits; returns the address bound (port 0 picks one).
pub fn serve(addr: &str) -> Result<SocketAddr> {
    let listener = TcpListener::bind(addr).with_context(|| format!("--metrics: listen on {addr}"))?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new().name("metrics".into()).spawn(move || {
        for conn in listener.incoming().flatten() {
            // A scraper that hangs up early is its own problem.
            let _ = answer(conn);
        }
    })?;
    Ok(bound)
}

fn answer(conn: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    // The request line and headers, up to the blank line; the path is not looked at.
    let mut line = String::new();
    while reader.read_line(&mut line)? > 2 {
        line.clear();
    }
    let body = render();
    let mut conn = conn;
    write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text has every counter, gauge and histogram, in the format Prometheus parses.
    #[test]
    fn a_scrape_shows_the_counters_and_the_histograms() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = upcache::Cache::create(upcache::Config::new([tmp.path()], 1 << 20)).unwrap();
        let f = cache.create_file("f").unwrap();
        f.write_all_at(&[1; 8192], 0).unwrap();
        f.sync_data().unwrap();
        publish(Some(cache.stats_reader()));
        let text = render();
        for want in [
            "# TYPE upcache_hits counter",
            "upcache_misses_total 2",
            "upcache_dirty_pages 0",
            "upcache_writeback_bytes_total 8192",
            "# TYPE upcache_sync_latency_seconds histogram",
            "upcache_sync_latency_seconds_count 1",
            "upcache_sync_latency_seconds_bucket{le=\"+Inf\"} 1",
            "upcache_device_write_latency_seconds_count{device=\"0\"}",
            "# EOF",
        ] {
            assert!(text.contains(want), "{want:?} missing from:\n{text}");
        }
        publish(None);
        assert!(!render().contains("upcache_hits"), "no cache, no cache metrics");
    }

    /// The shared cache's scrape: its counters and gauges, every line well formed.
    #[test]
    fn a_scrape_of_the_shared_cache_shows_its_counters() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("f");
        std::fs::write(&p, vec![3u8; 8192]).unwrap();
        let cache = SharedCache::create(&upcache::shared::SharedConfig {
            memory: 1 << 20,
            files: 4,
            clients: 4,
            ..upcache::shared::SharedConfig::default()
        })
        .unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let mut page = [0u8; 4096];
        for _ in 0..33 {
            // A miss that loads page 1 too (read ahead), then 32 hits, copied lock-free.
            f.read_at(&mut page, 0).unwrap();
        }
        f.write_at(&[9; 10], 4096).unwrap(); // page 1 found (a hit): a dirty page
        publish_shared(cache.clone());
        let text = render();
        for want in [
            "upcache_hits_total 33",
            "upcache_lock_free_hits_total 32",
            "upcache_misses_total 1",
            "upcache_readahead_pages_total 1",
            "upcache_read_bytes_total 8192",
            "upcache_dirty_pages 1",
            "upcache_frames 256",
            "upcache_clients 1",
            "# TYPE upcache_evictions counter",
            "# EOF",
        ] {
            assert!(text.contains(want), "{want:?} missing from:\n{text}");
        }
        publish(None);
    }
}
