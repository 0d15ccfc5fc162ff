//! The value parsers of the command line: they reject bad input (durations
//! out of range, empty or overlong names, malformed tokens) before anything
//! is sent to Redis, with a message clap prints as a usage error (exit 2).

use std::time::Duration;

/// A humantime duration (`30s`, `250ms`, `1h 5m`), not negative.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!("{s:?} is negative; durations must be >= 0"));
    }
    if t.is_empty() {
        return Err("empty duration; expected e.g. 30s or 250ms".into());
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("{s:?} is not a duration ({e}); expected e.g. 30s or 250ms"))
}

/// `s` as a duration, if within `min ..= max`.
fn in_range(s: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < min || d > max {
        return Err(format!(
            "{s} is outside {} ..= {}",
            humantime::format_duration(min),
            humantime::format_duration(max)
        ));
    }
    Ok(d)
}

/// A lock's TTL: [`dlm::MIN_TTL`] to [`dlm::MAX_TTL`].
pub fn parse_ttl(s: &str) -> Result<Duration, String> {
    in_range(s, dlm::MIN_TTL, dlm::MAX_TTL)
}

/// How long to keep trying for a lock: 0 to [`dlm::MAX_WAIT`].
pub fn parse_wait(s: &str) -> Result<Duration, String> {
    in_range(s, Duration::ZERO, dlm::MAX_WAIT)
}

/// A task's run-time limit (`--task-timeout`): 1ms to
/// [`dlm::queue::MAX_TASK_TIMEOUT`].
pub fn parse_task_timeout(s: &str) -> Result<Duration, String> {
    in_range(s, Duration::from_millis(1), dlm::queue::MAX_TASK_TIMEOUT)
}

/// How long a queue keeps results (`--keep-results`): 0 (none) to
/// [`dlm::queue::MAX_RESULT_TTL`].
pub fn parse_keep_results(s: &str) -> Result<Duration, String> {
    in_range(s, Duration::ZERO, dlm::queue::MAX_RESULT_TTL)
}

/// The deadline of every call to Redis (`--timeout`): 1ms to 1h.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    in_range(s, Duration::from_millis(1), Duration::from_secs(3600))
}

/// How long a benchmark measures: 1ms to 24h.
pub fn parse_bench_duration(s: &str) -> Result<Duration, String> {
    in_range(s, Duration::from_millis(1), Duration::from_secs(24 * 3600))
}

/// How long a benchmark runs before measuring: 0 to 1h.
pub fn parse_warmup(s: &str) -> Result<Duration, String> {
    in_range(s, Duration::ZERO, Duration::from_secs(3600))
}

/// How long from now a pushed task is due: 0 to [`dlm::queue::MAX_DELAY`].
pub fn parse_delay(s: &str) -> Result<Duration, String> {
    in_range(s, Duration::ZERO, dlm::queue::MAX_DELAY)
}

/// The lease of a claimed task: [`dlm::MIN_TTL`] to [`dlm::MAX_TTL`].
pub fn parse_lease(s: &str) -> Result<Duration, String> {
    in_range(s, dlm::MIN_TTL, dlm::MAX_TTL)
}

/// The first pause before a task is retried: 1ms to 24h.
pub fn parse_retry_base(s: &str) -> Result<Duration, String> {
    in_range(s, Duration::from_millis(1), Duration::from_secs(24 * 3600))
}

/// How long running commands may finish after a stop signal: 0 to 24h.
pub fn parse_grace(s: &str) -> Result<Duration, String> {
    in_range(s, Duration::ZERO, Duration::from_secs(24 * 3600))
}

/// A task priority: an integer in 0 ..= [`dlm::queue::MAX_PRIORITY`]
/// (higher first).
pub fn parse_priority(s: &str) -> Result<u16, String> {
    let max = dlm::queue::MAX_PRIORITY;
    let p: i128 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not an integer priority (0 ..= {max})"))?;
    u16::try_from(p)
        .ok()
        .filter(|p| *p <= max)
        .ok_or_else(|| format!("priority {s} is outside 0 ..= {max}"))
}

/// A task group: 1 to [`dlm::queue::MAX_GROUP_LEN`] bytes, no control characters.
pub fn parse_group(s: &str) -> Result<String, String> {
    let max = dlm::queue::MAX_GROUP_LEN;
    if s.is_empty() || s.len() > max || s.chars().any(char::is_control) {
        return Err(format!(
            "a group must be 1 to {max} bytes without control characters"
        ));
    }
    Ok(s.to_string())
}

/// A `--rate` value: a limit, or `None` for `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateArg(pub Option<dlm::queue::RateLimit>);

/// A queue rate limit `N/PERIOD` (`100/1s`, `5/250ms`; N 1 ..= 100000,
/// PERIOD 1ms ..= 24h), or `off` to remove it.
pub fn parse_rate(s: &str) -> Result<RateArg, String> {
    if s.trim() == "off" {
        return Ok(RateArg(None));
    }
    let (n, period) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?} is not N/PERIOD (e.g. 100/1s) or off"))?;
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("{n:?} in {s:?} is not a count 1 ..= 100000"))?;
    let period = parse_duration(period)?;
    dlm::queue::RateLimit::new(n, period)
        .map(|r| RateArg(Some(r)))
        .map_err(|e| e.to_string())
}

/// A queue name: 1 to [`dlm::keys::MAX_NAME_LEN`] bytes, not starting with `}`.
pub fn parse_queue_name(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("the queue name must not be empty".into());
    }
    if s.len() > dlm::keys::MAX_NAME_LEN {
        return Err(format!(
            "the queue name is {} bytes, longer than {}",
            s.len(),
            dlm::keys::MAX_NAME_LEN
        ));
    }
    if s.starts_with('}') {
        return Err("the queue name must not start with '}'".into());
    }
    Ok(s.to_string())
}

/// A task id: 1 to [`dlm::keys::MAX_NAME_LEN`] bytes.
pub fn parse_task_id(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("a task id must not be empty".into());
    }
    if s.len() > dlm::keys::MAX_NAME_LEN {
        return Err(format!(
            "the task id is {} bytes, longer than {}",
            s.len(),
            dlm::keys::MAX_NAME_LEN
        ));
    }
    Ok(s.to_string())
}

/// A lock name: 1 to [`dlm::keys::MAX_NAME_LEN`] bytes.
pub fn parse_name(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("the lock name must not be empty".into());
    }
    if s.len() > dlm::keys::MAX_NAME_LEN {
        return Err(format!(
            "the lock name is {} bytes, longer than {}",
            s.len(),
            dlm::keys::MAX_NAME_LEN
        ));
    }
    Ok(s.to_string())
}

/// An owner token, as `dlm lock acquire` printed it.
pub fn parse_token(s: &str) -> Result<dlm::Token, String> {
    s.parse::<dlm::Token>().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_ttl("0s").is_err());
        assert!(parse_ttl("100days").is_err());
        assert_eq!(parse_ttl("7d"), Ok(dlm::MAX_TTL));
        assert_eq!(parse_wait("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn names() {
        assert!(parse_name("").is_err());
        assert!(parse_name(&"n".repeat(2000)).is_err());
        assert!(parse_name("orders:42").is_ok());
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    /// Every value parser of the command line, as clap calls it.
    const PARSERS: &[fn(&str) -> bool] = &[
        |s| parse_duration(s).is_ok(),
        |s| parse_ttl(s).is_ok(),
        |s| parse_wait(s).is_ok(),
        |s| parse_timeout(s).is_ok(),
        |s| parse_bench_duration(s).is_ok(),
        |s| parse_warmup(s).is_ok(),
        |s| parse_delay(s).is_ok(),
        |s| parse_lease(s).is_ok(),
        |s| parse_retry_base(s).is_ok(),
        |s| parse_grace(s).is_ok(),
        |s| parse_queue_name(s).is_ok(),
        |s| parse_task_id(s).is_ok(),
        |s| parse_name(s).is_ok(),
        |s| parse_token(s).is_ok(),
    ];

    proptest! {
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

        /// No parser panics on any argument: random text, duration-shaped
        /// text with huge or negative numbers, odd units and whitespace.
        #[test]
        fn parsers_never_panic(s in prop_oneof![
            any::<String>(),
            "[ -]?[0-9]{1,30}(\\.[0-9]{0,3})? ?(ns|us|ms|s|m|h|d|w|M|y|days|x)?( [0-9]{1,5}[a-z]{1,2})?",
            ".{1020,1030}",
        ]) {
            for parse in PARSERS {
                parse(&s);
            }
        }

        /// Valid humantime durations parse to exactly what they say.
        #[test]
        fn valid_durations_parse_exactly(n in 0u64..1_000_000, unit in 0usize..5) {
            let (suffix, d) = [
                ("ms", Duration::from_millis(n)),
                ("s", Duration::from_secs(n)),
                ("m", Duration::from_secs(n * 60)),
                ("h", Duration::from_secs(n * 3600)),
                ("d", Duration::from_secs(n * 86_400)),
            ][unit];
            let text = format!("{n}{suffix}");
            prop_assert_eq!(parse_duration(&text), Ok(d));
            prop_assert_eq!(parse_ttl(&text).is_ok(), (dlm::MIN_TTL..=dlm::MAX_TTL).contains(&d));
            prop_assert_eq!(parse_delay(&text).is_ok(), d <= dlm::queue::MAX_DELAY);
        }
    }
}
