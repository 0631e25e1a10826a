//! How requests reach the backend: its protocol, upstream TLS, timeouts' companions,
//! the Host and prefix sent, error pages and session affinity.

use super::reader::is_cookie_name;
use super::*;

/// How the certificate of an HTTPS or GRPCS backend is checked (`proxy-ssl-*` with
/// `proxy-ssl-verify: on`); the Secret is read at translation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxySslSetting {
    /// `proxy-ssl-secret`: the Secret whose `ca.crt` the chain must lead to; the
    /// system's roots without one.
    pub secret: Option<(String, String)>,
    /// `proxy-ssl-name`: the name the certificate must cover (and the SNI); default
    /// `SERVICE.NAMESPACE.svc`.
    pub name: Option<String>,
    /// `proxy-ssl-server-name: on`: the name is sent as SNI.
    pub server_name: bool,
    /// `proxy-ssl-verify-depth` (default 1, as nginx's).
    pub verify_depth: u8,
}

/// Sticky sessions by cookie, as the annotations ask; the path defaults to the route's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Affinity {
    /// `session-cookie-name` (default `INGRESSCOOKIE`).
    pub name: String,
    /// `session-cookie-path`.
    pub path: Option<String>,
    /// `session-cookie-max-age`, seconds.
    pub max_age: Option<u64>,
    /// `session-cookie-expires`, seconds after the response.
    pub expires: Option<u64>,
    /// `session-cookie-domain`.
    pub domain: Option<String>,
    /// `session-cookie-samesite`.
    pub same_site: Option<String>,
    /// `session-cookie-secure`.
    pub secure: bool,
}

/// How the backends of an Ingress are spoken to (`backend-protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendProtocol {
    /// HTTP/1.1, or h2c where the Service port's `appProtocol` says so.
    #[default]
    Http,
    /// HTTP/1.1 over TLS, the certificate not checked (as ingress-nginx).
    Https,
    /// gRPC: HTTP/2 in the clear (h2c).
    Grpc,
    /// gRPC over TLS (HTTP/2), the certificate not checked.
    Grpcs,
}

impl BackendProtocol {
    /// Spoken over HTTP/2.
    pub fn h2(self) -> bool {
        matches!(self, BackendProtocol::Grpc | BackendProtocol::Grpcs)
    }

    /// Spoken over TLS.
    pub fn tls(self) -> bool {
        matches!(self, BackendProtocol::Https | BackendProtocol::Grpcs)
    }
}

impl Reader<'_> {
    pub(super) fn backend_protocol(&mut self) -> BackendProtocol {
        let Some((key, value)) = self.get("backend-protocol") else { return BackendProtocol::Http };
        match value.trim().to_ascii_uppercase().as_str() {
            "HTTP" => BackendProtocol::Http,
            "HTTPS" => BackendProtocol::Https,
            "GRPC" => BackendProtocol::Grpc,
            "GRPCS" => BackendProtocol::Grpcs,
            other => {
                self.invalid(
                    key,
                    format!("{other:?} is not supported (HTTP, HTTPS, GRPC or GRPCS); the backends get HTTP"),
                );
                BackendProtocol::Http
            }
        }
    }

    /// `custom-http-errors`: comma-separated statuses from 400 to 599; what does not parse
    /// is reported and left out. Without a default backend to answer them, nothing.
    pub(super) fn error_codes(&mut self, with_backend: bool) -> Vec<u16> {
        let Some((key, value)) = self.get("custom-http-errors") else { return Vec::new() };
        if !with_backend {
            let msg = "has no effect without default-backend (Wharf has no global default backend to answer the \
                       errors); add default-backend: SERVICE";
            self.invalid(key, msg.into());
            return Vec::new();
        }
        let mut codes = Vec::new();
        for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item.parse::<u16>() {
                Ok(c @ 400..=599) if !codes.contains(&c) => codes.push(c),
                Ok(400..=599) => {}
                _ => self.invalid(key, format!("{item:?} is not a status from 400 to 599; it is left out")),
            }
        }
        codes
    }

    /// `proxy-ssl-*`: `Ok(None)` when the backend's certificate is not checked, `Err` (why,
    /// for the log) when a check is asked for and cannot be set up.
    pub(super) fn proxy_ssl(&mut self, protocol: BackendProtocol) -> Result<Option<ProxySslSetting>, String> {
        const NAMES: [&str; 5] = [
            "proxy-ssl-verify",
            "proxy-ssl-secret",
            "proxy-ssl-name",
            "proxy-ssl-server-name",
            "proxy-ssl-verify-depth",
        ];
        let present: Vec<&str> = NAMES.iter().filter_map(|n| self.get(n)).map(|(k, _)| k).collect();
        if present.is_empty() {
            return Ok(None);
        }
        if !protocol.tls() {
            for key in present {
                self.invalid(
                    key,
                    "has no effect unless backend-protocol is HTTPS or GRPCS (as in ingress-nginx)".into(),
                );
            }
            return Ok(None);
        }
        let fail = |r: &mut Self, key: &str, message: String| Err(r.refused(key, message));
        let verify = match self.get("proxy-ssl-verify") {
            None => false,
            Some((key, v)) => match v.trim() {
                "on" => true,
                "off" => false,
                other => return fail(self, key, format!("{other:?} is not on or off")),
            },
        };
        if !verify {
            for key in present.into_iter().filter(|k| !k.ends_with("/proxy-ssl-verify")) {
                let msg = "has no effect without proxy-ssl-verify: on (the backend's certificate is not checked; \
                           client certificates to backends are not supported)";
                self.invalid(key, msg.into());
            }
            return Ok(None);
        }
        let secret = match self.get("proxy-ssl-secret") {
            None => None,
            Some((key, v)) => match self.secret_ref(v) {
                Ok(s) => Some(s),
                Err(msg) => return fail(self, key, msg),
            },
        };
        let name = match self.get("proxy-ssl-name") {
            None => None,
            Some((key, v)) => match v.trim().to_ascii_lowercase() {
                n if wharf_model::is_dns_name(&n) => Some(n),
                _ => return fail(self, key, format!("{:?} is not a host name", v.trim())),
            },
        };
        let server_name = match self.get("proxy-ssl-server-name") {
            None => false,
            Some((key, v)) => match v.trim() {
                "on" => true,
                "off" => false,
                other => {
                    self.invalid(key, format!("{other:?} is not on or off; no SNI is sent"));
                    false
                }
            },
        };
        let verify_depth = self.depth("proxy-ssl-verify-depth");
        Ok(Some(ProxySslSetting { secret, name, server_name, verify_depth }))
    }

    /// A host name, with a port or not.
    pub(super) fn upstream_vhost(&mut self) -> Option<String> {
        self.text(
            "upstream-vhost",
            |h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b)),
            "is not a host name like svc.example or svc.example:8080; it is ignored",
        )
    }

    /// A header value: visible ASCII and spaces.
    pub(super) fn forwarded_prefix(&mut self) -> Option<String> {
        self.text(
            "x-forwarded-prefix",
            |v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_graphic() || b == b' '),
            "is not a header value of visible characters; it is ignored",
        )
    }

    pub(super) fn affinity(&mut self) -> Option<Affinity> {
        let (key, value) = self.get("affinity")?;
        if value.trim() != "cookie" {
            self.invalid(key, format!("{value:?} is not supported (only \"cookie\"); requests are not sticky"));
            return None;
        }
        let name = self
            .text("session-cookie-name", is_cookie_name, "is not a cookie name; INGRESSCOOKIE is used")
            .unwrap_or_else(|| "INGRESSCOOKIE".to_owned());
        let path = self.text(
            "session-cookie-path",
            |v| v.starts_with('/') && v.bytes().all(|b| b.is_ascii_graphic() && b != b';'),
            "is not a path like /app; the route's path is used",
        );
        // At most ten years: a date past year 9999 has no HTTP form.
        const TEN_YEARS: u64 = 10 * 366 * 86_400;
        let age = |r: &mut Self, name: &str| {
            let (key, v) = r.get(name)?;
            let n = v.trim().parse::<u64>().ok().filter(|n| *n <= TEN_YEARS);
            if n.is_none() {
                r.invalid(
                    key,
                    format!("{v:?} is not a number of seconds up to ten years; the cookie lasts the browser session"),
                );
            }
            n
        };
        let max_age = age(self, "session-cookie-max-age");
        let expires = age(self, "session-cookie-expires");
        let domain = self.text(
            "session-cookie-domain",
            is_cookie_domain,
            "is not a domain like example.com; the cookie is for the request's host alone",
        );
        let same_site = match self.get("session-cookie-samesite") {
            None => None,
            Some((key, v)) => match v.trim().to_ascii_lowercase().as_str() {
                "none" => Some("None".to_owned()),
                "lax" => Some("Lax".to_owned()),
                "strict" => Some("Strict".to_owned()),
                _ => {
                    self.invalid(key, format!("{v:?} is not None, Lax or Strict; it is left out"));
                    None
                }
            },
        };
        let secure = self.bool("session-cookie-secure").unwrap_or(false);
        Some(Affinity { name, path, max_age, expires, domain, same_site, secure })
    }
}

impl Reader<'_> {
    /// `proxy-next-upstream`, `-tries` and `-timeout`: `None` when none is set (Wharf's
    /// own: a connection that cannot be made is tried on every other endpoint). With one
    /// set, the others take ingress-nginx's defaults (`error timeout`, 3 tries, no time
    /// limit); `off` is one try.
    pub(super) fn retry(&mut self) -> Option<wharf_model::Retry> {
        let conditions = self.get("proxy-next-upstream");
        let tries = self.get("proxy-next-upstream-tries");
        let timeout = self.get("proxy-next-upstream-timeout");
        if conditions.is_none() && tries.is_none() && timeout.is_none() {
            return None;
        }
        let mut retry = wharf_model::Retry {
            on_error: true,
            on_timeout: true,
            statuses: Vec::new(),
            non_idempotent: false,
            tries: 3,
            timeout_ms: None,
        };
        let mut off = false;
        if let Some((key, value)) = conditions {
            (retry.on_error, retry.on_timeout) = (false, false);
            for word in value.split_whitespace() {
                match word {
                    "error" | "invalid_header" => retry.on_error = true,
                    "timeout" => retry.on_timeout = true,
                    "non_idempotent" => retry.non_idempotent = true,
                    "off" => off = true,
                    _ => match word.strip_prefix("http_").and_then(|c| c.parse::<u16>().ok()) {
                        Some(c @ (500 | 502 | 503 | 504 | 403 | 404 | 429)) => {
                            if !retry.statuses.contains(&c) {
                                retry.statuses.push(c);
                            }
                        }
                        _ => self.invalid(
                            key,
                            format!(
                                "{word:?} is not one of error, timeout, invalid_header, http_500, http_502, http_503, \
                                 http_504, http_403, http_404, http_429, non_idempotent, off; it is left out"
                            ),
                        ),
                    },
                }
            }
        }
        if let Some((key, value)) = tries {
            match value.trim().parse::<u32>() {
                Ok(n) => retry.tries = n,
                Err(_) => self.invalid(key, format!("{value:?} is not a whole number; 3 is used")),
            }
        }
        if let Some((key, value)) = timeout {
            match value.trim().parse::<u64>() {
                Ok(0) => {}
                Ok(s) => retry.timeout_ms = Some(s.saturating_mul(1000)),
                Err(_) => self.invalid(key, format!("{value:?} is not a whole number of seconds; none is used")),
            }
        }
        if off {
            retry = wharf_model::Retry { on_error: false, on_timeout: false, statuses: Vec::new(), tries: 1, ..retry };
        }
        Some(retry)
    }
}

/// A cookie's `Domain`: DNS labels, with the leading dot browsers ignore allowed.
pub(super) fn is_cookie_domain(v: &str) -> bool {
    let name = v.strip_prefix('.').unwrap_or(v);
    !name.is_empty()
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}
