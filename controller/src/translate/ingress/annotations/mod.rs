//! Ingress annotations: each `wharf.dev/NAME` and its ingress-nginx equivalent
//! `nginx.ingress.kubernetes.io/NAME`, parsed once per Ingress into typed [`Settings`].
//! A value is validated, never pasted into configuration; an invalid one is reported and
//! fails closed where ingress-nginx does (an unparsable allow list serves no one). An
//! annotation under either prefix that Wharf does not implement is reported by name, and
//! one that injects raw proxy configuration (`*-snippet`) is refused.

mod access;
mod reader;
mod routing;
mod upstream;

use std::collections::BTreeMap;

use crate::translate::Reason;
use wharf_model::{ClientFilter, ObjectRef};

use super::Diagnostic;
pub use access::{AuthSetting, ClientTlsSetting, ExternalSetting};
pub use routing::{Canary, FixedRedirect};
pub use upstream::{Affinity, BackendProtocol, ProxySslSetting};

/// Prefix of Wharf's own annotations.
pub const WHARF_PREFIX: &str = "wharf.dev/";

/// Prefix of ingress-nginx's annotations, accepted for the same names.
pub const NGINX_PREFIX: &str = "nginx.ingress.kubernetes.io/";

/// The annotation names Wharf acts on only under its own prefix (ingress-nginx has no
/// such annotation).
pub const WHARF_ONLY: [&str; 2] = ["acme", "acme-issuer"];

/// The annotation names (after the prefix) Wharf acts on.
pub const IMPLEMENTED: [&str; 81] = [
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
    "relative-redirects",
    "app-root",
    "from-to-www-redirect",
    "server-alias",
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
    "session-cookie-domain",
    "affinity-canary-behavior",
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
    "auth-cache-key",
    "auth-cache-duration",
    "proxy-next-upstream",
    "proxy-next-upstream-tries",
    "proxy-next-upstream-timeout",
];

/// Annotations that ask for protection Wharf does not give (a web application firewall):
/// an Ingress with one set to anything but `false` is answered 503 rather than served
/// unprotected.
pub const UNENFORCED_ACCESS_CONTROL: [&str; 2] = ["enable-modsecurity", "enable-owasp-core-rules"];

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
    /// `server-alias`: more names served with the routes of the Ingress's hosts.
    pub server_aliases: Box<[wharf_model::Host]>,
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
    /// `proxy-next-upstream`, `-tries`, `-timeout`.
    pub retry: Option<Box<wharf_model::Retry>>,
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
            server_aliases: Box::default(),
            use_regex: false,
            rewrite_target: None,
            connect_timeout_ms: None,
            read_timeout_ms: None,
            send_timeout_ms: None,
            retry: None,
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
    pub fn reason(&self) -> Reason {
        match self {
            Finding::Invalid(_) => Reason::InvalidAnnotation,
            Finding::NotSupported(_) => Reason::UnsupportedAnnotation,
            Finding::Refused(_) => Reason::SnippetRefused,
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
        server_aliases: r.server_aliases().into_boxed_slice(),
        use_regex: r.bool("use-regex").unwrap_or(false),
        rewrite_target: r.rewrite_target(),
        connect_timeout_ms: r.seconds("proxy-connect-timeout"),
        read_timeout_ms: r.seconds("proxy-read-timeout"),
        send_timeout_ms: r.seconds("proxy-send-timeout"),
        retry: r.retry().map(Box::new),
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

#[cfg(test)]
mod tests;
