//! Shared helpers for the integration tests: a throwaway server and a client on it.
#![allow(dead_code, missing_docs)]

pub mod hand_over;
pub mod lin;
pub mod rw_scripts;

use std::time::Duration;

pub use dlm_testkit::RedisServer;

pub type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

pub fn server() -> RedisServer {
    RedisServer::start().expect("start redis-server (apt-get install -y redis-server)")
}

pub async fn client(server: &RedisServer) -> dlm::Client {
    dlm::Client::builder()
        .timeout(Duration::from_millis(1500))
        .connect(&server.url())
        .await
        .expect("connect to the throwaway server")
}

/// A plain connection for looking at Redis behind dlm's back.
pub async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection")
}

/// Three tests that run one async body of cases (`async fn(&Client) ->
/// TestResult`) on one server, as the least-privilege user of
/// `dlm::keys::ACL_RULES` and on a Redis Cluster: parametrised, not copied.
#[macro_export]
macro_rules! on_queue_topologies {
    ($server:ident, $acl:ident, $cluster:ident, $cases:path) => {
        #[tokio::test]
        async fn $server() -> TestResult {
            let s = dlm_testkit::RedisServer::start()?;
            $cases(&dlm::Client::connect(&s.url()).await?).await
        }

        #[tokio::test]
        async fn $acl() -> TestResult {
            let s = dlm_testkit::RedisServer::builder()
                .acl_user("dlm", "s3cret", dlm::keys::ACL_RULES)
                .start()?;
            $cases(&dlm::Client::connect(&s.url_as("dlm", "s3cret")).await?).await
        }

        #[tokio::test]
        async fn $cluster() -> TestResult {
            let cluster = dlm_testkit::Cluster::start()?;
            let c = dlm::Client::builder()
                .timeout(std::time::Duration::from_secs(2))
                .connect_cluster(&cluster.urls())
                .await?;
            $cases(&c).await
        }
    };
}

/// Hold every request to the servers behind `proxies` for `ms` (0: none).
pub fn delay_requests(proxies: &[dlm_testkit::FaultProxy], ms: u64) {
    for p in proxies {
        p.set_latency(
            dlm_testkit::Direction::ToServer,
            Duration::from_millis(ms),
            Duration::ZERO,
        );
    }
}

pub fn ttl(ms: u64) -> dlm::LockOptions {
    dlm::LockOptions::new(Duration::from_millis(ms))
}

/// `cmdstat_evalsha:calls` from an `INFO commandstats` reply (0 if absent).
pub fn evalsha_calls(stats: &str) -> u64 {
    command_calls(stats, "evalsha")
}

/// `cmdstat_<command>:calls` from an `INFO commandstats` reply (0 if
/// absent); commands that scripts run count too.
pub fn command_calls(stats: &str, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// Enqueue `n` tasks named `{prefix}{i}` in one call and record each in
/// `history` once the enqueue succeeded.
pub async fn enqueue_recorded(
    queue: &dlm::queue::Queue,
    history: &dlm_testkit::history::QueueHistory,
    prefix: &str,
    n: usize,
) -> dlm::Result<()> {
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    queue
        .enqueue(
            ids.iter().map(|i| dlm::queue::NewTask::new(i.clone())),
            Duration::ZERO,
            dlm::queue::OnDuplicate::Keep,
        )
        .await?;
    for id in &ids {
        history.enqueued(id);
    }
    Ok(())
}

/// How long a fault-matrix row runs: `base` in CI, `base` times
/// `DLM_FAULTS_SCALE` when set (`scripts/faults.sh` runs the matrix longer).
pub fn row_duration(base: Duration) -> Duration {
    base * row_scale()
}

/// `DLM_FAULTS_SCALE` (1 when unset): how much longer and larger the
/// fault-matrix rows run.
pub fn row_scale() -> u32 {
    std::env::var("DLM_FAULTS_SCALE")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .filter(|s| *s > 0)
        .unwrap_or(1)
}

/// Print one row of the fault matrix in the form `scripts/faults.sh`
/// collects into RELIABILITY.md: row, workload, faults injected,
/// violations, how it behaved.
pub fn matrix_row(row: &str, workload: &str, faults: &str, violations: &str, behaved: &str) {
    println!("MATRIX|{row}|{workload}|{faults}|{violations}|{behaved}");
}

/// A deployment a test body runs on, once per kind: one server, or a Redis
/// Cluster (3 masters + 3 replicas). Test bodies take a `&Deployment` and are
/// written once, called once per kind.
#[allow(clippy::large_enum_variant)]
pub enum Deployment {
    Standalone(RedisServer),
    Cluster(dlm_testkit::Cluster),
}

impl Deployment {
    pub fn standalone() -> Self {
        Deployment::Standalone(server())
    }

    pub fn cluster() -> Self {
        Deployment::Cluster(dlm_testkit::Cluster::start().expect("start a Redis Cluster"))
    }

    /// Run `args` on the server that holds `key` (behind dlm's back).
    pub fn command_on(&self, key: &str, args: &[&str]) -> String {
        let server = match self {
            Deployment::Standalone(s) => s,
            Deployment::Cluster(c) => c
                .master_for_slot(dlm_testkit::key_slot(key))
                .expect("a master for the key's slot"),
        };
        server.command(args).expect("a command behind dlm's back")
    }

    /// A fresh client (its own connections and wake-ups: another process, in effect).
    pub async fn client(&self) -> dlm::Client {
        let builder = dlm::Client::builder().timeout(Duration::from_secs(2));
        match self {
            Deployment::Standalone(s) => builder.connect(&s.url()).await,
            Deployment::Cluster(c) => builder.connect_cluster(&c.urls()).await,
        }
        .expect("connect to the throwaway deployment")
    }
}

/// The least-privilege ACL rules of dlm before the transaction path (no
/// `MULTI`/`EXEC`, no `MGET`), checked to really lack them.
pub fn older_acl_rules() -> String {
    let older = dlm::keys::ACL_RULES
        .replace(" +mget", "")
        .replace(" +multi +exec", "");
    assert!(
        !older.contains("+multi") && !older.contains("+mget"),
        "the older rules have no MULTI and no MGET"
    );
    older
}
