//! Values by host, looked up most specific first: the one table shape behind HTTP routing,
//! certificate selection and passthrough by SNI.

/// Keyed by configured names; lookups hash what a client sends, but never insert it.
/// Persistent: a clone shares every entry, and the next config's table is the last one's,
/// cloned and patched where hosts changed.
type HashMap<K, V> = imbl::GenericHashMap<K, V, foldhash::fast::RandomState, imbl::shared_ptr::DefaultSharedPtr>;

use wharf_model::Host;

/// How a name matched a [`HostMap`] entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostMatch {
    /// The exact name.
    Exact,
    /// A wildcard (Ingress one label, or Gateway API one or more).
    Wildcard,
    /// The entry for every host.
    Any,
}

/// Values keyed by [`Host`].
#[derive(Debug, Clone)]
pub struct HostMap<T: Clone> {
    exact: HashMap<String, T>,
    /// Ingress wildcards, keyed by the suffix after the first label (with its dot).
    wildcard: HashMap<String, T>,
    /// Gateway API wildcards, keyed by their suffix (with its dot).
    suffix: HashMap<String, T>,
    any: Option<T>,
}

impl<T: Clone> Default for HostMap<T> {
    fn default() -> Self {
        HostMap { exact: HashMap::default(), wildcard: HashMap::default(), suffix: HashMap::default(), any: None }
    }
}

impl<T: Clone> HostMap<T> {
    /// Sets the value for `host`; the previous one is returned.
    pub fn insert(&mut self, host: &Host, value: T) -> Option<T> {
        match host {
            Host::Exact(h) => self.exact.insert(h.clone(), value),
            Host::Wildcard(s) => self.wildcard.insert(s.clone(), value),
            Host::Suffix(s) => self.suffix.insert(s.clone(), value),
            Host::Any => self.any.replace(value),
        }
    }

    /// Takes the value of `host` out.
    pub fn remove(&mut self, host: &Host) -> Option<T> {
        match host {
            Host::Exact(h) => self.exact.remove(h),
            Host::Wildcard(s) => self.wildcard.remove(s),
            Host::Suffix(s) => self.suffix.remove(s),
            Host::Any => self.any.take(),
        }
    }

    /// The value set for `host` itself.
    pub fn get_host(&self, host: &Host) -> Option<&T> {
        match host {
            Host::Exact(h) => self.exact.get(h),
            Host::Wildcard(s) => self.wildcard.get(s),
            Host::Suffix(s) => self.suffix.get(s),
            Host::Any => self.any.as_ref(),
        }
    }

    /// True when there is no entry.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty() && self.suffix.is_empty() && self.any.is_none()
    }

    /// The value for exactly this (lower-case) name, without wildcards.
    pub fn exact(&self, name: &str) -> Option<&T> {
        self.exact.get(name)
    }

    /// Every entry covering `name` (lower-case), most specific first: the exact name, then
    /// wildcards by longest suffix (at equal suffixes the one-label Ingress wildcard
    /// first), then the entry for every host.
    pub fn candidates<'a, 'n>(&'a self, name: &'n str) -> impl Iterator<Item = (&'a T, HostMatch)> + use<'a, 'n, T> {
        let exact = self.exact.get(name).map(|v| (v, HostMatch::Exact));
        let first_suffix = Host::wildcard_key(name);
        let wildcards = Host::suffixes(name).flat_map(move |s| {
            let one_label = if Some(s) == first_suffix { self.wildcard.get(s) } else { None };
            one_label.into_iter().chain(self.suffix.get(s)).map(|v| (v, HostMatch::Wildcard))
        });
        let any = self.any.as_ref().map(|v| (v, HostMatch::Any));
        exact.into_iter().chain(wildcards).chain(any)
    }

    /// The most specific entry covering `name`.
    pub fn get(&self, name: &str) -> Option<(&T, HostMatch)> {
        self.candidates(name).next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(hosts: &[&str]) -> HostMap<String> {
        let mut m = HostMap::default();
        for h in hosts {
            let host = match h.strip_prefix("gw:") {
                Some(g) => Host::parse_gateway(g).unwrap_or(Host::Any),
                None if h.is_empty() => Host::Any,
                None => Host::parse(h).unwrap_or(Host::Any),
            };
            m.insert(&host, (*h).to_owned());
        }
        m
    }

    fn all<'a>(m: &'a HostMap<String>, name: &'a str) -> Vec<&'a str> {
        m.candidates(name).map(|(v, _)| v.as_str()).collect()
    }

    #[test]
    fn most_specific_first() {
        let m =
            map(&["a.b.example.com", "*.b.example.com", "gw:*.b.example.com", "gw:*.example.com", "*.example.com", ""]);
        assert_eq!(
            all(&m, "a.b.example.com"),
            ["a.b.example.com", "*.b.example.com", "gw:*.b.example.com", "gw:*.example.com", ""]
        );
        assert_eq!(m.get("a.b.example.com").map(|(_, k)| k), Some(HostMatch::Exact));
        assert_eq!(all(&m, "x.b.example.com"), ["*.b.example.com", "gw:*.b.example.com", "gw:*.example.com", ""]);
        assert_eq!(m.get("x.b.example.com").map(|(_, k)| k), Some(HostMatch::Wildcard));
        assert_eq!(all(&m, "c.example.com"), ["*.example.com", "gw:*.example.com", ""]);
        assert_eq!(all(&m, "example.com"), [""]);
        assert_eq!(m.get("other").map(|(v, k)| (v.as_str(), k)), Some(("", HostMatch::Any)));
        assert_eq!(m.exact("a.b.example.com").map(String::as_str), Some("a.b.example.com"));
        assert_eq!(m.exact("x.b.example.com"), None);
    }

    #[test]
    fn ingress_wildcards_cover_one_label_gateway_wildcards_more() {
        let m = map(&["*.example.com", "gw:*.test.com"]);
        assert!(m.get("a.b.example.com").is_none());
        assert_eq!(all(&m, "a.b.test.com"), ["gw:*.test.com"]);
        assert!(m.get("test.com").is_none());
    }

    #[test]
    fn a_map_is_empty_only_without_any_entry() {
        assert!(HostMap::<String>::default().is_empty());
        for h in ["a.example.com", "*.example.com", "gw:*.example.com", ""] {
            assert!(!map(&[h]).is_empty(), "{h:?}");
        }
    }

    #[test]
    fn insert_replaces_and_returns_the_old_value() {
        let mut m = HostMap::default();
        assert_eq!(m.insert(&Host::Any, 1), None);
        assert_eq!(m.insert(&Host::Any, 2), Some(1));
        assert_eq!(m.insert(&Host::Suffix(".a".into()), 3), None);
        assert_eq!(m.insert(&Host::Suffix(".a".into()), 4), Some(3));
        assert_eq!(m.get("x.a").map(|(v, _)| *v), Some(4));
    }

    #[test]
    fn a_clone_patched_leaves_the_original_as_it_was() {
        let m = map(&["a.example.com", "*.example.com", "gw:*.test.com", ""]);
        let mut next = m.clone();
        for h in ["a.example.com", "*.example.com", "gw:*.test.com", ""] {
            let host = match h.strip_prefix("gw:") {
                Some(g) => Host::parse_gateway(g).unwrap_or(Host::Any),
                None if h.is_empty() => Host::Any,
                None => Host::parse(h).unwrap_or(Host::Any),
            };
            assert_eq!(next.remove(&host).as_deref(), Some(h));
            assert_eq!(next.remove(&host), None);
        }
        assert!(next.is_empty());
        assert_eq!(all(&m, "a.example.com"), ["a.example.com", "*.example.com", ""]);
        assert_eq!(all(&m, "a.b.test.com"), ["gw:*.test.com", ""]);
    }
}
