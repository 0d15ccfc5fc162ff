//! A sharded queue through the CLI (issue 35; docs/sharded-queue.md,
//! section 9), against a real redis-server: `queue config --shards K
//! [--drain]`, `queue push --shards K | --shard-key KEY`, `queue stats
//! --shards`, `--shard-key` on the commands that name a task, and every
//! exit code of the contract (bad input writes nothing).

mod common;

use common::*;

fn json(r: &Run) -> serde_json::Value {
    serde_json::from_str(r.stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON object: {:?}: {e}", r.stdout))
}

fn config_json(server: &RedisServer, queue: &str) -> serde_json::Value {
    let r = run_on(server, &["--json", "queue", "config", queue]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    json(&r)
}

fn sharded_stats(server: &RedisServer, queue: &str) -> serde_json::Value {
    let r = run_on(server, &["--json", "queue", "stats", queue, "--shards"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    json(&r)
}

/// `queue push Q ids... ARGS` in JSON, exit 0.
fn push(server: &RedisServer, queue: &str, ids: &[&str], args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = vec!["--json", "queue", "push", queue];
    all.extend_from_slice(ids);
    all.extend_from_slice(args);
    let r = run_on(server, &all);
    assert_eq!(r.code(), 0, "push {ids:?} {args:?}: {}", r.stderr);
    json_lines(&r)
}

#[test]
fn config_raises_refuses_a_lossy_lowering_and_drains() -> TestResult {
    let server = server();

    // Create: the settings line says how it is sharded.
    let r = run_on(&server, &["queue", "config", "cq", "--shards", "4"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert!(
        r.stdout
            .trim()
            .ends_with("events none, shards 4 (layout 1)"),
        "{}",
        r.stdout
    );
    let v = config_json(&server, "cq");
    assert_eq!(
        (v["shards"].as_u64(), v["layout"].as_u64()),
        (Some(4), Some(1))
    );
    assert!(v["draining"].is_null(), "{v}");
    assert!(v.get("draining_tasks").is_none(), "{v}");

    // Tasks in every shard (ids spread by their hash).
    let ids: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let pushed = push(&server, "cq", &refs, &[]);
    let mut per = [0u64; 4];
    for p in &pushed {
        per[p["shard"].as_u64().ok_or("shard")? as usize] += 1;
    }
    assert!(per.iter().all(|n| *n > 0), "{per:?}");
    let in_removed = per[2] + per[3];

    // Lowering with tasks in the removed shards: exit 1, names them, no change.
    let r = run_on(&server, &["queue", "config", "cq", "--shards", "2"]);
    assert_eq!(r.code(), 1, "{} {}", r.stdout, r.stderr);
    assert!(r.stderr.contains("would lose tasks"), "{}", r.stderr);
    assert!(
        r.stderr.contains("shard 2") && r.stderr.contains("shard 3"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("--drain"), "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    let v = config_json(&server, "cq");
    assert_eq!(v["shards"], 4, "{v}");
    assert!(v["draining"].is_null(), "{v}");
    assert_eq!(queue_stats(&server, "cq")["waiting"], 40);

    // --drain: exit 0, says how many tasks are left where.
    let r = run_on(
        &server,
        &["queue", "config", "cq", "--shards", "2", "--drain"],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(&format!(
            "shards 2 (layout 4, draining: {in_removed} tasks left in shards 2..3)"
        )),
        "{}",
        r.stdout
    );
    let v = config_json(&server, "cq");
    assert_eq!(
        (
            v["shards"].as_u64(),
            v["draining"].as_u64(),
            v["draining_tasks"].as_u64()
        ),
        (Some(2), Some(4), Some(in_removed)),
        "{v}"
    );
    // New pushes go to the kept shards only; readers still see every task.
    for p in push(&server, "cq", &["n1", "n2", "n3", "n4", "n5", "n6"], &[]) {
        assert!(p["shard"].as_u64().is_some_and(|s| s < 2), "{p}");
    }
    let s = sharded_stats(&server, "cq");
    assert_eq!(
        (s["k"].as_u64(), s["draining"].as_u64()),
        (Some(2), Some(4))
    );
    assert_eq!(s["shards"].as_array().map(Vec::len), Some(4));
    assert_eq!(s["shards"][3]["draining"], true);
    assert_eq!(s["waiting"], 46);

    // Running it again while tasks are left: still refused (exit 1).
    let r = run_on(&server, &["queue", "config", "cq", "--shards", "2"]);
    assert_eq!(r.code(), 1, "{}", r.stderr);

    // Emptied: the same command finishes the drain.
    let r = run_on(&server, &["queue", "pop", "cq", "--count", "100"]);
    assert_eq!(json_lines(&r).len(), 46);
    let r = run_on(
        &server,
        &["--json", "queue", "config", "cq", "--shards", "2"],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let v = json(&r);
    assert_eq!(v["shards"], 2, "{v}");
    assert!(v["draining"].is_null(), "{v}");
    assert_eq!(
        sharded_stats(&server, "cq")["shards"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    // Out of range: exit 2, nothing written.
    for k in ["0", "65", "70000"] {
        let r = run_on(&server, &["queue", "config", "cq", "--shards", k]);
        assert_eq!(r.code(), 2, "--shards {k}: {}", r.stderr);
    }
    let r = run_on(&server, &["queue", "config", "bad}name", "--shards", "2"]);
    assert_eq!(r.code(), 2, "{}", r.stderr);
    // --drain needs --shards.
    let r = run_on(&server, &["queue", "config", "cq", "--drain"]);
    assert_eq!(r.code(), 2, "{}", r.stderr);
    assert_eq!(config_json(&server, "cq")["shards"], 2);

    // A queue never sharded: the line and JSON as before; with --shards 1,
    // shards 1 and layout 0.
    let r = run_on(&server, &["queue", "config", "plain"]);
    assert_eq!(
        r.stdout.trim(),
        "plain: group concurrency none, rate none, keep completed none, keep results 1h (at most 67108864 bytes), events none"
    );
    let v = config_json(&server, "plain");
    assert!(
        v.get("shards").is_none() && v.get("layout").is_none(),
        "{v}"
    );
    let r = run_on(
        &server,
        &["--json", "queue", "config", "plain", "--shards", "1"],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let v = json(&r);
    assert_eq!(
        (v["shards"].as_u64(), v["layout"].as_u64()),
        (Some(1), Some(0))
    );
    Ok(())
}

#[test]
fn push_makes_the_shards_at_first_push_only() -> TestResult {
    let server = server();

    let first = push(&server, "pq", &["a", "b", "c", "d"], &["--shards", "3"]);
    assert!(
        first
            .iter()
            .all(|p| p["shard"].as_u64().is_some_and(|s| s < 3)),
        "{first:?}"
    );
    assert_eq!(config_json(&server, "pq")["shards"], 3);
    // The same K again: fine.
    push(&server, "pq", &["e"], &["--shards", "3"]);
    // Another K: exit 1, nothing written.
    let r = run_on(&server, &["queue", "push", "pq", "f", "--shards", "4"]);
    assert_eq!(r.code(), 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("'pq' has 3 shards; change it with dlm queue config"),
        "{}",
        r.stderr
    );
    assert_eq!(queue_stats(&server, "pq")["waiting"], 5);

    // A queue with tasks, never sharded: exit 1 too.
    push(&server, "plain", &["x"], &[]);
    let r = run_on(&server, &["queue", "push", "plain", "y", "--shards", "2"]);
    assert_eq!(r.code(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("'plain' has 1 shard;"), "{}", r.stderr);
    assert_eq!(queue_stats(&server, "plain")["waiting"], 1);
    // ... and K = 1 is what it has.
    let p = push(&server, "plain", &["z"], &["--shards", "1"]);
    assert_eq!(p[0]["shard"], 0);

    // K out of range: exit 2, nothing written.
    for k in ["0", "65"] {
        let r = run_on(&server, &["queue", "push", "fresh", "a", "--shards", k]);
        assert_eq!(r.code(), 2, "--shards {k}: {}", r.stderr);
    }
    assert_eq!(queue_stats(&server, "fresh")["waiting"], 0);
    assert!(config_json(&server, "fresh").get("layout").is_none());
    Ok(())
}

#[test]
fn shard_keys_place_tasks_and_bad_combinations_exit_2() -> TestResult {
    let server = server();
    let r = run_on(&server, &["queue", "config", "kq", "--shards", "4"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);

    // One key, one shard, whatever the ids.
    let ids: Vec<String> = (0..12).map(|i| format!("order:{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let pushed = push(&server, "kq", &refs, &["--shard-key", "customer:7"]);
    let home = pushed[0]["shard"].as_u64().ok_or("shard")?;
    assert!(pushed.iter().all(|p| p["shard"] == home), "{pushed:?}");
    let s = sharded_stats(&server, "kq");
    assert_eq!(s["shards"][home as usize]["waiting"], 12, "{s}");
    assert_eq!(s["waiting"], 12);

    // A group is its tasks' shard key: the same key is fine, another exits 2.
    let p = push(
        &server,
        "kq",
        &["g1"],
        &["--group", "customer:7", "--shard-key", "customer:7"],
    );
    assert_eq!(p[0]["shard"], home);
    let r = run_on(
        &server,
        &[
            "queue",
            "push",
            "kq",
            "g2",
            "--group",
            "customer:7",
            "--shard-key",
            "other",
        ],
    );
    assert_eq!(r.code(), 2, "{}", r.stderr);
    assert!(r.stderr.contains("shard key"), "{}", r.stderr);

    // A workflow under one key: its dependents follow it (shard unknown to
    // the push: null in JSON).
    let p = push(
        &server,
        "kq",
        &["step2"],
        &["--shard-key", "customer:7", "--after", "order:0"],
    );
    assert_eq!(p[0]["status"], "blocked");
    assert!(p[0]["shard"].is_null(), "{p:?}");

    // Keys that land in another shard than the dependencies: exit 2.
    let mut other_key = None;
    let mut other_dep = None;
    for i in 0..64 {
        let key = format!("k{i}");
        let p = push(
            &server,
            "kq",
            &[&format!("probe{i}")],
            &["--shard-key", &key],
        );
        if p[0]["shard"] != home {
            other_key = Some(key);
            other_dep = Some(format!("probe{i}"));
            break;
        }
    }
    let (other_key, other_dep) = (other_key.ok_or("no other shard")?, other_dep.ok_or("dep")?);
    let before = queue_stats(&server, "kq");
    let r = run_on(
        &server,
        &[
            "queue",
            "push",
            "kq",
            "bad1",
            "--shard-key",
            &other_key,
            "--after",
            "order:1",
        ],
    );
    assert_eq!(r.code(), 2, "{}", r.stderr);
    assert!(r.stderr.contains("shard"), "{}", r.stderr);
    // Dependencies in two shards: exit 2, each named with its shard.
    let deps = format!("order:2,{other_dep}");
    let r = run_on(&server, &["queue", "push", "kq", "bad2", "--after", &deps]);
    assert_eq!(r.code(), 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("order:2 (shard") && r.stderr.contains(&format!("{other_dep} (shard")),
        "{}",
        r.stderr
    );
    assert_eq!(queue_stats(&server, "kq"), before, "nothing written");

    // On a queue not sharded a shard key changes nothing.
    let p = push(&server, "flat", &["a"], &["--shard-key", "whatever"]);
    assert_eq!(p[0]["shard"], 0);
    Ok(())
}

#[test]
fn stats_per_shard_add_up_to_the_total() -> TestResult {
    let server = server();
    let ids: Vec<String> = (0..30).map(|i| format!("s{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    push(&server, "st", &refs, &["--shards", "3"]);
    push(&server, "st", &["later"], &["--delay", "1h"]);
    let r = run_on(&server, &["queue", "pause", "st"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);

    // Text: one line per shard, then today's total line.
    let r = run_on(&server, &["queue", "stats", "st", "--shards"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", r.stdout);
    for (i, l) in lines[..3].iter().enumerate() {
        assert!(l.starts_with(&format!("  shard {i} (tag st")), "{l}");
        assert!(
            l.contains(", slot ") && l.contains("(paused): waiting "),
            "{l}"
        );
    }
    assert!(
        lines[3].starts_with("st (paused): waiting 30, delayed 1,"),
        "{}",
        lines[3]
    );

    // JSON: today's fields plus k, layout, draining and the shards.
    let s = sharded_stats(&server, "st");
    assert_eq!((s["k"].as_u64(), s["layout"].as_u64()), (Some(3), Some(1)));
    let shards = s["shards"].as_array().ok_or("shards")?;
    assert_eq!(shards.len(), 3);
    let sum = |f: &str| shards.iter().filter_map(|x| x[f].as_u64()).sum::<u64>();
    assert_eq!((sum("waiting"), sum("delayed")), (30, 1));
    assert_eq!(s["waiting"], 30);
    assert_eq!(s["in_flight"], s["inflight"]);
    for (i, x) in shards.iter().enumerate() {
        assert_eq!(x["shard"], i);
        assert!(
            x["tag"].as_str().is_some_and(|t| t.starts_with("st")),
            "{x}"
        );
        assert!(x["slot"].as_u64().is_some_and(|n| n < 16384), "{x}");
        assert_eq!(
            (&x["paused"], &x["draining"]),
            (&true.into(), &false.into())
        );
    }
    let tags: std::collections::BTreeSet<&str> =
        shards.iter().filter_map(|x| x["tag"].as_str()).collect();
    assert_eq!(tags.len(), 3, "distinct tags: {tags:?}");

    // Without --shards: exactly as before.
    let plain = queue_stats(&server, "st");
    assert!(
        plain.get("shards").is_none() && plain.get("k").is_none(),
        "{plain}"
    );
    let r = run_on(&server, &["queue", "stats", "st"]);
    assert_eq!(r.stdout.lines().count(), 1, "{}", r.stdout);

    // A queue not sharded: one shard line, shard 0, its own tag.
    push(&server, "one", &["a"], &[]);
    let s = sharded_stats(&server, "one");
    assert_eq!((s["k"].as_u64(), s["layout"].as_u64()), (Some(1), Some(0)));
    assert_eq!(s["shards"][0]["tag"], "one");
    assert_eq!(s["shards"][0]["waiting"], 1);
    Ok(())
}

#[test]
fn commands_by_id_accept_a_shard_key() -> TestResult {
    let server = server();
    push(
        &server,
        "iq",
        &["a", "b"],
        &["--shards", "4", "--shard-key", "acct:1"],
    );
    let key = ["--shard-key", "acct:1"];
    let with = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend_from_slice(&key);
        run_on(&server, &all)
    };

    let r = with(&["--json", "queue", "task", "iq", "a"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert_eq!(json(&r)["state"], "waiting");
    let r = with(&["queue", "result", "iq", "a"]);
    assert_eq!(r.code(), 1, "no result yet: {}", r.stderr);

    let peek = run_on(&server, &["queue", "peek", "iq", "--count", "10"]);
    let entries = json_lines(&peek);
    let b = entries.iter().find(|e| e["id"] == "b").ok_or("b")?;
    let score = b["score"].as_u64().ok_or("score")?.to_string();
    let r = with(&["queue", "remove", "iq", "b", "--score", &score]);
    assert_eq!(r.code(), 0, "{}", r.stderr);

    let r = with(&["queue", "retry", "iq", "a"]);
    assert_eq!((r.code(), r.stdout.trim()), (0, "0"), "{}", r.stderr);
    assert_eq!(queue_stats(&server, "iq")["waiting"], 1);
    Ok(())
}

#[test]
fn a_sharded_queue_spreads_over_a_clusters_masters() -> TestResult {
    let cluster = dlm_testkit::Cluster::start()?;
    let seed = cluster.seed_url();
    let on = |args: &[&str]| {
        let mut all = vec!["--cluster", "--redis", seed.as_str()];
        all.extend_from_slice(args);
        run(&all)
    };
    let r = on(&["queue", "config", "hot", "--shards", "6"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let ids: Vec<String> = (0..60).map(|i| format!("h{i}")).collect();
    let mut args = vec!["--json", "queue", "push", "hot"];
    args.extend(ids.iter().map(String::as_str));
    let r = on(&args);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert_eq!(json_lines(&r).len(), 60);

    let r = on(&["--json", "queue", "stats", "hot", "--shards"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let s = json(&r);
    assert_eq!(s["waiting"], 60, "{s}");
    let shards = s["shards"].as_array().ok_or("shards")?;
    assert_eq!(shards.len(), 6);
    // Each shard on the master of its slot; together on every master.
    let mut masters = std::collections::BTreeSet::new();
    for x in shards {
        let slot = u16::try_from(x["slot"].as_u64().ok_or("slot")?)?;
        let tag = x["tag"].as_str().ok_or("tag")?;
        assert_eq!(dlm_testkit::key_slot(&format!("{{{tag}}}")), slot, "{x}");
        masters.insert(cluster.master_for_slot(slot).ok_or("no master")?.port());
    }
    assert_eq!(masters.len(), 3, "6 shards over 3 masters: {masters:?}");

    // Lowering without --drain: exit 1 on a cluster too.
    let r = on(&["queue", "config", "hot", "--shards", "3"]);
    assert_eq!(r.code(), 1, "{}", r.stderr);
    let r = on(&["queue", "pop", "hot", "--count", "100"]);
    assert_eq!(json_lines(&r).len(), 60);
    let r = on(&["queue", "config", "hot", "--shards", "3"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    Ok(())
}
