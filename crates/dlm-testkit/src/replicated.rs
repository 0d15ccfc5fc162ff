//! A throwaway master with N replicas (no Sentinel, no Cluster): what
//! `LockOptions::replicas(n)` waits for on a plain replicated deployment.

use std::time::Duration;

use crate::{Error, RedisServer, wait_until};

/// How long [`Replicated::start`] waits for every replica to sync.
const SYNC_TIMEOUT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(50);

/// Wait (up to `timeout`) until `replica` reports `master_link_status:up`
/// and `master` lists it as `state=online`. The master's side can lag: after
/// a diskless sync, Redis 6.2 puts a replica online only on its first `ACK`,
/// up to a second later, and until then `WAIT` does not count it.
pub(crate) fn wait_synced(
    master: &RedisServer,
    replica: &RedisServer,
    timeout: Duration,
) -> Result<(), Error> {
    let listed = format!("port={},state=online,", replica.port());
    wait_until("the replica to sync with the master", timeout, POLL, || {
        let link = replica
            .info_field("replication", "master_link_status")
            .map_err(|e| e.to_string())?;
        if link != "up" {
            return Err(format!("master_link_status:{link}"));
        }
        let info = master
            .command(&["INFO", "replication"])
            .map_err(|e| e.to_string())?;
        if info
            .lines()
            .any(|l| l.starts_with("slave") && l.contains(&listed))
        {
            Ok(())
        } else {
            Err(format!(
                "the master does not list {} online yet",
                replica.port()
            ))
        }
    })
}

/// A master and its replicas, each a [`RedisServer`] on a free loopback
/// port (no persistence, diskless sync without delay), stopped when dropped.
///
/// ```no_run
/// let setup = dlm_testkit::Replicated::start(1)?;
/// assert_eq!(setup.replicas().len(), 1);
/// println!("master at {}", setup.master().url());
/// # Ok::<(), dlm_testkit::Error>(())
/// ```
#[derive(Debug)]
pub struct Replicated {
    // Replicas first: dropped (stopped) before their master.
    replicas: Vec<RedisServer>,
    master: RedisServer,
}

impl Replicated {
    /// Start a master and `replicas` replicas of it, and wait (up to 20 s)
    /// until every replica reports `master_link_status:up` and the master
    /// lists it online.
    pub fn start(replicas: usize) -> Result<Replicated, Error> {
        // The default 5 s wait before a diskless full sync would delay each replica.
        let data = RedisServer::builder()
            .arg("--repl-diskless-sync-delay")
            .arg("0");
        let master = data.clone().start()?;
        let replicas = (0..replicas)
            .map(|_| {
                data.clone()
                    .arg("--replicaof")
                    .arg("127.0.0.1")
                    .arg(master.port().to_string())
                    .start()
            })
            .collect::<Result<Vec<_>, _>>()?;
        for replica in &replicas {
            wait_synced(&master, replica, SYNC_TIMEOUT)?;
        }
        Ok(Replicated { replicas, master })
    }

    /// The master.
    pub fn master(&self) -> &RedisServer {
        &self.master
    }

    /// The replicas.
    pub fn replicas(&self) -> &[RedisServer] {
        &self.replicas
    }

    /// Split into the master and its replicas (the replicas should be
    /// dropped first).
    pub fn into_parts(self) -> (RedisServer, Vec<RedisServer>) {
        (self.master, self.replicas)
    }
}
