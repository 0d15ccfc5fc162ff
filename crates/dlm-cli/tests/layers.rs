//! The CLI's modules import only downwards: no module imports one of a
//! higher layer, and commands do not import each other (no import cycles).

use std::path::Path;

use dlm_testkit::layers::{Layer, file_cycles, violations};

/// The CLI's layers, from the bottom up.
const LAYERS: &[Layer<'static>] = &[
    Layer {
        name: "error",
        modules: &["error"],
        lateral: false,
    },
    Layer {
        name: "foundation",
        modules: &[
            "output",
            "stats",
            "rng",
            "signals",
            "bench_common",
            "shard_view",
        ],
        lateral: false,
    },
    Layer {
        name: "global",
        modules: &["global", "supervise", "held"],
        lateral: false,
    },
    Layer {
        name: "runner",
        modules: &["run_cmd"],
        lateral: false,
    },
    // What a command shares with others below the commands (the sharded
    // queue's bench runs and figures, used by `bench queue --shards`).
    Layer {
        name: "command support",
        modules: &["bench_shards"],
        lateral: false,
    },
    Layer {
        name: "commands",
        modules: &[
            "lock_cmd",
            "rwlock_cmd",
            "elect_cmd",
            "queue_cmd",
            "work_cmd",
            "bench",
            "bench_queue",
            "bench_ids",
            "id_cmd",
            "dispatch",
            "demo",
            "seckill",
            "check",
            "serve",
            "semaphore_cmd",
            "generate_cmd",
            "soak",
        ],
        lateral: false,
    },
    Layer {
        name: "cli",
        modules: &["cli"],
        lateral: false,
    },
    Layer {
        name: "main",
        modules: &["main"],
        lateral: false,
    },
];

#[test]
fn modules_import_only_downwards() -> std::io::Result<()> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src, LAYERS)?;
    assert!(
        found.is_empty(),
        "{} layer violation(s) in crates/dlm-cli:\n{}",
        found.len(),
        found.join("\n")
    );
    Ok(())
}

/// No two files import each other, inside a module as across modules (a
/// module's `mod.rs` and its own children excepted: see
/// `dlm_testkit::layers::file_cycles`).
#[test]
fn no_two_files_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = file_cycles(&src).expect("reading the sources");
    assert!(
        found.is_empty(),
        "files that import each other (move the shared piece where it belongs):\n{}",
        found.join("\n")
    );
}
