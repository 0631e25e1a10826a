//! Binding the listeners and their accept loops. [`gateway_ports`] opens and closes the
//! Gateway ports as configs come and go; [`connection`] serves one accepted connection
//! (TLS handshake, HTTP/1.1 or HTTP/2).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::drain::Watch;
use crate::hbone::inbound::OwnPorts;
use crate::metrics::Listener;
use crate::prefixed::{Inbound, Prefixed};
use crate::proxy::{ConnInfo, Scheme};
use crate::{admin, passthrough, proxy_protocol, tcp, Gateway, Shared};

mod connection;
mod gateway_ports;

use connection::{serve_http, serve_https};
use gateway_ports::serve_gateway_ports;

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
                        proxy_port: None,
                        proxy_host: None,
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
                        proxy_port: None,
                        proxy_host: None,
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

/// A connection of an edge listener, after its PROXY protocol header when
/// `--proxy-protocol` asks for one, and the client's address: the header's source when the
/// peer is a trusted proxy, else the peer. A connection without a valid header in time is
/// closed.
pub(super) async fn inbound(
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

pub(super) async fn accept_loop<F, Fut>(
    listener: TcpListener,
    mut drain: Watch,
    kind: Listener,
    shared: Arc<Shared>,
    handle: F,
) where
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
