//! Cross-origin resource sharing: which origins a route answers for, and the headers it
//! answers with (ingress-nginx `enable-cors` and `cors-*`).

use serde::Serialize;

/// A route's CORS policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cors {
    /// Origins allowed, as `scheme://host[:port]`, `scheme://*.domain[:port]` (one label
    /// in front of the domain, as in ingress-nginx), or `*` (any origin, answered with
    /// `*`, whether or not the request names one).
    pub allow_origins: Vec<String>,
    /// `Access-Control-Allow-Methods`.
    pub allow_methods: String,
    /// `Access-Control-Allow-Headers`.
    pub allow_headers: String,
    /// `Access-Control-Expose-Headers`; not sent when empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub expose_headers: String,
    /// `Access-Control-Allow-Credentials: true`.
    pub allow_credentials: bool,
    /// `Access-Control-Max-Age`, in seconds.
    pub max_age: u64,
}

impl Cors {
    /// The `Access-Control-Allow-Origin` value for a request from `origin` (`None`: the
    /// request has no `Origin`), or `None` when the origin is not allowed (the response
    /// then carries no CORS headers).
    ///
    /// `*` answers every request with `*`, one without `Origin` too, as ingress-nginx
    /// does. It stays `*` with credentials allowed: browsers then refuse credentialed
    /// requests, which is what makes `*` safe; echoing the origin back would let any site
    /// read what a signed-in user sees.
    pub fn allow_origin<'o>(&'o self, origin: Option<&'o str>) -> Option<&'o str> {
        if self.allow_origins.iter().any(|a| a == "*") {
            return Some("*");
        }
        let origin = origin?;
        self.allow_origins.iter().any(|a| origin_matches(a, origin)).then_some(origin)
    }
}

/// True when `origin` is `allowed`, or under its `*.` wildcard: same scheme and port,
/// exactly one label (letters, digits, `-`) in front of the domain. Compared
/// case-insensitively.
fn origin_matches(allowed: &str, origin: &str) -> bool {
    if allowed.eq_ignore_ascii_case(origin) {
        return true;
    }
    let Some((scheme, rest)) = allowed.split_once("://*.") else { return false };
    let Some((o_scheme, o_rest)) = origin.split_once("://") else { return false };
    if !scheme.eq_ignore_ascii_case(o_scheme) {
        return false;
    }
    let (o_rest, rest) = (o_rest.to_ascii_lowercase(), rest.to_ascii_lowercase());
    let label = o_rest.strip_suffix(&rest).and_then(|front| front.strip_suffix('.'));
    label.is_some_and(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cors(origins: &[&str]) -> Cors {
        Cors {
            allow_origins: origins.iter().map(|o| (*o).to_owned()).collect(),
            allow_methods: String::new(),
            allow_headers: String::new(),
            expose_headers: String::new(),
            allow_credentials: true,
            max_age: 0,
        }
    }

    #[test]
    fn origins_match_exactly_under_a_wildcard_or_any() {
        let c = cors(&["https://app.example", "https://*.shop.example", "http://local.test:8080"]);
        let cases = [
            ("https://app.example", true),
            ("HTTPS://APP.example", true),
            ("http://app.example", false),
            ("https://app.example:8443", false),
            ("https://a.shop.example", true),
            ("https://a-1.shop.example", true),
            ("https://a.b.shop.example", false),
            ("https://a_b.shop.example", false),
            ("https://evil.com/.shop.example", false),
            ("https://shop.example", false),
            ("https://evilshop.example", false),
            ("https://.shop.example", false),
            ("http://a.shop.example", false),
            ("https://a.shop.example:8443", false),
            ("http://local.test:8080", true),
            ("http://local.test", false),
            ("null", false),
        ];
        for (origin, want) in cases {
            assert_eq!(c.allow_origin(Some(origin)), want.then_some(origin), "{origin}");
        }
        assert_eq!(c.allow_origin(None), None);
        for any in [cors(&["*"]), cors(&["https://a.example", "*"])] {
            assert_eq!(any.allow_origin(Some("https://x.example")), Some("*"));
            assert_eq!(any.allow_origin(None), Some("*"));
        }
        assert_eq!(cors(&[]).allow_origin(Some("https://x.example")), None);
        assert_eq!(cors(&[]).allow_origin(None), None);
    }
}
