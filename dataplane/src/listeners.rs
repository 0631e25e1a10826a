//! Binding the listeners and their accept loops.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use wharf_model::PortProtocol;

use crate::coalesce::Coalesce;
use crate::drain::Watch;
use crate::hbone::inbound::OwnPorts;
use crate::metrics::Listener;
use crate::prefixed::{Inbound, Prefixed};
use crate::proxy::{self, ConnInfo, Scheme};
use crate::{admin, passthrough, proxy_protocol, tcp, Gateway, Shared};

/// Concurrent streams per client HTTP/2 connection.
const H2_MAX_STREAMS: u32 = 250;
/// hyper's smallest HTTP/1.1 read buffer.
const MIN_HEAD_BYTES: usize = 8192;
/// PING interval on quiet client HTTP/2 connections.
const H2_KEEPALIVE: Duration = Duration::from_secs(30);

/// Where to listen. `None` turns a listener off.
#[derive(Debug, Clone, Default)]
pub struct ListenerAddrs {
    /// Plain HTTP.
    pub http: Option<SocketAddr>,
    /// HTTPS.
    pub https: Option<SocketAddr>,
    /// TLS passthrough.
    pub passthrough: Option<SocketAddr>,
    /// Plain TCP: (bind address, gateway port the TCP routes name).
    pub tcp: Vec<(SocketAddr, u16)>,
    /// Admin (health, metrics, config dump).
    pub admin: Option<SocketAddr>,
    /// HBONE inbound (east-west role); needs a mesh identity.
    pub hbone: Option<SocketAddr>,
    /// Ports clients see, for X-Forwarded-Port (defaults to the bound port).
    pub public_http_port: Option<u16>,
    /// See `public_http_port`.
    pub public_https_port: Option<u16>,
}

/// Bound listeners, ready to serve.
#[derive(Debug)]
pub struct Bound {
    http: Option<(TcpListener, u16)>,
    https: Option<(TcpListener, u16)>,
    passthrough: Option<TcpListener>,
    tcp: Vec<(TcpListener, u16)>,
    admin: Option<TcpListener>,
    hbone: Option<TcpListener>,
}

async fn bind(addr: Option<SocketAddr>, what: &str) -> std::io::Result<Option<TcpListener>> {
    match addr {
        None => Ok(None),
        Some(a) => TcpListener::bind(a)
            .await
            .map(Some)
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {a} ({what}): {e}"))),
    }
}

fn port(l: &Option<TcpListener>) -> u16 {
    l.as_ref().and_then(|l| l.local_addr().ok()).map_or(0, |a| a.port())
}

impl Gateway {
    /// Binds every configured listener (all or nothing).
    pub async fn bind(&self, addrs: &ListenerAddrs) -> std::io::Result<Bound> {
        let http = bind(addrs.http, "http").await?;
        let https = bind(addrs.https, "https").await?;
        let mut tcp = Vec::new();
        for (a, route_port) in &addrs.tcp {
            if let Some(l) = bind(Some(*a), "tcp").await? {
                tcp.push((l, *route_port));
            }
        }
        let http_port = addrs.public_http_port.unwrap_or(port(&http));
        let https_port = addrs.public_https_port.unwrap_or(port(&https));
        Ok(Bound {
            http: http.map(|l| (l, http_port)),
            https: https.map(|l| (l, https_port)),
            passthrough: bind(addrs.passthrough, "passthrough").await?,
            tcp,
            admin: bind(addrs.admin, "admin").await?,
            hbone: bind(addrs.hbone, "hbone").await?,
        })
    }
}

impl Bound {
    /// Local address of the HTTP listener.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }
    /// Local address of the HTTPS listener.
    pub fn https_addr(&self) -> Option<SocketAddr> {
        self.https.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }
    /// Local address of the passthrough listener.
    pub fn passthrough_addr(&self) -> Option<SocketAddr> {
        self.passthrough.as_ref().and_then(|l| l.local_addr().ok())
    }
    /// Local addresses of the TCP listeners.
    pub fn tcp_addrs(&self) -> Vec<SocketAddr> {
        self.tcp.iter().filter_map(|(l, _)| l.local_addr().ok()).collect()
    }
    /// Local address of the HBONE inbound listener.
    pub fn hbone_addr(&self) -> Option<SocketAddr> {
        self.hbone.as_ref().and_then(|l| l.local_addr().ok())
    }
    /// Local address of the admin listener.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The ports of the sockets bound.
    fn own_ports(&self) -> OwnPorts {
        let port = |l: &TcpListener| l.local_addr().map(|a| a.port()).ok();
        let mut serving: Vec<u16> = [self.http.as_ref().map(|(l, _)| l), self.https.as_ref().map(|(l, _)| l)]
            .into_iter()
            .flatten()
            .chain(self.passthrough.as_ref())
            .chain(self.tcp.iter().map(|(l, _)| l))
            .filter_map(port)
            .collect();
        serving.sort_unstable();
        let private = self.admin.iter().chain(self.hbone.as_ref()).filter_map(port).collect();
        OwnPorts { serving, private }
    }

    /// Runs every listener until `drain` is signaled; connections keep their watch until
    /// they finish.
    pub async fn serve(self, gateway: Gateway, drain: Watch) {
        let shared = Arc::clone(gateway.shared());
        // The routes' dialer and the HBONE inbound read them; a second serve of the same
        // gateway keeps the ports of the first.
        let _ = shared.dialer.own.set(self.own_ports());
        let mut set = JoinSet::new();
        if let Some((l, port)) = self.http {
            let s = Arc::clone(&shared);
            set.spawn(accept_loop(l, drain.clone(), Listener::Http, s.clone(), move |stream, peer, w| {
                let s = s.clone();
                async move {
                    let Some((stream, client)) = inbound(&s, stream, peer, Listener::Http).await else { return };
                    let info = ConnInfo {
                        client,
                        scheme: Scheme::Http,
                        port,
                        sni: None,
                        gateway_port: None,
                        forwarded_by: None,
                        client_cert: None,
                    };
                    serve_http(s, stream, info, w).await
                }
            }));
        }
        if let Some((l, port)) = self.https {
            let s = Arc::clone(&shared);
            set.spawn(accept_loop(l, drain.clone(), Listener::Https, s.clone(), move |stream, peer, w| {
                let s = s.clone();
                async move {
                    let Some((stream, client)) = inbound(&s, stream, peer, Listener::Https).await else { return };
                    let info = ConnInfo {
                        client,
                        scheme: Scheme::Https,
                        port,
                        sni: None,
                        gateway_port: None,
                        forwarded_by: None,
                        client_cert: None,
                    };
                    serve_https(s, stream, info, w).await
                }
            }));
        }
        if let Some(l) = self.passthrough {
            let s = Arc::clone(&shared);
            set.spawn(accept_loop(l, drain.clone(), Listener::Passthrough, s.clone(), move |stream, peer, _w| {
                let s = s.clone();
                async move {
                    let Some((stream, client)) = inbound(&s, stream, peer, Listener::Passthrough).await else { return };
                    passthrough::serve(s, stream, client, None).await
                }
            }));
        }
        for (l, route_port) in self.tcp {
            let s = Arc::clone(&shared);
            set.spawn(accept_loop(l, drain.clone(), Listener::Tcp, s.clone(), move |stream, client, _w| {
                tcp::serve(s.clone(), stream, client, route_port, None)
            }));
        }
        if let Some(l) = self.hbone.filter(|_| shared.opts.mesh.is_some()) {
            let s = Arc::clone(&shared);
            set.spawn(accept_loop(l, drain.clone(), Listener::Hbone, s.clone(), move |stream, client, w| {
                crate::hbone::inbound::serve_conn(stream, client, Arc::clone(&s), w)
            }));
        }
        if let Some(l) = self.admin {
            set.spawn(admin::serve(l, Arc::clone(&shared), drain.clone()));
        }
        set.spawn(watch_memory(Arc::clone(&shared), drain.clone()));
        set.spawn(serve_gateway_ports(Arc::clone(&shared), drain.clone()));
        drop(drain);
        while set.join_next().await.is_some() {}
    }
}

/// Samples memory for admission by memory (see [`crate::memory`]) until draining starts.
async fn watch_memory(shared: Arc<Shared>, mut drain: Watch) {
    let guard = &shared.memory;
    let gauge = |g: &prometheus::IntGauge, v: u64| g.set(i64::try_from(v).unwrap_or(i64::MAX));
    let watermark = guard.watermark().unwrap_or(0);
    gauge(&shared.metrics.memory_watermark, watermark);
    let mut every = tokio::time::interval(crate::memory::SAMPLE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = drain.signaled() => return,
        }
        if let Some(resident) = crate::memory::resident_bytes() {
            gauge(&shared.metrics.memory_resident, resident);
        }
        let Some(in_use) = guard.measure() else { continue };
        gauge(&shared.metrics.memory_in_use, in_use);
        match guard.record(in_use) {
            Some(true) => tracing::warn!(
                in_use_mib = in_use >> 20,
                watermark_mib = watermark >> 20,
                "memory in use is above --memory-watermark: new connections are refused and /healthz/ready fails until it falls below"
            ),
            Some(false) => {
                tracing::info!(in_use_mib = in_use >> 20, "memory in use is below --memory-watermark again: accepting connections")
            }
            None => {}
        }
    }
}

/// How often a Gateway port that could not be bound is tried again.
const REBIND_EVERY: Duration = Duration::from_secs(5);
/// How long connections of a removed Gateway port may take to finish.
const PORT_DRAIN: Duration = Duration::from_secs(60);

/// A bound Gateway port: its shutdown signal and accept loop.
struct OpenPort {
    signal: crate::drain::Signal,
    accepting: tokio::task::JoinHandle<()>,
}

/// Binds, serves and closes the Gateway ports as configs come and go: a port added opens
/// its socket, a port removed (or changed protocol) stops accepting and lets its
/// connections finish, and no other port's sockets or connections are touched. A port
/// that cannot be bound is logged and tried again every [`REBIND_EVERY`].
async fn serve_gateway_ports(shared: Arc<Shared>, mut drain: Watch) {
    let mut applied = shared.applied.subscribe();
    let mut open: HashMap<(SocketAddr, PortProtocol), OpenPort> = HashMap::new();
    let mut failed: HashSet<(SocketAddr, PortProtocol)> = HashSet::new();
    let mut closing = false;
    let mut on_close = drain.clone();
    loop {
        let config = shared.config.load_full();
        let want: HashMap<(SocketAddr, PortProtocol), &wharf_model::GatewayPort> =
            config.snapshot.gateway_ports.iter().filter(|p| !p.edge).map(|p| ((p.bind, p.protocol), p)).collect();
        let gone: Vec<_> = open.keys().filter(|k| !want.contains_key(k)).copied().collect();
        for key in gone {
            if let Some(port) = open.remove(&key) {
                tracing::info!(address = %key.0, protocol = ?key.1, "gateway port removed: no longer accepting; its connections finish");
                close_port(port, drain.clone()).await;
            }
        }
        failed.retain(|k| want.contains_key(k));
        for (key, port) in &want {
            if open.contains_key(key) {
                continue;
            }
            match TcpListener::bind(key.0).await {
                Ok(listener) => {
                    failed.remove(key);
                    tracing::info!(gateway = %port.gateway, address = %key.0, protocol = ?key.1, "gateway port open");
                    let (signal, watch) = crate::drain::channel();
                    if closing {
                        signal.close();
                    }
                    let accepting = tokio::spawn(accept_port(Arc::clone(&shared), listener, key.1, watch));
                    open.insert(*key, OpenPort { signal, accepting });
                }
                Err(e) => {
                    if failed.insert(*key) {
                        tracing::error!(gateway = %port.gateway, address = %key.0, error = %e, "cannot listen on a gateway port; trying again every {}s", REBIND_EVERY.as_secs());
                    }
                }
            }
        }
        tokio::select! {
            changed = applied.changed() => if changed.is_err() { break },
            _ = tokio::time::sleep(REBIND_EVERY), if !failed.is_empty() => {}
            _ = on_close.closing(), if !closing => {
                closing = true;
                open.values().for_each(|p| p.signal.close());
            }
            _ = drain.signaled() => break,
        }
    }
    drop(on_close);
    for (_, port) in open.drain() {
        close_port(port, drain.clone()).await;
    }
}

/// Stops a port accepting (its socket is closed when this returns) and lets its
/// connections finish in the background, holding `outer` until they have.
async fn close_port(port: OpenPort, outer: Watch) {
    port.signal.start_draining();
    let _ = port.accepting.await;
    tokio::spawn(async move {
        port.signal.finished(PORT_DRAIN).await;
        drop(outer);
    });
}

/// The accept loop of one Gateway port.
async fn accept_port(shared: Arc<Shared>, listener: TcpListener, protocol: PortProtocol, drain: Watch) {
    let Ok(bound) = listener.local_addr() else { return };
    let port = bound.port();
    let key = Some(bound);
    let s = Arc::clone(&shared);
    match protocol {
        PortProtocol::Http => {
            accept_loop(listener, drain, Listener::Http, shared, move |stream, client, w| {
                let info = ConnInfo {
                    client,
                    scheme: Scheme::Http,
                    port,
                    sni: None,
                    gateway_port: key,
                    forwarded_by: None,
                    client_cert: None,
                };
                serve_http(s.clone(), Prefixed::new(Vec::new(), stream), info, w)
            })
            .await
        }
        PortProtocol::Https => {
            accept_loop(listener, drain, Listener::Https, shared, move |stream, client, w| {
                let info = ConnInfo {
                    client,
                    scheme: Scheme::Https,
                    port,
                    sni: None,
                    gateway_port: key,
                    forwarded_by: None,
                    client_cert: None,
                };
                serve_https(s.clone(), Prefixed::new(Vec::new(), stream), info, w)
            })
            .await
        }
        PortProtocol::Passthrough => {
            accept_loop(listener, drain, Listener::Passthrough, shared, move |stream, client, _w| {
                passthrough::serve(s.clone(), Prefixed::new(Vec::new(), stream), client, key)
            })
            .await
        }
        PortProtocol::Tcp => {
            accept_loop(listener, drain, Listener::Tcp, shared, move |stream, client, _w| {
                tcp::serve(s.clone(), stream, client, port, key)
            })
            .await
        }
    }
}

/// A connection of an edge listener, after its PROXY protocol header when
/// `--proxy-protocol` asks for one, and the client's address: the header's source when the
/// peer is a trusted proxy, else the peer. A connection without a valid header in time is
/// closed.
async fn inbound(
    shared: &Shared,
    mut stream: TcpStream,
    peer: SocketAddr,
    kind: Listener,
) -> Option<(Inbound, SocketAddr)> {
    if !shared.opts.proxy_protocol {
        return Some((Prefixed::new(Vec::new(), stream), peer));
    }
    let mut buf = Vec::new();
    let timeout = shared.opts.timeouts.handshake;
    let why = match tokio::time::timeout(timeout, proxy_protocol::read(&mut stream, &mut buf)).await {
        Ok(Ok(header)) => {
            let client = header.source.filter(|_| shared.opts.proxy_protocol_from(peer.ip())).unwrap_or(peer);
            let rest = buf.split_off(header.len.min(buf.len()));
            return Some((Prefixed::new(rest, stream), client));
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no PROXY protocol header within {timeout:?}"),
    };
    shared.metrics.connection_refused(kind, "proxy_protocol");
    tracing::debug!(%peer, error = %why, "connection closed: --proxy-protocol expects a header first");
    None
}

async fn accept_loop<F, Fut>(listener: TcpListener, mut drain: Watch, kind: Listener, shared: Arc<Shared>, handle: F)
where
    F: Fn(TcpStream, SocketAddr, Watch) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let active = shared.metrics.active(kind);
    let max = shared.opts.limits.max_connections;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) if max > 0 && active.get() >= max as i64 => {
                    // Refused before any work: closing at once is cheaper than serving
                    // slowly, and clients retry elsewhere.
                    drop(stream);
                    shared.metrics.connection_refused(kind, "max_connections");
                }
                Ok((stream, _)) if !shared.memory.admits() => {
                    drop(stream);
                    shared.metrics.connection_refused(kind, "memory");
                }
                Ok((stream, client)) => {
                    let _ = stream.set_nodelay(true);
                    let w = drain.clone();
                    let fut = handle(stream, client, w.clone());
                    let active = active.clone();
                    active.inc();
                    tokio::spawn(async move {
                        fut.await;
                        active.dec();
                        drop(w);
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(listener = kind.label(), error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            _ = drain.signaled() => break,
        }
    }
}

/// An HTTPS connection: the TLS handshake, then HTTP/2 or HTTP/1.1 as ALPN says.
///
/// An idle connection costs what its task holds, so the pieces are sized with care: the
/// handshake's state is boxed and freed once done, and what serves the connection
/// afterwards is built by plain functions that move the TLS stream straight into a boxed
/// connection (an async function keeps every argument for its whole life).
async fn serve_https(shared: Arc<Shared>, stream: Inbound, info: ConnInfo, drain: Watch) {
    let Some((tls, info)) = tls_handshake(&shared, stream, info).await else { return };
    serve_tls(shared, tls, info, drain).await;
}

/// The TLS handshake of an HTTPS connection, within `--handshake-timeout`; `info` gains
/// the SNI and the client certificate.
async fn tls_handshake(
    shared: &Shared,
    stream: Inbound,
    mut info: ConnInfo,
) -> Option<(tokio_rustls::server::TlsStream<Inbound>, ConnInfo)> {
    let choice = {
        let cfg = shared.config.load();
        cfg.tables(info.gateway_port).map(|t| TlsChoice {
            tls: Arc::clone(&t.tls),
            by_hello: cfg.chooses_by_hello(t).then(|| shared.config.load_full()),
        })
    };
    let tables = choice?;
    let port = info.gateway_port;
    let handshake = Box::pin(async move {
        match tables.by_hello {
            // Hosts that ask for client certificates have configs of their own, and so do
            // ACME TLS-ALPN-01 validations: read the ClientHello, then take its config.
            Some(cfg) => {
                let acceptor = tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream);
                let start = acceptor.await?;
                let hello = start.client_hello();
                let chosen = cfg.tls_for_hello(port, hello.server_name(), hello.alpn().into_iter().flatten());
                start.into_stream(chosen.unwrap_or(tables.tls)).await
            }
            None => tokio_rustls::TlsAcceptor::from(tables.tls).accept(stream).await,
        }
    });
    let tls = match tokio::time::timeout(shared.opts.timeouts.handshake, handshake).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            shared.metrics.handshake(false);
            tracing::debug!(client = %info.client, error = %e, "TLS handshake failed");
            return None;
        }
        Err(_) => {
            shared.metrics.handshake(false);
            tracing::debug!(client = %info.client, "TLS handshake timed out");
            return None;
        }
    };
    shared.metrics.handshake(true);
    let conn = tls.get_ref().1;
    info.sni = conn.server_name().map(Arc::from);
    info.client_cert = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|c| wharf_model::PeerCertificate::new(c))
        .map(Arc::new);
    Some((tls, info))
}

/// What serves a connection once its TLS handshake is done, boxed: the task that awaits it
/// keeps only the pointer.
fn serve_tls(
    shared: Arc<Shared>,
    mut tls: tokio_rustls::server::TlsStream<Inbound>,
    info: ConnInfo,
    drain: Watch,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    let alpn = tls.get_ref().1.alpn_protocol();
    if alpn == Some(crate::acme::ACME_TLS_ALPN) {
        // A TLS-ALPN-01 validation: the handshake was the answer (RFC 8737 §3).
        shared.metrics.acme_answered(crate::metrics::AcmeChallenge::TlsAlpn01);
        tracing::info!(client = %info.client, sni = ?info.sni, "answered an ACME TLS-ALPN-01 validation");
        return Box::pin(async move {
            let _ = tokio::io::AsyncWriteExt::shutdown(&mut tls).await;
        });
    }
    // HTTP/2 over TLS is negotiated by ALPN (RFC 9113 §3.3); without it, HTTP/1.1.
    if alpn == Some(b"h2") {
        Box::pin(serve_h2(shared, tls, info, drain))
    } else {
        Box::pin(serve_h1(shared, tls, info, drain))
    }
}

/// The HTTPS config of a port, and the whole config when some of its hosts ask for client
/// certificates or an ACME TLS-ALPN-01 challenge is answered (then each ClientHello picks
/// its config).
struct TlsChoice {
    tls: Arc<rustls::ServerConfig>,
    by_hello: Option<Arc<crate::config::CompiledConfig>>,
}

/// A cleartext connection: HTTP/1.1, or HTTP/2 with prior knowledge (h2c), told apart by
/// the first bytes.
fn serve_http<I>(shared: Arc<Shared>, io: I, info: ConnInfo, drain: Watch) -> impl Future<Output = ()> + Send
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = &shared.opts.limits;
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(shared.opts.timeouts.client_idle)
        .keep_alive(true)
        .max_buf_size(limits.max_header_bytes.max(MIN_HEAD_BYTES))
        .max_headers(limits.max_headers);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_header_list_size(header_list_size(limits))
        .keep_alive_interval(Some(H2_KEEPALIVE));
    // HTTP/1.1 times idle connections with its header read timeout; h2c needs this.
    let activity = crate::drain::Activity::new();
    let svc = http_service(&shared, info, &drain, Some(&activity));
    let conn = Box::pin(builder.serve_connection_with_upgrades(TokioIo::new(io), svc).into_owned());
    let max_age = limits.max_connection_age;
    let idle = Some((shared.opts.timeouts.client_idle, activity));
    async move {
        let ended = crate::drain::serve_connection(conn, drain, max_age, false, idle).await;
        count_head_too_large(&shared, ended);
    }
}

/// HTTP/1.1 over TLS.
fn serve_h1<I>(shared: Arc<Shared>, io: I, info: ConnInfo, drain: Watch) -> impl Future<Output = ()> + Send
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = &shared.opts.limits;
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(shared.opts.timeouts.client_idle)
        .keep_alive(true)
        .max_buf_size(limits.max_header_bytes.max(MIN_HEAD_BYTES))
        .max_headers(limits.max_headers);
    let svc = http_service(&shared, info, &drain, None);
    let conn = Box::pin(builder.serve_connection(TokioIo::new(io), svc).with_upgrades());
    let max_age = limits.max_connection_age;
    async move {
        let ended = crate::drain::serve_connection(conn, drain, max_age, false, None).await;
        count_head_too_large(&shared, ended);
    }
}

/// Gives each response header value a buffer of its own. A value read from a backend is a
/// slice of that connection's read buffer (8 KiB or more), and HTTP/2's header compression
/// keeps the values it indexes for the life of the connection: on an idle connection those
/// slices would pin the whole buffer.
fn detach_header_values(headers: &mut http::HeaderMap) {
    for value in headers.values_mut() {
        if let Ok(mut own) = http::HeaderValue::from_bytes(value.as_bytes()) {
            own.set_sensitive(value.is_sensitive());
            *value = own;
        }
    }
}

/// What one request of an HTTP/1.1 (or sniffed cleartext) connection turns into.
type Answer =
    std::pin::Pin<Box<dyn Future<Output = Result<http::Response<proxy::Body>, std::convert::Infallible>> + Send>>;

/// The service of an HTTP/1.1 (or sniffed cleartext) connection. Its future is boxed:
/// hyper keeps a slot the size of the service's future for as long as the connection
/// lives, idle or not, while a boxed one is freed with its response.
/// With `activity`, each request counts as in flight there until its response is ready.
fn http_service(
    shared: &Arc<Shared>,
    info: ConnInfo,
    drain: &Watch,
    activity: Option<&Arc<crate::drain::Activity>>,
) -> impl hyper::service::Service<
    http::Request<hyper::body::Incoming>,
    Response = http::Response<proxy::Body>,
    Error = std::convert::Infallible,
    Future = Answer,
> + Clone {
    let s = Arc::clone(shared);
    let closing = drain.clone();
    let activity = activity.cloned();
    service_fn(move |req: http::Request<hyper::body::Incoming>| -> Answer {
        let http1 = req.version() < http::Version::HTTP_2;
        let busy = activity.as_ref().map(crate::drain::Activity::begin);
        let answer = proxy::handle(Arc::clone(&s), info.clone(), req);
        let closing = closing.clone();
        Box::pin(async move {
            let mut resp = answer.await?;
            drop(busy);
            // While closing, each HTTP/1.1 response asks its client to reconnect (through
            // the Service, to a replica that stays); an upgrade keeps its connection.
            if http1 && closing.is_closing() && resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
                resp.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
            }
            Ok(resp)
        })
    })
}

/// hyper refuses an oversized HTTP/1.1 request head itself (431) and ends the connection
/// with this error; count it with the other refusals.
fn count_head_too_large(shared: &Shared, ended: Result<(), Box<dyn std::error::Error + Send + Sync>>) {
    if let Err(e) = ended {
        if e.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_parse_too_large) {
            shared.metrics.rejected(crate::reasons::Rejected::HeaderTooLarge);
        }
    }
}

fn header_list_size(limits: &crate::Limits) -> u32 {
    u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX)
}

/// HTTP/2 negotiated by ALPN: no protocol sniffing, and the responses of many streams
/// share TLS records and system calls (see [`Coalesce`]).
fn serve_h2<I>(shared: Arc<Shared>, io: I, info: ConnInfo, drain: Watch) -> impl Future<Output = ()> + Send
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_header_list_size(header_list_size(&shared.opts.limits))
        .keep_alive_interval(Some(H2_KEEPALIVE));
    let s = Arc::clone(&shared);
    let activity = crate::drain::Activity::new();
    let counted = Arc::clone(&activity);
    let svc = service_fn(move |req| {
        let busy = counted.begin();
        let answer = proxy::handle(Arc::clone(&s), info.clone(), req);
        async move {
            let mut resp = answer.await?;
            drop(busy);
            detach_header_values(resp.headers_mut());
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    let conn = Box::pin(builder.serve_connection(TokioIo::new(Coalesce::new(io)), svc));
    let max_age = shared.opts.limits.max_connection_age;
    let idle = Some((shared.opts.timeouts.client_idle, activity));
    async move {
        let _ = crate::drain::serve_connection(conn, drain, max_age, true, idle).await;
    }
}

#[cfg(test)]
mod tests {
    use super::detach_header_values;

    #[test]
    fn response_header_values_stop_sharing_the_backends_read_buffer() {
        // What hyper hands over: values that are slices of the connection's read buffer.
        let read_buffer = bytes::Bytes::from(vec![b'x'; 8192]);
        let range = read_buffer.as_ptr() as usize..read_buffer.as_ptr() as usize + read_buffer.len();
        let mut headers = http::HeaderMap::new();
        let mut token = http::HeaderValue::from_maybe_shared(read_buffer.slice(0..10)).unwrap();
        token.set_sensitive(true);
        headers.insert("server", http::HeaderValue::from_maybe_shared(read_buffer.slice(10..20)).unwrap());
        headers.append("set-cookie", token);
        detach_header_values(&mut headers);
        for value in headers.values() {
            assert!(!range.contains(&(value.as_bytes().as_ptr() as usize)), "still a slice of the read buffer");
            assert_eq!(value.as_bytes(), b"xxxxxxxxxx");
        }
        assert!(headers["set-cookie"].is_sensitive());
        assert!(!headers["server"].is_sensitive());
    }
}
