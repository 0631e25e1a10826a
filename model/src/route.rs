//! HTTP routes: what a request must look like (a [`RouteMatch`]) and what happens to it
//! (an [`Action`]). Ingress rules and Gateway API HTTPRoute rules both become these.

use serde::Serialize;

use crate::{PathMatch, Pattern, PatternError};

/// What a request must look like for a route to take it: every part must match.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct RouteMatch {
    /// The path (query excluded).
    pub path: PathMatch,
    /// The request method, upper-case as sent (`GET`); any when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Headers that must be present with these values.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HeaderMatch>,
    /// Query parameters that must be present with these values.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub query: Vec<QueryMatch>,
}

/// A header the request must carry. Names compare case-insensitively (stored lower-case),
/// values exactly; with the header repeated, the first value counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct HeaderMatch {
    /// Lower-case header name.
    pub name: String,
    /// The exact value (a pattern's source when `pattern` is set).
    pub value: String,
    /// The whole value must match this instead (Gateway API `RegularExpression`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pattern: Option<Pattern>,
}

impl HeaderMatch {
    /// Header `name` (lower-case) with exactly `value`.
    pub fn exact(name: &str, value: &str) -> HeaderMatch {
        HeaderMatch { name: name.to_owned(), value: value.to_owned(), pattern: None }
    }

    /// Header `name` (lower-case) with a value `pattern` matches whole.
    pub fn regex(name: &str, pattern: Pattern) -> HeaderMatch {
        HeaderMatch { name: name.to_owned(), value: pattern.as_str().to_owned(), pattern: Some(pattern) }
    }

    /// A `Cookie` header carrying cookie `name` with exactly `value`, among any others.
    pub fn cookie(name: &str, value: &str) -> Result<HeaderMatch, PatternError> {
        let source = format!(r"(?:.*;)?\s*{}={}\s*(?:;.*)?", regex::escape(name), regex::escape(value));
        Ok(HeaderMatch::regex("cookie", Pattern::full(&source)?))
    }

    /// True when `value` is one this match takes.
    pub fn takes(&self, value: &[u8]) -> bool {
        match &self.pattern {
            None => value == self.value.as_bytes(),
            Some(p) => std::str::from_utf8(value).is_ok_and(|v| p.is_match(v)),
        }
    }
}

/// A query parameter the request must carry. Names and values compare exactly, as sent
/// (not percent-decoded); with the parameter repeated, the first value counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct QueryMatch {
    /// The parameter name.
    pub name: String,
    /// The exact value (a pattern's source when `pattern` is set).
    pub value: String,
    /// The whole value must match this instead (Gateway API `RegularExpression`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pattern: Option<Pattern>,
}

impl QueryMatch {
    /// Parameter `name` with exactly `value`.
    pub fn exact(name: &str, value: &str) -> QueryMatch {
        QueryMatch { name: name.to_owned(), value: value.to_owned(), pattern: None }
    }

    /// Parameter `name` with a value `pattern` matches whole.
    pub fn regex(name: &str, pattern: Pattern) -> QueryMatch {
        QueryMatch { name: name.to_owned(), value: pattern.as_str().to_owned(), pattern: Some(pattern) }
    }

    /// True when `value` is one this match takes.
    pub fn takes(&self, value: &str) -> bool {
        match &self.pattern {
            None => value == self.value,
            Some(p) => p.is_match(value),
        }
    }
}

impl RouteMatch {
    /// A match on the path alone.
    pub fn path(path: PathMatch) -> RouteMatch {
        RouteMatch { path, method: None, headers: Vec::new(), query: Vec::new() }
    }

    /// Ordering key for precedence, as Gateway API defines it for HTTPRoute: an exact
    /// path, then the longest path, then a method match, then the most header matches,
    /// then the most query matches. For Ingress paths (no other parts) this is the
    /// Kubernetes rule: longest path first, `Exact` before `Prefix` at equal length (a
    /// matching prefix can never be longer than a matching exact path). Sorting ascending
    /// by this key, stably, yields the order routes are tried in; ties keep the order the
    /// translator gave (oldest object first).
    pub fn precedence_key(&self) -> impl Ord {
        let exact = matches!(self.path, PathMatch::Exact(_));
        (
            std::cmp::Reverse(exact),
            std::cmp::Reverse(self.path.path().len()),
            std::cmp::Reverse(self.method.is_some()),
            std::cmp::Reverse(self.headers.len()),
            std::cmp::Reverse(self.query.len()),
        )
    }
}

/// What a route does with the requests it takes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Proxy to a backend.
    Forward(Forward),
    /// Answer with a redirect.
    Redirect(Redirect),
    /// Answer with a fixed status and body.
    Respond(Respond),
}

impl Action {
    /// Forward to one cluster, unchanged.
    pub fn forward(cluster: &str) -> Action {
        Action::Forward(Forward::to(vec![WeightedBackend::new(cluster, 1)]))
    }
}

impl Forward {
    /// Forward to `backends` by weight, unchanged: no edits, rewrite, timeouts, mirrors,
    /// affinity or fallback.
    pub fn to(backends: Vec<WeightedBackend>) -> Forward {
        Forward {
            backends,
            request_headers: LazyEdits::default(),
            response_headers: LazyEdits::default(),
            rewrite: None,
            timeout_ms: None,
            connect_timeout_ms: None,
            send_timeout_ms: None,
            mirrors: Vec::new(),
            affinity: None,
            fallback: None,
            retry: None,
        }
    }
}

/// Proxying: which backend (by weight) and how headers change on the way.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Forward {
    /// Backends and their weights; each request goes to one, chosen with probability
    /// weight / sum of weights. A backend whose cluster does not exist answers 503.
    pub backends: Vec<WeightedBackend>,
    /// Changes to the request's headers before it is sent.
    #[serde(skip_serializing_if = "HeaderEdits::is_empty")]
    pub request_headers: LazyEdits,
    /// Changes to the response's headers before it is returned.
    #[serde(skip_serializing_if = "HeaderEdits::is_empty")]
    pub response_headers: LazyEdits,
    /// A new host and path for the request the backend gets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<Box<UrlRewrite>>,
    /// How long the backend may take to send the response headers, in milliseconds:
    /// `Some(0)` waits as long as it takes, `None` uses the gateway's `--request-timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// How long connecting to a backend (and its TLS handshake) may take, in
    /// milliseconds; `None` uses the gateway's `--connect-timeout`. Not applied to HBONE
    /// tunnels, which keep the gateway's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_timeout_ms: Option<u64>,
    /// How long the backend may go without taking any of the request body while some is
    /// ready to send, in milliseconds (ingress-nginx `proxy-send-timeout`); `None` as
    /// long as the response may take to start (`timeout_ms`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_timeout_ms: Option<u64>,
    /// Where copies of the requests go (their answers are dropped).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mirrors: Vec<Mirror>,
    /// Sticky sessions: a client's requests go to the endpoint its cookie names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Box<CookieAffinity>>,
    /// ingress-nginx `default-backend` and `custom-http-errors`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Box<Fallback>>,
    /// When a request is tried on another endpoint; `None`: only when a connection to the
    /// endpoint cannot be made, on every endpoint in turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<Box<Retry>>,
}

/// When a request that failed on one endpoint is tried on another of the same backend
/// (ingress-nginx `proxy-next-upstream`, `-tries`, `-timeout`). A connection that cannot
/// be made is always tried elsewhere, within `tries`. A request is tried again after it
/// was sent only when it has no body, and, unless `non_idempotent`, when its method may
/// be repeated (not `POST`, `PATCH` or `LOCK`, as in nginx); the last attempt's answer is
/// the client's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Retry {
    /// After the request was sent, the connection failed or the response was malformed
    /// (`error`, `invalid_header`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub on_error: bool,
    /// The response headers did not come in time (`timeout`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub on_timeout: bool,
    /// Response statuses tried elsewhere (`http_502`, ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub statuses: Vec<u16>,
    /// `POST`, `PATCH` and `LOCK` too (`non_idempotent`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub non_idempotent: bool,
    /// Attempts in all, the first included; 0: one per endpoint.
    pub tries: u32,
    /// How long after the first attempt another may start, in milliseconds; `None`: any
    /// time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// ingress-nginx `default-backend`: a Service that takes the requests while no backend
/// of the route has an endpoint, and (with `custom-http-errors`) answers in place of the
/// backend when its answer has one of the listed statuses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fallback {
    /// The Service's cluster (its first port, as in ingress-nginx).
    pub cluster: String,
    /// `custom-http-errors`: these statuses, from the backend or from the gateway (its
    /// 502, 503 and 504 for the route), are replaced by the fallback's answer to a request
    /// describing them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub error_codes: Vec<u16>,
    /// What the error request tells of the route: `X-Namespace`, `X-Ingress-Name`,
    /// `X-Service-Name`, `X-Service-Port`.
    pub namespace: String,
    /// The Ingress.
    pub ingress: String,
    /// The route's Service.
    pub service: String,
    /// Its port, as the Ingress names it.
    pub service_port: String,
}

/// Sticky sessions by cookie (ingress-nginx `affinity: cookie`): a request without the
/// cookie (or naming an endpoint that is gone) goes where the balancer sends it, and the
/// response sets the cookie to that endpoint; one with it goes to that endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CookieAffinity {
    /// The cookie's name.
    pub name: String,
    /// Its `Path`.
    pub path: String,
    /// Its `Max-Age`, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_age: Option<u64>,
    /// Its `Expires`: this many seconds after the response. A session cookie when
    /// neither this nor `max_age` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires: Option<u64>,
    /// Its `Domain`; the request's host alone when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Its `SameSite` (`None`, `Lax` or `Strict`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub same_site: Option<String>,
    /// `Secure` on plain HTTP too; over HTTPS the cookie is always `Secure`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub secure: bool,
}

impl CookieAffinity {
    /// A browser-session cookie `name` for `path`: no `Max-Age`, `Expires`, `Domain`,
    /// `SameSite` or `Secure` over plain HTTP.
    pub fn session(name: &str, path: &str) -> CookieAffinity {
        CookieAffinity {
            name: name.to_owned(),
            path: path.to_owned(),
            max_age: None,
            expires: None,
            domain: None,
            same_site: None,
            secure: false,
        }
    }
}

/// A copy of each request (or of a share of them) sent to another cluster, whose answer
/// is dropped: the client only ever gets the forward's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mirror {
    /// Key into [`crate::Snapshot::clusters`].
    pub cluster: String,
    /// The share of requests mirrored, in millionths (1,000,000: all).
    pub per_million: u32,
}

/// How a forwarded request's URL changes. The client's host stays in `X-Forwarded-Host`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UrlRewrite {
    /// Replaces the `Host` header (`:authority`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Replaces the path; the query is kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathRewrite>,
}

/// One backend of a [`Forward`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WeightedBackend {
    /// Key into [`crate::Snapshot::clusters`].
    pub cluster: String,
    /// Relative weight; 0 takes no requests.
    pub weight: u32,
    /// The reference did not resolve (Gateway API: a backendRef that is not permitted,
    /// not found or of an unsupported kind): the requests this backend's share would
    /// take are answered 500.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub invalid: bool,
    /// Changes to the headers of the requests this backend gets, after the route's.
    #[serde(skip_serializing_if = "HeaderEdits::is_empty")]
    pub request_headers: LazyEdits,
    /// Changes to the headers of its responses, before the route's.
    #[serde(skip_serializing_if = "HeaderEdits::is_empty")]
    pub response_headers: LazyEdits,
    /// The route's affinity cookie neither leads here nor is set by its answers
    /// (ingress-nginx `affinity-canary-behavior: legacy` for a canary).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_affinity: bool,
}

impl WeightedBackend {
    /// A backend to `cluster` with `weight`.
    pub fn new(cluster: &str, weight: u32) -> WeightedBackend {
        WeightedBackend { cluster: cluster.to_owned(), invalid: false, ..WeightedBackend::invalid(weight) }
    }

    /// A share of `weight` for a reference that did not resolve.
    pub fn invalid(weight: u32) -> WeightedBackend {
        WeightedBackend {
            cluster: String::new(),
            weight,
            invalid: true,
            request_headers: LazyEdits::default(),
            response_headers: LazyEdits::default(),
            no_affinity: false,
        }
    }
}

/// Header changes, applied in the order: remove, set, add.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HeaderEdits {
    /// Replace (or create) these headers; names lower-case.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub set: Vec<(String, String)>,
    /// Append these values; names lower-case.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub add: Vec<(String, String)>,
    /// Remove these headers; names lower-case.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

impl HeaderEdits {
    /// No changes.
    pub const NONE: HeaderEdits = HeaderEdits { set: Vec::new(), add: Vec::new(), remove: Vec::new() };

    /// True when nothing changes.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }
}

/// [`HeaderEdits`] allocated on the first change: a snapshot holds a pair for every route
/// and every backend, and most have none. Reads see [`HeaderEdits::NONE`] until then;
/// two compare equal when their changes do.
#[derive(Debug, Clone, Default)]
pub struct LazyEdits(Option<Box<HeaderEdits>>);

impl std::ops::Deref for LazyEdits {
    type Target = HeaderEdits;

    fn deref(&self) -> &HeaderEdits {
        static NONE: HeaderEdits = HeaderEdits::NONE;
        self.0.as_deref().unwrap_or(&NONE)
    }
}

impl std::ops::DerefMut for LazyEdits {
    fn deref_mut(&mut self) -> &mut HeaderEdits {
        self.0.get_or_insert_with(Default::default)
    }
}

impl From<HeaderEdits> for LazyEdits {
    fn from(edits: HeaderEdits) -> LazyEdits {
        LazyEdits((!edits.is_empty()).then(|| Box::new(edits)))
    }
}

impl PartialEq for LazyEdits {
    fn eq(&self, other: &LazyEdits) -> bool {
        **self == **other
    }
}

impl Eq for LazyEdits {}

impl Serialize for LazyEdits {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

/// A redirect. Parts left `None` keep the request's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Redirect {
    /// `http` or `https`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// The host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The port; when `None`, the scheme's default port if the scheme changes, else the
    /// port the request came in on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// A new path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathRewrite>,
    /// 301, 302, 303, 307 or 308.
    pub status: u16,
    /// With no `port`, no `scheme` and no `location`: the port the client named in its
    /// `Host` (none when it named none), not the one the request came in on: nginx's
    /// `$http_host`, which stays right behind a Service that maps ports (ingress-nginx's
    /// `app-root` and `from-to-www-redirect`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub port_as_sent: bool,
    /// The whole `Location`, as given: the parts above and the request's path and query
    /// are not used (ingress-nginx `permanent-redirect`). A path (`/new`) is made
    /// absolute against the request's scheme and host, without a port (nginx's
    /// `port_in_redirect off`), unless `relative`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// A `location` that is a path is sent as it is (ingress-nginx `relative-redirects`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub relative: bool,
}

/// How a path is rewritten.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathRewrite {
    /// Replace the whole path.
    Full(String),
    /// Replace the part the route's `Prefix` path matched.
    Prefix(String),
    /// Replace the whole path with this template, its `$N` filled from the capture
    /// groups of the route's regex path (ingress-nginx `rewrite-target`).
    Captures(String),
}

impl PathRewrite {
    /// The new path for `path`, which the route's `matched` path matched. A prefix
    /// replacement keeps what followed the matched prefix, element-wise: `/foo` to `/bar`
    /// makes `/foo/x` `/bar/x`, and `/foo` to `/` makes `/foo/x` `/x`.
    pub fn apply(&self, matched: &PathMatch, path: &str) -> String {
        match (self, matched) {
            (PathRewrite::Full(p), _) => p.clone(),
            (PathRewrite::Prefix(to), PathMatch::Prefix(from)) => {
                let rest = if from == "/" { path } else { path.get(from.len()..).unwrap_or("") };
                let to = to.trim_end_matches('/');
                // `rest` is empty or starts with '/': prefixes match whole elements.
                match (to.is_empty(), rest.is_empty()) {
                    (true, true) => "/".to_owned(),
                    (true, false) => rest.to_owned(),
                    (false, _) => format!("{to}{rest}"),
                }
            }
            // The controller refuses a prefix replacement on other matches.
            (PathRewrite::Prefix(to), PathMatch::Exact(_) | PathMatch::Regex(_)) => to.clone(),
            (PathRewrite::Captures(template), PathMatch::Regex(p)) => {
                let out = p.expand(path, template).unwrap_or_else(|| template.clone());
                // `/$1` with an empty group is `/`; a template without a leading `/`
                // still gives an absolute path.
                if out.starts_with('/') {
                    out
                } else {
                    format!("/{out}")
                }
            }
            // The controller only writes captures for regex paths.
            (PathRewrite::Captures(template), PathMatch::Exact(_) | PathMatch::Prefix(_)) => template.clone(),
        }
    }
}

/// A fixed answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Respond {
    /// The status code.
    pub status: u16,
    /// A short plain-text body.
    pub body: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lazy_edits_hold_nothing_until_changed_and_compare_by_their_changes() {
        let none = LazyEdits::default();
        assert!(none.0.is_none() && none.is_empty() && *none == HeaderEdits::NONE);
        assert!(LazyEdits::from(HeaderEdits::default()).0.is_none());
        // Written to but left empty: allocated, yet equal to none.
        let mut touched = LazyEdits::default();
        touched.set.clear();
        assert!(touched.0.is_some() && touched == none);
        let mut set = LazyEdits::default();
        set.set.push(("x-a".into(), "1".into()));
        let added = LazyEdits::from(HeaderEdits { add: vec![("x-a".into(), "1".into())], ..HeaderEdits::NONE });
        assert!(set != none && set != added && added != none);
        assert_eq!(set.set, [("x-a".to_owned(), "1".to_owned())]);
        assert_eq!(added.add, [("x-a".to_owned(), "1".to_owned())]);
        // Shown as the edits themselves.
        let json = |e: &LazyEdits| serde_json::to_string(e).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(json(&set), r#"{"set":[["x-a","1"]]}"#);
        assert_eq!(json(&none), "{}");
    }

    #[test]
    fn header_and_query_matches_take_exact_values_or_whole_pattern_matches() {
        let exact = HeaderMatch::exact("x-env", "a.b");
        assert!(exact.takes(b"a.b") && !exact.takes(b"axb") && !exact.takes(b"a.b "));
        let re = HeaderMatch::regex("x-env", Pattern::full("a.b").unwrap());
        assert_eq!(re.value, "a.b");
        assert!(re.takes(b"a.b") && re.takes(b"axb") && !re.takes(b"a.bc") && !re.takes(b"\xff"));
        let q = QueryMatch::exact("v", "1+");
        assert!(q.takes("1+") && !q.takes("11"));
        let qre = QueryMatch::regex("v", Pattern::full("1+").unwrap());
        assert!(qre.takes("111") && !qre.takes("1+") && !qre.takes("2"));
    }

    #[test]
    fn a_cookie_match_finds_its_cookie_among_others() {
        let m = HeaderMatch::cookie("canary.v2", "always").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.name, "cookie");
        for yes in ["canary.v2=always", "a=1; canary.v2=always", "canary.v2=always; b=2", "a=1;canary.v2=always ;b=2"] {
            assert!(m.takes(yes.as_bytes()), "{yes}");
        }
        for no in
            ["canary.v2=never", "canary.v2=always2", "xcanary.v2=always", "canaryxv2=always", "a=canary.v2=always", ""]
        {
            assert!(!m.takes(no.as_bytes()), "{no}");
        }
    }

    fn prefix(p: &str) -> PathMatch {
        PathMatch::prefix(p).unwrap_or(PathMatch::Exact(String::new()))
    }

    fn m(path: PathMatch, method: bool, headers: usize, query: usize) -> RouteMatch {
        RouteMatch {
            path,
            method: method.then(|| "GET".to_owned()),
            headers: (0..headers).map(|i| HeaderMatch::exact(&format!("h{i}"), "v")).collect(),
            query: (0..query).map(|i| QueryMatch::exact(&format!("q{i}"), "v")).collect(),
        }
    }

    #[test]
    fn precedence_exact_then_longest_then_method_headers_query() {
        let mut v = [
            ("prefix /", m(prefix("/"), false, 0, 0)),
            ("query", m(prefix("/a"), false, 0, 1)),
            ("plain", m(prefix("/a"), false, 0, 0)),
            ("two headers", m(prefix("/a"), false, 2, 0)),
            ("method", m(prefix("/a"), true, 0, 0)),
            ("one header two queries", m(prefix("/a"), false, 1, 2)),
            ("exact short", m(PathMatch::Exact("/b".into()), false, 0, 0)),
            ("longer", m(prefix("/a/b"), false, 0, 0)),
        ];
        v.sort_by_key(|(_, m)| m.precedence_key());
        let order: Vec<&str> = v.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            order,
            ["exact short", "longer", "method", "two headers", "one header two queries", "query", "plain", "prefix /"]
        );
    }

    #[test]
    fn equal_keys_keep_their_order() {
        let mut v = [("first", m(prefix("/a"), false, 1, 0)), ("second", m(prefix("/a"), false, 1, 0))];
        v.sort_by_key(|(_, m)| m.precedence_key());
        assert_eq!(v[0].0, "first");
    }

    #[test]
    fn prefix_rewrites_keep_the_rest_element_wise() {
        let cases = [
            ("/foo", "/bar", "/foo", "/bar"),
            ("/foo", "/bar", "/foo/x", "/bar/x"),
            ("/foo", "/bar/", "/foo/x", "/bar/x"),
            ("/foo", "/", "/foo/x", "/x"),
            ("/foo", "/", "/foo", "/"),
            ("/foo", "/", "/foo/", "/"),
            ("/", "/bar", "/x/y", "/bar/x/y"),
            ("/", "/bar", "/", "/bar/"),
            ("/foo/", "/bar", "/foo/x", "/bar/x"),
        ];
        for (from, to, path, want) in cases {
            assert_eq!(PathRewrite::Prefix(to.into()).apply(&prefix(from), path), want, "{from} -> {to} on {path}");
        }
        assert_eq!(PathRewrite::Full("/z".into()).apply(&prefix("/foo"), "/foo/x"), "/z");
        assert_eq!(PathRewrite::Prefix("/z".into()).apply(&PathMatch::Exact("/foo".into()), "/foo"), "/z");
    }

    #[test]
    fn capture_rewrites_fill_groups_of_the_matched_path() {
        let re = PathMatch::Regex(Box::new(Pattern::leading("/something(/|$)(.*)").unwrap_or_else(|e| panic!("{e}"))));
        let to = |t: &str| PathRewrite::Captures(t.into());
        assert_eq!(to("/$2").apply(&re, "/something/new/x"), "/new/x");
        assert_eq!(to("/$2").apply(&re, "/something"), "/");
        assert_eq!(to("$2").apply(&re, "/something/a"), "/a", "always absolute");
        assert_eq!(to("/").apply(&re, "/something/a/b"), "/", "the whole path is replaced");
        assert_eq!(to("/x").apply(&PathMatch::Exact("/a".into()), "/a"), "/x");
    }

    #[test]
    fn edits_are_empty_only_without_changes() {
        assert!(HeaderEdits::default().is_empty());
        for e in [
            HeaderEdits { set: vec![("a".into(), "b".into())], ..Default::default() },
            HeaderEdits { add: vec![("a".into(), "b".into())], ..Default::default() },
            HeaderEdits { remove: vec!["a".into()], ..Default::default() },
        ] {
            assert!(!e.is_empty(), "{e:?}");
        }
    }
}
