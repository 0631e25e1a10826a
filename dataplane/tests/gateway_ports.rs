//! Gateway ports: sockets opened and closed as snapshots add and remove them, each
//! serving only its own Gateway's routes, with no effect on other ports' connections.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wharf_dataplane::testing::{eventually, http_get, https_get, inspecting_client_config, TestCa};
use wharf_model::{GatewayPort, Host, ObjectRef, PathMatch, PortProtocol, Snapshot, TlsHost, VirtualHost};

/// A port no one listens on at `ip` right now.
fn free_port(ip: [u8; 4]) -> SocketAddr {
    let l = std::net::TcpListener::bind(SocketAddr::from((ip, 0))).unwrap();
    l.local_addr().unwrap()
}

fn gw(name: &str) -> ObjectRef {
    ObjectRef::new("Gateway", "infra", name)
}

fn port(gateway: &str, bind: SocketAddr, protocol: PortProtocol) -> GatewayPort {
    GatewayPort {
        gateway: gw(gateway),
        bind,
        listener_port: bind.port(),
        protocol,
        tls_hosts: vec![],
        virtual_hosts: vec![],
        passthrough: vec![],
        tcp: Vec::new(),
        edge: false,
    }
}

fn all(host: Host, cluster: &str) -> Vec<Arc<VirtualHost>> {
    vec![VirtualHost { host, routes: vec![route(PathMatch::prefix("/").unwrap(), cluster, false)] }.into()]
}

async fn refused(addr: SocketAddr) -> bool {
    TcpStream::connect(addr).await.is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_open_and_close_with_the_snapshot_and_serve_only_their_gateway() {
    let r = start().await;
    let (a, b, tcp_backend) = (echo("a").await, echo("b").await, tcp_echo().await);
    let ca = TestCa::new("Gateway CA");
    let leaf = ca.leaf(&["*.example.com", "*.eu.example.com"]);

    // Two Gateways on the same port number, each on its own address.
    let one_http = free_port([127, 0, 10, 1]);
    let two_http = SocketAddr::from(([127, 0, 10, 2], one_http.port()));
    let one_https = free_port([127, 0, 10, 1]);
    let one_tcp = free_port([127, 0, 10, 1]);
    let mut http1 = port("one", one_http, PortProtocol::Http);
    http1.virtual_hosts = all(Host::parse_gateway("*.example.com").unwrap(), "a");
    http1.virtual_hosts.push(
        VirtualHost {
            host: host("only.example.com"),
            routes: vec![route(PathMatch::prefix("/only").unwrap(), "b", false)],
        }
        .into(),
    );
    let mut http2 = port("two", two_http, PortProtocol::Http);
    http2.virtual_hosts = all(Host::Any, "b");
    let mut https1 = port("one", one_https, PortProtocol::Https);
    https1.tls_hosts =
        vec![TlsHost { host: Host::parse_gateway("*.example.com").unwrap(), certificate: "infra/wild".into() }];
    https1.virtual_hosts = all(Host::parse_gateway("*.example.com").unwrap(), "a");
    let mut tcp1 = port("one", one_tcp, PortProtocol::Tcp);
    tcp1.tcp = vec![wharf_model::WeightedBackend::new("echo", 1)];
    let base = Snapshot {
        certificates: [("infra/wild".to_owned(), leaf.certificate())].into_iter().collect(),
        clusters: [("a", cluster(&[a])), ("b", cluster(&[b])), ("echo", cluster(&[tcp_backend]))]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
        ..Default::default()
    };
    let mut s = base.clone();
    s.gateway_ports = vec![http1.clone(), http2.clone(), https1, tcp1];
    r.gw.apply(s).unwrap();

    assert!(
        eventually(Duration::from_secs(10), || async { http_get(one_http, "x.example.com", "/").await.is_ok() }).await
    );
    let name = |seen: Result<wharf_dataplane::testing::Seen, String>| seen.map(|s| (s.status, s.echo_name())).ok();
    assert_eq!(
        name(http_get(one_http, "x.y.example.com", "/").await),
        Some((200, "a".into())),
        "wildcards cover more labels"
    );
    assert_eq!(http_get(one_http, "example.com", "/").await.map(|s| s.status), Ok(404), "nor the bare domain");
    assert_eq!(name(http_get(one_http, "only.example.com", "/only").await), Some((200, "b".into())));
    assert_eq!(
        http_get(one_http, "only.example.com", "/").await.map(|s| s.status),
        Ok(404),
        "a host's requests never fall through to a less specific host's routes"
    );
    assert_eq!(http_get(one_http, "other.org", "/").await.map(|s| s.status), Ok(404), "another Gateway's hosts");
    assert_eq!(name(http_get(two_http, "x.example.com", "/").await), Some((200, "b".into())));
    assert_eq!(
        http_get(r.http, "x.example.com", "/").await.map(|s| s.status),
        Ok(404),
        "the edge listener has no routes"
    );

    assert!(eventually(Duration::from_secs(10), || async { !refused(one_https).await }).await);
    let got = https_get(one_https, Some("shop.eu.example.com"), ca.client_config(&[b"h2"]), "shop.eu.example.com", "/")
        .await
        .unwrap();
    assert_eq!((got.status, got.echo_name()), (200, "a".into()));
    assert_eq!(got.peer_cert, Some(leaf.leaf_der()), "the listener's certificate, chosen by SNI");

    assert!(eventually(Duration::from_secs(10), || async { !refused(one_tcp).await }).await);
    let mut t = TcpStream::connect(one_tcp).await.unwrap();
    t.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    t.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"ping");

    // A kept-alive connection to Gateway two, open while Gateway one's ports go away.
    let tcp = TcpStream::connect(two_http).await.unwrap();
    let (mut kept, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(conn);
    let get = |host: &'static str| {
        http::Request::builder().uri("/").header("host", host).body(Empty::<Bytes>::new()).unwrap()
    };
    let first = kept.send_request(get("x.example.com")).await.unwrap();
    assert_eq!(first.status(), 200);
    // Read to the end: a response whose body is dropped unread (when it came in a later
    // packet than the head) closes the connection.
    first.into_body().collect().await.unwrap();

    let mut s = base.clone();
    s.gateway_ports = vec![http2.clone()];
    r.gw.apply(s).unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async { refused(one_http).await && refused(one_https).await }).await
    );
    assert!(refused(one_tcp).await);
    let resp = kept.send_request(get("y.example.com")).await.unwrap();
    assert_eq!(resp.status(), 200, "the other Gateway's connection was not touched");
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("\"b\""), "{body:?}");

    // The same address and port back with another protocol.
    let mut again = port("one", one_http, PortProtocol::Https);
    again.tls_hosts = vec![TlsHost { host: Host::Any, certificate: "infra/wild".into() }];
    again.virtual_hosts = all(Host::Any, "a");
    let mut s = base;
    s.gateway_ports = vec![http2, again];
    r.gw.apply(s).unwrap();
    let tls = ca.client_config(&[]);
    let https_now = || {
        let tls = Arc::clone(&tls);
        async move { https_get(one_http, Some("a.example.com"), tls, "a.example.com", "/").await.is_ok() }
    };
    assert!(eventually(Duration::from_secs(10), https_now).await, "HTTPS on the port HTTP had");
    let no_sni = https_get(one_http, None, inspecting_client_config(&[]), "a.example.com", "/").await.unwrap();
    assert_eq!(no_sni.peer_cert, Some(leaf.leaf_der()), "a listener without hostname serves clients without SNI");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_gateway_is_served_on_the_edge_listeners_before_the_ingress_routes() {
    let r = start().await;
    let (a, b) = (echo("ingress").await, echo("gateway").await);
    let ca = TestCa::new("Edge CA");
    let (ingress_leaf, gateway_leaf) =
        (ca.leaf(&["shop.example.com", "other.example.com"]), ca.leaf(&["shop.example.com"]));
    let shop = || Host::parse_gateway("shop.example.com").unwrap();
    let mut http = port("edge", r.http, PortProtocol::Http);
    http.edge = true;
    // Clients reach the edge Gateway's listener on port 80 (the Service's), not the socket's.
    http.listener_port = 80;
    let moved = wharf_model::Route {
        action: wharf_model::Action::Redirect(wharf_model::Redirect {
            scheme: None,
            host: None,
            port: None,
            path: None,
            status: 302,
            port_as_sent: false,
            location: None,
            relative: false,
        }),
        ..route(PathMatch::prefix("/moved").unwrap(), "gateway", false)
    };
    http.virtual_hosts = vec![
        VirtualHost { host: shop(), routes: vec![moved, route(PathMatch::prefix("/api").unwrap(), "gateway", false)] }
            .into(),
        VirtualHost { host: Host::Any, routes: vec![] }.into(),
    ];
    let mut https = port("edge", r.https, PortProtocol::Https);
    https.edge = true;
    https.tls_hosts = vec![TlsHost { host: shop(), certificate: "infra/gateway".into() }];
    https.virtual_hosts = vec![VirtualHost {
        host: shop(),
        routes: vec![route(PathMatch::prefix("/secure").unwrap(), "gateway", false)],
    }
    .into()];
    let s = Snapshot {
        certificates: [
            ("web/ingress".to_owned(), ingress_leaf.certificate()),
            ("infra/gateway".to_owned(), gateway_leaf.certificate()),
        ]
        .into_iter()
        .collect(),
        tls_hosts: ["shop.example.com", "other.example.com"]
            .map(|h| TlsHost { host: host(h), certificate: "web/ingress".into() })
            .to_vec()
            .into(),
        virtual_hosts: ["shop.example.com", "other.example.com"]
            .map(|h| {
                VirtualHost { host: host(h), routes: vec![route(PathMatch::prefix("/").unwrap(), "ingress", false)] }
                    .into()
            })
            .to_vec()
            .into(),
        clusters: [("ingress".to_owned(), cluster(&[a])), ("gateway".to_owned(), cluster(&[b]))].into_iter().collect(),
        gateway_ports: vec![http, https],
        ..Default::default()
    };
    r.gw.apply(s).unwrap();

    let name = |seen: Result<wharf_dataplane::testing::Seen, String>| seen.map(|s| (s.status, s.echo_name())).ok();
    // A redirect without a port names the listener's declared port: none for 80.
    let moved = http_get(r.http, "shop.example.com", "/moved/x?a=1").await.unwrap();
    assert_eq!(
        (moved.status, moved.headers["location"].to_str().unwrap()),
        (302, "http://shop.example.com/moved/x?a=1"),
        "the edge socket's port {} is not the listener's",
        r.http.port()
    );
    assert_eq!(name(http_get(r.http, "shop.example.com", "/api/x").await), Some((200, "gateway".into())));
    assert_eq!(
        name(http_get(r.http, "shop.example.com", "/other").await),
        Some((200, "ingress".into())),
        "what no Gateway route takes goes to the Ingress rules"
    );
    assert_eq!(
        name(http_get(r.http, "shop.example.com", "/secure").await),
        Some((200, "ingress".into())),
        "a route of the HTTPS listener is not served on the HTTP listener"
    );
    let get = |sni: &'static str, path: &'static str| {
        let cfg = ca.client_config(&[b"h2"]);
        async move { https_get(r.https, Some(sni), cfg, sni, path).await.unwrap() }
    };
    let secure = get("shop.example.com", "/secure").await;
    assert_eq!((secure.status, secure.echo_name()), (200, "gateway".into()));
    assert_eq!(secure.peer_cert, Some(gateway_leaf.leaf_der()), "the Gateway listener's certificate for its host");
    let root = get("shop.example.com", "/").await;
    assert_eq!((root.status, root.echo_name()), (200, "ingress".into()));
    let other = get("other.example.com", "/").await;
    assert_eq!(other.peer_cert, Some(ingress_leaf.leaf_der()), "the Ingress certificate for the hosts it alone names");
}
