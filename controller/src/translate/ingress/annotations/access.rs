//! Who may reach the backend: basic and external authentication, client certificates,
//! source ranges and rate limits. What cannot be set up refuses every request.

use wharf_model::{ClientFilter, IpNet};

use super::*;

/// Client certificates, as the `auth-tls-*` annotations ask; the CA Secret is read at
/// translation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTlsSetting {
    /// `auth-tls-secret`: the Secret with `ca.crt`, namespace and name.
    pub secret: (String, String),
    /// What the Ingress's routes ask of the certificate.
    pub check: wharf_model::ClientCertCheck,
    /// `auth-tls-verify-depth` (default 1, as in ingress-nginx).
    pub verify_depth: u8,
}

/// Basic authentication, as the annotations ask; the Secret is read at translation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthSetting {
    /// `auth-type: basic`.
    Basic {
        /// `auth-realm` (ingress-nginx's default is empty).
        realm: String,
        /// The Secret's namespace and name.
        secret: (String, String),
        /// `auth-secret-type: auth-map`: each key a user (else the htpasswd file in `auth`).
        map: bool,
    },
    /// `auth-url` and the settings of its check.
    External(ExternalSetting),
    /// The authentication asked for cannot be enforced (why, for the log): requests are
    /// answered 503.
    Unavailable(String),
}

/// External authentication, as the annotations ask; where the check goes is decided at
/// translation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalSetting {
    /// `auth-url`.
    pub url: wharf_model::Template,
    /// Its scheme is `https`.
    pub tls: bool,
    /// Its host, when fixed (not `$host`), lower-case.
    pub host: Option<String>,
    /// Its port (the scheme's default when the URL has none).
    pub port: u16,
    /// `auth-method`.
    pub method: Option<String>,
    /// `auth-signin`.
    pub signin: Option<wharf_model::Template>,
    /// `auth-signin-redirect-param` (default `rd`).
    pub signin_redirect_param: String,
    /// `auth-response-headers`, lower-case.
    pub response_headers: Vec<String>,
    /// `auth-request-redirect`.
    pub request_redirect: Option<String>,
    /// `auth-always-set-cookie`.
    pub always_set_cookie: bool,
    /// `auth-cache-key`, `auth-cache-duration`.
    pub cache: Option<Box<wharf_model::AuthCache>>,
}

impl Reader<'_> {
    pub(super) fn rate_limit(&mut self) -> Option<wharf_model::RateLimit> {
        let per_second = self.count("limit-rps", 1_000_000);
        let per_minute = self.count("limit-rpm", 60_000_000);
        let connections = self.count("limit-connections", 1_000_000);
        let multiplier = self.count("limit-burst-multiplier", 1_000).unwrap_or(5);
        let exempt = match self.get("limit-allowlist").or_else(|| self.get("limit-whitelist")) {
            None => Vec::new(),
            Some((key, value)) => {
                let mut nets = Vec::new();
                for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                    match IpNet::parse(item) {
                        Ok(n) => nets.push(n),
                        Err(e) => self.invalid(key, format!("{e}: it is not exempt from the limits")),
                    }
                }
                nets
            }
        };
        if per_second.is_none() && per_minute.is_none() && connections.is_none() {
            return None;
        }
        Some(wharf_model::RateLimit {
            zone: format!("{}/{}", self.src.namespace, self.src.name),
            per_second,
            per_minute,
            burst: per_second.unwrap_or(0).saturating_mul(multiplier),
            burst_per_minute: per_minute.unwrap_or(0).saturating_mul(multiplier),
            connections,
            exempt,
        })
    }

    pub(super) fn auth(&mut self) -> Option<AuthSetting> {
        if let Some(name) = UNENFORCED_ACCESS_CONTROL.into_iter().find(|n| self.unenforced(n)) {
            return Some(AuthSetting::Unavailable(format!("annotation {name} is not supported")));
        }
        // Why, for the log, names the annotation without its prefix: renaming the
        // annotations changes nothing that is served.
        let unavailable = Self::unavailable;
        if let Some((url_key, _)) = self.get("auth-url") {
            if let Some((type_key, _)) = self.get("auth-type") {
                return unavailable(
                    self,
                    type_key,
                    format!("basic authentication together with {url_key} is not supported"),
                );
            }
            return self.external();
        }
        let Some((type_key, ty)) = self.get("auth-type") else {
            if let Some((key, _)) = self.get("auth-secret") {
                let msg = "has no effect without auth-type: basic (as in ingress-nginx); the Ingress is served \
                           without authentication";
                self.invalid(key, msg.to_owned());
            }
            return None;
        };
        match ty.trim() {
            "basic" => {}
            "digest" => {
                return unavailable(self, type_key, "digest authentication is not supported (use basic)".into())
            }
            other => return unavailable(self, type_key, format!("{other:?} is not basic")),
        }
        let Some((secret_key, secret)) = self.get("auth-secret") else {
            return unavailable(self, type_key, "needs auth-secret, the Secret with the users".into());
        };
        let secret = match self.secret_ref(secret) {
            Ok(s) => s,
            Err(msg) => return unavailable(self, secret_key, msg),
        };
        let map = match self.get("auth-secret-type") {
            None => false,
            Some((key, v)) => match v.trim() {
                "auth-file" => false,
                "auth-map" => true,
                other => return unavailable(self, key, format!("{other:?} is not auth-file or auth-map")),
            },
        };
        let realm = self
            .text(
                "auth-realm",
                |v| v.bytes().all(|b| b.is_ascii_graphic() || b == b' '),
                "is not a realm of visible characters; the realm is empty",
            )
            .unwrap_or_default();
        Some(AuthSetting::Basic { realm, secret, map })
    }

    /// A Secret named by an annotation: `NAME` or `NAMESPACE/NAME`, in the Ingress's own
    /// namespace.
    pub(super) fn secret_ref(&self, value: &str) -> Result<(String, String), String> {
        let own = self.src.namespace.as_str();
        let raw = value.trim();
        let (ns, name) = raw.split_once('/').unwrap_or((own, raw));
        if ns.contains('.') || !wharf_model::is_dns_name(ns) || !wharf_model::is_dns_name(name) {
            return Err(format!("{raw:?} is not a Secret's NAME or NAMESPACE/NAME"));
        }
        if ns != own {
            return Err(format!(
                "Secret {ns}/{name} is in another namespace, which ingress-nginx refuses by default (and Wharf \
                 always); copy it into namespace {own}"
            ));
        }
        Ok((ns.to_owned(), name.to_owned()))
    }

    /// `auth-tls-secret` and its settings: `Ok(None)` without client certificates, `Err`
    /// (why, for the log) when they are asked for and cannot be checked.
    pub(super) fn client_tls(&mut self) -> Result<Option<ClientTlsSetting>, String> {
        let Some((secret_key, secret)) = self.get("auth-tls-secret") else {
            for name in [
                "auth-tls-verify-client",
                "auth-tls-error-page",
                "auth-tls-pass-certificate-to-upstream",
                "auth-tls-match-cn",
                "auth-tls-verify-depth",
            ] {
                if let Some((key, _)) = self.get(name) {
                    self.invalid(key, "has no effect without auth-tls-secret (as in ingress-nginx)".into());
                }
            }
            return Ok(None);
        };
        let fail = |r: &mut Self, key: &str, message: String| Err(r.refused(key, message));
        let secret = match self.secret_ref(secret) {
            Ok(s) => s,
            Err(msg) => return fail(self, secret_key, msg),
        };
        let verify = match self.get("auth-tls-verify-client") {
            None => wharf_model::VerifyClient::On,
            Some((key, v)) => match v.trim() {
                "on" => wharf_model::VerifyClient::On,
                "optional" => wharf_model::VerifyClient::Optional,
                "off" => return Ok(None),
                "optional_no_ca" => {
                    return fail(self, key, "optional_no_ca (a certificate no CA checks) is not supported".into())
                }
                other => return fail(self, key, format!("{other:?} is not on, optional or off")),
            },
        };
        let pass_certificate = self.bool("auth-tls-pass-certificate-to-upstream").unwrap_or(false);
        let error_page = self.text(
            "auth-tls-error-page",
            |v| {
                (v.starts_with("http://") || v.starts_with("https://") || v.starts_with('/'))
                    && v.bytes().all(|b| b.is_ascii_graphic())
            },
            "is not a URL (http://, https:// or a path); clients without a certificate get 400",
        );
        // nginx's `$ssl_client_s_dn !~ PATTERN`: a match anywhere in the subject.
        let match_subject = match self.get("auth-tls-match-cn") {
            None => None,
            Some((key, v)) => match wharf_model::Pattern::full(&format!(".*(?:{}).*", v.trim())) {
                Ok(p) if !v.trim().is_empty() => Some(p),
                Ok(_) => return fail(self, key, "is empty (a pattern like CN=ops is expected)".into()),
                Err(e) => return fail(self, key, format!("{:?}: {}", v.trim(), e.reason)),
            },
        };
        let verify_depth = self.depth("auth-tls-verify-depth");
        let check = wharf_model::ClientCertCheck { verify, pass_certificate, error_page, match_subject };
        Ok(Some(ClientTlsSetting { secret, check, verify_depth }))
    }

    /// Reports `key` as `message` and refuses every request. Why, for the log, names the
    /// annotation without its prefix: renaming the annotations changes nothing served.
    pub(super) fn unavailable(&mut self, key: &str, message: String) -> Option<AuthSetting> {
        Some(AuthSetting::Unavailable(self.refused(key, message)))
    }

    /// Reports `key` as `message`, its requests refused (503), and says why for the log,
    /// naming the annotation without its prefix (renaming them changes nothing served).
    pub(super) fn refused(&mut self, key: &str, message: String) -> String {
        self.invalid(key, format!("{message}; requests are answered 503 until it is fixed"));
        let name = key.rsplit('/').next().unwrap_or(key);
        format!("annotation {name}: {message}")
    }

    /// A chain depth (`*-verify-depth`), 1 to 16; 1 (nginx's default) when absent or
    /// invalid (reported).
    pub(super) fn depth(&mut self, name: &str) -> u8 {
        let Some((key, v)) = self.get(name) else { return 1 };
        match v.trim().parse::<u8>() {
            Ok(n @ 1..=16) => n,
            _ => {
                self.invalid(key, format!("{:?} is not a whole number from 1 to 16; the depth is 1", v.trim()));
                1
            }
        }
    }

    /// `auth-url` and its settings; what is invalid refuses every request, as in
    /// ingress-nginx.
    pub(super) fn external(&mut self) -> Option<AuthSetting> {
        let unavailable = Self::unavailable;
        let (url_key, raw) = self.get("auth-url")?;
        let raw = raw.trim();
        let (url, tls, host, port) = match parse_auth_url(raw) {
            Ok(parsed) => parsed,
            Err(why) => return unavailable(self, url_key, format!("{raw:?} {why}")),
        };
        let method = match self.get("auth-method") {
            None => None,
            Some((key, m)) => match m.trim() {
                m @ ("GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE" | "OPTIONS" | "TRACE") => Some(m.to_owned()),
                other => return unavailable(self, key, format!("{other:?} is not an HTTP method like GET or POST")),
            },
        };
        let signin = match self.get("auth-signin") {
            None => None,
            Some((key, v)) => match parse_auth_url(v.trim()) {
                Ok((t, ..)) => Some(t),
                Err(why) => return unavailable(self, key, format!("{:?} {why}", v.trim())),
            },
        };
        let signin_redirect_param = match self.get("auth-signin-redirect-param") {
            None => "rd".to_owned(),
            Some((key, v)) => match v.trim() {
                p if !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') => {
                    p.to_owned()
                }
                other => return unavailable(self, key, format!("{other:?} is not a query parameter name")),
            },
        };
        let mut response_headers = Vec::new();
        if let Some((key, v)) = self.get("auth-response-headers") {
            for h in v.split(',').map(str::trim).filter(|h| !h.is_empty()) {
                if !h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
                    return unavailable(self, key, format!("{h:?} is not a header name"));
                }
                response_headers.push(h.to_ascii_lowercase());
            }
        }
        let request_redirect = self.text(
            "auth-request-redirect",
            |v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_graphic()),
            "is not a URL of visible characters; the request's URI is sent",
        );
        let always_set_cookie = self.bool("auth-always-set-cookie").unwrap_or(false);
        let cache = self.auth_cache().map(Box::new);
        Some(AuthSetting::External(ExternalSetting {
            url,
            tls,
            host,
            port,
            method,
            signin,
            signin_redirect_param,
            response_headers,
            request_redirect,
            always_set_cookie,
            cache,
        }))
    }

    /// `auth-cache-key` with `auth-cache-duration` (statuses, then a time: ingress-nginx's
    /// default `200 202 401 5m`; a time alone keeps 200, 301 and 302, as nginx's
    /// `proxy_cache_valid`). What is invalid is reported and nothing is kept.
    fn auth_cache(&mut self) -> Option<wharf_model::AuthCache> {
        let (key_name, key) = self.get("auth-cache-key")?;
        let key = match wharf_model::Template::parse_key(key.trim()) {
            Ok(k) if !k.as_str().is_empty() => k,
            Ok(_) => {
                self.invalid(key_name, "is empty; answers are not kept".into());
                return None;
            }
            Err(why) => {
                self.invalid(key_name, format!("{why}; answers are not kept"));
                return None;
            }
        };
        let (statuses, ttl_s) = match self.get("auth-cache-duration") {
            None => (vec![200, 202, 401], 300),
            Some((name, value)) => {
                let words: Vec<&str> = value.split_whitespace().collect();
                let time = words.last().and_then(|t| crate::duration::parse(t, &crate::duration::ACME));
                let codes: Option<Vec<u16>> = words
                    .iter()
                    .rev()
                    .skip(1)
                    .rev()
                    .map(|c| c.parse::<u16>().ok().filter(|c| (100..600).contains(c)))
                    .collect();
                match (time, codes) {
                    (Some(t), Some(c)) if t.as_secs() > 0 => {
                        (if c.is_empty() { vec![200, 301, 302] } else { c }, t.as_secs())
                    }
                    _ => {
                        self.invalid(
                            name,
                            format!(
                                "{value:?} is not statuses then a time, like \"200 202 401 5m\"; answers are not kept"
                            ),
                        );
                        return None;
                    }
                }
            }
        };
        Some(wharf_model::AuthCache { key, statuses, ttl_s })
    }

    /// The allow list (`allowlist-source-range`, before its old name
    /// `whitelist-source-range`) and the deny list. An invalid list serves no one.
    pub(super) fn clients(&mut self) -> Option<ClientFilter> {
        let allow = self
            .get("allowlist-source-range")
            .or_else(|| self.get("whitelist-source-range"))
            .map(|(key, value)| self.networks(key, value).unwrap_or_default());
        let deny = match self.get("denylist-source-range") {
            None => None,
            Some((key, value)) => match self.networks(key, value) {
                Some(nets) => Some(nets),
                None => return Some(ClientFilter { allow: Some(Vec::new()), deny: Vec::new() }),
            },
        };
        if allow.is_none() && deny.is_none() {
            return None;
        }
        Some(ClientFilter { allow, deny: deny.unwrap_or_default() })
    }
}
/// An `http://` or `https://` URL with nginx variables, for a check or a sign-in page: the
/// template, whether it is `https`, its host when fixed (lower-case) and its port.
pub(super) fn parse_auth_url(raw: &str) -> Result<(wharf_model::Template, bool, Option<String>, u16), String> {
    let (tls, rest) = match (raw.strip_prefix("https://"), raw.strip_prefix("http://")) {
        (Some(rest), _) => (true, rest),
        (None, Some(rest)) => (false, rest),
        (None, None) => return Err("is not an http:// or https:// URL".into()),
    };
    if !raw.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("has spaces or characters a URL cannot have".into());
    }
    let template = wharf_model::Template::parse(raw)?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let default_port = if tls { 443 } else { 80 };
    // `[v6]:port`, `[v6]`, `name:port`, `name`.
    let split = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map(|(a, p)| (&authority[..a.len() + 2], p.strip_prefix(':'))),
        None => Some(authority.split_once(':').map_or((authority, None), |(h, p)| (h, Some(p)))),
    };
    let (host, port) = match split {
        Some((h, None)) => (h, default_port),
        Some((h, Some(p))) => match p.parse::<u16>() {
            Ok(p) if p > 0 => (h, p),
            _ => return Err(format!("has no valid port ({p:?})")),
        },
        None => return Err("has an unclosed [ in its host".into()),
    };
    let host = match host {
        "$host" | "${host}" => None,
        h if !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.[]:".contains(&b)) => {
            Some(h.to_ascii_lowercase())
        }
        _ => return Err("has no host (a name, an address or $host)".into()),
    };
    Ok((template, tls, host, port))
}
