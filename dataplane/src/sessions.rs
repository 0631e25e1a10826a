//! The server-side TLS session cache (session IDs, for clients that do not take tickets):
//! bounded, oldest evicted first, and holding memory only for the sessions it has.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use rustls::server::StoresServerSessions;

/// At most `capacity` sessions; storing one more evicts the oldest. Unlike a cache sized
/// up front, an idle gateway holds nothing here.
#[derive(Debug)]
pub(crate) struct SessionCache {
    capacity: usize,
    sessions: Mutex<Sessions>,
}

#[derive(Debug, Default)]
struct Sessions {
    by_id: HashMap<Vec<u8>, Vec<u8>>,
    /// Session ids, oldest first.
    order: VecDeque<Vec<u8>>,
}

impl SessionCache {
    /// A cache of at most `capacity` sessions (none when 0).
    pub(crate) fn new(capacity: usize) -> SessionCache {
        SessionCache { capacity, sessions: Mutex::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sessions> {
        // The map stays consistent whatever panicked while holding it.
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sessions held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    /// True when no session is held.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl StoresServerSessions for SessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        if self.capacity == 0 {
            return false;
        }
        let mut s = self.lock();
        if let Some(held) = s.by_id.get_mut(&key) {
            *held = value;
            return true;
        }
        if s.by_id.len() >= self.capacity {
            if let Some(oldest) = s.order.pop_front() {
                s.by_id.remove(&oldest);
            }
        }
        s.order.push_back(key.clone());
        s.by_id.insert(key, value);
        true
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lock().by_id.get(key).cloned()
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let mut s = self.lock();
        let value = s.by_id.remove(key)?;
        if let Some(i) = s.order.iter().position(|k| k == key) {
            s.order.remove(i);
        }
        Some(value)
    }

    fn can_cache(&self) -> bool {
        self.capacity > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> Vec<u8> {
        vec![n; 32]
    }

    #[test]
    fn sessions_are_kept_up_to_the_capacity_then_the_oldest_goes() {
        let c = SessionCache::new(2);
        assert!(c.can_cache() && c.is_empty());
        assert!(c.put(id(1), b"one".to_vec()));
        assert!(c.put(id(2), b"two".to_vec()));
        assert_eq!((c.get(&id(1)), c.get(&id(2)), c.len()), (Some(b"one".to_vec()), Some(b"two".to_vec()), 2));
        // A session stored again keeps its place in line.
        assert!(c.put(id(1), b"one again".to_vec()));
        assert_eq!(c.len(), 2);
        assert!(c.put(id(3), b"three".to_vec()));
        assert_eq!(c.get(&id(1)), None, "the oldest is evicted");
        assert_eq!((c.get(&id(2)), c.get(&id(3)), c.len()), (Some(b"two".to_vec()), Some(b"three".to_vec()), 2));
        assert!(c.put(id(4), b"four".to_vec()));
        assert_eq!(
            (c.get(&id(2)), c.get(&id(3)), c.get(&id(4))),
            (None, Some(b"three".to_vec()), Some(b"four".to_vec()))
        );
    }

    #[test]
    fn a_taken_session_is_gone_and_frees_its_place() {
        let c = SessionCache::new(2);
        c.put(id(1), b"one".to_vec());
        c.put(id(2), b"two".to_vec());
        assert_eq!(c.take(&id(1)), Some(b"one".to_vec()));
        assert_eq!((c.take(&id(1)), c.get(&id(1)), c.len()), (None, None, 1));
        // Its place in line went with it: the next session evicts nothing.
        c.put(id(3), b"three".to_vec());
        assert_eq!((c.get(&id(2)), c.get(&id(3))), (Some(b"two".to_vec()), Some(b"three".to_vec())));
        c.put(id(4), b"four".to_vec());
        assert_eq!((c.get(&id(2)), c.len()), (None, 2), "then the oldest left is evicted");
        assert_eq!(c.take(&id(9)), None);
    }

    #[test]
    fn a_cache_of_no_sessions_stores_none() {
        let c = SessionCache::new(0);
        assert!(!c.can_cache());
        assert!(!c.put(id(1), b"one".to_vec()));
        assert_eq!((c.get(&id(1)), c.len()), (None, 0));
    }
}
