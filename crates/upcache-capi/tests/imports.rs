//! The files of upcache-capi import each other without a circle (issue 16).

#[path = "../../../ci/import_graph.rs"]
mod import_graph;

#[test]
fn the_files_import_each_other_without_a_circle() {
    import_graph::assert_no_circles(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
}
