//! HTTP routing, compiled: the router (host, then the first route whose match takes the
//! request) and the actions routes take, with header names and values parsed once.

use std::sync::Arc;

use crate::host_map::HostMap;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::Method;
use wharf_model::{ClientFilter, Cors, HeaderMatch, Redirect, Respond, RouteMatch};

use crate::metrics::RouteMetrics;
use crate::upstream::forward::CompiledForward;

/// The parts of a request routing looks at.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    /// Path, normalised, without query.
    pub path: &'a str,
    /// Query string without `?`.
    pub query: Option<&'a str>,
    /// Method.
    pub method: &'a Method,
    /// Headers.
    pub headers: &'a HeaderMap,
}

/// True when every part of `m` matches `req`.
pub fn matches(m: &RouteMatch, req: &RequestView<'_>) -> bool {
    m.path.matches(req.path)
        && m.method.as_deref().is_none_or(|want| req.method.as_str() == want)
        && m.headers.iter().all(|h| header_takes(h, req.headers))
        && m.query.iter().all(|q| query_value(req.query, &q.name).is_some_and(|v| q.takes(v)))
}

/// True when the request's header takes `h`: its first value, or for `Cookie`, which
/// HTTP/2 clients may split into several fields (RFC 9113 §8.2.3), any of them.
fn header_takes(h: &HeaderMatch, headers: &HeaderMap) -> bool {
    if h.name == "cookie" {
        headers.get_all(http::header::COOKIE).iter().any(|v| h.takes(v.as_bytes()))
    } else {
        headers.get(&h.name).is_some_and(|v| h.takes(v.as_bytes()))
    }
}

/// The first value of query parameter `name`, as sent.
fn query_value<'q>(query: Option<&'q str>, name: &str) -> Option<&'q str> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then_some(v)
    })
}

/// One route, ready to serve.
#[derive(Debug)]
pub struct CompiledRoute {
    /// The requests it takes.
    pub matches: RouteMatch,
    /// What it does with them.
    pub action: CompiledAction,
    /// Redirect plain HTTP to HTTPS.
    pub https_redirect: bool,
    /// Request body limit of the route (`Some(0)`: unlimited; `None`: the gateway's).
    pub max_body_bytes: Option<u64>,
    /// The client addresses it serves (others get 403); all when `None`.
    pub clients: Option<Box<ClientFilter>>,
    /// Its CORS policy.
    pub cors: Option<Box<CompiledCors>>,
    /// Its per-client limits.
    pub limiter: Option<Arc<crate::ratelimit::Limiter>>,
    /// Who may use it.
    pub auth: Option<Arc<crate::auth::CompiledAuth>>,
    /// The client certificate it asks for.
    pub client_cert: Option<Box<wharf_model::ClientCertCheck>>,
    /// Metric handles for this route.
    pub metrics: RouteMetrics,
}

impl CompiledRoute {
    /// `namespace/name` of the object that defined it (logs, metrics).
    pub fn source(&self) -> &str {
        self.metrics.route()
    }

    /// The namespace of the object that defined it.
    pub fn namespace(&self) -> &str {
        self.source().split_once('/').map_or("", |(ns, _)| ns)
    }
}

/// A CORS policy with the headers that do not depend on the request made once.
#[derive(Debug)]
pub struct CompiledCors {
    /// The policy (for its origins).
    pub policy: Cors,
    /// Credentials, methods, headers, exposed headers and max age, as sent.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl CompiledCors {
    /// `policy`, its fixed headers made (an empty list is not sent).
    pub fn new(policy: &Cors) -> CompiledCors {
        use http::header;
        let mut headers = Vec::new();
        if policy.allow_credentials {
            headers.push((header::ACCESS_CONTROL_ALLOW_CREDENTIALS, HeaderValue::from_static("true")));
        }
        for (name, v) in [
            (header::ACCESS_CONTROL_ALLOW_METHODS, &policy.allow_methods),
            (header::ACCESS_CONTROL_ALLOW_HEADERS, &policy.allow_headers),
            (header::ACCESS_CONTROL_EXPOSE_HEADERS, &policy.expose_headers),
        ] {
            if let Some(v) = HeaderValue::from_str(v).ok().filter(|_| !v.is_empty()) {
                headers.push((name, v));
            }
        }
        headers.push((header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from(policy.max_age)));
        CompiledCors { policy: policy.clone(), headers }
    }
}

/// A route's action with its upstreams resolved.
// Built once per config and read in place by every request, never moved on the hot path:
// boxing the common variant would add a pointer chase per request to save table memory.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum CompiledAction {
    /// Proxy.
    Forward(CompiledForward),
    /// Answer with a redirect.
    Redirect(Redirect),
    /// Answer with a fixed status and body.
    Respond(Respond),
}

/// The compiled routes of one host, with what the next compilation needs to reuse them
/// when the host did not change.
#[derive(Debug)]
pub struct HostRoutes {
    pub(crate) routes: Vec<CompiledRoute>,
    /// How specific the host is (see [`rank`]).
    pub(crate) rank: u16,
    /// The namespace of its routes (`None` when they come from several, as with
    /// `--merge-hosts-across-namespaces`): a request for it falls through to a less
    /// specific host, or the default backend, only of the same owner.
    pub(crate) owner: Option<Box<str>>,
    /// The clusters its routes looked up (found or not).
    pub(crate) clusters: Box<[Box<str>]>,
    /// The host they were compiled from: a next snapshot with the same host (shared, or
    /// equal: then the next snapshot's is kept, to be found shared the time after) reuses
    /// them. Only compilation reads it.
    pub(crate) source: arc_swap::ArcSwapOption<wharf_model::VirtualHost>,
}

impl HostRoutes {
    /// Routes that depend on no cluster, compiled from nothing (tests).
    #[cfg(test)]
    pub(crate) fn new(routes: Vec<CompiledRoute>) -> Arc<HostRoutes> {
        Arc::new(HostRoutes { routes, rank: 0, owner: None, clusters: Box::default(), source: Default::default() })
    }

    /// The routes of `host` as compiled from `vh`, its rank and owner read from it.
    pub(crate) fn of(vh: &wharf_model::VirtualHost, routes: Vec<CompiledRoute>, clusters: Box<[Box<str>]>) -> Self {
        HostRoutes {
            routes,
            rank: rank(&vh.host),
            owner: owner(vh.routes.iter().map(|r| r.source.namespace.as_str())),
            clusters,
            source: Default::default(),
        }
    }
}

/// Specificity of a host, lower first: an exact name, then wildcards by longest suffix,
/// then every host.
pub fn rank(host: &wharf_model::Host) -> u16 {
    use wharf_model::Host;
    match host {
        Host::Exact(_) => 0,
        // A DNS name has at most 253 characters: a wildcard ranks from 259 up.
        Host::Wildcard(s) | Host::Suffix(s) => 512u16.saturating_sub(u16::try_from(s.len()).unwrap_or(u16::MAX)),
        Host::Any => u16::MAX,
    }
}

/// The one namespace of `namespaces`, if they are all the same.
pub fn owner<'a>(mut namespaces: impl Iterator<Item = &'a str>) -> Option<Box<str>> {
    let first = namespaces.next()?;
    namespaces.all(|ns| ns == first).then(|| first.into())
}

/// Host lookup then route lookup, in precedence order.
#[derive(Debug, Default)]
pub struct Router {
    pub(crate) hosts: HostMap<Arc<HostRoutes>>,
    pub(crate) default: Option<CompiledRoute>,
    /// The namespace of the default backend's Ingress.
    pub(crate) default_owner: Option<Box<str>>,
    /// Only the most specific host is tried (Gateway ports: a host is a listener's, and a
    /// request never falls through to a less specific listener's routes).
    pub(crate) isolated: bool,
}

impl Router {
    /// The route for a request: the most specific host that has a matching route wins
    /// (exact host, then wildcards by longest suffix, then rules without host; only the
    /// most specific host when isolated), then the default backend. A request falls from
    /// one host to a less specific one, or to the default backend, only when both belong
    /// to the same namespace: a host's unmatched paths never reach another tenant.
    pub fn route(&self, host: &str, req: &RequestView<'_>) -> Option<&CompiledRoute> {
        if self.isolated {
            let (first, _) = self.hosts.candidates(host).next()?;
            return first.routes.iter().find(|r| matches(&r.matches, req));
        }
        shared_route(None, self, host, req)
    }
}

/// The route for a request on an edge listener, where the edge Gateway's routes (`edge`,
/// an isolated router) and the Ingress rules (`ingress`) share the hosts: the candidates
/// of both, most specific host first (the edge Gateway's first at equal specificity, and
/// only its most specific host), while they belong to the namespace of the first; then
/// the Ingresses' default backend, when no host matched or it is of that namespace too.
pub fn shared_route<'a>(
    edge: Option<&'a Router>,
    ingress: &'a Router,
    host: &str,
    req: &RequestView<'_>,
) -> Option<&'a CompiledRoute> {
    let mut edge_host = edge.and_then(|e| e.hosts.candidates(host).next()).map(|(h, _)| &**h);
    let mut ingress_hosts = ingress.hosts.candidates(host).map(|(h, _)| &**h).peekable();
    let mut owner: Option<&Option<Box<str>>> = None;
    loop {
        let next = match (edge_host, ingress_hosts.peek()) {
            (Some(e), Some(i)) if e.rank <= i.rank => edge_host.take(),
            (Some(_), None) => edge_host.take(),
            (_, Some(_)) => ingress_hosts.next(),
            (None, None) => None,
        };
        let Some(h) = next else { break };
        // A listener's host without routes takes no request and owns nothing.
        if h.routes.is_empty() {
            continue;
        }
        match owner {
            None => owner = Some(&h.owner),
            Some(o) if !same_owner(o, &h.owner) => return None,
            Some(_) => {}
        }
        if let Some(r) = h.routes.iter().find(|r| matches(&r.matches, req)) {
            return Some(r);
        }
    }
    ingress.default.as_ref().filter(|_| owner.is_none_or(|o| same_owner(o, &ingress.default_owner)))
}

/// Whether a request may fall from a host of owner `a` to one of owner `b`: the same
/// namespace, or a host whose routes come from several (only with
/// `--merge-hosts-across-namespaces`, which shares hosts on purpose).
fn same_owner(a: &Option<Box<str>>, b: &Option<Box<str>>) -> bool {
    a.is_none() || b.is_none() || a == b
}

#[cfg(test)]
mod tests {
    use super::*;
    use wharf_model::{HeaderMatch, PathMatch, QueryMatch};

    fn view<'a>(path: &'a str, query: Option<&'a str>, method: &'a Method, headers: &'a HeaderMap) -> RequestView<'a> {
        RequestView { path, query, method, headers }
    }

    /// A route of `source` (`namespace/name`) for paths under `path` that answers 200.
    fn route(source: &str, path: &str) -> CompiledRoute {
        CompiledRoute {
            matches: RouteMatch::path(wharf_model::PathMatch::prefix(path).unwrap()),
            action: CompiledAction::Respond(Respond { status: 200, body: String::new() }),
            https_redirect: false,
            max_body_bytes: None,
            clients: None,
            cors: None,
            limiter: None,
            auth: None,
            client_cert: None,
            metrics: crate::Metrics::new().route(source),
        }
    }

    #[test]
    fn every_part_of_a_match_must_hold() {
        let m = RouteMatch {
            path: PathMatch::prefix("/api").unwrap(),
            method: Some("POST".into()),
            headers: vec![HeaderMatch::exact("x-env", "canary")],
            query: vec![QueryMatch::exact("v", "2")],
        };
        let mut h = HeaderMap::new();
        h.insert("x-env", HeaderValue::from_static("canary"));
        let post = Method::POST;
        assert!(matches(&m, &view("/api/x", Some("a=1&v=2"), &post, &h)));
        assert!(!matches(&m, &view("/other", Some("v=2"), &post, &h)), "path");
        assert!(!matches(&m, &view("/api", Some("v=2"), &Method::GET, &h)), "method");
        assert!(!matches(&m, &view("/api", Some("v=3"), &post, &h)), "query value");
        assert!(!matches(&m, &view("/api", Some("vv=2"), &post, &h)), "query name");
        assert!(!matches(&m, &view("/api", None, &post, &h)), "no query");
        assert!(!matches(&m, &view("/api", Some("v=2"), &post, &HeaderMap::new())), "header missing");
        let mut other = HeaderMap::new();
        other.insert("x-env", HeaderValue::from_static("Canary"));
        assert!(!matches(&m, &view("/api", Some("v=2"), &post, &other)), "header values are case-sensitive");
    }

    #[test]
    fn the_first_query_value_counts_and_a_bare_name_is_empty() {
        assert_eq!(query_value(Some("a=1&a=2"), "a"), Some("1"));
        assert_eq!(query_value(Some("flag&b=x"), "flag"), Some(""));
        assert_eq!(query_value(Some("b=x=y"), "b"), Some("x=y"));
        assert_eq!(query_value(Some("b=x"), "c"), None);
    }

    #[test]
    fn an_isolated_router_tries_only_the_most_specific_host() {
        let mut router = Router::default();
        router.hosts.insert(
            &wharf_model::Host::Exact("only.example.com".into()),
            HostRoutes::new(vec![route("exact", "/only")]),
        );
        router
            .hosts
            .insert(&wharf_model::Host::Suffix(".example.com".into()), HostRoutes::new(vec![route("wildcard", "/")]));
        let (get, headers) = (Method::GET, HeaderMap::new());
        let source = |r: &Router, host: &str, path: &str| {
            r.route(host, &view(path, None, &get, &headers)).map(|c| c.source().to_owned())
        };
        assert_eq!(source(&router, "only.example.com", "/"), Some("wildcard".into()), "falls through");
        router.isolated = true;
        assert_eq!(source(&router, "only.example.com", "/only"), Some("exact".into()));
        assert_eq!(source(&router, "only.example.com", "/"), None, "isolated: no fall-through");
        assert_eq!(source(&router, "x.example.com", "/"), Some("wildcard".into()));
    }

    #[test]
    fn a_route_belongs_to_the_namespace_of_its_object() {
        assert_eq!(route("team-a/shop", "/").namespace(), "team-a");
        assert_eq!(route("team-b/shop", "/").namespace(), "team-b");
        assert_eq!(route("no-namespace", "/").namespace(), "", "a name without a namespace has none");
    }
}
