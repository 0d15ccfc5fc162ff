//! A layer checker for a crate's modules: imports may only point down.
//!
//! A crate's top-level modules are put in [`Layer`]s, from the bottom up; a
//! module may import modules of lower layers only (and modules of its own
//! layer when that layer is marked `lateral`). [`violations`] reads every
//! `.rs` file under a crate's `src` directory and reports each reference that
//! breaks the rule, so a test can assert there are none:
//!
//! ```no_run
//! use dlm_testkit::layers::{Layer, violations};
//!
//! let layers = [
//!     Layer { name: "foundation", modules: &["error", "keys"], lateral: false },
//!     Layer { name: "api", modules: &["client"], lateral: false },
//!     Layer { name: "root", modules: &["lib"], lateral: false },
//! ];
//! let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
//! let found = violations(&src, &layers)?;
//! assert!(found.is_empty(), "{}", found.join("\n"));
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! What counts as a reference: a path starting with `crate::` anywhere in
//! code (`use` lines, grouped `use crate::{a::X, b}` over several lines,
//! inline paths such as `crate::lock::ops::millis(x)`), and a path starting
//! with `super::` that climbs to the crate root (in `src/foo.rs`,
//! `super::bar` is `crate::bar`; inside an inline `mod tests { }` of that
//! file it is `foo` again). Comments, doc comments and string literals are
//! skipped; test code counts like any other code. A reference to a file's own
//! top-level module is always fine; a path to something that is not a
//! top-level module (`crate::Client`, a re-export) reaches the crate root,
//! named `lib` (or `main` for a binary).
//!
//! It is plain text scanning, not a Rust parser: macros that build paths and
//! `#[path]` attributes are not understood.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

/// One layer: a name for messages and the top-level modules in it.
#[derive(Debug, Clone, Copy)]
pub struct Layer<'a> {
    /// What the layer is called in messages (`"commands"`).
    pub name: &'a str,
    /// Its top-level modules: a file's first path component under `src`
    /// without `.rs` (`lock/guard.rs` and `lock.rs` are both `lock`); the
    /// crate root file is `lib` or `main`.
    pub modules: &'a [&'a str],
    /// Whether its modules may import each other.
    pub lateral: bool,
}

/// Every import in `src_dir` that points up (or sideways within a
/// non-lateral layer), as readable messages like
/// ``src/lock/guard.rs:11: `lock` (primitives) imports `client` (api)``;
/// also every module found under `src_dir` that no layer lists, and every
/// module that several layers list. `layers` go from the bottom up; the crate
/// root file (`lib.rs` / `main.rs`) is the module `lib` / `main`.
///
/// Modules listed twice come first, then the files' messages, by file and
/// line. An empty list means the crate keeps to its layers.
pub fn violations(src_dir: &Path, layers: &[Layer<'_>]) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    // Which layer each module is in (its index from the bottom).
    let mut layer_of: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, layer) in layers.iter().enumerate() {
        for &m in layer.modules {
            if let Some(&j) = layer_of.get(m) {
                out.push(format!(
                    "module `{m}` is listed in both layers `{}` and `{}`",
                    layers[j].name, layer.name
                ));
            } else {
                layer_of.insert(m, i);
            }
        }
    }

    let mut files = Vec::new();
    collect_rs_files(src_dir, &mut files)?;
    files.sort();
    let rel_paths: Vec<Vec<String>> = files
        .iter()
        .map(|f| components(f.strip_prefix(src_dir).unwrap_or(f)))
        .collect();
    let modules: BTreeSet<String> = rel_paths.iter().map(|r| top_module(r)).collect();
    let root = if src_dir.join("lib.rs").is_file() {
        "lib"
    } else {
        "main"
    };
    let shown_dir = src_dir
        .file_name()
        .map_or_else(String::new, |n| format!("{}/", n.to_string_lossy()));

    let mut unlisted_reported = BTreeSet::new();
    for (file, rel) in files.iter().zip(&rel_paths) {
        let shown = format!("{shown_dir}{}", rel.join("/"));
        let own = top_module(rel);
        let Some(&own_layer) = layer_of.get(own.as_str()) else {
            if unlisted_reported.insert(own.clone()) {
                out.push(format!("{shown}: module `{own}` is in no layer"));
            }
            continue;
        };
        let file_root = match own.as_str() {
            "lib" | "main" if rel.len() == 1 => own.as_str(),
            _ => root,
        };
        let source = std::fs::read_to_string(file)?;
        let mut seen = BTreeSet::new();
        for (line, first) in references(&source, &module_path(rel)) {
            let target = match first {
                Some(name) if modules.contains(&name) => name,
                // Not a top-level module: an item of (or re-exported by) the root.
                _ => file_root.to_string(),
            };
            if target == own || !seen.insert((line, target.clone())) {
                continue;
            }
            // A module in no layer is reported once, as such.
            let Some(&target_layer) = layer_of.get(target.as_str()) else {
                continue;
            };
            let (from, to) = (&layers[own_layer], &layers[target_layer]);
            if target_layer > own_layer {
                out.push(format!(
                    "{shown}:{line}: `{own}` ({}) imports `{target}` ({})",
                    from.name, to.name
                ));
            } else if target_layer == own_layer && !from.lateral {
                out.push(format!(
                    "{shown}:{line}: `{own}` ({}) imports `{target}` ({}), sideways in a non-lateral layer",
                    from.name, to.name
                ));
            }
        }
    }
    Ok(out)
}

/// Pairs of files that import each other, anywhere in the crate: within a
/// module as well as across modules (`lock/batch.rs` using
/// `super::ops::send` while `lock/ops.rs` uses `crate::lock::batch::Job`).
/// One message per pair, naming both files and a line of each import. A
/// module's own `mod.rs` (or the crate root) and the files of its children
/// are not counted as a pair: the parent declares and re-exports its
/// children, and they use what it defines.
///
/// What counts as an import here: a path starting with `crate::`, `self::`
/// or `super::`, resolved to the file of the longest module prefix that has
/// one (`crate::lock::ops::millis` is `lock/ops.rs`; `crate::lock::Lock` is
/// `lock/mod.rs`). Items of a `use` group count one by one.
///
/// ```no_run
/// let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
/// let cycles = dlm_testkit::layers::file_cycles(&src)?;
/// assert!(cycles.is_empty(), "{}", cycles.join("\n"));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn file_cycles(src_dir: &Path) -> io::Result<Vec<String>> {
    let mut files = Vec::new();
    collect_rs_files(src_dir, &mut files)?;
    files.sort();
    let rels: Vec<Vec<String>> = files
        .iter()
        .map(|f| components(f.strip_prefix(src_dir).unwrap_or(f)))
        .collect();
    let paths: Vec<Vec<String>> = rels.iter().map(|r| module_path(r)).collect();
    let shown_dir = src_dir
        .file_name()
        .map_or_else(String::new, |n| format!("{}/", n.to_string_lossy()));
    let shown: Vec<String> = rels
        .iter()
        .map(|r| format!("{shown_dir}{}", r.join("/")))
        .collect();
    let index: BTreeMap<&[String], usize> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| (p.as_slice(), i))
        .collect();
    // edges[(from, to)] = the first line of `from` that imports `to`.
    let mut edges: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for (from, file) in files.iter().enumerate() {
        let source = std::fs::read_to_string(file)?;
        for (line, target) in full_references(&source, &paths[from]) {
            let to = (0..=target.len())
                .rev()
                .find_map(|n| index.get(&target[..n]).copied());
            if let Some(to) = to
                && to != from
            {
                edges.entry((from, to)).or_insert(line);
            }
        }
    }
    let parent_of = |a: usize, b: usize| {
        paths[b].len() == paths[a].len() + 1 && paths[b].starts_with(&paths[a])
    };
    let mut out = Vec::new();
    for (&(a, b), &line_a) in &edges {
        if a < b
            && let Some(&line_b) = edges.get(&(b, a))
            && !parent_of(a, b)
            && !parent_of(b, a)
        {
            out.push(format!(
                "{}:{line_a} and {}:{line_b} import each other",
                shown[a], shown[b]
            ));
        }
    }
    Ok(out)
}

/// The module paths `source` (a file of module `module_path`) refers to
/// through `crate::`, `self::` and `super::`, each as its full list of
/// segments from the crate root, with its line.
fn full_references(source: &str, module_path: &[String]) -> Vec<(usize, Vec<String>)> {
    let toks = tokens(&code_only(source));
    let tok = |i: usize| toks.get(i).map(|(_, t)| t);
    let is_ident = |i: usize, s: &str| matches!(tok(i), Some(Tok::Ident(x)) if x == s);
    let is_punct = |i: usize, c: char| tok(i) == Some(&Tok::Punct(c));
    let is_path_sep = |i: usize| is_punct(i, ':') && is_punct(i + 1, ':');
    let mut refs = Vec::new();
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    for i in 0..toks.len() {
        let line = toks[i].0;
        match &toks[i].1 {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                if inline.last().is_some_and(|&(_, d)| d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Ident(m) if m == "mod" => {
                if let Some(Tok::Ident(name)) = tok(i + 1)
                    && is_punct(i + 2, '{')
                {
                    inline.push((name.clone(), depth + 1));
                }
            }
            Tok::Ident(w)
                if matches!(w.as_str(), "crate" | "self" | "super")
                    && !(i >= 2 && is_path_sep(i - 2))
                    && is_path_sep(i + 1) =>
            {
                let mut here: Vec<String> = module_path
                    .iter()
                    .cloned()
                    .chain(inline.iter().map(|(n, _)| n.clone()))
                    .collect();
                let mut j = i;
                if w == "crate" {
                    here.clear();
                    j += 1;
                } else if w == "self" {
                    j += 1;
                } else {
                    let mut valid = true;
                    while is_ident(j, "super") {
                        valid &= here.pop().is_some();
                        j += 1;
                        if is_path_sep(j) && is_ident(j + 2, "super") {
                            j += 2;
                        } else {
                            break;
                        }
                    }
                    if !valid {
                        continue;
                    }
                }
                // j is at the `::` after the start. A glob, or a group's
                // `self`, names the prefix itself (the root: an empty path).
                let mut base = Some(here);
                let mut k = j;
                while is_path_sep(k) {
                    match tok(k + 2) {
                        Some(Tok::Ident(name)) if name != "self" => {
                            if let Some(b) = base.as_mut() {
                                b.push(name.clone());
                            }
                            k += 3;
                        }
                        Some(Tok::Punct('{')) => {
                            let prefix = base.take().unwrap_or_default();
                            for (l, item) in group_items(&toks, k + 2) {
                                let mut full = prefix.clone();
                                full.extend(item);
                                refs.push((l, full));
                            }
                            break;
                        }
                        _ => break,
                    }
                }
                if let Some(path) = base {
                    refs.push((line, path));
                }
            }
            _ => {}
        }
    }
    refs
}

/// Each item of the `{ ... }` group opening at `open` as its path segments
/// (`{a::X, b, c::{d, e}}` -> [a, X], [b], [c]; `self` and `*` -> []), with
/// its line.
fn group_items(toks: &[(usize, Tok)], open: usize) -> Vec<(usize, Vec<String>)> {
    let mut items: Vec<(usize, Vec<String>)> = Vec::new();
    let mut depth = 0usize;
    let mut current: Option<(usize, Vec<String>)> = None;
    let mut after_sep = false;
    for (line, t) in toks.iter().skip(open) {
        match t {
            Tok::Punct('{') => {
                depth += 1;
                if depth > 1 {
                    after_sep = false;
                }
            }
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    break;
                }
            }
            Tok::Punct(',') if depth == 1 => {
                items.extend(current.take());
                after_sep = false;
            }
            Tok::Punct(':') if depth == 1 => after_sep = true,
            Tok::Ident(name) if depth == 1 && name == "self" && current.is_none() => {
                current = Some((*line, Vec::new()));
            }
            Tok::Punct('*') if depth == 1 && current.is_none() => {
                current = Some((*line, Vec::new()));
            }
            Tok::Ident(name) if depth == 1 => match &mut current {
                None => current = Some((*line, vec![name.clone()])),
                Some((_, segs)) if after_sep => {
                    segs.push(name.clone());
                    after_sep = false;
                }
                // `X as Y`: the path ended at X.
                Some(_) => {}
            },
            _ => {}
        }
    }
    items.extend(current);
    items
}

/// Every `.rs` file under `dir`, recursively.
fn collect_rs_files(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_rs_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// A relative path's components as strings.
fn components(rel: &Path) -> Vec<String> {
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect()
}

/// The top-level module of a file: `lock/guard.rs` -> `lock`, `keys.rs` ->
/// `keys`, `lib.rs` -> `lib`.
fn top_module(rel: &[String]) -> String {
    let first = rel.first().map_or("", String::as_str);
    first.strip_suffix(".rs").unwrap_or(first).to_string()
}

/// The module path of a file (empty for the crate root): `lock/guard.rs` ->
/// `[lock, guard]`, `lock/mod.rs` -> `[lock]`, `keys.rs` -> `[keys]`.
fn module_path(rel: &[String]) -> Vec<String> {
    let mut path: Vec<String> = rel
        .iter()
        .map(|c| c.strip_suffix(".rs").unwrap_or(c).to_string())
        .collect();
    if matches!(path.last().map(String::as_str), Some("mod")) {
        path.pop();
    }
    if rel.len() == 1 && matches!(path.first().map(String::as_str), Some("lib" | "main")) {
        path.clear();
    }
    path
}

/// A token of the code left after [`code_only`]: an identifier (or keyword)
/// or one punctuation character (`::` is two `:`), with its line.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Punct(char),
}

/// The references to the crate root's namespace in `source`, a file of the
/// module `module_path`: (line, first segment after the root), where the
/// first segment is `None` for a glob or `self` (the root itself). A path
/// inside the file's own module resolves to its own top-level module, which
/// the caller ignores.
fn references(source: &str, module_path: &[String]) -> Vec<(usize, Option<String>)> {
    full_references(source, module_path)
        .into_iter()
        .map(|(line, path)| (line, path.into_iter().next()))
        .collect()
}

/// Identifiers and punctuation of `code`, each with its 1-based line.
fn tokens(code: &str) -> Vec<(usize, Tok)> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut ident = String::new();
    let mut ident_line = 1;
    for c in code.chars() {
        if c.is_alphanumeric() || c == '_' {
            if ident.is_empty() {
                ident_line = line;
            }
            ident.push(c);
            continue;
        }
        if !ident.is_empty() {
            out.push((ident_line, Tok::Ident(std::mem::take(&mut ident))));
        }
        if c == '\n' {
            line += 1;
        } else if !c.is_whitespace() {
            out.push((line, Tok::Punct(c)));
        }
    }
    if !ident.is_empty() {
        out.push((ident_line, Tok::Ident(ident)));
    }
    out
}

/// `source` with comments, string literals and character literals blanked
/// out (newlines kept, so lines still count right).
fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let at = |i: usize| chars.get(i).copied();
    let mut out = String::with_capacity(source.len());
    // Blank `chars[from..to]`, keeping its newlines.
    let blank = |out: &mut String, from: usize, to: usize| {
        for &c in &chars[from..to.min(chars.len())] {
            out.push(if c == '\n' { '\n' } else { ' ' });
        }
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let end = if c == '/' && at(i + 1) == Some('/') {
            // A line comment (also `///` and `//!`): up to the newline.
            let mut j = i;
            while j < chars.len() && chars[j] != '\n' {
                j += 1;
            }
            Some(j)
        } else if c == '/' && at(i + 1) == Some('*') {
            // A block comment; they nest.
            let (mut j, mut nest) = (i + 2, 1);
            while j < chars.len() && nest > 0 {
                if chars[j] == '/' && at(j + 1) == Some('*') {
                    nest += 1;
                    j += 2;
                } else if chars[j] == '*' && at(j + 1) == Some('/') {
                    nest -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            Some(j)
        } else if c == '"' {
            Some(string_end(&chars, i + 1))
        } else if c == 'r' && raw_prefix_ok(&chars, i) {
            // A raw string (`r"…"`, `r#"…"#`, `br"…"`), if one starts here.
            raw_string_start(&chars, i + 1)
                .map(|(hashes, body)| raw_string_end(&chars, body, hashes))
        } else if c == '\'' && at(i + 1) == Some('\\') {
            // An escaped character literal: up to the next unescaped quote.
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '\'' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            Some(j + 1)
        } else if c == '\'' && at(i + 2) == Some('\'') {
            // A one-character literal such as '"' (not a lifetime such as 'a).
            Some(i + 3)
        } else {
            None
        };
        match end {
            Some(end) => {
                blank(&mut out, i, end);
                i = end.max(i + 1);
            }
            None => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Whether the `r` at `i` can start a raw string: it is not the end of an
/// identifier, except of the prefixes `b` and `c`.
fn raw_prefix_ok(chars: &[char], i: usize) -> bool {
    let is_ident = |k: usize| chars[k].is_alphanumeric() || chars[k] == '_';
    match i {
        0 => true,
        _ if !is_ident(i - 1) => true,
        _ => matches!(chars[i - 1], 'b' | 'c') && (i < 2 || !is_ident(i - 2)),
    }
}

/// Where a string literal whose body starts at `i` ends (after its quote).
fn string_end(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    chars.len()
}

/// After an `r` at `i - 1`: the number of `#`s and where the body starts,
/// when a raw string starts here.
fn raw_string_start(chars: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    while chars.get(j) == Some(&'#') {
        j += 1;
    }
    (chars.get(j) == Some(&'"')).then_some((j - i, j + 1))
}

/// Where a raw string with `hashes` `#`s whose body starts at `i` ends.
fn raw_string_end(chars: &[char], mut i: usize, hashes: usize) -> usize {
    while i < chars.len() {
        if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
            return i + 1 + hashes;
        }
        i += 1;
    }
    chars.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crate `src` directory with `files` (path, content) in a temp dir.
    fn fixture(files: &[(&str, &str)]) -> io::Result<tempfile::TempDir> {
        let dir = tempfile::tempdir()?;
        for (path, content) in files {
            let path = dir.path().join("src").join(path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, content)?;
        }
        Ok(dir)
    }

    const LAYERS: &[Layer<'static>] = &[
        Layer {
            name: "foundation",
            modules: &["error", "keys"],
            lateral: false,
        },
        Layer {
            name: "primitives",
            modules: &["lock", "token"],
            lateral: true,
        },
        Layer {
            name: "api",
            modules: &["client"],
            lateral: false,
        },
        Layer {
            name: "root",
            modules: &["lib"],
            lateral: false,
        },
    ];

    fn check(files: &[(&str, &str)]) -> io::Result<Vec<String>> {
        let dir = fixture(files)?;
        violations(&dir.path().join("src"), LAYERS)
    }

    /// A tree that keeps to `LAYERS` (every module present).
    const CLEAN: &[(&str, &str)] = &[
        (
            "lib.rs",
            "//! The crate.\nmod client;\nmod error;\nmod keys;\nmod lock;\nmod token;\npub use crate::client::Client;\n",
        ),
        ("error.rs", "//! Errors.\npub struct Error;\n"),
        (
            "keys.rs",
            "pub(crate) fn key() {}\n#[cfg(test)]\nmod tests {\n    use super::key;\n    use super::super::keys::key as k;\n}\n",
        ),
        (
            "lock/mod.rs",
            "mod guard;\nuse crate::{error::Error, keys};\nuse super::token::Token;\n",
        ),
        (
            "lock/guard.rs",
            "use crate::lock::Lock;\nuse super::Other;\nfn f() { let _ = crate::keys::key(); }\n",
        ),
        ("token.rs", "use crate::lock::guard;\n"),
        ("client.rs", "use crate::{lock::Lock, token::Token};\n"),
    ];

    #[test]
    fn files_that_import_each_other_are_reported() -> io::Result<()> {
        let dir = fixture(&[
            ("lib.rs", "mod lock;\n"),
            (
                "lock/mod.rs",
                "mod batch;\nmod ops;\npub use batch::Job;\npub struct Lock;\n",
            ),
            ("lock/batch.rs", "use super::ops::send;\npub struct Job;\n"),
            (
                "lock/ops.rs",
                "//! Ops.\nuse crate::{keys, lock::batch::Job};\nuse crate::lock::Lock;\npub fn send() {}\n",
            ),
        ])?;
        assert_eq!(
            file_cycles(&dir.path().join("src"))?,
            ["src/lock/batch.rs:1 and src/lock/ops.rs:2 import each other"]
        );
        Ok(())
    }

    #[test]
    fn one_way_imports_and_parents_are_no_cycle() -> io::Result<()> {
        let dir = fixture(&[
            ("lib.rs", "mod lock;\npub use crate::lock::Lock;\n"),
            (
                "lock/mod.rs",
                "mod batch;\nmod ops;\nuse self::ops::send;\npub struct Lock;\n",
            ),
            (
                "lock/batch.rs",
                "use super::ops::send;\nuse crate::lock::Lock;\n",
            ),
            (
                "lock/ops.rs",
                "use crate::lock::Lock;\npub fn send() {}\nmod tests {\n    use super::send;\n}\n",
            ),
        ])?;
        assert_eq!(file_cycles(&dir.path().join("src"))?, Vec::<String>::new());
        Ok(())
    }

    #[test]
    fn a_clean_tree_has_no_violations() -> io::Result<()> {
        assert_eq!(check(CLEAN)?, Vec::<String>::new());
        Ok(())
    }

    fn with(replace: &str, content: &str) -> Vec<(&'static str, String)> {
        CLEAN
            .iter()
            .map(|&(p, c)| {
                (
                    p,
                    if p == replace {
                        content.to_string()
                    } else {
                        c.to_string()
                    },
                )
            })
            .collect()
    }

    fn check_with(replace: &str, content: &str) -> io::Result<Vec<String>> {
        let files = with(replace, content);
        let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
        check(&files)
    }

    #[test]
    fn a_glob_or_self_of_the_root_imports_the_root() -> io::Result<()> {
        for import in ["use crate::*;", "use crate::{self, keys};"] {
            let found = check_with("lock/guard.rs", &format!("{import}\n"))?;
            assert_eq!(
                found,
                ["src/lock/guard.rs:1: `lock` (primitives) imports `lib` (root)"],
                "{import}"
            );
        }
        Ok(())
    }

    #[test]
    fn an_upward_import_is_reported() -> io::Result<()> {
        let found = check_with(
            "lock/guard.rs",
            "//! Guards.\n\nuse std::time::Duration;\n\nuse crate::client::Client;\n",
        )?;
        assert_eq!(
            found,
            ["src/lock/guard.rs:5: `lock` (primitives) imports `client` (api)"]
        );
        Ok(())
    }

    #[test]
    fn inline_paths_count() -> io::Result<()> {
        let found = check_with(
            "keys.rs",
            "fn f() {\n    let c = crate::client::new(1);\n}\n",
        )?;
        assert_eq!(
            found,
            ["src/keys.rs:2: `keys` (foundation) imports `client` (api)"]
        );
        Ok(())
    }

    #[test]
    fn a_grouped_use_over_several_lines_is_parsed() -> io::Result<()> {
        let found = check_with(
            "error.rs",
            "use crate::{\n    keys,\n    lock::{guard::Guard, Lock},\n    client::Client,\n};\n",
        )?;
        assert_eq!(
            found,
            [
                "src/error.rs:2: `error` (foundation) imports `keys` (foundation), sideways in a non-lateral layer",
                "src/error.rs:3: `error` (foundation) imports `lock` (primitives)",
                "src/error.rs:4: `error` (foundation) imports `client` (api)",
            ]
        );
        Ok(())
    }

    #[test]
    fn comments_and_strings_are_ignored() -> io::Result<()> {
        let found = check_with(
            "error.rs",
            "//! See [`crate::client`].\n/// Like crate::client::Client.\n// use crate::client;\n\
             /* crate::client /* nested crate::lock */ crate::token */\n\
             const S: &str = \"crate::client\";\nconst R: &str = r#\"crate::\"client\"#;\n\
             const C: char = '\"';\nfn f<'a>(x: &'a str) -> &'a str { x } // crate::lock\n",
        )?;
        assert_eq!(found, Vec::<String>::new());
        Ok(())
    }

    #[test]
    fn sideways_is_fine_only_in_a_lateral_layer() -> io::Result<()> {
        // token -> lock is within the lateral `primitives`; error -> keys is not.
        let found = check_with("error.rs", "use crate::keys::key;\n")?;
        assert_eq!(
            found,
            [
                "src/error.rs:1: `error` (foundation) imports `keys` (foundation), sideways in a non-lateral layer"
            ]
        );
        Ok(())
    }

    #[test]
    fn super_in_a_top_level_file_is_the_crate_root() -> io::Result<()> {
        let found = check_with(
            "keys.rs",
            "use super::client::Client;\nmod tests {\n    use super::key;\n    use super::super::lock;\n}\n",
        )?;
        assert_eq!(
            found,
            [
                "src/keys.rs:1: `keys` (foundation) imports `client` (api)",
                "src/keys.rs:4: `keys` (foundation) imports `lock` (primitives)",
            ]
        );
        Ok(())
    }

    #[test]
    fn items_of_the_root_are_imports_of_the_root() -> io::Result<()> {
        let found = check_with("client.rs", "use crate::Client;\npub(crate) fn f() {}\n")?;
        assert_eq!(
            found,
            ["src/client.rs:1: `client` (api) imports `lib` (root)"]
        );
        Ok(())
    }

    #[test]
    fn an_unlisted_module_is_reported_once() -> io::Result<()> {
        let mut files = CLEAN.to_vec();
        files.push(("extra/mod.rs", "use crate::client::Client;\n"));
        files.push(("extra/more.rs", "use crate::lock::Lock;\n"));
        files.push(("client.rs", "use crate::extra::Thing;\n"));
        assert_eq!(
            check(&files)?,
            ["src/extra/mod.rs: module `extra` is in no layer"]
        );
        Ok(())
    }

    #[test]
    fn a_module_in_two_layers_is_reported() -> io::Result<()> {
        let dir = fixture(CLEAN)?;
        let mut layers = LAYERS.to_vec();
        layers.push(Layer {
            name: "again",
            modules: &["keys"],
            lateral: false,
        });
        assert_eq!(
            violations(&dir.path().join("src"), &layers)?,
            ["module `keys` is listed in both layers `foundation` and `again`"]
        );
        Ok(())
    }
}
