//! Entries keyed by their host, kept in a persistent map: a clone shares every entry, a
//! change copies only the path to the entry it touches, and two tables that share most of
//! their entries are compared (or their differences listed) by skipping what they share.
//! The controller keeps the table of all its hosts and patches it per change; each
//! snapshot is a clone of it, and the data plane finds what changed between two snapshots
//! without looking at the hosts they share.

use imbl::OrdMap;
use serde::{Serialize, Serializer};

use crate::Host;

/// An entry of a [`Hosts`] table: it knows its host.
pub trait Hosted: Clone {
    /// The key of this entry.
    fn host(&self) -> &Host;
}

/// One entry per host, in host order.
#[derive(Clone)]
pub struct Hosts<T: Hosted>(OrdMap<Host, T>);

/// How an entry differs between two tables (see [`Hosts::diff`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Change<'a, T> {
    /// Only in the newer table.
    Added(&'a T),
    /// In both, not equal.
    Updated {
        /// The older table's.
        old: &'a T,
        /// The newer table's.
        new: &'a T,
    },
    /// Only in the older table.
    Removed(&'a T),
}

impl<T: Hosted> Hosts<T> {
    /// An empty table.
    pub fn new() -> Self {
        Hosts(OrdMap::new())
    }

    /// How many hosts it holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds no host.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The entries, in host order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator + '_ {
        self.0.values()
    }

    /// The entry of the first host.
    pub fn first(&self) -> Option<&T> {
        self.0.values().next()
    }

    /// The entry of `host`.
    pub fn get(&self, host: &Host) -> Option<&T> {
        self.0.get(host)
    }

    /// Puts `entry` in, replacing (and returning) the one of its host.
    pub fn insert(&mut self, entry: T) -> Option<T> {
        self.0.insert(entry.host().clone(), entry)
    }

    /// Takes the entry of `host` out.
    pub fn remove(&mut self, host: &Host) -> Option<T> {
        self.0.remove(host)
    }

    /// Whether both are the same table (one a clone of the other, unchanged since).
    pub fn ptr_eq(&self, other: &Self) -> bool {
        self.0.ptr_eq(&other.0)
    }
}

impl<T: Hosted + PartialEq> Hosts<T> {
    /// What changed from `self` to `newer`, in host order. Entries the tables share
    /// (`newer` a clone of `self`, patched) are skipped without being compared, so two
    /// tables that differ in a few hosts are compared in about that many steps.
    pub fn diff<'a>(&'a self, newer: &'a Self) -> impl Iterator<Item = Change<'a, T>> + 'a {
        self.0.diff(&newer.0).map(|d| match d {
            imbl::ordmap::DiffItem::Add(_, v) => Change::Added(v),
            imbl::ordmap::DiffItem::Update { old: (_, old), new: (_, new) } => Change::Updated { old, new },
            imbl::ordmap::DiffItem::Remove(_, v) => Change::Removed(v),
        })
    }
}

impl<T: Hosted> Default for Hosts<T> {
    fn default() -> Self {
        Hosts::new()
    }
}

/// Later entries replace earlier ones of the same host.
impl<T: Hosted> FromIterator<T> for Hosts<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Hosts(iter.into_iter().map(|e| (e.host().clone(), e)).collect())
    }
}

impl<T: Hosted> From<Vec<T>> for Hosts<T> {
    fn from(entries: Vec<T>) -> Self {
        entries.into_iter().collect()
    }
}

impl<'a, T: Hosted> IntoIterator for &'a Hosts<T> {
    type Item = &'a T;
    type IntoIter = imbl::ordmap::Values<'a, Host, T, imbl::shared_ptr::DefaultSharedPtr>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.values()
    }
}

impl<T: Hosted + PartialEq> PartialEq for Hosts<T> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<T: Hosted + std::fmt::Debug> std::fmt::Debug for Hosts<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A list of the entries, in host order.
impl<T: Hosted + Serialize> Serialize for Hosts<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TlsHost;

    fn tls(host: &str, certificate: &str) -> TlsHost {
        TlsHost { host: Host::parse(host).unwrap(), certificate: certificate.into() }
    }

    #[test]
    fn one_entry_per_host_in_host_order() {
        let t: Hosts<TlsHost> = vec![tls("b.com", "1"), tls("a.com", "2"), tls("b.com", "3")].into();
        let entries: Vec<_> = t.iter().map(|e| (e.host.to_string(), e.certificate.as_str())).collect();
        assert_eq!(entries, [("a.com".to_owned(), "2"), ("b.com".to_owned(), "3")], "the later b.com wins");
        assert_eq!(t.len(), 2);
        assert!(!t.is_empty() && Hosts::<TlsHost>::new().is_empty());
        assert_eq!(t.first().map(|e| e.certificate.as_str()), Some("2"));
        assert_eq!(Hosts::<TlsHost>::default().first(), None);
        assert_eq!(format!("{t:?}"), format!("{:?}", [tls("a.com", "2"), tls("b.com", "3")]));
        assert_eq!(t.get(&Host::parse("a.com").unwrap()).map(|e| e.certificate.as_str()), Some("2"));
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            serde_json::to_string(&[tls("a.com", "2"), tls("b.com", "3")]).unwrap()
        );
    }

    #[test]
    fn the_diff_of_a_patched_clone_lists_what_changed() {
        let base: Hosts<TlsHost> = (0..2000).map(|i| tls(&format!("h{i:04}.com"), "c")).collect();
        let mut next = base.clone();
        assert!(next.ptr_eq(&base) && next == base);
        assert_eq!(next.diff(&base).count(), 0);
        next.insert(tls("h0007.com", "d"));
        assert!(!next.ptr_eq(&base), "patched, no longer the same table");
        next.insert(tls("new.com", "c"));
        next.remove(&Host::parse("h1999.com").unwrap());
        next.insert(tls("h0100.com", "c")); // equal to the old entry: not a change
        let changes: Vec<String> = base
            .diff(&next)
            .map(|c| match c {
                Change::Added(n) => format!("+{}", n.host),
                Change::Updated { old, new } => format!("{}:{}>{}", new.host, old.certificate, new.certificate),
                Change::Removed(o) => format!("-{}", o.host),
            })
            .collect();
        assert_eq!(changes, ["h0007.com:c>d", "-h1999.com", "+new.com"]);
        assert_ne!(base, next);
        assert_eq!(base.len(), 2000);
    }
}
