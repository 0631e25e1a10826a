//! The HTTP side: routing a request, redirecting, and proxying it to an endpoint.

mod answers;
mod external_auth;
mod forward;
pub mod headers;
mod mirror;
pub mod normalize;

use std::borrow::Cow;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{header, HeaderValue, Request, Response, StatusCode, Uri, Version};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};
use hyper::body::Incoming;
use wharf_model::PortProtocol;

use crate::auth::CompiledAuth;
use crate::config::{CompiledConfig, Tables};
use crate::reasons::{Answered, PathError, Rejected};
use crate::routing::{CompiledAction, CompiledCors, CompiledRoute, RequestView};
use crate::upstream::body::{self};
use crate::Shared;

// What each part uses of the others.
use answers::*;
use forward::*;

/// Response body type of every listener.
pub type Body = UnsyncBoxBody<Bytes, hyper::Error>;

/// Which listener a request arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP.
    Http,
    /// TLS-terminated HTTPS.
    Https,
}

/// Per-connection facts a request handler needs.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The client's address.
    pub client: SocketAddr,
    /// The listener's scheme.
    pub scheme: Scheme,
    /// The listener's port: its socket's, or for a redirect on an edge listener the edge
    /// Gateway's listener port as declared.
    pub port: u16,
    /// The SNI the TLS connection was opened for (HTTPS only).
    pub sni: Option<Arc<str>>,
    /// The Gateway port the connection arrived on, by its bound address; `None` for the
    /// edge listeners.
    pub gateway_port: Option<SocketAddr>,
    /// The trusted proxy whose `X-Forwarded-*` headers named the client, scheme and port
    /// above (`--trusted-proxies`); `None` when they are the connection's own.
    pub forwarded_by: Option<std::net::IpAddr>,
    /// The port the client used, as that trusted proxy's `X-Forwarded-Port` (or the
    /// scheme it named) says.
    pub proxy_port: Option<u16>,
    /// The host the client asked that trusted proxy for, as the first entry of its
    /// `X-Forwarded-Host` (an authority, `host[:port]`): the backend's `Host` and
    /// `X-Forwarded-Host`, and the host of the HTTPS redirect, as ingress-nginx's
    /// `use-forwarded-headers` makes them, when the namespace of the routed host serves it
    /// too (`None` otherwise). Routing still goes by the request's own host.
    pub proxy_host: Option<HeaderValue>,
    /// The certificate the client presented (HTTPS; checked against its host's CA in the
    /// handshake).
    pub client_cert: Option<Arc<wharf_model::PeerCertificate>>,
}

impl ConnInfo {
    /// The port the request came in on: the one a trusted proxy named, else the
    /// listener's.
    pub fn arrival_port(&self) -> u16 {
        self.proxy_port.unwrap_or(self.port)
    }
}

/// Refuses requests whose target is ambiguous (RFC 9112 §3.2; RFC 9113 §8.3.1). hyper
/// already refuses obsolete line folding, and drops Content-Length when
/// Transfer-Encoding is present (RFC 9112 §6.3), so a backend never sees both.
fn check_framing<B>(req: &Request<B>) -> Result<(), Rejected> {
    let h = req.headers();
    let mut hosts = h.get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(Rejected::DuplicateHost);
    }
    match req.version() {
        Version::HTTP_2 => match (req.uri().authority(), host) {
            (Some(a), Some(h)) if !a.as_str().eq_ignore_ascii_case(h.to_str().unwrap_or("")) => {
                Err(Rejected::HostMismatch)
            }
            (None, None) => Err(Rejected::MissingHost),
            _ => Ok(()),
        },
        Version::HTTP_11 if host.is_none() => Err(Rejected::MissingHost),
        _ => Ok(()),
    }
}

/// Normalises the request's path in place (see [`normalize`]).
fn normalize_target<B>(req: &mut Request<B>, opts: normalize::PathOptions) -> Result<(), Rejected> {
    let normalized = match normalize::normalize_path(req.uri().path(), opts).map_err(Rejected::Path)? {
        Cow::Borrowed(_) => return Ok(()),
        Cow::Owned(p) => p,
    };
    let pq = match req.uri().query() {
        Some(q) => format!("{normalized}?{q}"),
        None => normalized,
    };
    let mut parts = req.uri().clone().into_parts();
    parts.path_and_query = Some(PathAndQuery::try_from(pq).map_err(|_| Rejected::Path(PathError::BadEscape))?);
    *req.uri_mut() = Uri::from_parts(parts).map_err(|_| Rejected::Path(PathError::BadEscape))?;
    Ok(())
}

/// Handles one request end to end. Never fails: errors become responses.
pub async fn handle(
    shared: Arc<Shared>,
    conn: ConnInfo,
    mut req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let start = Instant::now();
    // Routing goes by the listener; everything about the client by what a trusted proxy
    // says of it.
    let listener = conn.scheme;
    let trusted = shared.opts.trusts(conn.client.ip());
    let conn = match trusted {
        true => headers::forwarded_client(conn, req.headers(), |ip| shared.opts.trusts(ip)),
        false => conn,
    };
    headers::from_client(req.headers_mut(), trusted, shared.opts.underscores_in_headers);
    let cfg = shared.config.load_full();
    if listener == Scheme::Http {
        if let Some(answer) = acme_http01(&shared, &cfg, &conn, &req) {
            return Ok(answer);
        }
    }
    let checked = precheck(&shared, &mut req);
    let host_value = request_host(&req);
    let host = normalize_host(host_value.as_ref().and_then(|v| v.to_str().ok()).unwrap_or(""));
    let tables = cfg.tables(conn.gateway_port);
    let checked = checked.and_then(|()| match (&conn.sni, tables) {
        (Some(sni), Some(t)) if misdirected(t, sni, &host) => Err(Rejected::Misdirected),
        _ => Ok(()),
    });
    let route = match tables {
        Some(t) if checked.is_ok() => route_for(&cfg, t, conn.gateway_port, listener, &host, &req),
        _ => None,
    };
    let mut conn = conn;
    // A redirect without a port names the port of the listener the request came to
    // (Gateway API): on an edge listener, the edge Gateway's listener as it declares it,
    // not the socket's (8080 behind the chart's Service that clients reach on 80).
    if let (Some(r), None) = (route, conn.gateway_port) {
        if matches!(r.action, CompiledAction::Redirect(_)) {
            let protocol = match listener {
                Scheme::Https => PortProtocol::Https,
                Scheme::Http => PortProtocol::Http,
            };
            if let Some(declared) = cfg.edge_listener_port(protocol) {
                conn.port = declared;
            }
        }
    }
    // A trusted proxy's host is believed only when the routed host's namespace serves it
    // too: a proxy that passes on its client's X-Forwarded-Host cannot make one tenant's
    // backend or redirect name another's host, or one nobody serves.
    if conn.proxy_host.is_some() {
        let same_owner = match (route, tables, conn.proxy_host.as_ref().and_then(|v| v.to_str().ok())) {
            (Some(r), Some(t), Some(named)) => {
                route_for(&cfg, t, conn.gateway_port, listener, &normalize_host(named), &req)
                    .is_some_and(|other| other.namespace() == r.namespace())
            }
            _ => false,
        };
        if !same_owner {
            conn.proxy_host = None;
        }
    }
    let method = req.method().clone();
    let cert_refusal =
        route.and_then(|r| r.client_cert.as_ref()).and_then(|c| c.admits(conn.client_cert.as_deref()).err());
    let cors = route.and_then(|r| cors_allowed(r, req.headers()));
    let preflight = cors.is_some() && method == http::Method::OPTIONS;
    // Counted only for requests the route would serve: not refused ones, not redirects,
    // not CORS preflights (nginx answers those before its limits).
    let https_redirect = route.is_some_and(|r| r.https_redirect) && conn.scheme == Scheme::Http;
    let in_flight = match (route.and_then(|r| r.limiter.as_ref()), &checked) {
        (Some(l), Ok(())) if !https_redirect && !preflight => l.admit(conn.client.ip()),
        _ => Ok(None),
    };
    // Only the access log needs its own copy of the path.
    let path = shared.opts.access_log.then(|| req.uri().path().to_owned());
    let version = req.version();

    let (resp, reason, upstream_addr) = match (checked, route) {
        (Err(rejected), _) => refuse(&shared, rejected),
        (Ok(()), None) => {
            (local(StatusCode::NOT_FOUND, "no route for this host and path"), Some(Answered::NoRoute), None)
        }
        // A CORS preflight is answered here, before any other check of the route (as
        // ingress-nginx does).
        (Ok(()), Some(_)) if preflight => (preflight_answer(), Some(Answered::CorsPreflight), None),
        (Ok(()), Some(_)) if https_redirect => (redirect(&shared, redirect_host(&conn, &host), &req), None, None),
        // The client certificate is checked first, as nginx checks it before the request is
        // processed.
        (Ok(()), Some(r)) if cert_refusal.is_some() => {
            let (resp, reason) = cert_refused(r, cert_refusal);
            (resp, Some(reason), None)
        }
        // Limits before address lists, as nginx's preaccess phase runs before its access
        // phase.
        (Ok(()), Some(_)) if in_flight.is_err() => {
            shared.metrics.rate_limited();
            (
                local(StatusCode::SERVICE_UNAVAILABLE, "too many requests from this client"),
                Some(Answered::RateLimited),
                None,
            )
        }
        (Ok(()), Some(r)) if r.clients.as_ref().is_some_and(|c| !c.admits(conn.client.ip())) => (
            local(StatusCode::FORBIDDEN, "this client address is not allowed here"),
            Some(Answered::ClientDenied),
            None,
        ),
        (Ok(()), Some(r)) => match authenticate(&shared, &conn, tables, &host, r, &mut req).await {
            Err(denied) => denied,
            // Boxed: the forwarding state is large, and hyper moves the request future
            // into a task per HTTP/2 stream; a small future makes that move cheap.
            Ok(cookies) => Box::pin(act(&shared, &conn, r, &host, host_value.as_ref(), req, cookies)).await,
        },
    };
    let mut resp = match in_flight {
        // The request stays counted until its response body ends.
        Ok(Some(guard)) => resp.map(|b| body::Guarded::new(b, guard).boxed_unsync()),
        _ => resp,
    };
    if let (Some(hsts), Scheme::Https) = (&shared.opts.hsts, conn.scheme) {
        resp.headers_mut().insert(header::STRICT_TRANSPORT_SECURITY, hsts.clone());
    }
    if let Some((policy, origin)) = cors {
        // A 401 too, so that a page can see it must sign in.
        let status = resp.status();
        if status.is_success() || status.is_redirection() || status == StatusCode::UNAUTHORIZED {
            cors_headers(policy, origin, resp.headers_mut());
        }
    }
    let elapsed = start.elapsed();
    if let Some(r) = route {
        r.metrics.observe(resp.status().as_u16(), elapsed.as_secs_f64());
    }
    if let Some(path) = path {
        let served = Served { method, path, version, route, reason, upstream: upstream_addr };
        log_access(&conn, &host, &served, resp.status(), elapsed);
    }
    Ok(resp)
}

/// The route of `req` for `host`, arrived on the listener of `scheme` at `port` (whose
/// tables are `tables`).
fn route_for<'c>(
    cfg: &'c CompiledConfig,
    tables: &'c Tables,
    port: Option<SocketAddr>,
    scheme: Scheme,
    host: &str,
    req: &Request<Incoming>,
) -> Option<&'c CompiledRoute> {
    let view =
        RequestView { path: req.uri().path(), query: req.uri().query(), method: req.method(), headers: req.headers() };
    let protocol = match scheme {
        Scheme::Https => PortProtocol::Https,
        Scheme::Http => PortProtocol::Http,
    };
    cfg.route(tables, port, protocol, host, &view)
}

/// What the route's action answers (forwarded, redirected or a fixed response), with the
/// cookies of an external check's answer where nginx adds them.
async fn act(
    shared: &Shared,
    conn: &ConnInfo,
    r: &CompiledRoute,
    host: &str,
    host_value: Option<&HeaderValue>,
    req: Request<Incoming>,
    cookies: CheckCookies,
) -> Outcome {
    let mut out = match &r.action {
        CompiledAction::Forward(f) => proxy(shared, conn, r, f, host_value, req).await,
        CompiledAction::Redirect(rd) => (redirect_to(rd, &r.matches.path, conn, host, &req), None, None),
        CompiledAction::Respond(rs) => (respond(rs), None, None),
    };
    if let Some((cookies, always)) = cookies {
        if always || external_auth::takes_cookies(out.0.status()) {
            external_auth::add_cookies(out.0.headers_mut(), cookies);
        }
    }
    out
}

/// What the access log says of a request besides its client, host and answer.
struct Served<'a> {
    method: http::Method,
    path: String,
    version: http::Version,
    route: Option<&'a CompiledRoute>,
    reason: Option<Answered>,
    upstream: Option<SocketAddr>,
}

/// One access log line (`--access-log`).
fn log_access(conn: &ConnInfo, host: &str, served: &Served<'_>, status: StatusCode, elapsed: std::time::Duration) {
    tracing::info!(
        target: "wharf::access",
        client = %conn.client,
        method = %served.method,
        host = %host,
        path = served.path.as_str(),
        proto = ?served.version,
        status = status.as_u16(),
        duration_ms = elapsed.as_secs_f64() * 1000.0,
        route = served.route.map(|r| r.source()).unwrap_or("-"),
        upstream = %served.upstream.map(|a| a.to_string()).unwrap_or_else(|| "-".into()),
        reason = served.reason.map_or("-", Answered::reason),
    );
}

/// Cookies of an external check's answer for the client (with any status when `true`).
type CheckCookies = Option<(Vec<HeaderValue>, bool)>;

/// Checks the route's authentication: `Ok` when the request may go on (basic
/// credentials removed, as the backend has no use for them), else the answer.
/// The `401` of basic authentication, with its challenge.
fn unauthorized(checker: &crate::auth::BasicChecker) -> Response<Body> {
    let mut r = local(StatusCode::UNAUTHORIZED, "authorization required");
    r.headers_mut().insert(header::WWW_AUTHENTICATE, checker.challenge().clone());
    r
}

async fn authenticate<B>(
    shared: &Shared,
    conn: &ConnInfo,
    tables: Option<&crate::config::Tables>,
    host: &str,
    route: &CompiledRoute,
    req: &mut Request<B>,
) -> Result<CheckCookies, Outcome> {
    let Some(auth) = route.auth.as_deref() else { return Ok(None) };
    match auth {
        CompiledAuth::Basic(checker) if checker.admits(req.headers()).await => {
            req.headers_mut().remove(header::AUTHORIZATION);
            Ok(None)
        }
        CompiledAuth::Basic(checker) => Err((unauthorized(checker), Some(Answered::Unauthorized), None)),
        // Boxed, as forwarding is: the check's state is large.
        CompiledAuth::External(ext) => {
            match Box::pin(external_auth::check(shared, conn, tables, host, route, ext, req)).await {
                external_auth::Checked::Pass { cookies, always } => Ok(Some((cookies, always))),
                external_auth::Checked::Answer(a) => Err(a),
            }
        }
        // Why is in the Ingress's Event and the controller's log, once, not per request.
        CompiledAuth::Unavailable(_) => {
            let msg = "authentication for this route is not available";
            Err((local(StatusCode::SERVICE_UNAVAILABLE, msg), Some(Answered::AuthUnavailable), None))
        }
    }
}

/// The host an HTTPS redirect names: a trusted proxy's `X-Forwarded-Host` without its
/// port (as ingress-nginx's `$redirect_host`), else the request's.
fn redirect_host<'h>(conn: &'h ConnInfo, host: &'h str) -> &'h str {
    let forwarded = conn.proxy_host.as_ref().and_then(|v| v.to_str().ok());
    match forwarded.and_then(|v| http::uri::Authority::try_from(v).ok().map(|a| a.host().len()).map(|n| &v[..n])) {
        Some(h) if !h.is_empty() => h,
        _ => host,
    }
}

/// The route's CORS policy and the `Access-Control-Allow-Origin` value, when the request
/// comes from an origin it allows (any request, with or without `Origin`, when it allows
/// `*`).
fn cors_allowed<'r>(route: &'r CompiledRoute, headers: &http::HeaderMap) -> Option<(&'r CompiledCors, HeaderValue)> {
    let cors = route.cors.as_ref()?;
    let origin = match headers.get(header::ORIGIN) {
        None => None,
        Some(v) => Some(v.to_str().ok()?),
    };
    let allow = HeaderValue::from_str(cors.policy.allow_origin(origin)?).ok()?;
    Some((cors, allow))
}

/// The CORS headers for an allowed origin, replacing any the backend sent.
fn cors_headers(cors: &CompiledCors, origin: HeaderValue, h: &mut http::HeaderMap) {
    if origin != "*" {
        h.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    for name in [
        header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        header::ACCESS_CONTROL_ALLOW_METHODS,
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
    ] {
        h.remove(name);
    }
    for (name, v) in &cors.headers {
        h.insert(name, v.clone());
    }
}

/// A response, the reason it was not the backend's (for the access log), and the
/// endpoint that answered.
type Outcome = (Response<Body>, Option<Answered>, Option<SocketAddr>);

/// The checks made before routing: target length, framing, path normalisation.
fn precheck<B>(shared: &Shared, req: &mut Request<B>) -> Result<(), Rejected> {
    let url_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if url_len > shared.opts.limits.max_url_bytes {
        return Err(Rejected::UrlTooLong);
    }
    check_framing(req)?;
    normalize_target(req, shared.opts.paths)
}

/// Answers a refused request; counted by reason.
fn refuse(shared: &Shared, rejected: Rejected) -> Outcome {
    shared.metrics.rejected(rejected);
    let mut r = local(rejected.status(), rejected.message());
    if rejected != Rejected::Misdirected {
        // The framing can no longer be trusted, or the body was not read: this
        // connection carries no further request.
        r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    (r, Some(Answered::Rejected(rejected)), None)
}

/// True when `host` would get another certificate than `sni`, the name the connection
/// was opened for: the client must not reuse this connection for it (RFC 9110 §15.5.20).
/// Hosts that share a certificate can share connections.
fn misdirected(cfg: &crate::config::Tables, sni: &str, host: &str) -> bool {
    if host.is_empty() || sni.eq_ignore_ascii_case(host) {
        return false;
    }
    let (for_sni, _) = cfg.sni.select(Some(sni));
    let (for_host, _) = cfg.sni.select(Some(host));
    // Client certificates were asked for (or not) by the SNI's host: another host's
    // requests need a connection of their own.
    let ca = |name: &str| cfg.client_auth_for(Some(name)).map(Arc::as_ptr);
    !Arc::ptr_eq(for_sni, for_host) || ca(sni) != ca(host)
}

/// The host a request is for, as sent: `:authority` (HTTP/2, absolute-form) or `Host`.
fn request_host<B>(req: &Request<B>) -> Option<HeaderValue> {
    match req.uri().authority() {
        Some(a) => HeaderValue::from_str(a.as_str()).ok(),
        None => req.headers().get(header::HOST).cloned(),
    }
}

/// The port a `Host` (or `:authority`) value names, if it names one.
fn authority_port(value: &HeaderValue) -> Option<u16> {
    let (host, port) = value.to_str().ok()?.rsplit_once(':')?;
    // After the last ':' that is not inside an IPv6 literal.
    (!host.starts_with('[') || host.ends_with(']')).then(|| port.parse().ok())?
}

/// Lower-case host without port; IPv6 literals keep their brackets. Borrows when the host
/// is already in that form, as it almost always is.
fn normalize_host(h: &str) -> Cow<'_, str> {
    let h = h.rsplit('@').next().unwrap_or(h);
    let without_port =
        if h.starts_with('[') { h.split_inclusive(']').next().unwrap_or(h) } else { h.split(':').next().unwrap_or(h) };
    let host = without_port.trim_end_matches('.');
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    }
}

/// The answer to an ACME HTTP-01 validation request (RFC 8555 §8.3), ahead of routes and
/// HTTPS redirects: the key authorization of a token being validated.
fn acme_http01<B>(
    shared: &Shared,
    cfg: &crate::config::CompiledConfig,
    conn: &ConnInfo,
    req: &Request<B>,
) -> Option<Response<Body>> {
    if !matches!(*req.method(), http::Method::GET | http::Method::HEAD) {
        return None;
    }
    let key_authorization = cfg.acme.http01(req.uri().path())?;
    shared.metrics.acme_answered(crate::metrics::AcmeChallenge::Http01);
    tracing::info!(client = %conn.client, path = req.uri().path(), "answered an ACME HTTP-01 validation");
    let mut r = Response::new(Full::new(key_authorization.clone()).map_err(|never| match never {}).boxed_unsync());
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::{normalize_host, redirect_to, request_host, respond, set_path, set_upstream_uri, ConnInfo, Scheme};
    use http::{Request, Version};
    use wharf_model::{AppProtocol, PathMatch, PathRewrite, Redirect, Respond};

    #[test]
    fn redirects_keep_what_they_do_not_replace_and_pick_the_port_as_gateway_api_says() {
        let conn = |scheme, port| ConnInfo {
            client: ([127, 0, 0, 1], 1).into(),
            scheme,
            port,
            sni: None,
            gateway_port: None,
            forwarded_by: None,
            proxy_port: None,
            proxy_host: None,
            client_cert: None,
        };
        let rd = |scheme: Option<&str>, host: Option<&str>, port: Option<u16>, status: u16| Redirect {
            scheme: scheme.map(str::to_owned),
            host: host.map(str::to_owned),
            port,
            path: None,
            status,
            location: None,
            port_as_sent: false,
            relative: false,
        };
        let req = Request::get("/a/b?x=1").body(()).unwrap();
        let root = PathMatch::Prefix("/".into());
        let location = |rd: &Redirect, c: &ConnInfo| {
            let r = redirect_to(rd, &root, c, "a.test", &req);
            (r.status().as_u16(), r.headers()["location"].to_str().unwrap_or("").to_owned())
        };
        let cases = [
            (rd(None, None, None, 302), conn(Scheme::Http, 80), (302, "http://a.test/a/b?x=1")),
            (rd(None, None, None, 301), conn(Scheme::Http, 8080), (301, "http://a.test:8080/a/b?x=1")),
            (rd(Some("https"), None, None, 302), conn(Scheme::Http, 8080), (302, "https://a.test/a/b?x=1")),
            (rd(Some("http"), None, None, 302), conn(Scheme::Https, 443), (302, "http://a.test/a/b?x=1")),
            (rd(None, Some("b.test"), Some(8443), 307), conn(Scheme::Https, 443), (307, "https://b.test:8443/a/b?x=1")),
            (rd(Some("https"), None, Some(443), 308), conn(Scheme::Http, 80), (308, "https://a.test/a/b?x=1")),
            (rd(None, None, Some(80), 302), conn(Scheme::Https, 443), (302, "https://a.test:80/a/b?x=1")),
            (rd(None, None, None, 999), conn(Scheme::Https, 443), (302, "https://a.test/a/b?x=1")),
        ];
        for (rd, c, (status, want)) in cases {
            assert_eq!(location(&rd, &c), (status, want.to_owned()), "{rd:?} on {:?}:{}", c.scheme, c.port);
        }
        let full = Redirect { path: Some(PathRewrite::Full("/z".into())), ..rd(None, None, None, 302) };
        assert_eq!(location(&full, &conn(Scheme::Http, 80)).1, "http://a.test/z?x=1");
        let bad = rd(None, Some("bad\nhost"), None, 302);
        assert_eq!(redirect_to(&bad, &root, &conn(Scheme::Http, 80), "a.test", &req).status().as_u16(), 400);
        // A whole Location is sent as given: no path, query, scheme or port of the request.
        let fixed = Redirect { location: Some("https://new.test/landing".into()), ..rd(Some("http"), None, None, 301) };
        assert_eq!(location(&fixed, &conn(Scheme::Http, 8080)), (301, "https://new.test/landing".to_owned()));
        let broken = Redirect { location: Some("https://x\n".into()), ..rd(None, None, None, 301) };
        assert_eq!(redirect_to(&broken, &root, &conn(Scheme::Http, 80), "a.test", &req).status().as_u16(), 500);
        // A path is made absolute against the request, without any port, unless relative.
        let path = Redirect { location: Some("/new?y=2".into()), ..rd(None, None, None, 301) };
        assert_eq!(location(&path, &conn(Scheme::Https, 8443)), (301, "https://a.test/new?y=2".to_owned()));
        let relative = Redirect { relative: true, ..path };
        assert_eq!(location(&relative, &conn(Scheme::Https, 8443)), (301, "/new?y=2".to_owned()));
        // The port the client wrote in its Host, not the listener's (behind a Service 80 -> 8080).
        let as_sent = Redirect { port_as_sent: true, ..rd(None, Some("b.test"), None, 308) };
        for (host, want) in [
            ("a.test", "http://b.test/a/b?x=1"),
            ("a.test:8000", "http://b.test:8000/a/b?x=1"),
            ("a.test:80", "http://b.test/a/b?x=1"),
            ("[::1]", "http://b.test/a/b?x=1"),
            ("[::1]:81", "http://b.test:81/a/b?x=1"),
        ] {
            let req = Request::get("/a/b?x=1").header("host", host).body(()).unwrap();
            let r = redirect_to(&as_sent, &root, &conn(Scheme::Http, 8080), "a.test", &req);
            assert_eq!(r.headers()["location"], want, "Host {host}");
        }
    }

    #[test]
    fn a_rewritten_path_keeps_the_query_and_an_invalid_one_changes_nothing() {
        let mut req = Request::get("/a/b?x=1").body(()).unwrap();
        set_path(&mut req, "/c");
        assert_eq!(req.uri(), "/c?x=1");
        set_path(&mut req, "/bad path");
        assert_eq!(req.uri(), "/c?x=1");
        let mut h2 = Request::get("https://a.test/p").body(()).unwrap();
        set_path(&mut h2, "/q");
        assert_eq!(h2.uri(), "https://a.test/q");
    }

    #[test]
    fn fixed_answers_carry_their_status_or_500() {
        assert_eq!(respond(&Respond { status: 418, body: "x".into() }).status().as_u16(), 418);
        assert_eq!(respond(&Respond { status: 1000, body: "x".into() }).status().as_u16(), 500);
    }

    #[test]
    fn hosts_normalize() {
        assert_eq!(normalize_host("Foo.COM:8443"), "foo.com");
        assert_eq!(normalize_host("foo.com."), "foo.com");
        assert_eq!(normalize_host("[::1]:80"), "[::1]");
        assert_eq!(normalize_host(""), "");
    }

    #[test]
    fn authority_wins_over_host_header() {
        let h2 = Request::get("https://a.example:8443/x").header("host", "b.example").body(()).unwrap();
        assert_eq!(request_host(&h2).unwrap(), "a.example:8443");
        let h1 = Request::get("/x").header("host", "B.example").body(()).unwrap();
        assert_eq!(request_host(&h1).unwrap(), "B.example");
        assert!(request_host(&Request::get("/x").body(()).unwrap()).is_none());
    }

    #[test]
    fn upstream_uri_is_origin_form_for_http1_and_absolute_for_h2c() {
        let mut h2 = Request::get("https://a.example:8443/x?q=1").body(()).unwrap();
        set_upstream_uri(&mut h2, AppProtocol::Http1, "a.example:8443");
        assert_eq!(h2.uri(), "/x?q=1");
        assert_eq!(h2.version(), Version::HTTP_11);

        let mut h1 = Request::get("/y").body(()).unwrap();
        set_upstream_uri(&mut h1, AppProtocol::Http1, "b.example");
        assert_eq!(h1.uri(), "/y");

        let mut to_h2c = Request::get("/z?k").body(()).unwrap();
        set_upstream_uri(&mut to_h2c, AppProtocol::H2c, "c.example");
        assert_eq!(to_h2c.uri(), "http://c.example/z?k");
        assert_eq!(to_h2c.version(), Version::HTTP_2);

        let mut no_host = Request::get("/").body(()).unwrap();
        set_upstream_uri(&mut no_host, AppProtocol::H2c, "");
        assert_eq!(no_host.uri(), "http://localhost/");
    }
}
