//! Measuring helpers shared by `bench` and `demo`: percentiles and the
//! hand-off clock (from one holder's release to the next holder's acquire).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The `p`-th percentile (0..=100, nearest rank) of `sorted`, if not empty.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    let idx = rank.clamp(1, sorted.len()) - 1;
    sorted.get(idx).copied()
}

/// Hand-off latency: the time from the moment a release returned to the
/// moment the next acquire returned in *another* worker.
#[derive(Debug, Default)]
pub struct Handoff {
    last_release: Mutex<Option<(Instant, usize)>>,
}

impl Handoff {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<(Instant, usize)>> {
        match self.last_release.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Worker `worker` just finished releasing.
    pub fn released(&self, worker: usize) {
        *self.slot() = Some((Instant::now(), worker));
    }

    /// Worker `worker` just acquired: the hand-off time, if the previous
    /// holder was another worker (each release counts once).
    pub fn acquired(&self, worker: usize) -> Option<Duration> {
        let now = Instant::now();
        match self.slot().take() {
            Some((at, from)) if from != worker => Some(now.saturating_duration_since(at)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn handoff_counts_other_workers_once() {
        let h = Handoff::default();
        h.released(1);
        assert!(h.acquired(1).is_none());
        h.released(1);
        assert!(h.acquired(2).is_some());
        assert!(h.acquired(3).is_none());
    }
}
