//! Forwarding a request to its backend: body limits, the upstream request, timeouts,
//! error pages from the fallback backend, and upgraded connections.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;

use http::uri::{Authority, PathAndQuery};
use http::{header, HeaderValue, Request, Response, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use wharf_model::{AppProtocol, PathMatch};

use crate::reasons::{Answered, Rejected, UpstreamError};
use crate::routing::CompiledRoute;
use crate::upstream::body::{self, PooledBody, RequestBody};
use crate::upstream::forward::{BackendEdits, CompiledFallback, CompiledForward};
use crate::upstream::{self, Conn, Dialer, Upstream};
use crate::Shared;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

/// Forwards under the route's body limit.
pub(super) async fn proxy(
    shared: &Shared,
    conn: &ConnInfo,
    route: &CompiledRoute,
    fwd: &CompiledForward,
    host: Option<&HeaderValue>,
    mut req: Request<Incoming>,
) -> Outcome {
    headers::set_client_cert(req.headers_mut(), route.client_cert.as_deref(), conn.client_cert.as_deref());
    // What an error request would tell of this one.
    let errors = fwd.fallback.as_deref().filter(|f| !f.codes.is_empty());
    let original = errors.map(|_| ErrorContext::of(&mut req, host));
    let (req, tripped) = match body_limit(route, shared.opts.limits.max_body_bytes, req.headers()) {
        BodyLimit::Over => return refuse(shared, Rejected::BodyTooLarge),
        BodyLimit::At(n) => {
            let tripped = Arc::new(AtomicBool::new(false));
            let t = Arc::clone(&tripped);
            (req.map(|b| RequestBody::limited(b, n, t)), Some(tripped))
        }
        BodyLimit::None => (req.map(RequestBody::unlimited), None),
    };
    let sent = forward(shared, conn, fwd, &route.matches.path, host, req).await;
    let failed = match (&sent, errors) {
        (Ok((resp, _)), Some(fb)) if fb.answers(resp.status()) => Some(resp.status()),
        (Err(_), _) if tripped.as_ref().is_some_and(|t| t.load(Ordering::Relaxed)) => None,
        (Err(e), Some(fb)) if fb.answers(e.status()) => Some(e.status()),
        _ => None,
    };
    if let (Some(status), Some(fb), Some(original)) = (failed, errors, original) {
        if let Err(e) = &sent {
            shared.metrics.upstream_error(*e);
        }
        // The backend's answer is dropped unread.
        drop(sent);
        return error_page(shared, conn, fb, original, status).await;
    }
    match sent {
        Ok((mut resp, addr)) => {
            fwd.response_headers.apply(resp.headers_mut());
            (resp, None, Some(addr))
        }
        Err(_) if tripped.is_some_and(|t| t.load(Ordering::Relaxed)) => refuse(shared, Rejected::BodyTooLarge),
        Err(e) => {
            shared.metrics.upstream_error(e);
            (local(e.status(), e.reason()), Some(Answered::Upstream(e)), None)
        }
    }
}

/// What the default backend is told of a request whose answer it replaces.
pub(super) struct ErrorContext {
    method: http::Method,
    uri: String,
    accept: Option<HeaderValue>,
    host: Option<HeaderValue>,
    request_id: HeaderValue,
}

impl ErrorContext {
    /// The context of `req` (for host `host`), giving it a request id if it has none, so
    /// that the backend and the error request carry the same one.
    fn of<B>(req: &mut Request<B>, host: Option<&HeaderValue>) -> ErrorContext {
        ErrorContext {
            method: req.method().clone(),
            uri: req.uri().path_and_query().map_or("/", |pq| pq.as_str()).to_owned(),
            accept: req.headers().get(header::ACCEPT).cloned(),
            host: host.cloned(),
            request_id: headers::ensure_request_id(req.headers_mut()),
        }
    }
}

/// The default backend's answer for a request whose answer had `status`: a request for
/// `/` with the same method and no body, telling what failed as ingress-nginx's
/// custom error pages read it (`X-Code`, `X-Format`, `X-Original-URI`, ...). When the
/// default backend cannot answer, the gateway answers `status` itself.
pub(super) async fn error_page(
    shared: &Shared,
    conn: &ConnInfo,
    fb: &CompiledFallback,
    original: ErrorContext,
    status: StatusCode,
) -> Outcome {
    let mut req = Request::new(RequestBody::empty());
    *req.method_mut() = original.method;
    *req.uri_mut() = Uri::from_static("/");
    let h = req.headers_mut();
    h.insert("x-code", HeaderValue::from(status.as_u16()));
    if let Some(accept) = original.accept {
        h.insert("x-format", accept);
    }
    if let Ok(uri) = HeaderValue::from_str(&original.uri) {
        h.insert("x-original-uri", uri);
    }
    for (name, value) in &fb.headers {
        h.insert(name.clone(), value.clone());
    }
    h.insert("x-request-id", original.request_id);
    let root = PathMatch::Prefix("/".into());
    match forward(shared, conn, &fb.forward, &root, original.host.as_ref(), req).await {
        Ok((resp, addr)) => (resp, Some(Answered::CustomError), Some(addr)),
        Err(e) => {
            shared.metrics.upstream_error(e);
            tracing::debug!(
                status = status.as_u16(),
                error = e.reason(),
                "the default backend could not answer an error"
            );
            (local(status, status.canonical_reason().unwrap_or("error")), Some(Answered::CustomErrorFailed), None)
        }
    }
}

/// What the default backend is told of a request it takes because the route's backend
/// has no endpoints, as ingress-nginx tells it: `X-Code: 503`, `X-Format` (the client's
/// `Accept`), the Ingress's namespace and name, the Service and port, and the request
/// id (the client's own, when it sent a sane one). The path is the client's.
fn fallback_headers(fb: &CompiledFallback, h: &mut http::HeaderMap) {
    h.insert("x-code", HeaderValue::from_static("503"));
    match h.get(header::ACCEPT).cloned() {
        Some(accept) => h.insert("x-format", accept),
        None => h.remove("x-format"),
    };
    for name in ["x-namespace", "x-ingress-name", "x-service-name", "x-service-port"] {
        h.remove(name);
    }
    for (name, value) in &fb.headers {
        h.insert(name.clone(), value.clone());
    }
    headers::ensure_request_id(h);
}

/// How much body a request may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BodyLimit {
    /// No limit.
    None,
    /// At most this many bytes.
    At(u64),
    /// Its Content-Length is already over the limit.
    Over,
}

/// The route's limit, else the gateway's (0: none), checked against Content-Length.
pub(super) fn body_limit(route: &CompiledRoute, default: u64, headers: &http::HeaderMap) -> BodyLimit {
    let limit = route.max_body_bytes.unwrap_or(default);
    if limit == 0 {
        return BodyLimit::None;
    }
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(n) if n > limit => BodyLimit::Over,
        _ => BodyLimit::At(limit),
    }
}

pub(super) async fn forward(
    shared: &Shared,
    conn: &ConnInfo,
    route: &CompiledForward,
    matched: &PathMatch,
    host: Option<&HeaderValue>,
    mut req: Request<RequestBody>,
) -> Result<(Response<Body>, SocketAddr), UpstreamError> {
    // Sticky sessions: the endpoint the client's cookie names, while it is there and not
    // failing, in whichever backend has it; then the balancer's choice.
    let cookie = route.affinity.as_deref().map(|a| cookies(req.headers(), &a.name)).unwrap_or_default();
    let picked = route.pick_sticky(&cookie)?;
    let (upstream, own, mut sticky) = (picked.upstream, picked.edits, picked.sticky);
    let sets_cookie = route.sets_cookie(picked.backend);
    if upstream.endpoints.is_empty() {
        return Err(UpstreamError::NoEndpoints);
    }
    if let Some(fb) = picked.fallback {
        fallback_headers(fb, req.headers_mut());
    }
    let upgrade = req.version() == Version::HTTP_11 && headers::is_upgrade(req.headers());
    let downstream_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let host = prepare(conn, route, own, matched, host, upgrade, &mut req);
    let timeouts = &shared.opts.timeouts;
    let limit = route.timeout.unwrap_or(Some(timeouts.request));
    if !route.mirrors.is_empty() && downstream_upgrade.is_none() {
        let t = (timeouts.upstream_idle, limit);
        mirror::start(&route.mirrors, &mut req, &shared.dialer, &shared.metrics, conn.client, t);
    }
    set_upstream_uri(&mut req, upstream.protocol, host.and_then(|h| h.to_str().ok()).unwrap_or(""));
    let dialer = match route.connect_timeout {
        Some(timeout) => Cow::Owned(Dialer { timeout, ..shared.dialer.clone() }),
        None => Cow::Borrowed(&shared.dialer),
    };

    if let Some(down) = downstream_upgrade {
        // Boxed like dialing: rare, and large.
        let mut tunnel = Box::pin(upgrade_tunnel(shared, &dialer, upstream, req, down, conn.client)).await;
        if let Ok((resp, _)) = &mut tunnel {
            own.response.apply(resp.headers_mut());
        }
        return tunnel;
    }
    // A body is timed as it is sent; the wait for the response starts when it ends.
    let send_limit = route.send_timeout.unwrap_or(limit);
    let progress = (!hyper::body::Body::is_end_stream(req.body())).then(|| req.body_mut().watch());
    let policy = route.retry.as_deref();
    // A request is sent again only when it has no body to replay, and the policy asks.
    let replay = policy.filter(|p| progress.is_none() && p.replays(req.method())).map(|_| copy_head(&req));
    let tries = policy.map_or(usize::MAX, |p| p.tries);
    let until = policy.and_then(|p| p.budget).map(|b| std::time::Instant::now() + b);
    let mut tried = Vec::new();
    let mut req = Some(req);
    let mut last = UpstreamError::NoEndpoints;
    while let Some(i) = sticky.take().or_else(|| upstream.pick(&tried)) {
        if !tried.is_empty() && (tried.len() >= tries || until.is_some_and(|u| std::time::Instant::now() >= u)) {
            break;
        }
        let ep = &upstream.endpoints[i];
        let in_flight = ep.start();
        let c = match ep.conn(&dialer, conn.client, timeouts.upstream_idle).await {
            Ok(c) => c,
            Err(UpstreamError::MeshDenied) => return Err(UpstreamError::MeshDenied),
            Err(e) => {
                ep.eject();
                tried.push(i);
                last = e;
                continue;
            }
        };
        let Some(r) = req.take().or_else(|| replay.as_ref().map(copy_head)) else { break };
        // Whether a failure of this attempt may still go to another endpoint.
        let another = |tried: &[usize]| {
            replay.is_some()
                && tried.len() + 1 < tries
                && until.is_none_or(|u| std::time::Instant::now() < u)
                && (0..upstream.endpoints.len()).any(|k| k != i && !tried.contains(&k))
        };
        let (sent, sender) = match c {
            Conn::H1(mut s) => (timed(s.try_send_request(r), limit, send_limit, progress.as_deref()).await, Some(s)),
            Conn::H2(mut s) => (timed(s.try_send_request(r), limit, send_limit, progress.as_deref()).await, None),
        };
        match sent {
            Err(e) if e == UpstreamError::RequestTimeout && policy.is_some_and(|p| p.on_timeout) && another(&tried) => {
                shared.metrics.upstream_retry();
                tried.push(i);
                last = e;
            }
            Err(e) => return Err(e),
            Ok(Ok(resp)) if policy.is_some_and(|p| p.statuses.contains(&resp.status().as_u16())) && another(&tried) => {
                // Its answer is dropped unread (the connection with it).
                shared.metrics.upstream_retry();
                tried.push(i);
                last = UpstreamError::Protocol;
            }
            Ok(Ok(resp)) => {
                let (mut parts, body) = resp.into_parts();
                headers::strip_hop_by_hop(&mut parts.headers, false);
                own.response.apply(&mut parts.headers);
                if let Some(sticky) = route.affinity.as_deref().filter(|_| sets_cookie) {
                    if !cookie.contains(&ep.affinity_key) {
                        let https = conn.scheme == Scheme::Https;
                        let v = sticky.set_cookie(&ep.affinity_key, https, std::time::SystemTime::now());
                        if let Ok(v) = HeaderValue::from_str(&v) {
                            parts.headers.append(header::SET_COOKIE, v);
                        }
                    }
                }
                let pooled = match sender {
                    Some(s) => PooledBody::pooled(body, Arc::clone(ep), s, in_flight),
                    None => PooledBody::plain(body, in_flight),
                };
                return Ok((Response::from_parts(parts, pooled.boxed_unsync()), ep.addr));
            }
            Ok(Err(mut e)) => {
                // The connection died before the request went out: try again elsewhere.
                match e.take_message() {
                    Some(r) => {
                        req = Some(r);
                        tried.push(i);
                        last = UpstreamError::ConnectFailed;
                    }
                    None if policy.is_some_and(|p| p.on_error) && another(&tried) => {
                        tracing::debug!(upstream = %ep.addr, error = %e.error(), "upstream request failed; tried again");
                        shared.metrics.upstream_retry();
                        tried.push(i);
                        last = UpstreamError::Protocol;
                    }
                    None => {
                        tracing::debug!(upstream = %ep.addr, error = %e.error(), "upstream request failed");
                        return Err(UpstreamError::Protocol);
                    }
                }
            }
        }
    }
    Err(last)
}

/// A request with the method, target, version and headers of `req`, and no body: sent
/// again, or as a copy.
pub(super) fn copy_head<B>(req: &Request<B>) -> Request<RequestBody> {
    copy_head_with(req, RequestBody::empty())
}

/// [`copy_head`], with `body`.
pub(super) fn copy_head_with<B>(req: &Request<B>, body: RequestBody) -> Request<RequestBody> {
    let mut copy = Request::new(body);
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    copy
}

/// The port the client used (see [`headers::Forwarded::port`]).
fn client_port(conn: &ConnInfo, host: Option<&HeaderValue>) -> u16 {
    conn.proxy_port.or_else(|| host.and_then(authority_port)).unwrap_or(match conn.scheme {
        Scheme::Http => 80,
        Scheme::Https => 443,
    })
}

/// Makes `req` the request the backend gets: no hop-by-hop fields (but the upgrade's),
/// the forwarded fields, the routed (or rewritten) host and path, and the route's and the
/// backend's header edits. Returns the host the backend sees.
fn prepare<'a>(
    conn: &'a ConnInfo,
    route: &'a CompiledForward,
    own: &BackendEdits,
    matched: &PathMatch,
    host: Option<&'a HeaderValue>,
    upgrade: bool,
    req: &mut Request<RequestBody>,
) -> Option<&'a HeaderValue> {
    headers::strip_hop_by_hop(req.headers_mut(), upgrade);
    let port = client_port(conn, host);
    // A trusted proxy's word for the host the client asked for, else the routed one.
    let host = conn.proxy_host.as_ref().or(host);
    let fwd = headers::Forwarded {
        client_ip: conn.client.ip(),
        hop: conn.forwarded_by.unwrap_or(conn.client.ip()),
        proto: match conn.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        },
        host,
        port,
    };
    headers::set_forwarded(req.headers_mut(), &fwd);
    // The backend sees the host that was routed (an absolute-form target wins over a
    // different Host header, RFC 9112 §3.2.2; HTTP/2 carries it as :authority), or the
    // route's rewrite of it.
    let rewrite = route.rewrite.as_deref();
    let host = rewrite.and_then(|r| r.host.as_ref()).or(host);
    if let Some(h) = host {
        if req.headers().get(header::HOST) != Some(h) {
            req.headers_mut().insert(header::HOST, h.clone());
        }
    }
    if let Some(rewrite) = rewrite.and_then(|r| r.path.as_ref()) {
        let path = rewrite.apply(matched, req.uri().path());
        set_path(req, &path);
    }
    route.request_headers.apply(req.headers_mut());
    own.request.apply(req.headers_mut());
    host
}

/// Every value of cookie `name`: a browser sends one per matching `Domain` and `Path`,
/// and one set for a parent domain must not hide the host's own.
fn cookies(headers: &http::HeaderMap, name: &str) -> Vec<String> {
    cookie_values(headers, name).map(str::to_owned).collect()
}

/// The values of cookie `name`, from every `Cookie` field of the request, in order.
pub(super) fn cookie_values<'h>(headers: &'h http::HeaderMap, name: &'h str) -> impl Iterator<Item = &'h str> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(move |v| {
        v.split(';').filter_map(move |pair| {
            let (k, val) = pair.trim().split_once('=')?;
            (k == name).then(|| val.trim())
        })
    })
}

/// Origin-form for HTTP/1.1 backends, absolute-form for h2c (hyper needs scheme and
/// authority to build HTTP/2 pseudo-headers).
/// Replaces the request's path, keeping its query. A path that is not a valid request
/// target (the controller refuses those) leaves the request unchanged.
pub(super) fn set_path<B>(req: &mut Request<B>, path: &str) {
    let pq = match req.uri().query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let mut parts = req.uri().clone().into_parts();
    parts.path_and_query = PathAndQuery::try_from(pq).ok().or(parts.path_and_query);
    if let Ok(uri) = Uri::from_parts(parts) {
        *req.uri_mut() = uri;
    }
}

pub(super) fn set_upstream_uri<B>(req: &mut Request<B>, protocol: AppProtocol, host: &str) {
    let (scheme, authority, version) = match protocol {
        // Already origin-form, as every HTTP/1.1 request is: nothing to rebuild.
        AppProtocol::Http1 if req.uri().scheme().is_none() && req.uri().authority().is_none() => {
            *req.version_mut() = Version::HTTP_11;
            return;
        }
        AppProtocol::Http1 => (None, None, Version::HTTP_11),
        AppProtocol::H2c => (
            Some(http::uri::Scheme::HTTP),
            Authority::try_from(if host.is_empty() { "localhost" } else { host }).ok(),
            Version::HTTP_2,
        ),
    };
    let mut parts = http::uri::Parts::default();
    parts.scheme = scheme;
    parts.authority = authority;
    parts.path_and_query = Some(req.uri().path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/")));
    if let Ok(uri) = Uri::from_parts(parts) {
        *req.uri_mut() = uri;
    }
    *req.version_mut() = version;
}

/// `f`, given at most `limit` (any time it takes when `None`).
/// Waits for `f`, the response's headers, within the route's timeouts: `read` from the
/// end of the request body (or between two parts of it the client sends), `send` while a
/// part of it waits for the backend to take it. Without `progress` (no body), `read` from
/// now. The body's progress wakes no one: the timer looks at it when the deadline of what
/// the request waited on comes, and at least every `send` (the shortest deadline a change
/// can bring), so a request's timers cost a wakeup per deadline, not per part of its body.
pub(super) async fn timed<F: std::future::Future>(
    f: F,
    read: Option<std::time::Duration>,
    send: Option<std::time::Duration>,
    progress: Option<&body::SendProgress>,
) -> Result<F::Output, UpstreamError> {
    let Some(p) = progress else {
        return within(read, f).await.map_err(|_| UpstreamError::RequestTimeout);
    };
    tokio::pin!(f);
    loop {
        let (deadline, err) = match p.waiting() {
            body::Waiting::Backend(since) => (send.map(|d| since + d), UpstreamError::SendTimeout),
            body::Waiting::Client(since) | body::Waiting::Response(since) => {
                (read.map(|d| since + d), UpstreamError::RequestTimeout)
            }
        };
        let now = std::time::Instant::now();
        if deadline.is_some_and(|d| d <= now) {
            return Err(err);
        }
        let look_again = [deadline, send.map(|d| now + d)].into_iter().flatten().min();
        let wait = async {
            match look_again {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            out = &mut f => return Ok(out),
            () = wait => {}
        }
    }
}

pub(super) async fn within<F: std::future::Future>(
    limit: Option<std::time::Duration>,
    f: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    match limit {
        Some(d) => tokio::time::timeout(d, f).await,
        None => Ok(f.await),
    }
}

pub(super) async fn upgrade_tunnel(
    shared: &Shared,
    dialer: &Dialer,
    upstream: &Upstream,
    req: Request<RequestBody>,
    downstream: hyper::upgrade::OnUpgrade,
    client: SocketAddr,
) -> Result<(Response<Body>, SocketAddr), UpstreamError> {
    let timeouts = &shared.opts.timeouts;
    let (stream, ep) = upstream::connect_any(upstream, dialer, client).await?;
    let in_flight = ep.start();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|_| UpstreamError::ConnectFailed)?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let mut resp = tokio::time::timeout(timeouts.request, sender.send_request(req))
        .await
        .map_err(|_| UpstreamError::RequestTimeout)?
        .map_err(|_| UpstreamError::Protocol)?;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let up = hyper::upgrade::on(&mut resp);
        tokio::spawn(async move {
            let _in_flight = in_flight;
            match tokio::try_join!(downstream, up) {
                Ok((d, u)) => {
                    let (mut d, mut u) = (TokioIo::new(d), TokioIo::new(u));
                    let _ = crate::relay::copy(&mut d, &mut u).await;
                }
                Err(e) => tracing::debug!(error = %e, "upgrade failed"),
            }
        });
        let (parts, _) = resp.into_parts();
        return Ok((
            Response::from_parts(parts, http_body_util::Empty::new().map_err(|never| match never {}).boxed_unsync()),
            ep.addr,
        ));
    }
    let (parts, body) = resp.into_parts();
    Ok((Response::from_parts(parts, PooledBody::plain(body, in_flight).boxed_unsync()), ep.addr))
}
