//! The answers the gateway gives itself: plain pages, redirects, fixed responses, the
//! CORS preflight and client certificate refusals.

use std::borrow::Cow;

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use wharf_model::{CertRefusal, PathMatch, Redirect, Respond};

use crate::reasons::Answered;
use crate::routing::CompiledRoute;
use crate::Shared;

use super::*;

/// The answer to a CORS preflight the route allows.
pub(super) fn preflight_answer() -> Response<Body> {
    let mut r = Response::new(full(String::new()));
    *r.status_mut() = StatusCode::NO_CONTENT;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// The answer to a request whose client certificate `route` refuses, and its reason: 403
/// for a subject the route does not accept; without a certificate, the route's error page
/// (a 302 to it) or 400, as nginx answers.
pub(super) fn cert_refused(route: &CompiledRoute, refusal: Option<CertRefusal>) -> (Response<Body>, Answered) {
    let page = route.client_cert.as_ref().and_then(|c| c.error_page.as_deref());
    match (refusal, page.and_then(|p| HeaderValue::from_str(p).ok())) {
        (Some(CertRefusal::SubjectMismatch), _) => {
            (local(StatusCode::FORBIDDEN, "client certificate unauthorized"), Answered::ClientCertUnauthorized)
        }
        (_, Some(location)) => {
            let mut resp = local(StatusCode::FOUND, "a client certificate is required");
            resp.headers_mut().insert(header::LOCATION, location);
            (resp, Answered::ClientCertRequired)
        }
        (_, None) => {
            (local(StatusCode::BAD_REQUEST, "No required SSL certificate was sent"), Answered::ClientCertRequired)
        }
    }
}

pub(super) fn local(status: StatusCode, msg: &str) -> Response<Body> {
    let mut r =
        Response::new(full(format!("{} {}: {msg}\n", status.as_u16(), status.canonical_reason().unwrap_or(""))));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

pub(super) fn full(s: String) -> Body {
    Full::new(Bytes::from(s)).map_err(|never| match never {}).boxed_unsync()
}

/// A route's redirect: the request's scheme, host, port and path unless the redirect
/// replaces them. Without a port, the scheme's well-known port when the redirect names a
/// scheme, else the port the request came in on (or, with `port_as_sent`, the one its
/// `Host` names); 80 for http and 443 for https are left out of `Location`.
pub(super) fn redirect_to<B>(
    rd: &Redirect,
    matched: &PathMatch,
    conn: &ConnInfo,
    host: &str,
    req: &Request<B>,
) -> Response<Body> {
    let request_scheme = match conn.scheme {
        Scheme::Http => "http",
        Scheme::Https => "https",
    };
    // A whole Location given by the route is the route's fault when invalid; one built
    // from the request, the request's.
    let (location, invalid) = match &rd.location {
        Some(path) if path.starts_with('/') && !rd.relative => (
            Cow::Owned(format!("{request_scheme}://{host}{path}")),
            (StatusCode::BAD_REQUEST, "the request cannot be redirected"),
        ),
        Some(location) => (
            Cow::Borrowed(location.as_str()),
            (StatusCode::INTERNAL_SERVER_ERROR, "the route's redirect is not a valid Location"),
        ),
        None => {
            let scheme = rd.scheme.as_deref().unwrap_or(request_scheme);
            let port = match (rd.port, rd.scheme.as_deref()) {
                (Some(p), _) => Some(p),
                (None, Some("https")) => Some(443),
                (None, Some("http")) => Some(80),
                (None, _) if rd.port_as_sent => request_host(req).as_ref().and_then(authority_port),
                (None, _) => Some(conn.arrival_port()),
            };
            let port = match (scheme, port) {
                ("http", Some(80)) | ("https", Some(443)) | (_, None) => String::new(),
                (_, Some(p)) => format!(":{p}"),
            };
            let host = rd.host.as_deref().unwrap_or(host);
            let path = match &rd.path {
                Some(rewrite) => Cow::Owned(rewrite.apply(matched, req.uri().path())),
                None => Cow::Borrowed(req.uri().path()),
            };
            let query = req.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
            (
                Cow::Owned(format!("{scheme}://{host}{port}{path}{query}")),
                (StatusCode::BAD_REQUEST, "the request cannot be redirected"),
            )
        }
    };
    let status = StatusCode::from_u16(rd.status).ok().filter(StatusCode::is_redirection).unwrap_or(StatusCode::FOUND);
    match HeaderValue::from_str(&location) {
        Ok(v) => {
            let mut r = local(status, "redirected by the route");
            r.headers_mut().insert(header::LOCATION, v);
            r
        }
        Err(_) => local(invalid.0, invalid.1),
    }
}

/// A route's fixed answer.
pub(super) fn respond(rs: &Respond) -> Response<Body> {
    let status = StatusCode::from_u16(rs.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = Response::new(full(rs.body.clone()));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

pub(super) fn redirect<B>(shared: &Shared, host: &str, req: &Request<B>) -> Response<Body> {
    let pq = req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let port = match shared.opts.https_redirect_port {
        443 => String::new(),
        p => format!(":{p}"),
    };
    let location = format!("https://{host}{port}{pq}");
    let mut r = local(StatusCode::PERMANENT_REDIRECT, "this host is served over HTTPS");
    match HeaderValue::from_str(&location) {
        Ok(v) => {
            r.headers_mut().insert(header::LOCATION, v);
            r
        }
        Err(_) => local(StatusCode::BAD_REQUEST, "the request's host cannot be redirected"),
    }
}
