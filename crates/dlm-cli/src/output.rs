//! Printing: one JSON object per line with `--json`, else plain text; error
//! lines on stderr. Write errors (a closed pipe) are returned, never panics.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use crate::error::CliError;

/// Print `value` as one JSON line when `json`, else the text `plain()` makes
/// (which may span several lines; a final newline is added).
pub fn emit<T: Serialize>(
    json: bool,
    value: &T,
    plain: impl FnOnce() -> String,
) -> Result<(), CliError> {
    if json {
        let line = serde_json::to_string(value).map_err(|e| CliError::Io {
            what: "encoding JSON",
            source: e.into(),
        })?;
        line_out(&line)
    } else {
        line_out(&plain())
    }
}

/// Print one line (or several) to stdout and flush.
pub fn line_out(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(CliError::io("writing to stdout"))
}

/// Print `dlm: <message>` to stderr (ignoring a closed stderr).
pub fn error_line(message: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "dlm: {message}");
}

/// Milliseconds, saturating.
pub fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Microseconds, saturating.
pub fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A duration for people: `1.5s`, `250ms`, `80µs`.
pub fn human(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.2}s", d.as_secs_f64())
    } else if d >= Duration::from_millis(1) {
        format!("{:.1}ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{}µs", d.as_micros())
    }
}

/// An optional number of microseconds for a table cell.
pub fn cell_us(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| human(Duration::from_micros(v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        assert_eq!(human(Duration::from_millis(1500)), "1.50s");
        assert_eq!(human(Duration::from_micros(2500)), "2.5ms");
        assert_eq!(human(Duration::from_micros(80)), "80µs");
        assert_eq!(cell_us(None), "-");
    }
}
