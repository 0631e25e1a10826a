//! Where and how a request is answered before or instead of its backend: redirects, the
//! app root, rewrites, canaries and CORS.

use super::reader::is_cookie_name;
use super::*;
use wharf_model::Host;

/// ingress-nginx's CORS defaults.
pub(super) const CORS_METHODS: &str = "GET, PUT, POST, DELETE, PATCH, OPTIONS";

pub(super) const CORS_HEADERS: &str =
    "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization";

pub(super) const CORS_MAX_AGE: u64 = 1_728_000;

/// How a canary Ingress takes requests from the Ingress it shadows, tried in this order:
/// header, cookie, weight.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Canary {
    /// `canary-by-header`, lower-case.
    pub header: Option<String>,
    /// `canary-by-header-value`: this value sends to the canary (instead of `always`).
    pub header_value: Option<String>,
    /// `canary-by-header-pattern`: a value this matches (anywhere) sends to the canary.
    pub header_pattern: Option<wharf_model::Pattern>,
    /// `canary-by-header-pattern` did not compile: a request with the header goes to the
    /// mainline, whatever its cookie (ingress-nginx's match fails there, and decides).
    pub header_pattern_broken: bool,
    /// `canary-by-cookie`.
    pub cookie: Option<String>,
    /// `canary-weight`: the share of the remaining requests, out of `weight_total`.
    pub weight: u32,
    /// `canary-weight-total` (default 100).
    pub weight_total: u32,
    /// `affinity-canary-behavior: legacy`: the main Ingress's affinity cookie neither
    /// keeps a client on the canary nor is set by it (`sticky`, the default, does both).
    pub legacy_affinity: bool,
}

/// A redirect of every request to one URL (`permanent-redirect`, `temporal-redirect`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedRedirect {
    /// The `Location`: an absolute URL, or a path made absolute against the request
    /// unless `relative`.
    pub url: String,
    /// The status code.
    pub status: u16,
    /// `relative-redirects`: a path is sent as it is.
    pub relative: bool,
}

impl Reader<'_> {
    pub(super) fn cors(&mut self) -> Option<wharf_model::Cors> {
        if self.bool("enable-cors") != Some(true) {
            return None;
        }
        // A blank list allows any origin, and `*` among others is `*` alone (as in
        // ingress-nginx).
        let allow_origins = match self.get("cors-allow-origin") {
            None => vec!["*".to_owned()],
            Some((_, value)) if value.trim().is_empty() || value.split(',').any(|o| o.trim() == "*") => {
                vec!["*".to_owned()]
            }
            Some((key, value)) => {
                let mut origins = Vec::new();
                for o in value.split(',').map(str::trim).filter(|o| !o.is_empty()) {
                    if is_origin(o) {
                        origins.push(o.to_owned());
                    } else {
                        self.invalid(
                            key,
                            format!("{o:?} is not an origin like https://app.example, https://*.example or *; it is not allowed"),
                        );
                    }
                }
                origins
            }
        };
        let list = |r: &mut Self, name: &str, default: &str, star: bool| -> String {
            let Some((key, value)) = r.get(name) else { return default.to_owned() };
            let ok = value.split(',').map(str::trim).all(|item| {
                (star && item == "*")
                    || (!item.is_empty() && item.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
            });
            if ok {
                value.trim().to_owned()
            } else {
                r.invalid(key, format!("{value:?} is not a comma-separated list of names; {default:?} is used"));
                default.to_owned()
            }
        };
        let allow_methods = list(self, "cors-allow-methods", CORS_METHODS, false);
        let allow_headers = list(self, "cors-allow-headers", CORS_HEADERS, false);
        let expose_headers = list(self, "cors-expose-headers", "", true);
        let allow_credentials = self.bool("cors-allow-credentials").unwrap_or(true);
        let max_age = match self.get("cors-max-age") {
            None => CORS_MAX_AGE,
            Some((key, value)) => value.trim().parse::<u64>().unwrap_or_else(|_| {
                self.invalid(key, format!("{value:?} is not a number of seconds; {CORS_MAX_AGE} is used"));
                CORS_MAX_AGE
            }),
        };
        Some(wharf_model::Cors {
            allow_origins,
            allow_methods,
            allow_headers,
            expose_headers,
            allow_credentials,
            max_age,
        })
    }

    pub(super) fn canary(&mut self) -> Option<Canary> {
        if self.bool("canary") != Some(true) {
            return None;
        }
        let header = self
            .text(
                "canary-by-header",
                |h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "is not a header name; requests are not routed by header",
            )
            .map(|h| h.to_ascii_lowercase());
        let header_value = self.get("canary-by-header-value").map(|(_, v)| v.to_owned());
        let mut header_pattern_broken = false;
        let header_pattern = match self.get("canary-by-header-pattern") {
            Some((key, value)) if header_value.is_none() => {
                // ingress-nginx searches the value (unanchored) for the pattern.
                match wharf_model::Pattern::full(&format!(".*(?:{value}).*")) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        let why =
                            format!("{value:?}: {}; requests with the canary-by-header go to the mainline", e.reason);
                        self.invalid(key, why);
                        header_pattern_broken = true;
                        None
                    }
                }
            }
            _ => None,
        };
        let cookie =
            self.text("canary-by-cookie", is_cookie_name, "is not a cookie name; requests are not routed by cookie");
        let weight_total = match self.get("canary-weight-total") {
            None => 100,
            Some((key, value)) => match value.trim().parse::<u32>() {
                Ok(n @ 1..=1_000_000) => n,
                _ => {
                    self.invalid(key, format!("{value:?} is not a number from 1 to 1000000; 100 is used"));
                    100
                }
            },
        };
        let weight = match self.get("canary-weight") {
            None => 0,
            Some((key, value)) => match value.trim().parse::<u32>() {
                Ok(n) => n.min(weight_total),
                Err(_) => {
                    self.invalid(key, format!("{value:?} is not a whole number; the canary gets no share by weight"));
                    0
                }
            },
        };
        let legacy_affinity = match self.get("affinity-canary-behavior") {
            None => false,
            Some((key, value)) => match value.trim() {
                "sticky" => false,
                "legacy" => true,
                other => {
                    self.invalid(key, format!("{other:?} is not sticky or legacy; sticky is used"));
                    false
                }
            },
        };
        Some(Canary {
            header,
            header_value,
            header_pattern,
            header_pattern_broken,
            cookie,
            weight,
            weight_total,
            legacy_affinity,
        })
    }

    /// A redirect of every request to the URL in `name`, with the status in `name-code`
    /// (else `default`).
    pub(super) fn fixed_redirect(&mut self, name: &str, default: u16) -> Option<FixedRedirect> {
        let (key, value) = self.get(name)?;
        let url = value.trim();
        if !is_redirect_url(url) {
            self.invalid(key, format!("{url:?} is not an http:// or https:// URL or a path; it is ignored"));
            return None;
        }
        let code_name = format!("{name}-code");
        let status = match self.get(&code_name) {
            None => default,
            Some((code_key, code)) => match code.trim().parse::<u16>() {
                Ok(s @ (301 | 302 | 303 | 307 | 308)) => s,
                _ => {
                    self.invalid(code_key, format!("{code:?} is not 301, 302, 303, 307 or 308; {default} is used"));
                    default
                }
            },
        };
        let relative = self.bool("relative-redirects").unwrap_or(false);
        Some(FixedRedirect { url: url.to_owned(), status, relative })
    }

    /// `server-alias`: comma-separated host names (`*.domain` too); an invalid one is
    /// reported and left out.
    pub(super) fn server_aliases(&mut self) -> Vec<Host> {
        let Some((key, value)) = self.get("server-alias") else { return Vec::new() };
        let mut out: Vec<Host> = Vec::new();
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match Host::parse(name) {
                Ok(h) if !out.contains(&h) => out.push(h),
                Ok(_) => {}
                Err(e) => self.invalid(key, format!("{name:?} is left out: {e}")),
            }
        }
        out
    }

    /// A path template: visible ASCII, no query or fragment (the request's query is kept).
    pub(super) fn rewrite_target(&mut self) -> Option<String> {
        self.text(
            "rewrite-target",
            |t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic() && b != b'?' && b != b'#'),
            "is not a path like /$2 (no spaces, query or fragment); the path is not rewritten",
        )
    }

    pub(super) fn app_root(&mut self) -> Option<String> {
        self.text(
            "app-root",
            |p| p.starts_with('/') && p.len() > 1 && p.bytes().all(|b| b.is_ascii_graphic()),
            "is not an absolute path like /app; it is ignored",
        )
    }
}

/// `*`, or `scheme://host[:port]` with a host that may start with `*.`.
pub(super) fn is_origin(o: &str) -> bool {
    if o == "*" {
        return true;
    }
    let Some((scheme, rest)) = o.split_once("://") else { return false };
    let host = rest.strip_prefix("*.").unwrap_or(rest);
    !scheme.is_empty()
        && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
        && !host.is_empty()
        && !host.starts_with(':')
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
}

/// An absolute `http://` or `https://` URL with a host, or a path (`/new`, not `//host`),
/// of visible ASCII only (nothing a header or a log line could be split on).
pub(super) fn is_redirect_url(url: &str) -> bool {
    if url.starts_with('/') && !url.starts_with("//") {
        return url.bytes().all(|b| b.is_ascii_graphic());
    }
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    let Some(rest) = rest else { return false };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    !authority.is_empty() && !authority.starts_with(':') && url.bytes().all(|b| b.is_ascii_graphic())
}
