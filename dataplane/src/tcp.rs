//! Plain TCP: each listener port forwards to the backends its TCP route names, each
//! connection to one chosen by weight.

use std::sync::Arc;

use tokio::net::TcpStream;

use crate::metrics::Listener;
use crate::upstream::{connect_any, relay};
use crate::Shared;

/// Serves one TCP connection that arrived on gateway port `route_port`, of the edge
/// listeners (`gateway_port` `None`) or a Gateway port.
pub async fn serve(
    shared: Arc<Shared>,
    mut stream: TcpStream,
    client: std::net::SocketAddr,
    route_port: u16,
    gateway_port: Option<std::net::SocketAddr>,
) {
    let forward = shared.config.load().tables(gateway_port).and_then(|t| t.tcp.get(&route_port).cloned());
    let Some(forward) = forward else {
        tracing::info!(%client, port = route_port, "tcp: no route for this port; closing");
        return;
    };
    let upstream = match forward.pick() {
        Ok(u) => u,
        Err(e) => {
            shared.metrics.upstream_error(e);
            tracing::warn!(%client, port = route_port, reason = e.reason(), "tcp: no backend takes this connection; closing");
            return;
        }
    };
    let (mut up, ep) = match connect_any(upstream, &shared.dialer, client).await {
        Ok(c) => c,
        Err(e) => {
            shared.metrics.upstream_error(e);
            tracing::warn!(%client, cluster = %upstream.id, reason = e.reason(), "tcp: upstream unreachable");
            return;
        }
    };
    let _ = stream.set_nodelay(true);
    let _in_flight = ep.start();
    let (sent, received) = relay(&shared.metrics, Listener::Tcp, &mut stream, &mut up, 0).await;
    tracing::debug!(%client, upstream = %ep.addr, sent, received, "tcp connection done");
}
