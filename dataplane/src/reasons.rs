//! Why the data plane answered a request or a connection itself, or failed to reach an
//! upstream: one enum per kind of outcome, each with one stable `reason()` that metrics
//! labels, logs and the clients' answers share. The bottom layer: it uses no other module.

/// Why a proxied request or connection failed upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamError {
    /// The route's Service has no ready endpoints (or does not exist).
    NoEndpoints,
    /// Every endpoint tried refused or failed the connection.
    ConnectFailed,
    /// Connecting took longer than the connect timeout.
    ConnectTimeout,
    /// The response headers did not arrive within the request timeout.
    RequestTimeout,
    /// The backend took no part of the request body for longer than the send timeout.
    SendTimeout,
    /// The backend closed or broke the connection mid-request.
    Protocol,
    /// The mesh tunnel could not be set up (mTLS, HTTP/2, no mesh identity).
    MeshTls,
    /// The mesh refused the tunnel: an authorization policy denied it (HBONE 401).
    MeshDenied,
    /// The mesh refused the tunnel: no such workload or port, or its upstream refused.
    MeshRefused,
    /// The route's backend reference is invalid (Gateway API: not permitted, not found,
    /// or of a kind Wharf does not serve).
    InvalidBackend,
}

impl UpstreamError {
    /// Every variant, for the metric's label set.
    pub const ALL: [UpstreamError; 10] = [
        UpstreamError::NoEndpoints,
        UpstreamError::ConnectFailed,
        UpstreamError::ConnectTimeout,
        UpstreamError::RequestTimeout,
        UpstreamError::SendTimeout,
        UpstreamError::Protocol,
        UpstreamError::MeshTls,
        UpstreamError::MeshDenied,
        UpstreamError::MeshRefused,
        UpstreamError::InvalidBackend,
    ];

    /// Stable label and log value.
    pub fn reason(self) -> &'static str {
        match self {
            UpstreamError::NoEndpoints => "no_endpoints",
            UpstreamError::ConnectFailed => "connect_failed",
            UpstreamError::ConnectTimeout => "connect_timeout",
            UpstreamError::RequestTimeout => "request_timeout",
            UpstreamError::SendTimeout => "send_timeout",
            UpstreamError::Protocol => "upstream_protocol_error",
            UpstreamError::MeshTls => "mesh_tunnel_failed",
            UpstreamError::MeshDenied => "mesh_denied",
            UpstreamError::MeshRefused => "mesh_refused",
            UpstreamError::InvalidBackend => "invalid_backend",
        }
    }

    /// The status a client gets.
    pub fn status(self) -> http::StatusCode {
        match self {
            UpstreamError::NoEndpoints => http::StatusCode::SERVICE_UNAVAILABLE,
            UpstreamError::ConnectFailed
            | UpstreamError::ConnectTimeout
            | UpstreamError::Protocol
            | UpstreamError::MeshTls => http::StatusCode::BAD_GATEWAY,
            UpstreamError::MeshDenied => http::StatusCode::FORBIDDEN,
            UpstreamError::MeshRefused => http::StatusCode::SERVICE_UNAVAILABLE,
            UpstreamError::RequestTimeout | UpstreamError::SendTimeout => http::StatusCode::GATEWAY_TIMEOUT,
            UpstreamError::InvalidBackend => http::StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Why a request was answered by the gateway itself before routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// An HTTP/1.1 request without `Host`, or one without any host at all.
    MissingHost,
    /// More than one `Host` header.
    DuplicateHost,
    /// HTTP/2 `:authority` and `Host` name different hosts.
    HostMismatch,
    /// The path cannot be normalised safely.
    Path(PathError),
    /// The host would be served with another certificate than the connection's (421).
    Misdirected,
    /// The request target is longer than `--max-url-bytes` (414).
    UrlTooLong,
    /// The body is larger than the route's limit (413).
    BodyTooLarge,
    /// The HTTP/1.1 request head is larger than `--max-header-bytes` (431, answered by
    /// hyper itself, which then ends the connection).
    HeaderTooLarge,
}

impl Rejected {
    /// Every variant, for the metric's label set.
    pub const ALL: [Rejected; 11] = [
        Rejected::UrlTooLong,
        Rejected::BodyTooLarge,
        Rejected::HeaderTooLarge,
        Rejected::MissingHost,
        Rejected::DuplicateHost,
        Rejected::HostMismatch,
        Rejected::Path(PathError::BadEscape),
        Rejected::Path(PathError::Nul),
        Rejected::Path(PathError::EscapedSlash),
        Rejected::Path(PathError::HiddenDotSegment),
        Rejected::Misdirected,
    ];

    /// Short stable reason for metrics and logs.
    pub fn reason(self) -> &'static str {
        match self {
            Rejected::MissingHost => "missing_host",
            Rejected::DuplicateHost => "duplicate_host",
            Rejected::HostMismatch => "host_mismatch",
            Rejected::Path(e) => e.reason(),
            Rejected::Misdirected => "misdirected",
            Rejected::UrlTooLong => "url_too_long",
            Rejected::BodyTooLarge => "body_too_large",
            Rejected::HeaderTooLarge => "header_too_large",
        }
    }

    /// The status the client gets.
    pub fn status(self) -> http::StatusCode {
        match self {
            Rejected::Misdirected => http::StatusCode::MISDIRECTED_REQUEST,
            Rejected::UrlTooLong => http::StatusCode::URI_TOO_LONG,
            Rejected::BodyTooLarge => http::StatusCode::PAYLOAD_TOO_LARGE,
            Rejected::HeaderTooLarge => http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            _ => http::StatusCode::BAD_REQUEST,
        }
    }

    /// What the client is told.
    pub fn message(self) -> &'static str {
        match self {
            Rejected::MissingHost => "the request has no Host header",
            Rejected::DuplicateHost => "the request has more than one Host header",
            Rejected::HostMismatch => "the Host header and :authority name different hosts",
            Rejected::Path(e) => e.message(),
            Rejected::Misdirected => {
                "this connection's certificate is not the one for this host: open a new connection for it"
            }
            Rejected::UrlTooLong => "the request target is longer than this gateway accepts",
            Rejected::BodyTooLarge => "the request body is larger than this route accepts",
            Rejected::HeaderTooLarge => "the request head is larger than this gateway accepts",
        }
    }
}

/// Why the gateway answered a request itself instead of (or after) its backend: the
/// access log's `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// No route for the host and path (404).
    NoRoute,
    /// A CORS preflight, answered before the route's other checks.
    CorsPreflight,
    /// The route requires a client certificate and got none (400, or the error page's 302).
    ClientCertRequired,
    /// The client certificate's subject does not match `auth-tls-match-cn` (403).
    ClientCertUnauthorized,
    /// The client was over the route's limit (503).
    RateLimited,
    /// The client's address is not allowed (403).
    ClientDenied,
    /// Authentication asked for credentials (401, or the sign-in page's 302).
    Unauthorized,
    /// External authentication refused the request (403).
    Forbidden,
    /// The external check failed (500).
    AuthFailed,
    /// Authentication cannot be set up (503).
    AuthUnavailable,
    /// The default backend answered in place of an error (`custom-http-errors`).
    CustomError,
    /// The default backend could not answer: the gateway answered the original status.
    CustomErrorFailed,
    /// Refused before routing.
    Rejected(Rejected),
    /// The upstream failed.
    Upstream(UpstreamError),
}

impl Answered {
    /// The answers of the gateway's own checks (the others carry a [`Rejected`] or an
    /// [`UpstreamError`]).
    pub const LOCAL: [Answered; 12] = [
        Answered::NoRoute,
        Answered::CorsPreflight,
        Answered::ClientCertRequired,
        Answered::ClientCertUnauthorized,
        Answered::RateLimited,
        Answered::ClientDenied,
        Answered::Unauthorized,
        Answered::Forbidden,
        Answered::AuthFailed,
        Answered::AuthUnavailable,
        Answered::CustomError,
        Answered::CustomErrorFailed,
    ];

    /// Stable log value.
    pub fn reason(self) -> &'static str {
        match self {
            Answered::NoRoute => "no_route",
            Answered::CorsPreflight => "cors_preflight",
            Answered::ClientCertRequired => "client_cert_required",
            Answered::ClientCertUnauthorized => "client_cert_unauthorized",
            Answered::RateLimited => "rate_limited",
            Answered::ClientDenied => "client_denied",
            Answered::Unauthorized => "unauthorized",
            Answered::Forbidden => "forbidden",
            Answered::AuthFailed => "auth_failed",
            Answered::AuthUnavailable => "auth_unavailable",
            Answered::CustomError => "custom_error",
            Answered::CustomErrorFailed => "custom_error_failed",
            Answered::Rejected(r) => r.reason(),
            Answered::Upstream(e) => e.reason(),
        }
    }
}

/// Why a path was refused (400).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub enum PathError {
    /// `%` not followed by two hex digits.
    BadEscape,
    /// `%00`.
    Nul,
    /// `%2F` or `%5C` with `--escaped-slashes reject`.
    EscapedSlash,
    /// A kept escaped slash next to `.` or `..`.
    HiddenDotSegment,
}

impl PathError {
    /// What the client is told.
    pub fn message(self) -> &'static str {
        match self {
            PathError::BadEscape => "the path has a malformed percent-escape",
            PathError::Nul => "the path contains an escaped NUL byte",
            PathError::EscapedSlash => "the path contains an escaped slash (%2F or %5C), which this gateway refuses",
            PathError::HiddenDotSegment => "the path hides a dot segment behind an escaped slash (e.g. ..%2F)",
        }
    }

    /// Short stable reason for metrics and logs.
    pub fn reason(self) -> &'static str {
        match self {
            PathError::BadEscape => "bad_path_escape",
            PathError::Nul => "nul_in_path",
            PathError::EscapedSlash => "escaped_slash",
            PathError::HiddenDotSegment => "hidden_dot_segment",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reason a request can be answered with is distinct, and
    /// docs/observability.md names it.
    #[test]
    fn every_answer_has_its_own_documented_reason() {
        let all: Vec<Answered> = Answered::LOCAL
            .into_iter()
            .chain(Rejected::ALL.map(Answered::Rejected))
            .chain(UpstreamError::ALL.map(Answered::Upstream))
            .collect();
        let reasons: std::collections::BTreeSet<_> = all.iter().map(|a| a.reason()).collect();
        assert_eq!(reasons.len(), all.len());
        let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/observability.md"))
            .unwrap_or_default();
        let missing: Vec<_> = reasons
            .iter()
            .filter(|r| {
                !page.contains(&format!("`{r}`"))
                    && !page.contains(&format!("{r},"))
                    && !page.contains(&format!("{r})"))
            })
            .collect();
        assert!(missing.is_empty(), "docs/observability.md does not name {missing:?}");
    }

    #[test]
    fn every_rejection_has_its_own_reason_and_status() {
        let reasons: std::collections::BTreeSet<_> = Rejected::ALL.iter().map(|r| r.reason()).collect();
        assert_eq!(reasons.len(), Rejected::ALL.len(), "one reason per variant");
        assert_eq!(Rejected::HeaderTooLarge.reason(), "header_too_large");
        assert_eq!(Rejected::HeaderTooLarge.status(), http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        assert_eq!(Rejected::Path(PathError::Nul).reason(), "nul_in_path");
        assert_eq!(Rejected::Path(PathError::Nul).status(), http::StatusCode::BAD_REQUEST);
        assert!(Rejected::HeaderTooLarge.message().contains("head"));
        use http::StatusCode as S;
        let statuses = [Rejected::Misdirected, Rejected::UrlTooLong, Rejected::BodyTooLarge].map(Rejected::status);
        assert_eq!(statuses, [S::MISDIRECTED_REQUEST, S::URI_TOO_LONG, S::PAYLOAD_TOO_LARGE]);
        let upstream: std::collections::BTreeSet<_> = UpstreamError::ALL.iter().map(|e| e.reason()).collect();
        assert_eq!(upstream.len(), UpstreamError::ALL.len());
        let statuses = UpstreamError::ALL.map(UpstreamError::status);
        let expected = [503, 502, 502, 504, 504, 502, 502, 403, 503, 500].map(|c| S::from_u16(c).unwrap());
        assert_eq!(statuses, expected);
    }

    #[test]
    fn a_refused_path_says_what_is_wrong_with_it() {
        assert_eq!(PathError::HiddenDotSegment.reason(), "hidden_dot_segment");
        assert!(PathError::BadEscape.message().contains("percent-escape"));
        assert!(PathError::Nul.message().contains("NUL"));
        assert!(PathError::EscapedSlash.message().contains("%2F"));
        assert!(PathError::HiddenDotSegment.message().contains("..%2F"));
    }
}
