//! What changed in the cluster between two translations: the Ingresses, and the other
//! objects translation looked up. The watch index fills it; translation reads it.

use std::collections::BTreeSet;

/// An object's `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type Key = (String, String);

/// An object other than an Ingress that translating a part looked up.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Read {
    /// A Secret.
    Secret(Key),
    /// A Service, or its EndpointSlices (by their `kubernetes.io/service-name` label).
    Service(Key),
    /// A Pod (an endpoint's, for its mesh enrollment and identity).
    Pod(Key),
    /// A Namespace (mesh enrollment, waypoints).
    Namespace(String),
}

/// What changed since the last translation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Anything may have changed (a relist, an IngressClass, the first translation):
    /// every Ingress is translated again.
    pub all: bool,
    /// The Ingresses added, changed or deleted.
    pub ingresses: BTreeSet<Key>,
    /// The other objects added, changed or deleted.
    pub reads: BTreeSet<Read>,
}

impl Changes {
    /// Anything may have changed.
    pub fn everything() -> Changes {
        Changes { all: true, ..Changes::default() }
    }

    /// Adds `other`'s changes.
    pub fn extend(&mut self, other: Changes) {
        self.all |= other.all;
        self.ingresses.extend(other.ingresses);
        self.reads.extend(other.reads);
    }
}
