//! The HBONE client: tunnels to ambient endpoints over pooled HTTP/2 connections, one pool
//! per (address, expected identity, own certificate), at most
//! [`MAX_STREAMS_PER_CONNECTION`](super::MAX_STREAMS_PER_CONNECTION) streams per connection.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, Version};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::net::TcpStream;
use wharf_model::{Hbone, Identity};

use super::certs::{mesh_provider, MeshCerts, MeshIdentity};
use super::pool::{now_ms, Pooled, Slot};
use super::tunnel::Tunnel;
use super::verify::{CurrentKey, PeerVerifier};
use super::{
    refusal_hint, HboneError, TlsFailure, CONNECTION_WINDOW, MAX_FRAME, PING_EVERY, PING_TIMEOUT, STREAM_WINDOW,
    TLS_BUFFER_LIMIT,
};
use crate::metrics::Metrics;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    dial: SocketAddr,
    peer: Identity,
    /// Our certificate generation: a rotated certificate gets new connections, while old
    /// ones finish their tunnels.
    own: usize,
}

/// Opens HBONE tunnels.
#[derive(Debug)]
pub struct HboneClient {
    identity: Arc<MeshIdentity>,
    pool: Mutex<HashMap<PoolKey, Vec<Arc<Pooled>>>>,
    // One dial at a time per key, so a burst of tunnels shares a new connection instead of
    // each opening its own.
    dialing: Mutex<HashMap<PoolKey, Arc<tokio::sync::Mutex<()>>>>,
    connect_timeout: Duration,
    metrics: Metrics,
}

impl HboneClient {
    /// A client presenting `identity`.
    pub fn new(identity: Arc<MeshIdentity>, connect_timeout: Duration, metrics: Metrics) -> Arc<HboneClient> {
        let client = Arc::new(HboneClient {
            identity,
            pool: Mutex::new(HashMap::new()),
            dialing: Mutex::new(HashMap::new()),
            connect_timeout,
            metrics,
        });
        let weak = Arc::downgrade(&client);
        tokio::spawn(async move {
            // Idle connections are closed after a while; closed ones are dropped.
            loop {
                tokio::time::sleep(Duration::from_secs(30)).await;
                let Some(c) = weak.upgrade() else { return };
                c.reap(Duration::from_secs(90));
            }
        });
        client
    }

    /// Opens a tunnel to `target`, telling the peer the real client address.
    pub async fn open(&self, target: &Hbone, client: Option<SocketAddr>) -> Result<Tunnel, HboneError> {
        let result = self.open_inner(target, client).await;
        let label = match &result {
            Ok(_) => "ok",
            Err(e) => e.reason(),
        };
        self.metrics.hbone_tunnel("outbound", label);
        result
    }

    async fn open_inner(&self, target: &Hbone, client: Option<SocketAddr>) -> Result<Tunnel, HboneError> {
        let certs = self.identity.load().ok_or(HboneError::NoIdentity)?;
        let key = PoolKey { dial: target.dial, peer: target.identity.clone(), own: Arc::as_ptr(&certs) as usize };
        let mut fresh = false;
        let conn = match self.checkout(&key) {
            Some(c) => c,
            None => {
                let gate = {
                    let mut d = self.dialing.lock().unwrap_or_else(|p| p.into_inner());
                    Arc::clone(d.entry(key.clone()).or_default())
                };
                let _dialing = gate.lock().await;
                match self.checkout(&key) {
                    Some(c) => c,
                    None => {
                        let c = Arc::new(self.dial(target, &certs).await?);
                        fresh = true;
                        c.streams.store(1, Ordering::Release);
                        self.lock().entry(key).or_default().push(Arc::clone(&c));
                        self.metrics.hbone_pooled.inc();
                        c
                    }
                }
            }
        };
        self.metrics.hbone_active.inc();
        let span = tracing::debug_span!("hbone_tunnel", dial = %target.dial, peer = %target.identity, authority = %target.authority);
        let slot = Slot { conn: Arc::clone(&conn), metrics: self.metrics.clone(), sent: 0, received: 0, span };
        let mut req =
            Request::builder().method(Method::CONNECT).version(Version::HTTP_2).uri(target.authority.as_str());
        if let Some(c) = client {
            req = req.header("forwarded", format!("for=\"{c}\""));
        }
        req = req.header("traceparent", format!("00-{:032x}-{:016x}-00", fastrand::u128(1..), fastrand::u64(1..)));
        let req = req.body(()).map_err(|source| HboneError::Request { addr: target.dial, source })?;
        let failed = |e: h2::Error| {
            if fresh {
                // With TLS 1.3 a refused client certificate shows only now, as a closed
                // connection on the first request.
                HboneError::Tls {
                    addr: target.dial,
                    expected: target.identity.to_string(),
                    failure: TlsFailure::ClosedAfterHandshake(e),
                }
            } else {
                HboneError::Http2 { addr: target.dial, source: e }
            }
        };
        let mut sender = conn.sender.clone().ready().await.map_err(failed)?;
        let (resp, send) = sender.send_request(req, false).map_err(failed)?;
        let resp = resp.await.map_err(failed)?;
        if resp.status() != StatusCode::OK {
            let status = resp.status().as_u16();
            return Err(HboneError::Refused {
                addr: target.dial,
                authority: target.authority.clone(),
                status,
                hint: refusal_hint(status),
            });
        }
        Ok(Tunnel::new(send, resp.into_body(), slot))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PoolKey, Vec<Arc<Pooled>>>> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn checkout(&self, key: &PoolKey) -> Option<Arc<Pooled>> {
        let mut pool = self.lock();
        let conns = pool.get_mut(key)?;
        let before = conns.len();
        conns.retain(|c| !c.is_closed());
        for _ in conns.len()..before {
            self.metrics.hbone_pooled.dec();
        }
        conns.iter().find(|c| c.try_reserve()).cloned()
    }

    fn reap(&self, idle: Duration) {
        let cutoff = now_ms().saturating_sub(idle.as_millis() as u64);
        let mut pool = self.lock();
        for conns in pool.values_mut() {
            let before = conns.len();
            conns.retain(|c| {
                !c.is_closed()
                    && (c.streams.load(Ordering::Acquire) > 0 || c.last_used_ms.load(Ordering::Relaxed) > cutoff)
            });
            for _ in conns.len()..before {
                self.metrics.hbone_pooled.dec();
            }
        }
        pool.retain(|_, v| !v.is_empty());
    }

    /// Number of pooled connections (for tests and metrics).
    pub fn pooled_connections(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }

    async fn dial(&self, target: &Hbone, certs: &MeshCerts) -> Result<Pooled, HboneError> {
        let addr = target.dial;
        let tcp = match tokio::time::timeout(self.connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => return Err(HboneError::Connect { addr, source }),
            Err(_) => return Err(HboneError::ConnectTimeout(addr)),
        };
        let _ = tcp.set_nodelay(true);
        let tls_err = |failure| HboneError::Tls { addr, expected: target.identity.to_string(), failure };
        let provider = mesh_provider();
        let mut cfg = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| tls_err(TlsFailure::Config(e)))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PeerVerifier {
                roots: Arc::clone(&certs.roots),
                expected: target.identity.clone(),
                provider,
            }))
            .with_client_cert_resolver(Arc::new(CurrentKey(Arc::clone(&certs.key))));
        cfg.alpn_protocols = vec![b"h2".to_vec()];
        // No resumption and no SNI, as ztunnel: the name is the dialed IP.
        cfg.resumption = rustls::client::Resumption::disabled();
        let name = ServerName::IpAddress(addr.ip().into());
        let mut tls = tokio::time::timeout(
            self.connect_timeout,
            tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp),
        )
        .await
        .map_err(|_| tls_err(TlsFailure::Timeout))?
        .map_err(|e| tls_err(TlsFailure::Handshake(e)))?;
        tls.get_mut().1.set_buffer_limit(Some(TLS_BUFFER_LIMIT));
        let (sender, mut conn) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_frame_size(MAX_FRAME)
            .max_header_list_size(16 * 1024)
            .enable_push(false)
            .handshake::<_, Bytes>(tls)
            .await
            // With TLS 1.3 a refused client certificate shows up here, at the first read.
            .map_err(|e| tls_err(TlsFailure::Closed(e)))?;
        let closed = Arc::new(AtomicBool::new(false));
        let ended = Arc::clone(&closed);
        let peer = target.identity.to_string();
        let pings = conn.ping_pong();
        tokio::spawn(async move {
            let why = match pings {
                Some(pings) => tokio::select! {
                    r = &mut conn => r.err().map(|e| e.to_string()),
                    () = keep_alive(pings) => Some(format!("no answer to PING within {PING_TIMEOUT:?}")),
                },
                None => conn.await.err().map(|e| e.to_string()),
            };
            ended.store(true, Ordering::Release);
            if let Some(why) = why {
                tracing::debug!(%addr, %peer, error = why, "HBONE connection ended");
            }
        });
        Ok(Pooled { sender, closed, streams: AtomicUsize::new(0), last_used_ms: AtomicU64::new(now_ms()) })
    }
}

/// Pings the peer every [`PING_EVERY`], busy or idle; returns when an answer has not come
/// within [`PING_TIMEOUT`] (the connection is then dropped, which fails its tunnels).
async fn keep_alive(mut pings: h2::PingPong) {
    loop {
        tokio::time::sleep(PING_EVERY).await;
        match tokio::time::timeout(PING_TIMEOUT, pings.ping(h2::Ping::opaque())).await {
            Ok(Ok(_)) => {}
            // The connection is ending; its own result says why.
            Ok(Err(_)) => std::future::pending().await,
            Err(_) => return,
        }
    }
}
