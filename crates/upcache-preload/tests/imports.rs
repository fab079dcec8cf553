//! The shim's files import each other without a circle (issue 16): each module's `crate::`
//! paths name only modules below it, so the layers read from the leaves (`real`, `errno`,
//! `guard`, `os`, ...) up to the entry points (`open`, `data`, `copy`, `bypass`, ...).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The modules `text` names through `crate::` (in paths and in `use crate::{...}` lists).
fn imports(text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        let names: Vec<&str> = match rest.strip_prefix('{') {
            Some(list) => list[..list.find('}').unwrap_or(0)].split(',').collect(),
            None => vec![rest],
        };
        for name in names {
            let name: String = name.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if modules.contains(&name) {
                out.insert(name);
            }
        }
    }
    out
}

/// A circle through `from`, if there is one: the modules on it.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap();
        for next in &graph[last] {
            if next == from {
                return Some(path.clone());
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push(longer);
            }
        }
    }
    None
}

#[test]
fn the_shims_files_import_each_other_without_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files: Vec<_> = std::fs::read_dir(&src)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    let modules: BTreeSet<String> =
        files.iter().map(|p| p.file_stem().unwrap().to_string_lossy().into_owned()).collect();
    assert!(modules.len() > 10 && modules.contains("shim") && modules.contains("open"), "{modules:?}");
    let graph: BTreeMap<String, BTreeSet<String>> = files
        .iter()
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            let mut deps = imports(&std::fs::read_to_string(p).unwrap(), &modules);
            deps.remove(&name);
            (name, deps)
        })
        .collect();
    // The check itself finds circles: one made up here is found.
    let mut made_up = graph.clone();
    made_up.get_mut("real").unwrap().insert("shim".into());
    assert!(circle(&made_up, "real").is_some(), "a made-up circle through real and shim was not found");
    let circles: Vec<Vec<String>> = graph.keys().filter_map(|m| circle(&graph, m)).collect();
    assert!(circles.is_empty(), "import circles between the shim's files: {circles:?}\n{graph:#?}");
}
