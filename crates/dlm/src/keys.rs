//! The key schema, in one place.
//!
//! Every key starts with the client's key prefix, `dlm:` by default
//! ([`crate::ClientBuilder::key_prefix`] puts another in its place: `myapp`
//! makes `myapp:lock:{NAME}`, `myapp:queue:{NAME}:waiting`, ...); the keys of
//! one lock, queue or helper share its `{NAME}` hash tag either way.
//!
//! For a lock named `NAME` with the default prefix (lock keys `dlm:lock:`):
//!
//! | what | key or channel |
//! |---|---|
//! | the lock (value = owner token, TTL = lease) | `dlm:lock:{NAME}` |
//! | its wake-up channel (published on release while someone waits) | `dlm:lock:{NAME}:released` |
//! | the waiters' marker (set by a busy attempt that will wait, deleted by the release that publishes) | `dlm:lock:{NAME}:waiters` |
//! | its fencing counter on one Redis (standalone, Sentinel, a Redlock master; never expires) | `dlm:lock:fence` |
//! | its fencing counter on a Redis Cluster: its hash slot's (never expires) | `dlm:lock:fence:{S}` |
//!
//! The lock key and channel carry the hash tag `{NAME}`. Fencing counters are
//! never kept per name (a counter per name would leave one key behind for
//! every name ever used). On one Redis, every lock under a prefix shares one
//! counter: concurrent acquires take their fences with one `INCRBY` in one
//! `MULTI`, and one hot key stays in the CPU's cache where 16 384 did not.
//! On a Redis Cluster, a lock and its counter must share a hash slot, so the
//! counters are kept **per slot**: `S` is a short tag that hashes to the lock
//! key's slot, and there are never more than 16 384 of them. The fence of
//! each lock strictly increases either way (the counters only grow; locks
//! sharing a counter share its sequence), and every fence is above
//! [`FENCE_FLOOR`] (2^48): dlm 0.1 kept per-slot counters on one Redis
//! too, whose values stay far below it, so an upgraded client never hands
//! out a fence lower than one an older version handed out for the same lock.
//! With a raw key ([`crate::Lock::raw_key`]) the lock key is exactly `NAME`,
//! as redis-py, node-redlock and redsync use it, and the channel becomes
//! `dlm:released:{T}:NAME` where `T` is the part of `NAME` Redis Cluster
//! hashes (its own `{tag}` if it has one, else all of it); its waiters'
//! marker is `PREFIXwaiters:{T}:NAME`.

use crate::error::{Error, Result};

/// The longest lock or resource name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 1024;
/// The longest key prefix accepted, in bytes.
pub const MAX_PREFIX_LEN: usize = 128;
/// The default prefix of lock keys.
pub const DEFAULT_LOCK_PREFIX: &str = "dlm:lock:";
/// The default key prefix: every key dlm writes starts with it (a lock's
/// `dlm:lock:{NAME}`, a queue's `dlm:queue:{NAME}:...`, ...).
/// [`crate::ClientBuilder::key_prefix`] puts another in its place.
pub const DEFAULT_KEY_PREFIX: &str = "dlm:";

/// The root of every key under the key prefix `prefix`, as
/// [`crate::ClientBuilder::key_prefix`] takes it: `myapp` and `myapp:`
/// both give `myapp:` (a prefix ends with a `:` separator).
///
/// ```
/// assert_eq!(dlm::keys::key_root("myapp"), "myapp:");
/// assert_eq!(dlm::keys::key_root("myapp:"), "myapp:");
/// assert_eq!(dlm::keys::key_root(dlm::keys::DEFAULT_KEY_PREFIX), "dlm:");
/// ```
pub fn key_root(prefix: &str) -> String {
    if prefix.ends_with(':') {
        prefix.to_string()
    } else {
        format!("{prefix}:")
    }
}

/// The rules of a least-privilege ACL user that can do everything dlm does
/// with the default key prefixes and nothing else: its keys (`~dlm:*`), its
/// channels (`&dlm:*`) and only the commands dlm sends, directly or from its
/// scripts. An operator creates the user with
/// `ACL SETUSER dlm on >PASSWORD ` followed by these rules (the README shows
/// the line). With [`crate::ClientBuilder::key_prefix`] (every key and
/// channel then starts with `PREFIX:`), add `~PREFIX:*` and `&PREFIX:*`;
/// with [`crate::Lock::raw_key`], `~NAME` and `&dlm:released:*`.
///
/// ```
/// assert!(dlm::keys::ACL_RULES.contains("~dlm:*"));
/// assert!(!dlm::keys::ACL_RULES.contains("+@all"));
/// ```
pub const ACL_RULES: &str = "resetkeys ~dlm:* resetchannels &dlm:* -@all \
+evalsha +eval +script|load +get +mget +set +del +multi +exec +pexpire +pttl +incr +incrby +decrby \
+hget +hmget +hset +hsetnx +hdel +hincrby +hexists +hlen +llen +lpush +ltrim +blpop +zadd +zcard +zcount \
+zmscore +zrange +zrangebyscore +zrangebylex +zrevrange +zrem +zremrangebyrank +zremrangebyscore +zscore \
+pexpireat +rpush +lpop +lindex +lpos +lrem +exists +time +wait +publish +scan \
+xadd +xrange +xrevrange +xread +xlen +hgetall +hkeys +hstrlen +hscan \
+subscribe +unsubscribe +ping +hello +cluster|slots \
+cluster|shards +asking +info";

/// The native commands dlm uses where the server has them (see
/// [`crate::ClientBuilder::native_commands`]), for a least-privilege user on
/// such a server: append them to [`ACL_RULES`] on Valkey 9 or newer. Other
/// servers do not know them (`ACL SETUSER` refuses an unknown command), and
/// dlm does not need them: without them it uses its scripts, after one
/// warning. (`SET ... IFEQ` is `+set`, already in [`ACL_RULES`].)
///
/// ```
/// let rules = format!("{} {}", dlm::keys::ACL_RULES, dlm::keys::ACL_RULES_NATIVE);
/// assert!(rules.contains("+delifeq"));
/// ```
pub const ACL_RULES_NATIVE: &str = "+delifeq";

/// The keys and channel of one lock, all four in one buffer (one
/// allocation per acquire, not four).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockKeys {
    pub lock: Key,
    pub fence: Key,
    pub channel: Key,
    /// Exists while an acquisition (of any client) may be waiting for a
    /// release message: a release publishes only when it finds it.
    pub waiters: Key,
}

/// One key of a [`LockKeys`]: a `str` in the buffer its lock's keys share,
/// cloned without an allocation.
#[derive(Clone)]
pub(crate) struct Key {
    buf: std::sync::Arc<str>,
    range: std::ops::Range<usize>,
}

impl Key {
    pub(crate) fn as_str(&self) -> &str {
        self.buf.get(self.range.clone()).unwrap_or_default()
    }
}

impl std::ops::Deref for Key {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Key {}

impl PartialEq<str> for Key {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Key {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl redis::ToRedisArgs for Key {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + redis::RedisWrite,
    {
        out.write_arg(self.as_bytes());
    }
}

impl redis::ToSingleRedisArg for Key {}

thread_local! {
    /// Where a lock's keys are put together before their one allocation.
    static SCRATCH: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// The four keys of a lock, each written by its function into one buffer.
fn keys_in_one_buffer(parts: [&dyn Fn(&mut String); 4]) -> LockKeys {
    SCRATCH.with_borrow_mut(|s| {
        s.clear();
        let mut ends = [0usize; 4];
        for (end, part) in ends.iter_mut().zip(parts) {
            part(s);
            *end = s.len();
        }
        let buf: std::sync::Arc<str> = std::sync::Arc::from(s.as_str());
        if s.capacity() > 16 * 1024 {
            *s = String::new();
        }
        let key = |start: usize, end: usize| Key {
            buf: buf.clone(),
            range: start..end,
        };
        LockKeys {
            lock: key(0, ends[0]),
            fence: key(ends[0], ends[1]),
            channel: key(ends[1], ends[2]),
            waiters: key(ends[2], ends[3]),
        }
    })
}

pub(crate) fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(Error::invalid(
            "key prefix",
            format!("longer than {MAX_PREFIX_LEN} bytes"),
        ));
    }
    if prefix.contains(['{', '}']) {
        return Err(Error::invalid(
            "key prefix",
            "must not contain '{' or '}': dlm adds the hash tag itself",
        ));
    }
    Ok(())
}

pub(crate) fn validate_name(what: &'static str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid(what, "must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(
            what,
            format!("{} bytes is longer than {MAX_NAME_LEN}", name.len()),
        ));
    }
    Ok(())
}

/// The Redis key of lock `name` under `prefix` (`raw`: the key is exactly
/// `name`), or why the name cannot be used. Checks without a connection.
///
/// ```
/// assert_eq!(dlm::keys::lock_key(dlm::keys::DEFAULT_LOCK_PREFIX, "jobs", false)?, "dlm:lock:{jobs}");
/// assert!(dlm::keys::lock_key("p:", "", false).is_err());
/// # Ok::<(), dlm::Error>(())
/// ```
pub fn lock_key(prefix: &str, name: &str, raw: bool) -> Result<String> {
    validate_prefix(prefix)?;
    Ok(lock_keys(prefix, name, raw)?.lock.to_string())
}

/// Every fence a lock's counter hands out is above this (2^48): a counter
/// below it (new, or written by a dlm older than the shared counter) is
/// raised past it by the first grant that sees it. Per-slot counters of
/// older versions stay far below it (it takes 2^48 grants in one slot to
/// reach), so no fence handed out now is lower than one an older version
/// handed out for the same lock; and it leaves 2^53 - 2^48 fences that
/// still read exactly as a JSON number.
///
/// ```
/// assert_eq!(dlm::keys::FENCE_FLOOR, 1 << 48);
/// ```
pub const FENCE_FLOOR: u64 = 1 << 48;

/// Where a lock's fencing counter lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FenceLayout {
    /// One counter per hash slot (`PREFIXfence:{S}`): a Redis Cluster, where
    /// a lock and its counter must share a slot.
    PerSlot,
    /// One counter for every lock under the prefix (`PREFIXfence`): one
    /// Redis (standalone, Sentinel, each Redlock node). Concurrent acquires
    /// take their fences with one `INCRBY` per batch, and the counter stays
    /// in the CPU's cache where 16 384 counters did not.
    Shared,
}

/// The keys of lock `name` under `prefix` (`raw` = the key is exactly `name`),
/// with per-slot fencing counters.
pub(crate) fn lock_keys(prefix: &str, name: &str, raw: bool) -> Result<LockKeys> {
    lock_keys_in(prefix, name, raw, FenceLayout::PerSlot)
}

/// The keys of lock `name` under `prefix`, its fencing counter as `layout` says.
pub(crate) fn lock_keys_in(
    prefix: &str,
    name: &str,
    raw: bool,
    layout: FenceLayout,
) -> Result<LockKeys> {
    // The fence counter after the lock key (which `s` ends with).
    let fence = |s: &mut String, lock_start: usize| match layout {
        FenceLayout::PerSlot => {
            let tag = slot_tag(slot(s.get(lock_start..).unwrap_or_default()));
            s.push_str(prefix);
            s.push_str("fence:{");
            s.push_str(tag.as_str());
            s.push('}');
        }
        FenceLayout::Shared => {
            s.push_str(prefix);
            s.push_str("fence");
        }
    };
    validate_name("lock name", name)?;
    if raw {
        let tag = cluster_tag(name);
        if tag.contains('}') {
            return Err(Error::invalid(
                "lock name",
                format!(
                    "raw key {name:?} has no hash tag and contains '}}', so no companion key can share its cluster slot"
                ),
            ));
        }
        return Ok(keys_in_one_buffer([
            &|s| s.push_str(name),
            &|s| fence(s, 0),
            &|s| {
                for p in ["dlm:released:{", tag, "}:", name] {
                    s.push_str(p);
                }
            },
            &|s| {
                for p in [prefix, "waiters:{", tag, "}:", name] {
                    s.push_str(p);
                }
            },
        ]));
    }
    if name.starts_with('}') {
        return Err(Error::invalid(
            "lock name",
            "must not start with '}' (it would end the hash tag at once)",
        ));
    }
    let lock = [prefix, "{", name, "}"];
    Ok(keys_in_one_buffer([
        &|s| lock.iter().for_each(|p| s.push_str(p)),
        &|s| fence(s, 0),
        &|s| {
            lock.iter().for_each(|p| s.push_str(p));
            s.push_str(":released");
        },
        &|s| {
            lock.iter().for_each(|p| s.push_str(p));
            s.push_str(":waiters");
        },
    ]))
}

/// `parts` joined, in one allocation.
fn concat(parts: &[&str]) -> String {
    let mut s = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        s.push_str(p);
    }
    s
}

/// The per-hash-slot fencing counter of the lock key `lock_key` under
/// `prefix`: where a Redis Cluster keeps the fences of the locks of that
/// slot (on one Redis every lock shares `PREFIXfence`). For tools that look
/// at, or clean up, the counters.
///
/// ```
/// let k = dlm::keys::slot_fence_key("dlm:lock:", "dlm:lock:{jobs}");
/// assert!(k.starts_with("dlm:lock:fence:{"));
/// ```
pub fn slot_fence_key(prefix: &str, lock_key: &str) -> String {
    fence_key(prefix, lock_key)
}

/// The keys `fence_layout.lua` is called with for the locks under
/// `prefix`: the shared counter, the layout marker, and a per-slot counter
/// of another slot than the shared counter's (so that a Redis Cluster
/// refuses the call), then the pattern that finds the per-slot counters.
pub(crate) struct FenceLayoutKeys {
    pub shared: String,
    pub marker: String,
    pub elsewhere: String,
    /// Every per-slot counter name of the prefix, one per hash slot.
    pub per_slot: Vec<String>,
    /// A `SCAN MATCH` pattern that finds them (the prefix's glob characters
    /// escaped; it may match other keys too, which the script skips unless
    /// they hold a decimal integer and have a per-slot counter's name).
    pub per_slot_pattern: String,
}

pub(crate) fn fence_layout_keys(prefix: &str) -> FenceLayoutKeys {
    let shared = concat(&[prefix, "fence"]);
    let other_slot = (slot(&shared) + 1) % 16384;
    let tag = slot_tag(other_slot);
    FenceLayoutKeys {
        elsewhere: concat(&[prefix, "fence:{", tag.as_str(), "}"]),
        marker: concat(&[prefix, "fence:layout"]),
        per_slot_pattern: {
            let mut p = String::with_capacity(prefix.len() + 10);
            for c in prefix.chars() {
                if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                    p.push('\\');
                }
                p.push(c);
            }
            p.push_str("fence:{*}");
            p
        },
        per_slot: (0..16384u16)
            .map(|s| concat(&[prefix, "fence:{", slot_tag(s).as_str(), "}"]))
            .collect(),
        shared,
    }
}

/// The fencing counter for the slot of `lock_key`.
fn fence_key(prefix: &str, lock_key: &str) -> String {
    let tag = slot_tag(slot(lock_key));
    concat(&[prefix, "fence:{", tag.as_str(), "}"])
}

/// The Redis Cluster hash slot of `key` (CRC16/XMODEM of its tag, mod 16384).
pub(crate) fn slot(key: &str) -> u16 {
    crc16(cluster_tag(key).as_bytes()) % 16384
}

fn crc16(data: &[u8]) -> u16 {
    data.iter().fold(0u16, |crc, &b| {
        (crc << 8) ^ CRC16_TABLE[usize::from((crc >> 8) as u8 ^ b)]
    })
}

/// CRC16/XMODEM (polynomial 0x1021) of every byte value, computed at compile time.
static CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// For every slot, the number whose base-36 digits are a short tag that
/// hashes to it (found once, by trying numbers in order; about 170 000
/// CRCs, a few milliseconds). Numbers, not strings: 64 KiB that stay in
/// cache, where a table of strings cost a cache miss or two per acquire.
static SLOT_TAGS: std::sync::LazyLock<Vec<u32>> = std::sync::LazyLock::new(|| {
    let mut tags = vec![u32::MAX; 16384];
    let mut missing = tags.len();
    let mut n: u32 = 0;
    while missing > 0 {
        let s = usize::from(crc16(Base36::new(n).as_str().as_bytes()) % 16384);
        if let Some(slot) = tags.get_mut(s)
            && *slot == u32::MAX
        {
            *slot = n;
            missing -= 1;
        }
        n += 1;
    }
    tags
});

/// The tag that hashes to `slot` (see [`SLOT_TAGS`]).
fn slot_tag(slot: u16) -> Base36 {
    Base36::new(SLOT_TAGS.get(usize::from(slot)).copied().unwrap_or(0))
}

/// A number's base-36 digits, on the stack.
struct Base36 {
    digits: [u8; 7],
    start: usize,
}

impl Base36 {
    fn new(mut n: u32) -> Self {
        const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
        let mut digits = [b'0'; 7];
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = DIGITS[(n % 36) as usize];
            n /= 36;
            if n == 0 || start == 0 {
                break;
            }
        }
        Base36 { digits, start }
    }

    fn as_str(&self) -> &str {
        // Base-36 digits are ASCII.
        std::str::from_utf8(&self.digits[self.start..]).unwrap_or("0")
    }
}

/// The prefix of fair-lock keys.
pub const FAIR_PREFIX: &str = "dlm:fair:";
/// The prefix of read-write-lock keys.
pub const RW_PREFIX: &str = "dlm:rw:";

/// `{prefix}{{name}}` for a primitive whose keys all carry the `{name}` hash
/// tag, or why `name` cannot be used.
fn tagged(prefix: &str, what: &'static str, name: &str) -> Result<String> {
    validate_name(what, name)?;
    if name.starts_with('}') {
        return Err(Error::invalid(
            what,
            "must not start with '}' (it would end the hash tag at once)",
        ));
    }
    Ok(format!("{prefix}{{{name}}}"))
}

/// The keys of one fair lock (all in the slot of `{NAME}`).
///
/// | what | key |
/// |---|---|
/// | the holder (value = owner token, TTL = lease) | `dlm:fair:{NAME}` |
/// | the waiters in arrival order (a list of waiter tokens) | `dlm:fair:{NAME}:queue` |
/// | each waiter's queue lease (a sorted set: token -> deadline, server ms) | `dlm:fair:{NAME}:timeouts` |
/// | the fencing counter of the slot | `dlm:fair:fence:{S}` |
/// | a waiter's wake-up channel | `dlm:fair:{NAME}:wake:TOKEN` |
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FairKeys {
    pub lock: String,
    pub queue: String,
    pub timeouts: String,
    pub fence: String,
    /// A waiter's channel is this followed by its token.
    pub wake_prefix: String,
}

impl FairKeys {
    /// The wake-up channel of the waiter with `token`.
    pub(crate) fn wake(&self, token: &str) -> String {
        format!("{}{token}", self.wake_prefix)
    }
}

pub(crate) fn fair_keys(root: &str, name: &str) -> Result<FairKeys> {
    let prefix = format!("{root}fair:");
    let lock = tagged(&prefix, "fair lock name", name)?;
    Ok(FairKeys {
        queue: format!("{lock}:queue"),
        timeouts: format!("{lock}:timeouts"),
        fence: fence_key(&prefix, &lock),
        wake_prefix: format!("{lock}:wake:"),
        lock,
    })
}

/// The keys of one read-write lock (all in the slot of `{NAME}`).
///
/// | what | key |
/// |---|---|
/// | the writer (value = owner token, TTL = lease) | `dlm:rw:{NAME}:writer` |
/// | the readers (a sorted set: token -> lease deadline, server ms) | `dlm:rw:{NAME}:readers` |
/// | waiting writers (token -> marker deadline, server ms) | `dlm:rw:{NAME}:writers_waiting` |
/// | the fencing counter of the slot | `dlm:rw:fence:{S}` |
/// | published when readers may enter / a writer may | `dlm:rw:{NAME}:readable`, `dlm:rw:{NAME}:writable` |
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RwKeys {
    pub writer: String,
    pub readers: String,
    pub waiting: String,
    pub fence: String,
    pub readable: String,
    pub writable: String,
}

pub(crate) fn rw_keys(root: &str, name: &str) -> Result<RwKeys> {
    let prefix = format!("{root}rw:");
    let base = tagged(&prefix, "rwlock name", name)?;
    Ok(RwKeys {
        writer: format!("{base}:writer"),
        readers: format!("{base}:readers"),
        waiting: format!("{base}:writers_waiting"),
        fence: fence_key(&prefix, &base),
        readable: format!("{base}:readable"),
        writable: format!("{base}:writable"),
    })
}

/// The prefix of leader-election keys.
pub const ELECTION_PREFIX: &str = "dlm:elect:";

/// The keys of one leader election (all in the slot of `{NAME}`).
///
/// | what | key |
/// |---|---|
/// | the leader's lease (value = its owner token, TTL = lease) | `dlm:elect:{NAME}` |
/// | the leader's id, term and token (a hash; stale once the lease is gone) | `dlm:elect:{NAME}:leader` |
/// | the term counter (never expires: terms only grow) | `dlm:elect:{NAME}:term` |
/// | published when the leader resigns (candidates wake up) | `dlm:elect:{NAME}:resigned` |
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ElectionKeys {
    pub lease: String,
    pub leader: String,
    pub term: String,
    pub resigned: String,
}

pub(crate) fn election_keys(root: &str, name: &str) -> Result<ElectionKeys> {
    let base = tagged(&format!("{root}elect:"), "election name", name)?;
    Ok(ElectionKeys {
        leader: format!("{base}:leader"),
        term: format!("{base}:term"),
        resigned: format!("{base}:resigned"),
        lease: base,
    })
}

/// The default prefix of queue keys.
pub const DEFAULT_QUEUE_PREFIX: &str = "dlm:queue:";

/// The suffixes of one queue's keys (`dlm:queue:{name}:<suffix>`), in the
/// order every queue script expects them in KEYS. From the eleventh on they
/// hold the queue's settings, priorities, groups, rate log, completed
/// history, live workers, task timeouts, results, progress, dependencies and
/// event log; they exist only once a queue uses those features.
/// Small payloads live apart, in [`QUEUE_PAYLOAD_BUCKETS`] bucket hashes
/// next to `payload`.
///
/// ```
/// assert_eq!(dlm::keys::QUEUE_KEY_SUFFIXES[0], "waiting");
/// assert!(dlm::keys::QUEUE_KEY_SUFFIXES.contains(&"config"));
/// ```
pub const QUEUE_KEY_SUFFIXES: [&str; 31] = [
    "waiting",
    "payload",
    "inflight",
    "lease",
    "attempts",
    "dead",
    "errors",
    "fence",
    "stats",
    "signal",
    "config",
    "prio",
    "group",
    "ready",
    "gcount",
    "parked",
    "parkedid",
    "rate",
    "completed",
    "workers",
    "workerinfo",
    "timeout",
    "results",
    "done",
    "progress",
    "blocked",
    "pending",
    "deps",
    "children",
    "depfail",
    "events",
];

/// How many bucket hashes hold one queue's small payloads (payload and id
/// both at most 64 bytes): `dlm:queue:{name}:payload:<bucket>`, `<bucket>`
/// in three hex digits (`000` ..= `fff`, see [`queue_payload_bucket`]). A
/// bucket holds about 1/4096 of the queue's small payloads, few enough to
/// stay a compact listpack hash in Redis. Larger payloads (and those
/// written before buckets) are in `:payload` itself; a task without a
/// payload is stored in neither.
///
/// ```
/// let keys = dlm::keys::queue_payload_bucket_keys("emails")?;
/// assert_eq!(keys.len(), dlm::keys::QUEUE_PAYLOAD_BUCKETS);
/// assert_eq!(keys[0xab], "dlm:queue:{emails}:payload:0ab");
/// # Ok::<(), dlm::Error>(())
/// ```
pub const QUEUE_PAYLOAD_BUCKETS: usize = 4096;

/// The bucket key that holds the small payload of task `id` of queue
/// `name` (payload.lua computes the same: `h = (h * 31 + byte) mod
/// 1000003` over the id's bytes, bucket `h mod 4096`).
///
/// ```
/// assert_eq!(
///     dlm::keys::queue_payload_bucket("emails", "a")?,
///     "dlm:queue:{emails}:payload:061", // b'a' = 97 = 0x61
/// );
/// # Ok::<(), dlm::Error>(())
/// ```
pub fn queue_payload_bucket(name: &str, id: &str) -> Result<String> {
    let h = id
        .bytes()
        .fold(0u64, |h, b| (h * 31 + u64::from(b)) % 1_000_003);
    Ok(format!(
        "{}:{:03x}",
        queue_keys(DEFAULT_KEY_PREFIX, name)?[1],
        h % QUEUE_PAYLOAD_BUCKETS as u64
    ))
}

/// Every payload bucket key of queue `name` (see [`QUEUE_PAYLOAD_BUCKETS`]),
/// for tools that delete a queue's keys.
pub fn queue_payload_bucket_keys(name: &str) -> Result<Vec<String>> {
    let payload = &queue_keys(DEFAULT_KEY_PREFIX, name)?[1];
    Ok((0..QUEUE_PAYLOAD_BUCKETS)
        .map(|b| format!("{payload}:{b:03x}"))
        .collect())
}

/// The keys of one queue under the key root `root` (`dlm:` by default),
/// all under the `{name}` hash tag, in the order every queue script
/// expects them in KEYS.
pub(crate) fn queue_keys(root: &str, name: &str) -> Result<Vec<String>> {
    validate_name("queue name", name)?;
    if name.starts_with('}') {
        return Err(Error::invalid("queue name", "must not start with '}'"));
    }
    let base = format!("{root}queue:{{{name}}}");
    Ok(QUEUE_KEY_SUFFIXES
        .iter()
        .map(|suffix| format!("{base}:{suffix}"))
        .collect())
}

/// The most shards one queue may have (`QueueSettings::shards`): every
/// read that shows the whole queue costs one script per shard.
pub const MAX_SHARDS: u16 = 64;

/// The hash tag of shard `i` of queue `name`: `Q#i`, or `Q#i.n` where `n`
/// is the number chosen when the shard was made to put it on a given
/// master (docs/sharded-queue.md, section 1). Shard 0 has today's tag, `Q`.
pub(crate) fn queue_shard_tag(name: &str, i: u16, n: u16) -> String {
    match (i, n) {
        (0, _) => name.to_string(),
        (i, 0) => format!("{name}#{i}"),
        (i, n) => format!("{name}#{i}.{n}"),
    }
}

/// The 31 keys of shard `i` (tag number `n`) of queue `name`: shard 0's are
/// [`queue_keys`]; shard `i >= 1`'s are `ROOT queue:shard:{Q#i}:SUFFIX`.
/// The `shard:` segment sits outside the braces, so no queue, whatever its
/// name, owns a shard's keys.
pub(crate) fn queue_shard_keys(root: &str, name: &str, i: u16, n: u16) -> Result<Vec<String>> {
    if i == 0 {
        return queue_keys(root, name);
    }
    queue_keys(root, name)?;
    if name.contains('}') {
        return Err(Error::invalid(
            "queue name",
            "a sharded queue's name must not contain '}'",
        ));
    }
    let base = format!("{root}queue:shard:{{{}}}", queue_shard_tag(name, i, n));
    Ok(QUEUE_KEY_SUFFIXES
        .iter()
        .map(|suffix| format!("{base}:{suffix}"))
        .collect())
}

/// The cluster slot of shard `i` (tag number `n`) of queue `name`.
pub(crate) fn queue_shard_slot(name: &str, i: u16, n: u16) -> u16 {
    crc16(queue_shard_tag(name, i, n).as_bytes()) % 16384
}

/// FNV-1a, 64 bits: the hash of a shard key (frozen: changing it would move
/// every task of every sharded queue).
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Lamping and Veach's jump consistent hash: the bucket in `0..buckets` of
/// `key` (frozen, as [`fnv1a64`]). Raising `buckets` moves a key only to one
/// of the new buckets; lowering it moves only the keys of removed buckets.
pub(crate) fn jump_hash(mut key: u64, buckets: u16) -> u16 {
    let buckets = i64::from(buckets.max(1));
    let (mut b, mut j) = (-1i64, 0i64);
    while j < buckets {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = (((b + 1) as f64) * ((1u64 << 31) as f64 / (((key >> 33) + 1) as f64))) as i64;
    }
    u16::try_from(b).unwrap_or(0)
}

/// The shard, among `k`, of a task with shard key `key` (its group, the key
/// given at push, or its id).
pub(crate) fn queue_home(key: &str, k: u16) -> u16 {
    jump_hash(fnv1a64(key.as_bytes()), k)
}

/// The default prefix of semaphore keys.
pub const DEFAULT_SEMAPHORE_PREFIX: &str = "dlm:sem:";

/// The keys and channel of one semaphore, all under the `{name}` hash tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SemaphoreKeys {
    /// A hash: `permits` (the capacity) and `fence` (the fencing counter); never expires.
    pub meta: String,
    /// A sorted set, one member `TOKEN:i` per permit held, scored by its lease deadline
    /// (Redis server time, ms); expires with its last lease.
    pub holders: String,
    /// Published on every release and capacity change.
    pub channel: String,
}

/// The keys of semaphore `name`, or why the name cannot be used.
///
/// ```
/// assert_eq!(dlm::keys::semaphore_key("pool")?, "dlm:sem:{pool}");
/// assert!(dlm::keys::semaphore_key("").is_err());
/// # Ok::<(), dlm::Error>(())
/// ```
pub fn semaphore_key(name: &str) -> Result<String> {
    Ok(semaphore_keys(DEFAULT_KEY_PREFIX, name)?.meta)
}

pub(crate) fn semaphore_keys(root: &str, name: &str) -> Result<SemaphoreKeys> {
    validate_name("semaphore name", name)?;
    if name.starts_with('}') {
        return Err(Error::invalid("semaphore name", "must not start with '}'"));
    }
    let meta = format!("{root}sem:{{{name}}}");
    Ok(SemaphoreKeys {
        holders: format!("{meta}:holders"),
        channel: format!("{meta}:released"),
        meta,
    })
}

/// The keys of queue `name`'s repeating tasks, under the same `{name}` hash
/// tag as [`queue_keys`] (so the scheduler's script, which enqueues into
/// the queue, touches one Redis Cluster slot): `schedules` (HASH id -> spec),
/// `schedule_payloads` (HASH id -> payload), `schedule_next` (ZSET id ->
/// next tick, ms). Kept apart from `queue_keys`' list on purpose: the queue
/// scripts' KEYS order does not change when schedules do.
pub(crate) fn schedule_keys(root: &str, name: &str) -> Result<Vec<String>> {
    validate_name("queue name", name)?;
    if name.starts_with('}') {
        return Err(Error::invalid("queue name", "must not start with '}'"));
    }
    let base = format!("{root}queue:{{{name}}}");
    Ok(["schedules", "schedule_payloads", "schedule_next"]
        .iter()
        .map(|suffix| format!("{base}:{suffix}"))
        .collect())
}

/// The sliding-window log of rate limiter `name`: `dlm:rate:{name}` (a ZSET
/// of grant times).
pub(crate) fn rate_key(root: &str, name: &str) -> Result<String> {
    tagged(&format!("{root}rate:"), "rate limiter name", name)
}

/// The counter of id generator `name`: `dlm:ids:{name}` (a string holding
/// the last id handed out or reserved).
pub(crate) fn ids_key(root: &str, name: &str) -> Result<String> {
    tagged(&format!("{root}ids:"), "id generator name", name)
}

/// The key holding a fenced value for `resource`.
pub(crate) fn fenced_key(root: &str, resource: &str) -> Result<String> {
    validate_name("resource name", resource)?;
    if resource.starts_with('}') {
        return Err(Error::invalid("resource name", "must not start with '}'"));
    }
    Ok(format!("{root}fenced:{{{resource}}}"))
}

/// The part of `key` that Redis Cluster hashes: the content of the first
/// `{...}` when it is non-empty, else the whole key.
pub(crate) fn cluster_tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_and_slots_match_redis_cluster() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("somekey"), 11058);
    }

    #[test]
    fn every_slot_has_a_tag_that_hashes_to_it() {
        assert_eq!(SLOT_TAGS.len(), 16384);
        for s in 0..16384u16 {
            let tag = slot_tag(s);
            assert!(!tag.as_str().is_empty() && tag.as_str().len() <= 4);
            assert_eq!(crc16(tag.as_str().as_bytes()) % 16384, s);
        }
    }

    #[test]
    fn default_keys_share_one_slot() -> Result<()> {
        let k = lock_keys(DEFAULT_LOCK_PREFIX, "orders:42", false)?;
        assert_eq!(k.lock, "dlm:lock:{orders:42}");
        assert_eq!(k.channel, "dlm:lock:{orders:42}:released");
        assert_eq!(k.waiters, "dlm:lock:{orders:42}:waiters");
        assert_eq!(slot(&k.waiters), slot(&k.lock));
        assert!(k.fence.starts_with("dlm:lock:fence:{"));
        assert_eq!(cluster_tag(&k.lock), "orders:42");
        assert_eq!(cluster_tag(&k.channel), "orders:42");
        assert_eq!(slot(&k.fence), slot(&k.lock));
        Ok(())
    }

    #[test]
    fn raw_keys_keep_the_name_and_its_slot() -> Result<()> {
        let k = lock_keys(DEFAULT_LOCK_PREFIX, "resource", true)?;
        assert_eq!(k.lock, "resource");
        assert_eq!(slot(&k.fence), slot("resource"));
        let k = lock_keys(DEFAULT_LOCK_PREFIX, "a{user}b", true)?;
        assert_eq!(cluster_tag(&k.lock), "user");
        assert_eq!(slot(&k.fence), slot("user"));
        assert_eq!(cluster_tag(&k.channel), "user");
        assert_eq!(slot(&k.waiters), slot("user"));
        assert!(lock_keys(DEFAULT_LOCK_PREFIX, "x}y", true).is_err());
        Ok(())
    }

    #[test]
    fn fair_and_rw_keys_share_one_slot() -> Result<()> {
        let f = fair_keys(DEFAULT_KEY_PREFIX, "jobs")?;
        assert_eq!(f.lock, "dlm:fair:{jobs}");
        for k in [&f.queue, &f.timeouts, &f.fence, &f.wake("t")] {
            assert_eq!(slot(k), slot(&f.lock), "{k}");
        }
        let r = rw_keys(DEFAULT_KEY_PREFIX, "jobs")?;
        for k in [&r.readers, &r.waiting, &r.fence, &r.readable, &r.writable] {
            assert_eq!(slot(k), slot(&r.writer), "{k}");
        }
        assert!(
            fair_keys(DEFAULT_KEY_PREFIX, "").is_err()
                && rw_keys(DEFAULT_KEY_PREFIX, "}x").is_err()
        );
        Ok(())
    }

    #[test]
    fn names_with_braces_still_share_one_slot() -> Result<()> {
        let k = lock_keys("p:", "a}b{c", false)?;
        assert_eq!(slot(&k.lock), slot(&k.fence));
        assert_eq!(slot(&k.lock), slot(&k.channel));
        assert_eq!(slot(&k.lock), slot(&k.waiters));
        Ok(())
    }

    #[test]
    fn shard_keys_have_their_own_tag_outside_every_queue() -> Result<()> {
        assert_eq!(
            queue_shard_keys(DEFAULT_KEY_PREFIX, "mail", 0, 0)?,
            queue_keys(DEFAULT_KEY_PREFIX, "mail")?
        );
        let k = queue_shard_keys(DEFAULT_KEY_PREFIX, "mail", 3, 0)?;
        assert_eq!(k[0], "dlm:queue:shard:{mail#3}:waiting");
        assert!(k.iter().all(|key| cluster_tag(key) == "mail#3"));
        let k = queue_shard_keys(DEFAULT_KEY_PREFIX, "mail", 3, 7)?;
        assert_eq!(k[10], "dlm:queue:shard:{mail#3.7}:config");
        assert_eq!(slot(&k[0]), queue_shard_slot("mail", 3, 7));
        // A queue named like a shard's tag never owns a shard's keys.
        let other = queue_keys(DEFAULT_KEY_PREFIX, "mail#3")?;
        assert!(other.iter().all(|o| !k.contains(o)));
        assert!(queue_shard_keys(DEFAULT_KEY_PREFIX, "a}b", 1, 0).is_err());
        Ok(())
    }

    #[test]
    fn jump_hash_is_frozen_balanced_and_monotone() {
        // Frozen values: a change here moves the tasks of every sharded queue.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(jump_hash(0, 1), 0);
        let mut counts = [0u32; 6];
        for i in 0..60_000 {
            let key = format!("task:{i}");
            let at6 = queue_home(&key, 6);
            counts[usize::from(at6)] += 1;
            let at8 = queue_home(&key, 8);
            assert!(
                at8 == at6 || at8 >= 6,
                "raising K moves a key only to a new shard"
            );
        }
        assert!(
            counts.iter().all(|c| (9_000..11_000).contains(c)),
            "{counts:?}"
        );
    }

    #[test]
    fn queue_keys_share_one_slot() -> Result<()> {
        let keys = queue_keys(DEFAULT_KEY_PREFIX, "mail")?;
        assert_eq!(keys.len(), 31);
        assert_eq!(keys[0], "dlm:queue:{mail}:waiting");
        assert!(keys.iter().all(|k| cluster_tag(k) == "mail"));
        assert!(queue_keys(DEFAULT_KEY_PREFIX, "").is_err());
        Ok(())
    }

    #[test]
    fn semaphore_keys_share_one_slot() -> Result<()> {
        let k = semaphore_keys(DEFAULT_KEY_PREFIX, "pool")?;
        assert_eq!(k.meta, "dlm:sem:{pool}");
        assert_eq!(k.holders, "dlm:sem:{pool}:holders");
        assert_eq!(slot(&k.holders), slot(&k.meta));
        assert_eq!(slot(&k.channel), slot(&k.meta));
        assert!(semaphore_keys(DEFAULT_KEY_PREFIX, "}x").is_err());
        Ok(())
    }

    #[test]
    fn schedule_rate_and_id_keys_are_tagged() -> Result<()> {
        let sched = schedule_keys(DEFAULT_KEY_PREFIX, "mail")?;
        assert_eq!(sched[0], "dlm:queue:{mail}:schedules");
        assert!(
            sched
                .iter()
                .all(|k| slot(k) == slot("dlm:queue:{mail}:waiting"))
        );
        let queue = queue_keys(DEFAULT_KEY_PREFIX, "mail")?;
        assert!(sched.iter().all(|k| !queue.contains(k)));
        assert_eq!(rate_key(DEFAULT_KEY_PREFIX, "api")?, "dlm:rate:{api}");
        assert_eq!(ids_key(DEFAULT_KEY_PREFIX, "orders")?, "dlm:ids:{orders}");
        assert!(
            rate_key(DEFAULT_KEY_PREFIX, "").is_err()
                && ids_key(DEFAULT_KEY_PREFIX, "}x").is_err()
                && schedule_keys(DEFAULT_KEY_PREFIX, "").is_err()
        );
        Ok(())
    }

    /// Issue 33: one prefix for every key of a client, and every key that
    /// belongs together still under one hash tag (one Redis Cluster slot).
    #[test]
    fn a_key_prefix_namespaces_every_primitive_and_keeps_slots() -> Result<()> {
        let root = key_root("myapp");
        assert_eq!(root, "myapp:");
        let lock = lock_keys(&format!("{root}lock:"), "orders:42", false)?;
        assert_eq!(lock.lock, "myapp:lock:{orders:42}");
        let fair = fair_keys(&root, "f")?;
        let rw = rw_keys(&root, "r")?;
        let el = election_keys(&root, "e")?;
        let sem = semaphore_keys(&root, "s")?;
        let queue = queue_keys(&root, "q")?;
        let sched = schedule_keys(&root, "q")?;
        let groups: Vec<Vec<String>> = vec![
            vec![
                lock.lock.to_string(),
                lock.fence.to_string(),
                lock.waiters.to_string(),
                lock.channel.to_string(),
            ],
            vec![
                fair.wake("t"),
                fair.lock,
                fair.queue,
                fair.timeouts,
                fair.fence,
            ],
            vec![
                rw.writer,
                rw.readers,
                rw.waiting,
                rw.fence,
                rw.readable,
                rw.writable,
            ],
            vec![el.lease, el.leader, el.term, el.resigned],
            vec![sem.meta, sem.holders, sem.channel],
            queue.into_iter().chain(sched).collect(),
            vec![rate_key(&root, "x")?],
            vec![ids_key(&root, "x")?],
            vec![fenced_key(&root, "x")?],
        ];
        for keys in &groups {
            for k in keys {
                assert!(k.starts_with("myapp:"), "{k} is outside the prefix");
                assert_eq!(slot(k), slot(&keys[0]), "{k} and {} in two slots", keys[0]);
            }
        }
        // Without a prefix the keys are what they always were.
        assert_eq!(
            queue_keys(DEFAULT_KEY_PREFIX, "q")?[0],
            "dlm:queue:{q}:waiting"
        );
        assert_eq!(fair_keys(DEFAULT_KEY_PREFIX, "f")?.lock, "dlm:fair:{f}");
        assert_eq!(
            rw_keys(DEFAULT_KEY_PREFIX, "r")?.writer,
            "dlm:rw:{r}:writer"
        );
        assert_eq!(
            election_keys(DEFAULT_KEY_PREFIX, "e")?.lease,
            "dlm:elect:{e}"
        );
        assert_eq!(semaphore_keys(DEFAULT_KEY_PREFIX, "s")?.meta, "dlm:sem:{s}");
        assert_eq!(fenced_key(DEFAULT_KEY_PREFIX, "x")?, "dlm:fenced:{x}");
        Ok(())
    }

    #[test]
    fn bad_names_and_prefixes_are_rejected() {
        assert!(lock_keys("p:", "", false).is_err());
        assert!(lock_keys("p:", &"n".repeat(MAX_NAME_LEN + 1), false).is_err());
        assert!(lock_keys("p:", "}x", false).is_err());
        assert!(validate_prefix("a{b").is_err());
        assert!(validate_prefix(&"p".repeat(MAX_PREFIX_LEN + 1)).is_err());
        assert!(validate_prefix("ok:").is_ok());
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    /// Names as users write them, and as attackers do: any Unicode, lots of
    /// braces, NUL bytes, and lengths around the limit.
    fn arb_name() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => "[a-z0-9:{}\\x00 ]{0,24}",
            2 => any::<String>(),
            1 => (1usize..4, "[{}ab]").prop_map(|(n, s)| s.repeat(n * MAX_NAME_LEN / 2)),
            1 => (0usize..3).prop_map(|d| "n".repeat(MAX_NAME_LEN - 1 + d)),
        ]
    }

    fn arb_prefix() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(DEFAULT_LOCK_PREFIX.to_string()),
            Just(String::new()),
            "[a-z:{}]{0,12}",
            (120usize..136).prop_map(|n| "p".repeat(n)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn prefixes_are_checked_by_length_and_braces(prefix in arb_prefix()) {
            let ok = prefix.len() <= MAX_PREFIX_LEN && !prefix.contains(['{', '}']);
            prop_assert_eq!(validate_prefix(&prefix).is_ok(), ok);
        }

        #[test]
        fn lock_keys_are_an_error_or_share_one_slot(
            prefix in arb_prefix(),
            name in arb_name(),
            raw in any::<bool>(),
        ) {
            // The client refuses a bad prefix before it makes any key.
            prop_assume!(validate_prefix(&prefix).is_ok());
            let Ok(k) = lock_keys(&prefix, &name, raw) else {
                // Only a bad length, a leading '}' or a raw key that cannot
                // have companions in its slot is refused.
                prop_assert!(
                    name.is_empty()
                        || name.len() > MAX_NAME_LEN
                        || (!raw && name.starts_with('}'))
                        || (raw && cluster_tag(&name).contains('}')),
                    "{name:?} (raw: {raw}) was refused"
                );
                return Ok(());
            };
            prop_assert!(slot(&k.lock) < 16384);
            prop_assert_eq!(slot(&k.fence), slot(&k.lock));
            prop_assert_eq!(slot(&k.channel), slot(&k.lock));
            if raw {
                prop_assert_eq!(k.lock.as_str(), name.as_str());
            } else {
                // The name round-trips: prefix, '{', name, '}'.
                let inner = k.lock.strip_prefix(prefix.as_str())
                    .and_then(|r| r.strip_prefix('{'))
                    .and_then(|r| r.strip_suffix('}'));
                prop_assert_eq!(inner, Some(name.as_str()));
                prop_assert_eq!(lock_key(&prefix, &name, false).ok(), Some(k.lock.to_string()));
            }
        }

        #[test]
        fn queue_and_fenced_keys_are_an_error_or_share_one_slot(name in arb_name()) {
            let bad = name.is_empty() || name.len() > MAX_NAME_LEN || name.starts_with('}');
            match queue_keys(DEFAULT_KEY_PREFIX, &name) {
                Ok(keys) => {
                    prop_assert!(!bad);
                    prop_assert!(keys.iter().all(|k| slot(k) == slot(&keys[0])));
                    let distinct: std::collections::HashSet<_> = keys.iter().collect();
                    prop_assert_eq!(distinct.len(), keys.len());
                }
                Err(e) => prop_assert!(
                    bad && matches!(e, Error::InvalidArgument { .. }),
                    "{name:?}: {e}"
                ),
            }
            prop_assert_eq!(fenced_key(DEFAULT_KEY_PREFIX, &name).is_ok(), !bad);
        }

        /// (Raw lock keys are left out: they are whatever the caller names.)
        #[test]
        fn different_names_never_share_a_key(a in arb_name(), b in arb_name()) {
            prop_assume!(a != b);
            let keys = |n: &str| -> Vec<String> {
                let mut all = queue_keys(DEFAULT_KEY_PREFIX, n).unwrap_or_default();
                all.extend(lock_keys(DEFAULT_LOCK_PREFIX, n, false).map(|k| k.lock.to_string()));
                all.extend(fenced_key(DEFAULT_KEY_PREFIX, n));
                all
            };
            let (ka, kb) = (keys(&a), keys(&b));
            for k in &ka {
                prop_assert!(!kb.contains(k), "{:?} and {:?} both map to {:?}", a, b, k);
            }
        }
    }
}
