//! The `upcache` command end to end: trace replay (each format, recorded traces), hit-ratio
//! tables, and clear errors for bad input. Small runs in temp dirs; nothing here is timed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn upcache(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_upcache")).args(args).output().expect("run upcache")
}

fn ok(args: &[&str]) -> String {
    let out = upcache(args);
    assert!(out.status.success(), "upcache {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn a_recorded_run_replays_request_for_request_on_every_engine() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec.trace");
    let d = dir.path().join("data");
    let d = d.to_str().unwrap();
    ok(&[
        "bench",
        "--engine",
        "upcache",
        "--rw",
        "randrw",
        "--size",
        "8m",
        "--ops",
        "3000",
        "--threads",
        "2",
        "--cache",
        "4m",
        "--dir",
        d,
        "--record-trace",
        rec.to_str().unwrap(),
        "--json",
    ]);
    let text = std::fs::read_to_string(&rec).unwrap();
    assert_eq!(text.lines().count(), 1 + 3000, "a header and one line per op");
    let reports = json(&ok(&[
        "replay",
        "--trace",
        rec.to_str().unwrap(),
        "--trace-format",
        "upcache",
        "--compare",
        "upcache,kernel,direct",
        "--threads",
        "2",
        "--cache",
        "4m",
        "--dir",
        d,
        "--json",
    ]));
    for r in reports.as_array().unwrap() {
        assert_eq!(r["ops"], 3000, "{r}");
        assert_eq!(r["rw"], "trace");
    }
}

#[test]
fn each_trace_format_replays_and_timed_replay_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("data");
    let d = d.to_str().unwrap();
    for (file, format, ops) in
        [("cloudphysics-sample.csv", "cloudphysics", 2000), ("msr-sample.csv", "msr", 1500)]
    {
        let r = json(&ok(&[
            "replay",
            "--trace",
            data(file).to_str().unwrap(),
            "--trace-format",
            format,
            "--cache",
            "8m",
            "--threads",
            "2",
            "--dir",
            d,
            "--json",
        ]));
        assert_eq!(r["ops"], ops, "{format}: {r}");
    }
    // At 100,000x the trace's own timing, 200 requests (the sample spans about 2 s).
    let r = json(&ok(&[
        "replay",
        "--trace",
        data("cloudphysics-sample.csv").to_str().unwrap(),
        "--timing",
        "trace",
        "--speed",
        "100000",
        "--ops",
        "200",
        "--cache",
        "8m",
        "--dir",
        d,
        "--json",
    ]));
    assert_eq!((r["ops"].as_u64(), r["rw"].as_str()), (Some(200), Some("trace-timed")));
    let r = json(&ok(&[
        "replay",
        "--synth",
        "ycsb-a",
        "--ops",
        "2000",
        "--footprint",
        "4m",
        "--dir",
        d,
        "--json",
    ]));
    assert!(r["write_ops"].as_u64().unwrap() > 500, "{r}");
}

#[test]
fn hit_ratio_tables_put_opt_on_top() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("hr.json");
    let plot = dir.path().join("hr.svg");
    let trace = data("cloudphysics-sample.csv");
    let table = ok(&["hit-ratio", "--trace", trace.to_str().unwrap(), "--sizes", "5%,20%,64k"]);
    for name in ["opt", "clock", "gclock", "lru", "lfu", "s3fifo", "sieve"] {
        assert!(table.lines().any(|l| l.starts_with(name)), "{name} missing:\n{table}");
    }
    ok(&[
        "hit-ratio",
        "--trace",
        trace.to_str().unwrap(),
        "--sizes",
        "5%,20%,64k",
        "--json",
        "--output",
        out.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ]);
    let doc = json(&std::fs::read_to_string(&out).unwrap());
    let cells = doc["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 7 * 3);
    for c in cells {
        let opt = cells.iter().find(|o| o["policy"] == "opt" && o["frames"] == c["frames"]).unwrap();
        assert!(c["hits"].as_u64() <= opt["hits"].as_u64(), "{c} beats {opt}");
    }
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.contains("<svg"));
    // The title names the trace, not where it lies.
    assert!(svg.contains("Hit ratio: cloudphysics-sample.csv (cloudphysics)"), "{svg}");
    assert!(!svg.contains(trace.parent().unwrap().to_str().unwrap()), "a path in the chart");
    ok(&["hit-ratio", "--synth", "zipf:0.99", "--ops", "20000", "--footprint", "16m", "--sizes", "10%"]);
}

#[test]
fn bad_traces_and_arguments_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "version,time,op,size,lbn\n1,5,28,512,7\n1,6,99,512,8\n").unwrap();
    for args in [
        vec!["hit-ratio", "--trace", bad.to_str().unwrap()],
        vec!["replay", "--trace", bad.to_str().unwrap()],
    ] {
        let out = upcache(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("line 3") && err.contains("99"), "{err}");
    }
    for (args, want) in [
        (vec!["replay"], "--trace"),
        (vec!["hit-ratio", "--synth", "zipf:0.9", "--sizes", "0%"], "0%"),
        (vec!["hit-ratio", "--synth", "zipf:0.9", "--plot", "x.txt", "--ops", "10"], ".png or .svg"),
        (vec!["bench", "--policy", "clock+sometimes"], "sometimes"),
        (vec!["bench", "--timing", "trace"], "--trace or --synth"),
        (vec!["bench", "--plot-cdf", "x.pdf"], ".png or .svg"),
        (vec!["hit-ratio", "--trace", "x.csv", "--ops", "5"], "--ops"),
    ] {
        let out = upcache(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn plots_of_throughput_and_latency_cdfs_from_bench_json() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("data");
    let d = d.to_str().unwrap();
    let mut files = Vec::new();
    for threads in ["1", "2"] {
        let out = ok(&[
            "bench",
            "--compare",
            "upcache,kernel",
            "--rw",
            "randread",
            "--size",
            "4m",
            "--ops",
            "2000",
            "--threads",
            threads,
            "--cache",
            "8m",
            "--dir",
            d,
            "--json",
        ]);
        let reports = json(&out);
        for r in reports.as_array().unwrap() {
            let cdf = r["lat_cdf"].as_array().unwrap();
            let qs: Vec<f64> = cdf.iter().map(|p| p[0].as_f64().unwrap()).collect();
            let us: Vec<f64> = cdf.iter().map(|p| p[1].as_f64().unwrap()).collect();
            assert!(qs.windows(2).all(|w| w[0] < w[1]) && us.windows(2).all(|w| w[0] <= w[1]), "{cdf:?}");
            assert_eq!(qs.last(), Some(&1.0));
        }
        let f = dir.path().join(format!("t{threads}.json"));
        std::fs::write(&f, out).unwrap();
        files.push(f);
    }
    let svg = dir.path().join("tp.svg");
    let f: Vec<&str> = files.iter().map(|p| p.to_str().unwrap()).collect();
    ok(&["plot", "--kind", "throughput", "--x", "threads", "--out", svg.to_str().unwrap(), f[0], f[1]]);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("upcache") && text.contains("kernel"));
    let png = dir.path().join("cdf.png");
    ok(&["plot", "--kind", "cdf", "--out", png.to_str().unwrap(), f[0]]);
    assert_eq!(&std::fs::read(&png).unwrap()[..4], b"\x89PNG");
    let cdf = dir.path().join("bench-cdf.svg");
    ok(&[
        "bench",
        "--engine",
        "upcache",
        "--size",
        "4m",
        "--ops",
        "500",
        "--cache",
        "8m",
        "--dir",
        d,
        "--plot-cdf",
        cdf.to_str().unwrap(),
    ]);
    assert!(std::fs::read_to_string(&cdf).unwrap().contains("<svg"));
    let out = upcache(&[
        "plot",
        "--kind",
        "cdf",
        "--out",
        png.to_str().unwrap(),
        data("msr-sample.csv").to_str().unwrap(),
    ]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("not JSON"));
}

/// fio's names for the flags work, and a JSON report says which upcache made it, when, and
/// the command line, which run again gives the same workload.
#[test]
fn fio_names_work_and_a_json_report_reproduces_its_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    let args = [
        "bench",
        "--engine",
        "upcache",
        "--rw",
        "randrw",
        "--numjobs",
        "2",
        "--nrfiles",
        "2",
        "--size",
        "4m",
        "--ops",
        "4000",
        "--random_distribution",
        "zipf:0.8",
        "--cache",
        "16m",
        "--output-format=json",
        "--dir",
        dir,
    ];
    let first = upcache(&args);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let r: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(r["tool_version"], env!("CARGO_PKG_VERSION"));
    assert!(r["timestamp"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(
        (r["threads"].as_u64(), r["files"].as_u64(), r["zipf"].as_f64()),
        (Some(2), Some(2), Some(0.8))
    );
    let argv: Vec<String> =
        r["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect();
    let again = upcache(&argv[1..].iter().map(String::as_str).collect::<Vec<_>>());
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    let r2: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    for key in ["engine", "rw", "bs", "size", "threads", "files", "zipf", "ops"] {
        assert_eq!(r[key], r2[key], "{key} differs in the rerun");
    }
    // Unknown distributions are refused clearly.
    let bad = upcache(&["bench", "--random_distribution", "pareto:1.2", "--ops", "10"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("random or zipf:THETA"));
}

#[test]
fn every_reporting_subcommand_takes_the_same_output_and_plot_flags() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let d = p("data");
    let bench =
        ["bench", "--engine", "upcache", "--size", "4m", "--cache", "8m", "--ops", "2000", "--dir", &d];
    let replay = ["replay", "--synth", "zipf:0.9", "--ops", "2000", "--footprint", "4m", "--dir", &d];
    let index =
        ["index-bench", "--index", "radix,locked", "--threads", "1,2", "--seconds", "0.05", "--repeat", "1"];
    let alloc = ["alloc-bench", "--threads", "1,2", "--seconds", "0.05", "--repeat", "1"];
    let hit = ["hit-ratio", "--synth", "zipf:0.99", "--ops", "5000", "--footprint", "4m", "--sizes", "10%"];
    let bench_json = p("bench.json");
    for (name, args) in
        [("bench", &bench[..]), ("replay", &replay), ("index", &index), ("alloc", &alloc), ("hit", &hit)]
    {
        // --json and --output-format=json are one switch, --output moves the report to a
        // file (stdout then stays empty), --plot draws the command's chart.
        let (out, chart) = (p(&format!("{name}.out")), p(&format!("{name}.svg")));
        for format in [&["--json"][..], &["--output-format", "json"]] {
            let mut full = args.to_vec();
            full.extend_from_slice(format);
            full.extend_from_slice(&["--output", &out, "--plot", &chart]);
            assert_eq!(ok(&full), "", "{full:?} printed to stdout despite --output");
            json(&std::fs::read_to_string(&out).unwrap());
            assert!(std::fs::read_to_string(&chart).unwrap().contains("<svg"), "{full:?} drew no chart");
            std::fs::remove_file(&chart).unwrap();
        }
        // Without them: the table on stdout.
        let table = ok(args);
        assert!(serde_json::from_str::<serde_json::Value>(&table).is_err(), "{name} printed JSON: {table}");
        if name == "bench" {
            std::fs::copy(&out, &bench_json).unwrap();
        }
    }
    // `plot` takes the same: --plot is its chart, --json prints the series it drew.
    let chart = p("cdf.svg");
    let series = json(&ok(&["plot", "--kind", "cdf", "--plot", &chart, "--json", &bench_json]));
    assert!(series[0]["name"].as_str().unwrap().starts_with("upcache"), "{series}");
    assert!(std::fs::read_to_string(&chart).unwrap().contains("Latency CDF: randread 4KiB"));
}

#[test]
fn status_interval_prints_interval_figures_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("data");
    let args =
        ["bench", "--engine", "kernel", "--size", "4m", "--runtime", "1s", "--status-interval", "200ms"];
    let out = upcache(&[&args[..], &["--dir", d.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("status kernel at ")).collect();
    // A 1 s run has intervals of 200 ms; however slow the machine, the first one ends in it.
    assert!(!lines.is_empty(), "no interval figures on stderr:\n{err}");
    for l in lines {
        assert!(l.contains(" iops, ") && l.contains(" MiB/s over the last "), "{l}");
    }
}

/// The flags a report's `config` gives: `--key value`, a switch for `true`, none for `false`.
fn flags_of(config: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in config.as_object().expect("config is an object") {
        match v {
            serde_json::Value::Bool(true) => out.push(format!("--{k}")),
            serde_json::Value::Bool(false) => {}
            serde_json::Value::String(s) => out.extend([format!("--{k}"), s.clone()]),
            n => out.extend([format!("--{k}"), n.to_string()]),
        }
    }
    out
}

#[test]
fn a_json_reports_config_is_every_setting_and_passed_back_runs_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    let runs: [&[&str]; 3] = [
        // Mostly defaults: the config must name them all.
        &["bench", "--engine", "upcache", "--size", "2m", "--ops", "1000"],
        &[
            "bench",
            "--compare",
            "upcache,kernel",
            "--rw",
            "randrw",
            "--rwmixread",
            "70",
            "--bs",
            "8k",
            "--size",
            "4m",
            "--files",
            "2",
            "--threads",
            "2",
            "--ops",
            "2000",
            "--zipf",
            "0.9",
            "--cache",
            "16m",
            "--devices",
            "sim:2",
            "--sim",
            "read-latency=5us,write-latency=5us,gc-every=0,jitter=0",
            "--policy",
            "s3fifo+gc-aware",
            "--dirty-ratios",
            "0.3,0.6",
            "--api",
            "async",
            "--iodepth",
            "4",
            "--readahead",
            "0",
            "--warm",
            "--prefault",
        ],
        &["replay", "--synth", "ycsb-a", "--ops", "1500", "--footprint", "4m", "--threads", "2"],
    ];
    for args in runs {
        let first = json(&ok(&[args, &["--json", "--dir", dir]].concat()));
        let first = if first.is_array() { first[0].clone() } else { first };
        let config = &first["config"];
        for key in
            ["compare", "threads", "cache", "devices", "page-size", "policy", "dirty-ratios", "index", "io"]
        {
            assert!(config.get(key).is_some(), "{args:?}: config has no {key}: {config}");
        }
        // Passed back alone, through `bench`, the config makes the same run.
        let flags = flags_of(config);
        let mut again = vec!["bench".to_string(), "--json".into(), "--dir".into(), dir.into()];
        again.extend(flags);
        let second = json(&ok(&again.iter().map(String::as_str).collect::<Vec<_>>()));
        let second = if second.is_array() { second[0].clone() } else { second };
        assert_eq!(&second["config"], config, "{args:?} rerun from its config as {again:?}");
        for key in
            ["engine", "rw", "bs", "size", "threads", "files", "ops", "read_ops", "zipf", "warm", "devices"]
        {
            assert_eq!(first[key], second[key], "{args:?}: {key} differs in the rerun");
        }
    }
}

#[test]
fn the_table_fits_100_columns_and_says_what_is_compared_and_which_way_is_better() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("data");
    let out = ok(&[
        "bench",
        "--compare",
        "upcache,kernel,memory-indexed",
        "--size",
        "4m",
        "--ops",
        "2000",
        "--repeat",
        "2",
        "--dir",
        d.to_str().unwrap(),
    ]);
    for line in out.lines() {
        assert!(line.chars().count() <= 100, "{} columns: {line}", line.chars().count());
    }
    for other in ["kernel", "memory-indexed"] {
        let want = format!("upcache / {other}: ");
        let at = out.find(&want).unwrap_or_else(|| panic!("no {want:?} line in:\n{out}"));
        let said = out[at..].split("\nmedians").next().unwrap().replace("\n  ", " ");
        assert!(said.contains("the iops (higher is better)"), "{said}");
        assert!(said.contains("the CPU per op (lower is better)"), "{said}");
    }
}

#[test]
fn a_flag_changes_only_what_it_says() {
    let config = |extra: &[&str]| json(&ok(&[&["bench", "--dry-run"][..], extra].concat()));
    let bare = config(&[]);
    // No flag means the documented defaults, not another profile.
    for (key, want) in
        [("compare", "upcache"), ("devices", "1"), ("warm", "false"), ("runtime", "\"10000ms\"")]
    {
        let got = bare[key].to_string().trim_matches('"').to_string();
        assert_eq!(got, want.trim_matches('"'), "{key} in {bare}");
    }
    // Each flag alone changes its own setting and nothing else.
    for (flag, value, key) in [
        ("--threads", "2", "threads"),
        ("--rw", "randwrite", "rw"),
        ("--warm", "", "warm"),
        ("--devices", "3", "devices"),
        ("--size", "64m", "size"),
        ("--engine", "kernel", "compare"),
    ] {
        let args: Vec<&str> = if value.is_empty() { vec![flag] } else { vec![flag, value] };
        let changed = config(&args);
        let (a, b) = (bare.as_object().unwrap(), changed.as_object().unwrap());
        let differ: Vec<&String> = a
            .keys()
            .chain(b.keys())
            .filter(|k| a.get(*k) != b.get(*k))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(differ, [key], "{flag} {value} changed {differ:?}");
    }
}

/// A report piped into a reader that has gone (`upcache bench ... | head -1`) ends the process
/// by SIGPIPE, as it ends any Unix tool, not by a panic in `println!` (exit 101, a backtrace).
#[test]
fn a_report_into_a_closed_pipe_ends_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let tmp = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_upcache"))
        .args([
            "bench", "--engine", "upcache", "--rw", "randread", "--bs", "4k", "--size", "1m", "--cache", "4m",
        ])
        .args(["--ops", "100", "--dir"])
        .arg(tmp.path())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}, stderr:\n{stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The shared engine takes every technique flag of the in-process engine's (issue 34); those
/// of an array's I/O (per-device I/O threads, buffered backing files) only where its files
/// are an array, refused for its plain OS files, naming each, rather than ignored; its
/// array's I/O goes through the per-device threads asked for. A shared run's config (every
/// setting, the in-process engine's at their defaults) passed back runs again.
#[test]
fn the_shared_engine_refuses_flags_it_would_ignore() {
    let out = upcache(&[
        "bench",
        "--engine",
        "shared",
        "--io-threads",
        "per-device",
        "--allow-buffered",
        "--dry-run",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--io-threads, --allow-buffered"), "{err}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    for (threads, engine) in [("none", "psync"), ("per-device", "psync+threads")] {
        let run = [
            "bench",
            "--engine",
            "shared",
            "--devices",
            "2",
            "--io",
            "psync",
            "--io-threads",
            threads,
            "--prefault",
            "--rw",
            "randread",
            "--size",
            "1m",
            "--cache",
            "16m",
            "--ops",
            "512",
            "--json",
            "--dir",
            dir,
        ];
        let report = json(&ok(&run));
        assert_eq!(report["io"], engine, "{report}");
        assert_eq!(report["config"]["io-threads"], threads, "{}", report["config"]);
    }
    let out = upcache(&["bench", "--engine", "shared", "--api", "pin", "--hot-index", "off", "--dry-run"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Every policy is the shared cache's too; SIEVE's and S3-FIFO's queues order the whole
    // cache, so not with sets.
    for policy in ["s3fifo", "lru+plain", "lfu", "sieve"] {
        let out = upcache(&["bench", "--compare", "upcache,shared", "--policy", policy, "--dry-run"]);
        assert!(out.status.success(), "{policy}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out =
        upcache(&["bench", "--engine", "shared", "--policy", "sieve", "--index", "setassoc", "--dry-run"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("one order of the whole cache"), "{err}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    let run =
        ["bench", "--engine", "shared", "--size", "2m", "--ops", "500", "--cache", "8m", "--json", "--dir"];
    let first = json(&ok(&[&run[..], &[dir]].concat()));
    let config = &first["config"];
    assert_eq!(config["policy"], "clock+clean-first", "{config}");
    let mut again = vec!["bench".to_string(), "--json".into(), "--dir".into(), dir.into()];
    again.extend(flags_of(config));
    let second = json(&ok(&again.iter().map(String::as_str).collect::<Vec<_>>()));
    assert_eq!(&second["config"], config);
}

/// `--api async` runs each thread's queue on the shared cache (`SharedCache::queue`): cold
/// random reads of a file twice the cache, 16 in flight per thread, all of them served, their
/// misses loaded in the queues' requests.
#[test]
fn the_shared_engine_runs_queues() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    let run = json(&ok(&[
        "bench",
        "--engine",
        "shared",
        "--api",
        "async",
        "--iodepth",
        "16",
        "--rw",
        "randread",
        "--size",
        "8m",
        "--cache",
        "4m",
        "--ops",
        "3000",
        "--threads",
        "2",
        "--readahead",
        "0",
        "--json",
        "--dir",
        dir,
    ]));
    assert_eq!(run["config"]["api"], "async", "{}", run["config"]);
    assert_eq!(run["ops"], serde_json::json!(3000), "{run}");
    assert!(run["read_ios"].as_u64().is_some_and(|n| n > 100), "{run}");
}

/// `--alloc twolayer` gives the shared cache StreamCache's allocator: random reads of a file
/// four times the cache have the service reclaim frames into its pool ahead of the misses;
/// the global one (the shared cache's default) reclaims none.
#[test]
fn the_shared_engine_takes_the_two_layer_allocator() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    let run = |alloc: &[&str]| {
        let args = [
            "bench",
            "--engine",
            "shared",
            "--rw",
            "randread",
            "--size",
            "16m",
            "--cache",
            "4m",
            "--ops",
            "20000",
            "--readahead",
            "0",
            "--json",
            "--dir",
            dir,
        ];
        json(&ok(&[&args[..], alloc].concat()))
    };
    let two = run(&["--alloc", "twolayer"]);
    assert_eq!(two["config"]["alloc"], "twolayer", "{}", two["config"]);
    assert!(two["reclaimed"].as_u64().is_some_and(|n| n > 0), "{two}");
    let global = run(&[]);
    assert_eq!(global["config"]["alloc"], "global", "{}", global["config"]);
    assert_eq!(global["reclaimed"], serde_json::json!(0), "{global}");
}

/// The shared engine's array logs its metadata in `--meta-dir` (a directory of its own
/// inside), as the in-process engine's: kept with `--keep`, the logs are there and the device
/// directory holds none.
#[test]
fn the_shared_engine_logs_its_array_s_metadata_in_the_meta_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, meta) = (tmp.path().join("data"), tmp.path().join("meta"));
    std::fs::create_dir_all(&meta).unwrap();
    let run = json(&ok(&[
        "bench",
        "--engine",
        "shared",
        "--rw",
        "write",
        "--size",
        "1m",
        "--cache",
        "4m",
        "--ops",
        "64",
        "--fsync",
        "8",
        "--meta-dir",
        meta.to_str().unwrap(),
        "--keep",
        "--json",
        "--dir",
        dir.to_str().unwrap(),
    ]));
    assert_eq!(run["ops"], serde_json::json!(64), "{run}");
    let logs = |root: &Path| -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut todo = vec![root.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if e.path().is_dir() {
                    todo.push(e.path());
                } else if name.contains(".metalog.") {
                    found.push(e.path());
                }
            }
        }
        found
    };
    assert!(!logs(&meta).is_empty(), "no log in {}", meta.display());
    assert!(logs(&dir).is_empty(), "a log among the devices: {:?}", logs(&dir));
}

/// The shared engine takes the technique flags its cache has (`--range-lock`,
/// `--run-merging`, `--bundling`, `--readahead`, `--dirty-ratios`), and each changes the run:
/// a sequential read of 8 MiB loads in runs of 128 to 256 pages with bundling on, a page per
/// request with it off; a readahead past the shared cache's largest is refused, naming it.
#[test]
fn the_shared_engine_takes_the_technique_flags_of_its_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    let read = |flags: &[&str]| {
        let run = [
            "bench", "--engine", "shared", "--rw", "read", "--size", "8m", "--cache", "16m", "--ops", "2048",
            "--json",
        ];
        json(&ok(&[&run[..], flags, &["--dir", dir]].concat()))
    };
    let on = read(&[]);
    let off = read(&["--bundling", "off", "--range-lock", "off", "--run-merging", "off"]);
    // Runs of 256 pages the reader loads, windows of 128 (a 32nd of the cache) its loaders
    // do; runs two of them begin at once may split where they meet.
    assert_eq!(on["read_bytes"], serde_json::json!(8 << 20), "{on}");
    assert!(on["read_ios"].as_u64().is_some_and(|n| (8..=128).contains(&n)), "{on}");
    assert_eq!(
        (&off["read_bytes"], &off["read_ios"]),
        (&serde_json::json!(8 << 20), &serde_json::json!(2048)),
        "{off}"
    );
    for flag in ["bundling", "range-lock", "run-merging"] {
        assert_eq!(off["config"][flag], "off", "{}", off["config"]);
    }
    // Pages of 16 KiB: a page per request is a quarter as many requests.
    let large = read(&["--run-merging", "off", "--page-size", "16k"]);
    assert_eq!(
        (&large["read_bytes"], &large["read_ios"], &large["config"]["page-size"]),
        (&serde_json::json!(8 << 20), &serde_json::json!(512), &serde_json::json!(16384)),
        "{large}"
    );
    // The policy and flush flags reach the shared cache (its own tests show what each does).
    let other = read(&[
        "--policy",
        "gclock+gc-aware",
        "--flush",
        "background",
        "--streams",
        "off",
        "--huge-pages",
        "off",
        "--direct-loads",
        "off",
        "--index",
        "setassoc",
        "--set-ways",
        "8",
        "--numa",
        "0;1",
    ]);
    let config = &other["config"];
    assert_eq!(
        [
            &config["policy"],
            &config["flush"],
            &config["streams"],
            &config["huge-pages"],
            &config["direct-loads"],
            &config["index"],
            &config["numa"]
        ],
        ["gclock+gc-aware", "background", "off", "off", "off", "setassoc", "0;1"],
        "{other}"
    );
    assert_eq!(config["set-ways"], 8, "{other}");
    // Pins read the pages in place (the warm-up's data check reads them all); a thread's
    // repeat pins are the hot index's, none with it off.
    let pins = |hot: &str| {
        let run = [
            "bench",
            "--engine",
            "shared",
            "--api",
            "pin",
            "--rw",
            "randread",
            "--warm",
            "--size",
            "1m",
            "--cache",
            "16m",
            "--ops",
            "4096",
            "--hot-index",
            hot,
            "--json",
            "--dir",
            dir,
        ];
        json(&ok(&run))
    };
    let (on, off) = (pins("on"), pins("off"));
    assert!(on["hot_hits"].as_u64().is_some_and(|n| n > 1024), "{on}");
    assert_eq!(off["hot_hits"], serde_json::json!(0), "{off}");
    assert_eq!(off["config"]["hot-index"], "off", "{}", off["config"]);
    // The shared cache's own switches, given to the in-process engine alone, are refused.
    for flag in ["--huge-pages", "--direct-loads"] {
        let out = upcache(&["bench", "--engine", "upcache", flag, "off", "--dry-run"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(flag), "{flag}: {err}");
    }
    let out = upcache(&["bench", "--engine", "shared", "--readahead", "2m", "--dry-run"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("readahead"), "{err}");
}
