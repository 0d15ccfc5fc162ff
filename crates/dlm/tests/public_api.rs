//! The public API of `dlm`, checked against the listing in `public-api.txt`
//! so that no change to it goes unnoticed (a removed or changed item breaks
//! users; see CHANGELOG.md and semver).
//!
//! The listing is made from rustdoc's JSON output (an unstable rustdoc
//! format, enabled with `RUSTC_BOOTSTRAP=1` for rustdoc alone, through
//! `tests/rustdoc-json.sh`, on the stable toolchain): every
//! public item under the path users name it by, functions with their
//! signatures, struct fields, enum variants, trait impls (auto traits
//! included: losing `Send` is a break; blanket impls left out). After an
//! intended change, bless the new listing:
//!
//! ```text
//! DLM_BLESS=1 cargo test -p dlm --test public_api
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[test]
fn the_public_api_matches_the_checked_in_listing() -> TestResult {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let json = rustdoc_json(manifest_dir)?;
    let krate: Value = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
    let listing = Listing::new(&krate).lines().join("\n") + "\n";
    let file = manifest_dir.join("public-api.txt");
    if std::env::var_os("DLM_BLESS").is_some() {
        std::fs::write(&file, &listing)?;
        return Ok(());
    }
    let expected = std::fs::read_to_string(&file).unwrap_or_default();
    if expected != listing {
        let old: BTreeSet<&str> = expected.lines().collect();
        let new: BTreeSet<&str> = listing.lines().collect();
        let mut diff = String::new();
        for line in old.difference(&new) {
            diff += &format!("- {line}\n");
        }
        for line in new.difference(&old) {
            diff += &format!("+ {line}\n");
        }
        panic!(
            "the public API of dlm changed (- listed in crates/dlm/public-api.txt, + now):\n{diff}\n\
             If the change is intended, record it in CHANGELOG.md and bless the listing:\n    \
             DLM_BLESS=1 cargo test -p dlm --test public_api"
        );
    }
    Ok(())
}

/// Run rustdoc's JSON output on the crate (default features) in the
/// workspace's target dir, and return the JSON file's path.
fn rustdoc_json(manifest_dir: &Path) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => manifest_dir.join("../../target"),
    };
    let mut cmd = Command::new(cargo);
    // What cargo sets for this test process describes this test crate (CARGO_MANIFEST_DIR,
    // CARGO_PKG_NAME, ...). A build script that reads one is rerun when cargo's own value of it
    // changes (ring reads both): seen here, it made every later build in this target dir run ring's
    // build script again and recompile ring and all above it (rustls, redis, dlm, every test binary).
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_for_tests) {
            cmd.env_remove(name);
        }
    }
    let out = cmd
        .current_dir(manifest_dir)
        .env("RUSTDOC", manifest_dir.join("tests/rustdoc-json.sh"))
        .env_remove("RUSTC_BOOTSTRAP")
        .env_remove("RUSTDOCFLAGS")
        .args(["rustdoc", "-q", "-p", "dlm", "--lib", "--target-dir"])
        .arg(&target)
        .args(["--", "-Z", "unstable-options", "--output-format", "json"])
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "cargo rustdoc --output-format json failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(target.join("doc/dlm.json"))
}

/// Whether cargo (or nextest) sets the environment variable `name` for a test process, as it
/// does for a crate's build: its manifest, package, binaries and target, not cargo's settings.
fn set_for_tests(name: &str) -> bool {
    [
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_BIN_",
        "CARGO_CFG_",
        "CARGO_FEATURE_",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
        || [
            "CARGO_CRATE_NAME",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "CARGO_RUSTC_CURRENT_DIR",
            "OUT_DIR",
        ]
        .contains(&name)
}

/// The items of one crate, and the public path of each local item.
struct Listing<'a> {
    index: &'a serde_json::Map<String, Value>,
    paths: &'a serde_json::Map<String, Value>,
    /// Local item id -> the shortest public path it is reachable by.
    public: BTreeMap<String, String>,
    root: String,
}

fn id_of(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

impl<'a> Listing<'a> {
    fn new(krate: &'a Value) -> Self {
        let empty: &'static serde_json::Map<String, Value> = &EMPTY;
        let index = krate["index"].as_object().unwrap_or(empty);
        let paths = krate["paths"].as_object().unwrap_or(empty);
        let root = id_of(&krate["root"]).unwrap_or_default();
        let mut listing = Listing {
            index,
            paths,
            public: BTreeMap::new(),
            root: root.clone(),
        };
        listing.find_paths(&root, "dlm".to_string(), &mut BTreeSet::new());
        listing
    }

    fn item(&self, id: &str) -> Option<&'a Value> {
        self.index.get(id)
    }

    /// Record the public path of every item reachable from module `id`.
    fn find_paths(&mut self, id: &str, path: String, seen: &mut BTreeSet<String>) {
        let better = match self.public.get(id) {
            None => true,
            Some(old) => (path.len(), &path) < (old.len(), old),
        };
        if better {
            self.public.insert(id.to_string(), path.clone());
        }
        if !seen.insert(id.to_string()) {
            return;
        }
        let Some(module) = self.item(id).map(|i| &i["inner"]["module"]) else {
            return;
        };
        for child in module["items"].as_array().into_iter().flatten() {
            let Some(child) = id_of(child) else { continue };
            let Some(item) = self.item(&child) else {
                continue;
            };
            if item["visibility"] != "public" {
                continue;
            }
            if let Some(u) = item["inner"].get("use") {
                if u["is_glob"] == true {
                    continue;
                }
                if let Some(target) = id_of(&u["id"]).filter(|t| self.index.contains_key(t)) {
                    let name = str_of(&u["name"]);
                    self.find_paths(&target, format!("{path}::{name}"), seen);
                }
                continue;
            }
            let name = str_of(&item["name"]);
            self.find_paths(&child, format!("{path}::{name}"), seen);
        }
    }

    /// Every line of the listing, sorted.
    fn lines(&self) -> Vec<String> {
        let mut out = BTreeSet::new();
        for (id, path) in &self.public {
            if let Some(item) = self.item(id) {
                self.describe(item, path, &mut out);
            }
        }
        // Re-exports of other crates' items, and glob re-exports.
        for id in self.public.keys() {
            let Some(module) = self.item(id).map(|i| &i["inner"]["module"]) else {
                continue;
            };
            let path = &self.public[id];
            for child in module["items"].as_array().into_iter().flatten() {
                let Some(item) = id_of(child).and_then(|c| self.item(&c)) else {
                    continue;
                };
                let Some(u) = item["inner"].get("use") else {
                    continue;
                };
                if item["visibility"] != "public" {
                    continue;
                }
                let local = id_of(&u["id"]).is_some_and(|t| self.index.contains_key(&t));
                if u["is_glob"] == true {
                    out.insert(format!("pub use {path}::{}::*", str_of(&u["source"])));
                } else if !local {
                    let target = id_of(&u["id"])
                        .and_then(|t| self.external_path(&t))
                        .unwrap_or_else(|| str_of(&u["source"]).to_string());
                    out.insert(format!("pub use {path}::{} = {target}", str_of(&u["name"])));
                }
            }
        }
        out.into_iter().collect()
    }

    fn external_path(&self, id: &str) -> Option<String> {
        let p = self.paths.get(id)?;
        let parts: Vec<&str> = p["path"].as_array()?.iter().map(str_of).collect();
        Some(parts.join("::"))
    }

    fn describe(&self, item: &Value, path: &str, out: &mut BTreeSet<String>) {
        let Some((kind, inner)) = item["inner"].as_object().and_then(|o| o.iter().next()) else {
            return;
        };
        let attrs = attrs(item);
        match kind.as_str() {
            "module" if self.root != id_of(&item["id"]).unwrap_or_default() => {
                out.insert(format!("pub mod {path}"));
            }
            "struct" => {
                let g = self.generics(&inner["generics"]);
                let shape = match inner["kind"].as_object().and_then(|o| o.keys().next()) {
                    Some(k) if k == "tuple" => "(..)",
                    Some(k) if k == "unit" => ";",
                    _ => "",
                };
                out.insert(format!("{attrs}pub struct {path}{g}{shape}"));
                let fields = match &inner["kind"] {
                    k if k.get("plain").is_some() => k["plain"]["fields"].clone(),
                    k => k["tuple"].clone(),
                };
                for f in fields.as_array().into_iter().flatten() {
                    if let Some(f) = id_of(f).and_then(|f| self.item(&f))
                        && f["visibility"] == "public"
                    {
                        let ty = self.ty(&f["inner"]["struct_field"]);
                        out.insert(format!("pub {path}::{}: {ty}", str_of(&f["name"])));
                    }
                }
                self.impls(&inner["impls"], path, out);
            }
            "enum" => {
                let g = self.generics(&inner["generics"]);
                out.insert(format!("{attrs}pub enum {path}{g}"));
                for v in inner["variants"].as_array().into_iter().flatten() {
                    if let Some(v) = id_of(v).and_then(|v| self.item(&v)) {
                        self.variant(v, path, out);
                    }
                }
                self.impls(&inner["impls"], path, out);
            }
            "union" => {
                out.insert(format!("{attrs}pub union {path}"));
                self.impls(&inner["impls"], path, out);
            }
            "trait" => {
                let g = self.generics(&inner["generics"]);
                let sealed = if inner["is_dyn_compatible"] == false {
                    ""
                } else {
                    " (dyn compatible)"
                };
                out.insert(format!("pub trait {path}{g}{sealed}"));
                for i in inner["items"].as_array().into_iter().flatten() {
                    if let Some(i) = id_of(i).and_then(|i| self.item(&i)) {
                        self.assoc(i, path, out);
                    }
                }
            }
            "function" => {
                out.insert(format!("{attrs}{}", self.function(inner, path)));
            }
            "constant" => {
                out.insert(format!("pub const {path}: {}", self.ty(&inner["type"])));
            }
            "static" => {
                out.insert(format!("pub static {path}: {}", self.ty(&inner["type"])));
            }
            "type_alias" => {
                let g = self.generics(&inner["generics"]);
                out.insert(format!("pub type {path}{g} = {}", self.ty(&inner["type"])));
            }
            "macro" | "proc_macro" => {
                out.insert(format!("pub macro {path}"));
            }
            _ => {}
        }
    }

    fn variant(&self, v: &Value, path: &str, out: &mut BTreeSet<String>) {
        let name = str_of(&v["name"]);
        let kind = &v["inner"]["variant"]["kind"];
        let fields = |list: &Value| -> Vec<String> {
            list.as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| id_of(f).and_then(|f| self.item(&f)))
                .map(|f| {
                    (
                        str_of(&f["name"]).to_string(),
                        self.ty(&f["inner"]["struct_field"]),
                    )
                })
                .map(|(n, t)| {
                    if n.parse::<u32>().is_ok() {
                        t
                    } else {
                        format!("{n}: {t}")
                    }
                })
                .collect()
        };
        let shape = if let Some(s) = kind.get("struct") {
            format!(" {{ {} }}", fields(&s["fields"]).join(", "))
        } else if let Some(t) = kind.get("tuple") {
            format!("({})", fields(t).join(", "))
        } else {
            String::new()
        };
        out.insert(format!("pub {path}::{name}{shape}"));
    }

    fn impls(&self, impls: &Value, path: &str, out: &mut BTreeSet<String>) {
        for i in impls.as_array().into_iter().flatten() {
            let Some(imp) = id_of(i).and_then(|i| self.item(&i)) else {
                continue;
            };
            let imp = &imp["inner"]["impl"];
            if !imp["blanket_impl"].is_null() {
                continue;
            }
            if imp["trait"].is_null() {
                for item in imp["items"].as_array().into_iter().flatten() {
                    if let Some(item) = id_of(item).and_then(|i| self.item(&i))
                        && item["visibility"] == "public"
                    {
                        self.assoc(item, path, out);
                    }
                }
            } else {
                let neg = if imp["is_negative"] == true { "!" } else { "" };
                let g = self.generics(&imp["generics"]);
                let tr = self.path(&imp["trait"]);
                let w = self.where_clause(&imp["generics"]);
                out.insert(format!("impl{g} {neg}{tr} for {}{w}", self.ty(&imp["for"])));
            }
        }
    }

    fn assoc(&self, item: &Value, path: &str, out: &mut BTreeSet<String>) {
        let name = str_of(&item["name"]);
        let Some((kind, inner)) = item["inner"].as_object().and_then(|o| o.iter().next()) else {
            return;
        };
        let full = format!("{path}::{name}");
        match kind.as_str() {
            "function" => {
                out.insert(format!("{}{}", attrs(item), self.function(inner, &full)));
            }
            "assoc_const" => {
                out.insert(format!("pub const {full}: {}", self.ty(&inner["type"])));
            }
            "assoc_type" => {
                out.insert(format!("pub type {full}"));
            }
            _ => {}
        }
    }

    fn function(&self, f: &Value, path: &str) -> String {
        let h = &f["header"];
        let mut s = String::from("pub ");
        for (flag, word) in [
            ("is_const", "const "),
            ("is_async", "async "),
            ("is_unsafe", "unsafe "),
        ] {
            if h[flag] == true {
                s += word;
            }
        }
        let inputs: Vec<String> = f["sig"]["inputs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|arg| {
                let name = str_of(&arg[0]);
                let ty = self.ty(&arg[1]);
                match (name, ty.as_str()) {
                    ("self", "Self") => "self".to_string(),
                    ("self", "&Self") => "&self".to_string(),
                    ("self", "&mut Self") => "&mut self".to_string(),
                    _ => format!("{name}: {ty}"),
                }
            })
            .collect();
        let out = &f["sig"]["output"];
        let ret = if out.is_null() {
            String::new()
        } else {
            format!(" -> {}", self.ty(out))
        };
        format!(
            "{s}fn {path}{}({}){ret}{}",
            self.generics(&f["generics"]),
            inputs.join(", "),
            self.where_clause(&f["generics"])
        )
    }

    fn generics(&self, g: &Value) -> String {
        let params: Vec<String> = g["params"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let name = str_of(&p["name"]);
                let kind = &p["kind"];
                if let Some(t) = kind.get("type") {
                    if t["is_synthetic"] == true {
                        return None;
                    }
                    let b = self.bounds(&t["bounds"]);
                    Some(if b.is_empty() {
                        name.to_string()
                    } else {
                        format!("{name}: {b}")
                    })
                } else if let Some(c) = kind.get("const") {
                    Some(format!("const {name}: {}", self.ty(&c["type"])))
                } else {
                    Some(name.to_string())
                }
            })
            .collect();
        if params.is_empty() {
            String::new()
        } else {
            format!("<{}>", params.join(", "))
        }
    }

    fn where_clause(&self, g: &Value) -> String {
        let preds: Vec<String> = g["where_predicates"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                if let Some(b) = p.get("bound_predicate") {
                    format!("{}: {}", self.ty(&b["type"]), self.bounds(&b["bounds"]))
                } else {
                    compact(p)
                }
            })
            .collect();
        if preds.is_empty() {
            String::new()
        } else {
            format!(" where {}", preds.join(", "))
        }
    }

    fn bounds(&self, bounds: &Value) -> String {
        bounds
            .as_array()
            .into_iter()
            .flatten()
            .map(|b| {
                if let Some(t) = b.get("trait_bound") {
                    let m = if t["modifier"] == "maybe" { "?" } else { "" };
                    format!("{m}{}", self.path(&t["trait"]))
                } else if let Some(o) = b.get("outlives") {
                    str_of(o).to_string()
                } else {
                    compact(b)
                }
            })
            .collect::<Vec<_>>()
            .join(" + ")
    }

    /// A path (type or trait) with its generic arguments, named by its
    /// public path when it is a local item.
    fn path(&self, p: &Value) -> String {
        let id = id_of(&p["id"]).unwrap_or_default();
        let name = self
            .public
            .get(&id)
            .cloned()
            .or_else(|| {
                self.paths
                    .get(&id)
                    .filter(|x| x["crate_id"] != 0)
                    .and_then(|_| self.external_path(&id))
            })
            .unwrap_or_else(|| str_of(&p["path"]).to_string());
        format!("{name}{}", self.args(&p["args"]))
    }

    fn args(&self, a: &Value) -> String {
        if a.is_null() {
            return String::new();
        }
        if let Some(ab) = a.get("angle_bracketed") {
            let mut parts: Vec<String> = ab["args"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|arg| {
                    if let Some(t) = arg.get("type") {
                        self.ty(t)
                    } else if let Some(l) = arg.get("lifetime") {
                        str_of(l).to_string()
                    } else {
                        compact(arg)
                    }
                })
                .collect();
            for c in ab["constraints"].as_array().into_iter().flatten() {
                let name = str_of(&c["name"]);
                let binding = &c["binding"];
                if let Some(t) = binding.get("equality").and_then(|e| e.get("type")) {
                    parts.push(format!("{name} = {}", self.ty(t)));
                } else if let Some(b) = binding.get("constraint") {
                    parts.push(format!("{name}: {}", self.bounds(b)));
                } else {
                    parts.push(compact(c));
                }
            }
            if parts.is_empty() {
                String::new()
            } else {
                format!("<{}>", parts.join(", "))
            }
        } else if let Some(p) = a.get("parenthesized") {
            let inputs: Vec<String> = p["inputs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| self.ty(t))
                .collect();
            let out = if p["output"].is_null() {
                String::new()
            } else {
                format!(" -> {}", self.ty(&p["output"]))
            };
            format!("({}){out}", inputs.join(", "))
        } else {
            compact(a)
        }
    }

    fn ty(&self, t: &Value) -> String {
        let Some((kind, v)) = t.as_object().and_then(|o| o.iter().next()) else {
            return compact(t);
        };
        match kind.as_str() {
            "resolved_path" => self.path(v),
            "generic" | "primitive" => str_of(v).to_string(),
            "tuple" => {
                let items: Vec<String> = v
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| self.ty(t))
                    .collect();
                format!("({})", items.join(", "))
            }
            "slice" => format!("[{}]", self.ty(v)),
            "array" => format!("[{}; {}]", self.ty(&v["type"]), str_of(&v["len"])),
            "borrowed_ref" => {
                let l = v["lifetime"]
                    .as_str()
                    .map(|l| format!("{l} "))
                    .unwrap_or_default();
                let m = if v["is_mutable"] == true { "mut " } else { "" };
                format!("&{l}{m}{}", self.ty(&v["type"]))
            }
            "raw_pointer" => {
                let m = if v["is_mutable"] == true {
                    "mut"
                } else {
                    "const"
                };
                format!("*{m} {}", self.ty(&v["type"]))
            }
            "impl_trait" => format!("impl {}", self.bounds(v)),
            "dyn_trait" => {
                let mut parts: Vec<String> = v["traits"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| self.path(&p["trait"]))
                    .collect();
                if let Some(l) = v["lifetime"].as_str() {
                    parts.push(l.to_string());
                }
                format!("dyn {}", parts.join(" + "))
            }
            "qualified_path" => {
                let tr = if v["trait"].is_null() {
                    String::new()
                } else {
                    format!(" as {}", self.path(&v["trait"]))
                };
                format!("<{}{tr}>::{}", self.ty(&v["self_type"]), str_of(&v["name"]))
            }
            "function_pointer" => {
                let inputs: Vec<String> = v["sig"]["inputs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| self.ty(&a[1]))
                    .collect();
                let out = if v["sig"]["output"].is_null() {
                    String::new()
                } else {
                    format!(" -> {}", self.ty(&v["sig"]["output"]))
                };
                format!("fn({}){out}", inputs.join(", "))
            }
            "infer" => "_".to_string(),
            _ => compact(t),
        }
    }
}

static EMPTY: std::sync::LazyLock<serde_json::Map<String, Value>> =
    std::sync::LazyLock::new(serde_json::Map::new);

/// The attributes that matter to users of an item (`#[non_exhaustive]`,
/// `#[must_use]`, deprecation), as a prefix.
fn attrs(item: &Value) -> String {
    let mut s = String::new();
    for a in item["attrs"].as_array().into_iter().flatten() {
        let text = match a {
            Value::String(t) => t.clone(),
            other => compact(other),
        };
        if text.contains("non_exhaustive") {
            s += "#[non_exhaustive] ";
        }
    }
    if !item["deprecation"].is_null() {
        s += "#[deprecated] ";
    }
    s
}

fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}
