//! The model of the read-write lock's scripts that the equivalence tests
//! share (`rwlock_batch_equivalence.rs`, `rwlock_batch_review2.rs`): an
//! operation, a lock's keys, a comparable reply, and what Redis holds.

#[derive(Debug, Clone, Copy)]
pub enum Op {
    Read {
        who: usize,
        lock: usize,
        ttl: u64,
    },
    Write {
        who: usize,
        lock: usize,
        ttl: u64,
        marker: u64,
    },
    Release {
        who: usize,
        lock: usize,
        write: bool,
    },
}

impl Op {
    pub fn acquire(self) -> bool {
        !matches!(self, Op::Release { .. })
    }
}

pub struct Keys {
    pub writer: String,
    pub readers: String,
    pub waiting: String,
    pub fence: String,
    pub readable: String,
    pub writable: String,
}

pub fn keys(prefix: &str, lock: usize) -> Keys {
    let base = format!("{prefix}{{l{lock}}}");
    Keys {
        writer: format!("{base}:writer"),
        readers: format!("{base}:readers"),
        waiting: format!("{base}:waiting"),
        fence: format!("{base}:fence"),
        readable: format!("{base}:readable"),
        writable: format!("{base}:writable"),
    }
}

/// A reply made comparable: a busy attempt's wait is time-dependent, so
/// only whether it had one is kept.
pub fn normalise(acquire: bool, code: i64, n: Option<i64>) -> (i64, i64) {
    match (acquire, n) {
        (true, Some(n)) if code == 0 => (0, i64::from(n >= 0)),
        (true, Some(n)) => (code, n),
        _ => (code, 0),
    }
}

/// What Redis holds under `prefix`: per lock its writer, fencing counter,
/// read shares and waiting writers (members sorted: equal deadlines order
/// by name, and one call takes one clock reading for all its operations).
pub async fn snapshot(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
) -> redis::RedisResult<Vec<(Option<String>, Option<String>, Vec<String>, Vec<String>)>> {
    let mut out = Vec::new();
    for lock in 0..LOCKS {
        let k = keys(prefix, lock);
        let writer: Option<String> = redis::cmd("GET").arg(&k.writer).query_async(conn).await?;
        let fence: Option<String> = redis::cmd("GET").arg(&k.fence).query_async(conn).await?;
        let mut readers: Vec<String> = redis::cmd("ZRANGE")
            .arg(&k.readers)
            .arg(0)
            .arg(-1)
            .query_async(conn)
            .await?;
        let mut waiting: Vec<String> = redis::cmd("ZRANGE")
            .arg(&k.waiting)
            .arg(0)
            .arg(-1)
            .query_async(conn)
            .await?;
        readers.sort();
        waiting.sort();
        out.push((writer, fence, readers, waiting));
    }
    Ok(out)
}

/// A tiny deterministic generator (the history must be reproducible).
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

pub const SHORT: u64 = 150;
pub const LONG: u64 = 60_000;
pub const LOCKS: usize = 2;
