//! The library's layers point one way (see ARCHITECTURE.md): a module never
//! names one above it, and primitives never name each other. This test reads
//! every `crate::` path under `src/` and fails on any that points up or sideways.

use std::path::Path;

use dlm_testkit::layers::{Layer, file_cycles, violations};

/// The library's layers, from the bottom up.
const LAYERS: &[Layer<'static>] = &[
    Layer {
        name: "errors",
        modules: &["error"],
        lateral: false,
    },
    Layer {
        name: "foundation",
        // `seeded`: the test-only seeded defects (feature `seeded-defects`).
        modules: &["token", "keys", "metrics", "seeded"],
        lateral: false,
    },
    Layer {
        name: "connection seam",
        modules: &["backend"],
        lateral: false,
    },
    Layer {
        name: "shared services",
        modules: &["services"],
        lateral: false,
    },
    Layer {
        name: "primitives",
        modules: &[
            "lock",
            "queue",
            "consistency",
            "fenced",
            "semaphore",
            "fair",
            "rwlock",
            "election",
            "ratelimit",
            "ids",
        ],
        lateral: false,
    },
    Layer {
        name: "client",
        modules: &["client"],
        lateral: false,
    },
    Layer {
        name: "crate root",
        // `guide`: documentation only, it imports nothing.
        modules: &["lib", "guide"],
        lateral: false,
    },
];

#[test]
fn library_modules_import_only_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src, LAYERS).expect("reading the library's sources");
    assert!(
        found.is_empty(),
        "imports that point up or sideways (see ARCHITECTURE.md):\n{}",
        found.join("\n")
    );
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
