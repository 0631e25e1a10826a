//! The HBONE inbound side (east-west role): mutual TLS with the gateway's identity, client
//! identities from our trust domain only (or those the operator lists), CONNECT only; 200
//! only once the upstream connection is up; half-closes passed on.
//!
//! The inbound is no relay: a tunnel goes only where the mesh would send it, to a workload
//! this gateway fronts. That is one of the gateway's own serving listeners at the address
//! the peer dialed, an endpoint the current config routes to (never a loopback, link-local
//! or unspecified one), or a network the operator lists. The admin and HBONE ports of the
//! gateway's own addresses are never reached, whatever the config says.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
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
use wharf_model::{Identity, IpNet};

use super::{CONNECTION_WINDOW, MAX_FRAME, PING_EVERY, PING_TIMEOUT, RESERVED_PORTS, STREAM_WINDOW, TLS_BUFFER_LIMIT};
use crate::drain::Watch;
use crate::Shared;

/// What the operator allows the inbound beyond its defaults.
#[derive(Debug, Clone, Default)]
pub struct InboundOptions {
    /// Networks tunnels may go to besides the gateway's own listeners and the endpoints
    /// its routes reach (a loopback network only when listed here).
    pub allowed_destinations: Vec<IpNet>,
    /// The peers that may open tunnels; any identity of the trust domain when empty.
    pub allowed_peers: Vec<PeerPattern>,
}

impl InboundOptions {
    /// Whether `peer` may open tunnels.
    pub fn admits_peer(&self, peer: &Identity) -> bool {
        self.allowed_peers.is_empty() || self.allowed_peers.iter().any(|p| p.matches(peer))
    }
}

/// A SPIFFE identity in which the namespace or the service account may be `*` (any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerPattern {
    trust_domain: String,
    namespace: Option<String>,
    service_account: Option<String>,
}

impl PeerPattern {
    /// Parses `spiffe://TRUST-DOMAIN/ns/NAMESPACE/sa/SERVICE-ACCOUNT`, `*` standing for any
    /// namespace or service account.
    pub fn parse(s: &str) -> Result<PeerPattern, String> {
        let err = || {
            format!("{s:?} is not spiffe://TRUST-DOMAIN/ns/NAMESPACE/sa/SERVICE-ACCOUNT (`*` for any namespace or service account)")
        };
        let rest = s.trim().strip_prefix("spiffe://").ok_or_else(err)?;
        let any = |part: &str| (part != "*").then(|| part.to_owned());
        match rest.split('/').collect::<Vec<_>>().as_slice() {
            [td, "ns", ns, "sa", sa] if !td.is_empty() && *td != "*" && !ns.is_empty() && !sa.is_empty() => {
                Ok(PeerPattern { trust_domain: (*td).to_owned(), namespace: any(ns), service_account: any(sa) })
            }
            _ => Err(err()),
        }
    }

    /// Whether `id` is one this pattern names.
    pub fn matches(&self, id: &Identity) -> bool {
        id.trust_domain == self.trust_domain
            && self.namespace.as_ref().is_none_or(|ns| *ns == id.namespace)
            && self.service_account.as_ref().is_none_or(|sa| *sa == id.service_account)
    }
}

/// The ports of the gateway's own sockets.
#[derive(Debug, Clone, Default)]
pub struct OwnPorts {
    /// The listeners that serve traffic (HTTP, HTTPS, passthrough, TCP): a tunnel to one
    /// of them at the address the peer dialed reaches the gateway itself.
    pub serving: Vec<u16>,
    /// The admin and HBONE listeners: never reached through a tunnel or a route on a
    /// local address.
    pub private: Vec<u16>,
}

impl OwnPorts {
    /// Whether `addr` is one of the gateway's private sockets: a private port on a
    /// loopback or unspecified address, or on `local` (the gateway's own address).
    pub fn is_private(&self, addr: SocketAddr, local: Option<IpAddr>) -> bool {
        let ip = addr.ip().to_canonical();
        let own = ip.is_loopback() || ip.is_unspecified() || local.is_some_and(|l| l.to_canonical() == ip);
        own && self.private.contains(&addr.port())
    }

    /// Whether `stream`, connected to `addr`, reached a private socket of the gateway on any
    /// of its addresses (the pod IP too): a connection to an own address has that address
    /// as its source. One `getsockname`, on the private ports only.
    pub fn reached_private(&self, addr: SocketAddr, stream: &TcpStream) -> bool {
        self.private.contains(&addr.port()) && self.is_private(addr, stream.local_addr().ok().map(|l| l.ip()))
    }
}

/// Serves one inbound connection.
pub async fn serve_conn(stream: TcpStream, client: SocketAddr, shared: Arc<Shared>, drain: Watch) {
    let Some(identity) = shared.opts.mesh.clone() else { return };
    let Some(certs) = identity.load() else {
        tracing::warn!(%client, "HBONE inbound connection refused: no mesh identity loaded");
        return;
    };
    // The address the peer dialed: a tunnel to one of our listeners there reaches us.
    let Ok(dialed) = stream.local_addr().map(|a| a.ip().to_canonical()) else { return };
    let metrics = shared.metrics.clone();
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
    let sans = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| uri_sans(c.as_ref()));
    let sans = sans.unwrap_or_default();
    // The verifier admitted only certificates with an identity of the trust domain.
    let admitted = sans.iter().filter_map(|u| Identity::parse(u).ok()).any(|id| shared.opts.hbone.admits_peer(&id));
    let peer = sans.join(",");
    if !admitted {
        tracing::info!(%client, %peer, "HBONE inbound: this peer may not open tunnels (--hbone-allow-peer); every CONNECT is answered 401");
    }
    let svc = service_fn(move |req| {
        let span = tracing::info_span!("hbone_inbound", %client, peer = %peer, authority = tracing::field::Empty);
        let shared = Arc::clone(&shared);
        let target = admitted.then_some(()).ok_or(Refused::PeerDenied).and_then(|()| {
            let target = connect_target(req.method(), req.uri())?;
            // The ports are known once the listeners are bound, before any connection.
            let own = shared.dialer.own.get().ok_or(Refused::UnknownDestination)?;
            let at = Destination { dialed, own };
            at.admits(target, &shared.opts.hbone.allowed_destinations, |a| shared.config.load().fronts(a))?;
            Ok(target)
        });
        async move { Ok::<_, Infallible>(connect(req, target, &shared).instrument(span).await) }
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
    let _ = crate::drain::serve_connection(Box::pin(conn), drain, None, true, None).await;
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
    /// The gateway's own admin or HBONE socket.
    PrivatePort,
    /// No workload this gateway fronts is at that address.
    UnknownDestination,
    /// The peer's identity is not one `--hbone-allow-peer` lists.
    PeerDenied,
}

impl Refused {
    /// The metric label.
    pub fn reason(self) -> &'static str {
        match self {
            Refused::NotConnect => "not_connect",
            Refused::BadAuthority => "bad_authority",
            Refused::ReservedPort => "reserved_port",
            Refused::PrivatePort => "private_port",
            Refused::UnknownDestination => "unknown_destination",
            Refused::PeerDenied => "peer_denied",
        }
    }

    /// The status the client gets (as ztunnel: 401 for a peer that may not, 503 for a
    /// destination that is not served).
    pub fn status(self) -> StatusCode {
        match self {
            Refused::NotConnect | Refused::BadAuthority => StatusCode::BAD_REQUEST,
            Refused::ReservedPort | Refused::PrivatePort | Refused::UnknownDestination => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Refused::PeerDenied => StatusCode::UNAUTHORIZED,
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

/// Where a tunnel of one connection may go.
#[derive(Debug, Clone, Copy)]
pub struct Destination<'a> {
    /// The address the peer dialed (the gateway's own).
    pub dialed: IpAddr,
    /// The gateway's own ports.
    pub own: &'a OwnPorts,
}

impl Destination<'_> {
    /// Whether a tunnel may go to `target`: never to a private port of the gateway; to a
    /// serving listener at the dialed address, a network of `allowed`, or an endpoint the
    /// config routes to (`fronts`) that is no loopback, link-local, multicast or
    /// unspecified address.
    pub fn admits(
        &self,
        target: SocketAddr,
        allowed: &[IpNet],
        fronts: impl FnOnce(SocketAddr) -> bool,
    ) -> Result<(), Refused> {
        let ip = target.ip().to_canonical();
        if self.own.is_private(target, Some(self.dialed)) {
            return Err(Refused::PrivatePort);
        }
        if ip == self.dialed && self.own.serving.contains(&target.port()) {
            return Ok(());
        }
        if allowed.iter().any(|n| n.contains(ip)) {
            return Ok(());
        }
        if wharf_model::is_workload_address(ip) && fronts(SocketAddr::new(ip, target.port())) {
            return Ok(());
        }
        Err(Refused::UnknownDestination)
    }
}

async fn connect(
    req: Request<Incoming>,
    target: Result<SocketAddr, Refused>,
    shared: &Shared,
) -> Response<Empty<Bytes>> {
    let metrics = &shared.metrics;
    let target = match target {
        Ok(t) => t,
        Err(refused) => {
            metrics.hbone_tunnel("inbound", refused.reason());
            if refused != Refused::NotConnect && refused != Refused::BadAuthority {
                tracing::info!(authority = %req.uri(), reason = refused.reason(), "HBONE inbound: CONNECT refused");
            }
            return status(refused.status());
        }
    };
    tracing::Span::current().record("authority", tracing::field::display(target));
    let upstream = match tokio::time::timeout(shared.opts.timeouts.connect, TcpStream::connect(target)).await {
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
    if shared.dialer.own.get().is_some_and(|own| own.reached_private(target, &upstream)) {
        metrics.hbone_tunnel("inbound", Refused::PrivatePort.reason());
        tracing::info!(authority = %req.uri(), reason = Refused::PrivatePort.reason(), "HBONE inbound: CONNECT refused");
        return status(Refused::PrivatePort.status());
    }
    let _ = upstream.set_nodelay(true);
    metrics.hbone_tunnel("inbound", "ok");
    let on_upgrade = hyper::upgrade::on(req);
    let span = tracing::Span::current();
    let metrics = metrics.clone();
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
        assert_eq!(Refused::PrivatePort.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(Refused::UnknownDestination.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(Refused::PeerDenied.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(Refused::BadAuthority.status(), StatusCode::BAD_REQUEST);
        assert_eq!(Refused::NotConnect.status(), StatusCode::BAD_REQUEST);
        let all = [
            Refused::NotConnect,
            Refused::BadAuthority,
            Refused::ReservedPort,
            Refused::PrivatePort,
            Refused::UnknownDestination,
            Refused::PeerDenied,
        ];
        assert_eq!(
            all.map(Refused::reason),
            ["not_connect", "bad_authority", "reserved_port", "private_port", "unknown_destination", "peer_denied"]
        );
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_tunnel_goes_only_to_what_the_gateway_fronts() {
        let own = OwnPorts { serving: vec![8080, 8443], private: vec![15021, 15009] };
        let at = Destination { dialed: "10.0.0.5".parse().unwrap(), own: &own };
        let endpoints =
            [addr("10.0.0.9:3000"), addr("127.0.0.1:3000"), addr("169.254.169.254:80"), addr("10.0.0.5:15021")];
        let fronts = |a: SocketAddr| endpoints.contains(&a);
        let admits = |t: &str, allowed: &[IpNet]| at.admits(addr(t), allowed, fronts);
        // The gateway's own serving listeners, at the address the peer dialed.
        assert_eq!(admits("10.0.0.5:8443", &[]), Ok(()));
        assert_eq!(admits("[::ffff:10.0.0.5]:8080", &[]), Ok(()));
        assert_eq!(admits("10.0.0.6:8443", &[]), Err(Refused::UnknownDestination), "another address's 8443");
        assert_eq!(admits("127.0.0.1:8443", &[]), Err(Refused::UnknownDestination), "not the dialed address");
        // Endpoints the config routes to, unless they are local or special.
        assert_eq!(admits("10.0.0.9:3000", &[]), Ok(()));
        assert_eq!(admits("10.0.0.9:3001", &[]), Err(Refused::UnknownDestination), "another port of a fronted IP");
        assert_eq!(admits("127.0.0.1:3000", &[]), Err(Refused::UnknownDestination), "a loopback endpoint");
        assert_eq!(admits("169.254.169.254:80", &[]), Err(Refused::UnknownDestination), "cloud metadata");
        // The admin and HBONE ports of the gateway's own addresses, never.
        for private in ["10.0.0.5:15021", "127.0.0.1:15021", "0.0.0.0:15009", "[::1]:15021", "[::]:15009"] {
            assert_eq!(admits(private, &[]), Err(Refused::PrivatePort), "{private}");
            let all = [IpNet::parse("0.0.0.0/0").unwrap(), IpNet::parse("::/0").unwrap()];
            assert_eq!(admits(private, &all), Err(Refused::PrivatePort), "{private}, whatever is allowed");
        }
        assert_eq!(admits("10.0.0.9:15021", &[]), Err(Refused::UnknownDestination), "another pod's 15021 is not ours");
        // Networks the operator lists.
        let backends = [IpNet::parse("198.18.0.0/24").unwrap()];
        assert_eq!(admits("198.18.0.2:20001", &backends), Ok(()));
        assert_eq!(admits("198.18.1.2:20001", &backends), Err(Refused::UnknownDestination));
        assert_eq!(admits("127.0.0.1:9000", &[IpNet::parse("127.0.0.1").unwrap()]), Ok(()), "loopback when listed");
        assert!(!own.is_private(addr("10.0.0.5:8080"), Some(at.dialed)));
        assert!(own.is_private(addr("10.0.0.5:15009"), Some(at.dialed)));
        assert!(!own.is_private(addr("10.0.0.5:15009"), None));
    }

    #[test]
    fn peer_patterns_name_a_trust_domain_and_maybe_a_namespace_and_service_account() {
        let id = |s: &str| Identity::parse(s).unwrap();
        let p = |s: &str| PeerPattern::parse(s).unwrap();
        let client = id("spiffe://cluster.local/ns/shop/sa/web");
        assert!(p("spiffe://cluster.local/ns/shop/sa/web").matches(&client));
        assert!(p("spiffe://cluster.local/ns/shop/sa/*").matches(&client));
        assert!(p("spiffe://cluster.local/ns/*/sa/web").matches(&client));
        assert!(p("spiffe://cluster.local/ns/*/sa/*").matches(&client));
        assert!(!p("spiffe://cluster.local/ns/shop/sa/api").matches(&client));
        assert!(!p("spiffe://cluster.local/ns/blog/sa/*").matches(&client));
        assert!(!p("spiffe://other.local/ns/*/sa/*").matches(&client));
        for bad in [
            "cluster.local/ns/a/sa/b",
            "spiffe://*/ns/a/sa/b",
            "spiffe://td/ns/a",
            "spiffe://td/ns//sa/b",
            "spiffe://td/sa/a/ns/b",
        ] {
            assert!(PeerPattern::parse(bad).is_err(), "{bad}");
        }
        let open = InboundOptions::default();
        assert!(open.admits_peer(&client), "no list: the trust domain (the verifier's check) is enough");
        let only_gw = InboundOptions { allowed_peers: vec![p("spiffe://cluster.local/ns/istio-system/sa/*")], ..open };
        assert!(!only_gw.admits_peer(&client));
        assert!(only_gw.admits_peer(&id("spiffe://cluster.local/ns/istio-system/sa/eastwest")));
    }
}
