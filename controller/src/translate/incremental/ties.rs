//! What ties the Ingresses of a part together: the links they share, and the sets of
//! Ingresses tied directly or through others.

use std::collections::BTreeMap;

use wharf_model::Host;

use super::super::ingress::{self, annotations};
use super::super::Options;
use crate::changes::Key;
use crate::hashing::HashMap;
use crate::stored::Ingress;

/// What a part's Ingresses share with each other: two Ingresses with a link in common are
/// translated together.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Link {
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
pub(super) struct Ties {
    pub(super) links: Vec<Link>,
    pub(super) under: Vec<String>,
}

/// What ties `ing` to the Ingresses it is translated with.
pub(super) fn ties_of(ing: &Ingress, settings: &annotations::Settings, opts: &Options, all: bool) -> Ties {
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
        if h != Host::Any {
            for alias in &settings.server_aliases {
                if let Host::Exact(name) = alias {
                    out.under.extend(Host::wildcard_key(name).map(str::to_owned));
                }
                out.links.push(Link::Host(alias.clone()));
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
pub(super) fn components(ties: &HashMap<Key, Ties>) -> Vec<Vec<Key>> {
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
