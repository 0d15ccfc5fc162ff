//! A throwaway Redis Cluster: 3 masters with a replica each.

use std::fs::File;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::resp::Reply;
use crate::{Error, RedisServer, TlsFiles, wait_until};

/// How many hash slots a Redis Cluster has.
const SLOTS: u32 = 16384;
/// How long [`ClusterBuilder::start`] waits for `redis-cli --cluster create`
/// and then for the cluster to settle, each.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`Cluster::failover`] waits for the replica to take over.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(50);

/// The hash slot of `key`, as Redis computes it: CRC16 (XMODEM) of the key,
/// or of its hash tag (what is between the first `{` and the next `}`, if
/// not empty), modulo 16384.
///
/// ```
/// use dlm_testkit::key_slot;
/// assert_eq!(key_slot("foo"), 12182);
/// assert_eq!(key_slot("{user1000}.following"), key_slot("{user1000}.followers"));
/// ```
pub fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let tag = &bytes[open + 1..];
            let close = tag.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &tag[..close])
        })
        .unwrap_or(bytes);
    crc16(hashed) & 0x3FFF
}

/// CRC16-XMODEM (polynomial 0x1021, initial value 0), the one Redis Cluster uses.
fn crc16(data: &[u8]) -> u16 {
    let mut crc = 0u16;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Options for a [`Cluster`]; start it with [`ClusterBuilder::start`].
///
/// ```no_run
/// let cluster = dlm_testkit::Cluster::builder().password("s3cret").start()?;
/// assert!(cluster.seed_url().contains(":s3cret@"));
/// # Ok::<(), dlm_testkit::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct ClusterBuilder {
    password: Option<String>,
    tls: Option<TlsFiles>,
}

impl ClusterBuilder {
    /// Require this password on every node (`requirepass`, and `masterauth`
    /// for the replicas); the URLs include it.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Serve TLS only, on clients' and the cluster bus's side
    /// (`--tls-cluster yes`, `--tls-replication yes`), with `files`' server
    /// certificate. Clients must trust [`TlsFiles::ca_cert`]; client
    /// certificates are not required. The URLs start with `rediss://`.
    ///
    /// ```no_run
    /// let tls = dlm_testkit::TlsFiles::generate()?;
    /// let cluster = dlm_testkit::Cluster::builder().tls(&tls).start()?;
    /// assert!(cluster.seed_url().starts_with("rediss://"));
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn tls(mut self, files: &TlsFiles) -> Self {
        self.tls = Some(files.clone());
        self
    }

    /// Start 6 nodes, join them with `redis-cli --cluster create
    /// --cluster-replicas 1`, and wait (up to 30 s) until every node says
    /// `cluster_state:ok`, all agree on a slot map that covers the 16384
    /// slots and names every node, and every replica's link to its master is up.
    pub fn start(self) -> Result<Cluster, Error> {
        let mut nodes = Vec::with_capacity(6);
        for _ in 0..6 {
            let mut builder = RedisServer::builder()
                .cluster_node()
                .arg("--cluster-node-timeout")
                .arg("2000")
                // The default 5 s wait before a diskless full sync would make
                // every replica (and so the start) 5 s slower.
                .arg("--repl-diskless-sync-delay")
                .arg("0")
                // `CLUSTER SLOTS` lists a replica only once its replication
                // offset is not 0, which on an idle master takes its first
                // PING to the replicas: every 10 s by default.
                .arg("--repl-ping-replica-period")
                .arg("1");
            if let Some(p) = &self.password {
                builder = builder
                    .password(p.clone())
                    .arg("--masterauth")
                    .arg(p.clone());
            }
            if let Some(tls) = &self.tls {
                builder = builder.tls(tls, false);
            }
            nodes.push(builder.start()?);
        }
        // From here on, dropping `cluster` on an error stops the nodes.
        let cluster = Cluster { nodes, opts: self };
        cluster.create()?;
        cluster.wait_ok(START_TIMEOUT)?;
        Ok(cluster)
    }
}

/// A Redis Cluster of 6 `redis-server` processes on `127.0.0.1` (3 masters,
/// 3 replicas, `cluster-node-timeout` 2 s, no persistence), each in its own
/// temporary directory; all are stopped when it is dropped.
///
/// Which node serves a slot is asked from the nodes each time, so the
/// answers follow failovers.
///
/// ```no_run
/// use dlm_testkit::{Cluster, key_slot};
///
/// let cluster = Cluster::start()?;
/// let slot = key_slot("dlm:lock:orders");
/// let before = cluster.master_for_slot(slot).map(|n| n.port());
/// cluster.failover(slot)?;
/// assert_ne!(cluster.master_for_slot(slot).map(|n| n.port()), before);
/// # Ok::<(), dlm_testkit::Error>(())
/// ```
#[derive(Debug)]
pub struct Cluster {
    nodes: Vec<RedisServer>,
    opts: ClusterBuilder,
}

/// One entry of `CLUSTER SLOTS`, by port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct SlotRange {
    start: u16,
    end: u16,
    master: u16,
    replicas: Vec<u16>,
}

impl Cluster {
    /// Start a cluster with default options (no password, no TLS).
    pub fn start() -> Result<Cluster, Error> {
        ClusterBuilder::default().start()
    }

    /// Options for a cluster: password, TLS.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    /// Every node's URL, e.g. `redis://127.0.0.1:PORT/` (see [`RedisServer::url`]).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The URL of one node that runs, to discover the cluster from.
    pub fn seed_url(&self) -> String {
        self.nodes
            .iter()
            .find(|n| n.is_running())
            .or(self.nodes.first())
            .map(RedisServer::url)
            .unwrap_or_default()
    }

    /// The 6 nodes, in start order (roles change with failovers).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes, to kill, pause or restart one.
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// The master serving `slot` now, as the first node that answers sees it.
    pub fn master_for_slot(&self, slot: u16) -> Option<&RedisServer> {
        let range = self.range_for(slot)?;
        self.node_at(range.master)
    }

    /// A running replica of the master serving `slot` now.
    pub fn replica_for_slot(&self, slot: u16) -> Option<&RedisServer> {
        let range = self.range_for(slot)?;
        range
            .replicas
            .iter()
            .find_map(|&port| self.node_at(port).filter(|n| n.is_running()))
    }

    /// Promote the replica of `slot`'s master with `CLUSTER FAILOVER` (a
    /// coordinated failover: no write is lost), and wait (up to 20 s) until
    /// it says `role:master`, serves the slot, and the cluster is ok again
    /// (see [`Cluster::wait_ok`]), the old master now its replica.
    ///
    /// ```no_run
    /// let cluster = dlm_testkit::Cluster::start()?;
    /// let old = cluster.master_for_slot(0).map(|n| n.port());
    /// cluster.failover(0)?;
    /// assert_ne!(cluster.master_for_slot(0).map(|n| n.port()), old);
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn failover(&self, slot: u16) -> Result<(), Error> {
        let replica = self.replica_for_slot(slot).ok_or_else(|| Error::Command {
            context: format!("CLUSTER FAILOVER for slot {slot}"),
            reason: "no running replica serves that slot".into(),
        })?;
        let port = replica.port();
        let reply = replica.command(&["CLUSTER", "FAILOVER"])?;
        if reply != "+OK" {
            return Err(Error::Command {
                context: format!("CLUSTER FAILOVER on port {port}"),
                reason: reply,
            });
        }
        wait_until(
            &format!("node {port} to take over slot {slot}"),
            FAILOVER_TIMEOUT,
            POLL,
            || {
                let role = replica
                    .info_field("replication", "role")
                    .map_err(|e| format!("node {port}: {e}"))?;
                if role != "master" {
                    return Err(format!("node {port} has role:{role}"));
                }
                self.check()?;
                match self.range_for(slot) {
                    Some(r) if r.master == port => Ok(()),
                    Some(r) => Err(format!("slot {slot} is still on {}", r.master)),
                    None => Err(format!("no node knows who serves slot {slot}")),
                }
            },
        )
    }

    /// Wait until every running node says `cluster_state:ok`, all agree on
    /// the slot map (`CLUSTER SLOTS`), which covers the 16384 slots and names
    /// every running node, and every replica's link to its master is up.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let cluster = dlm_testkit::Cluster::start()?;
    /// cluster.wait_ok(Duration::from_secs(10))?;
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn wait_ok(&self, timeout: Duration) -> Result<(), Error> {
        wait_until("the cluster to be ok and agree", timeout, POLL, || {
            self.check()
        })
    }

    /// Join the nodes with `redis-cli --cluster create`.
    fn create(&self) -> Result<(), Error> {
        let binary = crate::binary::cli_binary();
        let log_path = self.nodes[0].dir().join("cluster-create.log");
        let log = File::create(&log_path)?;
        let mut cmd = Command::new(&binary);
        if let Some(tls) = &self.opts.tls {
            cmd.args(tls.redis_cli_args());
        }
        if let Some(p) = &self.opts.password {
            // Not `-a`, which warns on stderr and shows in `ps`.
            cmd.env("REDISCLI_AUTH", p);
        }
        cmd.args(["--cluster", "create"])
            .args(self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log));
        let mut child = cmd.spawn().map_err(|source| Error::NotInstalled {
            binary: binary.clone(),
            source,
        })?;
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break Some(status);
            }
            if started.elapsed() > START_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(POLL);
        };
        if status.is_some_and(|s| s.success()) {
            return Ok(());
        }
        let output = std::fs::read_to_string(&log_path).unwrap_or_default();
        let tail: Vec<&str> = output.lines().rev().take(8).collect();
        Err(Error::Command {
            context: format!(
                "redis-cli --cluster create ({})",
                status.map_or_else(
                    || format!("killed after {START_TIMEOUT:?}"),
                    |s| s.to_string()
                )
            ),
            reason: tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
        })
    }

    /// Why the cluster is not ok and settled yet, if it is not.
    fn check(&self) -> Result<(), String> {
        let running: Vec<&RedisServer> = self.nodes.iter().filter(|n| n.is_running()).collect();
        let mut agreed: Option<(u16, Vec<SlotRange>)> = None;
        for node in &running {
            let port = node.port();
            let info = node
                .command(&["CLUSTER", "INFO"])
                .map_err(|e| format!("node {port}: {e}"))?;
            let state = info
                .lines()
                .find_map(|l| l.strip_prefix("cluster_state:"))
                .unwrap_or("?")
                .trim();
            if state != "ok" {
                return Err(format!("node {port} has cluster_state:{state}"));
            }
            let view = slots_view(node)?;
            match &agreed {
                None => agreed = Some((port, view)),
                Some((first, seen)) if *seen != view => {
                    return Err(format!("nodes {first} and {port} disagree on the slot map"));
                }
                Some(_) => {}
            }
            let role = node
                .info_field("replication", "role")
                .map_err(|e| format!("node {port}: {e}"))?;
            if role == "slave" {
                let link = node
                    .info_field("replication", "master_link_status")
                    .map_err(|e| format!("node {port}: {e}"))?;
                if link != "up" {
                    return Err(format!("replica {port} has master_link_status:{link}"));
                }
            }
        }
        let Some((_, view)) = agreed else {
            return Err("no node is running".into());
        };
        let mut next = 0u32;
        for range in &view {
            if u32::from(range.start) != next {
                return Err(format!("slots {next}..{} are not served", range.start));
            }
            next = u32::from(range.end) + 1;
        }
        if next != SLOTS {
            return Err(format!("slots {next}..{SLOTS} are not served"));
        }
        for node in &running {
            let port = node.port();
            if !view
                .iter()
                .any(|r| r.master == port || r.replicas.contains(&port))
            {
                return Err(format!("node {port} is not in the slot map yet"));
            }
        }
        Ok(())
    }

    /// The slot range holding `slot`, from the first running node that answers.
    fn range_for(&self, slot: u16) -> Option<SlotRange> {
        let view = self
            .nodes
            .iter()
            .filter(|n| n.is_running())
            .find_map(|n| slots_view(n).ok())?;
        view.into_iter().find(|r| r.start <= slot && slot <= r.end)
    }

    fn node_at(&self, port: u16) -> Option<&RedisServer> {
        self.nodes.iter().find(|n| n.port() == port)
    }
}

/// `CLUSTER SLOTS` as `node` sees it, sorted, replicas sorted.
fn slots_view(node: &RedisServer) -> Result<Vec<SlotRange>, String> {
    let port = node.port();
    let reply = node
        .query(&["CLUSTER", "SLOTS"])
        .map_err(|e| format!("node {port}: {e}"))?;
    let bad = || format!("node {port}: unexpected CLUSTER SLOTS reply {reply:?}");
    let entries = reply.items().ok_or_else(bad)?;
    let as_u16 = |r: &Reply| r.int().and_then(|i| u16::try_from(i).ok());
    let node_port = |r: &Reply| r.items().and_then(|n| as_u16(n.get(1)?));
    let mut view = Vec::with_capacity(entries.len());
    for entry in entries {
        let parts = entry.items().ok_or_else(bad)?;
        let (Some(start), Some(end), Some(master)) = (
            parts.first().and_then(as_u16),
            parts.get(1).and_then(as_u16),
            parts.get(2).and_then(node_port),
        ) else {
            return Err(bad());
        };
        let mut replicas: Vec<u16> = parts.iter().skip(3).filter_map(node_port).collect();
        replicas.sort_unstable();
        view.push(SlotRange {
            start,
            end,
            master,
            replicas,
        });
    }
    view.sort();
    Ok(view)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_slot_matches_redis() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot("123456789"), 12739);
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("bar"), 5061);
        assert_eq!(key_slot(""), 0);
        assert_eq!(
            key_slot("{user1000}.following"),
            key_slot("{user1000}.followers")
        );
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        // An empty tag does not count: the whole key is hashed.
        assert_eq!(key_slot("{}foo"), crc16(b"{}foo") & 0x3FFF);
        // Only the first `{` opens a tag, closed by the next `}`.
        assert_eq!(key_slot("foo{bar}{zap}"), key_slot("bar"));
        assert_eq!(key_slot("foo{{bar}}"), key_slot("{bar"));
        assert_eq!(key_slot("foo{bar"), crc16(b"foo{bar") & 0x3FFF);
    }

    #[test]
    fn cluster_starts_serves_slots_and_fails_over() -> Result<(), Box<dyn std::error::Error>> {
        let started = Instant::now();
        let cluster = Cluster::start()?;
        eprintln!("cluster started in {:?}", started.elapsed());
        assert_eq!(cluster.nodes().len(), 6);
        assert_eq!(cluster.urls().len(), 6);
        for node in cluster.nodes() {
            let info = node.command(&["CLUSTER", "INFO"])?;
            assert!(info.contains("cluster_state:ok"), "{info}");
        }

        // The master of a key's slot takes the key; another master redirects.
        let slot = key_slot("dlm:x");
        let master = cluster.master_for_slot(slot).ok_or("no master")?;
        assert_eq!(master.command(&["SET", "dlm:x", "1"])?, "+OK");
        let other = cluster
            .nodes()
            .iter()
            .find(|n| {
                n.port() != master.port()
                    && n.info_field("replication", "role").ok().as_deref() == Some("master")
            })
            .ok_or("no other master")?;
        assert!(other.command(&["SET", "dlm:x", "1"])?.starts_with("-MOVED"));
        let replica = cluster.replica_for_slot(slot).ok_or("no replica")?;
        assert_ne!(replica.port(), master.port());
        assert_eq!(replica.info_field("replication", "role")?, "slave");

        let (old_master, old_replica) = (master.port(), replica.port());
        let started = Instant::now();
        cluster.failover(slot)?;
        eprintln!("cluster failover took {:?}", started.elapsed());
        assert_eq!(
            cluster.master_for_slot(slot).map(RedisServer::port),
            Some(old_replica)
        );
        assert_eq!(
            cluster.replica_for_slot(slot).map(RedisServer::port),
            Some(old_master)
        );
        let new_master = cluster.master_for_slot(slot).ok_or("no master")?;
        assert_eq!(new_master.command(&["GET", "dlm:x"])?, "1");
        Ok(())
    }

    #[test]
    fn cluster_over_tls() -> Result<(), Box<dyn std::error::Error>> {
        if crate::skip_without(crate::Feature::Tls) {
            return Ok(());
        }
        let tls = TlsFiles::generate()?;
        let started = Instant::now();
        let cluster = Cluster::builder().tls(&tls).password("s3cret").start()?;
        eprintln!("TLS cluster started in {:?}", started.elapsed());
        assert!(
            cluster
                .urls()
                .iter()
                .all(|u| u.starts_with("rediss://:s3cret@"))
        );
        let slot = key_slot("dlm:x");
        let master = cluster.master_for_slot(slot).ok_or("no master")?;
        assert!(master.is_tls());
        assert_eq!(master.command(&["SET", "dlm:x", "1"])?, "+OK");
        // Nothing listens in plain text.
        let mut raw = std::net::TcpStream::connect(("127.0.0.1", master.port()))?;
        raw.set_read_timeout(Some(Duration::from_secs(5)))?;
        crate::resp::write_command(&mut raw, &["PING"])?;
        let mut buf = [0u8; 5];
        assert!(std::io::Read::read_exact(&mut raw, &mut buf).is_err() || &buf != b"+PONG");

        let replica = cluster.replica_for_slot(slot).ok_or("no replica")?.port();
        cluster.failover(slot)?;
        assert_eq!(
            cluster.master_for_slot(slot).map(RedisServer::port),
            Some(replica)
        );
        Ok(())
    }

    #[test]
    fn cluster_with_password() -> Result<(), Box<dyn std::error::Error>> {
        let cluster = Cluster::builder().password("s3cret").start()?;
        assert!(cluster.urls().iter().all(|u| u.contains(":s3cret@")));
        let node = &cluster.nodes()[0];
        let mut raw = std::net::TcpStream::connect(("127.0.0.1", node.port()))?;
        crate::resp::write_command(&mut raw, &["CLUSTER", "INFO"])?;
        let mut buf = [0u8; 7];
        std::io::Read::read_exact(&mut raw, &mut buf)?;
        assert_eq!(&buf, b"-NOAUTH");
        Ok(())
    }
}
