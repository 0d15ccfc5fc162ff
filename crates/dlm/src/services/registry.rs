//! The leases a client holds, by id, as weak references: dropping the last
//! strong reference (the guard) is never held up by the registry.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// A registry of held things of type `T` (a lock's shared state, later a
/// permit or a read share), each under a unique id.
#[derive(Debug)]
pub(crate) struct Registry<T> {
    held: Mutex<HashMap<u64, Weak<T>>>,
    next_id: AtomicU64,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Registry {
            held: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        }
    }
}

impl<T> Registry<T> {
    /// A fresh id for the next entry.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn held(&self) -> MutexGuard<'_, HashMap<u64, Weak<T>>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn register(&self, id: u64, item: &Arc<T>) {
        self.held().insert(id, Arc::downgrade(item));
    }

    /// Forget an entry; false when it was not registered any more.
    pub(crate) fn unregister(&self, id: u64) -> bool {
        self.held().remove(&id).is_some()
    }

    /// Take every entry still alive out of the registry.
    pub(crate) fn drain(&self) -> Vec<Arc<T>> {
        self.held()
            .drain()
            .filter_map(|(_, e)| e.upgrade())
            .collect()
    }

    /// How many entries are registered.
    pub(crate) fn len(&self) -> usize {
        self.held().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_unregister_drain() {
        let r = Registry::default();
        let (a, b) = (Arc::new(1), Arc::new(2));
        let (ia, ib) = (r.next_id(), r.next_id());
        assert_ne!(ia, ib);
        r.register(ia, &a);
        r.register(ib, &b);
        assert_eq!(r.len(), 2);
        assert!(r.unregister(ia));
        assert!(!r.unregister(ia));
        drop(b);
        assert!(r.drain().is_empty(), "a dropped entry is not handed out");
        assert_eq!(r.len(), 0);
    }
}
