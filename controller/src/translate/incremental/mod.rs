//! Translation by object. The Ingresses of our class fall into parts: sets of Ingresses
//! that share nothing one Ingress's translation reads of another's (a host, a wildcard TLS
//! host covering one, the default backend, an ACME Secret). Each part is translated on its
//! own and kept with the objects
//! its translation looked up (Secrets, Services and their EndpointSlices, Pods,
//! Namespaces); a change translates again only the parts of the Ingresses it touches and
//! the parts that looked up an object it touches, and the parts are merged into the
//! snapshot. Whatever is not an Ingress's (Gateway API, the default certificate, TCP
//! services) is translated whole every time.
//!
//! A translation made once ([`super::translate`], standalone mode) translates all
//! Ingresses as one part, through the same code. A snapshot never depends on which parts
//! were kept or how the Ingresses fell into parts: the tests translate random changes by
//! parts, afresh by parts and as one part, and compare.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::BuildHasher;
use std::sync::Arc;

use crate::stored::Ingress;
use imbl::{OrdMap, OrdSet};
use wharf_model::{
    Certificate, ClientAuthHost, Cluster, Host, Hosts, ObjectRef, Route, Snapshot, SniRoute, TlsHost, VirtualHost,
};

use super::ingress;
use super::ingress::annotations;
use super::lookups::Lookups;
use super::{Diagnostic, Options, Translation};
use crate::changes::{Changes, Key};
use crate::hashing::HashMap;
use crate::World;

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

/// What ties an Ingress to others: its links, and the wildcard suffixes of its hosts (a
/// host `a.example.com` has TLS when a TLS host `*.example.com` covers it, so it is
/// translated with the Ingresses of that wildcard, if any, but not with the other hosts
/// under `.example.com`).
#[derive(Debug, Default)]
struct Ties {
    links: Vec<Link>,
    under: Vec<String>,
}

/// What is kept of a part once its translation is merged: its members, and the keys of
/// what it put in the merged maps, to take it out again. The values are the merged maps'
/// alone; most parts have one Ingress, one host, one certificate and one cluster, and
/// 10,000 of them are kept.
#[derive(Debug)]
struct Kept {
    /// The Ingresses of the part, in key order.
    members: Box<[Key]>,
    /// The soonest expiry (Unix seconds) of a certificate the part serves that has not
    /// expired yet: past it, the part is translated again.
    expires: Option<i64>,
    virtual_hosts: Box<[Arc<VirtualHost>]>,
    tls_hosts: Box<[Host]>,
    certificates: Box<[String]>,
    clusters: Box<[String]>,
    /// What few parts have.
    rest: Option<Box<Rest>>,
}

/// What a part adds to the snapshot that the merged maps do not hold, gathered from the
/// parts by each snapshot.
#[derive(Debug)]
struct Rest {
    default_backend: Option<Box<Route>>,
    passthrough: Vec<SniRoute>,
    client_auth: Vec<ClientAuthHost>,
    diags: Vec<Diagnostic>,
    acme: Vec<super::acme::Demand>,
}

/// Ids of parts: most lookups lead to one. Sixteen bytes: a vector's 24 would grow every
/// entry of the lookups for the few that lead to more than one.
#[derive(Debug)]
#[allow(clippy::box_collection)]
enum Ids {
    One(u64),
    Many(Box<Vec<u64>>),
}

impl Ids {
    fn push(&mut self, id: u64) {
        match self {
            Ids::One(first) => *self = Ids::Many(Box::new(vec![*first, id])),
            Ids::Many(ids) => ids.push(id),
        }
    }

    fn iter(&self) -> std::slice::Iter<'_, u64> {
        match self {
            Ids::One(id) => std::slice::from_ref(id).iter(),
            Ids::Many(ids) => ids.iter(),
        }
    }

    /// Keeps the ids `keep` says; false when none is left.
    fn retain(&mut self, mut keep: impl FnMut(u64) -> bool) -> bool {
        match self {
            Ids::One(id) => keep(*id),
            Ids::Many(ids) => {
                ids.retain(|id| keep(*id));
                !ids.is_empty()
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.iter().len()
    }
}

/// Hashes the keys of the lookups kept by hash (with a seed of its own per process).
#[derive(Debug, Default)]
struct Hashes {
    state: foldhash::fast::RandomState,
    /// Every key hashes alike: tests that keys of one hash are told apart.
    #[cfg(test)]
    collide: bool,
}

impl Hashes {
    fn of<T: std::hash::Hash + ?Sized>(&self, t: &T) -> u64 {
        #[cfg(test)]
        if self.collide {
            return 0;
        }
        self.state.hash_one(t)
    }
}

/// Adds `id` to the ids under `key`.
fn push_id<K: std::hash::Hash + Eq>(map: &mut HashMap<K, Ids>, key: K, id: u64) {
    match map.entry(key) {
        std::collections::hash_map::Entry::Occupied(mut e) => e.get_mut().push(id),
        std::collections::hash_map::Entry::Vacant(e) => {
            e.insert(Ids::One(id));
        }
    }
}

/// The parts of the last translation, kept for the next.
///
/// It is kept for one set of [`Options`] (the time aside): the controller's.
///
/// The lookups from an Ingress, a link, a wildcard suffix or an object read to the parts
/// are not cleaned when a part goes: an id whose part is gone is skipped, and the lookups
/// are compacted once as many parts went as there are.
#[derive(Debug, Default)]
pub struct Incremental {
    parts: HashMap<u64, Kept>,
    next: u64,
    /// Parts gone since the lookups were last compacted.
    gone: usize,
    /// The parts of Ingresses, by the hash of the Ingress's key: a part's members say
    /// which of those under a hash has the Ingress.
    by_ingress: HashMap<u64, Ids>,
    by_link: HashMap<Link, u64>,
    /// The parts with a host under each wildcard suffix.
    by_under: HashMap<String, Ids>,
    /// The parts that read an object, by the hash of the [`Read`]: two reads of one hash
    /// would only make a change to one translate the readers of both again.
    readers: HashMap<u64, Ids>,
    hasher: Hashes,
    /// The Ingresses that check requests with an external authentication service.
    external: BTreeSet<Key>,
    /// All Ingresses make one part.
    whole: bool,
    /// How many Ingresses the last translation translated.
    translated: usize,
    /// What the parts add to the snapshot, merged.
    merged: Merged,
    /// No part's certificate expires before this (Unix seconds); a part that went may
    /// have set it earlier than need be.
    soonest: Option<i64>,
}

/// What the parts add to the snapshot, kept merged and in order: a part that goes takes its
/// own out, a new part puts its own in, and the snapshot copies what is there. Parts share
/// no host; they share a certificate or a cluster when they look up the same Secret or
/// Service, always with the same contents, so those held by more than one are counted.
#[derive(Debug, Default)]
struct Merged {
    virtual_hosts: Hosts<Arc<VirtualHost>>,
    tls_hosts: Hosts<TlsHost>,
    certificates: OrdMap<String, Certificate>,
    clusters: OrdMap<String, Cluster>,
    /// How many parts beyond the first hold a certificate (a cluster): only those more than
    /// one part holds are here.
    shared_certificates: HashMap<String, usize>,
    shared_clusters: HashMap<String, usize>,
    served: OrdSet<ObjectRef>,
    /// The parts with diagnostics, ACME demands, passthrough or client-certificate hosts,
    /// or the default backend: the rest the snapshot gathers from them.
    extras: BTreeSet<u64>,
}

impl Merged {
    /// Puts part `id` in; what is kept of it to take it out again.
    fn add(&mut self, id: u64, members: Vec<Key>, expires: Option<i64>, part: ingress::Part) -> Kept {
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
    fn remove(&mut self, id: u64, part: &Kept) {
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

    /// The entries of the lookups from Ingresses, links, wildcard suffixes and objects read
    /// to parts, those of parts gone included.
    #[cfg(test)]
    pub(super) fn lookups(&self) -> usize {
        let lists = self.by_under.values().chain(self.readers.values()).map(Ids::len).sum::<usize>();
        let ingresses = self.by_ingress.values().map(Ids::len).sum::<usize>();
        ingresses + self.by_link.len() + lists
    }

    /// Parts whose lookups by hash find every part under one hash.
    #[cfg(test)]
    pub(super) fn colliding() -> Incremental {
        Incremental { hasher: Hashes { collide: true, ..Hashes::default() }, ..Incremental::default() }
    }

    /// True when two keys hash apart.
    #[cfg(test)]
    pub(super) fn hash_apart(&self, a: &Key, b: &Key) -> bool {
        self.hasher.of(a) != self.hasher.of(b)
    }

    /// Translates all Ingresses as one part: a translation made once (no part is kept for
    /// a next one), and the reference the parts are tested against.
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
        let classes = super::class::Classes::new(&world.ingress_classes, opts);
        // Nothing kept: everything is translated (and that costs nothing when there are no
        // Ingresses).
        let mut everything = changes.all || self.parts.is_empty();
        let ours = Ours::new(world, &classes, everything);
        let parse = |key: &Key, ing: &Ingress| -> Parsed {
            let mut diags = Vec::new();
            let src = ObjectRef::new("Ingress", &key.0, &key.1);
            (annotations::parse(ing.metadata.annotations.as_ref(), &src, &opts.annotations, &mut diags), diags)
        };
        let external =
            |s: &annotations::Settings| matches!(s.auth.as_deref(), Some(annotations::AuthSetting::External(_)));

        // The Ingresses to translate again, read.
        let mut parsed: HashMap<Key, Parsed> = HashMap::default();
        if !everything {
            let mut dirty: BTreeSet<Key> = changes.ingresses.clone();
            for read in &changes.reads {
                let readers = self.readers.get(&self.hasher.of(read)).into_iter().flat_map(Ids::iter);
                for part in readers.filter_map(|id| self.parts.get(id)) {
                    dirty.extend(part.members.iter().cloned());
                }
            }
            dirty.extend(self.expired(opts.now));
            let had_external = !self.external.is_empty();
            for key in dirty {
                self.external.remove(&key);
                if let Some(ing) = ours.get(&key.0, &key.1) {
                    let p = parse(&key, ing);
                    if external(&p.0) {
                        self.external.insert(key.clone());
                    }
                    parsed.insert(key, p);
                } else if let Some(id) = self.part_of(&key) {
                    // Gone, or no longer ours: its part goes, the rest of it is translated
                    // again.
                    for member in self.remove(id) {
                        let Some(ing) = ours.get(&member.0, &member.1) else { continue };
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
            let hasher = std::mem::take(&mut self.hasher);
            *self = Incremental { whole: self.whole, hasher, ..Incremental::default() };
            parsed.clear();
            for ((ns, name), ing) in ours.all() {
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
        let mut ties: HashMap<Key, Ties> = HashMap::default();
        let mut queue: Vec<Key> = parsed.keys().cloned().collect();
        while let Some(key) = queue.pop() {
            let Some(ing) = ours.get(&key.0, &key.1) else { continue };
            let Some((settings, _)) = parsed.get(&key) else { continue };
            let own = ties_of(ing, settings, opts, all);
            let mut found: Vec<u64> = Vec::new();
            found.extend(self.part_of(&key));
            for link in &own.links {
                found.extend(self.live(self.by_link.get(link)));
                if let Link::Host(Host::Wildcard(suffix)) = link {
                    let under = self.by_under.get(suffix).into_iter().flat_map(Ids::iter);
                    found.extend(under.filter(|id| self.parts.contains_key(id)));
                }
            }
            for suffix in &own.under {
                found.extend(self.live(self.by_link.get(&Link::Host(Host::Wildcard(suffix.clone())))));
            }
            ties.insert(key, own);
            for id in found {
                for member in self.remove(id) {
                    if let Some(ing) = ours.get(&member.0, &member.1) {
                        if !parsed.contains_key(&member) {
                            let p = parse(&member, ing);
                            parsed.insert(member.clone(), p);
                            queue.push(member);
                        }
                    }
                }
            }
        }

        // The Ingresses to translate, in parts. A few (with the Gateway API routes, which
        // are translated whole) look the objects they refer to up where they are; many,
        // through maps built first.
        self.translated = ties.len();
        let lookups = Lookups::new(world, opts, previous, search_in_place(world, ties.len()));
        let mut users = super::ingress::auth::Users::default();
        for component in components(&ties) {
            let mut members: Vec<(&Ingress, annotations::Settings)> = Vec::with_capacity(component.len());
            let mut diags = Vec::new();
            for key in &component {
                let (Some(ing), Some((settings, d))) = (ours.get(&key.0, &key.1), parsed.remove(key)) else {
                    continue;
                };
                members.push((ing, settings));
                diags.extend(d);
            }
            members.sort_by(|a, b| a.0.age().cmp(&b.0.age()));
            if !self.whole {
                lookups.secrets.reads.start();
                lookups.backends.reads.start();
            }
            let part = ingress::part(&lookups, &mut users, &members, diags);
            let mut reads = lookups.secrets.reads.stop();
            reads.extend(lookups.backends.reads.stop());
            reads.sort_unstable();
            reads.dedup();
            let expires = part.certificates.iter().map(|(_, c)| c.not_after).filter(|t| *t >= opts.now).min();
            let id = self.next;
            self.next += 1;
            for key in &component {
                let Some(t) = ties.remove(key) else { continue };
                for link in t.links {
                    self.by_link.insert(link, id);
                }
                for suffix in t.under {
                    push_id(&mut self.by_under, suffix, id);
                }
                push_id(&mut self.by_ingress, self.hasher.of(key), id);
            }
            for read in reads {
                push_id(&mut self.readers, self.hasher.of(&read), id);
            }
            if let Some(e) = expires {
                self.soonest = Some(self.soonest.map_or(e, |s| s.min(e)));
            }
            let kept = self.merged.add(id, component, expires, part);
            self.parts.insert(id, kept);
        }
        self.compact_when_due();
        self.merge(world, &lookups)
    }

    /// Compacts the lookups once as many parts went as there are.
    fn compact_when_due(&mut self) {
        if self.gone > self.parts.len() {
            self.compact();
        }
    }

    /// The members of the parts that serve a certificate expired at `now` (Unix seconds).
    fn expired(&mut self, now: i64) -> Vec<Key> {
        let mut out = Vec::new();
        if self.soonest.is_some_and(|e| now > e) {
            self.soonest = None;
            for part in self.parts.values() {
                match part.expires {
                    Some(e) if now > e => out.extend(part.members.iter().cloned()),
                    Some(e) => self.soonest = Some(self.soonest.map_or(e, |s| s.min(e))),
                    None => {}
                }
            }
        }
        out
    }

    /// The part Ingress `key` is in (a part's members are in key order).
    fn part_of(&self, key: &Key) -> Option<u64> {
        let ids = self.by_ingress.get(&self.hasher.of(key)).into_iter().flat_map(Ids::iter);
        ids.copied().find(|id| self.parts.get(id).is_some_and(|p| p.members.binary_search(key).is_ok()))
    }

    /// `id`, if its part is still there.
    fn live(&self, id: Option<&u64>) -> Option<u64> {
        id.copied().filter(|id| self.parts.contains_key(id))
    }

    /// Drops the lookups of parts that are gone.
    fn compact(&mut self) {
        let parts = &self.parts;
        self.by_ingress.retain(|_, ids| ids.retain(|id| parts.contains_key(&id)));
        self.by_link.retain(|_, id| parts.contains_key(id));
        self.by_under.retain(|_, ids| ids.retain(|id| parts.contains_key(&id)));
        self.readers.retain(|_, ids| ids.retain(|id| parts.contains_key(&id)));
        self.gone = 0;
    }

    /// Removes part `id` and returns its members.
    fn remove(&mut self, id: u64) -> Vec<Key> {
        match self.parts.remove(&id) {
            Some(part) => {
                self.gone += 1;
                self.merged.remove(id, &part);
                part.members.into_vec()
            }
            None => Vec::new(),
        }
    }

    /// The snapshot of all parts, and of the rest of `world`.
    fn merge(&self, world: &World, lookups: &Lookups<'_>) -> Translation {
        let mut snapshot = Snapshot::default();
        let mut diags = Vec::new();
        let mut demands = Vec::new();
        for part in self.merged.extras.iter().filter_map(|id| self.parts.get(id)?.rest.as_deref()) {
            diags.extend(part.diags.iter().cloned());
            demands.extend(part.acme.iter().cloned());
            snapshot.passthrough.extend(part.passthrough.iter().cloned());
            snapshot.client_auth.extend(part.client_auth.iter().cloned());
            if let Some(route) = &part.default_backend {
                snapshot.default_backend = Some(Route::clone(route));
            }
        }
        snapshot.passthrough.sort_unstable_by(|a, b| a.host.cmp(&b.host));
        snapshot.client_auth.sort_by(|a, b| a.host.cmp(&b.host));
        // Clones of persistent maps: they share every entry with the merged ones.
        let m = &self.merged;
        snapshot.tls_hosts = m.tls_hosts.clone();
        snapshot.virtual_hosts = m.virtual_hosts.clone();
        snapshot.certificates = m.certificates.clone();
        snapshot.clusters = m.clusters.clone();
        let served = m.served.clone();
        let acme = super::acme::Demands::from_demands(demands);
        super::assemble::finish(world, lookups, snapshot, diags, acme, served)
    }
}

/// The Ingresses of our class by `(namespace, name)`, a missing namespace taken as
/// `default`: searched where they are when they are in key order and few will be looked
/// up (a change), else through a map built first.
pub(super) enum Ours<'a> {
    Ordered(&'a crate::kinds::Objects<Ingress>, &'a super::class::Classes<'a>),
    Map(HashMap<(&'a str, &'a str), &'a Ingress>),
}

impl<'a> Ours<'a> {
    pub(super) fn new(world: &'a World, classes: &'a super::class::Classes<'a>, many: bool) -> Self {
        // (`get` answers only when the objects are in key order.)
        if !many && world.ingresses.get("", "").is_some() {
            return Ours::Ordered(&world.ingresses, classes);
        }
        let mut map = HashMap::with_capacity_and_hasher(world.ingresses.len(), Default::default());
        for ing in world.ingresses.iter().filter(|i| classes.is_ours(i)) {
            map.insert(Self::key(ing), ing);
        }
        Ours::Map(map)
    }

    fn key(ing: &Ingress) -> (&str, &str) {
        let m = &ing.metadata;
        (m.namespace.as_deref().unwrap_or("default"), m.name.as_deref().unwrap_or(""))
    }

    pub(super) fn get(&self, ns: &str, name: &str) -> Option<&'a Ingress> {
        match self {
            Ours::Ordered(all, classes) => {
                let found = all.get(ns, name).flatten();
                // Stored without a namespace, its key is `("", name)`.
                let found = found.or_else(|| all.get("", name).flatten().filter(|_| ns == "default"));
                found.filter(|i| Self::key(i) == (ns, name) && classes.is_ours(i))
            }
            Ours::Map(m) => m.get(&(ns, name)).copied(),
        }
    }

    pub(super) fn all(&self) -> Box<dyn Iterator<Item = ((&'a str, &'a str), &'a Ingress)> + '_> {
        match self {
            Ours::Ordered(all, classes) => {
                Box::new(all.iter().filter(|i| classes.is_ours(i)).map(|i| (Self::key(i), i)))
            }
            Ours::Map(m) => Box::new(m.iter().map(|(k, i)| (*k, *i))),
        }
    }
}

/// Whether the objects are better searched where they are than through maps built first,
/// when `translated` Ingresses and all Gateway API routes look up the Secrets and Services
/// they refer to: a search touches about twice the log of the number of objects, a map is
/// built by touching each once.
pub(super) fn search_in_place(world: &World, translated: usize) -> bool {
    let w = world;
    let routes = w.http_routes.len() + w.grpc_routes.len() + w.tls_routes.len() + w.tcp_routes.len();
    let objects = w.secrets.len().max(w.services.len());
    (translated + routes).saturating_mul(32) < objects
}

/// What ties `ing` to the Ingresses it is translated with.
fn ties_of(ing: &Ingress, settings: &annotations::Settings, opts: &Options, all: bool) -> Ties {
    let mut out = Ties::default();
    if all {
        out.links.push(Link::All);
        return out;
    }
    let Some(spec) = &ing.spec else { return out };
    let host = |raw: Option<&str>| match raw {
        None | Some("") => Some(Host::Any),
        Some(h) => Host::parse(h).ok(),
    };
    for rule in spec.rules.iter().flatten() {
        let Some(h) = host(rule.host.as_deref()) else { continue };
        if let Host::Exact(name) = &h {
            out.under.extend(Host::wildcard_key(name).map(str::to_owned));
            if settings.from_to_www {
                let alias = ingress::www_alias(name);
                out.under.extend(Host::wildcard_key(&alias).map(str::to_owned));
                out.links.push(Link::Host(Host::Exact(alias)));
            }
        }
        out.links.push(Link::Host(h));
    }
    let ns = ing.metadata.namespace.as_deref().unwrap_or("default");
    for entry in spec.tls.iter().flatten() {
        for h in entry.hosts.iter().flatten().filter_map(|h| host(Some(h))) {
            // Its owner is decided with the wildcard covering it, if any.
            if let Host::Exact(name) = &h {
                out.under.extend(Host::wildcard_key(name).map(str::to_owned));
            }
            out.links.push(Link::Host(h));
        }
        if let (false, Some(secret)) = (opts.acme.issuers.is_empty(), entry.secret_name.as_deref()) {
            out.links.push(Link::AcmeSecret((ns.to_owned(), secret.to_owned())));
        }
    }
    if spec.default_backend.is_some() {
        out.links.push(Link::DefaultBackend);
    }
    out
}

/// The sets of Ingresses tied directly or through others, each in key order.
fn components(ties: &HashMap<Key, Ties>) -> Vec<Vec<Key>> {
    let keys: Vec<&Key> = ties.keys().collect();
    let mut parent: Vec<usize> = (0..keys.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    fn join(parent: &mut [usize], i: usize, j: usize) {
        let (a, b) = (root(parent, i), root(parent, j));
        parent[a] = b;
    }
    let mut first: HashMap<&Link, usize> = HashMap::default();
    for (i, key) in keys.iter().enumerate() {
        for link in &ties[*key].links {
            match first.get(link) {
                Some(&j) => join(&mut parent, i, j),
                None => {
                    first.insert(link, i);
                }
            }
        }
    }
    for (i, key) in keys.iter().enumerate() {
        for suffix in &ties[*key].under {
            if let Some(&j) = first.get(&Link::Host(Host::Wildcard(suffix.clone()))) {
                join(&mut parent, i, j);
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

#[cfg(test)]
mod tests;
