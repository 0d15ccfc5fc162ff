//! A small pseudo-random generator for the benchmarks (`bench lock` and
//! `bench queue`): enough to spread keys and name a run, no dependency needed.

/// A small PRNG (splitmix64), enough to spread keys; no dependency needed.
pub(crate) struct SplitMix(pub(crate) u64);

impl SplitMix {
    /// The next number.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A seed for worker `worker`: the clock, the worker and the process id mixed.
pub(crate) fn seed(worker: usize) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ ((worker as u64) << 32) ^ u64::from(std::process::id())
}
