//! TLS passthrough: read the ClientHello without answering it, route by SNI, relay bytes.

pub mod client_hello;

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wharf_model::PortProtocol;

use crate::metrics::Listener;
use crate::proxy::upstream::connect_any;
use crate::relay::relay;
use crate::Shared;
use client_hello::{parse_sni, ParseError, MAX_CLIENT_HELLO};

/// Why a passthrough connection was closed without being relayed.
#[derive(Debug, thiserror::Error)]
enum PeekError {
    #[error("client sent no ClientHello within {0:?}")]
    Timeout(Duration),
    #[error("client closed before finishing its ClientHello")]
    Closed,
    #[error("{0}")]
    Parse(ParseError),
    #[error("reading the ClientHello failed: {0}")]
    Io(std::io::Error),
}

/// Serves one passthrough connection, from the edge listener (`gateway_port` `None`) or a
/// Gateway port.
pub async fn serve(
    shared: Arc<Shared>,
    mut stream: TcpStream,
    client: std::net::SocketAddr,
    gateway_port: Option<std::net::SocketAddr>,
) {
    let timeout = shared.opts.timeouts.handshake;
    let mut buf = Vec::with_capacity(2048);
    let sni = match tokio::time::timeout(timeout, peek(&mut stream, &mut buf)).await {
        Ok(Ok(sni)) => sni,
        Ok(Err(e)) => {
            tracing::debug!(%client, error = %e, "passthrough connection closed");
            return;
        }
        Err(_) => {
            tracing::debug!(%client, error = %PeekError::Timeout(timeout), "passthrough connection closed");
            return;
        }
    };
    let upstream = {
        let cfg = shared.config.load();
        let table = cfg.tables(gateway_port).map(|t| &t.passthrough);
        // The edge Gateway's TLSRoutes first, then the Ingress passthrough hosts.
        let first = cfg.edge_gateway(gateway_port, PortProtocol::Passthrough).map(|t| &t.passthrough);
        sni.as_deref().and_then(|s| first.and_then(|f| f.lookup(s)).or_else(|| table?.lookup(s))).cloned()
    };
    let Some(upstream) = upstream else {
        shared.metrics.passthrough_unknown_sni.inc();
        tracing::info!(%client, sni = sni.as_deref().unwrap_or("-"), "passthrough: no route for this SNI; closing");
        return;
    };
    let (mut up, ep) = match connect_any(&upstream, &shared.dialer, client).await {
        Ok(c) => c,
        Err(e) => {
            shared.metrics.upstream_error(e);
            tracing::warn!(%client, sni = sni.as_deref().unwrap_or("-"), cluster = %upstream.id, reason = e.reason(), "passthrough: upstream unreachable");
            return;
        }
    };
    if up.write_all(&buf).await.is_err() {
        return;
    }
    let _in_flight = ep.start();
    let (sent, received) = relay(&shared.metrics, Listener::Passthrough, &mut stream, &mut up, buf.len() as u64).await;
    tracing::debug!(%client, sni = sni.as_deref().unwrap_or("-"), upstream = %ep.addr, sent, received, "passthrough connection done");
}

async fn peek(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<Option<String>, PeekError> {
    loop {
        if stream.read_buf(buf).await.map_err(PeekError::Io)? == 0 {
            return Err(PeekError::Closed);
        }
        match parse_sni(buf) {
            Ok(sni) => return Ok(sni),
            Err(ParseError::Incomplete) if buf.len() < MAX_CLIENT_HELLO => {}
            Err(e) => return Err(PeekError::Parse(e)),
        }
    }
}
