//! The Gateway ports: bound, served and closed as configs come and go.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use wharf_model::PortProtocol;

use crate::drain::Watch;
use crate::metrics::Listener;
use crate::prefixed::Prefixed;
use crate::proxy::{ConnInfo, Scheme};
use crate::{passthrough, tcp, Shared};

use super::accept_loop;
use super::connection::{serve_http, serve_https};

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
pub(super) async fn serve_gateway_ports(shared: Arc<Shared>, mut drain: Watch) {
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
                    proxy_port: None,
                    proxy_host: None,
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
                    proxy_port: None,
                    proxy_host: None,
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
