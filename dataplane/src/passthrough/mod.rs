//! TLS by SNI: read the ClientHello without answering it, route by SNI, then relay the
//! bytes untouched (passthrough) or terminate TLS here and relay the plain bytes.

pub mod client_hello;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wharf_model::PortProtocol;

use crate::metrics::Listener;
use crate::prefixed::{Inbound, Prefixed};
use crate::upstream::{connect_any, relay, Upstream};
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

/// Serves one connection of a TLS port, from the edge listener (`gateway_port` `None`) or a
/// Gateway port.
pub async fn serve(shared: Arc<Shared>, mut stream: Inbound, client: SocketAddr, gateway_port: Option<SocketAddr>) {
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
    let found = {
        let cfg = shared.config.load();
        // The edge Gateway's TLSRoutes first, then the Ingress passthrough hosts.
        let tables = [cfg.edge_gateway(gateway_port, PortProtocol::Passthrough), cfg.tables(gateway_port)];
        sni.as_deref().and_then(|s| {
            tables
                .into_iter()
                .flatten()
                .find_map(|t| Some((Arc::clone(t.passthrough.lookup(s)?), t.tls_stream.clone())))
        })
    };
    let sni = sni.as_deref().unwrap_or("-");
    let Some((route, tls_stream)) = found else {
        shared.metrics.passthrough_unknown_sni.inc();
        tracing::info!(%client, sni, "passthrough: no route for this SNI; closing");
        return;
    };
    let upstream = match route.forward.pick() {
        Ok(u) => Arc::clone(u),
        Err(e) => {
            shared.metrics.upstream_error(e);
            tracing::warn!(%client, sni, reason = e.reason(), "tls: no backend takes this connection; closing");
            return;
        }
    };
    match (route.terminate, tls_stream) {
        (true, Some(config)) => terminate(&shared, Prefixed::new(buf, stream), config, &upstream, client, sni).await,
        (true, None) => tracing::warn!(%client, sni, "tls: no certificate to terminate this connection with; closing"),
        (false, _) => pass(&shared, stream, &buf, &upstream, client, sni).await,
    }
}

/// Relays the connection untouched, starting with the ClientHello already read.
async fn pass(shared: &Shared, mut stream: Inbound, hello: &[u8], upstream: &Upstream, client: SocketAddr, sni: &str) {
    let (mut up, ep) = match connect_any(upstream, &shared.dialer, client).await {
        Ok(c) => c,
        Err(e) => {
            shared.metrics.upstream_error(e);
            tracing::warn!(%client, sni, cluster = %upstream.id, reason = e.reason(), "passthrough: upstream unreachable");
            return;
        }
    };
    if up.write_all(hello).await.is_err() {
        return;
    }
    let _in_flight = ep.start();
    let (sent, received) =
        relay(&shared.metrics, Listener::Passthrough, &mut stream, &mut up, hello.len() as u64).await;
    tracing::debug!(%client, sni, upstream = %ep.addr, sent, received, "passthrough connection done");
}

/// Completes the TLS handshake here and relays the plain bytes.
async fn terminate(
    shared: &Shared,
    stream: Prefixed<Inbound>,
    config: Arc<ServerConfig>,
    upstream: &Upstream,
    client: SocketAddr,
    sni: &str,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let mut tls = match tokio::time::timeout(shared.opts.timeouts.handshake, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => {
            shared.metrics.handshake(true);
            tls
        }
        Ok(Err(e)) => {
            shared.metrics.handshake(false);
            tracing::debug!(%client, sni, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            shared.metrics.handshake(false);
            tracing::debug!(%client, sni, "TLS handshake timed out");
            return;
        }
    };
    let (mut up, ep) = match connect_any(upstream, &shared.dialer, client).await {
        Ok(c) => c,
        Err(e) => {
            shared.metrics.upstream_error(e);
            tracing::warn!(%client, sni, cluster = %upstream.id, reason = e.reason(), "tls: upstream unreachable");
            return;
        }
    };
    let _in_flight = ep.start();
    let (sent, received) = relay(&shared.metrics, Listener::Passthrough, &mut tls, &mut up, 0).await;
    tracing::debug!(%client, sni, upstream = %ep.addr, sent, received, "terminated TLS connection done");
}

async fn peek(stream: &mut Inbound, buf: &mut Vec<u8>) -> Result<Option<String>, PeekError> {
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
