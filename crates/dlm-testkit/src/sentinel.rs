//! A throwaway Sentinel setup: a master, its replica and 3 sentinels.

use std::time::Duration;

use crate::resp::Reply;
use crate::{Error, RedisServer, TlsFiles, wait_until};

/// How long [`SentinelsBuilder::start`] waits for the replica to sync and
/// then for the sentinels to find the master, the replica and each other.
const SETUP_TIMEOUT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(50);

/// Options for [`Sentinels`]; start them with [`SentinelsBuilder::start`].
///
/// ```no_run
/// let setup = dlm_testkit::Sentinels::builder("mymaster").password("s3cret").start()?;
/// assert!(setup.master().url().contains(":s3cret@"));
/// # Ok::<(), dlm_testkit::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SentinelsBuilder {
    master_name: String,
    password: Option<String>,
    tls: Option<TlsFiles>,
}

impl SentinelsBuilder {
    /// Require this password on the master and the replica (`requirepass`,
    /// `masterauth`); the sentinels authenticate with it (`sentinel
    /// auth-pass`) but need none themselves.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Serve TLS only, with `files`' server certificate, on the master, the
    /// replica and the sentinels (`port 0`, `tls-port P`,
    /// `tls-replication yes`): the replica replicates over TLS, and the
    /// sentinels reach the master, the replica and each other over TLS.
    /// Clients must trust [`TlsFiles::ca_cert`]; client certificates are not
    /// required (`tls-auth-clients no`). [`Sentinels::sentinel_urls`] and the
    /// data nodes' [`RedisServer::url`] then start with `rediss://`.
    ///
    /// ```no_run
    /// let tls = dlm_testkit::TlsFiles::generate()?;
    /// let setup = dlm_testkit::Sentinels::builder("mymaster").tls(&tls).start()?;
    /// assert!(setup.sentinel_urls()[0].starts_with("rediss://127.0.0.1:"));
    /// assert!(setup.master().url().starts_with("rediss://"));
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn tls(mut self, files: &TlsFiles) -> Self {
        self.tls = Some(files.clone());
        self
    }

    /// Start the master, the replica (waiting for `master_link_status:up`)
    /// and 3 sentinels (quorum 2, `down-after-milliseconds` 1000,
    /// `failover-timeout` 5000), then wait (up to 20 s) until every sentinel
    /// names the master, sees it, the replica and the 2 other sentinels as
    /// up.
    pub fn start(self) -> Result<Sentinels, Error> {
        let name = self.master_name.clone();
        // The default 5 s wait before a diskless full sync would delay the replica.
        let mut data = RedisServer::builder()
            .arg("--repl-diskless-sync-delay")
            .arg("0");
        if let Some(p) = &self.password {
            data = data.password(p.clone()).arg("--masterauth").arg(p.clone());
        }
        if let Some(tls) = &self.tls {
            data = data.tls(tls, false);
        }
        let master = data.clone().start()?;
        let replica = data
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(master.port().to_string())
            .start()?;
        crate::replicated::wait_synced(&master, &replica, SETUP_TIMEOUT)?;

        let mut config = vec![
            "sentinel resolve-hostnames no".to_string(),
            format!("sentinel monitor {name} 127.0.0.1 {} 2", master.port()),
            format!("sentinel down-after-milliseconds {name} 1000"),
            format!("sentinel failover-timeout {name} 5000"),
            format!("sentinel parallel-syncs {name} 1"),
        ];
        if let Some(p) = &self.password {
            config.push(format!("sentinel auth-pass {name} {p}"));
        }
        let mut sentinel = RedisServer::builder().sentinel(config);
        if let Some(tls) = &self.tls {
            sentinel = sentinel.tls(tls, false);
        }
        let sentinels = (0..3)
            .map(|_| sentinel.clone().start())
            .collect::<Result<Vec<_>, _>>()?;
        let setup = Sentinels {
            sentinels,
            replica,
            master,
            master_name: name,
        };
        wait_until(
            "the sentinels to see the master, the replica and each other",
            SETUP_TIMEOUT,
            POLL,
            || setup.check_settled(),
        )?;
        Ok(setup)
    }
}

/// A master, one replica and 3 sentinels monitoring them, each a
/// `redis-server` process on `127.0.0.1` in its own temporary directory; all
/// are stopped when it is dropped.
///
/// ```no_run
/// # use std::time::Duration;
/// let mut setup = dlm_testkit::Sentinels::start("mymaster")?;
/// println!("ask {:?} for {}", setup.sentinel_urls(), setup.master_name());
/// let old = setup.kill_master()?;
/// let new = setup.wait_for_failover(old, Duration::from_secs(20))?;
/// assert_eq!(new, setup.replica().port());
/// # Ok::<(), dlm_testkit::Error>(())
/// ```
#[derive(Debug)]
pub struct Sentinels {
    // Dropped in this order: the sentinels go first, so none starts a
    // failover while the data nodes stop.
    sentinels: Vec<RedisServer>,
    replica: RedisServer,
    master: RedisServer,
    master_name: String,
}

impl Sentinels {
    /// Start a setup whose sentinels monitor the master as `master_name`
    /// (a name without spaces), with no password.
    pub fn start(master_name: &str) -> Result<Sentinels, Error> {
        Self::builder(master_name).start()
    }

    /// Options for a setup monitoring the master as `master_name`.
    pub fn builder(master_name: &str) -> SentinelsBuilder {
        SentinelsBuilder {
            master_name: master_name.to_string(),
            password: None,
            tls: None,
        }
    }

    /// The sentinels' URLs, `redis://127.0.0.1:PORT/` (never with a password),
    /// or `rediss://127.0.0.1:PORT/` with [`SentinelsBuilder::tls`].
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The 3 sentinel processes.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The name the sentinels monitor the master as.
    pub fn master_name(&self) -> &str {
        &self.master_name
    }

    /// The server that was master at the start (it may since have been
    /// killed or replaced: see [`Sentinels::current_master_port`]).
    pub fn master(&self) -> &RedisServer {
        &self.master
    }

    /// The server that was the replica at the start.
    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// The original master, to restart it after [`Sentinels::kill_master`]
    /// (the sentinels then make it a replica of the new master, which here
    /// takes about 10 s).
    pub fn master_mut(&mut self) -> &mut RedisServer {
        &mut self.master
    }

    /// The original replica, to kill, pause or restart it.
    pub fn replica_mut(&mut self) -> &mut RedisServer {
        &mut self.replica
    }

    /// The master's port as the first sentinel that answers names it
    /// (`SENTINEL get-master-addr-by-name`).
    pub fn current_master_port(&self) -> Result<u16, Error> {
        let mut last = "no sentinel is running".to_string();
        for sentinel in self.sentinels.iter().filter(|s| s.is_running()) {
            match self.master_port_from(sentinel) {
                Ok(port) => return Ok(port),
                Err(e) => last = e,
            }
        }
        Err(Error::Command {
            context: format!("SENTINEL get-master-addr-by-name {}", self.master_name),
            reason: last,
        })
    }

    /// Kill the current master (as a sentinel names it) with SIGKILL, reap
    /// it, and return its port, for [`Sentinels::wait_for_failover`].
    pub fn kill_master(&mut self) -> Result<u16, Error> {
        let port = self.current_master_port()?;
        let server = [&mut self.master, &mut self.replica]
            .into_iter()
            .find(|s| s.port() == port)
            .ok_or_else(|| Error::Command {
                context: "kill the master".into(),
                reason: format!("the sentinels name port {port}, neither master nor replica"),
            })?;
        server.kill();
        Ok(port)
    }

    /// Wait until every running sentinel names the same master, not on
    /// `old_port`, and that server says `role:master`; return its port.
    ///
    /// With the sentinels' settings here a failover takes a few seconds;
    /// a failed election is retried after 10 s, so give it 20 s.
    pub fn wait_for_failover(&self, old_port: u16, timeout: Duration) -> Result<u16, Error> {
        wait_until(
            &format!("the sentinels to replace master {old_port}"),
            timeout,
            POLL,
            || {
                let mut agreed = None;
                for sentinel in self.sentinels.iter().filter(|s| s.is_running()) {
                    let port = self.master_port_from(sentinel)?;
                    if port == old_port {
                        return Err(format!("sentinel {} still names {port}", sentinel.port()));
                    }
                    match agreed {
                        Some(seen) if seen != port => {
                            return Err(format!("sentinels name both {seen} and {port}"));
                        }
                        _ => agreed = Some(port),
                    }
                }
                let port = agreed.ok_or("no sentinel is running")?;
                let server = [&self.master, &self.replica]
                    .into_iter()
                    .find(|s| s.port() == port && s.is_running())
                    .ok_or_else(|| format!("the sentinels name {port}, which does not run"))?;
                let role = server
                    .info_field("replication", "role")
                    .map_err(|e| format!("node {port}: {e}"))?;
                if role == "master" {
                    Ok(port)
                } else {
                    Err(format!("node {port} still has role:{role}"))
                }
            },
        )
    }

    fn master_port_from(&self, sentinel: &RedisServer) -> Result<u16, String> {
        let reply = sentinel
            .query(&["SENTINEL", "get-master-addr-by-name", &self.master_name])
            .map_err(|e| format!("sentinel {}: {e}", sentinel.port()))?;
        reply
            .items()
            .and_then(|addr| addr.get(1)?.int())
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| format!("sentinel {} answered {reply:?}", sentinel.port()))
    }

    /// Why the sentinels are not all set up yet, if they are not.
    fn check_settled(&self) -> Result<(), String> {
        let name = self.master_name.as_str();
        for sentinel in &self.sentinels {
            let at = sentinel.port();
            let ask = |args: &[&str]| {
                sentinel
                    .query(args)
                    .map_err(|e| format!("sentinel {at}: {e}"))
            };
            let port = self.master_port_from(sentinel)?;
            if port != self.master.port() {
                return Err(format!("sentinel {at} names master {port}"));
            }
            let master = ask(&["SENTINEL", "master", name])?;
            let flags = master.field("flags").unwrap_or_default();
            if flags != "master" {
                return Err(format!("sentinel {at} flags the master {flags:?}"));
            }
            let up = |reply: &Reply, want: usize, flag: &str, what: &str| {
                let items = reply.items().unwrap_or_default();
                let ok = items
                    .iter()
                    .filter(|r| r.field("flags").as_deref() == Some(flag));
                if items.len() == want && ok.count() == want {
                    Ok(())
                } else {
                    Err(format!("sentinel {at} sees {what}: {reply:?}"))
                }
            };
            up(
                &ask(&["SENTINEL", "replicas", name])?,
                1,
                "slave",
                "replicas",
            )?;
            up(
                &ask(&["SENTINEL", "sentinels", name])?,
                2,
                "sentinel",
                "sentinels",
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::Conn;
    use std::time::Instant;

    #[test]
    fn sentinels_start_and_fail_over_when_the_master_dies() -> Result<(), Error> {
        let started = Instant::now();
        let mut setup = Sentinels::start("mymaster")?;
        eprintln!("sentinels started in {:?}", started.elapsed());
        assert_eq!(setup.master_name(), "mymaster");
        assert_eq!(setup.sentinel_urls().len(), 3);
        assert_eq!(setup.current_master_port()?, setup.master().port());
        assert_eq!(setup.master().command(&["SET", "k", "v"])?, "+OK");

        let killed_at = Instant::now();
        let old = setup.kill_master()?;
        assert_eq!(old, setup.master().port());
        assert!(!setup.master().is_running());
        let new = setup.wait_for_failover(old, Duration::from_secs(20))?;
        eprintln!("sentinel failover took {:?}", killed_at.elapsed());
        assert_eq!(new, setup.replica().port());
        assert_eq!(setup.current_master_port()?, new);
        assert_eq!(setup.replica().command(&["GET", "k"])?, "v");
        assert_eq!(setup.replica().command(&["SET", "k", "w"])?, "+OK");

        // (Not checked here: the restarted old master becoming a replica of
        // the new one. Sentinel converts it after its next INFO round, up to
        // 10 s plus load, which made this test flaky on a busy 2-core machine,
        // and no dlm test relies on it.)
        Ok(())
    }

    #[test]
    fn sentinels_over_tls_fail_over_when_the_master_dies() -> Result<(), Error> {
        if crate::skip_without(crate::Feature::Tls) {
            return Ok(());
        }
        let files = TlsFiles::generate()?;
        let started = Instant::now();
        let mut setup = Sentinels::builder("tls-master").tls(&files).start()?;
        eprintln!("tls sentinels started in {:?}", started.elapsed());
        let urls = setup.sentinel_urls();
        assert_eq!(urls.len(), 3);
        for (url, sentinel) in urls.iter().zip(setup.sentinels()) {
            assert_eq!(url, &format!("rediss://127.0.0.1:{}/", sentinel.port()));
            // TLS only: a plain-text PING gets no PONG.
            let plain = Conn::connect(sentinel.port(), None, Duration::from_secs(2))
                .and_then(|mut c| c.call(&["PING"]));
            assert!(
                !matches!(plain, Ok(Reply::Status(ref s)) if s == "PONG"),
                "{plain:?}"
            );
        }
        assert!(setup.master().url().starts_with("rediss://127.0.0.1:"));
        assert!(setup.replica().url().starts_with("rediss://127.0.0.1:"));
        // A sentinel names the master, asked over TLS.
        assert_eq!(setup.current_master_port()?, setup.master().port());
        assert_eq!(setup.master().command(&["SET", "k", "v"])?, "+OK");

        let killed_at = Instant::now();
        let old = setup.kill_master()?;
        assert_eq!(old, setup.master().port());
        let new = setup.wait_for_failover(old, Duration::from_secs(30))?;
        eprintln!("tls sentinel failover took {:?}", killed_at.elapsed());
        assert_eq!(new, setup.replica().port());
        assert_eq!(setup.current_master_port()?, new);
        assert_eq!(setup.replica().command(&["GET", "k"])?, "v");
        Ok(())
    }

    #[test]
    fn sentinels_with_password() -> Result<(), Error> {
        let setup = Sentinels::builder("pw").password("s3cret").start()?;
        assert!(setup.master().url().contains(":s3cret@"));
        assert!(setup.replica().url().contains(":s3cret@"));
        assert!(setup.sentinel_urls().iter().all(|u| !u.contains('@')));
        assert_eq!(setup.current_master_port()?, setup.master().port());
        Ok(())
    }
}
