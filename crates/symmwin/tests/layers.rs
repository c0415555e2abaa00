//! The core's layers, checked: every `crate::` / `super::` path of every file in
//! `src/` may name only its own layer or a lower one, and the files import each other
//! without cycles. The layers are declared here (and drawn in docs/design.md); a new
//! module that fits none of them fails this test until it is placed.
//!
//! What counts: `use` trees and inline paths in library code. Comments, strings and
//! `#[cfg(test)]` modules are left out (a unit test may drive a lower module through
//! an upper one), and so are a module's paths to its own ancestors and descendants
//! (a parent and its children are one unit to a reader).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Bottom to top: a module may use modules of its own layer or of the ones before.
/// Below all of them are the crates symmwin depends on (symmwin-device, and the
/// backends symmwin-host and symmwin-cuda): Cargo keeps those arrows pointing down,
/// and the device contract's modules that lib.rs imports under their old names
/// (`crate::error`, `crate::layout`, ...) are no files here, so no layer.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "settings",
        &[
            "token",
            "protocol",
            "private_dir",
            "process_start",
            "config",
            "logging",
            "locality",
            "worker",
        ],
    ),
    ("store, exchange, signals", &["store", "exchange", "signal"]),
    (
        "local memory",
        &["export_ahead", "window_cache", "allocation"],
    ),
    ("groups and windows", &["group", "rendezvous", "window"]),
    ("ops", &["ops", "registry"]),
    ("entry points", &["device_provider", "probe", "adapter"]),
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Module path (`a::b`, `""` for the crate root) of every file under `src/`.
fn modules(dir: &Path, root: &Path, out: &mut BTreeMap<String, PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            modules(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path
                .strip_prefix(root)
                .expect("under src")
                .with_extension("");
            let mut segs: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(segs.last().map(String::as_str), Some("mod" | "lib")) {
                segs.pop();
            }
            out.insert(segs.join("::"), path);
        }
    }
}

/// `src` without string literals, comments and `#[cfg(test)] mod x { ... }` blocks.
fn code_only(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let bytes = src.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if src[i..].starts_with("//") {
            i += src[i..].find('\n').unwrap_or(src.len() - i);
        } else if src[i..].starts_with("/*") {
            i += src[i..].find("*/").map_or(src.len() - i, |e| e + 2);
        } else if bytes[i] == b'"' && (i == 0 || bytes[i - 1] != b'\'') {
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else {
            let c = src[i..].chars().next().expect("char");
            out.push(c);
            i += c.len_utf8();
        }
    }
    strip_test_modules(&out)
}

fn strip_test_modules(src: &str) -> String {
    let mut s = src.to_owned();
    while let Some(start) = s.find("#[cfg(test)]") {
        let after = &s[start + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        let body = trimmed.strip_prefix("pub(crate) ").unwrap_or(trimmed);
        let Some(rest) = body.strip_prefix("mod ") else {
            // Not a module (a `use` or an item): drop just the attribute line.
            s.replace_range(start..start + "#[cfg(test)]".len(), "");
            continue;
        };
        let header_end = rest.find(['{', ';']).expect("mod header");
        let offset = s.len() - rest.len();
        if rest.as_bytes()[header_end] == b';' {
            s.replace_range(start..offset + header_end + 1, "");
            continue;
        }
        let mut depth = 0usize;
        let mut end = offset + header_end;
        for (i, b) in s.bytes().enumerate().skip(offset + header_end) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        s.replace_range(start..end, "");
    }
    s
}

/// The child modules `src` declares only under `#[cfg(test)]`.
fn test_only_children(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = src;
    while let Some(at) = rest.find("#[cfg(test)]") {
        rest = &rest[at + "#[cfg(test)]".len()..];
        let t = rest.trim_start();
        if let Some(decl) = t.strip_prefix("mod ") {
            let name: String = decl
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if decl[name.len()..].trim_start().starts_with(';') {
                out.push(name);
            }
        }
    }
    out
}

/// Every path a `use` tree names: `a::{b, c::{d as e}}` gives `a::b`, `a::c::d`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        return vec![path.to_owned()];
    };
    let prefix = &tree[..open];
    let body = &tree[open + 1..tree.rfind('}').expect("closing brace")];
    let mut items = Vec::new();
    let (mut depth, mut cur) = (0, String::new());
    for c in body.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    items.push(cur);
    items
        .iter()
        .filter(|i| !i.trim().is_empty())
        .flat_map(|i| expand(i).into_iter().map(|p| format!("{prefix}{p}")))
        .collect()
}

struct Graph {
    modules: BTreeMap<String, PathBuf>,
    /// `pub use` / `pub(crate) use` re-exports: (module, name) -> the path they name.
    aliases: HashMap<(String, String), Vec<String>>,
    /// Each module's paths, made absolute, with the text that named them.
    paths: BTreeMap<String, Vec<(Vec<String>, String)>>,
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

impl Graph {
    fn absolute(&self, path: &str, module: &str) -> Option<Vec<String>> {
        let segs = segments(path);
        let first = segs.first()?;
        if first == "crate" {
            return Some(segs[1..].to_vec());
        }
        let mut base = segments(module);
        if first == "super" || first == "self" {
            let mut rest = &segs[..];
            while let Some(s) = rest.first().filter(|s| *s == "super" || *s == "self") {
                if s == "super" {
                    base.pop();
                }
                rest = &rest[1..];
            }
            base.extend(rest.iter().cloned());
            return Some(base);
        }
        let mut child = base.clone();
        child.push(first.clone());
        self.modules.contains_key(&child.join("::")).then(|| {
            base.extend(segs);
            base
        })
    }

    fn build() -> Graph {
        let root = src_dir();
        let mut modules = BTreeMap::new();
        crate::modules(&root, &root, &mut modules);
        let mut graph = Graph {
            modules,
            aliases: HashMap::new(),
            paths: BTreeMap::new(),
        };
        let mut test_only = BTreeSet::new();
        let sources: Vec<(String, String)> = graph
            .modules
            .iter()
            .map(|(m, p)| (m.clone(), std::fs::read_to_string(p).expect("read source")))
            .collect();
        for (module, src) in &sources {
            for child in test_only_children(&code_only_keep_tests(src)) {
                test_only.insert(if module.is_empty() {
                    child
                } else {
                    format!("{module}::{child}")
                });
            }
        }
        for (module, src) in &sources {
            let mut found = Vec::new();
            if test_only
                .iter()
                .any(|t| module == t || module.starts_with(&format!("{t}::")))
            {
                graph.paths.insert(module.clone(), found);
                continue;
            }
            let code = code_only(src);
            let mut rest_of_code = String::new();
            let mut cursor = 0;
            for (start, _) in code.match_indices("use ") {
                if start < cursor || !word_start(&code, start) {
                    continue;
                }
                let Some(len) = code[start..].find(';') else {
                    continue;
                };
                let stmt = &code[start + 4..start + len];
                let public = code[..start].trim_end().ends_with("pub")
                    || code[..start].trim_end().ends_with(')');
                for path in expand(stmt) {
                    if let Some(abs) = graph.absolute(&path, module) {
                        let name = path.rsplit("::").next().unwrap_or("").trim().to_owned();
                        if public && name != "*" && name != "self" && !path.contains(" as ") {
                            graph.aliases.insert((module.clone(), name), abs.clone());
                        }
                        found.push((abs, format!("use {}", path.trim())));
                    }
                }
                rest_of_code.push_str(&code[cursor..start]);
                cursor = start + len;
            }
            rest_of_code.push_str(&code[cursor..]);
            for kw in ["crate::", "super::"] {
                for (start, _) in rest_of_code.match_indices(kw) {
                    if !word_start(&rest_of_code, start) {
                        continue;
                    }
                    let path: String = rest_of_code[start..]
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                        .collect();
                    if let Some(abs) = graph.absolute(&path, module) {
                        found.push((abs, path));
                    }
                }
            }
            graph.paths.insert(module.clone(), found);
        }
        graph
    }

    /// The module a path's item lives in, following re-exports.
    fn resolve(&self, segs: &[String], depth: usize) -> String {
        let mut cur: Vec<String> = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            let mut next = cur.clone();
            next.push(s.clone());
            if self.modules.contains_key(&next.join("::")) {
                cur = next;
                continue;
            }
            if let Some(target) = self.aliases.get(&(cur.join("::"), s.clone())) {
                if depth < 10 {
                    let mut full = target.clone();
                    full.extend(segs[i + 1..].iter().cloned());
                    return self.resolve(&full, depth + 1);
                }
            }
            break;
        }
        cur.join("::")
    }

    /// Edges between modules, each with one path that makes it.
    fn edges(&self) -> BTreeMap<(String, String), String> {
        let mut edges = BTreeMap::new();
        for (module, paths) in &self.paths {
            for (segs, text) in paths {
                let target = self.resolve(segs, 0);
                let related =
                    |a: &str, b: &str| a.is_empty() || a == b || b.starts_with(&format!("{a}::"));
                if related(&target, module) || related(module, &target) {
                    continue;
                }
                edges
                    .entry((module.clone(), target))
                    .or_insert_with(|| text.clone());
            }
        }
        edges
    }
}

fn word_start(s: &str, at: usize) -> bool {
    s[..at]
        .chars()
        .next_back()
        .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':'))
}

/// Like [`code_only`] but keeping `#[cfg(test)]` lines, to find test-only children.
fn code_only_keep_tests(src: &str) -> String {
    src.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn layer_of(module: &str) -> Option<usize> {
    let top = module.split("::").next().unwrap_or("");
    LAYERS.iter().position(|(_, mods)| mods.contains(&top))
}

fn file(graph: &Graph, module: &str) -> String {
    let path = &graph.modules[module];
    path.strip_prefix(src_dir())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn every_module_has_a_layer() {
    let graph = Graph::build();
    let unplaced: Vec<String> = graph
        .modules
        .keys()
        .filter(|m| !m.is_empty() && layer_of(m).is_none())
        .map(|m| file(&graph, m))
        .collect();
    assert!(
        unplaced.is_empty(),
        "place these files in a layer of tests/layers.rs: {unplaced:?}"
    );
}

#[test]
fn no_module_imports_an_upper_layer() {
    let graph = Graph::build();
    let mut upward = Vec::new();
    for ((from, to), text) in graph.edges() {
        if let (Some(a), Some(b)) = (layer_of(&from), layer_of(&to)) {
            if b > a {
                upward.push(format!(
                    "{} ({}) imports `{text}` of {to} ({})",
                    file(&graph, &from),
                    LAYERS[a].0,
                    LAYERS[b].0
                ));
            }
        }
    }
    assert!(upward.is_empty(), "upward imports:\n{}", upward.join("\n"));
}

#[test]
fn no_import_cycles() {
    let graph = Graph::build();
    let edges = graph.edges();
    let mut adjacent: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        adjacent.entry(from).or_default().push(to);
    }
    // A cycle is a path from a module back to itself; report the first one per module.
    let mut cycles = BTreeSet::new();
    for start in adjacent.keys() {
        let mut stack = vec![(*start, vec![*start])];
        let mut seen = BTreeSet::new();
        while let Some((at, path)) = stack.pop() {
            for next in adjacent.get(at).into_iter().flatten() {
                if next == start {
                    let mut cycle: Vec<&str> = path.clone();
                    let min = cycle
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, m)| **m)
                        .map_or(0, |(i, _)| i);
                    cycle.rotate_left(min);
                    let steps: Vec<String> = cycle
                        .iter()
                        .zip(cycle.iter().cycle().skip(1))
                        .map(|(a, b)| {
                            format!(
                                "{} imports `{}`",
                                file(&graph, a),
                                edges[&(a.to_string(), b.to_string())]
                            )
                        })
                        .collect();
                    cycles.insert(steps.join(" -> "));
                } else if seen.insert(*next) {
                    let mut longer = path.clone();
                    longer.push(next);
                    stack.push((next, longer));
                }
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "import cycles:\n{}",
        cycles.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn the_check_sees_an_upward_import_and_a_cycle() {
    // The parser itself: a `use` tree, a re-export and an inline path all count.
    assert_eq!(expand("a::{b, c::{d as e}}"), vec!["a::b", "a::c::d"]);
    let code = code_only("// crate::ops\nlet s = \"crate::ops\";\n#[cfg(test)]\nmod tests { use crate::ops; }\nfn f() { crate::store::x(); }");
    assert!(!code.contains("crate::ops"), "{code}");
    assert!(code.contains("crate::store::x"), "{code}");
    let graph = Graph::build();
    assert!(
        graph
            .edges()
            .contains_key(&("ops::collective".to_owned(), "window".to_owned())),
        "the check no longer sees ops::collective -> window"
    );
}
