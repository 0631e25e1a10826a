//! HBONE: HTTP/2 CONNECT tunnels over mutual TLS into the Istio ambient mesh, as ztunnel
//! speaks it (see shared/HBONE.md). The client opens tunnels to ambient endpoints with
//! the gateway's own SPIFFE identity; the inbound side terminates them (east-west role).

pub mod certs;
pub mod client;
pub mod inbound;
pub mod istio_ca;
mod pool;
pub mod tunnel;
mod verify;

use std::net::SocketAddr;
use std::time::Duration;

use crate::reasons::UpstreamError;

pub use certs::{MeshCerts, MeshFiles, MeshIdentity};
pub use client::HboneClient;
pub use tunnel::Tunnel;

/// HTTP/2 settings both sides use (ztunnel's).
pub(crate) const STREAM_WINDOW: u32 = 4 * 1024 * 1024;
pub(crate) const CONNECTION_WINDOW: u32 = 16 * 1024 * 1024;
pub(crate) const MAX_FRAME: u32 = 1024 * 1024;
/// Encrypted bytes a tunnel's TLS session may queue before the socket takes them. rustls'
/// default (64 KiB) is just below one relay read (64 KiB) as a DATA frame in TLS records,
/// so every frame went out in two writes, the second of a few bytes.
pub(crate) const TLS_BUFFER_LIMIT: usize = 512 * 1024;
pub(crate) const PING_EVERY: Duration = Duration::from_secs(10);
pub(crate) const PING_TIMEOUT: Duration = Duration::from_secs(20);
/// Streams per pooled client connection.
pub const MAX_STREAMS_PER_CONNECTION: usize = 100;
/// Ports a tunnel may never target: ztunnel's own.
pub const RESERVED_PORTS: [u16; 4] = [15008, 15006, 15001, 15080];

/// Why a tunnel could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum HboneError {
    /// No mesh certificate is loaded.
    #[error("no mesh identity is loaded: configure --istio-ca-address, or --mesh-cert, --mesh-key and --mesh-roots (with the Istio CA, see the log for why no certificate was issued)")]
    NoIdentity,
    /// TCP connect to the HBONE port failed.
    #[error("connecting to {addr} failed: {source} (is ztunnel running there? maybe a NetworkPolicy blocks HBONE port 15008)")]
    Connect {
        /// Dialed address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// TCP connect timed out.
    #[error("connecting to {0} timed out (maybe a NetworkPolicy drops HBONE port 15008)")]
    ConnectTimeout(SocketAddr),
    /// The mutual TLS handshake failed (wrong identity, untrusted chain, refused client
    /// certificate).
    #[error("mTLS with {addr} failed: {failure} (does the peer chain to the mesh root and present {expected}?)")]
    Tls {
        /// Dialed address.
        addr: SocketAddr,
        /// Expected peer identity.
        expected: String,
        /// What went wrong.
        #[source]
        failure: TlsFailure,
    },
    /// HTTP/2 failed under the tunnel.
    #[error("HTTP/2 with {addr} failed: {source}")]
    Http2 {
        /// Dialed address.
        addr: SocketAddr,
        /// The error.
        source: h2::Error,
    },
    /// The CONNECT request could not be built (an authority that is no URI).
    #[error("CONNECT to {addr} cannot be sent: {source}")]
    Request {
        /// Dialed address.
        addr: SocketAddr,
        /// The error.
        source: http::Error,
    },
    /// The peer answered CONNECT with something other than 200.
    #[error("{addr} refused CONNECT {authority} with status {status}{hint}")]
    Refused {
        /// Dialed address.
        addr: SocketAddr,
        /// The CONNECT target.
        authority: String,
        /// The status.
        status: u16,
        /// What it likely means.
        hint: &'static str,
    },
}

/// Why the mutual TLS of an HBONE connection failed.
#[derive(Debug, thiserror::Error)]
pub enum TlsFailure {
    /// rustls refused the client configuration.
    #[error("{0}")]
    Config(#[source] rustls::Error),
    /// The handshake did not finish within the connect timeout.
    #[error("handshake timed out")]
    Timeout,
    /// The handshake failed.
    #[error("{0}")]
    Handshake(#[source] std::io::Error),
    /// The peer closed the connection at the first read, as TLS 1.3 shows a refused
    /// client certificate.
    #[error("the peer closed the connection: {0} (was our certificate refused?)")]
    Closed(#[source] h2::Error),
    /// The peer closed the connection at the first request after the handshake.
    #[error("the peer closed the connection after the handshake ({0}): was our certificate refused?")]
    ClosedAfterHandshake(#[source] h2::Error),
}

impl HboneError {
    /// Short stable reason for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            HboneError::NoIdentity => "no_identity",
            HboneError::Connect { .. } => "connect_failed",
            HboneError::ConnectTimeout(_) => "connect_timeout",
            HboneError::Tls { .. } => "tls",
            HboneError::Http2 { .. } | HboneError::Request { .. } => "http2",
            HboneError::Refused { status: 401, .. } => "denied",
            HboneError::Refused { .. } => "refused",
        }
    }

    /// How the proxy reports it: 401 (policy denied) as 403, other refusals as 503,
    /// transport failures as 502.
    pub fn upstream_error(&self) -> UpstreamError {
        match self {
            HboneError::Refused { status: 401, .. } => UpstreamError::MeshDenied,
            HboneError::Refused { .. } => UpstreamError::MeshRefused,
            HboneError::ConnectTimeout(_) => UpstreamError::ConnectTimeout,
            HboneError::Connect { .. } => UpstreamError::ConnectFailed,
            HboneError::NoIdentity | HboneError::Tls { .. } | HboneError::Http2 { .. } | HboneError::Request { .. } => {
                UpstreamError::MeshTls
            }
        }
    }
}

/// Meaning of a CONNECT refusal, for operators.
pub(crate) fn refusal_hint(status: u16) -> &'static str {
    match status {
        400 => " (bad CONNECT: the authority must be an IP:port the peer serves)",
        401 => " (an AuthorizationPolicy denies the gateway's identity)",
        503 => " (no such workload or port there, or its upstream refused the connection)",
        _ => "",
    }
}
