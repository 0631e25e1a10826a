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

use std::collections::BTreeSet;
use std::hash::BuildHasher;

use crate::stored::Ingress;
use wharf_model::{Host, ObjectRef, Route, Snapshot};

use super::ingress;
use super::ingress::annotations;
use super::lookups::Lookups;
use super::{Diagnostic, Options, Translation};
use crate::changes::{Changes, Key};
use crate::hashing::HashMap;
use crate::World;
use merged::{Kept, Merged};
use ties::{components, ties_of, Link, Ties};

mod merged;
mod ties;

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

/// An Ingress's annotations, read, and what reading them told.
type Parsed = (annotations::Settings, Vec<Diagnostic>);

/// Reads the annotations of the Ingress `key`.
fn parse(key: &Key, ing: &Ingress, opts: &Options) -> Parsed {
    let mut diags = Vec::new();
    let src = ObjectRef::new("Ingress", &key.0, &key.1);
    (annotations::parse(ing.metadata.annotations.as_ref(), &src, &opts.annotations, &mut diags), diags)
}

/// Whether the Ingress checks requests with an external authentication service.
fn external(s: &annotations::Settings) -> bool {
    matches!(s.auth.as_deref(), Some(annotations::AuthSetting::External(_)))
}

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
        let everything = changes.all || self.parts.is_empty();
        let ours = Ours::new(world, &classes, everything);
        let parsed = match everything {
            false => self.changed(&ours, opts, changes),
            true => None,
        };
        let mut parsed = parsed.unwrap_or_else(|| self.restart(&ours, opts));
        let ties = self.tie(&ours, opts, &mut parsed);
        // A few Ingresses (with the Gateway API routes, which are translated whole) look
        // the objects they refer to up where they are; many, through maps built first.
        self.translated = ties.len();
        let lookups = Lookups::new(world, opts, previous, search_in_place(world, ties.len()));
        self.translate_parts(&ours, opts, &lookups, ties, parsed);
        self.compact_when_due();
        self.merge(world, &lookups)
    }

    /// The Ingresses `changes` touched and the members of the parts that read an object
    /// it touched or serve an expired certificate, read; a part whose member went or is no
    /// longer ours goes, and its other members are read. `None` when everything is to be
    /// translated: an external authentication check came or went, and every Ingress
    /// links (or unlinks).
    fn changed(&mut self, ours: &Ours<'_>, opts: &Options, changes: &Changes) -> Option<HashMap<Key, Parsed>> {
        let mut parsed: HashMap<Key, Parsed> = HashMap::default();
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
                let p = parse(&key, ing, opts);
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
                        parsed.insert(member.clone(), parse(&member, ing, opts));
                    }
                }
            }
        }
        let has_external = !self.external.is_empty();
        (had_external == has_external).then_some(parsed)
    }

    /// Forgets every part and reads every Ingress of ours.
    fn restart(&mut self, ours: &Ours<'_>, opts: &Options) -> HashMap<Key, Parsed> {
        let hasher = std::mem::take(&mut self.hasher);
        *self = Incremental { whole: self.whole, hasher, ..Incremental::default() };
        let mut parsed = HashMap::default();
        for ((ns, name), ing) in ours.all() {
            let key = (ns.to_owned(), name.to_owned());
            let p = parse(&key, ing, opts);
            if external(&p.0) {
                self.external.insert(key.clone());
            }
            parsed.insert(key, p);
        }
        parsed
    }

    /// The ties of the Ingresses to translate. The parts they are in, or link to, go; their
    /// Ingresses are read into `parsed` and translated again with them. Parts are closed:
    /// an Ingress outside them shares no link with one inside.
    fn tie(&mut self, ours: &Ours<'_>, opts: &Options, parsed: &mut HashMap<Key, Parsed>) -> HashMap<Key, Ties> {
        let all = self.whole || !self.external.is_empty();
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
                            parsed.insert(member.clone(), parse(&member, ing, opts));
                            queue.push(member);
                        }
                    }
                }
            }
        }
        ties
    }

    /// Translates the tied Ingresses in parts, and keeps each part with what finds it
    /// again: its links, wildcard suffixes, members and the objects it read.
    fn translate_parts(
        &mut self,
        ours: &Ours<'_>,
        opts: &Options,
        lookups: &Lookups<'_>,
        mut ties: HashMap<Key, Ties>,
        mut parsed: HashMap<Key, Parsed>,
    ) {
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
            let part = ingress::part(lookups, &mut users, &members, diags);
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

#[cfg(test)]
mod tests;
