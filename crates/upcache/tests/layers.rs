//! The library's layers point down and its files import each other without a circle
//! (issue 16). The layers, lowest first, as ARCHITECTURE.md lists them: a file may import
//! from its own top-level module and from any lower layer, never from the same layer's other
//! modules or a higher one, nor from the crate root (which only re-exports).

#[path = "../../../ci/import_graph.rs"]
mod import_graph;

use std::path::Path;

/// Lowest first.
const LAYERS: &[&[&str]] = &[
    &["error", "sync", "units"],
    &["choice", "metrics", "shm"],
    &["frame"],
    &["io", "alloc", "index", "policy", "readahead"],
    &["config"],
    &["file", "meta"],
    &["cache", "shared"],
    &["service"],
    &["api"],
];

#[test]
fn the_librarys_layers_point_down_and_its_files_have_no_import_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = import_graph::assert_no_circles(&src);
    // Every top-level module is in a layer. `internals.rs` is the crate root's: it only
    // declares the inner layers' modules (and imports nothing, which the graph checks).
    let internals = vec!["internals".to_string()];
    assert!(graph.get(&internals).is_some_and(|imports| imports.is_empty()), "internals.rs imports");
    let tops: std::collections::BTreeSet<&str> =
        graph.keys().filter(|m| **m != internals).filter_map(|m| m.first()).map(String::as_str).collect();
    let listed: Vec<&str> = LAYERS.iter().flat_map(|l| l.iter().copied()).collect();
    let unlisted: Vec<&&str> = tops.iter().filter(|t| !listed.contains(t)).collect();
    assert!(unlisted.is_empty(), "top-level modules in no layer: {unlisted:?}");
    let up = import_graph::upward(&graph, LAYERS);
    assert!(up.is_empty(), "imports that do not point to a lower layer: {up:#?}");
    // The check itself finds a lower layer naming a higher one.
    let mut made_up = graph.clone();
    made_up.get_mut(&vec!["frame".to_string()]).unwrap().insert(vec!["cache".into()]);
    assert_eq!(import_graph::upward(&made_up, LAYERS), ["frame -> cache"]);
}

/// The paths a map names in backticks: files (`a/b.rs`, `x.md`, with any `::item` cut off)
/// and folders (`cache/`).
fn named_paths(map: &str) -> Vec<String> {
    map.split('`')
        .skip(1)
        .step_by(2)
        .map(|quoted| quoted.split("::").next().unwrap_or(""))
        .filter(|p| {
            let is_file = [".rs", ".md", ".sh", ".h", ".toml"].iter().any(|e| p.ends_with(e));
            let is_folder = p.ends_with('/') && p.len() > 1;
            (is_file || is_folder) && p.chars().all(|c| c.is_alphanumeric() || "_./-".contains(c))
        })
        .map(String::from)
        .collect()
}

#[test]
fn architecture_md_is_a_short_map_whose_paths_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    assert!(map.len() <= 20 * 1024, "ARCHITECTURE.md is {} bytes; the map stays within 20 KiB", map.len());
    let paths = named_paths(&map);
    assert!(paths.len() > 40, "too few paths found: {paths:?}");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let missing: Vec<&String> =
        paths.iter().filter(|p| !root.join(p.as_str()).exists() && !src.join(p.as_str()).exists()).collect();
    assert!(missing.is_empty(), "ARCHITECTURE.md names paths that do not exist: {missing:?}");
    // The check itself finds a stale path.
    assert_eq!(named_paths("see `io/device.rs::open` and `frame/`"), ["io/device.rs", "frame/"]);
    assert!(!src.join("io/device.rs").exists());
}

/// The graph reads a whole file: an import below a test-only item near the top counts (the
/// check once stopped at a file's first `#[cfg(test)]`), and the test-only items themselves
/// do not, wherever they are, braces in their strings included.
#[test]
fn imports_below_a_test_only_item_count() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("low")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod low;\nmod high;\n").unwrap();
    std::fs::write(src.join("low/mod.rs"), "pub fn f() {}\n").unwrap();
    std::fs::write(
        src.join("high.rs"),
        "#[cfg(test)]\nfn helper() { let _ = \"}\"; crate::low::f(); }\n\
         #[cfg(test)]\nuse crate::low::f;\n\
         pub fn g() { crate::low::f() }\n\
         #[cfg(all(test, not(loom)))]\nmod tests { fn t() { let _ = '{'; } }\n",
    )
    .unwrap();
    std::fs::write(src.join("test_only.rs"), "#[cfg(test)]\nmod tests { use crate::low::f; }\n").unwrap();
    let graph = import_graph::graph(src);
    let low = vec!["low".to_string()];
    assert!(graph[&vec!["high".to_string()]].contains(&low), "{graph:?}");
    assert!(graph[&vec!["test_only".to_string()]].is_empty(), "{graph:?}");
}
