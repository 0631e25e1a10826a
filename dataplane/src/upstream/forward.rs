//! A route's forward action, compiled: its weighted backends with their header changes,
//! timeouts, mirrors and rewrites, and the default backend that takes over when a backend
//! has no endpoints or answers one of the listed errors.

use std::sync::Arc;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use wharf_model::{CookieAffinity, HeaderEdits, PathRewrite, Retry, UrlRewrite};

use super::Upstream;
use crate::reasons::UpstreamError;

/// Header changes of one backend of a forward.
#[derive(Debug, Default)]
pub struct BackendEdits {
    /// For the requests it gets, after the route's.
    pub request: CompiledEdits,
    /// For its responses, before the route's.
    pub response: CompiledEdits,
}

static NO_EDITS: BackendEdits = BackendEdits { request: CompiledEdits::NONE, response: CompiledEdits::NONE };

/// Where one request goes.
#[derive(Debug)]
pub struct Picked<'f> {
    /// The upstream.
    pub upstream: &'f Arc<Upstream>,
    /// The chosen backend's own header changes.
    pub edits: &'f BackendEdits,
    /// The endpoint the client's affinity cookie names, by index.
    pub sticky: Option<usize>,
    /// The backend, by index (`None`: the default backend).
    pub backend: Option<usize>,
    /// The default backend, taking the request of a backend without endpoints.
    pub fallback: Option<&'f CompiledFallback>,
}

/// Weighted upstreams and header changes.
#[derive(Debug)]
pub struct CompiledForward {
    /// Upstreams and their weights; a backend without one answers with the error.
    backends: Vec<(Result<Arc<Upstream>, UpstreamError>, u32)>,
    /// Each backend's own header changes, by index; empty when none has any.
    backend_edits: Vec<BackendEdits>,
    /// Where copies of the requests go, each with its share in millionths.
    pub mirrors: Vec<(Arc<Upstream>, u32)>,
    total: u64,
    /// Changes to the request's headers.
    pub request_headers: CompiledEdits,
    /// Changes to the response's headers.
    pub response_headers: CompiledEdits,
    /// A new host or path for the backend (few routes have one).
    pub rewrite: Option<Box<CompiledRewrite>>,
    /// How long the backend may take to send the response headers: `None` the
    /// gateway's `--request-timeout`, `Some(None)` as long as it takes.
    pub timeout: Option<Option<std::time::Duration>>,
    /// How long connecting to a backend may take; `None` the gateway's
    /// `--connect-timeout`.
    pub connect_timeout: Option<std::time::Duration>,
    /// Sticky sessions by cookie.
    pub affinity: Option<Box<StickyCookie>>,
    /// How long the backend may take no part of a ready request body: `None` as long
    /// as `timeout`, `Some(None)` as long as it takes.
    pub send_timeout: Option<Option<std::time::Duration>>,
    /// ingress-nginx `default-backend` and `custom-http-errors`.
    pub fallback: Option<Box<CompiledFallback>>,
    /// When a request is tried on another endpoint; `None`: after a failed connection only.
    pub retry: Option<Box<RetryPolicy>>,
}

/// A route's [`Retry`], for the request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// After the request was sent, a failed connection or a malformed response.
    pub on_error: bool,
    /// The response headers' timeout.
    pub on_timeout: bool,
    /// Statuses tried elsewhere.
    pub statuses: Vec<u16>,
    /// `POST`, `PATCH` and `LOCK` too.
    pub non_idempotent: bool,
    /// Attempts in all, the first included (`usize::MAX`: one per endpoint).
    pub tries: usize,
    /// How long after the first attempt another may start.
    pub budget: Option<std::time::Duration>,
}

impl RetryPolicy {
    /// The policy `retry` describes.
    pub fn new(retry: &Retry) -> RetryPolicy {
        RetryPolicy {
            on_error: retry.on_error,
            on_timeout: retry.on_timeout,
            statuses: retry.statuses.clone(),
            non_idempotent: retry.non_idempotent,
            tries: match retry.tries {
                0 => usize::MAX,
                n => usize::try_from(n).unwrap_or(usize::MAX),
            },
            budget: retry.timeout_ms.map(std::time::Duration::from_millis),
        }
    }

    /// True when a request with `method` and no body may be sent again after it was sent
    /// once: some condition asks for it, and the method may be repeated (nginx's list of
    /// the others: `POST`, `PATCH`, `LOCK`) or `non_idempotent` says so.
    pub fn replays(&self, method: &http::Method) -> bool {
        let asked = self.on_error || self.on_timeout || !self.statuses.is_empty();
        let repeatable = !matches!(method.as_str(), "POST" | "PATCH" | "LOCK");
        asked && (repeatable || self.non_idempotent)
    }
}

/// A route's URL rewrite.
#[derive(Debug)]
pub struct CompiledRewrite {
    /// The host the backend gets instead of the client's.
    pub host: Option<HeaderValue>,
    /// A new path for the backend.
    pub path: Option<PathRewrite>,
}

/// A default backend: it takes the requests a backend without endpoints cannot, and
/// answers the listed errors.
#[derive(Debug)]
pub struct CompiledFallback {
    /// The Service's upstream.
    pub upstream: Result<Arc<Upstream>, UpstreamError>,
    /// A forward to it, for error requests.
    pub forward: CompiledForward,
    /// `custom-http-errors`.
    pub codes: Vec<u16>,
    /// `X-Namespace`, `X-Ingress-Name`, `X-Service-Name`, `X-Service-Port`; a value that
    /// is no valid header value is left out.
    pub headers: Vec<(http::HeaderName, HeaderValue)>,
}

impl CompiledFallback {
    /// The default backend of `fallback`, reached at `upstream`.
    pub fn new(upstream: Result<Arc<Upstream>, UpstreamError>, fallback: &wharf_model::Fallback) -> CompiledFallback {
        let none = || CompiledEdits::new(&Default::default());
        let forward = CompiledForward::new(vec![(upstream.clone(), 1)], none(), none());
        let headers = [
            ("x-namespace", &fallback.namespace),
            ("x-ingress-name", &fallback.ingress),
            ("x-service-name", &fallback.service),
            ("x-service-port", &fallback.service_port),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some((http::HeaderName::from_static(name), HeaderValue::from_str(value).ok()?)))
        .collect();
        CompiledFallback { upstream, forward, codes: fallback.error_codes.clone(), headers }
    }

    /// True when it answers responses of `status` in place of the backend.
    pub fn answers(&self, status: http::StatusCode) -> bool {
        self.codes.contains(&status.as_u16())
    }
}

impl CompiledForward {
    /// A forward to `backends` by weight.
    pub fn new(
        backends: Vec<(Result<Arc<Upstream>, UpstreamError>, u32)>,
        request_headers: CompiledEdits,
        response_headers: CompiledEdits,
    ) -> CompiledForward {
        let total = backends.iter().map(|(_, w)| u64::from(*w)).sum();
        CompiledForward {
            backends,
            backend_edits: Vec::new(),
            mirrors: Vec::new(),
            total,
            request_headers,
            response_headers,
            rewrite: None,
            timeout: None,
            connect_timeout: None,
            affinity: None,
            send_timeout: None,
            fallback: None,
            retry: None,
        }
    }

    /// With the route's own send timeout, if it has one.
    pub fn sending_within(mut self, send_timeout_ms: Option<u64>) -> CompiledForward {
        self.send_timeout = send_timeout_ms.map(|ms| (ms > 0).then(|| std::time::Duration::from_millis(ms)));
        self
    }

    /// With a default backend, if the route has one.
    pub fn falling_back(mut self, fallback: Option<CompiledFallback>) -> CompiledForward {
        self.fallback = fallback.map(Box::new);
        self
    }

    /// With each backend's own header changes (by index, as the backends were given).
    pub fn editing_backends(mut self, edits: Vec<BackendEdits>) -> CompiledForward {
        let none = edits.iter().all(|e| e.request.is_empty() && e.response.is_empty());
        self.backend_edits = if none { Vec::new() } else { edits };
        self
    }

    /// With the request's URL rewritten (a host that is not a valid header value is left
    /// out; the controller refuses those).
    pub fn rewriting(mut self, rewrite: Option<&UrlRewrite>) -> CompiledForward {
        self.rewrite = rewrite.map(|r| {
            let host = r.host.as_deref().and_then(|h| HeaderValue::from_str(h).ok());
            Box::new(CompiledRewrite { host, path: r.path.clone() })
        });
        self
    }

    /// With copies of the requests sent to `mirrors` (upstream, share in millionths).
    pub fn mirroring(mut self, mirrors: Vec<(Arc<Upstream>, u32)>) -> CompiledForward {
        self.mirrors = mirrors;
        self
    }

    /// With the route's own timeout (`Some(0)`: none), if it has one.
    pub fn timing_out(mut self, timeout_ms: Option<u64>) -> CompiledForward {
        self.timeout = timeout_ms.map(|ms| (ms > 0).then(|| std::time::Duration::from_millis(ms)));
        self
    }

    /// With sticky sessions by cookie, if the route has them; `unsticky` says, by index,
    /// which backends the cookie does not concern.
    pub fn sticky(
        mut self,
        affinity: Option<&CookieAffinity>,
        unsticky: impl Iterator<Item = bool>,
    ) -> CompiledForward {
        self.affinity = affinity.map(|a| {
            let mut cookie = StickyCookie::new(a);
            cookie.unsticky = unsticky.enumerate().filter(|(_, no)| *no).map(|(i, _)| i).collect();
            Box::new(cookie)
        });
        self
    }

    /// True when an answer of backend `picked` sets the affinity cookie.
    pub fn sets_cookie(&self, picked: Option<usize>) -> bool {
        self.affinity.as_deref().is_some_and(|a| picked.is_none_or(|b| !a.unsticky.contains(&b)))
    }

    /// With the route's retry policy, if it has one.
    pub fn retrying(mut self, retry: Option<&Retry>) -> CompiledForward {
        self.retry = retry.map(|r| Box::new(RetryPolicy::new(r)));
        self
    }

    /// With the route's own connect timeout, if it has one.
    pub fn connecting_within(mut self, connect_timeout_ms: Option<u64>) -> CompiledForward {
        self.connect_timeout = connect_timeout_ms.map(std::time::Duration::from_millis);
        self
    }

    /// The upstream for one request, chosen by weight; an error when no backend takes
    /// requests or the chosen one has none (503), or is invalid (500).
    pub fn pick(&self) -> Result<&Arc<Upstream>, UpstreamError> {
        self.pick_backend().map(|(u, _)| u)
    }

    /// [`CompiledForward::pick_backend`], except that a backend without endpoints (or
    /// without a Service) gives way to the default backend, when there is one with
    /// endpoints.
    pub fn pick_or_fall_back(&self) -> Result<Picked<'_>, UpstreamError> {
        let picked = self.pick_index();
        let empty = match &picked {
            Ok((u, _, _)) => u.endpoints.is_empty(),
            Err(e) => *e == UpstreamError::NoEndpoints,
        };
        match self.fallback.as_deref() {
            Some(fb @ CompiledFallback { upstream: Ok(u), .. }) if empty && !u.endpoints.is_empty() => {
                Ok(Picked { upstream: u, edits: &NO_EDITS, sticky: None, backend: None, fallback: Some(fb) })
            }
            _ => picked.map(|(upstream, edits, i)| Picked {
                upstream,
                edits,
                sticky: None,
                backend: Some(i),
                fallback: None,
            }),
        }
    }

    /// The backend with the endpoint an affinity cookie names (one of `keys`), when one
    /// has it and it is not failing, with that endpoint's index; else
    /// [`CompiledForward::pick_or_fall_back`]. A cookie can so keep a client on a backend
    /// the weights give no share (a canary it was sent to by header).
    pub fn pick_sticky(&self, keys: &[String]) -> Result<Picked<'_>, UpstreamError> {
        let sticky = |b: usize| self.affinity.as_deref().is_none_or(|a| !a.unsticky.contains(&b));
        let found = keys.iter().find_map(|key| {
            self.backends.iter().enumerate().filter(|(b, _)| sticky(*b)).find_map(|(b, (up, _))| {
                let up = up.as_ref().ok()?;
                let e = up.endpoints.iter().position(|e| e.affinity_key == *key && !e.ejected())?;
                let edits = self.backend_edits.get(b).unwrap_or(&NO_EDITS);
                Some(Picked { upstream: up, edits, sticky: Some(e), backend: Some(b), fallback: None })
            })
        });
        match found {
            Some(found) => Ok(found),
            None => self.pick_or_fall_back(),
        }
    }

    /// [`CompiledForward::pick`], with the chosen backend's own header changes.
    pub fn pick_backend(&self) -> Result<(&Arc<Upstream>, &BackendEdits), UpstreamError> {
        self.pick_index().map(|(up, edits, _)| (up, edits))
    }

    /// [`CompiledForward::pick_backend`], with the backend's index.
    fn pick_index(&self) -> Result<(&Arc<Upstream>, &BackendEdits, usize), UpstreamError> {
        let i = match self.backends.as_slice() {
            [(Ok(_), 0)] => return Err(UpstreamError::NoEndpoints),
            [_] => 0,
            _ if self.total == 0 => return Err(UpstreamError::NoEndpoints),
            _ => self.index_at(fastrand::u64(..self.total)).ok_or(UpstreamError::NoEndpoints)?,
        };
        let (up, _) = &self.backends[i];
        let up = up.as_ref().map_err(|e| *e)?;
        Ok((up, self.backend_edits.get(i).unwrap_or(&NO_EDITS), i))
    }

    /// The backend whose share of `0..total` holds `point`.
    #[cfg(test)]
    fn pick_at(&self, point: u64) -> Result<&Arc<Upstream>, UpstreamError> {
        let i = self.index_at(point).ok_or(UpstreamError::NoEndpoints)?;
        self.backends[i].0.as_ref().map_err(|e| *e)
    }

    /// The index of the backend whose share of `0..total` holds `point`.
    fn index_at(&self, mut point: u64) -> Option<usize> {
        for (i, (_, w)) in self.backends.iter().enumerate() {
            let w = u64::from(*w);
            if point < w {
                return Some(i);
            }
            point -= w;
        }
        None
    }
}

/// Header changes with names and values parsed: remove, then set, then add. Most routes
/// have none: then it is one pointer's size.
#[derive(Debug, Default)]
pub struct CompiledEdits(Option<Box<Edits>>);

#[derive(Debug)]
struct Edits {
    set: Vec<(HeaderName, HeaderValue)>,
    add: Vec<(HeaderName, HeaderValue)>,
    remove: Vec<HeaderName>,
}

impl CompiledEdits {
    /// No changes.
    pub const NONE: CompiledEdits = CompiledEdits(None);

    /// True when nothing changes.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Parses `edits`; an entry whose name or value is not valid HTTP is left out (the
    /// controller refuses them before they get here).
    pub fn new(edits: &HeaderEdits) -> CompiledEdits {
        let pair = |(n, v): &(String, String)| {
            let parsed = HeaderName::from_bytes(n.as_bytes()).ok().zip(HeaderValue::from_str(v).ok());
            if parsed.is_none() {
                tracing::warn!(header = %n, "header edit left out: not a valid header name and value");
            }
            parsed
        };
        let edits = Edits {
            set: edits.set.iter().filter_map(pair).collect(),
            add: edits.add.iter().filter_map(pair).collect(),
            remove: edits.remove.iter().filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok()).collect(),
        };
        let none = edits.set.is_empty() && edits.add.is_empty() && edits.remove.is_empty();
        CompiledEdits((!none).then(|| Box::new(edits)))
    }

    /// Applies the changes to `headers`.
    pub fn apply(&self, headers: &mut HeaderMap) {
        let Some(edits) = &self.0 else { return };
        for n in &edits.remove {
            headers.remove(n);
        }
        for (n, v) in &edits.set {
            headers.insert(n.clone(), v.clone());
        }
        for (n, v) in &edits.add {
            headers.append(n.clone(), v.clone());
        }
    }
}

/// A route's affinity cookie: its name, and its attributes made once but for those that
/// depend on the response (`Expires`, and `Secure` over HTTPS).
#[derive(Debug)]
pub struct StickyCookie {
    /// The cookie's name.
    pub name: String,
    /// `Path`, `HttpOnly`, and `Max-Age`, `Domain` and `SameSite` when set.
    attrs: String,
    /// `Expires`, this long after the response.
    expires: Option<std::time::Duration>,
    /// `Secure` on plain HTTP too.
    secure: bool,
    /// The backends (by index) the cookie neither leads to nor is set for.
    unsticky: Vec<usize>,
}

impl StickyCookie {
    /// The cookie `affinity` describes.
    pub fn new(affinity: &CookieAffinity) -> StickyCookie {
        let mut attrs = format!("; Path={}; HttpOnly", affinity.path);
        if let Some(age) = affinity.max_age {
            attrs.push_str(&format!("; Max-Age={age}"));
        }
        if let Some(domain) = &affinity.domain {
            attrs.push_str(&format!("; Domain={domain}"));
        }
        if let Some(s) = &affinity.same_site {
            attrs.push_str(&format!("; SameSite={s}"));
        }
        StickyCookie {
            name: affinity.name.clone(),
            attrs,
            expires: affinity.expires.map(std::time::Duration::from_secs),
            secure: affinity.secure,
            unsticky: Vec::new(),
        }
    }

    /// The `Set-Cookie` value naming the endpoint `key`, for a response sent at `now`
    /// over HTTPS or not. Over HTTPS the cookie is always `Secure`, as in ingress-nginx.
    pub fn set_cookie(&self, key: &str, https: bool, now: std::time::SystemTime) -> String {
        let mut v = format!("{}={key}{}", self.name, self.attrs);
        // Year 10000 and later have no HTTP date (and httpdate panics on them).
        let last = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(253_402_300_799);
        if let Some(at) = self.expires.and_then(|e| now.checked_add(e)).filter(|at| *at <= last) {
            v.push_str("; Expires=");
            v.push_str(&httpdate::fmt_http_date(at));
        }
        if self.secure || https {
            v.push_str("; Secure");
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_timeout_of_zero_means_none_and_no_timeout_means_the_default() {
        let f = || CompiledForward::new(Vec::new(), CompiledEdits::default(), CompiledEdits::default());
        assert_eq!(f().timing_out(None).timeout, None);
        assert_eq!(f().timing_out(Some(0)).timeout, Some(None));
        assert_eq!(f().timing_out(Some(1)).timeout, Some(Some(std::time::Duration::from_millis(1))));
        assert_eq!(f().timing_out(Some(250)).timeout, Some(Some(std::time::Duration::from_millis(250))));
    }

    #[test]
    fn a_send_timeout_of_zero_means_none_and_no_send_timeout_means_the_route_timeout() {
        let f = || CompiledForward::new(Vec::new(), CompiledEdits::default(), CompiledEdits::default());
        assert_eq!(f().sending_within(None).send_timeout, None);
        assert_eq!(f().sending_within(Some(0)).send_timeout, Some(None));
        assert_eq!(f().sending_within(Some(1)).send_timeout, Some(Some(std::time::Duration::from_millis(1))));
        assert_eq!(f().sending_within(Some(300)).send_timeout, Some(Some(std::time::Duration::from_millis(300))));
    }

    #[test]
    fn a_backend_without_endpoints_gives_way_to_a_default_backend_with_some() {
        let with = |id: &str, n: u16| {
            let eps = (0..n)
                .map(|i| {
                    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 9000 + i));
                    Arc::new(crate::upstream::EndpointState::new(addr, Default::default(), None))
                })
                .collect();
            Ok(Arc::new(Upstream::new(id.into(), Default::default(), eps)))
        };
        let fallback = |upstream| {
            let model = wharf_model::Fallback {
                cluster: "errors".into(),
                error_codes: vec![404, 503],
                namespace: "shop".into(),
                ingress: "web".into(),
                service: "app".into(),
                service_port: "bad\nvalue".into(),
            };
            CompiledFallback::new(upstream, &model)
        };
        let forward = |backend, fb: Option<CompiledFallback>| {
            CompiledForward::new(vec![(backend, 1)], CompiledEdits::default(), CompiledEdits::default())
                .falling_back(fb)
        };
        let picked = |f: &CompiledForward| f.pick_or_fall_back().map(|p| p.upstream.id.clone());
        assert_eq!(picked(&forward(with("app", 1), Some(fallback(with("errors", 1))))), Ok("app".into()));
        assert_eq!(picked(&forward(with("app", 0), Some(fallback(with("errors", 1))))), Ok("errors".into()));
        let missing = Err(UpstreamError::NoEndpoints);
        assert_eq!(picked(&forward(missing, Some(fallback(with("errors", 2))))), Ok("errors".into()));
        // An invalid backend is not missing: its 500 stands.
        let invalid = Err(UpstreamError::InvalidBackend);
        assert_eq!(picked(&forward(invalid, Some(fallback(with("errors", 1))))), Err(UpstreamError::InvalidBackend));
        // A default backend without endpoints does not take over.
        assert_eq!(picked(&forward(with("app", 0), Some(fallback(with("errors", 0))))), Ok("app".into()));
        assert_eq!(picked(&forward(with("app", 0), None)), Ok("app".into()));
        let fb = fallback(with("errors", 1));
        assert!(fb.answers(http::StatusCode::NOT_FOUND) && fb.answers(http::StatusCode::SERVICE_UNAVAILABLE));
        assert!(!fb.answers(http::StatusCode::OK) && !fb.answers(http::StatusCode::BAD_GATEWAY));
        let names: Vec<&str> = fb.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["x-namespace", "x-ingress-name", "x-service-name"],
            "a value no header can carry is left out"
        );
    }

    #[test]
    fn an_affinity_cookie_picks_its_endpoint_in_any_backend_unless_it_is_failing() {
        let ep = |port: u16| {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            Arc::new(crate::upstream::EndpointState::new(addr, Default::default(), None))
        };
        let (main, canary) = (ep(9001), ep(9002));
        let up = |id: &str, e: &Arc<crate::upstream::EndpointState>| {
            Ok(Arc::new(Upstream::new(id.into(), Default::default(), vec![Arc::clone(e), ep(9100)])))
        };
        let f = CompiledForward::new(
            vec![(up("main", &main), 1), (up("canary", &canary), 0)],
            CompiledEdits::default(),
            CompiledEdits::default(),
        );
        let picked = |keys: &[String]| f.pick_sticky(keys).map(|p| (p.upstream.id.clone(), p.sticky));
        let key = |e: &Arc<crate::upstream::EndpointState>| e.affinity_key.clone();
        assert_eq!(picked(&[key(&canary)]), Ok(("canary".into(), Some(0))), "a backend of weight 0 too");
        assert_eq!(picked(&["nothing".into(), key(&main)]), Ok(("main".into(), Some(0))), "any value of the cookie");
        assert_eq!(picked(&["nothing".into()]), Ok(("main".into(), None)), "else the weights");
        assert_eq!(picked(&[]), Ok(("main".into(), None)));
        assert!(!f.sets_cookie(Some(0)), "no affinity: no cookie");
        let sticky = wharf_model::CookieAffinity::session("aff", "/");
        // `legacy`: the canary (backend 1) is not the cookie's.
        let legacy = CompiledForward::new(
            vec![(up("main", &main), 1), (up("canary", &canary), 0)],
            CompiledEdits::default(),
            CompiledEdits::default(),
        )
        .sticky(Some(&sticky), [false, true].into_iter());
        let by = |keys: &[String]| legacy.pick_sticky(keys).map(|p| (p.upstream.id.clone(), p.sticky, p.backend));
        assert_eq!(by(&[key(&canary)]), Ok(("main".into(), None, Some(0))), "not led to the canary");
        assert_eq!(by(&[key(&main)]), Ok(("main".into(), Some(0), Some(0))));
        assert!(legacy.sets_cookie(Some(0)) && !legacy.sets_cookie(Some(1)) && legacy.sets_cookie(None));
        canary.eject();
        assert_eq!(picked(&[key(&canary)]), Ok(("main".into(), None)), "not a failing endpoint");
    }

    #[test]
    fn a_retry_policy_replays_only_what_it_names_and_may_repeat() {
        let policy = |on_error, statuses: &[u16], non_idempotent| {
            RetryPolicy::new(&Retry {
                on_error,
                on_timeout: false,
                statuses: statuses.to_vec(),
                non_idempotent,
                tries: 0,
                timeout_ms: Some(1500),
            })
        };
        let m = |s: &str| http::Method::from_bytes(s.as_bytes()).unwrap_or(http::Method::GET);
        let on_error = policy(true, &[], false);
        for method in ["GET", "HEAD", "PUT", "DELETE", "OPTIONS"] {
            assert!(on_error.replays(&m(method)), "{method}");
        }
        for method in ["POST", "PATCH", "LOCK"] {
            assert!(!on_error.replays(&m(method)), "{method}");
            assert!(policy(true, &[], true).replays(&m(method)), "{method} with non_idempotent");
        }
        assert!(policy(false, &[502], false).replays(&m("GET")), "a status alone");
        let timeout = RetryPolicy { on_timeout: true, ..policy(false, &[], false) };
        assert!(timeout.replays(&m("GET")), "a timeout alone");
        assert!(!policy(false, &[], true).replays(&m("GET")), "nothing named: nothing replayed");
        assert_eq!((on_error.tries, on_error.budget), (usize::MAX, Some(std::time::Duration::from_millis(1500))));
        let three = RetryPolicy::new(&Retry { tries: 3, ..policy_model() });
        assert_eq!(three.tries, 3);
    }

    fn policy_model() -> Retry {
        Retry { on_error: true, on_timeout: true, statuses: vec![], non_idempotent: false, tries: 0, timeout_ms: None }
    }

    #[test]
    fn weights_split_the_range_in_order() {
        let u = |id: &str| Ok(Arc::new(Upstream::new(id.into(), Default::default(), Vec::new())));
        let f = CompiledForward::new(
            vec![
                (u("a"), 1),
                (u("zero"), 0),
                (u("b"), 3),
                (Err(UpstreamError::NoEndpoints), 1),
                (Err(UpstreamError::InvalidBackend), 1),
            ],
            CompiledEdits::default(),
            CompiledEdits::default(),
        );
        let id = |p: u64| f.pick_at(p).map(|u| u.id.as_str());
        assert_eq!(
            [id(0), id(1), id(2), id(3), id(4), id(5), id(6)],
            [
                Ok("a"),
                Ok("b"),
                Ok("b"),
                Ok("b"),
                Err(UpstreamError::NoEndpoints),
                Err(UpstreamError::InvalidBackend),
                Err(UpstreamError::NoEndpoints)
            ]
        );
        for _ in 0..100 {
            assert_ne!(f.pick().map(|u| u.id.as_str()), Ok("zero"));
        }

        let single = |w| CompiledForward::new(vec![(u("only"), w)], CompiledEdits::default(), CompiledEdits::default());
        assert_eq!(single(1).pick().map(|u| u.id.as_str()), Ok("only"));
        assert_eq!(single(0).pick().err(), Some(UpstreamError::NoEndpoints), "a backend of weight 0 takes nothing");
        let invalid = CompiledForward::new(
            vec![(Err(UpstreamError::InvalidBackend), 1)],
            CompiledEdits::default(),
            CompiledEdits::default(),
        );
        assert_eq!(invalid.pick().err(), Some(UpstreamError::InvalidBackend));
        let invalid_unweighted = CompiledForward::new(
            vec![(Err(UpstreamError::InvalidBackend), 0)],
            CompiledEdits::default(),
            CompiledEdits::default(),
        );
        assert_eq!(invalid_unweighted.pick().err(), Some(UpstreamError::InvalidBackend), "a lone backend says why");
        let none =
            CompiledForward::new(vec![(u("a"), 0), (u("b"), 0)], CompiledEdits::default(), CompiledEdits::default());
        assert_eq!(none.pick().err(), Some(UpstreamError::NoEndpoints));
    }

    #[test]
    fn each_backend_keeps_its_own_edits_and_none_are_stored_when_there_are_none() {
        let u = |id: &str| Ok(Arc::new(Upstream::new(id.into(), Default::default(), Vec::new())));
        let f =
            || CompiledForward::new(vec![(u("a"), 1), (u("b"), 0)], CompiledEdits::default(), CompiledEdits::default());
        let request_only = BackendEdits {
            request: CompiledEdits::new(&HeaderEdits { set: vec![("x-a".into(), "1".into())], ..Default::default() }),
            response: CompiledEdits::default(),
        };
        let edited = f().editing_backends(vec![request_only, BackendEdits::default()]);
        let (up, edits) = edited.pick_backend().unwrap();
        assert_eq!(up.id, "a");
        let mut h = HeaderMap::new();
        edits.request.apply(&mut h);
        assert_eq!(h.get("x-a").map(|v| v.as_bytes()), Some(&b"1"[..]), "an edit of the requests alone is kept");
        let plain = f().editing_backends(vec![BackendEdits::default(), BackendEdits::default()]);
        assert!(plain.backend_edits.is_empty(), "nothing stored per backend without edits");
        assert!(plain.pick_backend().unwrap().1.request.is_empty());
    }

    #[test]
    fn edits_remove_then_set_then_add_and_skip_invalid_entries() {
        let edits = CompiledEdits::new(&HeaderEdits {
            set: vec![("x-set".into(), "new".into()), ("bad name".into(), "v".into())],
            add: vec![("x-add".into(), "two".into()), ("x-ok".into(), "bad\nvalue".into())],
            remove: vec!["x-gone".into(), "x-set".into()],
        });
        let mut h = HeaderMap::new();
        for (n, v) in [("x-set", "old"), ("x-add", "one"), ("x-gone", "v"), ("x-keep", "k")] {
            h.append(n, HeaderValue::from_static(v));
        }
        edits.apply(&mut h);
        let all = |n: &str| h.get_all(n).iter().map(|v| v.to_str().unwrap_or("").to_owned()).collect::<Vec<_>>();
        assert_eq!(all("x-set"), ["new"], "set after remove");
        assert_eq!(all("x-add"), ["one", "two"]);
        assert!(all("x-gone").is_empty());
        assert_eq!(all("x-keep"), ["k"]);
        assert_eq!(h.len(), 4, "the invalid entries were left out: {h:?}");
    }

    fn affinity() -> CookieAffinity {
        CookieAffinity::session("route", "/shop")
    }

    #[test]
    fn the_cookie_has_the_attributes_asked_for_and_is_secure_over_https() {
        let at = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let plain = StickyCookie::new(&affinity());
        assert_eq!(plain.set_cookie("k1", false, at), "route=k1; Path=/shop; HttpOnly");
        assert_eq!(plain.set_cookie("k1", true, at), "route=k1; Path=/shop; HttpOnly; Secure");
        let all = StickyCookie::new(&CookieAffinity {
            max_age: Some(259_200),
            expires: Some(172_800),
            domain: Some("shop.example".into()),
            same_site: Some("Lax".into()),
            secure: true,
            ..affinity()
        });
        let never = StickyCookie::new(&CookieAffinity { expires: Some(u64::MAX / 4), ..affinity() });
        assert_eq!(never.set_cookie("k3", false, at), "route=k3; Path=/shop; HttpOnly", "no date past 9999");
        assert_eq!(
            all.set_cookie("k2", false, at),
            "route=k2; Path=/shop; HttpOnly; Max-Age=259200; Domain=shop.example; SameSite=Lax; \
             Expires=Thu, 16 Nov 2023 22:13:20 GMT; Secure"
        );
    }
}
