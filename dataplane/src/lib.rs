//! Wharf's data plane: HTTPS with certificates chosen by SNI, HTTP routing and proxying,
//! TLS passthrough by SNI, plain TCP, and the admin endpoints. It serves
//! [`wharf_model::Snapshot`]s and knows nothing of Kubernetes.
//!
//! A snapshot is compiled off the hot path into a [`config::CompiledConfig`] and swapped in
//! with one `ArcSwap::store`; requests and connections never take a lock to read it.

pub mod acme;
pub mod admin;
pub mod auth;
mod coalesce;
pub mod config;
pub mod drain;
pub mod echo;
pub mod hbone;
pub mod host_map;
mod listeners;
pub mod memory;
pub mod metrics;
pub mod passthrough;
mod prefixed;
pub mod proxy;
pub mod proxy_protocol;
pub mod ratelimit;
pub mod reasons;
mod relay;
pub mod routing;
mod sessions;
pub mod tcp;
pub mod tls;
pub mod upstream;

#[cfg(any(test, feature = "testing"))]
pub mod fuzzing;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use wharf_model::Snapshot;

pub use config::{CompileError, CompiledConfig};
pub use listeners::{Bound, ListenerAddrs};
pub use metrics::Metrics;

/// Timeouts of the data plane.
#[derive(Debug, Clone)]
pub struct Timeouts {
    /// Dialing an endpoint (then 502).
    pub connect: Duration,
    /// From sending a request to its response headers (then 504).
    pub request: Duration,
    /// Pooled idle upstream connections older than this are not reused.
    pub upstream_idle: Duration,
    /// TLS handshake, or reading a passthrough ClientHello.
    pub handshake: Duration,
    /// Idle client keep-alive connections, and reading request headers.
    pub client_idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            request: Duration::from_secs(60),
            upstream_idle: Duration::from_secs(60),
            handshake: Duration::from_secs(10),
            client_idle: Duration::from_secs(60),
        }
    }
}

/// Request and connection limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Request head in bytes: HTTP/1.1 (request line and headers; 431 beyond, at least
    /// 8 KiB) and the HTTP/2 header list.
    pub max_header_bytes: usize,
    /// Request headers per HTTP/1.1 request (431 beyond).
    pub max_headers: usize,
    /// Request target (path and query) in bytes (414 beyond).
    pub max_url_bytes: usize,
    /// Request body bytes for routes without a limit of their own (413 beyond); 0 is
    /// unlimited.
    pub max_body_bytes: u64,
    /// Open connections per listener; new ones beyond are closed at once. 0 is unlimited.
    pub max_connections: usize,
    /// Connections older than this are asked to close (HTTP/1.1: after the current
    /// request; HTTP/2: GOAWAY), so that clients spread over new replicas.
    pub max_connection_age: Option<Duration>,
    /// Bytes in use at which new connections are refused (see [`memory`]); None never.
    pub memory_watermark: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 64 * 1024,
            max_headers: 100,
            max_url_bytes: 8 * 1024,
            max_body_bytes: 0,
            max_connections: 0,
            max_connection_age: None,
            memory_watermark: None,
        }
    }
}

/// Data-plane settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Timeouts.
    pub timeouts: Timeouts,
    /// The HTTPS port clients use, for redirects (443 is left out of the URL).
    pub https_redirect_port: u16,
    /// Log one line per request.
    pub access_log: bool,
    /// The gateway's mesh identity: ambient endpoints are reached over HBONE with it, and
    /// the HBONE inbound listener presents it.
    pub mesh: Option<Arc<hbone::MeshIdentity>>,
    /// Request-path normalisation.
    pub paths: proxy::normalize::PathOptions,
    /// Request and connection limits.
    pub limits: Limits,
    /// Memory in use, for admission by memory: the `wharf` binary counts its allocations
    /// (see [`memory`]); the default is the resident set.
    pub memory_in_use: fn() -> Option<u64>,
    /// Every connection of the edge listeners (HTTP, HTTPS, TLS passthrough) starts with a
    /// PROXY protocol header (v1 or v2), whose source address is the client's.
    pub proxy_protocol: bool,
    /// The proxies whose word on the client is taken: the source of their PROXY protocol
    /// header (any peer's when empty), and their `X-Forwarded-For`, `X-Forwarded-Proto`
    /// and `X-Forwarded-Port` (no one's when empty).
    pub trusted_proxies: Vec<wharf_model::IpNet>,
    /// Request headers with `_` in their name reach backends (ingress-nginx's
    /// `enable-underscores-in-headers`); by default they are dropped.
    pub underscores_in_headers: bool,
    /// The `Strict-Transport-Security` header of every response to a request the client
    /// sent over HTTPS (see [`proxy::headers::hsts`]); `None` sends none.
    pub hsts: Option<http::HeaderValue>,
    /// TLS versions and cipher suites of the HTTPS and TLS-terminating listeners.
    pub tls: tls::TlsPolicy,
    /// Where the HBONE inbound may forward, and whom it admits.
    pub hbone: hbone::inbound::InboundOptions,
}

impl Options {
    /// Whether a PROXY protocol header from `peer` names the client.
    pub fn proxy_protocol_from(&self, peer: std::net::IpAddr) -> bool {
        self.trusted_proxies.is_empty() || self.trusts(peer)
    }

    /// Whether `peer` is a trusted proxy.
    pub fn trusts(&self, peer: std::net::IpAddr) -> bool {
        self.trusted_proxies.iter().any(|n| n.contains(peer))
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeouts: Timeouts::default(),
            https_redirect_port: 443,
            access_log: true,
            mesh: None,
            paths: proxy::normalize::PathOptions::default(),
            limits: Limits::default(),
            memory_in_use: memory::resident_bytes,
            proxy_protocol: false,
            trusted_proxies: Vec::new(),
            underscores_in_headers: false,
            hsts: None,
            tls: tls::TlsPolicy::default(),
            hbone: hbone::inbound::InboundOptions::default(),
        }
    }
}

/// State shared by every listener and connection.
#[derive(Debug)]
pub struct Shared {
    /// The live config; load it, never lock it.
    pub config: ArcSwap<CompiledConfig>,
    /// Metrics.
    pub metrics: Metrics,
    /// Settings.
    pub opts: Options,
    /// Dials endpoints, directly or over HBONE.
    pub dialer: upstream::Dialer,
    /// Admission by memory.
    pub memory: memory::Guard,
    /// Kept answers of external authentication checks (`auth-cache-key`).
    pub auth_answers: auth::Answers,
    /// Shutdown has started: readiness fails (see [`drain`]).
    closing: std::sync::atomic::AtomicBool,
    compiler: config::Compiler,
    // Serializes applies (never touched by requests).
    apply_lock: Mutex<()>,
    version: AtomicU64,
    /// The version last applied, for whoever follows config changes (Gateway ports).
    applied: tokio::sync::watch::Sender<u64>,
}

impl Shared {
    /// True once shutdown has started.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }
}

/// The data plane. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The fallback certificate could not be made.
    #[error("cannot create the fallback certificate: {0}")]
    FallbackCertificate(String),
    /// TLS setup failed.
    #[error("TLS setup failed: {0}")]
    Tls(#[from] rustls::Error),
    /// The empty config did not compile.
    #[error("{0}")]
    Compile(#[from] CompileError),
}

impl Gateway {
    /// A gateway serving an empty config (every request 404) until [`Gateway::apply`].
    pub fn new(opts: Options) -> Result<Gateway, StartError> {
        let metrics = Metrics::new();
        let resumption = tls::Resumption::new(64 * 1024)?;
        let fallback = tls::fallback_certificate().map_err(StartError::FallbackCertificate)?;
        let compiler = config::Compiler::new(metrics.clone(), resumption, opts.tls.clone(), fallback);
        let empty = compiler.empty()?;
        let dialer = upstream::Dialer {
            timeout: opts.timeouts.connect,
            own: Arc::default(),
            hbone: opts
                .mesh
                .as_ref()
                .map(|m| hbone::HboneClient::new(Arc::clone(m), opts.timeouts.connect, metrics.clone())),
        };
        Ok(Gateway {
            shared: Arc::new(Shared {
                config: ArcSwap::from_pointee(empty),
                metrics,
                dialer,
                memory: memory::Guard::new(opts.limits.memory_watermark, opts.memory_in_use),
                auth_answers: auth::Answers::default(),
                closing: std::sync::atomic::AtomicBool::new(false),
                opts,
                compiler,
                apply_lock: Mutex::new(()),
                version: AtomicU64::new(0),
                applied: tokio::sync::watch::Sender::new(0),
            }),
        })
    }

    /// Compiles and swaps in `snapshot`; returns its version. On error the live config
    /// stays, and the error says why.
    pub fn apply(&self, snapshot: Snapshot) -> Result<u64, CompileError> {
        self.apply_shared(Arc::new(snapshot))
    }

    /// [`Gateway::apply`] for a snapshot the caller keeps too.
    pub fn apply_shared(&self, snapshot: Arc<Snapshot>) -> Result<u64, CompileError> {
        let s = &self.shared;
        let _serial = s.apply_lock.lock().unwrap_or_else(|p| p.into_inner());
        let previous = s.config.load_full();
        let version = s.version.load(Ordering::Relaxed) + 1;
        match s.compiler.compile(snapshot, version, Some(&previous)) {
            Ok(compiled) => {
                s.config.store(Arc::new(compiled));
                s.version.store(version, Ordering::Relaxed);
                s.applied.send_replace(version);
                s.metrics.config_version.set(version as i64);
                s.metrics.config_applies.inc();
                Ok(version)
            }
            Err(e) => {
                s.metrics.config_rejects.inc();
                tracing::error!(error = %e, reason = e.reason(), "config snapshot rejected; the previous one keeps serving");
                Err(e)
            }
        }
    }

    /// Shutdown has started: from now on `/healthz/ready` fails. The listeners learn it
    /// from [`drain::Signal::close`].
    pub fn close(&self) {
        self.shared.closing.store(true, Ordering::Relaxed);
    }

    /// Version of the live config (0 before the first apply).
    pub fn version(&self) -> u64 {
        self.shared.config.load().version
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Shared state, for listeners.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}
