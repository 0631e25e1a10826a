//! Ingress annotations: each `wharf.dev/NAME` and its ingress-nginx equivalent
//! `nginx.ingress.kubernetes.io/NAME`, parsed once per Ingress into typed [`Settings`].
//! A value is validated, never pasted into configuration; an invalid one is reported and
//! fails closed where ingress-nginx does (an unparsable allow list serves no one). An
//! annotation under either prefix that Wharf does not implement is reported by name, and
//! one that injects raw proxy configuration (`*-snippet`) is refused.

use std::collections::BTreeMap;

use wharf_model::{ClientFilter, IpNet, ObjectRef};

use super::Diagnostic;

/// Prefix of Wharf's own annotations.
pub const WHARF_PREFIX: &str = "wharf.dev/";
/// Prefix of ingress-nginx's annotations, accepted for the same names.
pub const NGINX_PREFIX: &str = "nginx.ingress.kubernetes.io/";

/// The annotation names Wharf acts on only under its own prefix (ingress-nginx has no
/// such annotation).
pub const WHARF_ONLY: [&str; 2] = ["acme", "acme-issuer"];

/// The annotation names (after the prefix) Wharf acts on.
pub const IMPLEMENTED: [&str; 72] = [
    "proxy-send-timeout",
    "proxy-ssl-secret",
    "proxy-ssl-verify",
    "proxy-ssl-name",
    "proxy-ssl-server-name",
    "proxy-ssl-verify-depth",
    "default-backend",
    "custom-http-errors",
    "auth-tls-secret",
    "auth-tls-match-cn",
    "auth-tls-verify-depth",
    "auth-tls-verify-client",
    "auth-tls-error-page",
    "auth-tls-pass-certificate-to-upstream",
    "ssl-passthrough",
    "ssl-redirect",
    "force-ssl-redirect",
    "proxy-body-size",
    "allowlist-source-range",
    "whitelist-source-range",
    "denylist-source-range",
    "permanent-redirect",
    "permanent-redirect-code",
    "temporal-redirect",
    "temporal-redirect-code",
    "app-root",
    "from-to-www-redirect",
    "rewrite-target",
    "use-regex",
    "proxy-connect-timeout",
    "proxy-read-timeout",
    "backend-protocol",
    "canary",
    "canary-by-header",
    "canary-by-header-value",
    "canary-by-header-pattern",
    "canary-by-cookie",
    "canary-weight",
    "canary-weight-total",
    "upstream-vhost",
    "x-forwarded-prefix",
    "enable-cors",
    "cors-allow-origin",
    "cors-allow-methods",
    "cors-allow-headers",
    "cors-expose-headers",
    "cors-allow-credentials",
    "cors-max-age",
    "limit-rps",
    "limit-rpm",
    "limit-connections",
    "limit-burst-multiplier",
    "limit-allowlist",
    "limit-whitelist",
    "affinity",
    "session-cookie-name",
    "session-cookie-path",
    "session-cookie-max-age",
    "session-cookie-expires",
    "session-cookie-samesite",
    "session-cookie-secure",
    "auth-type",
    "auth-secret",
    "auth-secret-type",
    "auth-realm",
    "auth-url",
    "auth-method",
    "auth-signin",
    "auth-signin-redirect-param",
    "auth-response-headers",
    "auth-request-redirect",
    "auth-always-set-cookie",
];

/// Annotations that ask for protection Wharf does not give (a web application firewall):
/// an Ingress with one set to anything but `false` is answered 503 rather than served
/// unprotected.
pub const UNENFORCED_ACCESS_CONTROL: [&str; 2] = ["enable-modsecurity", "enable-owasp-core-rules"];

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
}

/// Sticky sessions by cookie, as the annotations ask; the path defaults to the route's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Affinity {
    /// `session-cookie-name` (default `INGRESSCOOKIE`).
    pub name: String,
    /// `session-cookie-path`.
    pub path: Option<String>,
    /// `session-cookie-max-age` (else `session-cookie-expires`), seconds.
    pub max_age: Option<u64>,
    /// `session-cookie-samesite`.
    pub same_site: Option<String>,
    /// `session-cookie-secure`.
    pub secure: bool,
}

/// ingress-nginx's CORS defaults.
const CORS_METHODS: &str = "GET, PUT, POST, DELETE, PATCH, OPTIONS";
const CORS_HEADERS: &str =
    "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization";
const CORS_MAX_AGE: u64 = 1_728_000;

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
    /// `canary-by-cookie`.
    pub cookie: Option<String>,
    /// `canary-weight`: the share of the remaining requests, out of `weight_total`.
    pub weight: u32,
    /// `canary-weight-total` (default 100).
    pub weight_total: u32,
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

/// What becomes of an Ingress that carries a snippet annotation (raw proxy configuration,
/// which Wharf never runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SnippetPolicy {
    /// The Ingress is not served: what the snippet did (often access control) would be
    /// silently missing.
    #[default]
    SkipIngress,
    /// The Ingress is served without the snippet.
    Ignore,
}

/// How annotations are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationOptions {
    /// Read `nginx.ingress.kubernetes.io/` names too (a `wharf.dev/` name wins when both
    /// are set).
    pub nginx_names: bool,
    /// What a snippet annotation does to its Ingress.
    pub snippets: SnippetPolicy,
}

impl Default for AnnotationOptions {
    fn default() -> Self {
        AnnotationOptions { nginx_names: true, snippets: SnippetPolicy::SkipIngress }
    }
}

/// A redirect of every request to one URL (`permanent-redirect`, `temporal-redirect`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedRedirect {
    /// The `Location`, exactly.
    pub url: String,
    /// The status code.
    pub status: u16,
}

/// What an Ingress's annotations ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// A snippet was refused: the Ingress is not served.
    pub skip: bool,
    /// `ssl-passthrough`: TLS connections for its hosts go to the backend undecrypted.
    pub ssl_passthrough: bool,
    /// `ssl-redirect` (default on): plain HTTP to hosts with TLS is redirected to HTTPS.
    pub ssl_redirect: bool,
    /// `force-ssl-redirect`: redirect to HTTPS even without TLS.
    pub force_ssl_redirect: bool,
    /// `proxy-body-size`: the request body limit (`Some(0)`: unlimited).
    pub max_body_bytes: Option<u64>,
    /// `allowlist-source-range` / `whitelist-source-range`, `denylist-source-range`.
    pub clients: Option<Box<ClientFilter>>,
    /// `temporal-redirect` (wins) or `permanent-redirect`.
    pub redirect: Option<Box<FixedRedirect>>,
    /// `app-root`: `/` is redirected (302) to this path.
    pub app_root: Option<String>,
    /// `from-to-www-redirect`: `www.HOST` redirects to `HOST` (and back).
    pub from_to_www: bool,
    /// `use-regex`: the paths of the Ingress's hosts are regular expressions.
    pub use_regex: bool,
    /// `rewrite-target`: the path the backend gets, `$N` filled from the path's capture
    /// groups (implies `use_regex`).
    pub rewrite_target: Option<String>,
    /// `proxy-connect-timeout`, in milliseconds.
    pub connect_timeout_ms: Option<u64>,
    /// `proxy-read-timeout`: how long the backend may take to start its response, in
    /// milliseconds.
    pub read_timeout_ms: Option<u64>,
    /// `proxy-send-timeout`: how long the backend may take no part of the request body,
    /// in milliseconds.
    pub send_timeout_ms: Option<u64>,
    /// `backend-protocol`.
    pub backend_protocol: BackendProtocol,
    /// `canary: "true"`: the Ingress shadows another's paths; its other annotations do
    /// not apply (the shadowed Ingress's do).
    pub canary: Option<Box<Canary>>,
    /// `upstream-vhost`: the `Host` the backend gets.
    pub upstream_vhost: Option<String>,
    /// `x-forwarded-prefix`: the backend gets this `X-Forwarded-Prefix`.
    pub forwarded_prefix: Option<String>,
    /// `enable-cors` and `cors-*`.
    pub cors: Option<Box<wharf_model::Cors>>,
    /// `limit-rps`, `limit-rpm`, `limit-connections` and their settings.
    pub rate_limit: Option<Box<wharf_model::RateLimit>>,
    /// `affinity: cookie` and `session-cookie-*`.
    pub affinity: Option<Box<Affinity>>,
    /// `auth-type`, `auth-secret`, `auth-secret-type`, `auth-realm`, and access control
    /// that cannot be enforced.
    pub auth: Option<Box<AuthSetting>>,
    /// `auth-tls-*`: client certificates.
    pub client_tls: Option<Box<ClientTlsSetting>>,
    /// `default-backend`: a Service of the Ingress's namespace, by name.
    pub default_backend: Option<String>,
    /// `custom-http-errors`: the statuses the default backend answers in place of the
    /// backend.
    pub custom_http_errors: Vec<u16>,
    /// `proxy-ssl-*`: the backend's certificate is checked.
    pub proxy_ssl: Option<Box<ProxySslSetting>>,
    /// `wharf.dev/acme`: the TLS Secrets get certificates from ACME (`Some(false)`: never,
    /// even when missing).
    pub acme: Option<bool>,
    /// `wharf.dev/acme-issuer`: the ACME issuer, by name.
    pub acme_issuer: Option<String>,
}

impl Settings {
    /// True when the Ingress's hosts take regex paths (host-wide, as in ingress-nginx).
    pub fn regex(&self) -> bool {
        self.use_regex || self.rewrite_target.is_some()
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            skip: false,
            ssl_passthrough: false,
            ssl_redirect: true,
            force_ssl_redirect: false,
            max_body_bytes: None,
            clients: None,
            redirect: None,
            app_root: None,
            from_to_www: false,
            use_regex: false,
            rewrite_target: None,
            connect_timeout_ms: None,
            read_timeout_ms: None,
            send_timeout_ms: None,
            backend_protocol: BackendProtocol::Http,
            canary: None,
            upstream_vhost: None,
            forwarded_prefix: None,
            cors: None,
            rate_limit: None,
            affinity: None,
            auth: None,
            client_tls: None,
            default_backend: None,
            custom_http_errors: Vec::new(),
            proxy_ssl: None,
            acme: None,
            acme_issuer: None,
        }
    }
}

/// What is wrong with one annotation; becomes an Event on its Ingress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Its value is invalid (what Wharf does instead is in the message).
    Invalid(String),
    /// Wharf does not act on it.
    NotSupported(String),
    /// A snippet: raw proxy configuration, never run.
    Refused(String),
}

impl Finding {
    /// The Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Finding::Invalid(_) => "InvalidAnnotation",
            Finding::NotSupported(_) => "UnsupportedAnnotation",
            Finding::Refused(_) => "SnippetRefused",
        }
    }

    /// What is wrong and what to do, naming the annotation.
    pub fn message(&self) -> &str {
        match self {
            Finding::Invalid(m) | Finding::NotSupported(m) | Finding::Refused(m) => m,
        }
    }
}

/// Parses the annotations of the Ingress `src`, reporting what is invalid, refused or
/// not supported into `diags`.
pub fn parse(
    annotations: Option<&BTreeMap<String, String>>,
    src: &ObjectRef,
    opts: &AnnotationOptions,
    diags: &mut Vec<Diagnostic>,
) -> Settings {
    let (settings, findings) = inspect(annotations, src, opts);
    diags.extend(findings.into_iter().map(|(_, f)| Diagnostic {
        object: src.clone(),
        reason: f.reason(),
        message: f.message().to_owned(),
    }));
    settings
}

/// [`parse`], with what is wrong with each annotation by its key instead of as
/// diagnostics.
pub fn inspect(
    annotations: Option<&BTreeMap<String, String>>,
    src: &ObjectRef,
    opts: &AnnotationOptions,
) -> (Settings, Vec<(String, Finding)>) {
    let empty = BTreeMap::new();
    let ann = annotations.unwrap_or(&empty);
    // Each name once, from the few annotations the Ingress has under our prefixes.
    let mut by_name: BTreeMap<&str, [Option<(&str, &str)>; 2]> = BTreeMap::new();
    for (key, value) in ann {
        let (slot, name) = match (key.strip_prefix(WHARF_PREFIX), key.strip_prefix(NGINX_PREFIX)) {
            (Some(name), _) => (0, name),
            (None, Some(name)) if !WHARF_ONLY.contains(&name) => (1, name),
            _ => continue,
        };
        by_name.entry(name).or_default()[slot] = Some((key.as_str(), value.as_str()));
    }
    let mut r = Reader { ann, by_name, opts, src, findings: Vec::new() };
    let mut s = Settings {
        skip: r.unknown_and_refused(),
        ssl_passthrough: r.bool("ssl-passthrough").unwrap_or(false),
        ssl_redirect: r.bool("ssl-redirect").unwrap_or(true),
        force_ssl_redirect: r.bool("force-ssl-redirect").unwrap_or(false),
        max_body_bytes: r.size("proxy-body-size"),
        clients: r.clients().map(Box::new),
        redirect: None,
        app_root: r.app_root(),
        from_to_www: r.bool("from-to-www-redirect").unwrap_or(false),
        use_regex: r.bool("use-regex").unwrap_or(false),
        rewrite_target: r.rewrite_target(),
        connect_timeout_ms: r.seconds("proxy-connect-timeout"),
        read_timeout_ms: r.seconds("proxy-read-timeout"),
        send_timeout_ms: r.seconds("proxy-send-timeout"),
        backend_protocol: r.backend_protocol(),
        canary: r.canary().map(Box::new),
        upstream_vhost: r.upstream_vhost(),
        forwarded_prefix: r.forwarded_prefix(),
        cors: r.cors().map(Box::new),
        rate_limit: r.rate_limit().map(Box::new),
        affinity: r.affinity().map(Box::new),
        auth: r.auth().map(Box::new),
        client_tls: None,
        default_backend: r.text(
            "default-backend",
            |v| wharf_model::is_dns_name(v) && !v.contains('.'),
            "is not the name of a Service in the Ingress's namespace; it is ignored",
        ),
        custom_http_errors: Vec::new(),
        proxy_ssl: None,
        acme: r.bool("acme"),
        acme_issuer: r.text(
            "acme-issuer",
            |v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "is not the name of an ACME issuer; the default issuer is used",
        ),
    };
    s.custom_http_errors = r.error_codes(s.default_backend.is_some());
    match r.proxy_ssl(s.backend_protocol) {
        Ok(p) => s.proxy_ssl = p.map(Box::new),
        // A check asked for and impossible refuses every request.
        Err(why) => s.auth = Some(Box::new(AuthSetting::Unavailable(why))),
    }
    match r.client_tls() {
        Ok(c) => s.client_tls = c.map(Box::new),
        // Client certificates that cannot be checked refuse every request.
        Err(why) => s.auth = Some(Box::new(AuthSetting::Unavailable(why))),
    }
    s.redirect = r
        .fixed_redirect("temporal-redirect", 302)
        .or_else(|| r.fixed_redirect("permanent-redirect", 301))
        .map(Box::new);
    (s, r.findings)
}

struct Reader<'a> {
    ann: &'a BTreeMap<String, String>,
    /// Annotation name -> (key, value) under `wharf.dev/` and under ingress-nginx's prefix.
    by_name: BTreeMap<&'a str, [Option<(&'a str, &'a str)>; 2]>,
    opts: &'a AnnotationOptions,
    src: &'a ObjectRef,
    findings: Vec<(String, Finding)>,
}

impl<'a> Reader<'a> {
    /// The `wharf.dev/` value of `name`, else the ingress-nginx one (when read): the
    /// full key and the value.
    fn get(&self, name: &str) -> Option<(&'a str, &'a str)> {
        let [wharf, nginx] = self.by_name.get(name)?;
        wharf.or(nginx.filter(|_| self.opts.nginx_names))
    }

    fn invalid(&mut self, key: &str, message: String) {
        self.findings.push((key.to_owned(), Finding::Invalid(format!("annotation {key}: {message}"))));
    }

    /// `name`'s value, trimmed, when `valid` takes it; otherwise reported as `{value:?}
    /// {explain}` and treated as absent.
    fn text(&mut self, name: &str, valid: impl Fn(&str) -> bool, explain: &str) -> Option<String> {
        let (key, value) = self.get(name)?;
        let v = value.trim();
        if valid(v) {
            Some(v.to_owned())
        } else {
            self.invalid(key, format!("{v:?} {explain}"));
            None
        }
    }

    /// Reports every annotation under our prefixes that is not implemented, and the
    /// snippets; true when the Ingress must not be served.
    fn unknown_and_refused(&mut self) -> bool {
        let mut skip = false;
        let ann = self.ann;
        for key in ann.keys() {
            let (prefix, name) = match (key.strip_prefix(WHARF_PREFIX), key.strip_prefix(NGINX_PREFIX)) {
                (Some(name), _) => (WHARF_PREFIX, name),
                (None, Some(name)) => (NGINX_PREFIX, name),
                (None, None) => continue,
            };
            if name.ends_with("-snippet") {
                let (verdict, how) = match self.opts.snippets {
                    SnippetPolicy::SkipIngress => {
                        skip = true;
                        (
                            "the Ingress is not served",
                            "Remove it (docs/migrating-from-ingress-nginx.md lists the annotations that replace \
                             common snippets), or start Wharf with --snippet-annotations=ignore to serve such \
                             Ingresses without their snippets",
                        )
                    }
                    SnippetPolicy::Ignore => (
                        "the Ingress is served without it (--snippet-annotations=ignore)",
                        "Check that nothing the snippet did (access control, headers) is needed",
                    ),
                };
                let message = format!(
                    "annotation {key} injects raw proxy configuration, which Wharf never runs: {verdict}. {how}."
                );
                self.findings.push((key.clone(), Finding::Refused(message)));
            } else if UNENFORCED_ACCESS_CONTROL.contains(&name) && self.unenforced(name) {
                let message = format!(
                    "annotation {key} asks for access control Wharf does not support yet; so that the Ingress \
                     is not served unprotected, its requests are answered 503 \
                     (docs/migrating-from-ingress-nginx.md lists every annotation and its status)"
                );
                self.findings.push((key.clone(), Finding::NotSupported(message)));
            } else if !(IMPLEMENTED.contains(&name) || prefix == WHARF_PREFIX && WHARF_ONLY.contains(&name)) {
                let message = if prefix == WHARF_PREFIX {
                    format!("annotation {key} is not one Wharf knows (a misspelling?); it is ignored")
                } else {
                    format!(
                        "annotation {key} is not supported by Wharf; the Ingress is served without it \
                         (docs/migrating-from-ingress-nginx.md lists every annotation and its status)"
                    )
                };
                self.findings.push((key.clone(), Finding::NotSupported(message)));
            } else if prefix == NGINX_PREFIX && !self.opts.nginx_names {
                let message = format!(
                    "annotation {key} is ignored: this controller reads only wharf.dev/ annotations \
                     (--nginx-annotations=false); use {WHARF_PREFIX}{name}"
                );
                self.findings.push((key.clone(), Finding::NotSupported(message)));
            }
        }
        skip
    }

    /// True when `name` (one of [`UNENFORCED_ACCESS_CONTROL`]) asks for its protection.
    fn unenforced(&self, name: &str) -> bool {
        self.get(name).is_some_and(|(_, v)| v.trim() != "false")
    }

    /// A boolean; an invalid value is reported and treated as absent.
    fn bool(&mut self, name: &str) -> Option<bool> {
        let (key, value) = self.get(name)?;
        match value.trim() {
            "true" => Some(true),
            "false" => Some(false),
            other => {
                self.invalid(key, format!("{other:?} is not \"true\" or \"false\"; it is ignored"));
                None
            }
        }
    }

    /// A size; an invalid value is reported and treated as absent.
    fn size(&mut self, name: &str) -> Option<u64> {
        let (key, value) = self.get(name)?;
        let size = wharf_model::parse_size(value);
        if size.is_none() {
            self.invalid(key, format!("{value:?} is not a size like 8m, 512k or 0 (unlimited); it is ignored"));
        }
        size
    }

    /// A whole number of seconds (ingress-nginx's form), as milliseconds; an invalid value
    /// is reported and treated as absent.
    fn seconds(&mut self, name: &str) -> Option<u64> {
        let (key, value) = self.get(name)?;
        match value.trim().parse::<u64>() {
            Ok(s @ 1..=86_400) => Some(s * 1000),
            _ => {
                self.invalid(
                    key,
                    format!("{value:?} is not a number of seconds from 1 to 86400; the gateway's default is used"),
                );
                None
            }
        }
    }

    fn backend_protocol(&mut self) -> BackendProtocol {
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
    fn error_codes(&mut self, with_backend: bool) -> Vec<u16> {
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
    fn proxy_ssl(&mut self, protocol: BackendProtocol) -> Result<Option<ProxySslSetting>, String> {
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
    fn upstream_vhost(&mut self) -> Option<String> {
        self.text(
            "upstream-vhost",
            |h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b)),
            "is not a host name like svc.example or svc.example:8080; it is ignored",
        )
    }

    /// A header value: visible ASCII and spaces.
    fn forwarded_prefix(&mut self) -> Option<String> {
        self.text(
            "x-forwarded-prefix",
            |v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_graphic() || b == b' '),
            "is not a header value of visible characters; it is ignored",
        )
    }

    /// A whole number from 1 to `max`; an invalid value is reported and treated as absent.
    fn count(&mut self, name: &str, max: u32) -> Option<u32> {
        let (key, value) = self.get(name)?;
        match value.trim().parse::<u32>() {
            Ok(n) if (1..=max).contains(&n) => Some(n),
            _ => {
                self.invalid(key, format!("{value:?} is not a whole number from 1 to {max}; no such limit applies"));
                None
            }
        }
    }

    fn rate_limit(&mut self) -> Option<wharf_model::RateLimit> {
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

    fn affinity(&mut self) -> Option<Affinity> {
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
        let age = |r: &mut Self, name: &str| {
            let (key, v) = r.get(name)?;
            let n = v.trim().parse::<u64>().ok();
            if n.is_none() {
                r.invalid(key, format!("{v:?} is not a number of seconds; the cookie lasts the browser session"));
            }
            n
        };
        let max_age = age(self, "session-cookie-max-age").or_else(|| age(self, "session-cookie-expires"));
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
        Some(Affinity { name, path, max_age, same_site, secure })
    }

    fn auth(&mut self) -> Option<AuthSetting> {
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
    fn secret_ref(&self, value: &str) -> Result<(String, String), String> {
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
    fn client_tls(&mut self) -> Result<Option<ClientTlsSetting>, String> {
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
    fn unavailable(&mut self, key: &str, message: String) -> Option<AuthSetting> {
        Some(AuthSetting::Unavailable(self.refused(key, message)))
    }

    /// Reports `key` as `message`, its requests refused (503), and says why for the log,
    /// naming the annotation without its prefix (renaming them changes nothing served).
    fn refused(&mut self, key: &str, message: String) -> String {
        self.invalid(key, format!("{message}; requests are answered 503 until it is fixed"));
        let name = key.rsplit('/').next().unwrap_or(key);
        format!("annotation {name}: {message}")
    }

    /// A chain depth (`*-verify-depth`), 1 to 16; 1 (nginx's default) when absent or
    /// invalid (reported).
    fn depth(&mut self, name: &str) -> u8 {
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
    fn external(&mut self) -> Option<AuthSetting> {
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
        }))
    }

    fn cors(&mut self) -> Option<wharf_model::Cors> {
        if self.bool("enable-cors") != Some(true) {
            return None;
        }
        let allow_origins = match self.get("cors-allow-origin") {
            None => vec!["*".to_owned()],
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

    fn canary(&mut self) -> Option<Canary> {
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
        let header_pattern = match self.get("canary-by-header-pattern") {
            Some((key, value)) if header_value.is_none() => {
                // ingress-nginx searches the value (unanchored) for the pattern.
                match wharf_model::Pattern::full(&format!(".*(?:{value}).*")) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        self.invalid(key, format!("{value:?}: {}; requests are not routed by this pattern", e.reason));
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
        Some(Canary { header, header_value, header_pattern, cookie, weight, weight_total })
    }

    /// A comma-separated list of networks; `None` when any entry is invalid (reported).
    fn networks(&mut self, key: &str, value: &str) -> Option<Vec<IpNet>> {
        let mut nets = Vec::new();
        for item in value.split(',').map(str::trim) {
            match IpNet::parse(item) {
                Ok(n) => nets.push(n),
                Err(e) => {
                    self.invalid(
                        key,
                        format!("{e}: every client is refused (403) on this Ingress's paths until it is fixed"),
                    );
                    return None;
                }
            }
        }
        Some(nets)
    }

    /// The allow list (`allowlist-source-range`, before its old name
    /// `whitelist-source-range`) and the deny list. An invalid list serves no one.
    fn clients(&mut self) -> Option<ClientFilter> {
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

    /// A redirect of every request to the URL in `name`, with the status in `name-code`
    /// (else `default`).
    fn fixed_redirect(&mut self, name: &str, default: u16) -> Option<FixedRedirect> {
        let (key, value) = self.get(name)?;
        let url = value.trim();
        if !is_redirect_url(url) {
            self.invalid(key, format!("{url:?} is not an absolute http:// or https:// URL; it is ignored"));
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
        Some(FixedRedirect { url: url.to_owned(), status })
    }

    /// A path template: visible ASCII, no query or fragment (the request's query is kept).
    fn rewrite_target(&mut self) -> Option<String> {
        self.text(
            "rewrite-target",
            |t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic() && b != b'?' && b != b'#'),
            "is not a path like /$2 (no spaces, query or fragment); the path is not rewritten",
        )
    }

    fn app_root(&mut self) -> Option<String> {
        self.text(
            "app-root",
            |p| p.starts_with('/') && p.len() > 1 && p.bytes().all(|b| b.is_ascii_graphic()),
            "is not an absolute path like /app; it is ignored",
        )
    }
}

/// A cookie name Wharf accepts: letters, digits, `-`, `_` and `.`.
fn is_cookie_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// `*`, or `scheme://host[:port]` with a host that may start with `*.`.
fn is_origin(o: &str) -> bool {
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

/// An `http://` or `https://` URL with nginx variables, for a check or a sign-in page: the
/// template, whether it is `https`, its host when fixed (lower-case) and its port.
fn parse_auth_url(raw: &str) -> Result<(wharf_model::Template, bool, Option<String>, u16), String> {
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

/// An absolute `http://` or `https://` URL with a host, of visible ASCII only (nothing a
/// header or a log line could be split on).
fn is_redirect_url(url: &str) -> bool {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    let Some(rest) = rest else { return false };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    !authority.is_empty() && !authority.starts_with(':') && url.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;
    use wharf_model::Pattern;

    fn src() -> ObjectRef {
        ObjectRef::new("Ingress", "default", "web")
    }

    fn parse_with(pairs: &[(&str, &str)], opts: &AnnotationOptions) -> (Settings, Vec<(&'static str, String)>) {
        let ann: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let mut diags = Vec::new();
        let s = parse(Some(&ann), &src(), opts, &mut diags);
        (s, diags.into_iter().map(|d| (d.reason, d.message)).collect())
    }

    fn parsed(pairs: &[(&str, &str)]) -> (Settings, Vec<(&'static str, String)>) {
        parse_with(pairs, &AnnotationOptions::default())
    }

    /// Every Ingress's settings are held while a translation runs: the settings few
    /// Ingresses use are boxed (10,000 Ingresses: 3 MB instead of 12).
    #[test]
    fn settings_without_extras_stay_small() {
        let size = std::mem::size_of::<Settings>();
        assert!(size <= 320, "Settings is {size} bytes (1,208 with the extras inline)");
    }
    #[test]
    fn acme_annotations_are_read_only_under_wharfs_prefix() {
        let (s, d) = parsed(&[("wharf.dev/acme", "true"), ("wharf.dev/acme-issuer", "le-2")]);
        assert_eq!((s.acme, s.acme_issuer.as_deref(), d.len()), (Some(true), Some("le-2"), 0), "{d:?}");
        let (s, d) =
            parsed(&[("nginx.ingress.kubernetes.io/acme", "true"), ("nginx.ingress.kubernetes.io/acme-issuer", "le")]);
        assert_eq!((s.acme, s.acme_issuer), (None, None));
        assert_eq!(
            d.iter().map(|(r, _)| *r).collect::<Vec<_>>(),
            ["UnsupportedAnnotation", "UnsupportedAnnotation"],
            "{d:?}"
        );
        for bad in ["", "LE", "le_2", "le.prod"] {
            let (s, d) = parsed(&[("wharf.dev/acme-issuer", bad)]);
            assert_eq!((s.acme_issuer, d.len()), (None, 1), "{bad:?}: {d:?}");
        }
        for good in ["le", "2", "-"] {
            assert_eq!(parsed(&[("wharf.dev/acme-issuer", good)]).0.acme_issuer.as_deref(), Some(good));
        }
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().filter_map(|n| IpNet::parse(n).ok()).collect()
    }

    #[test]
    fn without_annotations_the_defaults_hold() {
        let mut diags = Vec::new();
        let s = parse(None, &src(), &AnnotationOptions::default(), &mut diags);
        assert_eq!(s, Settings::default());
        assert!(s.ssl_redirect && !s.skip && !s.ssl_passthrough && diags.is_empty());
    }

    #[test]
    fn both_prefixes_are_read_and_the_wharf_name_wins() {
        for key in ["wharf.dev/ssl-redirect", "nginx.ingress.kubernetes.io/ssl-redirect"] {
            let (s, d) = parsed(&[(key, "false")]);
            assert!(!s.ssl_redirect, "{key}");
            assert!(d.is_empty(), "{d:?}");
        }
        let (s, _) =
            parsed(&[("wharf.dev/proxy-body-size", "1k"), ("nginx.ingress.kubernetes.io/proxy-body-size", "8m")]);
        assert_eq!(s.max_body_bytes, Some(1024));
    }

    #[test]
    fn booleans_and_sizes_take_valid_values_and_report_the_rest() {
        let (s, d) = parsed(&[
            ("nginx.ingress.kubernetes.io/ssl-passthrough", "true"),
            ("nginx.ingress.kubernetes.io/force-ssl-redirect", " true "),
            ("nginx.ingress.kubernetes.io/from-to-www-redirect", "true"),
            ("nginx.ingress.kubernetes.io/proxy-body-size", "0"),
        ]);
        assert!(s.ssl_passthrough && s.force_ssl_redirect && s.from_to_www && d.is_empty());
        assert_eq!(s.max_body_bytes, Some(0));
        let (s, d) = parsed(&[("wharf.dev/ssl-redirect", "no"), ("wharf.dev/proxy-body-size", "lots")]);
        assert!(s.ssl_redirect, "an invalid value is ignored: the default holds");
        assert_eq!(s.max_body_bytes, None);
        let reasons: Vec<_> = d.iter().map(|(r, m)| (*r, m.split(':').next().unwrap_or(""))).collect();
        assert_eq!(
            reasons,
            [
                ("InvalidAnnotation", "annotation wharf.dev/ssl-redirect"),
                ("InvalidAnnotation", "annotation wharf.dev/proxy-body-size")
            ]
        );
    }

    #[test]
    fn source_ranges_allow_deny_and_fail_closed() {
        let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/whitelist-source-range", "10.0.0.0/8, 192.168.0.1")]);
        assert_eq!(
            s.clients.map(|b| *b),
            Some(ClientFilter { allow: Some(nets(&["10.0.0.0/8", "192.168.0.1"])), deny: vec![] })
        );
        assert!(d.is_empty(), "{d:?}");
        // The new name wins over the old one.
        let (s, _) = parsed(&[
            ("nginx.ingress.kubernetes.io/whitelist-source-range", "10.0.0.0/8"),
            ("nginx.ingress.kubernetes.io/allowlist-source-range", "172.16.0.0/12"),
        ]);
        assert_eq!(s.clients.and_then(|c| c.allow), Some(nets(&["172.16.0.0/12"])));
        let (s, _) = parsed(&[("wharf.dev/denylist-source-range", "203.0.113.0/24,2001:db8::/32")]);
        assert_eq!(
            s.clients.map(|b| *b),
            Some(ClientFilter { allow: None, deny: nets(&["203.0.113.0/24", "2001:db8::/32"]) })
        );
        // Unparsable: no one is served, and the message says so.
        let nobody = Some(ClientFilter { allow: Some(vec![]), deny: vec![] });
        for (key, value) in [
            ("wharf.dev/allowlist-source-range", "10.0.0.0/8,10.0.0.300"),
            ("wharf.dev/allowlist-source-range", ""),
            ("wharf.dev/denylist-source-range", "not-an-ip"),
        ] {
            let (s, d) = parsed(&[(key, value), ("wharf.dev/whitelist-source-range", "10.0.0.0/8")]);
            if key.ends_with("allowlist-source-range") {
                assert_eq!(s.clients.map(|b| *b), nobody, "{key}={value:?}");
            } else {
                assert_eq!(s.clients.map(|b| *b), nobody, "{key}={value:?}: an invalid deny list serves no one");
            }
            assert_eq!(d.len(), 1, "{d:?}");
            assert_eq!(d[0].0, "InvalidAnnotation");
            assert!(d[0].1.contains(key) && d[0].1.contains("every client is refused (403)"), "{}", d[0].1);
        }
    }

    #[test]
    fn redirects_take_urls_codes_and_temporal_wins() {
        let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/permanent-redirect", "https://new.example/x?y=1")]);
        assert_eq!(
            s.redirect.map(|b| *b),
            Some(FixedRedirect { url: "https://new.example/x?y=1".into(), status: 301 })
        );
        assert!(d.is_empty());
        let (s, _) = parsed(&[
            ("nginx.ingress.kubernetes.io/permanent-redirect", "https://a.example"),
            ("nginx.ingress.kubernetes.io/permanent-redirect-code", "308"),
        ]);
        assert_eq!(s.redirect.map(|r| r.status), Some(308));
        let (s, _) = parsed(&[
            ("nginx.ingress.kubernetes.io/permanent-redirect", "https://a.example"),
            ("nginx.ingress.kubernetes.io/temporal-redirect", "http://b.example/"),
        ]);
        assert_eq!(s.redirect.map(|b| *b), Some(FixedRedirect { url: "http://b.example/".into(), status: 302 }));
        let (s, d) = parsed(&[
            ("wharf.dev/temporal-redirect", "https://b.example"),
            ("wharf.dev/temporal-redirect-code", "200"),
        ]);
        assert_eq!(s.redirect.map(|r| r.status), Some(302));
        assert_eq!(d.len(), 1);
        assert!(d[0].1.contains("temporal-redirect-code") && d[0].1.contains("302 is used"), "{}", d[0].1);
        for bad in [
            "ftp://a.example",
            "/relative",
            "https://",
            "https://:80/x",
            "https://a.example/x\r\nSet-Cookie: a",
            "https://a b",
        ] {
            let (s, d) = parsed(&[("wharf.dev/permanent-redirect", bad)]);
            assert_eq!(s.redirect, None, "{bad:?}");
            assert_eq!(d.len(), 1, "{bad:?}: {d:?}");
        }
    }

    #[test]
    fn rewrite_target_implies_regex_paths() {
        let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/rewrite-target", "/$2")]);
        assert_eq!((s.rewrite_target.as_deref(), s.use_regex, s.regex(), d.len()), (Some("/$2"), false, true, 0));
        let (s, _) = parsed(&[("nginx.ingress.kubernetes.io/use-regex", "true")]);
        assert!(s.regex() && s.rewrite_target.is_none());
        assert!(!Settings::default().regex());
        for bad in ["", "/a b", "/x?y=1", "/x#f"] {
            let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/rewrite-target", bad)]);
            assert_eq!((s.rewrite_target, d.len()), (None, 1), "{bad:?}");
        }
    }

    #[test]
    fn timeouts_are_whole_seconds_and_protocols_are_named() {
        let (s, d) = parsed(&[
            ("nginx.ingress.kubernetes.io/proxy-connect-timeout", "5"),
            ("nginx.ingress.kubernetes.io/proxy-read-timeout", " 3600 "),
            ("nginx.ingress.kubernetes.io/proxy-send-timeout", "90"),
            ("nginx.ingress.kubernetes.io/backend-protocol", "grpcs"),
        ]);
        assert_eq!((s.connect_timeout_ms, s.read_timeout_ms, d.len()), (Some(5_000), Some(3_600_000), 0));
        assert_eq!(s.send_timeout_ms, Some(90_000));
        assert_eq!(s.backend_protocol, BackendProtocol::Grpcs);
        assert!(s.backend_protocol.h2() && s.backend_protocol.tls());
        for (value, want) in
            [("HTTP", BackendProtocol::Http), ("HTTPS", BackendProtocol::Https), ("GRPC", BackendProtocol::Grpc)]
        {
            assert_eq!(parsed(&[("wharf.dev/backend-protocol", value)]).0.backend_protocol, want);
        }
        assert!(!BackendProtocol::Https.h2() && BackendProtocol::Https.tls());
        assert!(BackendProtocol::Grpc.h2() && !BackendProtocol::Grpc.tls());
        assert!(!BackendProtocol::Http.h2() && !BackendProtocol::Http.tls());
        for bad in ["0", "5s", "-1", "86401", ""] {
            let (s, d) = parsed(&[("wharf.dev/proxy-read-timeout", bad)]);
            assert_eq!((s.read_timeout_ms, d.len()), (None, 1), "{bad:?}");
        }
        let (s, d) = parsed(&[("wharf.dev/backend-protocol", "FCGI")]);
        assert_eq!((s.backend_protocol, d.len()), (BackendProtocol::Http, 1));
        assert!(d[0].1.contains("\"FCGI\" is not supported"), "{}", d[0].1);
    }

    #[test]
    fn canaries_take_header_cookie_and_weight_settings() {
        assert_eq!(parsed(&[("nginx.ingress.kubernetes.io/canary-weight", "10")]).0.canary, None, "not a canary");
        let (s, d) = parsed(&[
            ("nginx.ingress.kubernetes.io/canary", "true"),
            ("nginx.ingress.kubernetes.io/canary-by-header", "X-Canary"),
            ("nginx.ingress.kubernetes.io/canary-by-header-value", "yes"),
            ("nginx.ingress.kubernetes.io/canary-by-header-pattern", "ignored"),
            ("nginx.ingress.kubernetes.io/canary-by-cookie", "canary"),
            ("nginx.ingress.kubernetes.io/canary-weight", "250"),
            ("nginx.ingress.kubernetes.io/canary-weight-total", "200"),
        ]);
        assert!(d.is_empty(), "{d:?}");
        let c = s.canary.unwrap_or_default();
        assert_eq!(c.header.as_deref(), Some("x-canary"));
        assert_eq!(c.header_value.as_deref(), Some("yes"));
        assert!(c.header_pattern.is_none(), "a value wins over a pattern");
        assert_eq!((c.cookie.as_deref(), c.weight, c.weight_total), (Some("canary"), 200, 200), "the weight is capped");
        let (s, _) = parsed(&[
            ("nginx.ingress.kubernetes.io/canary", "true"),
            ("nginx.ingress.kubernetes.io/canary-by-header-pattern", "^v[12]$"),
        ]);
        let p = s.canary.and_then(|c| c.header_pattern).unwrap_or_else(|| panic!("no pattern"));
        assert!(p.is_match("v2") && !p.is_match("v3") && !p.is_match("xv1"));
        let unanchored = Pattern::full(".*(?:beta).*").ok();
        let (s, _) = parsed(&[
            ("nginx.ingress.kubernetes.io/canary", "true"),
            ("nginx.ingress.kubernetes.io/canary-by-header-pattern", "beta"),
        ]);
        assert_eq!(s.canary.and_then(|c| c.header_pattern), unanchored, "searched anywhere in the value");
        let (s, d) = parsed(&[
            ("nginx.ingress.kubernetes.io/canary", "true"),
            ("nginx.ingress.kubernetes.io/canary-by-header", "bad header"),
            ("nginx.ingress.kubernetes.io/canary-by-header-pattern", "(?<=x)"),
            ("nginx.ingress.kubernetes.io/canary-by-cookie", "a;b"),
            ("nginx.ingress.kubernetes.io/canary-weight", "ten"),
            ("nginx.ingress.kubernetes.io/canary-weight-total", "0"),
        ]);
        assert_eq!(s.canary.map(|b| *b), Some(Canary { weight_total: 100, ..Canary::default() }));
        assert_eq!(d.len(), 5, "{d:?}");
    }

    #[test]
    fn upstream_host_and_forwarded_prefix_are_checked() {
        let (s, d) = parsed(&[
            ("nginx.ingress.kubernetes.io/upstream-vhost", "svc.internal:8080"),
            ("nginx.ingress.kubernetes.io/x-forwarded-prefix", "/shop"),
        ]);
        assert_eq!(
            (s.upstream_vhost.as_deref(), s.forwarded_prefix.as_deref(), d.len()),
            (Some("svc.internal:8080"), Some("/shop"), 0)
        );
        let spaced = parsed(&[("wharf.dev/x-forwarded-prefix", "/my shop")]).0;
        assert_eq!(spaced.forwarded_prefix.as_deref(), Some("/my shop"), "spaces are header-safe");
        for (key, bad) in [
            ("wharf.dev/upstream-vhost", "a b"),
            ("wharf.dev/upstream-vhost", "$host"),
            ("wharf.dev/x-forwarded-prefix", "/a\r\nX-Evil: 1"),
            ("wharf.dev/x-forwarded-prefix", "/a\r\nX"),
            ("wharf.dev/x-forwarded-prefix", ""),
        ] {
            let (s, d) = parsed(&[(key, bad)]);
            assert_eq!((s.upstream_vhost, s.forwarded_prefix, d.len()), (None, None, 1), "{key}={bad:?}");
        }
    }

    #[test]
    fn cors_takes_ingress_nginx_defaults_and_checks_each_value() {
        assert_eq!(parsed(&[("nginx.ingress.kubernetes.io/cors-allow-origin", "https://a.example")]).0.cors, None);
        let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/enable-cors", "true")]);
        assert!(d.is_empty());
        assert_eq!(
            s.cors.map(|b| *b),
            Some(wharf_model::Cors {
                allow_origins: vec!["*".into()],
                allow_methods: CORS_METHODS.into(),
                allow_headers: CORS_HEADERS.into(),
                expose_headers: String::new(),
                allow_credentials: true,
                max_age: 1_728_000,
            })
        );
        let (s, d) = parsed(&[
            ("nginx.ingress.kubernetes.io/enable-cors", "true"),
            (
                "nginx.ingress.kubernetes.io/cors-allow-origin",
                "https://a.example, https://*.b.example:8443 ,bad origin, *.c.example",
            ),
            ("nginx.ingress.kubernetes.io/cors-allow-methods", "GET, POST"),
            ("nginx.ingress.kubernetes.io/cors-allow-headers", "X-Token,Content-Type"),
            ("nginx.ingress.kubernetes.io/cors-expose-headers", "*, X-Total"),
            ("nginx.ingress.kubernetes.io/cors-allow-credentials", "false"),
            ("nginx.ingress.kubernetes.io/cors-max-age", "600"),
        ]);
        let c = s.cors.unwrap_or_else(|| panic!("no CORS"));
        assert_eq!(c.allow_origins, ["https://a.example", "https://*.b.example:8443"]);
        for bad in [
            "://a.example",
            "ht tp://a.example",
            "http_s://a.example",
            "https://",
            "https://:8443",
            "https://a_b.example",
            "https://*.",
        ] {
            assert!(!is_origin(bad), "{bad}");
        }
        for good in ["*", "http://localhost:3000", "https://[::1]:8443", "https://*.a.example", "app+v1://x.example"] {
            assert!(is_origin(good), "{good}");
        }
        assert_eq!(d.len(), 2, "the two bad origins are reported: {d:?}");
        assert_eq!((c.allow_methods.as_str(), c.allow_headers.as_str()), ("GET, POST", "X-Token,Content-Type"));
        assert_eq!((c.expose_headers.as_str(), c.allow_credentials, c.max_age), ("*, X-Total", false, 600));
        let (s, d) = parsed(&[
            ("wharf.dev/enable-cors", "true"),
            ("wharf.dev/cors-allow-methods", "GET;rm"),
            ("wharf.dev/cors-allow-headers", "*"),
            ("wharf.dev/cors-max-age", "a day"),
        ]);
        let c = s.cors.unwrap_or_else(|| panic!("no CORS"));
        assert_eq!(
            (c.allow_methods.as_str(), c.allow_headers.as_str(), c.max_age),
            (CORS_METHODS, CORS_HEADERS, CORS_MAX_AGE)
        );
        assert_eq!(d.len(), 3, "{d:?}");
    }

    #[test]
    fn limits_take_ingress_nginx_bursts_and_exempt_networks() {
        let (s, d) = parsed(&[
            ("nginx.ingress.kubernetes.io/limit-rps", "5"),
            ("nginx.ingress.kubernetes.io/limit-rpm", "100"),
            ("nginx.ingress.kubernetes.io/limit-connections", "3"),
            ("nginx.ingress.kubernetes.io/limit-whitelist", "10.0.0.0/8, 192.168.1.1"),
        ]);
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(
            s.rate_limit.map(|b| *b),
            Some(wharf_model::RateLimit {
                zone: "default/web".into(),
                per_second: Some(5),
                per_minute: Some(100),
                burst: 25,
                burst_per_minute: 500,
                connections: Some(3),
                exempt: vec![
                    IpNet::parse("10.0.0.0/8").unwrap_or_else(|e| panic!("{e}")),
                    IpNet::parse("192.168.1.1").unwrap_or_else(|e| panic!("{e}")),
                ],
            })
        );
        let (s, _) = parsed(&[
            ("nginx.ingress.kubernetes.io/limit-rps", "2"),
            ("nginx.ingress.kubernetes.io/limit-burst-multiplier", "1"),
        ]);
        assert_eq!(s.rate_limit.map(|l| (l.burst, l.burst_per_minute, l.connections)), Some((2, 0, None)));
        let (s, d) = parsed(&[
            ("nginx.ingress.kubernetes.io/limit-rps", "0"),
            ("nginx.ingress.kubernetes.io/limit-connections", "lots"),
        ]);
        assert_eq!((s.rate_limit, d.len()), (None, 2));
        assert_eq!(parsed(&[("nginx.ingress.kubernetes.io/limit-burst-multiplier", "3")]).0.rate_limit, None);
    }

    #[test]
    fn affinity_takes_cookie_settings_with_ingress_nginx_defaults() {
        let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/affinity", "cookie")]);
        assert_eq!(
            (s.affinity.map(|b| *b), d.len()),
            (
                Some(Affinity {
                    name: "INGRESSCOOKIE".into(),
                    path: None,
                    max_age: None,
                    same_site: None,
                    secure: false
                }),
                0
            )
        );
        let (s, d) = parsed(&[
            ("nginx.ingress.kubernetes.io/affinity", "cookie"),
            ("nginx.ingress.kubernetes.io/session-cookie-name", "route"),
            ("nginx.ingress.kubernetes.io/session-cookie-path", "/shop"),
            ("nginx.ingress.kubernetes.io/session-cookie-expires", "100"),
            ("nginx.ingress.kubernetes.io/session-cookie-max-age", "172800"),
            ("nginx.ingress.kubernetes.io/session-cookie-samesite", "strict"),
            ("nginx.ingress.kubernetes.io/session-cookie-secure", "true"),
        ]);
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(
            s.affinity.map(|b| *b),
            Some(Affinity {
                name: "route".into(),
                path: Some("/shop".into()),
                max_age: Some(172_800),
                same_site: Some("Strict".into()),
                secure: true
            })
        );
        let (s, d) = parsed(&[
            ("nginx.ingress.kubernetes.io/affinity", "cookie"),
            ("nginx.ingress.kubernetes.io/session-cookie-name", "a;b"),
            ("nginx.ingress.kubernetes.io/session-cookie-path", "/a; Domain=evil"),
            ("nginx.ingress.kubernetes.io/session-cookie-max-age", "forever"),
            ("nginx.ingress.kubernetes.io/session-cookie-samesite", "sometimes"),
        ]);
        assert_eq!(
            s.affinity.map(|b| *b),
            Some(Affinity { name: "INGRESSCOOKIE".into(), path: None, max_age: None, same_site: None, secure: false })
        );
        assert_eq!(d.len(), 4, "{d:?}");
        for (value, want) in [("None", "None"), ("lax", "Lax")] {
            let (s, _) = parsed(&[
                ("nginx.ingress.kubernetes.io/affinity", "cookie"),
                ("nginx.ingress.kubernetes.io/session-cookie-samesite", value),
            ]);
            assert_eq!(s.affinity.and_then(|a| a.same_site).as_deref(), Some(want), "{value}");
        }
        let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/affinity", "ip")]);
        assert_eq!((s.affinity, d.len()), (None, 1));
    }

    #[test]
    fn app_root_is_an_absolute_path() {
        let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/app-root", "/app1")]);
        assert_eq!((s.app_root.as_deref(), d.len()), (Some("/app1"), 0));
        for bad in ["app1", "/", "", "/a b", "https://x/app"] {
            let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/app-root", bad)]);
            assert_eq!((s.app_root, d.len()), (None, 1), "{bad:?}");
        }
    }

    #[test]
    fn snippets_skip_the_ingress_or_are_ignored_as_configured() {
        let snippet = [("nginx.ingress.kubernetes.io/configuration-snippet", "more_set_headers \"X: y\";")];
        let (s, d) = parsed(&snippet);
        assert!(s.skip);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].0, "SnippetRefused");
        assert!(d[0].1.contains("configuration-snippet") && d[0].1.contains("not served"), "{}", d[0].1);
        let ignore = AnnotationOptions { snippets: SnippetPolicy::Ignore, ..AnnotationOptions::default() };
        let (s, d) = parse_with(&snippet, &ignore);
        assert!(!s.skip);
        assert!(d[0].0 == "SnippetRefused" && d[0].1.contains("served without it"), "{d:?}");
        // Refused under either prefix, and even with the nginx names off.
        let off = AnnotationOptions { nginx_names: false, ..AnnotationOptions::default() };
        assert!(parse_with(&snippet, &off).0.skip);
        assert!(parsed(&[("wharf.dev/server-snippet", "x")]).0.skip);
    }

    #[test]
    fn every_other_annotation_under_our_prefixes_is_reported_by_name() {
        let (s, d) = parsed(&[
            ("nginx.ingress.kubernetes.io/proxy-buffering", "on"),
            ("wharf.dev/ssl-redirct", "false"),
            ("kubernetes.io/ingress.class", "wharf"),
            ("example.com/owner", "team-a"),
            ("nginx.ingress.kubernetes.io/ssl-redirect", "false"),
        ]);
        assert!(!s.ssl_redirect && !s.skip);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d.iter().all(|(r, _)| *r == "UnsupportedAnnotation"));
        assert!(d[0].1.contains("nginx.ingress.kubernetes.io/proxy-buffering") && d[0].1.contains("served without it"));
        assert!(d[1].1.contains("wharf.dev/ssl-redirct") && d[1].1.contains("misspelling"));
    }

    #[test]
    fn with_nginx_names_off_only_wharf_names_count_and_the_others_are_reported() {
        let off = AnnotationOptions { nginx_names: false, ..AnnotationOptions::default() };
        let (s, d) = parse_with(
            &[("nginx.ingress.kubernetes.io/ssl-redirect", "false"), ("wharf.dev/proxy-body-size", "1k")],
            &off,
        );
        assert!(s.ssl_redirect, "the nginx name is not read");
        assert_eq!(s.max_body_bytes, Some(1024));
        assert_eq!(d.len(), 1);
        assert!(
            d[0].1.contains("--nginx-annotations=false") && d[0].1.contains("use wharf.dev/ssl-redirect"),
            "{}",
            d[0].1
        );
    }

    fn auth_of(pairs: &[(&str, &str)]) -> (Option<AuthSetting>, Vec<(&'static str, String)>) {
        let (s, d) = parsed(pairs);
        (s.auth.map(|b| *b), d)
    }

    #[test]
    fn basic_auth_names_its_secret_realm_and_form() {
        let basic = |secret: (&str, &str), realm: &str, map: bool| {
            Some(AuthSetting::Basic { realm: realm.into(), secret: (secret.0.into(), secret.1.into()), map })
        };
        let (a, d) = auth_of(&[
            ("nginx.ingress.kubernetes.io/auth-type", "basic"),
            ("nginx.ingress.kubernetes.io/auth-secret", "users"),
        ]);
        assert_eq!((a, d.len()), (basic(("default", "users"), "", false), 0));
        let (a, d) = auth_of(&[
            ("nginx.ingress.kubernetes.io/auth-type", " basic "),
            ("nginx.ingress.kubernetes.io/auth-secret", "default/users"),
            ("nginx.ingress.kubernetes.io/auth-secret-type", "auth-map"),
            ("nginx.ingress.kubernetes.io/auth-realm", "Staff \"only\""),
        ]);
        assert_eq!((a, d.len()), (basic(("default", "users"), "Staff \"only\"", true), 0));
        let (a, _) = auth_of(&[
            ("wharf.dev/auth-type", "basic"),
            ("wharf.dev/auth-secret", "users"),
            ("wharf.dev/auth-secret-type", "auth-file"),
        ]);
        assert_eq!(a, basic(("default", "users"), "", false));
        // A realm that is no header value is reported and left empty.
        let (a, d) = auth_of(&[
            ("wharf.dev/auth-type", "basic"),
            ("wharf.dev/auth-secret", "users"),
            ("wharf.dev/auth-realm", "a\nb"),
        ]);
        assert_eq!((a, d.len()), (basic(("default", "users"), "", false), 1));
    }

    #[test]
    fn authentication_that_cannot_be_set_up_refuses_rather_than_opens() {
        let unavailable = |pairs: &[(&str, &str)], key: &str, words: &str| {
            let (a, d) = auth_of(pairs);
            let name = key.rsplit('/').next().unwrap_or(key);
            let why = format!("annotation {name}: ");
            assert!(matches!(&a, Some(AuthSetting::Unavailable(w)) if w.starts_with(&why)), "{pairs:?}: {a:?}");
            let said = d.iter().any(|(r, m)| {
                *r == "InvalidAnnotation"
                    && m.contains(key)
                    && m.contains(words)
                    && m.ends_with("requests are answered 503 until it is fixed")
            });
            assert!(said, "{pairs:?}: {d:?}");
        };
        let t = "wharf.dev/auth-type";
        let sec = "wharf.dev/auth-secret";
        unavailable(&[(t, "digest"), (sec, "users")], t, "digest authentication is not supported");
        unavailable(&[(t, "ldap"), (sec, "users")], t, "\"ldap\" is not basic");
        unavailable(&[(t, "basic")], t, "needs auth-secret");
        unavailable(&[(t, "basic"), (sec, "other/users")], sec, "another namespace");
        for bad in ["Users", "a/b/c", "/users", "default/", "a.b/users", ""] {
            unavailable(&[(t, "basic"), (sec, bad)], sec, "is not a Secret's NAME or NAMESPACE/NAME");
        }
        unavailable(
            &[(t, "basic"), (sec, "users"), ("wharf.dev/auth-secret-type", "htdigest")],
            "wharf.dev/auth-secret-type",
            "is not auth-file or auth-map",
        );
        // A web application firewall Wharf does not have: refused, whatever else is set, and
        // the Event says so; "false" asks for nothing.
        let (key, value) = ("nginx.ingress.kubernetes.io/enable-modsecurity", "true");
        let (a, d) = auth_of(&[(key, value), (t, "basic"), (sec, "users")]);
        let name = key.rsplit('/').next().unwrap_or_default();
        assert_eq!(a, Some(AuthSetting::Unavailable(format!("annotation {name} is not supported"))));
        let msg = d.iter().find(|(_, m)| m.contains(key)).map(|(r, m)| (*r, m.clone()));
        assert!(matches!(&msg, Some(("UnsupportedAnnotation", m)) if m.contains("answered 503")), "{key}: {d:?}");
        let (a, d) = auth_of(&[("nginx.ingress.kubernetes.io/enable-owasp-core-rules", "false")]);
        assert_eq!(a, None);
        assert!(d.iter().all(|(_, m)| !m.contains("answered 503")), "{d:?}");
        // With the nginx names off, an nginx name is not read, so nothing is refused.
        let off = AnnotationOptions { nginx_names: false, ..AnnotationOptions::default() };
        let (s, _) = parse_with(&[(key, value)], &off);
        assert_eq!(s.auth, None);
        // Basic and external authentication together are not supported.
        unavailable(&[(t, "basic"), (sec, "users"), ("wharf.dev/auth-url", "http://a.b.svc/")], t, "together");
    }

    #[test]
    fn client_certificates_are_read_and_what_cannot_be_checked_refuses() {
        let secret = "wharf.dev/auth-tls-secret";
        let tls = |pairs: &[(&str, &str)]| {
            let (s, d) = parsed(pairs);
            (
                s.client_tls.map(|b| *b),
                s.auth.map(|b| *b),
                d.into_iter().map(|(r, m)| format!("{r}: {m}")).collect::<Vec<_>>(),
            )
        };
        let setting = |verify, pass, page: Option<&str>| ClientTlsSetting {
            secret: ("default".into(), "ca".into()),
            check: wharf_model::ClientCertCheck {
                verify,
                pass_certificate: pass,
                error_page: page.map(str::to_owned),
                match_subject: None,
            },
            verify_depth: 1,
        };
        use wharf_model::VerifyClient::{On, Optional};
        assert_eq!(tls(&[(secret, "ca")]), (Some(setting(On, false, None)), None, vec![]));
        let all = [
            (secret, "default/ca"),
            ("wharf.dev/auth-tls-verify-client", "optional"),
            ("wharf.dev/auth-tls-pass-certificate-to-upstream", "true"),
            ("wharf.dev/auth-tls-error-page", "https://sso.example/cert"),
        ];
        assert_eq!(tls(&all), (Some(setting(Optional, true, Some("https://sso.example/cert"))), None, vec![]));
        // Off: nothing is asked for.
        assert_eq!(tls(&[(secret, "ca"), ("wharf.dev/auth-tls-verify-client", "off")]), (None, None, vec![]));
        // What cannot be checked refuses every request, and says why.
        for (pairs, why) in [
            (vec![(secret, "other/ca")], "auth-tls-secret: Secret other/ca is in another namespace"),
            (vec![(secret, "a/b/c")], "auth-tls-secret: \"a/b/c\" is not a Secret's NAME"),
            (
                vec![(secret, "ca"), ("wharf.dev/auth-tls-verify-client", "optional_no_ca")],
                "auth-tls-verify-client: optional_no_ca",
            ),
            (
                vec![(secret, "ca"), ("wharf.dev/auth-tls-verify-client", "yes")],
                "auth-tls-verify-client: \"yes\" is not on",
            ),
        ] {
            let (c, auth, d) = tls(&pairs);
            assert_eq!(c, None, "{pairs:?}");
            assert!(
                matches!(&auth, Some(AuthSetting::Unavailable(w)) if w.starts_with(&format!("annotation {why}"))),
                "{pairs:?}: {auth:?}"
            );
            assert!(
                d.len() == 1
                    && d[0].starts_with("InvalidAnnotation")
                    && d[0].ends_with("answered 503 until it is fixed"),
                "{d:?}"
            );
        }
        // The subject, searched anywhere; the depth.
        let (c, auth, d) = tls(&[
            (secret, "ca"),
            ("nginx.ingress.kubernetes.io/auth-tls-match-cn", " CN=(ops|admin) "),
            ("nginx.ingress.kubernetes.io/auth-tls-verify-depth", "2"),
        ]);
        let c = c.unwrap_or_else(|| panic!("no client certificates: {auth:?} {d:?}"));
        let pattern = c.check.match_subject.as_ref().map(|p| p.as_str());
        assert_eq!((pattern, c.verify_depth, d.len()), (Some(".*(?:CN=(ops|admin)).*"), 2, 0));
        for bad in ["0", "17", "two", ""] {
            let (c, _, d) = tls(&[(secret, "ca"), ("wharf.dev/auth-tls-verify-depth", bad)]);
            assert_eq!(c.map(|c| c.verify_depth), Some(1), "{bad:?}");
            assert!(d.len() == 1 && d[0].contains("the depth is 1"), "{bad:?}: {d:?}");
        }
        for (bad, why) in [("CN=(ops", "auth-tls-match-cn: \"CN=(ops\""), (" ", "auth-tls-match-cn: is empty")] {
            let (c, auth, _) = tls(&[(secret, "ca"), ("wharf.dev/auth-tls-match-cn", bad)]);
            assert_eq!(c, None, "{bad:?}");
            assert!(
                matches!(&auth, Some(AuthSetting::Unavailable(w)) if w.starts_with(&format!("annotation {why}"))),
                "{bad:?}: {auth:?}"
            );
        }
        // A bad error page is dropped (400 instead), and settings without the Secret do nothing.
        let (c, _, d) = tls(&[(secret, "ca"), ("wharf.dev/auth-tls-error-page", "javascript:x")]);
        assert_eq!((c, d.len()), (Some(setting(On, false, None)), 1));
        let (c, auth, d) = tls(&[
            ("wharf.dev/auth-tls-verify-client", "on"),
            ("wharf.dev/auth-tls-pass-certificate-to-upstream", "true"),
        ]);
        assert_eq!((c, auth, d.len()), (None, None, 2));
    }

    fn external(pairs: &[(&str, &str)]) -> ExternalSetting {
        match auth_of(pairs) {
            (Some(AuthSetting::External(e)), d) if d.is_empty() => e,
            other => panic!("{pairs:?}: {other:?}"),
        }
    }

    #[test]
    fn error_pages_need_a_default_backend_and_take_statuses_from_400_to_599() {
        let (s, d) = parsed(&[
            ("nginx.ingress.kubernetes.io/default-backend", " errors "),
            ("nginx.ingress.kubernetes.io/custom-http-errors", "404, 503,503,,302,abc,600,500"),
        ]);
        assert_eq!((s.default_backend.as_deref(), s.custom_http_errors), (Some("errors"), vec![404, 503, 500]));
        let bad: Vec<&str> = d.iter().map(|(_, m)| m.as_str()).collect();
        assert_eq!(bad.len(), 3, "{bad:?}");
        assert!(bad.iter().all(|m| m.contains("is not a status from 400 to 599")), "{bad:?}");
        // Without a default backend, the errors are the backend's.
        let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/custom-http-errors", "404")]);
        assert!(s.custom_http_errors.is_empty());
        assert!(d.len() == 1 && d[0].1.contains("has no effect without default-backend"), "{d:?}");
        for bad in ["other/errors", "Errors", "errors.svc", ""] {
            let (s, d) = parsed(&[("wharf.dev/default-backend", bad)]);
            assert_eq!((s.default_backend, d.len()), (None, 1), "{bad:?}");
        }
    }

    #[test]
    fn backend_certificates_are_checked_only_when_asked_and_what_cannot_be_checked_refuses() {
        let https = ("nginx.ingress.kubernetes.io/backend-protocol", "HTTPS");
        let verify = ("nginx.ingress.kubernetes.io/proxy-ssl-verify", "on");
        let (s, d) = parsed(&[https, verify]);
        let want = ProxySslSetting { secret: None, name: None, server_name: false, verify_depth: 1 };
        assert_eq!((s.proxy_ssl.map(|b| *b), d.len()), (Some(want), 0));
        let (s, d) = parsed(&[
            https,
            verify,
            ("nginx.ingress.kubernetes.io/proxy-ssl-secret", "default/backend-ca"),
            ("nginx.ingress.kubernetes.io/proxy-ssl-name", " API.internal "),
            ("nginx.ingress.kubernetes.io/proxy-ssl-server-name", "on"),
            ("nginx.ingress.kubernetes.io/proxy-ssl-verify-depth", "3"),
        ]);
        let want = ProxySslSetting {
            secret: Some(("default".into(), "backend-ca".into())),
            name: Some("api.internal".into()),
            server_name: true,
            verify_depth: 3,
        };
        assert_eq!((s.proxy_ssl.map(|b| *b), d.len()), (Some(want), 0));
        // Not asked, or not HTTPS: nothing is checked, and what does nothing is said.
        let secret = ("nginx.ingress.kubernetes.io/proxy-ssl-secret", "backend-ca");
        let (s, d) = parsed(&[https, secret]);
        assert!(s.proxy_ssl.is_none() && d.len() == 1 && d[0].1.contains("without proxy-ssl-verify: on"), "{d:?}");
        let (s, d) = parsed(&[verify, secret]);
        assert!(s.proxy_ssl.is_none() && d.len() == 2, "{d:?}");
        assert!(d.iter().all(|(_, m)| m.contains("unless backend-protocol is HTTPS or GRPCS")), "{d:?}");
        // Asked and impossible: every request is refused.
        for (pair, why) in [
            (("nginx.ingress.kubernetes.io/proxy-ssl-verify", "yes"), "proxy-ssl-verify: \"yes\" is not on or off"),
            (("nginx.ingress.kubernetes.io/proxy-ssl-secret", "other/ca"), "proxy-ssl-secret: Secret other/ca"),
            (("nginx.ingress.kubernetes.io/proxy-ssl-name", "not a name"), "proxy-ssl-name: \"not a name\""),
        ] {
            let (s, _) = parsed(&[https, verify, pair]);
            let pair_verify = pair.0.ends_with("proxy-ssl-verify");
            let (s, _) = if pair_verify { parsed(&[https, pair]) } else { (s, Vec::new()) };
            assert!(
                matches!(s.auth.as_deref(), Some(AuthSetting::Unavailable(w)) if w.starts_with(&format!("annotation {why}"))),
                "{pair:?}: {:?}",
                s.auth
            );
        }
    }

    #[test]
    fn external_auth_reads_its_url_and_settings_with_ingress_nginx_defaults() {
        let e = external(&[(
            "nginx.ingress.kubernetes.io/auth-url",
            " http://oauth2-proxy.sso.svc.cluster.local/oauth2/auth ",
        )]);
        assert_eq!(e.url.as_str(), "http://oauth2-proxy.sso.svc.cluster.local/oauth2/auth");
        assert_eq!((e.tls, e.host.as_deref(), e.port), (false, Some("oauth2-proxy.sso.svc.cluster.local"), 80));
        assert_eq!((e.method, e.signin, e.signin_redirect_param.as_str()), (None, None, "rd"));
        assert!(e.response_headers.is_empty() && e.request_redirect.is_none() && !e.always_set_cookie);
        let e = external(&[
            ("nginx.ingress.kubernetes.io/auth-url", "https://$host/oauth2/auth"),
            ("nginx.ingress.kubernetes.io/auth-signin", "https://$host/oauth2/start?rd=$escaped_request_uri"),
            ("nginx.ingress.kubernetes.io/auth-signin-redirect-param", "orig_2-b"),
            ("nginx.ingress.kubernetes.io/auth-method", "POST"),
            ("nginx.ingress.kubernetes.io/auth-response-headers", "X-Auth-Request-User, X-Auth-Request-Email,"),
            ("nginx.ingress.kubernetes.io/auth-request-redirect", "https://app.example/"),
            ("nginx.ingress.kubernetes.io/auth-always-set-cookie", "true"),
        ]);
        assert_eq!((e.tls, e.host, e.port), (true, None, 443));
        assert_eq!(
            e.signin.map(|t| t.as_str().to_owned()).as_deref(),
            Some("https://$host/oauth2/start?rd=$escaped_request_uri")
        );
        assert_eq!((e.method.as_deref(), e.signin_redirect_param.as_str()), (Some("POST"), "orig_2-b"));
        assert_eq!(e.response_headers, ["x-auth-request-user", "x-auth-request-email"]);
        assert_eq!((e.request_redirect.as_deref(), e.always_set_cookie), (Some("https://app.example/"), true));
        for (url, host, port) in [
            ("http://Auth.Example:8080/x", Some("auth.example"), 8080),
            ("http://10.0.0.1", Some("10.0.0.1"), 80),
            ("https://[fd00::1]:8443/check?x=1", Some("[fd00::1]"), 8443),
            ("http://${host}:81/", None, 81),
        ] {
            let e = external(&[("wharf.dev/auth-url", url)]);
            assert_eq!((e.host.as_deref(), e.port), (host, port), "{url}");
        }
    }

    #[test]
    fn an_external_auth_that_does_not_parse_refuses_every_request() {
        let url = "wharf.dev/auth-url";
        for (pairs, key, words) in [
            (vec![(url, "ftp://auth/")], url, "is not an http:// or https:// URL"),
            (vec![(url, "http://auth check/")], url, "characters a URL cannot have"),
            (vec![(url, "http:///check")], url, "has no host"),
            (vec![(url, "http://a:0/")], url, "has no valid port"),
            (vec![(url, "http://a:x/")], url, "has no valid port"),
            (vec![(url, "http://[fd00::1/")], url, "unclosed ["),
            (vec![(url, "http://$remote_addr/")], url, "$remote_addr is not a variable"),
            (
                vec![(url, "http://a/"), ("wharf.dev/auth-method", "FETCH")],
                "wharf.dev/auth-method",
                "not an HTTP method",
            ),
            (vec![(url, "http://a/"), ("wharf.dev/auth-signin", "/start")], "wharf.dev/auth-signin", "not an http://"),
            (
                vec![(url, "http://a/"), ("wharf.dev/auth-signin-redirect-param", "r d")],
                "wharf.dev/auth-signin-redirect-param",
                "not a query parameter name",
            ),
            (
                vec![(url, "http://a/"), ("wharf.dev/auth-response-headers", "X-User, X User")],
                "wharf.dev/auth-response-headers",
                "\"X User\" is not a header name",
            ),
        ] {
            let (a, d) = auth_of(&pairs);
            let name = key.rsplit('/').next().unwrap_or(key);
            assert!(
                matches!(&a, Some(AuthSetting::Unavailable(w)) if w.starts_with(&format!("annotation {name}: "))),
                "{pairs:?}: {a:?}"
            );
            assert!(d.iter().any(|(_, m)| m.contains(key) && m.contains(words)), "{pairs:?}: {d:?}");
        }
        // An invalid auth-request-redirect is only reported: the request's URI is sent.
        let (a, d) = auth_of(&[(url, "http://a/"), ("wharf.dev/auth-request-redirect", "a b")]);
        assert!(matches!(a, Some(AuthSetting::External(e)) if e.request_redirect.is_none()));
        assert_eq!(d.len(), 1);
    }

    #[test]
    fn a_secret_without_a_type_does_nothing_as_in_ingress_nginx_and_says_so() {
        let (a, d) = auth_of(&[("nginx.ingress.kubernetes.io/auth-secret", "users")]);
        assert_eq!(a, None);
        assert_eq!(d.len(), 1);
        assert!(d[0].1.contains("has no effect without auth-type: basic"), "{d:?}");
        assert_eq!(auth_of(&[("nginx.ingress.kubernetes.io/auth-realm", "x")]), (None, vec![]));
    }

    #[test]
    fn every_implemented_name_is_read() {
        // An annotation named in IMPLEMENTED but not read would be silently ignored: each
        // one, set to a valid value, must change the settings.
        let value = |name: &str| match name {
            "proxy-body-size" => "1k",
            "ssl-redirect" => "false",
            n if n.ends_with("-source-range") => "10.0.0.0/8",
            n if n.ends_with("-code") => "308",
            "app-root" => "/app",
            "rewrite-target" => "/$1",
            "proxy-connect-timeout" | "proxy-read-timeout" | "proxy-send-timeout" => "30",
            "backend-protocol" => "GRPC",
            "upstream-vhost" => "internal.example",
            "enable-cors" => "true",
            "cors-allow-origin" => "https://a.example",
            "cors-allow-credentials" => "false",
            "cors-max-age" => "60",
            "limit-rps" | "limit-rpm" | "limit-connections" | "limit-burst-multiplier" => "7",
            "limit-allowlist" | "limit-whitelist" => "10.0.0.0/8",
            "affinity" => "cookie",
            "session-cookie-path" => "/app",
            "session-cookie-max-age" | "session-cookie-expires" => "60",
            "session-cookie-samesite" => "Lax",
            "session-cookie-name" => "route",
            n if n.starts_with("cors-") => "X-Custom",
            "x-forwarded-prefix" => "/app",
            "auth-type" => "basic",
            "auth-secret" => "users",
            "auth-secret-type" => "auth-map",
            "auth-realm" => "Staff only",
            "auth-url" => "http://auth.sso.svc/check",
            "auth-method" => "POST",
            "auth-signin" => "https://sso.example/start",
            "auth-signin-redirect-param" => "orig",
            "auth-response-headers" => "X-User",
            "auth-request-redirect" => "/x",
            "auth-tls-secret" => "ca",
            "auth-tls-verify-client" => "optional",
            "auth-tls-error-page" => "https://sso.example/certificate",
            "auth-tls-match-cn" => "CN=ops",
            "default-backend" => "errors",
            "proxy-ssl-verify" | "proxy-ssl-server-name" => "on",
            "proxy-ssl-secret" => "ca",
            "proxy-ssl-name" => "svc.example",
            "proxy-ssl-verify-depth" => "2",
            "custom-http-errors" => "404,503",
            "auth-tls-verify-depth" => "3",
            "canary" => "true",
            n if n.starts_with("canary-by-") => "x-canary",
            n if n.starts_with("canary-weight") => "30",
            n if n.ends_with("redirect") && n != "force-ssl-redirect" && n != "from-to-www-redirect" => {
                "https://x.example"
            }
            _ => "true",
        };
        for name in IMPLEMENTED {
            let mut pairs = vec![(format!("wharf.dev/{name}"), value(name).to_owned())];
            // What the name modifies, when it modifies another.
            if let Some(base) = name.strip_suffix("-code") {
                pairs.push((format!("wharf.dev/{base}"), "https://x.example".to_owned()));
            } else if name.starts_with("canary-") {
                pairs.push(("wharf.dev/canary".to_owned(), "true".to_owned()));
            } else if name.starts_with("cors-") {
                pairs.push(("wharf.dev/enable-cors".to_owned(), "true".to_owned()));
            } else if matches!(name, "limit-burst-multiplier" | "limit-allowlist" | "limit-whitelist") {
                pairs.push(("wharf.dev/limit-rps".to_owned(), "3".to_owned()));
            } else if name.starts_with("proxy-ssl-") {
                pairs.push(("wharf.dev/backend-protocol".to_owned(), "HTTPS".to_owned()));
                if name != "proxy-ssl-verify" {
                    pairs.push(("wharf.dev/proxy-ssl-verify".to_owned(), "on".to_owned()));
                }
            } else if name == "custom-http-errors" {
                pairs.push(("wharf.dev/default-backend".to_owned(), "errors".to_owned()));
            } else if name.starts_with("session-cookie-") {
                pairs.push(("wharf.dev/affinity".to_owned(), "cookie".to_owned()));
            } else if name.starts_with("auth-tls-") {
                if name != "auth-tls-secret" {
                    pairs.push(("wharf.dev/auth-tls-secret".to_owned(), "ca".to_owned()));
                }
            } else if name.starts_with("auth-")
                && !matches!(name, "auth-type" | "auth-secret" | "auth-secret-type" | "auth-realm")
            {
                if name != "auth-url" {
                    pairs.push(("wharf.dev/auth-url".to_owned(), "http://auth.sso.svc/check".to_owned()));
                }
            } else if name.starts_with("auth-") {
                for (other, v) in [("auth-type", "basic"), ("auth-secret", "users")] {
                    if name != other {
                        pairs.push((format!("wharf.dev/{other}"), v.to_owned()));
                    }
                }
            }
            let borrowed: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let (s, d) = parsed(&borrowed);
            assert!(d.is_empty(), "{name}: {d:?}");
            let baseline = parsed(&borrowed[1..]).0;
            assert_ne!(s, baseline, "{name} is listed as implemented but changes nothing");
        }
    }
}
