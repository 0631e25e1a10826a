//! External authentication (ingress-nginx `auth-url`): a check request, without the
//! client's body, decides whether the request goes on.

use std::time::Duration;

use http::{header, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use wharf_model::{PathMatch, Var};

use super::{forward, local, ConnInfo, Outcome, Scheme};
use crate::auth::{escape_query_value, signin_location, CompiledAuth, ExternalChecker};
use crate::config::Tables;
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
}

impl Vars<'_> {
    fn value(&self, v: Var) -> String {
        match v {
            Var::Host => self.host.to_owned(),
            Var::Scheme => self.scheme.to_owned(),
            Var::RequestUri => self.request_uri.to_owned(),
            Var::EscapedRequestUri => escape_query_value(self.request_uri),
            Var::Uri => self.path.to_owned(),
            Var::Args => self.query.to_owned(),
        }
    }
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
    };
    let url = ext.auth.url.fill(|v| vars.value(v));
    let signin = ext.auth.signin.as_ref().map(|t| t.fill(|v| vars.value(v)));
    let failed = |why: &str| {
        tracing::debug!(url = %url, "authentication check failed: {why}");
        Checked::Answer((
            local(StatusCode::INTERNAL_SERVER_ERROR, "authentication check failed"),
            Some("auth_failed"),
            None,
        ))
    };
    let Ok(target) = url.parse::<http::Uri>() else { return failed("the URL does not parse") };
    let (Some(authority), Some(path)) = (target.authority(), target.path_and_query()) else {
        return failed("the URL has no host");
    };
    let Ok(check_host) = HeaderValue::from_str(authority.as_str()) else { return failed("the URL has no host") };

    let mut check = Request::new(RequestBody::empty());
    *check.method_mut() = ext.method.clone();
    *check.uri_mut() = path.as_str().parse().unwrap_or_default();
    let h = check.headers_mut();
    // The client's headers (its cookies and credentials are what the check reads), not
    // those of its body.
    let body_headers = [header::CONTENT_LENGTH, header::TRANSFER_ENCODING, header::EXPECT, header::HOST];
    for (name, value) in req.headers() {
        if !body_headers.contains(name) {
            h.append(name.clone(), value.clone());
        }
    }
    // Not the client's connection: the check is no upgrade, whatever the request is.
    super::headers::strip_hop_by_hop(h, false);
    let original = format!("{scheme}://{host}{request_uri}");
    let set = |h: &mut http::HeaderMap, name: &'static str, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(name, v);
        }
    };
    set(h, "x-original-url", &original);
    set(h, "x-original-method", req.method().as_str());
    set(h, "x-sent-from", "nginx-ingress-controller");
    set(h, "x-real-ip", &conn.client.ip().to_string());
    set(h, "x-auth-request-redirect", ext.auth.request_redirect.as_deref().unwrap_or(&request_uri));

    let root = PathMatch::Prefix("/".into());
    let sent = match (&ext.forward, tables) {
        (Some(fwd), _) => forward(shared, conn, fwd, &root, Some(&check_host), check).await,
        // Routed like a request for the URL's host, through this gateway's own routes of
        // the asking route's namespace, and past their checks as the client's own request
        // would be.
        (None, Some(t)) => {
            let (to_host, to_path) = (authority.host().to_ascii_lowercase(), target.path().to_owned());
            let view =
                RequestView { path: &to_path, query: target.query(), method: &ext.method, headers: check.headers() };
            match t.router.route(&to_host, &view) {
                Some(r) if r.namespace() != asking.namespace() => {
                    return failed("the URL's route belongs to another namespace")
                }
                Some(r @ CompiledRoute { action: CompiledAction::Forward(f), .. }) => {
                    match admitted(r, conn, check.headers()).await {
                        Ok(_in_flight) => forward(shared, conn, f, &r.matches.path, Some(&check_host), check).await,
                        Err(refused) => Ok((refused, conn.client)),
                    }
                }
                _ => return failed("no route of this gateway serves the URL"),
            }
        }
        (None, None) => return failed("no route of this gateway serves the URL"),
    };
    let (resp, _) = match sent {
        Ok(r) => r,
        Err(e) => return failed(e.reason()),
    };
    let (parts, body) = resp.into_parts();
    // Read (a little of) the answer so that the connection can serve the next check.
    let _ = tokio::time::timeout(Duration::from_secs(5), Limited::new(body, ANSWER_BODY_LIMIT).collect()).await;
    let cookies: Vec<HeaderValue> = parts.headers.get_all(header::SET_COOKIE).iter().cloned().collect();
    let always = ext.auth.always_set_cookie;
    match parts.status {
        s if s.is_success() => {
            for name in &ext.response_headers {
                match parts.headers.get(name) {
                    Some(v) => {
                        req.headers_mut().insert(name.clone(), v.clone());
                    }
                    None => {
                        req.headers_mut().remove(name);
                    }
                }
            }
            Checked::Pass { cookies, always }
        }
        StatusCode::UNAUTHORIZED => match signin {
            Some(page) => {
                let location = signin_location(&page, &ext.auth.signin_redirect_param, &original);
                let mut r = local(StatusCode::FOUND, "sign in first");
                if let Ok(v) = HeaderValue::from_str(&location) {
                    r.headers_mut().insert(header::LOCATION, v);
                }
                add_cookies(r.headers_mut(), cookies);
                Checked::Answer((r, Some("unauthorized"), None))
            }
            None => {
                let mut r = local(StatusCode::UNAUTHORIZED, "authorization required");
                if let Some(challenge) = parts.headers.get(header::WWW_AUTHENTICATE) {
                    r.headers_mut().insert(header::WWW_AUTHENTICATE, challenge.clone());
                }
                if always {
                    add_cookies(r.headers_mut(), cookies);
                }
                Checked::Answer((r, Some("unauthorized"), None))
            }
        },
        StatusCode::FORBIDDEN => {
            let mut r = local(StatusCode::FORBIDDEN, "forbidden");
            if always {
                add_cookies(r.headers_mut(), cookies);
            }
            Checked::Answer((r, Some("forbidden"), None))
        }
        other => failed(&format!("the check answered {other}")),
    }
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
