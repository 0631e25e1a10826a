//! The HBONE inbound side (east-west role): mutual TLS with the gateway's identity, client
//! identities from our trust domain only, CONNECT only; 200 only once the upstream
//! connection is up; half-closes passed on.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tracing::Instrument;
use wharf_model::identity::uri_sans;

use super::certs::MeshIdentity;
use super::{CONNECTION_WINDOW, MAX_FRAME, PING_EVERY, PING_TIMEOUT, RESERVED_PORTS, STREAM_WINDOW, TLS_BUFFER_LIMIT};
use crate::drain::Watch;
use crate::metrics::Metrics;

/// Serves one inbound connection.
pub async fn serve_conn(
    stream: TcpStream,
    client: SocketAddr,
    identity: Arc<MeshIdentity>,
    connect_timeout: Duration,
    metrics: Metrics,
    drain: Watch,
) {
    let Some(certs) = identity.load() else {
        tracing::warn!(%client, "HBONE inbound connection refused: no mesh identity loaded");
        return;
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&certs.server_config));
    let mut tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            metrics.hbone_tunnel("inbound", "tls");
            tracing::info!(%client, error = %e, "HBONE inbound handshake refused");
            return;
        }
        Err(_) => return,
    };
    tls.get_mut().1.set_buffer_limit(Some(TLS_BUFFER_LIMIT));
    let peer = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| uri_sans(c.as_ref()).join(","))
        .unwrap_or_default();
    let svc = service_fn(move |req| {
        let metrics = metrics.clone();
        let span = tracing::info_span!("hbone_inbound", %client, peer = %peer, authority = tracing::field::Empty);
        async move { Ok::<_, Infallible>(connect(req, connect_timeout, metrics).instrument(span).await) }
    });
    let conn = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME)
        .max_concurrent_streams(200)
        .max_header_list_size(64 * 1024)
        .keep_alive_interval(PING_EVERY)
        .keep_alive_timeout(PING_TIMEOUT)
        .serve_connection(TokioIo::new(tls), svc);
    let _ = crate::drain::serve_connection(Box::pin(conn), drain, None, true).await;
}

fn status(code: StatusCode) -> Response<Empty<Bytes>> {
    let mut r = Response::new(Empty::new());
    *r.status_mut() = code;
    r
}

/// Why a CONNECT request is refused before any connection is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not a CONNECT request.
    NotConnect,
    /// The authority is not an `IP:port` (HBONE names a workload address, never a host name).
    BadAuthority,
    /// The port is one of ztunnel's own ([`RESERVED_PORTS`]).
    ReservedPort,
}

impl Refused {
    /// The metric label.
    pub fn reason(self) -> &'static str {
        match self {
            Refused::NotConnect => "not_connect",
            Refused::BadAuthority => "bad_authority",
            Refused::ReservedPort => "reserved_port",
        }
    }

    /// The status the client gets.
    pub fn status(self) -> StatusCode {
        match self {
            Refused::NotConnect | Refused::BadAuthority => StatusCode::BAD_REQUEST,
            Refused::ReservedPort => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// The address a CONNECT request asks for: its target in authority form (RFC 9113 §8.5:
/// no scheme, no path), an `IP:port` that is not a reserved port.
pub fn connect_target(method: &Method, uri: &http::Uri) -> Result<SocketAddr, Refused> {
    if method != Method::CONNECT {
        return Err(Refused::NotConnect);
    }
    if uri.scheme().is_some() || uri.path_and_query().is_some() {
        return Err(Refused::BadAuthority);
    }
    let target = uri.authority().and_then(|a| a.as_str().parse::<SocketAddr>().ok()).ok_or(Refused::BadAuthority)?;
    if RESERVED_PORTS.contains(&target.port()) {
        return Err(Refused::ReservedPort);
    }
    Ok(target)
}

async fn connect(req: Request<Incoming>, connect_timeout: Duration, metrics: Metrics) -> Response<Empty<Bytes>> {
    let target = match connect_target(req.method(), req.uri()) {
        Ok(t) => t,
        Err(refused) => {
            metrics.hbone_tunnel("inbound", refused.reason());
            return status(refused.status());
        }
    };
    tracing::Span::current().record("authority", tracing::field::display(target));
    let upstream = match tokio::time::timeout(connect_timeout, TcpStream::connect(target)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            metrics.hbone_tunnel("inbound", "upstream_refused");
            tracing::info!(error = %e, "HBONE inbound: upstream connect failed");
            return status(StatusCode::SERVICE_UNAVAILABLE);
        }
        Err(_) => {
            metrics.hbone_tunnel("inbound", "upstream_timeout");
            return status(StatusCode::SERVICE_UNAVAILABLE);
        }
    };
    let _ = upstream.set_nodelay(true);
    metrics.hbone_tunnel("inbound", "ok");
    let on_upgrade = hyper::upgrade::on(req);
    let span = tracing::Span::current();
    tokio::spawn(
        async move {
            let Ok(tunnel) = on_upgrade.await else { return };
            let mut tunnel = TokioIo::new(tunnel);
            let mut upstream = upstream;
            metrics.hbone_active.inc();
            let (to_up, to_down) = crate::relay::copy(&mut tunnel, &mut upstream).await.unwrap_or((0, 0));
            metrics.hbone_active.dec();
            metrics.hbone_bytes("inbound", to_up, to_down);
            tracing::debug!(to_up, to_down, "HBONE inbound tunnel closed");
        }
        .instrument(span),
    );
    status(StatusCode::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_targets_are_ip_and_port_outside_ztunnels_own() {
        let t = |m: Method, uri: &str| connect_target(&m, &uri.parse::<http::Uri>().unwrap());
        assert_eq!(t(Method::CONNECT, "10.1.2.3:8080"), Ok(SocketAddr::from(([10, 1, 2, 3], 8080))));
        assert_eq!(t(Method::CONNECT, "[fd00::7]:443"), Ok("[fd00::7]:443".parse().unwrap()));
        assert_eq!(t(Method::GET, "10.1.2.3:8080"), Err(Refused::NotConnect));
        for bad in ["web.default.svc:80", "10.1.2.3", "/10.1.2.3:80", "http://10.1.2.3:80/", "10.1.2.3:99999"] {
            assert_eq!(t(Method::CONNECT, bad), Err(Refused::BadAuthority), "{bad}");
        }
        for port in RESERVED_PORTS {
            assert_eq!(t(Method::CONNECT, &format!("10.1.2.3:{port}")), Err(Refused::ReservedPort), "{port}");
        }
        assert_eq!(Refused::ReservedPort.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(Refused::BadAuthority.status(), StatusCode::BAD_REQUEST);
        assert_eq!(Refused::NotConnect.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            [Refused::NotConnect, Refused::BadAuthority, Refused::ReservedPort].map(Refused::reason),
            ["not_connect", "bad_authority", "reserved_port"]
        );
    }
}
