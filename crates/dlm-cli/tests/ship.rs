//! What ships with the binary: shell completions, the man page, `--version`.
//! None of these needs a Redis server.

mod common;

use common::run;

#[test]
fn completions_cover_each_shell_and_the_commands() {
    for shell in ["bash", "zsh", "fish"] {
        let r = run(&["completions", shell]);
        assert_eq!(r.code(), 0, "{shell}: {}", r.stderr);
        assert!(!r.stdout.trim().is_empty(), "{shell}: empty script");
        assert!(
            r.stdout.contains("queue"),
            "{shell}: no `queue` in the script"
        );
    }
}

#[test]
fn completions_reject_an_unknown_shell() {
    let r = run(&["completions", "tcsh"]);
    assert_eq!(r.code(), 2, "{}", r.stderr);
}

#[test]
fn bash_accepts_the_bash_completion_script() -> common::TestResult {
    let r = run(&["completions", "bash"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let dir = common::tempdir()?;
    let script = common::path_in(&dir, "dlm.bash");
    std::fs::write(&script, &r.stdout)?;
    match std::process::Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "bash -n rejects the script: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("bash is not installed: syntax check skipped");
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

#[test]
fn man_page_is_roff_with_a_title_line() {
    let r = run(&["man"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    // clap_mangen opens with two string definitions (`.ie`/`.el`), then `.TH`:
    // the first line that is not one of those must be the title.
    let first = r
        .stdout
        .lines()
        .find(|l| !l.starts_with(".ie ") && !l.starts_with(".el "));
    assert!(
        first.is_some_and(|l| l.starts_with(".TH dlm 1")),
        "no .TH title first: {:?}",
        r.stdout.lines().take(4).collect::<Vec<_>>()
    );
    assert!(
        r.stdout.contains("queue"),
        "the man page does not list `queue`"
    );
}

#[test]
fn version_names_the_release_and_the_commit() {
    let r = run(&["--version"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let line = r.stdout.trim();
    assert!(line.starts_with("dlm 0.1.0 ("), "{line}");
    let commit = line
        .strip_prefix("dlm 0.1.0 (")
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_default();
    let is_hash = commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit());
    assert!(
        is_hash || commit == "unknown" || std::env::var_os("DLM_GIT_COMMIT").is_some(),
        "not a commit: {line}"
    );
}

/// The Dockerfile passes scripts/lint-dockerfile.sh (hadolint when
/// installed; always: multi-stage, non-root final stage, `ENTRYPOINT
/// ["dlm"]`), with no Docker engine needed.
#[test]
fn dockerfile_passes_its_lint() -> common::TestResult {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::process::Command::new("bash")
        .arg(root.join("scripts/lint-dockerfile.sh"))
        .output()?;
    assert!(
        out.status.success(),
        "scripts/lint-dockerfile.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
