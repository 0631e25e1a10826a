//! What the parts add to the snapshot, kept merged, and what is kept of each part to
//! take its own out again.

use std::collections::BTreeSet;
use std::sync::Arc;

use imbl::{OrdMap, OrdSet};
use wharf_model::{
    Certificate, ClientAuthHost, Cluster, Host, Hosts, ObjectRef, Route, SniRoute, TlsHost, VirtualHost,
};

use super::super::ingress;
use super::super::Diagnostic;
use crate::changes::Key;
use crate::hashing::HashMap;

/// What is kept of a part once its translation is merged: its members, and the keys of
/// what it put in the merged maps, to take it out again. The values are the merged maps'
/// alone; most parts have one Ingress, one host, one certificate and one cluster, and
/// 10,000 of them are kept.
#[derive(Debug)]
pub(super) struct Kept {
    /// The Ingresses of the part, in key order.
    pub(super) members: Box<[Key]>,
    /// The soonest expiry (Unix seconds) of a certificate the part serves that has not
    /// expired yet: past it, the part is translated again.
    pub(super) expires: Option<i64>,
    pub(super) virtual_hosts: Box<[Arc<VirtualHost>]>,
    pub(super) tls_hosts: Box<[Host]>,
    pub(super) certificates: Box<[String]>,
    pub(super) clusters: Box<[String]>,
    /// What few parts have.
    pub(super) rest: Option<Box<Rest>>,
}

/// What a part adds to the snapshot that the merged maps do not hold, gathered from the
/// parts by each snapshot.
#[derive(Debug)]
pub(super) struct Rest {
    pub(super) default_backend: Option<Box<Route>>,
    pub(super) passthrough: Vec<SniRoute>,
    pub(super) client_auth: Vec<ClientAuthHost>,
    pub(super) diags: Vec<Diagnostic>,
    pub(super) acme: Vec<super::super::acme::Demand>,
}

/// What the parts add to the snapshot, kept merged and in order: a part that goes takes its
/// own out, a new part puts its own in, and the snapshot copies what is there. Parts share
/// no host; they share a certificate or a cluster when they look up the same Secret or
/// Service, always with the same contents, so those held by more than one are counted.
#[derive(Debug, Default)]
pub(super) struct Merged {
    pub(super) virtual_hosts: Hosts<Arc<VirtualHost>>,
    pub(super) tls_hosts: Hosts<TlsHost>,
    pub(super) certificates: OrdMap<String, Certificate>,
    pub(super) clusters: OrdMap<String, Cluster>,
    /// How many parts beyond the first hold a certificate (a cluster): only those more than
    /// one part holds are here.
    pub(super) shared_certificates: HashMap<String, usize>,
    pub(super) shared_clusters: HashMap<String, usize>,
    pub(super) served: OrdSet<ObjectRef>,
    /// The parts with diagnostics, ACME demands, passthrough or client-certificate hosts,
    /// or the default backend: the rest the snapshot gathers from them.
    pub(super) extras: BTreeSet<u64>,
}

impl Merged {
    /// Puts part `id` in; what is kept of it to take it out again.
    pub(super) fn add(&mut self, id: u64, members: Vec<Key>, expires: Option<i64>, part: ingress::Part) -> Kept {
        let ingress::Part {
            virtual_hosts,
            tls_hosts,
            default_backend,
            passthrough,
            client_auth,
            certificates,
            clusters,
            diags,
            served,
            acme,
        } = part;
        let rest = if diags.is_empty()
            && acme.is_empty()
            && passthrough.is_empty()
            && client_auth.is_empty()
            && default_backend.is_none()
        {
            None
        } else {
            self.extras.insert(id);
            Some(Box::new(Rest { default_backend, passthrough, client_auth, diags, acme }))
        };
        for vh in &virtual_hosts {
            self.virtual_hosts.insert(Arc::clone(vh));
        }
        let tls_hosts = tls_hosts
            .into_iter()
            .map(|t| {
                let host = t.host.clone();
                self.tls_hosts.insert(t);
                host
            })
            .collect();
        let certificates =
            certificates.into_iter().map(|(k, c)| hold(&mut self.certificates, &mut self.shared_certificates, k, c));
        let certificates = certificates.collect();
        let clusters = clusters.into_iter().map(|(k, c)| hold(&mut self.clusters, &mut self.shared_clusters, k, c));
        let clusters = clusters.collect();
        for served in served {
            self.served.insert(served);
        }
        Kept {
            members: members.into_boxed_slice(),
            expires,
            virtual_hosts: virtual_hosts.into_boxed_slice(),
            tls_hosts,
            certificates,
            clusters,
            rest,
        }
    }

    /// Takes part `id` out.
    pub(super) fn remove(&mut self, id: u64, part: &Kept) {
        self.extras.remove(&id);
        for vh in &part.virtual_hosts {
            self.virtual_hosts.remove(&vh.host);
        }
        for host in &part.tls_hosts {
            self.tls_hosts.remove(host);
        }
        for k in &part.certificates {
            release(&mut self.certificates, &mut self.shared_certificates, k);
        }
        for k in &part.clusters {
            release(&mut self.clusters, &mut self.shared_clusters, k);
        }
        // A part's served Ingresses are some of its members, and no other part has them.
        for (ns, name) in &part.members {
            self.served.remove(&ObjectRef::new("Ingress", ns, name));
        }
    }
}

/// One more part holds `value` under `key`: the first puts it in `map`, the others count
/// in `shared`. Returns the key.
fn hold<V: Clone>(map: &mut OrdMap<String, V>, shared: &mut HashMap<String, usize>, key: String, value: V) -> String {
    if map.contains_key(&key) {
        *shared.entry(key.clone()).or_insert(0) += 1;
    } else {
        map.insert(key.clone(), value);
    }
    key
}

/// One part fewer holds `key`: the last takes it out of `map`.
fn release<V: Clone>(map: &mut OrdMap<String, V>, shared: &mut HashMap<String, usize>, key: &str) {
    match shared.get_mut(key) {
        Some(n) if *n > 1 => *n -= 1,
        Some(_) => {
            shared.remove(key);
        }
        None => {
            map.remove(key);
        }
    }
}
