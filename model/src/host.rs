//! Host names as Ingress rules, TLS sections and Gateway API hostnames spell them: exact,
//! `*.` wildcard (one label for Ingress, one or more for Gateway API), or any host.

use std::fmt;

use serde::{Serialize, Serializer};

/// A host a rule or certificate applies to. Names are stored lower-case.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Host {
    /// Exactly this name, e.g. `foo.example.com`.
    Exact(String),
    /// Any name with exactly one more label in front of this suffix. The stored string is
    /// the suffix with its leading dot, e.g. `.example.com` for `*.example.com`.
    Wildcard(String),
    /// Any name with one or more labels in front of this suffix: a Gateway API wildcard
    /// (`*.example.com` covers `a.example.com` and `a.b.example.com`). Stored like
    /// [`Host::Wildcard`], with the leading dot.
    Suffix(String),
    /// Every host (a rule without `host`).
    Any,
}

/// Why a host name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// The name is empty.
    #[error("host name is empty")]
    Empty,
    /// The name is an IP address; Ingress hosts must be DNS names.
    #[error("host {0:?} is an IP address; Ingress hosts must be DNS names")]
    IpAddress(String),
    /// The name is not a DNS-1123 subdomain.
    #[error("host {0:?} is not a valid DNS name (lower-case letters, digits, '-' and '.', labels of 1-63 characters, optionally starting with '*.')")]
    Invalid(String),
}

impl Host {
    /// Parses a host as `spec.rules[].host` or `spec.tls[].hosts[]` spell it.
    pub fn parse(name: &str) -> Result<Host, HostError> {
        if name.is_empty() {
            return Err(HostError::Empty);
        }
        if name.parse::<std::net::IpAddr>().is_ok() {
            return Err(HostError::IpAddress(name.to_owned()));
        }
        let lower = name.to_ascii_lowercase();
        let (wildcard, rest) = match lower.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, lower.as_str()),
        };
        if !is_dns_name(rest) {
            return Err(HostError::Invalid(name.to_owned()));
        }
        Ok(if wildcard { Host::Wildcard(format!(".{rest}")) } else { Host::Exact(lower) })
    }

    /// Parses a Gateway API hostname (listener or route): as [`Host::parse`], but a
    /// wildcard covers one or more labels.
    pub fn parse_gateway(name: &str) -> Result<Host, HostError> {
        Ok(match Host::parse(name)? {
            Host::Wildcard(suffix) => Host::Suffix(suffix),
            other => other,
        })
    }

    /// The suffixes a name can be covered by, longest first, each with its leading dot:
    /// `a.b.example.com` -> `.b.example.com`, `.example.com`, `.com`.
    pub fn suffixes(name: &str) -> impl Iterator<Item = &str> {
        name.char_indices().filter(|&(i, c)| c == '.' && i > 0 && i + 1 < name.len()).map(move |(i, _)| &name[i..])
    }

    /// True when a request for `name` (already lower-case, without port) matches.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Host::Exact(h) => h == name,
            Host::Wildcard(suffix) => wildcard_matches(suffix, name),
            // Ending in the suffix without starting with a dot: a label comes before it.
            Host::Suffix(suffix) => name.ends_with(suffix.as_str()) && !name.starts_with('.'),
            Host::Any => true,
        }
    }

    /// The suffix (with leading dot) a wildcard host name would be looked up under:
    /// `a.example.com` -> `.example.com`. `None` for a name of one label.
    pub fn wildcard_key(name: &str) -> Option<&str> {
        let dot = name.find('.')?;
        let (first, suffix) = name.split_at(dot);
        (!first.is_empty() && suffix.len() > 1).then_some(suffix)
    }

    /// True when every name `inner` stands for, `self` matches too: any host covers all;
    /// a wildcard covers the names and narrower wildcards under it.
    pub fn covers(&self, inner: &Host) -> bool {
        match (self, inner) {
            (Host::Any, _) => true,
            (o, Host::Exact(n)) => o.matches(n),
            (Host::Suffix(o), Host::Suffix(i) | Host::Wildcard(i)) => i.ends_with(o.as_str()),
            (Host::Wildcard(o), Host::Wildcard(i)) => o == i,
            _ => false,
        }
    }

    /// Specificity rank for ordering: exact (0) before wildcards (1) before any (2).
    pub fn rank(&self) -> u8 {
        match self {
            Host::Exact(_) => 0,
            Host::Wildcard(_) | Host::Suffix(_) => 1,
            Host::Any => 2,
        }
    }
}

fn wildcard_matches(suffix: &str, name: &str) -> bool {
    Host::wildcard_key(name) == Some(suffix)
}

/// DNS-1123 subdomain: labels of [a-z0-9-], not starting or ending with '-', 1-63 chars,
/// total at most 253.
pub fn is_dns_name(name: &str) -> bool {
    if name.is_empty() || name.len() > 253 {
        return false;
    }
    name.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    })
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Exact(h) => f.write_str(h),
            Host::Wildcard(suffix) | Host::Suffix(suffix) => write!(f, "*{suffix}"),
            Host::Any => f.write_str("*"),
        }
    }
}

impl Serialize for Host {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_covers_the_names_it_matches_and_narrower_wildcards() {
        let g = |h: &str| Host::parse_gateway(h).unwrap();
        assert!(Host::Any.covers(&g("a.b")) && Host::Any.covers(&Host::Any));
        assert!(!g("a.b").covers(&Host::Any) && g("a.b").covers(&g("a.b")) && !g("a.b").covers(&g("x.b")));
        assert!(g("*.b.c").covers(&g("x.y.b.c")) && !g("*.b.c").covers(&g("b.c")));
        assert!(g("*.c").covers(&g("*.b.c")) && g("*.b.c").covers(&g("*.b.c")) && !g("*.b.c").covers(&g("*.c")));
        let ingress_wildcard = Host::parse("*.b.c").unwrap();
        assert!(g("*.c").covers(&ingress_wildcard) && ingress_wildcard.covers(&ingress_wildcard));
        assert!(!ingress_wildcard.covers(&g("*.b.c")), "one label does not cover several");
        assert!(ingress_wildcard.covers(&g("x.b.c")) && !ingress_wildcard.covers(&g("x.y.b.c")));
        assert!(!ingress_wildcard.covers(&Host::parse("*.x.b.c").unwrap()));
    }

    #[test]
    fn parses_exact_wildcard_and_rejects_bad_names() {
        assert_eq!(Host::parse("Foo.Example.com"), Ok(Host::Exact("foo.example.com".into())));
        assert_eq!(Host::parse("*.example.com"), Ok(Host::Wildcard(".example.com".into())));
        assert_eq!(Host::parse(""), Err(HostError::Empty));
        assert!(matches!(Host::parse("10.0.0.1"), Err(HostError::IpAddress(_))));
        for bad in ["foo_bar.com", "-a.com", "a-.com", "a..com", "*.", "*", "foo.*.com", "a.com."] {
            assert!(matches!(Host::parse(bad), Err(HostError::Invalid(_))), "{bad}");
        }
    }

    #[test]
    fn wildcard_covers_exactly_one_label() {
        let h = Host::parse("*.example.com").unwrap_or(Host::Any);
        assert!(h.matches("a.example.com"));
        assert!(!h.matches("example.com"));
        assert!(!h.matches("a.b.example.com"));
        assert!(!h.matches("aexample.com"));
        assert!(Host::Any.matches("anything"));
    }

    #[test]
    fn gateway_wildcards_cover_one_or_more_labels() {
        let h = Host::parse_gateway("*.Example.com").unwrap_or(Host::Any);
        assert_eq!(h, Host::Suffix(".example.com".into()));
        assert!(h.matches("a.example.com"));
        assert!(h.matches("a.b.example.com"));
        assert!(!h.matches("example.com"));
        assert!(!h.matches(".example.com"));
        assert!(!h.matches("aexample.com"));
        assert!(!h.matches("www.example.org"));
        assert_eq!(h.to_string(), "*.example.com");
        assert_eq!(h.rank(), 1);
        assert_eq!(Host::parse_gateway("a.b"), Ok(Host::Exact("a.b".into())));
        assert_eq!(Host::parse_gateway(""), Err(HostError::Empty));
    }

    #[test]
    fn suffixes_run_longest_first_and_skip_the_whole_name() {
        let all: Vec<&str> = Host::suffixes("a.b.example.com").collect();
        assert_eq!(all, [".b.example.com", ".example.com", ".com"]);
        assert_eq!(Host::suffixes("localhost").count(), 0);
        assert_eq!(Host::suffixes(".a").count(), 0);
        assert_eq!(Host::suffixes("a.").count(), 0);
    }

    #[test]
    fn displays_as_written() {
        for s in ["a.b", "*.a.b"] {
            assert_eq!(Host::parse(s).map(|h| h.to_string()), Ok(s.to_owned()));
        }
    }

    #[test]
    fn exact_hosts_match_only_themselves() {
        let h = Host::parse("a.example.com").unwrap();
        assert!(h.matches("a.example.com"));
        assert!(!h.matches("b.example.com"));
        assert!(Host::Any.matches("anything"));
    }

    #[test]
    fn wildcard_keys_need_a_first_label_and_a_suffix() {
        assert_eq!(Host::wildcard_key("a.example.com"), Some(".example.com"));
        assert_eq!(Host::wildcard_key(".example.com"), None, "no first label");
        assert_eq!(Host::wildcard_key("a."), None, "no suffix after the dot");
        assert_eq!(Host::wildcard_key("a.b"), Some(".b"));
        assert_eq!(Host::wildcard_key("localhost"), None);
    }

    #[test]
    fn ranks_order_exact_wildcard_any() {
        let ranks: Vec<u8> =
            [Host::parse("a.b").unwrap(), Host::parse("*.b").unwrap(), Host::Any].iter().map(Host::rank).collect();
        assert_eq!(ranks, [0, 1, 2]);
    }

    #[test]
    fn dns_names_follow_rfc_1123() {
        let label = "a".repeat(63);
        let name_253 = format!("{label}.{label}.{label}.{}", "b".repeat(61));
        assert_eq!(name_253.len(), 253);
        assert!(is_dns_name(&name_253));
        assert!(!is_dns_name(&format!("{name_253}c")), "254 characters");
        assert!(!is_dns_name(&"a".repeat(64)), "a label over 63");
        assert!(is_dns_name("a1-b.c2"));
        for bad in ["", "-a", "a-", "a..b", "A.b", "a_b", "a.-b"] {
            assert!(!is_dns_name(bad), "{bad}");
        }
    }
}
