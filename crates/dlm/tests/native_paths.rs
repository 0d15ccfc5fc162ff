//! The native paths of a lock beside their scripts (issue 34): on Valkey 9 a
//! release is `DELIFEQ` (with the waiters marker deleted after it and the
//! wake-up published by whoever deleted it), an extend and the watchdog's
//! renewal `SET ... IFEQ ... GET`. Each scenario runs with native commands on
//! and off (`ClientBuilder::native_commands(false)`: the scripts) on the same
//! server binary; the outcomes must be the same, and `INFO commandstats`
//! shows which path ran. Also: the server is learned (`server_info`), an ACL
//! user without `+delifeq` falls back to the script with the lock still
//! released, and a Redis without the commands never gets them.
//!
//! The Valkey binary comes from `DLM_VALKEY_SERVER`, else from
//! `target/servers` (`scripts/servers.sh` installs it there). Without one the
//! tests say so and pass, except under `CI`, where they fail.
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use dlm::{Capability, Client, Product};
use dlm_testkit::RedisServer;

/// The Valkey 9 server binary, if installed.
fn valkey_binary() -> Option<String> {
    if let Ok(path) = std::env::var("DLM_VALKEY_SERVER") {
        return Some(path);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/servers");
    find(&root, "valkey-server", 6).map(|p| p.to_string_lossy().into_owned())
}

fn find(dir: &Path, name: &str, depth: u32) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.file_name().is_some_and(|n| n == name) && path.is_file() {
            return Some(path);
        }
        if depth > 0
            && path.is_dir()
            && let Some(found) = find(&path, name, depth - 1)
        {
            return Some(found);
        }
    }
    None
}

/// A throwaway Valkey 9, or `None` (with a note) where none is installed.
fn valkey(builder: dlm_testkit::ServerBuilder) -> Option<RedisServer> {
    match valkey_binary() {
        Some(binary) => Some(builder.binary(binary).start().expect("start valkey-server")),
        None if std::env::var_os("CI").is_some() => {
            panic!("no valkey-server: run scripts/servers.sh or set DLM_VALKEY_SERVER")
        }
        None => {
            eprintln!(
                "skipped: no valkey-server (run scripts/servers.sh or set DLM_VALKEY_SERVER)"
            );
            None
        }
    }
}

async fn connect(url: &str, native: bool) -> Client {
    Client::builder()
        .timeout(Duration::from_secs(2))
        .native_commands(native)
        .connect(url)
        .await
        .expect("connect")
}

/// Calls of each command the paths use, from `INFO commandstats`.
fn calls(s: &RedisServer) -> [u64; 3] {
    let stats = s.command(&["INFO", "commandstats"]).expect("INFO");
    [
        command_calls(&stats, "delifeq"),
        command_calls(&stats, "set"),
        evalsha_calls(&stats),
    ]
}

/// Wait until the client has learned its server (in the background after
/// its first native-capable call; `server_info` learns it at once).
async fn learned(c: &Client) -> Vec<Capability> {
    c.server_info().await.expect("server_info")[0].native()
}

/// Wait until a busy acquisition of `name` waits for the release message:
/// its waiters marker exists (set in the call that found the lock busy,
/// after it subscribed).
async fn waiting(s: &RedisServer, c: &Client, name: &str) -> TestResult {
    let marker = format!("{}:waiters", c.lock(name).key()?);
    for _ in 0..500 {
        if s.command(&["EXISTS", &marker])?.contains('1') {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(format!("nobody waits on {name:?} after 5 s").into())
}

/// One scenario: outcomes of release, extend and release of a lost lock,
/// release of a lock taken by another, as text.
async fn scenario(c: &Client, other: &Client) -> Vec<String> {
    let opts = ttl(5_000);
    let mut out = Vec::new();
    let g = c.lock("a").acquire(&opts).await.expect("acquire a");
    out.push(format!(
        "extend: {:?}",
        g.extend(Duration::from_secs(8)).await
    ));
    out.push(format!(
        "remaining>5s: {}",
        g.remaining() > Duration::from_secs(5)
    ));
    out.push(format!(
        "release: {:?}",
        g.release().await.map(|_| "released")
    ));
    // A lock that expired: extend and release find it gone.
    let g = c.lock("b").acquire(&ttl(100)).await.expect("acquire b");
    tokio::time::sleep(Duration::from_millis(250)).await;
    out.push(format!(
        "extend expired: {:?}",
        g.extend(Duration::from_secs(1)).await.map_err(|e| kind(&e))
    ));
    out.push(format!(
        "release expired: {:?}",
        g.release().await.map(|_| ()).map_err(|e| kind(&e))
    ));
    // A lock taken by another owner after ours expired.
    let g = c.lock("c").acquire(&ttl(100)).await.expect("acquire c");
    tokio::time::sleep(Duration::from_millis(250)).await;
    let theirs = other
        .lock("c")
        .acquire(&opts)
        .await
        .expect("other acquires c");
    out.push(format!(
        "extend taken: {:?}",
        g.extend(Duration::from_secs(1)).await.map_err(|e| kind(&e))
    ));
    out.push(format!(
        "release taken: {:?}",
        g.release().await.map(|_| ()).map_err(|e| kind(&e))
    ));
    out.push(format!("theirs still held: {:?}", theirs.is_held().await));
    out.push(format!(
        "theirs release: {:?}",
        theirs.release().await.map(|_| ())
    ));
    out
}

fn kind(e: &dlm::Error) -> &'static str {
    match e {
        dlm::Error::Expired { .. } => "Expired",
        dlm::Error::NotHeld { .. } => "NotHeld",
        dlm::Error::Lost { .. } => "Lost",
        _ => "other",
    }
}

#[tokio::test]
async fn release_and_extend_decide_alike_natively_and_by_script() -> TestResult {
    let Some(s) = valkey(RedisServer::builder()) else {
        return Ok(());
    };
    let mut results = Vec::new();
    let mut used = Vec::new();
    for native in [true, false] {
        let (c, other) = (
            connect(&s.url(), native).await,
            connect(&s.url(), native).await,
        );
        let caps = learned(&c).await;
        assert_eq!(caps.is_empty(), !native, "native {native}: {caps:?}");
        learned(&other).await;
        // Warm up: a new fencing counter is raised by a script once.
        for client in [&c, &other] {
            client
                .lock("warm")
                .acquire(&ttl(5_000))
                .await?
                .release()
                .await?;
        }
        let before = calls(&s);
        results.push(scenario(&c, &other).await);
        let after = calls(&s);
        used.push([0, 1, 2].map(|i| after[i] - before[i]));
    }
    let (native, scripts) = (used[0], used[1]);
    // Four releases and three extends: DELIFEQ and SET IFEQ instead of scripts.
    assert_eq!(native[0], 4, "every release is DELIFEQ natively: {used:?}");
    assert_eq!(
        scripts[0], 0,
        "no DELIFEQ with native commands off: {used:?}"
    );
    assert!(
        native[2] + 7 <= scripts[2],
        "seven scripts fewer natively (releases and extends): {used:?}"
    );
    assert_eq!(
        results[0], results[1],
        "native and script paths decide alike"
    );
    let expected = [
        "extend: Ok(())",
        "remaining>5s: true",
        "release: Ok(\"released\")",
        "extend expired: Err(\"Expired\")",
    ];
    assert_eq!(&results[0][..4], &expected[..], "{:#?}", results[0]);
    assert!(
        results[0][6].contains("NotHeld"),
        "a taken lock's release says so: {:#?}",
        results[0]
    );
    Ok(())
}

#[tokio::test]
async fn a_release_wakes_a_waiter_of_another_client_natively() -> TestResult {
    let Some(s) = valkey(RedisServer::builder()) else {
        return Ok(());
    };
    let holder = connect(&s.url(), true).await;
    let waiter = connect(&s.url(), true).await;
    assert!(!learned(&holder).await.is_empty());
    for round in 0..5 {
        let g = holder.lock("w").acquire(&ttl(30_000)).await?;
        let w = waiter.clone();
        let wait = tokio::spawn(async move {
            let g = w
                .lock("w")
                .acquire(
                    &ttl(30_000)
                        .wait(Duration::from_secs(20))
                        .retry_interval(Duration::from_secs(3)),
                )
                .await?;
            let at = Instant::now();
            g.release().await?;
            Ok::<_, dlm::Error>(at)
        });
        waiting(&s, &holder, "w").await?;
        let before = calls(&s);
        let released_at = Instant::now();
        g.release().await?;
        assert!(
            calls(&s)[0] > before[0],
            "round {round}: the release was DELIFEQ"
        );
        let acquired_at = wait.await??;
        let stats = s.command(&["INFO", "commandstats"])?;
        assert!(
            command_calls(&stats, "publish") > round,
            "round {round}: published"
        );
        let took = acquired_at.duration_since(released_at);
        // Without the wake-up the waiter would try again only after its retry
        // interval (3 s, jittered); with it, within a round trip or two.
        assert!(
            took < Duration::from_secs(1),
            "round {round}: the waiter was woken {took:?} after the release"
        );
    }
    Ok(())
}

#[tokio::test]
async fn the_watchdog_renews_natively() -> TestResult {
    let Some(s) = valkey(RedisServer::builder()) else {
        return Ok(());
    };
    let c = connect(&s.url(), true).await;
    assert!(learned(&c).await.contains(&Capability::CompareAndSet));
    let g = c.lock("dog").acquire(&ttl(300).watchdog(true)).await?;
    let before = calls(&s);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let after = calls(&s);
    assert!(g.is_held().await?, "renewed past four TTLs");
    assert!(
        after[1] - before[1] >= 3,
        "the renewals were SET IFEQ: {before:?} -> {after:?}"
    );
    assert_eq!(
        after[2], before[2],
        "no extend script: {before:?} -> {after:?}"
    );
    g.release().await?;
    Ok(())
}

#[tokio::test]
async fn a_user_without_delifeq_falls_back_to_the_script() -> TestResult {
    let Some(s) = valkey(
        RedisServer::builder()
            .acl_user("old", "s3cret", dlm::keys::ACL_RULES)
            .acl_user(
                "new",
                "s3cret",
                &format!("{} {}", dlm::keys::ACL_RULES, dlm::keys::ACL_RULES_NATIVE),
            ),
    ) else {
        return Ok(());
    };
    let old = connect(&s.url_as("old", "s3cret"), true).await;
    let new = connect(&s.url_as("new", "s3cret"), true).await;
    assert!(!learned(&old).await.is_empty(), "not refused yet");
    assert!(!learned(&new).await.is_empty());
    for round in 0..3 {
        let g = old.lock("o").acquire(&ttl(5_000)).await?;
        g.release().await?;
        assert!(
            !s.command(&["EXISTS", "dlm:lock:{o}"])?.contains('1'),
            "round {round}: released by the script after the refusal"
        );
    }
    assert!(
        learned(&old).await == vec![Capability::CompareAndSet],
        "compare-and-delete is off for this user after its refusal"
    );
    let before = calls(&s);
    let g = new.lock("n").acquire(&ttl(5_000)).await?;
    g.release().await?;
    assert!(
        calls(&s)[0] > before[0],
        "the user with ACL_RULES_NATIVE releases natively"
    );
    Ok(())
}

#[tokio::test]
async fn redis_gets_no_native_command() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let info = c.server_info().await?;
    assert_eq!(info.len(), 1);
    if info[0].product == Product::Valkey {
        eprintln!("DLM_REDIS_SERVER is a Valkey: the Redis case was not run");
        return Ok(());
    }
    assert!(info[0].native().is_empty(), "{info:?}");
    let before = calls(&s);
    let g = c.lock("r").acquire(&ttl(5_000)).await?;
    g.extend(Duration::from_secs(6)).await?;
    g.release().await?;
    assert_eq!(calls(&s)[0], before[0]);
    Ok(())
}

#[tokio::test]
async fn a_server_out_of_memory_keeps_watchdog_locks_through_the_script() -> TestResult {
    // `SET` is refused under `noeviction` when memory is full; the script's
    // `PEXPIRE` is not: the renewal falls back to it, per lock.
    let Some(s) = valkey(RedisServer::builder()) else {
        return Ok(());
    };
    let c = connect(&s.url(), true).await;
    assert!(learned(&c).await.contains(&Capability::CompareAndSet));
    let g = c.lock("oom").acquire(&ttl(600).watchdog(true)).await?;
    s.command(&["CONFIG", "SET", "maxmemory-policy", "noeviction"])?;
    s.command(&["CONFIG", "SET", "maxmemory", "1"])?;
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let held = g.is_held().await;
    let extended = g.extend(Duration::from_secs(5)).await;
    s.command(&["CONFIG", "SET", "maxmemory", "0"])?;
    assert!(!g.is_lost(), "the watchdog kept the lock");
    assert!(matches!(held, Ok(true)), "{held:?}");
    assert!(extended.is_ok(), "{extended:?}");
    assert!(
        learned(&c).await.contains(&Capability::CompareAndSet),
        "an out-of-memory error is no refusal of the command"
    );
    g.release().await?;
    Ok(())
}

#[tokio::test]
async fn a_server_that_refuses_info_is_not_asked_at_every_call() -> TestResult {
    let rules =
        format!("{} {}", dlm::keys::ACL_RULES, dlm::keys::ACL_RULES_NATIVE).replace(" +info", "");
    let Some(s) = valkey(RedisServer::builder().acl_user("noinfo", "s3cret", &rules)) else {
        return Ok(());
    };
    let c = connect(&s.url_as("noinfo", "s3cret"), true).await;
    for _ in 0..50 {
        c.lock("i").acquire(&ttl(5_000)).await?.release().await?;
    }
    let stats = s.command(&["INFO", "commandstats"])?;
    let line = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_info:"))
        .unwrap_or_default();
    let rejected: u64 = line
        .split("rejected_calls=")
        .nth(1)
        .and_then(|v| v.split(',').next()?.parse().ok())
        .unwrap_or(0);
    assert!(
        rejected <= 3,
        "INFO asked {rejected} times in 50 cycles: {line}"
    );
    Ok(())
}

/// Hold `name` on a client in its own runtime, release it when `go` says so,
/// and shut that runtime down at once (as a process that exits right after
/// its release): returns when the holder holds it.
fn hold_in_own_runtime(url: String, name: &'static str) -> std::sync::mpsc::Sender<()> {
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let holder = connect(&url, true).await;
            learned(&holder).await;
            let g = holder
                .lock(name)
                .acquire(&ttl(30_000))
                .await
                .expect("acquire");
            let _ = held_tx.send(());
            let _ = tokio::task::spawn_blocking(move || go_rx.recv()).await;
            g.release().await.expect("release");
        });
        drop(rt);
    });
    let _ = held_rx.recv();
    go_tx
}

#[tokio::test]
async fn a_release_right_before_the_process_ends_has_woken_the_waiters() -> TestResult {
    let Some(s) = valkey(RedisServer::builder()) else {
        return Ok(());
    };
    let waiter = connect(&s.url(), true).await;
    for round in 0..5 {
        let go = hold_in_own_runtime(s.url(), "x");
        let w = waiter.clone();
        let wait = tokio::spawn(async move {
            let g = w
                .lock("x")
                .acquire(
                    &ttl(30_000)
                        .wait(Duration::from_secs(20))
                        .retry_interval(Duration::from_secs(3)),
                )
                .await?;
            let at = Instant::now();
            g.release().await?;
            Ok::<_, dlm::Error>(at)
        });
        waiting(&s, &waiter, "x").await?;
        let released = Instant::now();
        go.send(())?;
        let acquired_at = wait.await??;
        assert!(
            acquired_at.duration_since(released) < Duration::from_secs(1),
            "round {round}: woken by a release right before its runtime ended"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_server_that_disabled_delifeq_gets_the_script() -> TestResult {
    // What a managed service or a proxy does: the command renamed away.
    let Some(s) = valkey(
        RedisServer::builder()
            .arg("--rename-command")
            .arg("DELIFEQ")
            .arg(""),
    ) else {
        return Ok(());
    };
    let c = connect(&s.url(), true).await;
    assert!(
        learned(&c).await.contains(&Capability::CompareAndDelete),
        "the server says Valkey 9"
    );
    for round in 0..3 {
        let g = c.lock("gone").acquire(&ttl(5_000)).await?;
        g.release().await?;
        let other = c.lock("gone").acquire(&ttl(5_000)).await;
        assert!(
            other.is_ok(),
            "round {round}: released by the script: {other:?}"
        );
        other?.release().await?;
    }
    assert_eq!(
        learned(&c).await,
        vec![Capability::CompareAndSet],
        "compare-and-delete is off for this deployment after the refusal"
    );
    Ok(())
}

#[tokio::test]
async fn a_redlock_over_mixed_servers_uses_each_nodes_own_commands() -> TestResult {
    // Redlock nodes may differ (a rolling upgrade): each is learned on its own.
    let Some(v) = valkey(RedisServer::builder()) else {
        return Ok(());
    };
    let (r1, r2) = (server(), server());
    let c = Client::builder()
        .timeout(Duration::from_secs(2))
        .connect_many(&[v.url(), r1.url(), r2.url()])
        .await?;
    let info = c.server_info().await?;
    assert_eq!(info.len(), 3);
    assert!(
        info[0].native().contains(&Capability::CompareAndDelete),
        "{info:?}"
    );
    if info[1].product == Product::Redis {
        assert!(
            info[1].native().is_empty() && info[2].native().is_empty(),
            "{info:?}"
        );
    }
    let before = calls(&v);
    for _ in 0..3 {
        let g = c.lock("mixed").acquire(&ttl(5_000)).await?;
        g.extend(Duration::from_secs(6)).await?;
        let released = g.release().await?;
        assert!(
            released.confirmed >= 2,
            "a majority released it: {released:?}"
        );
    }
    // The last node's release may finish in the background.
    assert!(c.settle(Duration::from_secs(5)).await);
    assert!(
        calls(&v)[0] >= before[0] + 3,
        "the Valkey node released natively"
    );
    for s in [&v, &r1, &r2] {
        assert!(!s.command(&["EXISTS", "dlm:lock:{mixed}"])?.contains('1'));
    }
    Ok(())
}
