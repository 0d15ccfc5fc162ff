//! The `impl` label of a benchmark's JSON line: `"dlm"` for the plain
//! default (the peer harness's contract), else `dlm-<parts>` naming every
//! way the run differs from it (`dlm-fair`, `dlm-semaphore4`,
//! `dlm-cluster-replicas1`, `dlm-redlock5-frozen2`, `dlm-metrics`,
//! `dlm-prio10`, `dlm-groups100-gc1`, ...), so that the harness's report
//! (which keys on impl, mode and concurrency) tells the variants apart.

/// The parts of a label, in a fixed order.
#[derive(Debug, Default)]
pub struct Variant(Vec<String>);

impl Variant {
    /// Add a part when `on`.
    pub fn with(mut self, on: bool, part: impl FnOnce() -> String) -> Self {
        if on {
            self.0.push(part());
        }
        self
    }

    /// `"dlm"` or `"dlm-<parts>"`.
    pub fn implementation(&self) -> String {
        if self.0.is_empty() {
            "dlm".to_string()
        } else {
            format!("dlm-{}", self.0.join("-"))
        }
    }

    /// `"default"` or the parts joined by `-` (the label without `dlm-`).
    pub fn name(&self) -> String {
        if self.0.is_empty() {
            "default".to_string()
        } else {
            self.0.join("-")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Variant;

    #[test]
    fn the_default_is_plain_dlm() {
        let v = Variant::default().with(false, || "x".into());
        assert_eq!(v.implementation(), "dlm");
        assert_eq!(v.name(), "default");
        let v = Variant::default()
            .with(true, || "cluster".into())
            .with(true, || format!("replicas{}", 1));
        assert_eq!(v.implementation(), "dlm-cluster-replicas1");
        assert_eq!(v.name(), "cluster-replicas1");
    }
}
