//! External authentication (ingress-nginx `auth-url`): a check request, without the
//! client's body, decides whether the request goes on.

use std::time::Duration;

use http::{header, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use wharf_model::{PathMatch, Var};

use super::{forward, local, ConnInfo, Outcome, Scheme};
use crate::auth::{escape_query_value, signin_location, CompiledAuth, ExternalChecker};
use crate::config::Tables;
use crate::reasons::{Answered, UpstreamError};
use crate::routing::CompiledRoute;
use crate::routing::{CompiledAction, RequestView};
use crate::upstream::body::RequestBody;
use crate::Shared;

/// How much of a check's answer body is read (so that its connection can be reused)
/// before it is dropped.
const ANSWER_BODY_LIMIT: usize = 64 * 1024;

/// What a check decided.
pub(super) enum Checked {
    /// The request goes on; these cookies of the check's answer go to the client with
    /// the response (with any status when `always`).
    Pass { cookies: Vec<HeaderValue>, always: bool },
    /// The client's answer.
    Answer(Outcome),
}

/// The request's values of the template variables.
struct Vars<'a> {
    host: &'a str,
    scheme: &'static str,
    request_uri: &'a str,
    path: &'a str,
    query: &'a str,
    headers: &'a http::HeaderMap,
}

impl Vars<'_> {
    fn value(&self, v: &Var) -> String {
        match v {
            Var::Host => self.host.to_owned(),
            Var::Scheme => self.scheme.to_owned(),
            Var::RequestUri => self.request_uri.to_owned(),
            Var::EscapedRequestUri => escape_query_value(self.request_uri),
            Var::Uri => self.path.to_owned(),
            Var::Args => self.query.to_owned(),
            Var::RemoteUser => remote_user(self.headers).unwrap_or_default(),
            Var::Header(name) => self
                .headers
                .get(name.as_ref())
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_default(),
            Var::Cookie(name) => forward::cookie_values(self.headers, name).next().unwrap_or("").to_owned(),
        }
    }
}

/// The user name of the request's Basic credentials (nginx's `$remote_user`).
fn remote_user(headers: &http::HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = v.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = wharf_model::decode_base64(encoded.trim())?;
    let text = String::from_utf8(decoded).ok()?;
    text.split_once(':').map(|(user, _)| user.to_owned())
}

/// Sends the check for `req` (to host `host`, matched by `asking`) and reads its answer.
/// A passing answer's `auth-response-headers` are set on `req`.
pub(super) async fn check<B>(
    shared: &Shared,
    conn: &ConnInfo,
    tables: Option<&Tables>,
    host: &str,
    asking: &CompiledRoute,
    ext: &ExternalChecker,
    req: &mut Request<B>,
) -> Checked {
    let scheme = match conn.scheme {
        Scheme::Http => "http",
        Scheme::Https => "https",
    };
    let request_uri = req.uri().path_and_query().map_or("/", |pq| pq.as_str()).to_owned();
    let vars = Vars {
        host,
        scheme,
        request_uri: &request_uri,
        path: req.uri().path(),
        query: req.uri().query().unwrap_or(""),
        headers: req.headers(),
    };
    let url = ext.auth.url.fill(|v| vars.value(v));
    let signin = ext.auth.signin.as_ref().map(|t| t.fill(|v| vars.value(v)));
    // The kept answers' key: the host and the route, then what the key names.
    let cache = ext.auth.cache.as_deref().map(|c| {
        let key = c.key.fill(|v| vars.value(v));
        (c, format!("{host}\n{}\n{:?}\n{key}", asking.source(), asking.matches.path))
    });
    let failed = |why: &str| {
        tracing::debug!(url = %url, "authentication check failed: {why}");
        Checked::Answer((
            local(StatusCode::INTERNAL_SERVER_ERROR, "authentication check failed"),
            Some(Answered::AuthFailed),
            None,
        ))
    };
    let original = format!("{scheme}://{host}{request_uri}");
    let kept = cache.as_ref().and_then(|(_, key)| shared.auth_answers.get(key, std::time::Instant::now()));
    let (status, headers) = match kept {
        Some(kept) => kept,
        None => {
            let Ok(target) = url.parse::<http::Uri>() else { return failed("the URL does not parse") };
            let (Some(authority), Some(path)) = (target.authority(), target.path_and_query()) else {
                return failed("the URL has no host");
            };
            let Ok(check_host) = HeaderValue::from_str(authority.as_str()) else {
                return failed("the URL has no host");
            };
            let check = check_request(ext, conn, req, path.as_str(), &original, &request_uri);
            let to = Target { uri: &target, host: &check_host, tables, asking };
            let (resp, _) = match send(shared, conn, ext, to, check).await {
                Ok(Ok(sent)) => sent,
                Ok(Err(e)) => return failed(e.reason()),
                Err(why) => return failed(why),
            };
            let (parts, body) = resp.into_parts();
            // Read (a little of) the answer so that the connection can serve the next check.
            let _ = tokio::time::timeout(Duration::from_secs(5), Limited::new(body, ANSWER_BODY_LIMIT).collect()).await;
            // As nginx's cache: an answer that sets cookies is not kept.
            if let Some((c, key)) = cache {
                if c.statuses.contains(&parts.status.as_u16()) && !parts.headers.contains_key(header::SET_COOKIE) {
                    let ttl = Duration::from_secs(c.ttl_s);
                    shared.auth_answers.keep(key, parts.status, &parts.headers, ttl, std::time::Instant::now());
                }
            }
            (parts.status, parts.headers)
        }
    };
    match status {
        s if s.is_success() => {
            for name in &ext.response_headers {
                match headers.get(name) {
                    Some(v) => {
                        req.headers_mut().insert(name.clone(), v.clone());
                    }
                    None => {
                        req.headers_mut().remove(name);
                    }
                }
            }
            let cookies = headers.get_all(header::SET_COOKIE).iter().cloned().collect();
            Checked::Pass { cookies, always: ext.auth.always_set_cookie }
        }
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            Checked::Answer(refusal(ext, status, &headers, signin.as_deref(), &original))
        }
        other => failed(&format!("the check answered {other}")),
    }
}

/// The check request for the client's `req`: `method` to `path`, with the client's
/// headers (its cookies and credentials are what the check reads) but none of its body's,
/// and the `X-Original-*` headers saying what the client asked for.
fn check_request<B>(
    ext: &ExternalChecker,
    conn: &ConnInfo,
    req: &Request<B>,
    path: &str,
    original: &str,
    request_uri: &str,
) -> Request<RequestBody> {
    let mut check = Request::new(RequestBody::empty());
    *check.method_mut() = ext.method.clone();
    *check.uri_mut() = path.parse().unwrap_or_default();
    let h = check.headers_mut();
    let body_headers = [header::CONTENT_LENGTH, header::TRANSFER_ENCODING, header::EXPECT, header::HOST];
    for (name, value) in req.headers() {
        if !body_headers.contains(name) {
            h.append(name.clone(), value.clone());
        }
    }
    // Not the client's connection: the check is no upgrade, whatever the request is.
    super::headers::strip_hop_by_hop(h, false);
    let mut set = |name: &'static str, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(name, v);
        }
    };
    set("x-original-url", original);
    set("x-original-method", req.method().as_str());
    set("x-sent-from", "nginx-ingress-controller");
    set("x-real-ip", &conn.client.ip().to_string());
    set("x-auth-request-redirect", ext.auth.request_redirect.as_deref().unwrap_or(request_uri));
    check
}

/// Where a check goes: the URL, its `Host`, and the tables and route of the request that
/// asks.
struct Target<'a> {
    uri: &'a http::Uri,
    host: &'a HeaderValue,
    tables: Option<&'a Tables>,
    asking: &'a CompiledRoute,
}

/// Sends `check` to the check's cluster; without one, routes it like a request for the
/// URL's host through this gateway's own routes of the asking route's namespace, and past
/// their checks as the client's own request would be. `Err`: why it was not sent.
async fn send(
    shared: &Shared,
    conn: &ConnInfo,
    ext: &ExternalChecker,
    to: Target<'_>,
    check: Request<RequestBody>,
) -> Result<Result<(http::Response<super::Body>, std::net::SocketAddr), UpstreamError>, &'static str> {
    if let Some(fwd) = &ext.forward {
        return Ok(forward(shared, conn, fwd, &PathMatch::Prefix("/".into()), Some(to.host), check).await);
    }
    let (Some(t), Some(authority)) = (to.tables, to.uri.authority()) else {
        return Err("no route of this gateway serves the URL");
    };
    let (to_host, to_path) = (authority.host().to_ascii_lowercase(), to.uri.path().to_owned());
    let view = RequestView { path: &to_path, query: to.uri.query(), method: &ext.method, headers: check.headers() };
    match t.router.route(&to_host, &view) {
        Some(r) if r.namespace() != to.asking.namespace() => Err("the URL's route belongs to another namespace"),
        Some(r @ CompiledRoute { action: CompiledAction::Forward(f), .. }) => {
            match admitted(r, conn, check.headers()).await {
                Ok(_in_flight) => Ok(forward(shared, conn, f, &r.matches.path, Some(to.host), check).await),
                Err(refused) => Ok(Ok((refused, conn.client))),
            }
        }
        _ => Err("no route of this gateway serves the URL"),
    }
}

/// The client's answer to a check that answered `401` (a redirect to the sign-in page
/// when there is one) or `403`, with the check's cookies where nginx adds them.
fn refusal(
    ext: &ExternalChecker,
    status: StatusCode,
    headers: &http::HeaderMap,
    signin: Option<&str>,
    original: &str,
) -> Outcome {
    let cookies: Vec<HeaderValue> = headers.get_all(header::SET_COOKIE).iter().cloned().collect();
    let always = ext.auth.always_set_cookie;
    if status == StatusCode::FORBIDDEN {
        let mut r = local(StatusCode::FORBIDDEN, "forbidden");
        if always {
            add_cookies(r.headers_mut(), cookies);
        }
        return (r, Some(Answered::Forbidden), None);
    }
    let mut r = match signin {
        Some(page) => {
            let location = signin_location(page, &ext.auth.signin_redirect_param, original);
            let mut r = local(StatusCode::FOUND, "sign in first");
            if let Ok(v) = HeaderValue::from_str(&location) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            add_cookies(r.headers_mut(), cookies);
            return (r, Some(Answered::Unauthorized), None);
        }
        None => local(StatusCode::UNAUTHORIZED, "authorization required"),
    };
    if let Some(challenge) = headers.get(header::WWW_AUTHENTICATE) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, challenge.clone());
    }
    if always {
        add_cookies(r.headers_mut(), cookies);
    }
    (r, Some(Answered::Unauthorized), None)
}

/// Whether a check routed through this gateway passes `route`'s own checks, as the
/// client's request would: its rate limit (the guard counts the check in flight), client
/// certificate, address lists and basic authentication; else the answer the client would
/// get (`403`, `401` or `503`). A route that has external authentication of its own
/// refuses checks (`503`): checks do not chain.
async fn admitted(
    route: &CompiledRoute,
    conn: &ConnInfo,
    headers: &http::HeaderMap,
) -> Result<Option<crate::ratelimit::InFlight>, http::Response<super::Body>> {
    let in_flight = match route.limiter.as_ref().map(|l| l.admit(conn.client.ip())) {
        Some(Err(_)) => return Err(local(StatusCode::SERVICE_UNAVAILABLE, "too many requests from this client")),
        Some(Ok(guard)) => guard,
        None => None,
    };
    if route.client_cert.as_ref().is_some_and(|c| c.admits(conn.client_cert.as_deref()).is_err()) {
        return Err(local(StatusCode::FORBIDDEN, "client certificate unauthorized"));
    }
    if route.clients.as_ref().is_some_and(|c| !c.admits(conn.client.ip())) {
        return Err(local(StatusCode::FORBIDDEN, "this client address is not allowed here"));
    }
    match route.auth.as_deref() {
        None => Ok(in_flight),
        Some(CompiledAuth::Basic(b)) if b.admits(headers).await => Ok(in_flight),
        Some(CompiledAuth::Basic(b)) => Err(super::unauthorized(b)),
        Some(CompiledAuth::External(_) | CompiledAuth::Unavailable(_)) => {
            Err(local(StatusCode::SERVICE_UNAVAILABLE, "the check's own route cannot be checked"))
        }
    }
}

/// Adds the check's cookies to a response.
pub(super) fn add_cookies(h: &mut http::HeaderMap, cookies: Vec<HeaderValue>) {
    for c in cookies {
        h.append(header::SET_COOKIE, c);
    }
}

/// True for the statuses nginx's `add_header` (without `always`) adds to.
pub(super) fn takes_cookies(status: StatusCode) -> bool {
    matches!(status.as_u16(), 200 | 201 | 204 | 206 | 301 | 302 | 303 | 304 | 307 | 308)
}
