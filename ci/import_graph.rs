//! The import graph of a crate's files, for the tests that keep it free of circles and keep
//! layers pointing down (issue 16). Each crate's test includes this file with `#[path]`.
//!
//! A file imports another when a `crate::`, `super::` or `self::` path in it (in a `use`,
//! nested `{...}` lists included, or inline) names a module the other file is, or an item in
//! it: a path resolves to the deepest module file it names. Comments and test-only items
//! (each item under `#[cfg(test)]` or `#[cfg(all(test, ...))]`, wherever it is in the file) are
//! left out: tests may use anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path from the crate root: `["cache", "writeback"]`; the root is `[]`.
pub type Module = Vec<String>;

/// The module files of the crate whose sources are in `src`, each with the modules it imports.
pub fn graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let files = module_files(src);
    let mut out = BTreeMap::new();
    for (module, path) in &files {
        let text = code_of(&std::fs::read_to_string(path).unwrap());
        let mut deps = BTreeSet::new();
        for p in paths(&text) {
            let Some(full) = absolute(module, &p) else { continue };
            let target = (0..=full.len()).rev().map(|k| full[..k].to_vec()).find(|m| files.contains_key(m));
            if let Some(t) = target.filter(|t| t != module) {
                deps.insert(t);
            }
        }
        out.insert(module.clone(), deps);
    }
    out
}

/// `a/b` for `["a", "b"]`, `lib` for the root.
pub fn name(m: &Module) -> String {
    if m.is_empty() {
        "lib".into()
    } else {
        m.join("/")
    }
}

/// Every circle of imports, each as the modules on it (one per strongly connected group).
pub fn circles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<String>> {
    // Two modules are on one circle when each reaches the other.
    let reach = |from: &Module| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(m) = stack.pop() {
            for next in graph.get(&m).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&Module, BTreeSet<Module>> = graph.keys().map(|m| (m, reach(m))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for (m, r) in &reaches {
        if done.contains(*m) || !r.contains(*m) {
            continue;
        }
        let group: Vec<&Module> = r.iter().filter(|o| reaches[o].contains(*m)).collect();
        done.extend(group.iter().map(|g| (*g).clone()));
        out.push(group.into_iter().map(name).collect());
    }
    out
}

fn module_files(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut module: Module = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                module.pop();
            }
            out.insert(module, path);
        }
    }
    out
}

/// The code of a file without comments and without its test-only items: each item under a
/// `#[cfg(test)]` or `#[cfg(all(test, ...))]` attribute (a `mod tests` at the end, or a helper
/// near the top), to the end of its block or statement. Everything else is kept, however far
/// down the file.
fn code_of(text: &str) -> String {
    let text: String =
        text.lines().map(|l| l.find("//").map_or(l, |i| &l[..i])).collect::<Vec<_>>().join("\n");
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = ["#[cfg(test)]", "#[cfg(all(test"].iter().filter_map(|t| rest.find(t)).min() {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let attribute_end = rest.find(']').map_or(rest.len(), |i| i + 1);
        rest = &rest[item_end(&rest[attribute_end..]) + attribute_end..];
    }
    out.push_str(rest);
    out
}

/// Where the item at the start of `text` ends: after its outermost `{...}` block, or after the
/// `;` that ends it first (a `use`, a `mod name;`, a unit struct); braces and semicolons in
/// string and character literals do not count.
fn item_end(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                // Past the closing quote, escapes skipped (raw strings hold no `"` in this code).
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' if bytes.get(i + 2) == Some(&b'\'') => i += 2, // a character literal such as '{'
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            b';' if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    text.len()
}

/// Every path starting `crate::`, `super::` or `self::`, with `{...}` lists expanded.
fn paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in text.match_indices(start) {
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            expand(&text[at..], &[], &mut out);
        }
    }
    out
}

/// Expands the path at the start of `text` (after `prefix`) into `out`.
fn expand(text: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut path = prefix.to_vec();
    let mut rest = text;
    loop {
        let seg: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if seg.is_empty() {
            break;
        }
        rest = &rest[seg.len()..];
        path.push(seg);
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    let Some(list) = rest.strip_prefix('{') else {
        out.push(path);
        return;
    };
    // Split the list at its top-level commas.
    let (mut depth, mut item_start) = (0usize, 0usize);
    for (i, c) in list.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                expand(list[item_start..i].trim_start(), &path, out);
                return;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand(list[item_start..i].trim_start(), &path, out);
                item_start = i + 1;
            }
            _ => {}
        }
    }
}

/// `path` (starting `crate`, `super` or `self`, as written in `module`) from the crate root.
fn absolute(module: &Module, path: &[String]) -> Option<Module> {
    let (first, rest) = path.split_first()?;
    let mut base = match first.as_str() {
        "crate" => return Some(rest.to_vec()),
        "self" => module.clone(),
        "super" => module[..module.len().checked_sub(1)?].to_vec(),
        _ => return None,
    };
    let mut rest = rest;
    while let Some(("super", r)) = rest.split_first().map(|(s, r)| (s.as_str(), r)) {
        base.pop()?;
        rest = r;
    }
    base.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(base)
}

/// The modules that `module` imports against `layers` (lowest first, each a list of
/// top-level modules): one in another top-level module that is not in a lower layer, or the
/// root. Each as "from -> to".
pub fn upward(graph: &BTreeMap<Module, BTreeSet<Module>>, layers: &[&[&str]]) -> Vec<String> {
    let layer_of =
        |m: &Module| m.first().and_then(|top| layers.iter().position(|l| l.contains(&top.as_str())));
    let mut out = Vec::new();
    for (from, deps) in graph {
        if from.is_empty() {
            continue; // the root re-exports
        }
        for to in deps {
            if to.first() == from.first() {
                continue;
            }
            let ok = matches!((layer_of(from), layer_of(to)), (Some(a), Some(b)) if b < a);
            if !ok {
                out.push(format!("{} -> {}", name(from), name(to)));
            }
        }
    }
    out
}

/// The checks every crate runs: the graph has files in it, and no circle.
pub fn assert_no_circles(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let g = graph(src);
    assert!(g.len() > 3, "too few module files found under {}: {:?}", src.display(), g.keys());
    let c = circles(&g);
    assert!(c.is_empty(), "import circles between the files of {}: {c:?}", src.display());
    g
}

#[cfg(test)]
mod self_check {
    use super::*;

    fn m(s: &str) -> Module {
        s.split('/').filter(|x| !x.is_empty()).map(String::from).collect()
    }

    #[test]
    fn paths_are_expanded_and_resolved() {
        let text =
            "use crate::a::{b::{C, d}, self};\nuse super::e::F; // crate::x\nfn f(self) { crate::g::h(); }";
        let code = code_of(text);
        let mut p: Vec<String> = paths(&code).iter().map(|p| p.join("::")).collect();
        p.sort();
        assert_eq!(p, ["crate::a::b::C", "crate::a::b::d", "crate::a::self", "crate::g::h", "super::e::F"]);
        assert_eq!(absolute(&m("x/y"), &["super".into(), "z".into()]), Some(m("x/z")));
        assert_eq!(absolute(&m("x"), &["super".into(), "super".into()]), None);
    }

    #[test]
    fn circles_and_upward_imports_are_found() {
        let mut g: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
        g.insert(m("a"), [m("b/c")].into());
        g.insert(m("b/c"), [m("b")].into());
        g.insert(m("b"), [].into());
        assert!(circles(&g).is_empty());
        assert_eq!(upward(&g, &[&["a"], &["b"]]), ["a -> b/c"]);
        assert!(upward(&g, &[&["b"], &["a"]]).is_empty());
        g.get_mut(&m("b")).unwrap().insert(m("a"));
        assert_eq!(circles(&g), vec![vec!["a".to_string(), "b".into(), "b/c".into()]]);
    }
}
