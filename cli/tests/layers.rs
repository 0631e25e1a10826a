//! The modules of a crate depend one way: each uses only its own layer and those below
//! ([`LAYERS`]), and no module reaches, through any chain of `crate::` or `super::` paths,
//! back to itself. Read from the sources (unit tests and comments left
//! out, since a test module may use anything), so that a new import that closes a cycle fails here and
//! names the cycle.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates whose modules form no cycle.
const CRATES: [&str; 4] = ["model", "controller", "dataplane", "cli"];

/// Module path (`a::b`, `""` for the crate root) → its source without its unit tests (test
/// modules in files of their own left out too).
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    // Modules in files of their own that only tests build (`#[cfg(test)] mod name;`).
    let mut tests = Vec::new();
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
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                parts.pop();
            }
            if parts.first().is_some_and(|p| p == "bin") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for declared in text.split("#[cfg(test)]\nmod ").skip(1) {
                let name = declared.split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap_or_default();
                if declared[name.len()..].starts_with(';') {
                    tests.push([&parts[..], &[name.to_owned()]].concat().join("::"));
                }
            }
            // Code only: unit tests and comments (doc links name items they do not use) left out.
            let code = text.split("#[cfg(test)]\nmod ").next().unwrap_or_default();
            let code: String =
                code.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
            out.insert(parts.join("::"), code);
        }
    }
    out.retain(|module, _| !tests.iter().any(|t| module == t || module.starts_with(&format!("{t}::"))));
    out
}

/// The longest module of `known` that `path` (`a::b::Item`) starts with.
fn resolve<'a>(known: &'a BTreeMap<String, String>, path: &str) -> Option<&'a str> {
    let segs: Vec<&str> = path.split("::").collect();
    (1..=segs.len()).rev().find_map(|n| known.get_key_value(&segs[..n].join("::")).map(|(k, _)| k.as_str()))
}

/// The paths named after `prefix` in `code`, use-trees expanded at any depth:
/// `crate::{a::{b, c::D}, e}` gives `a::b`, `a::c::D`, `a`, `e`.
fn paths_after(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + prefix.len()..];
        if !before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            tree(rest, "", &mut out);
        }
    }
    out
}

/// Reads one use-tree at the start of `s` under `prefix` into `out`; returns its length.
fn tree(s: &str, prefix: &str, out: &mut Vec<String>) -> usize {
    let join = |name: &str| if prefix.is_empty() { name.to_owned() } else { format!("{prefix}::{name}") };
    if let Some(group) = s.strip_prefix('{') {
        let mut at;
        let mut inner = group;
        loop {
            inner = inner.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
            at = s.len() - inner.len();
            if inner.is_empty() || inner.starts_with('}') {
                break;
            }
            let used = tree(inner, prefix, out);
            if used == 0 {
                break;
            }
            inner = &inner[used..];
        }
        if !prefix.is_empty() {
            out.push(prefix.to_owned());
        }
        return at + 1;
    }
    let len = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
    if len == 0 {
        return 0;
    }
    let path = join(&s[..len]);
    match s[len..].strip_prefix("::") {
        Some(next) if next.starts_with(|c: char| c == '{' || c.is_alphanumeric() || c == '_') => {
            len + 2 + tree(next, &path, out)
        }
        _ => {
            if &s[..len] != "self" {
                out.push(path);
            } else if !prefix.is_empty() {
                out.push(prefix.to_owned());
            }
            // `name as alias`: the alias is no path.
            let after = &s[len..];
            let trimmed = after.trim_start();
            match trimmed.strip_prefix("as ") {
                Some(alias) => {
                    let alias = alias.trim_start();
                    let end = alias.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(alias.len());
                    s.len() - alias.len() + end
                }
                None => len,
            }
        }
    }
}

/// The items the crate root re-exports (`pub use a::b::X;`), by name: what `crate::X`
/// means.
fn root_exports(known: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let root = known.get("").map(String::as_str).unwrap_or_default();
    let mut out = BTreeMap::new();
    for statement in root.split("pub use ").skip(1) {
        let mut paths = Vec::new();
        tree(statement, "", &mut paths);
        for path in paths {
            if let Some((_, name)) = path.rsplit_once("::") {
                out.insert(name.to_owned(), path);
            }
        }
    }
    out
}

/// Which modules each module uses.
fn edges(known: &BTreeMap<String, String>) -> BTreeMap<&str, BTreeSet<&str>> {
    let exports = root_exports(known);
    let mut out: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (module, code) in known {
        let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
        let absolute = paths_after(code, "crate::");
        let relative = paths_after(code, "super::").into_iter().map(|p| match parent {
            "" => p,
            parent => format!("{parent}::{p}"),
        });
        let used = out.entry(module.as_str()).or_default();
        for path in absolute.into_iter().chain(module.contains("::").then_some(relative).into_iter().flatten()) {
            let first = path.split("::").next().unwrap_or_default();
            let path = match exports.get(first) {
                Some(real) if !known.contains_key(first) => path.replacen(first, real, 1),
                _ => path,
            };
            if let Some(target) = resolve(known, &path) {
                // A module may use itself and the modules it is inside (their items are its
                // context); the crate root is the composition root, above every module.
                let inside = target.is_empty() || module == target || module.starts_with(&format!("{target}::"));
                if !inside {
                    used.insert(target);
                }
            }
        }
    }
    out
}

/// A cycle through `start`, if any: the modules in order.
fn cycle_through<'a>(edges: &BTreeMap<&'a str, BTreeSet<&'a str>>, start: &'a str) -> Option<Vec<&'a str>> {
    let mut stack: Vec<(&str, Vec<&str>)> = vec![(start, vec![start])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for &next in edges.get(at).into_iter().flatten() {
            if next == start {
                return Some([path.clone(), vec![start]].concat());
            }
            if seen.insert(next) {
                stack.push((next, [path.clone(), vec![next]].concat()));
            }
        }
    }
    None
}

/// Each crate's layers, bottom first, each a list of module paths (a path stands for the
/// module and everything inside it; the longest path that names a module decides its
/// layer). A module may use its own layer and those below, and the modules it is inside;
/// `docs/architecture.md` says what each layer holds.
const LAYERS: [(&str, &[&[&str]]); 4] = [
    (
        "model",
        &[
            &["host", "path", "pattern", "net", "identity"],
            &["cors", "auth", "client_auth", "tls", "route"],
            &["hosts"],
            &["snapshot"],
        ],
    ),
    (
        "controller",
        &[
            // Names every layer shares.
            &["well_known", "hashing", "duration"],
            // The world: the objects translation reads and what changed in them.
            &["stored", "kinds", "changes", "files"],
            // Translation: the lookups every part shares, then the translators.
            &["translate::reads", "translate::reason"],
            &["translate::owners", "translate::class", "translate::grants"],
            &["translate::backend", "translate::backend_tls", "translate::tls", "translate::acme"],
            &["translate::lookups"],
            &["translate::ingress"],
            &["translate::gateway_api"],
            &["translate::edge"],
            &["translate::assemble"],
            &["translate::incremental"],
            &["translate"],
            // What acts on a translation.
            &["acme", "publish", "nginx_configmap", "migrate"],
            // The API server: watches, the index, status, Events, the lease.
            &["k8s"],
        ],
    ),
    (
        "dataplane",
        &[
            &["reasons", "host_map"],
            &["metrics", "memory"],
            &["relay", "prefixed", "proxy_protocol", "drain", "coalesce"],
            &["sessions", "tls", "acme", "passthrough::client_hello"],
            &["hbone"],
            &["upstream"],
            &["auth", "ratelimit"],
            &["host_map", "routing"],
            &["config"],
            &["proxy", "passthrough", "tcp", "echo"],
            &["listeners", "admin"],
            &["testing", "fuzzing"],
        ],
    ),
    ("cli", &[&["args", "logging"], &["control", "gateway"], &["controller"], &["run", "migrate"]]),
];

/// The layer of `module` in `layers`: the index of the layer naming its longest prefix.
fn layer_of(layers: &[&[&str]], module: &str) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for (i, names) in layers.iter().enumerate() {
        for name in *names {
            let covers = module == *name || module.starts_with(&format!("{name}::"));
            if covers && best.is_none_or(|(len, _)| name.len() > len) {
                best = Some((name.len(), i));
            }
        }
    }
    best.map(|(_, i)| i)
}

/// The imports of `edges` that reach a layer above their own, and the modules no layer
/// names.
fn upward<'a>(layers: &[&[&str]], edges: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Vec<String> {
    let mut out = Vec::new();
    for (&from, targets) in edges {
        let Some(at) = layer_of(layers, from) else {
            if !from.is_empty() {
                out.push(format!("{from} is in no layer"));
            }
            continue;
        };
        for &to in targets {
            match layer_of(layers, to) {
                Some(above) if above > at => out.push(format!("{from} (layer {at}) uses {to} (layer {above})")),
                _ => {}
            }
        }
    }
    out
}

#[test]
fn each_module_uses_only_its_layer_and_those_below() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut wrong = Vec::new();
    for (krate, layers) in LAYERS {
        let known = modules(&root.join(krate).join("src"));
        wrong.extend(upward(layers, &edges(&known)).into_iter().map(|w| format!("{krate}: {w}")));
    }
    assert!(wrong.is_empty(), "imports against the layers (LAYERS, bottom first):\n{}", wrong.join("\n"));
}

#[test]
fn no_crate_has_an_import_cycle_between_its_modules() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cycles = Vec::new();
    for krate in CRATES {
        let known = modules(&root.join(krate).join("src"));
        assert!(known.len() > 1, "{krate}: no modules read");
        let edges = edges(&known);
        let mut reported = BTreeSet::new();
        for &module in edges.keys() {
            if reported.contains(module) {
                continue;
            }
            if let Some(cycle) = cycle_through(&edges, module) {
                reported.extend(cycle.iter().copied());
                cycles.push(format!("{krate}: {}", cycle.join(" -> ")));
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles (move what both sides need below them):\n{}", cycles.join("\n"));
}

#[test]
fn paths_are_read_with_their_groups_and_cycles_are_found() {
    assert_eq!(paths_after("use crate::a::{b, c::D};", "crate::"), ["a::b", "a::c::D", "a"]);
    assert_eq!(paths_after("use crate::{a::{b, self}, e as f};", "crate::"), ["a::b", "a", "a", "e"]);
    assert_eq!(paths_after("x = my_crate::a; crate::b::f()", "crate::"), ["b::f"]);
    let known: BTreeMap<String, String> = [
        ("", "mod a; mod b; pub use b::{c::Z, Q};"),
        ("a", "use crate::{Z, b::X};"),
        ("b", "use crate::a::Y; use crate::Root;"),
        ("b::c", "use super::Z; use crate::b;"),
        ("d", "use crate::a;"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let edges = edges(&known);
    assert_eq!(edges["a"], BTreeSet::from(["b", "b::c"]), "a root re-export is its module's");
    assert_eq!(edges["b::c"], BTreeSet::new(), "a module's parents are its context");
    assert_eq!(edges["b"], BTreeSet::from(["a"]), "the crate root is above every module");
    assert_eq!(cycle_through(&edges, "a"), Some(vec!["a", "b", "a"]));
    assert_eq!(cycle_through(&edges, "d"), None);
    let layers: &[&[&str]] = &[&["b::c"], &["a"], &["b"]];
    assert_eq!(layer_of(layers, "b::c::e"), Some(0), "the longest path decides");
    assert_eq!(layer_of(layers, "b::x"), Some(2));
    assert_eq!(layer_of(layers, "ab"), None, "a path names whole segments");
    assert_eq!(upward(layers, &edges), ["a (layer 1) uses b (layer 2)", "d is in no layer"]);
}
