//! `dlm demo seckill`: every safe strategy is exact, the exit status tells, bad sizes are refused.
use std::process::Command;

fn seckill(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dlm"))
        .env_remove("DLM_REDIS_URL")
        .args(["--json", "demo", "seckill"])
        .args(args)
        .output()
        .expect("run dlm");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn rows(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

#[test]
fn every_safe_strategy_sells_exactly_the_stock() {
    for (stock, buyers) in [(10, 300), (0, 50), (40, 20)] {
        let (code, out, err) = seckill(&[
            "--stock",
            &stock.to_string(),
            "--buyers",
            &buyers.to_string(),
            "--concurrency",
            "32",
        ]);
        assert_eq!(code, 0, "stock {stock} buyers {buyers}: {err}");
        let rows = rows(&out);
        assert_eq!(rows.len(), 6, "{out}");
        for r in rows.iter().filter(|r| r["strategy"] != "naive") {
            assert_eq!(r["sold"], stock.min(buyers), "{r}");
            assert_eq!(r["oversold"], 0, "{r}");
            assert_eq!(r["rejected"], buyers - stock.min(buyers), "{r}");
            assert_eq!(r["decided_once"], true, "{r}");
            assert!(r["stock_left"].as_i64().is_some_and(|n| n >= 0), "{r}");
            assert!(r["p99_us"].is_u64() || buyers == 0, "{r}");
        }
    }
}

#[test]
fn a_forced_oversell_makes_the_demo_fail() {
    let (code, out, err) = seckill(&[
        "--strategy",
        "lock",
        "--break-lock",
        "--stock",
        "5",
        "--buyers",
        "200",
        "--concurrency",
        "64",
    ]);
    assert_eq!(code, 1, "{out} {err}");
    assert!(err.contains("not exact"), "{err}");
    let rows = rows(&out);
    assert_eq!(rows[0]["ok"], false);
}

#[test]
fn absurd_sizes_are_usage_errors() {
    for args in [
        vec!["--stock", "-1"],
        vec!["--buyers", "0"],
        vec!["--concurrency", "0"],
        vec!["--buyers", "99999999999"],
        vec!["--strategy", "teleport"],
    ] {
        let (code, _, err) = seckill(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
