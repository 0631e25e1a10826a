//! Who owns a host on Wharf's own listeners: the one rule that keeps tenants apart.
//!
//! A host name (exact or wildcard, as written) belongs to the namespace that serves it
//! now, and a host nobody serves to the namespace of its oldest claim: an Ingress rule,
//! TLS or passthrough host, or a route of the edge Gateway. So editing an old object to
//! name a host another namespace serves takes nothing. An exact name under a wildcard
//! that another namespace claimed earlier belongs to the wildcard's namespace (one label
//! under an Ingress wildcard, any depth under an edge route's). The operator may assign hosts to namespaces instead
//! (`--host-owner`), and may let Ingresses of several namespaces share a host, as
//! ingress-nginx merged them (`--merge-hosts-across-namespaces`). A claim from another
//! namespace is refused with a diagnostic and never served; canaries, ACME orders and
//! www redirects follow the same owner.

use crate::translate::Reason;
use wharf_model::{Host, Snapshot};

use crate::hashing::HashMap;

/// Diagnostic reason of a claim on a host that belongs to another namespace.
pub const HOST_OWNED: Reason = Reason::HostOwnedByOtherNamespace;

/// The largest record written: a ConfigMap holds at most 1 MiB. Past it (some 20,000
/// hosts) the record is not updated and the replicas keep owners in memory only.
pub const RECORD_LIMIT: usize = 900 * 1024;

/// Which namespace served each host, as recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record(HashMap<Host, String>);

impl Record {
    /// Reads a record; lines that do not parse are left out.
    pub fn parse(text: &str) -> Record {
        let entries = text.lines().filter_map(|line| {
            let (host, ns) = line.split_once(' ')?;
            if !wharf_model::is_dns_name(ns) || ns.contains('.') {
                return None;
            }
            let host = match host {
                "*" => Host::Any,
                h => Host::parse(h).ok()?,
            };
            Some((host, ns.to_owned()))
        });
        Record(entries.collect())
    }

    /// The namespace recorded for `host`.
    pub fn get(&self, host: &Host) -> Option<&str> {
        self.0.get(host).map(String::as_str)
    }
}

/// The record of `snapshot`: who serves each of its hosts ([`holder`]), one line each.
pub fn record(snapshot: &Snapshot) -> String {
    let written = |h: &Host| match h {
        Host::Suffix(s) => Host::Wildcard(s.clone()),
        h => h.clone(),
    };
    let hosts = snapshot
        .virtual_hosts
        .iter()
        .map(|v| v.host.clone())
        .chain(snapshot.passthrough.iter().map(|p| p.host.clone()))
        .chain(snapshot.tls_hosts.iter().map(|t| t.host.clone()))
        .chain(snapshot.gateway_ports.iter().filter(|p| p.edge).flat_map(|p| {
            let routed = p.virtual_hosts.iter().filter(|v| !v.routes.is_empty()).map(|v| written(&v.host));
            routed.chain(p.passthrough.iter().map(|s| written(&s.host))).collect::<Vec<_>>()
        }));
    let mut lines: Vec<String> = hosts
        .filter_map(|h| {
            let ns = holder(snapshot, &h)?;
            Some(match &h {
                Host::Any => format!("* {ns}"),
                h => format!("{h} {ns}"),
            })
        })
        .collect();
    lines.sort_unstable();
    lines.dedup();
    let mut out = lines.join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

/// The namespace that keeps `host`: the one `record` names, else the one serving it in
/// `previous`.
pub fn keeper<'a>(record: &'a Record, previous: Option<&'a Snapshot>, host: &Host) -> Option<&'a str> {
    record.get(host).or_else(|| previous.and_then(|p| holder(p, host)))
}

/// A host pattern the operator assigns to a namespace: an exact name, or `*.domain` for
/// every name under `domain` (any depth), and the wildcards under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// `Exact(name)`, or `Suffix(".domain")` for `*.domain`.
    pattern: Host,
    /// The namespace that owns what the pattern covers.
    namespace: String,
}

impl Assignment {
    /// Parses `HOST=NAMESPACE`, where HOST is `shop.example.com` or `*.example.com`.
    pub fn parse(s: &str) -> Result<Assignment, String> {
        let (host, ns) = s.split_once('=').ok_or_else(|| format!("{s:?} is not HOST=NAMESPACE"))?;
        let (host, ns) = (host.trim(), ns.trim());
        if !wharf_model::is_dns_name(ns) || ns.contains('.') {
            return Err(format!("{s:?}: {ns:?} is not a namespace name"));
        }
        let pattern = match Host::parse_gateway(host).map_err(|e| format!("{s:?}: {e}"))? {
            Host::Any => return Err(format!("{s:?}: name a host or a *.domain")),
            h => h,
        };
        Ok(Assignment { pattern, namespace: ns.to_owned() })
    }

    /// How many characters of `host` the pattern takes: `None` when it does not cover it.
    fn covers(&self, host: &Host) -> Option<usize> {
        let name_or_suffix = match host {
            Host::Exact(n) => n.as_str(),
            Host::Wildcard(s) | Host::Suffix(s) => s.as_str(),
            Host::Any => return None,
        };
        match &self.pattern {
            Host::Exact(p) => (matches!(host, Host::Exact(_)) && p == name_or_suffix).then_some(usize::MAX),
            // `.example.com` covers `a.example.com`, `a.b.example.com`, and the wildcards
            // `.example.com` (`*.example.com`) and `.b.example.com`.
            // (An exact name never starts with a dot, so it is longer than the suffix.)
            Host::Suffix(p) => name_or_suffix.ends_with(p.as_str()).then_some(p.len()),
            Host::Wildcard(_) | Host::Any => None,
        }
    }
}

/// The operator's say over hosts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ownership {
    /// Hosts assigned to namespaces; the most specific pattern covering a host decides.
    pub assigned: Vec<Assignment>,
    /// Ingresses of any namespace may add paths to a host (ingress-nginx's merging);
    /// off by default.
    pub merge_across_namespaces: bool,
    /// The record ConfigMap read (namespace, name: the controller's own, named after its
    /// Lease and [`HOST_OWNERS_SUFFIX`](crate::well_known::HOST_OWNERS_SUFFIX)); `None`: owners are kept in memory only.
    pub record: Option<(String, String)>,
}

impl Ownership {
    /// The namespace the operator assigned `host` to, if any.
    pub fn assigned(&self, host: &Host) -> Option<&str> {
        self.assigned
            .iter()
            .filter_map(|a| Some((a.covers(host)?, a)))
            .max_by_key(|(n, _)| *n)
            .map(|(_, a)| &*a.namespace)
    }
}

/// Why a namespace may not serve a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The operator assigned it to this namespace.
    Assigned(String),
    /// This namespace claimed it first.
    Claimed(String),
}

impl Refusal {
    /// The message of the diagnostic, for `what` (e.g. "host shop.a.test").
    pub fn message(&self, what: &str) -> String {
        match self {
            Refusal::Assigned(ns) => format!(
                "{what} is assigned to namespace {ns} by the gateway's operator (--host-owner); it is not served from this namespace"
            ),
            Refusal::Claimed(ns) => format!(
                "{what} belongs to namespace {ns}, whose claim on it is older; it is not served from this namespace (a host is served from one namespace: ask the operator to assign it, or move the rule there)"
            ),
        }
    }
}

/// The namespace that serves `host` (as an Ingress writes it) in `snapshot`: its Ingress
/// rules, passthrough host, edge Gateway routes, or else its TLS host's certificate.
pub fn holder<'s>(snapshot: &'s Snapshot, host: &Host) -> Option<&'s str> {
    let written = |h: &Host| match h {
        Host::Suffix(s) => Host::Wildcard(s.clone()),
        h => h.clone(),
    };
    let rule = snapshot.virtual_hosts.get(host).and_then(|v| v.routes.first()).map(|r| &r.source);
    let sni = || snapshot.passthrough.iter().find(|p| p.host == *host).map(|p| &p.source);
    let edge = || {
        snapshot.gateway_ports.iter().filter(|p| p.edge).find_map(|p| {
            let routes = p.virtual_hosts.iter().filter(|v| written(&v.host) == *host).find_map(|v| v.routes.first());
            routes
                .map(|r| &r.source)
                .or_else(|| p.passthrough.iter().find(|s| written(&s.host) == *host).map(|s| &s.source))
        })
    };
    if let Some(source) = rule.or_else(sni).or_else(edge) {
        return Some(&source.namespace);
    }
    // A certificate of a TLS host is the Secret's, `namespace/name...`.
    let tls = snapshot.tls_hosts.get(host)?;
    tls.certificate.split_once('/').map(|(ns, _)| ns)
}

/// The first claim on each host, in the order claims are made (oldest first).
#[derive(Debug, Default)]
pub struct Claims {
    first: HashMap<Host, (usize, String)>,
    /// The wildcards (their `.domain`) whose first claim is a Gateway API route's: they
    /// cover names of any depth under the domain, not one label.
    deep: std::collections::HashSet<String>,
}

impl Claims {
    /// Records that the object of age rank `rank` (lower is older) in `namespace` claims
    /// `host`; claims must come oldest first.
    pub fn claim(&mut self, host: &Host, rank: usize, namespace: &str) {
        self.claim_as(host, rank, namespace, false);
    }

    /// [`Claims::claim`]; a wildcard claimed `deep` (by a Gateway API route) covers names
    /// of any depth under its domain.
    pub fn claim_as(&mut self, host: &Host, rank: usize, namespace: &str, deep: bool) {
        if !self.first.contains_key(host) {
            self.first.insert(host.clone(), (rank, namespace.to_owned()));
            if let (Host::Wildcard(suffix), true) = (host, deep) {
                self.deep.insert(suffix.clone());
            }
        }
    }

    /// The namespace whose claim on `host` came first.
    pub fn first(&self, host: &Host) -> Option<&str> {
        self.first.get(host).map(|(_, ns)| &**ns)
    }

    /// Whether `namespace` may serve `host`: the operator's assignment, else the first
    /// claim on it, and for an exact name, no older claim from elsewhere on the wildcard
    /// covering it. A host nobody claimed (an alias) may be served by anyone.
    pub fn may_serve(&self, host: &Host, namespace: &str, rules: &Ownership) -> Result<(), Refusal> {
        if let Some(owner) = rules.assigned(host) {
            return match owner == namespace {
                true => Ok(()),
                false => Err(Refusal::Assigned(owner.to_owned())),
            };
        }
        if rules.merge_across_namespaces {
            return Ok(());
        }
        let own = self.first.get(host);
        if let Some((_, owner)) = own.filter(|(_, owner)| owner != namespace) {
            return Err(Refusal::Claimed(owner.clone()));
        }
        if let Host::Exact(name) = host {
            // The wildcard one label up, and the deep ones further up.
            let immediate = Host::wildcard_key(name);
            let suffixes = name.match_indices('.').map(|(i, _)| &name[i..]).filter(|s| s.len() > 1);
            let covering = suffixes.filter(|s| Some(*s) == immediate || self.deep.contains(*s));
            for suffix in covering {
                let wildcard = self.first.get(&Host::Wildcard(suffix.to_owned()));
                if let Some((rank, owner)) = wildcard.filter(|(_, owner)| owner != namespace) {
                    if own.is_none_or(|(mine, _)| rank < mine) {
                        return Err(Refusal::Claimed(owner.clone()));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> Host {
        if s.is_empty() {
            return Host::Any;
        }
        Host::parse(s).unwrap()
    }

    #[test]
    fn the_first_claim_owns_a_host_and_an_older_wildcard_its_names() {
        let mut c = Claims::default();
        let rules = Ownership::default();
        c.claim(&h("shop.a.test"), 0, "a");
        c.claim(&h("*.a.test"), 1, "a");
        c.claim(&h("shop.a.test"), 2, "b");
        c.claim(&h("old.b.test"), 3, "b");
        c.claim(&h("*.b.test"), 4, "c");
        c.claim(&h("new.b.test"), 5, "b");
        c.claim(&h(""), 6, "b");
        c.claim(&h(""), 7, "a");
        assert_eq!(c.first(&h("shop.a.test")), Some("a"));
        assert_eq!(c.may_serve(&h("shop.a.test"), "a", &rules), Ok(()));
        assert_eq!(c.may_serve(&h("shop.a.test"), "b", &rules), Err(Refusal::Claimed("a".into())));
        // An exact name under another namespace's wildcard: the older claim decides.
        assert_eq!(c.may_serve(&h("evil.a.test"), "b", &rules), Err(Refusal::Claimed("a".into())));
        assert_eq!(c.may_serve(&h("old.b.test"), "b", &rules), Ok(()), "older than c's wildcard");
        assert_eq!(c.may_serve(&h("new.b.test"), "b", &rules), Err(Refusal::Claimed("c".into())));
        assert_eq!(c.may_serve(&h("*.b.test"), "c", &rules), Ok(()));
        assert_eq!(c.may_serve(&h("x.y.a.test"), "b", &rules), Ok(()), "a wildcard covers one label");
        // A Gateway API route's wildcard covers every depth.
        c.claim_as(&h("*.gw.test"), 8, "g", true);
        c.claim_as(&h("*.late.test"), 9, "g", true);
        c.claim(&h("x.y.late.test"), 1, "b");
        assert_eq!(c.may_serve(&h("x.y.gw.test"), "b", &rules), Err(Refusal::Claimed("g".into())));
        assert_eq!(c.may_serve(&h("a.b.c.gw.test"), "b", &rules), Err(Refusal::Claimed("g".into())));
        assert_eq!(c.may_serve(&h("x.y.gw.test"), "g", &rules), Ok(()));
        assert_eq!(c.may_serve(&h("x.y.late.test"), "b", &rules), Ok(()), "older than the route's wildcard");
        // The first claim decides whether a wildcard is deep.
        c.claim_as(&h("*.a.test"), 10, "g", true);
        assert_eq!(c.may_serve(&h("x.y.a.test"), "b", &rules), Ok(()), "a's Ingress wildcard came first");
        // Rules without host: one owner too.
        assert_eq!(c.may_serve(&h(""), "b", &rules), Ok(()));
        assert_eq!(c.may_serve(&h(""), "a", &rules), Err(Refusal::Claimed("b".into())));
        // A name nobody claimed.
        assert_eq!(c.may_serve(&h("free.test"), "z", &rules), Ok(()));
        // Merging lets every namespace in, but not past the operator.
        let merge = Ownership { merge_across_namespaces: true, ..Ownership::default() };
        assert_eq!(c.may_serve(&h("shop.a.test"), "b", &merge), Ok(()));
        assert_eq!(c.may_serve(&h("new.b.test"), "b", &merge), Ok(()));
        let assigned = Ownership {
            assigned: vec![Assignment::parse("*.a.test=b").unwrap()],
            merge_across_namespaces: true,
            ..Ownership::default()
        };
        assert_eq!(c.may_serve(&h("shop.a.test"), "b", &assigned), Ok(()));
        assert_eq!(c.may_serve(&h("shop.a.test"), "a", &assigned), Err(Refusal::Assigned("b".into())));
    }

    #[test]
    fn the_most_specific_assignment_decides() {
        let rules = Ownership {
            assigned: ["*.example.com=web", "*.shop.example.com=shop", "api.shop.example.com=api"]
                .iter()
                .map(|a| Assignment::parse(a).unwrap())
                .collect(),
            ..Ownership::default()
        };
        let owner = |s: &str| rules.assigned(&h(s));
        assert_eq!(owner("a.example.com"), Some("web"));
        assert_eq!(owner("a.b.example.com"), Some("web"), "any depth");
        assert_eq!(owner("*.example.com"), Some("web"), "the wildcard itself");
        assert_eq!(owner("x.shop.example.com"), Some("shop"));
        assert_eq!(owner("*.shop.example.com"), Some("shop"));
        assert_eq!(owner("shop.example.com"), Some("web"), "the name itself is under *.example.com only");
        assert_eq!(owner("api.shop.example.com"), Some("api"), "an exact name first");
        assert_eq!(owner("example.com"), None, "*.example.com does not cover example.com");
        assert_eq!(owner("other.org"), None);
        assert_eq!(owner(""), None);
        let gw = rules.assigned(&Host::parse_gateway("*.a.example.com").unwrap());
        assert_eq!(gw, Some("web"), "a Gateway API wildcard");
        let mut c = Claims::default();
        c.claim(&h("a.example.com"), 0, "other");
        assert_eq!(c.may_serve(&h("a.example.com"), "other", &rules), Err(Refusal::Assigned("web".into())));
        assert_eq!(c.may_serve(&h("a.example.com"), "web", &rules), Ok(()), "even when another claimed it first");
    }

    #[test]
    fn a_record_reads_back_what_it_wrote_and_comes_before_memory() {
        let r = Record::parse("*.a.test a\n* b\nshop.a.test a\nnot a host!\nlonely\n");
        assert_eq!(r.get(&h("*.a.test")), Some("a"));
        assert_eq!(r.get(&Host::Any), Some("b"));
        assert_eq!(r.get(&h("shop.a.test")), Some("a"));
        assert_eq!(r.0.len(), 3, "lines that do not parse are left out");
        let mut served = Snapshot::default();
        let route = |ns: &str| {
            wharf_model::Route::forward(
                wharf_model::PathMatch::prefix("/").unwrap(),
                "c",
                wharf_model::ObjectRef::new("Ingress", ns, "i"),
            )
        };
        for (host, ns) in [("shop.a.test", "z"), ("new.c.test", "c")] {
            served
                .virtual_hosts
                .insert(std::sync::Arc::new(wharf_model::VirtualHost { host: h(host), routes: vec![route(ns)] }));
        }
        assert_eq!(keeper(&r, Some(&served), &h("shop.a.test")), Some("a"), "the record first");
        assert_eq!(keeper(&r, Some(&served), &h("new.c.test")), Some("c"), "then what is served");
        assert_eq!(keeper(&r, None, &h("new.c.test")), None);
        assert_eq!(record(&served), "new.c.test c\nshop.a.test z\n");
        assert_eq!(Record::parse(&record(&served)).get(&h("shop.a.test")), Some("z"));
        assert_eq!(record(&Snapshot::default()), "");
    }

    #[test]
    fn assignments_parse_a_host_and_a_namespace() {
        assert!(Assignment::parse("shop.example.com=shop").is_ok());
        assert!(Assignment::parse(" *.example.com = web ").is_ok());
        for bad in [
            "shop.example.com",
            "=web",
            "shop.example.com=",
            "*=web",
            "shop.example.com=Web",
            "a.test=a.b",
            "10.0.0.1=a",
        ] {
            assert!(Assignment::parse(bad).is_err(), "{bad}");
        }
        let m = Refusal::Claimed("a".into()).message("host shop.a.test");
        assert!(m.starts_with("host shop.a.test belongs to namespace a"), "{m}");
        let m = Refusal::Assigned("a".into()).message("TLS host x");
        assert!(m.contains("assigned to namespace a") && m.contains("--host-owner"), "{m}");
    }
}
