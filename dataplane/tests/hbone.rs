//! HBONE: Wharf's client against Wharf's inbound over real sockets, mutual TLS with SPIFFE
//! certificates from a test CA, and HTTP/2 CONNECT.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wharf_dataplane::drain;
use wharf_dataplane::hbone::inbound::{InboundOptions, PeerPattern};
use wharf_dataplane::hbone::{HboneClient, HboneError, MeshIdentity};
use wharf_dataplane::testing::TestCa;
use wharf_dataplane::{Gateway, ListenerAddrs, Metrics, Options};
use wharf_model::{Hbone, Identity, IpNet, PathMatch, TcpRoute};

const GATEWAY: &str = "spiffe://cluster.local/ns/wharf/sa/gateway";
const BACKEND: &str = "spiffe://cluster.local/ns/app/sa/backend";

/// An HBONE inbound presenting `id`, standing in for the backends' ztunnel: the operator
/// lets it forward to loopback, where the tests' backends listen.
async fn inbound(ca: &TestCa, id: &str) -> (Gateway, SocketAddr) {
    let mesh = Arc::new(MeshIdentity::new("cluster.local"));
    mesh.set(ca.mesh_certs(id, "cluster.local"));
    let hbone = InboundOptions { allowed_destinations: vec![IpNet::parse("127.0.0.1").unwrap()], ..Default::default() };
    let gw = Gateway::new(Options { mesh: Some(mesh), access_log: false, hbone, ..Options::default() }).unwrap();
    let bound = gw.bind(&ListenerAddrs { hbone: loopback(), ..Default::default() }).await.unwrap();
    let addr = bound.hbone_addr().unwrap();
    let (signal, watch) = drain::channel();
    tokio::spawn(bound.serve(gw.clone(), watch));
    std::mem::forget(signal);
    (gw, addr)
}

fn client(ca: &TestCa, id: &str, td: &str) -> (Arc<HboneClient>, Arc<MeshIdentity>) {
    let mesh = Arc::new(MeshIdentity::new(td));
    mesh.set(ca.mesh_certs(id, td));
    (HboneClient::new(Arc::clone(&mesh), Duration::from_secs(5), Metrics::new()), mesh)
}

fn target(dial: SocketAddr, id: &str, to: SocketAddr) -> Hbone {
    Hbone { dial, identity: Identity::parse(id).unwrap(), authority: to.to_string() }
}

async fn round_trip<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(t: &mut T, msg: &[u8]) -> Vec<u8> {
    t.write_all(msg).await.unwrap();
    let mut got = vec![0u8; msg.len()];
    t.read_exact(&mut got).await.unwrap();
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnel_carries_bytes_both_ways_with_half_close() {
    let ca = TestCa::new("mesh root");
    let (in_gw, addr) = inbound(&ca, BACKEND).await;
    let echo = tcp_echo().await;
    let mesh = Arc::new(MeshIdentity::new("cluster.local"));
    mesh.set(ca.mesh_certs(GATEWAY, "cluster.local"));
    let c_metrics = Metrics::new();
    let c = HboneClient::new(mesh, Duration::from_secs(5), c_metrics.clone());
    let mut t = c.open(&target(addr, BACKEND, echo), Some("203.0.113.9:5555".parse().unwrap())).await.unwrap();
    // 10 MiB through one tunnel, then a half-close: the echo server sees EOF and closes.
    let payload: Vec<u8> = (0..10 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let (mut r, mut w) = tokio::io::split(&mut t);
    let send = async {
        w.write_all(&payload).await.unwrap();
        w.shutdown().await.unwrap();
    };
    let mut got = Vec::with_capacity(payload.len());
    let (_, n) = tokio::join!(send, r.read_to_end(&mut got));
    n.unwrap();
    assert_eq!(got.len(), payload.len());
    assert!(got == payload, "bytes changed in the tunnel");
    drop(t);
    let m = in_gw.metrics().render();
    assert!(m.contains("wharf_hbone_tunnels_total{direction=\"inbound\",result=\"ok\"} 1"), "{m}");
    let ten_mib = "10485760";
    let outbound = c_metrics.render();
    let want = format!("wharf_hbone_bytes_total{{direction=\"upstream\",tunnel=\"outbound\"}} {ten_mib}");
    assert!(outbound.contains(&want), "{outbound}");
    let counted = eventually(Duration::from_secs(2), || {
        let gw = in_gw.clone();
        async move {
            gw.metrics()
                .render()
                .contains(&format!("wharf_hbone_bytes_total{{direction=\"upstream\",tunnel=\"inbound\"}} {ten_mib}"))
        }
    })
    .await;
    assert!(counted, "{}", in_gw.metrics().render());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_told_apart() {
    let ca = TestCa::new("mesh root");
    let (_gw, addr) = inbound(&ca, BACKEND).await;
    let echo = tcp_echo().await;

    // The peer is not who we expect.
    let (c, _) = client(&ca, GATEWAY, "cluster.local");
    let err = c.open(&target(addr, "spiffe://cluster.local/ns/app/sa/other", echo), None).await.unwrap_err();
    assert!(matches!(err, HboneError::Tls { .. }), "{err}");
    assert!(err.to_string().contains("spiffe://cluster.local/ns/app/sa/other"), "{err}");

    // We are in another trust domain (same root): the inbound side refuses us.
    let (other_td, _) = client(&ca, "spiffe://other.local/ns/wharf/sa/gateway", "other.local");
    let err = other_td.open(&target(addr, BACKEND, echo), None).await.unwrap_err();
    assert!(matches!(err, HboneError::Tls { .. }), "{err}");

    // A certificate from another CA: refused.
    let stranger = TestCa::new("not the mesh root");
    let (untrusted, _) = client(&stranger, GATEWAY, "cluster.local");
    assert!(untrusted.open(&target(addr, BACKEND, echo), None).await.is_err());

    // Upstream refuses: 503, mapped to "mesh refused".
    let dead = dead_addr().await;
    let err = c.open(&target(addr, BACKEND, dead), None).await.unwrap_err();
    assert!(matches!(err, HboneError::Refused { status: 503, .. }), "{err}");
    assert_eq!(err.upstream_error().status(), http::StatusCode::SERVICE_UNAVAILABLE);

    // ztunnel's own ports are never a target.
    let reserved: SocketAddr = "127.0.0.1:15008".parse().unwrap();
    let err = c.open(&target(addr, BACKEND, reserved), None).await.unwrap_err();
    assert!(matches!(err, HboneError::Refused { status: 503, .. }), "{err}");

    // Not an IP:port authority.
    let mut bad = target(addr, BACKEND, echo);
    bad.authority = "reviews.default.svc:9080".into();
    let err = c.open(&bad, None).await.unwrap_err();
    assert!(matches!(err, HboneError::Refused { status: 400, .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_without_certificate_is_refused() {
    let ca = TestCa::new("mesh root");
    let (_gw, addr) = inbound(&ca, BACKEND).await;
    // A TLS 1.3 client trusting the root but presenting no certificate.
    let cfg = wharf_dataplane::testing::inspecting_client_config(&[b"h2"]);
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let result = async {
        let mut tls = tokio_rustls::TlsConnector::from(cfg).connect(name, tcp).await?;
        // With TLS 1.3 the refusal shows on first read.
        tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await?;
        let mut buf = [0u8; 64];
        let n = tls.read(&mut buf).await?;
        Ok::<usize, std::io::Error>(n)
    }
    .await;
    assert!(matches!(result, Err(_) | Ok(0)), "a client without a certificate got {result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_tunnels_share_one_connection_within_the_stream_limit() {
    let ca = TestCa::new("mesh root");
    let (_gw, addr) = inbound(&ca, BACKEND).await;
    let echo = tcp_echo().await;
    let (c, _) = client(&ca, GATEWAY, "cluster.local");
    let mut opens = Vec::new();
    for _ in 0..100 {
        let c = Arc::clone(&c);
        opens.push(tokio::spawn(async move { c.open(&target(addr, BACKEND, echo), None).await }));
    }
    let mut tunnels = Vec::new();
    for o in opens {
        tunnels.push(o.await.unwrap().unwrap());
    }
    assert_eq!(c.pooled_connections(), 1);
    for (i, t) in tunnels.iter_mut().enumerate() {
        let msg = format!("tunnel {i}");
        assert_eq!(round_trip(t, msg.as_bytes()).await, msg.as_bytes());
    }
    // The 101st stream needs a second connection.
    let mut extra = c.open(&target(addr, BACKEND, echo), None).await.unwrap();
    assert_eq!(c.pooled_connections(), 2);
    assert_eq!(round_trip(&mut extra, b"101").await, b"101");
    // Closed tunnels free their streams: a hundred more fit beside the one still open,
    // on the same two connections (without freeing, the 100th would need a third).
    drop(tunnels);
    let mut again = Vec::new();
    for _ in 0..100 {
        again.push(c.open(&target(addr, BACKEND, echo), None).await.unwrap());
    }
    assert_eq!(c.pooled_connections(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_keeps_open_tunnels_and_new_ones_use_the_new_certificate() {
    let ca = TestCa::new("mesh root");
    let (_gw, addr) = inbound(&ca, BACKEND).await;
    let echo = tcp_echo().await;
    let (c, mesh) = client(&ca, GATEWAY, "cluster.local");
    let mut old = c.open(&target(addr, BACKEND, echo), None).await.unwrap();
    mesh.set(ca.mesh_certs(GATEWAY, "cluster.local"));
    let mut new = c.open(&target(addr, BACKEND, echo), None).await.unwrap();
    assert_eq!(c.pooled_connections(), 2, "the new certificate needs its own connection");
    assert_eq!(round_trip(&mut old, b"opened before rotation").await, b"opened before rotation");
    assert_eq!(round_trip(&mut new, b"opened after").await, b"opened after");
}

#[tokio::test(start_paused = false)]
async fn quiet_connection_answers_pings_for_a_minute() {
    let ca = TestCa::new("mesh root");
    let (_gw, addr) = inbound(&ca, BACKEND).await;
    let echo = tcp_echo().await;
    let (c, _) = client(&ca, GATEWAY, "cluster.local");
    let mut t = c.open(&target(addr, BACKEND, echo), None).await.unwrap();
    // Virtual time: both sides PING every 10 s and give up after 20 s without an answer.
    tokio::time::pause();
    for _ in 0..30 {
        tokio::time::advance(Duration::from_secs(2)).await;
        // Let the real sockets carry PINGs and PONGs.
        for _ in 0..10 {
            tokio::task::yield_now().await;
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    tokio::time::resume();
    assert_eq!(round_trip(&mut t, b"still here").await, b"still here");
    assert_eq!(c.pooled_connections(), 1);
}

/// A relay between client and inbound that can stop carrying bytes (a peer that hangs).
async fn freezable_relay(to: SocketAddr) -> (SocketAddr, Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let frozen = Arc::new(AtomicBool::new(false));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let f = Arc::clone(&frozen);
    tokio::spawn(async move {
        while let Ok((down, _)) = l.accept().await {
            let up = tokio::net::TcpStream::connect(to).await.unwrap();
            let (dr, dw) = down.into_split();
            let (ur, uw) = up.into_split();
            for (mut r, mut w, f) in [
                (
                    Box::new(dr) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
                    Box::new(uw) as Box<dyn tokio::io::AsyncWrite + Unpin + Send>,
                    Arc::clone(&f),
                ),
                (Box::new(ur), Box::new(dw), Arc::clone(&f)),
            ] {
                tokio::spawn(async move {
                    let mut buf = [0u8; 16384];
                    loop {
                        let Ok(n) = r.read(&mut buf).await else { return };
                        if n == 0 || f.load(Ordering::Relaxed) {
                            // Frozen: hold the socket open, carry nothing more.
                            std::future::pending::<()>().await;
                        }
                        if w.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        }
    });
    (addr, frozen)
}

#[tokio::test(start_paused = false)]
async fn a_peer_that_stops_answering_pings_is_dropped() {
    let ca = TestCa::new("mesh root");
    let (_gw, inbound_addr) = inbound(&ca, BACKEND).await;
    let (relay, frozen) = freezable_relay(inbound_addr).await;
    let echo = tcp_echo().await;
    let (c, _) = client(&ca, GATEWAY, "cluster.local");
    let mut t = c.open(&target(relay, BACKEND, echo), None).await.unwrap();
    assert_eq!(round_trip(&mut t, b"before").await, b"before");
    frozen.store(true, std::sync::atomic::Ordering::Relaxed);
    // Virtual time: a PING after 10 s, no PONG within 20 s more: the connection is closed.
    tokio::time::pause();
    for _ in 0..20 {
        tokio::time::advance(Duration::from_secs(2)).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    tokio::time::resume();
    let mut buf = [0u8; 8];
    let read = tokio::time::timeout(Duration::from_secs(5), t.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "the tunnel outlived an unanswered PING: {read:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_routes_http_and_tcp_over_hbone() {
    let ca = TestCa::new("mesh root");
    let (_in, hbone_addr) = inbound(&ca, BACKEND).await;
    let http_backend = echo("in-mesh").await;
    let tcp_backend = tcp_echo().await;
    let mesh = Arc::new(MeshIdentity::new("cluster.local"));
    mesh.set(ca.mesh_certs(GATEWAY, "cluster.local"));
    let gw = Gateway::new(Options { mesh: Some(mesh), access_log: false, ..Options::default() }).unwrap();
    let bound = gw
        .bind(&ListenerAddrs {
            http: loopback(),
            tcp: vec![(SocketAddr::from(([127, 0, 0, 1], 0)), 31400)],
            ..Default::default()
        })
        .await
        .unwrap();
    let (http, tcp) = (bound.http_addr().unwrap(), bound.tcp_addrs()[0]);
    let (signal, watch) = drain::channel();
    tokio::spawn(bound.serve(gw.clone(), watch));
    let mesh_cluster = |to: SocketAddr| wharf_model::Cluster {
        protocol: wharf_model::AppProtocol::Http1,
        endpoints: vec![wharf_model::Endpoint { addr: to, hbone: Some(target(hbone_addr, BACKEND, to)) }],
        tls: None,
    };
    let mut s = snapshot(
        vec![(host("a.test"), vec![route(PathMatch::prefix("/").unwrap(), "web", false)])],
        vec![("web", mesh_cluster(http_backend)), ("db", mesh_cluster(tcp_backend))],
    );
    s.tcp_routes = vec![TcpRoute { port: 31400, cluster: "db".into() }];
    gw.apply(s).unwrap();
    let seen = http_get(http, "a.test", "/x").await.unwrap();
    assert_eq!((seen.status, seen.echo_name().as_str()), (200, "in-mesh"), "{}", seen.body);
    // The backend sees the inbound side's connection, and the client address in XFF.
    assert_eq!(seen.json()["headers"]["x-forwarded-for"], "127.0.0.1");
    let mut t = tokio::net::TcpStream::connect(tcp).await.unwrap();
    assert_eq!(round_trip(&mut t, b"tcp over hbone").await, b"tcp over hbone");
    let m = gw.metrics().render();
    assert!(m.contains("wharf_hbone_tunnels_total{direction=\"outbound\",result=\"ok\"} 2"), "{m}");
    drop(signal);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_listener_relays_ten_mib_each_way_through_a_tunnel_and_passes_the_half_close() {
    let ca = TestCa::new("mesh root");
    let (in_gw, hbone_addr) = inbound(&ca, BACKEND).await;
    let backend = tcp_echo().await;
    let mesh = Arc::new(MeshIdentity::new("cluster.local"));
    mesh.set(ca.mesh_certs(GATEWAY, "cluster.local"));
    let gw = Gateway::new(Options { mesh: Some(mesh), access_log: false, ..Options::default() }).unwrap();
    let bound = gw
        .bind(&ListenerAddrs { tcp: vec![(SocketAddr::from(([127, 0, 0, 1], 0)), 31400)], ..Default::default() })
        .await
        .unwrap();
    let tcp = bound.tcp_addrs()[0];
    let (signal, watch) = drain::channel();
    tokio::spawn(bound.serve(gw.clone(), watch));
    let mut s = snapshot(
        vec![],
        vec![(
            "db",
            wharf_model::Cluster {
                protocol: wharf_model::AppProtocol::Http1,
                endpoints: vec![wharf_model::Endpoint {
                    addr: backend,
                    hbone: Some(target(hbone_addr, BACKEND, backend)),
                }],
                tls: None,
            },
        )],
    );
    s.tcp_routes = vec![TcpRoute { port: 31400, cluster: "db".into() }];
    gw.apply(s).unwrap();

    // The client sends 10 MiB and half-closes; the echo backend sends them back and closes
    // after the EOF came through the tunnel; the client reads to the EOF that came back.
    let payload: Vec<u8> = (0..10 * 1024 * 1024u32).map(|i| (i % 253) as u8).collect();
    let (mut r, mut w) = tokio::net::TcpStream::connect(tcp).await.unwrap().into_split();
    let send = async {
        w.write_all(&payload).await.unwrap();
        w.shutdown().await.unwrap();
    };
    let mut got = Vec::with_capacity(payload.len());
    let (_, n) = tokio::time::timeout(Duration::from_secs(30), async { tokio::join!(send, r.read_to_end(&mut got)) })
        .await
        .expect("the relay did not pass the half-close on both ways");
    n.unwrap();
    assert_eq!(got.len(), payload.len());
    assert!(got == payload, "bytes changed on the way through the tunnel");

    // Each side counts a connection's and a tunnel's bytes once they have closed.
    let line = |metric: &str, labels: &str| format!("{metric}{{{labels}}} {}", 10 * 1024 * 1024);
    let edge = vec![
        line("wharf_proxied_bytes_total", "direction=\"upstream\",listener=\"tcp\""),
        line("wharf_proxied_bytes_total", "direction=\"downstream\",listener=\"tcp\""),
        line("wharf_hbone_bytes_total", "direction=\"upstream\",tunnel=\"outbound\""),
        line("wharf_hbone_bytes_total", "direction=\"downstream\",tunnel=\"outbound\""),
    ];
    let inbound = vec![
        line("wharf_hbone_bytes_total", "direction=\"upstream\",tunnel=\"inbound\""),
        line("wharf_hbone_bytes_total", "direction=\"downstream\",tunnel=\"inbound\""),
    ];
    for (side, lines) in [(&gw, edge), (&in_gw, inbound)] {
        let counted = eventually(Duration::from_secs(5), || {
            let (side, lines) = (side.clone(), lines.clone());
            async move {
                let text = side.metrics().render();
                lines.iter().all(|l| text.contains(l.as_str()))
            }
        })
        .await;
        assert!(counted, "{}", side.metrics().render());
    }
    drop(signal);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mesh_endpoint_without_identity_is_a_clear_502() {
    let r = start().await;
    let backend = echo("x").await;
    let c = wharf_model::Cluster {
        protocol: wharf_model::AppProtocol::Http1,
        endpoints: vec![wharf_model::Endpoint { addr: backend, hbone: Some(target(backend, BACKEND, backend)) }],
        tls: None,
    };
    r.gw.apply(snapshot(
        vec![(host("a.test"), vec![route(PathMatch::prefix("/").unwrap(), "c", false)])],
        vec![("c", c)],
    ))
    .unwrap();
    let seen = http_get(r.http, "a.test", "/").await.unwrap();
    assert_eq!(seen.status, 502);
    assert!(seen.body.contains("mesh_tunnel_failed"), "{}", seen.body);
}

/// A gateway with its own HTTP, admin and HBONE listeners on loopback, forwarding only
/// where it would by default: (gateway, http, admin, hbone).
async fn east_west(ca: &TestCa, hbone: InboundOptions) -> (Gateway, SocketAddr, SocketAddr, SocketAddr) {
    let mesh = Arc::new(MeshIdentity::new("cluster.local"));
    mesh.set(ca.mesh_certs(GATEWAY, "cluster.local"));
    let gw = Gateway::new(Options { mesh: Some(mesh), access_log: false, hbone, ..Options::default() }).unwrap();
    let addrs = ListenerAddrs { http: loopback(), admin: loopback(), hbone: loopback(), ..Default::default() };
    let bound = gw.bind(&addrs).await.unwrap();
    let (http, admin, hbone) = (bound.http_addr().unwrap(), bound.admin_addr().unwrap(), bound.hbone_addr().unwrap());
    let (signal, watch) = drain::channel();
    tokio::spawn(bound.serve(gw.clone(), watch));
    std::mem::forget(signal);
    (gw, http, admin, hbone)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbound_reaches_the_gateways_own_listeners_and_nothing_else_on_the_host() {
    let ca = TestCa::new("mesh root");
    let (gw, http, admin, hbone) = east_west(&ca, InboundOptions::default()).await;
    let backend = echo("fronted").await;
    gw.apply(snapshot(
        vec![(host("a.test"), vec![route(PathMatch::prefix("/").unwrap(), "web", false)])],
        vec![("web", cluster(&[backend]))],
    ))
    .unwrap();
    // Any identity of the trust domain, as a mesh attacker would have.
    let (c, _) = client(&ca, "spiffe://cluster.local/ns/random-tenant/sa/default", "cluster.local");
    let refused = |err: HboneError| match err {
        HboneError::Refused { status, .. } => status,
        other => panic!("{other}"),
    };
    // The admin port (the config dump), a loopback service, and the HBONE port itself.
    let other = tcp_echo().await;
    for to in [admin, other, hbone] {
        let err = c.open(&target(hbone, GATEWAY, to), None).await.unwrap_err();
        assert_eq!(refused(err), 503, "{to} was reachable through the inbound");
    }
    // A loopback endpoint the config routes to is no workload either.
    let err = c.open(&target(hbone, GATEWAY, backend), None).await.unwrap_err();
    assert_eq!(refused(err), 503, "a loopback endpoint was reachable");
    // The gateway's own HTTP listener, at the address the peer dialed: served by its routes.
    let mut t = c.open(&target(hbone, GATEWAY, http), None).await.unwrap();
    t.write_all(b"GET / HTTP/1.1\r\nhost: a.test\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    t.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("fronted"), "{answer}");
    let m = gw.metrics().render();
    for (reason, n) in [("private_port", 2), ("unknown_destination", 2), ("ok", 1)] {
        let line = format!("wharf_hbone_tunnels_total{{direction=\"inbound\",result=\"{reason}\"}} {n}");
        assert!(m.contains(&line), "{line} in\n{m}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_peers_listed_may_open_tunnels() {
    let ca = TestCa::new("mesh root");
    let hbone = InboundOptions {
        allowed_peers: vec![PeerPattern::parse("spiffe://cluster.local/ns/istio-system/sa/*").unwrap()],
        ..Default::default()
    };
    let (_gw, http, _admin, inbound) = east_west(&ca, hbone).await;
    let (tenant, _) = client(&ca, "spiffe://cluster.local/ns/shop/sa/web", "cluster.local");
    let err = tenant.open(&target(inbound, GATEWAY, http), None).await.unwrap_err();
    assert!(matches!(err, HboneError::Refused { status: 401, .. }), "{err}");
    let (eastwest, _) = client(&ca, "spiffe://cluster.local/ns/istio-system/sa/eastwest", "cluster.local");
    assert!(eastwest.open(&target(inbound, GATEWAY, http), None).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_route_reaches_the_gateways_admin_port() {
    let r = start().await;
    // An endpoint a tenant could write into an EndpointSlice: the gateway's own admin port.
    r.gw.apply(snapshot(
        vec![(host("a.test"), vec![route(PathMatch::prefix("/").unwrap(), "admin", false)])],
        vec![("admin", cluster(&[r.admin]))],
    ))
    .unwrap();
    let seen = http_get(r.http, "a.test", "/debug/config").await.unwrap();
    assert!(seen.status >= 500, "{} {}", seen.status, seen.body);
    assert!(!seen.body.contains("virtual_hosts"), "the config dump came through a route: {}", seen.body);
}
