//! Stamps the binary with the git commit it was built from, for
//! `dlm --version`: `DLM_GIT_COMMIT` is the short hash of HEAD, or the
//! value of the `DLM_GIT_COMMIT` environment variable when set (a build
//! without `.git`, e.g. in the Dockerfile), else "unknown". Never fails
//! the build: no git, no repository or a git error all give "unknown".

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DLM_GIT_COMMIT");
    let commit = match std::env::var("DLM_GIT_COMMIT") {
        Ok(given) if !given.trim().is_empty() => given.trim().to_string(),
        _ => {
            watch_head();
            git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into())
        }
    };
    println!("cargo:rustc-env=DLM_GIT_COMMIT={commit}");
}

/// Rebuild when HEAD moves: HEAD itself (a checkout), the branch it points
/// to (a commit) and packed-refs. In a worktree HEAD is in its own git
/// dir and the branches in the common one, so ask git for both.
fn watch_head() {
    let (Some(git_dir), Some(common)) = (
        git(&["rev-parse", "--git-dir"]).map(PathBuf::from),
        git(&["rev-parse", "--git-common-dir"]).map(PathBuf::from),
    ) else {
        return;
    };
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    let absolute = |p: PathBuf| match &manifest {
        Some(dir) if p.is_relative() => dir.join(p),
        _ => p,
    };
    let (git_dir, common) = (absolute(git_dir), absolute(common));
    watch(&git_dir.join("HEAD"));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch(&common.join(branch));
    }
    watch(&common.join("packed-refs"));
}

fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// A git command's trimmed stdout, run in this crate's directory; None on
/// any failure.
fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}
