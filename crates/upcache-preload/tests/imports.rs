//! The shim's files import each other without a circle (issue 16): each module's `crate::`
//! paths name only modules below it, so the layers read from the leaves (`real`, `errno`,
//! `guard`, `os`, ...) up to the entry points (`open`, `data`, `copy`, `bypass`, ...).

#[path = "../../../ci/import_graph.rs"]
mod import_graph;

#[test]
fn the_shims_files_import_each_other_without_a_circle() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = import_graph::assert_no_circles(&src);
    assert!(graph.contains_key(&vec!["shim".to_string()]) && graph.contains_key(&vec!["open".to_string()]));
}
