//! `upcache bench --metrics ADDR`: scraped over HTTP while a bench runs, the endpoint shows
//! the cache's hits, misses, evictions, dirty pages, write-back bytes and latency histograms,
//! in a text Prometheus parses (checked line by line here).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

fn scrape(addr: &str) -> String {
    let mut conn = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    write!(conn, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP reply");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("openmetrics-text"), "{head}");
    body.to_string()
}

/// Samples by series (`name{labels}`), checking every line is a comment or `series value`.
fn parse(text: &str) -> HashMap<String, f64> {
    let mut samples = HashMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not `series value`: {line:?}"));
        let v: f64 = value.parse().unwrap_or_else(|_| panic!("not a number: {line:?}"));
        samples.insert(series.to_string(), v);
    }
    samples
}

#[test]
fn a_bench_serves_its_caches_metrics_while_it_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let mut bench = Command::new(env!("CARGO_BIN_EXE_upcache"))
        .args([
            "bench", "--engine", "upcache", "--rw", "randrw", "--bs", "4k", "--size", "32m", "--cache", "8m",
        ])
        .args(["--threads", "2", "--runtime", "20s", "--fsync", "64", "--metrics", "127.0.0.1:0", "--dir"])
        .arg(tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(bench.stderr.take().unwrap());
    let addr = loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "the bench ended without a metrics address");
        if let Some(rest) = line.trim().strip_prefix("metrics: http://") {
            break rest.trim_end_matches("/metrics").to_string();
        }
    };
    // Until the bench has opened its cache and written back something, scrapes show less.
    let mut text = String::new();
    let mut samples = HashMap::new();
    for _ in 0..200_000 {
        text = scrape(&addr);
        samples = parse(&text);
        let got = |k: &str| samples.get(k).copied().unwrap_or(0.0);
        if got("upcache_misses_total") > 0.0 && got("upcache_sync_latency_seconds_count") > 0.0 {
            break;
        }
    }
    let _ = bench.kill();
    let _ = bench.wait();
    for name in [
        "upcache_hits_total",
        "upcache_misses_total",
        "upcache_evictions_total",
        "upcache_dirty_pages",
        "upcache_writeback_bytes_total",
        "upcache_sync_latency_seconds_count",
        "upcache_read_latency_seconds_count",
        "upcache_device_write_latency_seconds_count{device=\"0\"}",
    ] {
        assert!(samples.contains_key(name), "{name} missing from:\n{text}");
    }
    assert!(
        samples["upcache_misses_total"] > 0.0 && samples["upcache_sync_latency_seconds_count"] > 0.0,
        "{text}"
    );
    // A histogram's buckets are cumulative, end at +Inf, and +Inf is its count.
    let mut last = 0.0;
    let mut bounds = 0;
    for line in text.lines().filter(|l| l.starts_with("upcache_sync_latency_seconds_bucket")) {
        let v: f64 = line.rsplit_once(' ').unwrap().1.parse().unwrap();
        assert!(v >= last, "buckets must not fall: {line}");
        last = v;
        bounds += 1;
    }
    assert_eq!(bounds, upcache::LATENCY_BUCKETS, "{text}");
    assert_eq!(
        samples["upcache_sync_latency_seconds_bucket{le=\"+Inf\"}"],
        samples["upcache_sync_latency_seconds_count"]
    );
    assert!(text.trim_end().ends_with("# EOF"), "OpenMetrics text ends with # EOF");
}

/// Reads stderr lines until one says where the metrics are; its address.
fn metrics_address(stderr: &mut impl BufRead) -> String {
    loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "ended without a metrics address");
        if let Some(rest) = line.trim().strip_prefix("metrics: http://") {
            return rest.trim_end_matches("/metrics").to_string();
        }
    }
}

#[test]
fn the_shared_cache_service_serves_its_metrics() {
    let tmp = tempfile::tempdir().unwrap();
    let socket = tmp.path().join("run").join("cache.sock");
    let mut serve = Command::new(env!("CARGO_BIN_EXE_upcache"))
        .args(["serve", "--memory", "4m", "--idle", "600", "--metrics", "127.0.0.1:0", "--socket"])
        .arg(&socket)
        .args([
            "--range-lock",
            "off",
            "--bundling",
            "off",
            "--readahead",
            "64k",
            "--direct-write-back",
            "off",
            "--policy",
            "s3fifo",
            "--clean-first",
            "plain",
            "--flush",
            "background",
            "--streams",
            "off",
            "--huge-pages",
            "off",
            "--direct-loads",
            "off",
            "--hot-index",
            "off",
            "--page-size",
            "16k",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = metrics_address(&mut BufReader::new(serve.stderr.take().unwrap()));
    let text = scrape(&addr);
    // The shared cache's latency histograms, every process's, as a private cache's.
    for want in
        ["upcache_sync_latency_seconds_count 0", "upcache_device_read_latency_seconds_count{device=\"0\"} 0"]
    {
        assert!(text.contains(want), "{want:?} in:\n{text}");
    }
    // The technique switches given to the service are the cache's.
    let status = Command::new(env!("CARGO_BIN_EXE_upcache"))
        .args(["serve", "--status", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&status.stdout);
    for want in [
        "range_lock off\n",
        "run_merging on\n",
        "bundling off\n",
        "direct_write_back off\n",
        "policy s3fifo\n",
        "clean_first plain\n",
        "flush background\n",
        "streams off\n",
        "huge_pages off\n",
        "direct_loads off\n",
        "hot_index off\n",
        "readahead 65536\n",
        "page_size 16384\n",
    ] {
        assert!(status.contains(want), "{want:?} in:\n{status}");
    }
    // The JSON status has the same fields, as JSON.
    let json = Command::new(env!("CARGO_BIN_EXE_upcache"))
        .args(["serve", "--status", "--json", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    for (field, want) in [
        ("range_lock", serde_json::json!(false)),
        ("hot_index", serde_json::json!(false)),
        ("hot_hits", serde_json::json!(0)),
        ("policy", serde_json::json!("s3fifo")),
        ("clean_first", serde_json::json!("plain")),
        ("flush", serde_json::json!("background")),
        ("readahead", serde_json::json!(65536)),
        ("dirty_ratios", serde_json::json!([0.25, 0.5])),
        ("memory_bytes", serde_json::json!(4 << 20)),
        ("memory_made_bytes", serde_json::json!(4 << 20)),
        ("page_size", serde_json::json!(16384)),
        ("free_frames", serde_json::json!(0)),
    ] {
        assert_eq!(json[field], want, "{field} in {json}");
    }
    assert_eq!(json["sync_latency_us"]["count"], serde_json::json!(0), "{json}");
    assert!(status.contains("sync_latency_us p50 0.0 p99 0.0 (of 0)\n"), "{status}");
    // SIGTERM stops it as idleness does: it exits, and its cache's file goes with it (nothing
    // in it was dirty, nobody else attached).
    let file = upcache::shared::serve::segment_file(&socket);
    assert!(file.as_ref().is_none_or(|f| f.exists()), "{file:?}: the cache's file");
    // SAFETY: no memory arguments.
    assert_eq!(unsafe { libc::kill(serve.id() as i32, libc::SIGTERM) }, 0);
    assert!(serve.wait().unwrap().success());
    assert!(file.as_ref().is_none_or(|f| !f.exists()), "{file:?} left behind");
    let samples = parse(&text);
    for (name, want) in
        [("upcache_frames", Some(256.0)), ("upcache_clients", Some(1.0)), ("upcache_hits_total", None)]
    {
        let got = samples.get(name).unwrap_or_else(|| panic!("{name} missing from:\n{text}"));
        if let Some(want) = want {
            assert_eq!(*got, want, "{name} in:\n{text}");
        }
    }
    for name in [
        "upcache_misses_total",
        "upcache_evictions_total",
        "upcache_dirty_pages",
        "upcache_writeback_bytes_total",
    ] {
        assert!(samples.contains_key(name), "{name} missing from:\n{text}");
    }
    assert!(text.trim_end().ends_with("# EOF"), "OpenMetrics text ends with # EOF");
}

/// A service whose stderr reader has gone (the terminal closed, a pipe's reader exited) goes
/// on serving: its status lines fail quietly instead of panicking. With `--idle 0` it exits
/// as soon as it has printed them and found nobody attached; a panic would exit with 101.
#[test]
fn the_shared_cache_service_outlives_its_stderr() {
    let tmp = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = Command::new(env!("CARGO_BIN_EXE_upcache"))
        .args(["serve", "--memory", "4m", "--idle", "0", "--metrics", "127.0.0.1:0", "--socket"])
        .arg(tmp.path().join("cache.sock"))
        .stdout(Stdio::null())
        .stderr(writer)
        .status()
        .unwrap();
    assert!(status.success(), "serve with a closed stderr: {status}");
}
