//! Translation by object. The Ingresses of our class fall into parts: sets of Ingresses
//! that share nothing one Ingress's translation reads of another's (a host, the default
//! backend, an ACME Secret). Each part is translated on its own and kept with the objects
//! its translation looked up (Secrets, Services and their EndpointSlices, Pods,
//! Namespaces); a change translates again only the parts of the Ingresses it touches and
//! the parts that looked up an object it touches, and the parts are merged into the
//! snapshot. Whatever is not an Ingress's (Gateway API, the default certificate, TCP
//! services) is translated whole every time.
//!
//! A fresh translation ([`super::translate`]) goes through the same parts, so a snapshot
//! never depends on which parts were kept: the tests translate random changes both ways
//! and compare.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::networking::v1::Ingress;
use wharf_model::{
    Certificate, ClientAuthHost, Cluster, Host, ObjectRef, Route, Snapshot, SniRoute, TlsHost, VirtualHost,
};

use super::{annotations, HashMap, HashSet};
use super::{Diagnostic, Lookups, Options, Translation, World};

/// `(namespace, name)`.
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
        if !self.all {
            self.ingresses.extend(other.ingresses);
            self.reads.extend(other.reads);
        }
    }
}

/// Records the objects looked up while it is on.
#[derive(Debug, Default)]
pub(super) struct Recorder(RefCell<Option<Vec<Read>>>);

impl Recorder {
    /// Records the lookup `read` makes, when recording.
    pub(super) fn read(&self, read: impl FnOnce() -> Read) {
        if let Some(reads) = self.0.borrow_mut().as_mut() {
            reads.push(read());
        }
    }

    fn start(&self) {
        *self.0.borrow_mut() = Some(Vec::new());
    }

    fn stop(&self) -> Vec<Read> {
        self.0.borrow_mut().take().unwrap_or_default()
    }
}

/// What a part's Ingresses share with each other: two Ingresses with a link in common are
/// translated together.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Link {
    /// A host of a rule, a TLS entry or a `from-to-www-redirect` alias (any host: a rule
    /// without one). Routes of one host and path go to the oldest Ingress; TLS hosts,
    /// canaries, regex hosts and client certificates are per host.
    Host(Host),
    /// `spec.defaultBackend`: the oldest Ingress's wins.
    DefaultBackend,
    /// A Secret ordered from ACME: one order for all Ingresses naming it.
    AcmeSecret(Key),
    /// Every Ingress, while one checks requests with an external authentication service
    /// (whose routing depends on every host served).
    All,
}

/// The translation of one part.
#[derive(Debug, Clone, Default)]
pub(super) struct Part {
    /// The Ingresses of the part.
    pub(super) members: Vec<Key>,
    pub(super) links: Vec<Link>,
    pub(super) reads: Vec<Read>,
    /// The soonest expiry (Unix seconds) of a certificate the part serves that has not
    /// expired yet: past it, the part is translated again.
    pub(super) expires: Option<i64>,
    pub(super) virtual_hosts: Vec<VirtualHost>,
    pub(super) tls_hosts: Vec<TlsHost>,
    pub(super) default_backend: Option<Box<Route>>,
    pub(super) passthrough: Vec<SniRoute>,
    pub(super) client_auth: Vec<ClientAuthHost>,
    pub(super) certificates: BTreeMap<String, Certificate>,
    pub(super) clusters: BTreeMap<String, Cluster>,
    pub(super) diags: Vec<Diagnostic>,
    /// The Ingresses served (their status is ours to write).
    pub(super) served: Vec<ObjectRef>,
    /// The Ingresses whose routes redirect to HTTPS even without TLS (`force-ssl-redirect`).
    pub(super) forced: Vec<ObjectRef>,
    pub(super) acme: Vec<crate::acme::Demand>,
}

/// The parts of the last translation, kept for the next.
///
/// It is kept for one set of [`Options`] (the time aside): the controller's.
#[derive(Debug, Default)]
pub struct Incremental {
    parts: HashMap<u64, Part>,
    next: u64,
    by_ingress: HashMap<Key, u64>,
    by_link: HashMap<Link, u64>,
    readers: BTreeSet<(Read, u64)>,
    /// The Ingresses that check requests with an external authentication service.
    external: BTreeSet<Key>,
    /// All Ingresses make one part.
    whole: bool,
    /// How many Ingresses the last translation translated.
    translated: usize,
}

type Parsed = (annotations::Settings, Vec<Diagnostic>);

impl Incremental {
    /// How many parts the Ingresses fall into.
    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// How many Ingresses the last translation translated (the others' parts were kept).
    pub fn translated(&self) -> usize {
        self.translated
    }

    /// Translates all Ingresses as one part, as the reference the parts are tested against.
    #[cfg(test)]
    pub(super) fn whole() -> Incremental {
        Incremental { whole: true, ..Incremental::default() }
    }

    /// Translates `world`, of which `changes` changed since the last call, translating
    /// again only the parts they can affect. `previous`: as for [`super::translate`].
    pub fn translate(
        &mut self,
        world: &World,
        opts: &Options,
        previous: Option<&Snapshot>,
        changes: &Changes,
    ) -> Translation {
        let lookups = Lookups::new(world, opts, previous);
        let classes = super::class::Classes::new(&world.ingress_classes, opts);
        let mut ours: HashMap<(&str, &str), &Ingress> =
            HashMap::with_capacity_and_hasher(world.ingresses.len(), Default::default());
        for ing in world.ingresses.iter().filter(|i| classes.is_ours(i)) {
            let m = &ing.metadata;
            ours.insert((m.namespace.as_deref().unwrap_or("default"), m.name.as_deref().unwrap_or("")), ing);
        }
        let parse = |key: &Key, ing: &Ingress| -> Parsed {
            let mut diags = Vec::new();
            let src = ObjectRef::new("Ingress", &key.0, &key.1);
            (annotations::parse(ing.metadata.annotations.as_ref(), &src, &opts.annotations, &mut diags), diags)
        };
        let external =
            |s: &annotations::Settings| matches!(s.auth.as_deref(), Some(annotations::AuthSetting::External(_)));

        // The Ingresses to translate again, read.
        let mut parsed: HashMap<Key, Parsed> = HashMap::default();
        // Nothing kept: everything is translated (and that costs nothing when there are no
        // Ingresses).
        let mut everything = changes.all || self.parts.is_empty();
        if !everything {
            let mut dirty: BTreeSet<Key> = changes.ingresses.clone();
            for read in &changes.reads {
                let readers = self.readers.range((read.clone(), 0)..=(read.clone(), u64::MAX));
                for part in readers.filter_map(|(_, id)| self.parts.get(id)) {
                    dirty.extend(part.members.iter().cloned());
                }
            }
            let now = opts.now;
            for part in self.parts.values().filter(|p| p.expires.is_some_and(|e| now > e)) {
                dirty.extend(part.members.iter().cloned());
            }
            let had_external = !self.external.is_empty();
            for key in dirty {
                self.external.remove(&key);
                if let Some(ing) = ours.get(&(key.0.as_str(), key.1.as_str())) {
                    let p = parse(&key, ing);
                    if external(&p.0) {
                        self.external.insert(key.clone());
                    }
                    parsed.insert(key, p);
                } else if let Some(id) = self.by_ingress.get(&key).copied() {
                    // Gone, or no longer ours: its part goes, the rest of it is translated
                    // again.
                    for member in self.remove(id) {
                        let Some(ing) = ours.get(&(member.0.as_str(), member.1.as_str())) else { continue };
                        if !parsed.contains_key(&member) {
                            parsed.insert(member.clone(), parse(&member, ing));
                        }
                    }
                }
            }
            // An external authentication check came or went: every Ingress links (or
            // unlinks).
            let has_external = !self.external.is_empty();
            everything = had_external != has_external;
        }
        if everything {
            *self = Incremental { next: self.next, whole: self.whole, ..Incremental::default() };
            parsed.clear();
            for (&(ns, name), ing) in &ours {
                let key = (ns.to_owned(), name.to_owned());
                let p = parse(&key, ing);
                if external(&p.0) {
                    self.external.insert(key.clone());
                }
                parsed.insert(key, p);
            }
        }
        let all = self.whole || !self.external.is_empty();

        // The parts the Ingresses to translate are in, or link to, go; their Ingresses are
        // translated again with them. Parts are closed: an Ingress outside them shares no
        // link with one inside.
        let mut links: HashMap<Key, Vec<Link>> = HashMap::default();
        let mut queue: Vec<Key> = parsed.keys().cloned().collect();
        while let Some(key) = queue.pop() {
            let Some(ing) = ours.get(&(key.0.as_str(), key.1.as_str())) else { continue };
            let Some((settings, _)) = parsed.get(&key) else { continue };
            let own = links_of(ing, settings, opts, all);
            let mut found = Vec::new();
            if let Some(id) = self.by_ingress.get(&key) {
                found.push(*id);
            }
            found.extend(own.iter().filter_map(|l| self.by_link.get(l).copied()));
            links.insert(key, own);
            for id in found {
                for member in self.remove(id) {
                    if let Some(ing) = ours.get(&(member.0.as_str(), member.1.as_str())) {
                        if !parsed.contains_key(&member) {
                            let p = parse(&member, ing);
                            parsed.insert(member.clone(), p);
                            queue.push(member);
                        }
                    }
                }
            }
        }

        // The Ingresses to translate, in parts.
        self.translated = links.len();
        let mut users = super::auth::Users::default();
        for component in components(&links) {
            let mut members: Vec<(&Ingress, annotations::Settings)> = Vec::with_capacity(component.len());
            let mut diags = Vec::new();
            for key in &component {
                let (Some(ing), Some((settings, d))) =
                    (ours.get(&(key.0.as_str(), key.1.as_str())), parsed.remove(key))
                else {
                    continue;
                };
                members.push((ing, settings));
                diags.extend(d);
            }
            members.sort_by(|a, b| super::age_key(a.0).cmp(&super::age_key(b.0)));
            lookups.secrets.reads.start();
            lookups.backends.reads.start();
            let mut part = super::ingress_part(&lookups, &mut users, &members, diags);
            let mut reads = lookups.secrets.reads.stop();
            reads.extend(lookups.backends.reads.stop());
            reads.sort_unstable();
            reads.dedup();
            part.reads = reads;
            part.expires = part.certificates.values().map(|c| c.not_after).filter(|t| *t >= opts.now).min();
            part.links = component.iter().flat_map(|k| links.get(k)).flatten().cloned().collect();
            part.links.sort_unstable();
            part.links.dedup();
            part.members = component;
            self.insert(part);
        }
        self.merge(world, &lookups)
    }

    /// Removes part `id` and returns its members.
    fn remove(&mut self, id: u64) -> Vec<Key> {
        let Some(part) = self.parts.remove(&id) else { return Vec::new() };
        for key in &part.members {
            self.by_ingress.remove(key);
        }
        for link in &part.links {
            self.by_link.remove(link);
        }
        for read in part.reads {
            self.readers.remove(&(read, id));
        }
        part.members
    }

    fn insert(&mut self, part: Part) {
        let id = self.next;
        self.next += 1;
        for key in &part.members {
            self.by_ingress.insert(key.clone(), id);
        }
        for link in &part.links {
            self.by_link.insert(link.clone(), id);
        }
        for read in &part.reads {
            self.readers.insert((read.clone(), id));
        }
        self.parts.insert(id, part);
    }

    /// The snapshot of all parts, and of the rest of `world`.
    fn merge(&self, world: &World, lookups: &Lookups<'_>) -> Translation {
        let parts = || self.parts.values();
        let mut snapshot = Snapshot::default();
        let mut virtual_hosts = Vec::with_capacity(parts().map(|p| p.virtual_hosts.len()).sum());
        let mut tls_hosts = Vec::with_capacity(parts().map(|p| p.tls_hosts.len()).sum());
        let mut certificates = Vec::with_capacity(parts().map(|p| p.certificates.len()).sum());
        let mut clusters = Vec::with_capacity(parts().map(|p| p.clusters.len()).sum());
        let mut served = Vec::with_capacity(parts().map(|p| p.served.len()).sum());
        let mut diags = Vec::new();
        let mut forced: HashSet<&ObjectRef> = HashSet::default();
        let mut demands = Vec::new();
        for part in parts() {
            virtual_hosts.extend(part.virtual_hosts.iter().cloned());
            tls_hosts.extend(part.tls_hosts.iter().cloned());
            certificates.extend(part.certificates.iter().map(|(k, v)| (k.clone(), v.clone())));
            clusters.extend(part.clusters.iter().map(|(k, v)| (k.clone(), v.clone())));
            served.extend(part.served.iter().cloned());
            diags.extend(part.diags.iter().cloned());
            forced.extend(part.forced.iter());
            demands.extend(part.acme.iter().cloned());
            snapshot.passthrough.extend(part.passthrough.iter().cloned());
            snapshot.client_auth.extend(part.client_auth.iter().cloned());
            if let Some(route) = &part.default_backend {
                snapshot.default_backend = Some(Route::clone(route));
            }
        }
        // Parts share no host, certificate id or cluster id with different contents.
        tls_hosts.sort_unstable_by(|a: &TlsHost, b| a.host.cmp(&b.host));
        virtual_hosts.sort_unstable_by(|a: &VirtualHost, b| a.host.cmp(&b.host));
        snapshot.passthrough.sort_unstable_by(|a, b| a.host.cmp(&b.host));
        snapshot.client_auth.sort_by(|a, b| a.host.cmp(&b.host));
        served.sort_unstable();
        let tls = super::TlsCovered::new(&tls_hosts);
        for vh in &mut virtual_hosts {
            if tls.covers(&vh.host) {
                continue;
            }
            for r in &mut vh.routes {
                // `force-ssl-redirect`: its Ingress redirects without TLS too.
                r.https_redirect &= forced.contains(&r.source);
            }
        }
        snapshot.tls_hosts = tls_hosts;
        snapshot.virtual_hosts = virtual_hosts;
        snapshot.certificates = certificates.into_iter().collect();
        snapshot.clusters = clusters.into_iter().collect();
        let acme = super::acme::Demands::from_demands(demands);
        super::finish(world, lookups, snapshot, diags, acme, served)
    }
}

/// What `ing` shares with the Ingresses it is translated with.
fn links_of(ing: &Ingress, settings: &annotations::Settings, opts: &Options, all: bool) -> Vec<Link> {
    if all {
        return vec![Link::All];
    }
    let mut out = Vec::new();
    let Some(spec) = &ing.spec else { return out };
    let host = |raw: Option<&str>| match raw {
        None | Some("") => Some(Host::Any),
        Some(h) => Host::parse(h).ok(),
    };
    for rule in spec.rules.iter().flatten() {
        let Some(h) = host(rule.host.as_deref()) else { continue };
        if let (true, Host::Exact(name)) = (settings.from_to_www, &h) {
            let alias = match name.strip_prefix("www.") {
                Some(bare) => bare.to_owned(),
                None => format!("www.{name}"),
            };
            out.push(Link::Host(Host::Exact(alias)));
        }
        out.push(Link::Host(h));
    }
    let ns = ing.metadata.namespace.as_deref().unwrap_or("default");
    for entry in spec.tls.iter().flatten() {
        out.extend(entry.hosts.iter().flatten().filter_map(|h| host(Some(h))).map(Link::Host));
        if let (false, Some(secret)) = (opts.acme.issuers.is_empty(), entry.secret_name.as_deref()) {
            out.push(Link::AcmeSecret((ns.to_owned(), secret.to_owned())));
        }
    }
    if spec.default_backend.is_some() {
        out.push(Link::DefaultBackend);
    }
    out
}

/// The sets of Ingresses linked directly or through others, each in key order.
fn components(links: &HashMap<Key, Vec<Link>>) -> Vec<Vec<Key>> {
    let keys: Vec<&Key> = links.keys().collect();
    let mut parent: Vec<usize> = (0..keys.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut first: HashMap<&Link, usize> = HashMap::default();
    for (i, key) in keys.iter().enumerate() {
        for link in &links[*key] {
            match first.get(link) {
                Some(&j) => {
                    let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                    parent[a] = b;
                }
                None => {
                    first.insert(link, i);
                }
            }
        }
    }
    let mut groups: BTreeMap<usize, Vec<Key>> = BTreeMap::new();
    for (i, key) in keys.iter().enumerate() {
        let r = root(&mut parent, i);
        groups.entry(r).or_default().push((*key).clone());
    }
    groups
        .into_values()
        .map(|mut g| {
            g.sort_unstable();
            g
        })
        .collect()
}
