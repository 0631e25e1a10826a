//! Upstream endpoints: selection (power of two choices by outstanding requests, skipping
//! endpoints that recently refused connections), dialing (directly or over HBONE) and
//! pooled HTTP connections, with the request and response bodies that go through them and
//! TLS to backends. HTTP, passthrough, TCP and the relay all dial through here.

pub(crate) mod body;
pub mod forward;
pub mod tls;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use crossbeam_queue::ArrayQueue;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use wharf_model::{AppProtocol, Hbone};

use body::RequestBody;
use tls::UpstreamTlsConfig;

use crate::hbone::{HboneClient, Tunnel};
use crate::reasons::UpstreamError;

/// How long an endpoint that refused a connection is skipped.
const EJECT_FOR: Duration = Duration::from_secs(2);
/// Idle HTTP/1.1 connections kept per endpoint.
const IDLE_PER_ENDPOINT: usize = 128;

/// A Service port's endpoints, compiled.
#[derive(Debug)]
pub struct Upstream {
    /// Cluster id (`namespace/service:port`).
    pub id: String,
    /// HTTP protocol towards the endpoints.
    pub protocol: AppProtocol,
    /// The endpoints.
    pub endpoints: Vec<Arc<EndpointState>>,
}

impl Upstream {
    /// An upstream over `endpoints`.
    pub fn new(id: String, protocol: AppProtocol, endpoints: Vec<Arc<EndpointState>>) -> Self {
        Upstream { id, protocol, endpoints }
    }

    /// Picks an endpoint not in `tried`: two random candidates among those not ejected,
    /// the one with fewer outstanding requests wins. Ejected endpoints are used only when
    /// nothing else is left.
    pub fn pick(&self, tried: &[usize]) -> Option<usize> {
        let n = self.endpoints.len();
        if n == 1 {
            return tried.is_empty().then_some(0);
        }
        let now = clock_ms();
        let usable = |i: usize| !tried.contains(&i);
        let healthy = |i: usize| usable(i) && self.endpoints[i].ejected_until.load(Ordering::Relaxed) <= now;
        let mut count = (0..n).filter(|&i| healthy(i)).count();
        let candidate: &dyn Fn(usize) -> bool = if count > 0 {
            &healthy
        } else {
            count = (0..n).filter(|&i| usable(i)).count();
            &usable
        };
        let nth = |k: usize| (0..n).filter(|&i| candidate(i)).nth(k);
        match count {
            0 => None,
            1 => nth(0),
            c => {
                let ka = fastrand::usize(..c);
                let mut kb = fastrand::usize(..c - 1);
                if kb >= ka {
                    kb += 1;
                }
                let (a, b) = (nth(ka)?, nth(kb)?);
                let load = |i: usize| self.endpoints[i].active.load(Ordering::Relaxed);
                Some(if load(b) < load(a) { b } else { a })
            }
        }
    }
}

/// State of one endpoint that outlives config swaps: load, health, pooled connections.
#[derive(Debug)]
pub struct EndpointState {
    /// Address of the endpoint (the target inside the mesh for HBONE endpoints).
    pub addr: SocketAddr,
    /// What a sticky-session cookie holds for this endpoint: a hash of its address, the
    /// same in every replica.
    pub affinity_key: String,
    protocol: AppProtocol,
    hbone: Option<Hbone>,
    tls: Option<UpstreamTlsConfig>,
    active: AtomicUsize,
    ejected_until: AtomicU64,
    idle: ArrayQueue<(http1::SendRequest<RequestBody>, Instant)>,
    h2: ArcSwapOption<http2::SendRequest<RequestBody>>,
}

/// FNV-1a (64 bits) of the address, in hex: stable across processes and versions, so
/// every replica reads a client's cookie alike.
fn affinity_key(addr: SocketAddr) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in addr.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A request slot on an endpoint; dropping it ends the request for load balancing.
#[derive(Debug)]
pub struct InFlight(Arc<EndpointState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection ready to take one request.
#[derive(Debug)]
pub enum Conn {
    /// HTTP/1.1; return it with [`EndpointState::checkin`] once the response is done.
    H1(http1::SendRequest<RequestBody>),
    /// HTTP/2 (shared).
    H2(http2::SendRequest<RequestBody>),
}

impl EndpointState {
    /// Fresh state for an endpoint.
    pub fn new(addr: SocketAddr, protocol: AppProtocol, hbone: Option<Hbone>) -> Self {
        EndpointState {
            addr,
            affinity_key: affinity_key(addr),
            protocol,
            hbone,
            tls: None,
            active: AtomicUsize::new(0),
            ejected_until: AtomicU64::new(0),
            idle: ArrayQueue::new(IDLE_PER_ENDPOINT),
            h2: ArcSwapOption::empty(),
        }
    }

    /// True while it is skipped after a failed connect.
    pub fn ejected(&self) -> bool {
        self.ejected_until.load(Ordering::Relaxed) > clock_ms()
    }

    /// Spoken to over TLS.
    pub fn with_tls(mut self, tls: UpstreamTlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Marks a request outstanding until the returned guard drops.
    pub fn start(self: &Arc<Self>) -> InFlight {
        self.active.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }

    /// Skips this endpoint for a while after a failed connect.
    pub fn eject(&self) {
        self.ejected_until.store(clock_ms() + EJECT_FOR.as_millis() as u64, Ordering::Relaxed);
    }

    /// A pooled connection, or a new one.
    pub async fn conn(
        &self,
        dialer: &Dialer,
        client: SocketAddr,
        idle_timeout: Duration,
    ) -> Result<Conn, UpstreamError> {
        match self.pooled(idle_timeout) {
            Some(c) => Ok(c),
            // Boxed: dialing (TCP or an HBONE tunnel) is a large future, and keeping it
            // inline would make every request's future that much larger to create and move.
            None => Box::pin(self.dial_new(dialer, client)).await,
        }
    }

    /// A ready pooled connection, if there is one.
    fn pooled(&self, idle_timeout: Duration) -> Option<Conn> {
        match self.protocol {
            AppProtocol::Http1 => {
                while let Some((sender, since)) = self.idle.pop() {
                    if sender.is_ready() && since.elapsed() < idle_timeout {
                        return Some(Conn::H1(sender));
                    }
                }
                None
            }
            AppProtocol::H2c => {
                let s = self.h2.load();
                s.as_ref().filter(|s| !s.is_closed()).map(|s| Conn::H2((**s).clone()))
            }
        }
    }

    async fn dial_new(&self, dialer: &Dialer, client: SocketAddr) -> Result<Conn, UpstreamError> {
        let mut io = dialer.dial(self, Some(client)).await?.into_io();
        if let Some(tls) = &self.tls {
            io = match tokio::time::timeout(dialer.timeout, tls.connect(io)).await {
                Ok(Ok(s)) => Box::new(s),
                Ok(Err(e)) => {
                    tracing::warn!(endpoint = %self.addr, error = %e, "TLS to the backend failed");
                    return Err(UpstreamError::ConnectFailed);
                }
                Err(_) => {
                    tracing::warn!(endpoint = %self.addr, "TLS to the backend: no handshake within the connect timeout");
                    return Err(UpstreamError::ConnectTimeout);
                }
            };
        }
        let io = TokioIo::new(io);
        match self.protocol {
            AppProtocol::Http1 => {
                let (sender, conn) = http1::handshake(io).await.map_err(|_| UpstreamError::ConnectFailed)?;
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "upstream HTTP/1.1 connection ended");
                    }
                });
                Ok(Conn::H1(sender))
            }
            AppProtocol::H2c => {
                let (sender, conn) = http2::Builder::new(TokioExecutor::new())
                    .timer(hyper_util::rt::TokioTimer::new())
                    .keep_alive_interval(Duration::from_secs(30))
                    .handshake(io)
                    .await
                    .map_err(|_| UpstreamError::ConnectFailed)?;
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "upstream h2c connection ended");
                    }
                });
                self.h2.store(Some(Arc::new(sender.clone())));
                Ok(Conn::H2(sender))
            }
        }
    }

    /// Returns an HTTP/1.1 connection to the pool once its response has been read.
    pub fn checkin(self: &Arc<Self>, mut sender: http1::SendRequest<RequestBody>) {
        if sender.is_ready() {
            let _ = self.idle.push((sender, Instant::now()));
            return;
        }
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let ready = tokio::time::timeout(Duration::from_secs(1), sender.ready()).await;
            if matches!(ready, Ok(Ok(()))) {
                let _ = me.idle.push((sender, Instant::now()));
            }
        });
    }
}

/// A byte stream to an endpoint: a TCP connection or an HBONE tunnel.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}
/// A boxed [`Io`].
pub type BoxIo = Box<dyn Io>;

/// A dialed endpoint: a TCP connection, or an HBONE tunnel for a mesh endpoint. The byte
/// relays move a tunnel's buffers without copying them ([`Tunnel::relay`]); everything else
/// uses it as a byte stream.
#[derive(Debug)]
pub enum Dialed {
    /// A direct TCP connection.
    Tcp(TcpStream),
    /// A tunnel through the mesh (boxed: several times a TCP stream's size).
    Tunnel(Box<Tunnel>),
}

impl Dialed {
    /// As a boxed byte stream; a tunnel keeps its own box.
    pub fn into_io(self) -> BoxIo {
        match self {
            Dialed::Tcp(s) => Box::new(s),
            Dialed::Tunnel(t) => t,
        }
    }
}

impl AsyncRead for Dialed {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Dialed::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Dialed::Tunnel(t) => Pin::new(&mut **t).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Dialed {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Dialed::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Dialed::Tunnel(t) => Pin::new(&mut **t).poll_write(cx, buf),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Dialed::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Dialed::Tunnel(t) => Pin::new(&mut **t).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Dialed::Tcp(s) => s.is_write_vectored(),
            Dialed::Tunnel(t) => t.is_write_vectored(),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Dialed::Tcp(s) => Pin::new(s).poll_flush(cx),
            Dialed::Tunnel(t) => Pin::new(&mut **t).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Dialed::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Dialed::Tunnel(t) => Pin::new(&mut **t).poll_shutdown(cx),
        }
    }
}

/// Dials endpoints: directly, or through an HBONE tunnel for mesh endpoints.
#[derive(Debug, Clone)]
pub struct Dialer {
    /// TCP connect timeout.
    pub timeout: Duration,
    /// The HBONE client, when a mesh identity is configured.
    pub hbone: Option<Arc<HboneClient>>,
    /// The gateway's own ports, once its listeners are bound: no route dials its admin or
    /// HBONE socket.
    pub own: Arc<std::sync::OnceLock<crate::hbone::inbound::OwnPorts>>,
}

impl Dialer {
    /// A connection to `ep`; `client` is the real client address, passed on in HBONE's
    /// `forwarded` header.
    pub async fn dial(&self, ep: &EndpointState, client: Option<SocketAddr>) -> Result<Dialed, UpstreamError> {
        let Some(target) = &ep.hbone else {
            if self.own.get().is_some_and(|own| own.is_private(ep.addr, None)) {
                tracing::warn!(endpoint = %ep.addr, "endpoint refused: it is the gateway's own admin or HBONE port");
                return Err(UpstreamError::InvalidBackend);
            }
            let s = connect(ep.addr, self.timeout).await?;
            if self.own.get().is_some_and(|own| own.reached_private(ep.addr, &s)) {
                tracing::warn!(endpoint = %ep.addr, "endpoint refused: it is the gateway's own admin or HBONE port on one of its addresses");
                return Err(UpstreamError::InvalidBackend);
            }
            return Ok(Dialed::Tcp(s));
        };
        let Some(hbone) = &self.hbone else {
            tracing::warn!(endpoint = %ep.addr, identity = %target.identity, "endpoint is in the ambient mesh but no mesh identity is configured (--istio-ca-address, or --mesh-cert, --mesh-key and --mesh-roots; chart: mesh.enabled)");
            return Err(UpstreamError::MeshTls);
        };
        match hbone.open(target, client).await {
            Ok(t) => Ok(Dialed::Tunnel(Box::new(t))),
            Err(e) => {
                tracing::warn!(endpoint = %ep.addr, via = %target.dial, reason = e.reason(), error = %e, "HBONE tunnel failed");
                Err(e.upstream_error())
            }
        }
    }
}

/// Dials `addr` with a timeout; `TCP_NODELAY` on.
pub async fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, UpstreamError> {
    match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Ok(Err(e)) => {
            tracing::debug!(%addr, error = %e, "upstream connect failed");
            Err(UpstreamError::ConnectFailed)
        }
        Err(_) => Err(UpstreamError::ConnectTimeout),
    }
}

/// Dials one endpoint of `upstream` after another (each at most once) until a connection
/// succeeds. Failed endpoints are ejected for a while; a mesh policy denial ends the
/// search (another endpoint would be denied too).
pub async fn connect_any(
    upstream: &Upstream,
    dialer: &Dialer,
    client: SocketAddr,
) -> Result<(Dialed, Arc<EndpointState>), UpstreamError> {
    let mut tried = Vec::new();
    let mut last = UpstreamError::NoEndpoints;
    while let Some(i) = upstream.pick(&tried) {
        tried.push(i);
        let ep = &upstream.endpoints[i];
        match dialer.dial(ep, Some(client)).await {
            Ok(io) => return Ok((io, Arc::clone(ep))),
            Err(UpstreamError::MeshDenied) => return Err(UpstreamError::MeshDenied),
            Err(e) => {
                ep.eject();
                last = e;
            }
        }
    }
    Err(last)
}

/// Milliseconds on a process-local monotonic clock.
fn clock_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// Relays `down` to a dialed upstream: copies both ways until both sides have closed
/// (half-close is honoured). Returns bytes sent upstream (plus `already_sent`) and bytes
/// sent back.
pub async fn relay<A>(
    metrics: &crate::metrics::Metrics,
    listener: crate::metrics::Listener,
    down: &mut A,
    up: &mut Dialed,
    already_sent: u64,
) -> (u64, u64)
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let copied = match up {
        Dialed::Tcp(s) => crate::relay::copy(down, s).await,
        Dialed::Tunnel(t) => t.relay(down).await,
    };
    let (to_up, to_down) = copied.unwrap_or((0, 0));
    let (up_c, down_c) = metrics.bytes(listener);
    up_c.inc_by(to_up + already_sent);
    down_c.inc_by(to_down);
    (to_up + already_sent, to_down)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(n: usize) -> Upstream {
        let eps = (0..n)
            .map(|i| {
                Arc::new(EndpointState::new(
                    SocketAddr::from(([127, 0, 0, 1], 9000 + i as u16)),
                    AppProtocol::Http1,
                    None,
                ))
            })
            .collect();
        Upstream::new("ns/svc:80".into(), AppProtocol::Http1, eps)
    }

    #[test]
    fn pick_never_returns_a_tried_endpoint_and_ends() {
        for n in 1..5 {
            let u = upstream(n);
            let mut tried = Vec::new();
            while let Some(i) = u.pick(&tried) {
                assert!(!tried.contains(&i), "{i} picked twice of {n}");
                tried.push(i);
            }
            tried.sort();
            assert_eq!(tried, (0..n).collect::<Vec<_>>());
        }
    }

    #[test]
    fn pick_prefers_the_less_loaded_and_skips_ejected() {
        let u = upstream(2);
        let _busy: Vec<_> = (0..3).map(|_| u.endpoints[0].start()).collect();
        for _ in 0..50 {
            assert_eq!(u.pick(&[]), Some(1));
        }
        u.endpoints[1].eject();
        for _ in 0..50 {
            assert_eq!(u.pick(&[]), Some(0), "the ejected endpoint is skipped while another is healthy");
        }
        u.endpoints[0].eject();
        let mut seen = [false; 2];
        for _ in 0..200 {
            seen[u.pick(&[]).unwrap()] = true;
        }
        assert!(seen[1], "with every endpoint ejected, they are all candidates again");
        assert_eq!(u.pick(&[1]), Some(0));
    }

    #[test]
    fn pick_spreads_over_equal_endpoints() {
        let u = upstream(3);
        let mut hits = [0; 3];
        for _ in 0..3000 {
            hits[u.pick(&[]).unwrap()] += 1;
        }
        assert!(hits.iter().all(|&h| h > 700), "{hits:?}");
    }
}
