//! TLS to backends (BackendTLSPolicy): the backend gets the policy's SNI and ALPN, and
//! its certificate is checked against the policy's CA and name, or its SANs; or, for
//! ingress-nginx's `backend-protocol: HTTPS`, neither SNI nor a check.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use wharf_dataplane::testing::{Leaf, TestCa};
use wharf_model::{AppProtocol, Cluster, Endpoint, PathMatch, SubjectAltName, UpstreamTls};

/// An HTTPS backend serving `leaf`, answering every request with
/// `<sni> <alpn> <http version>`.
async fn https_backend(leaf: &Leaf) -> SocketAddr {
    let ck = wharf_model::tls::load(leaf.chain_pem.as_bytes(), leaf.key_pem.as_bytes(), 0).unwrap().certified_key;
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(ck)));
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else { return };
                let (_, conn) = tls.get_ref();
                let sni = conn.server_name().unwrap_or("-").to_owned();
                let alpn = conn.alpn_protocol().map(|a| String::from_utf8_lossy(a).into_owned()).unwrap_or("-".into());
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let body = format!("{sni} {alpn} {:?}", req.version());
                    async move { Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(body)))) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    addr
}

fn tls_cluster(addr: SocketAddr, protocol: AppProtocol, tls: UpstreamTls) -> Cluster {
    Cluster { protocol, endpoints: vec![Endpoint::direct(addr)], tls: Some(tls) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backends_get_tls_with_the_policy_name_and_only_a_certificate_it_trusts() {
    let r = start().await;
    let (ca, other_ca) = (TestCa::new("Backend CA"), TestCa::new("Someone else's CA"));
    let leaf = ca.leaf(&["backend.test", "alt.test"]);
    let spiffe = ca.workload("spiffe://cluster.local/ns/web/sa/backend");
    let (backend, spiffe_backend) = (https_backend(&leaf).await, https_backend(&spiffe).await);
    // A certificate through an intermediate CA; the backend sends leaf, intermediate, root.
    let deep = https_backend(&ca.intermediate("Backend intermediate").leaf(&["deep.test"])).await;
    let trusted = |name: &str, sans: Vec<SubjectAltName>| UpstreamTls {
        server_name: name.into(),
        ca_pem: Some(ca.root_pem.as_str().into()),
        subject_alt_names: sans,
        unverified: false,
        no_sni: false,
        verify_depth: None,
    };
    let clusters = vec![
        ("ok", tls_cluster(backend, AppProtocol::Http1, trusted("backend.test", vec![]))),
        ("h2", tls_cluster(backend, AppProtocol::H2c, trusted("alt.test", vec![]))),
        ("wrong-name", tls_cluster(backend, AppProtocol::Http1, trusted("mismatch.test", vec![]))),
        (
            "wrong-ca",
            tls_cluster(
                backend,
                AppProtocol::Http1,
                UpstreamTls { ca_pem: Some(other_ca.root_pem.as_str().into()), ..trusted("backend.test", vec![]) },
            ),
        ),
        (
            "dns-san",
            tls_cluster(backend, AppProtocol::Http1, trusted("sni.only", vec![SubjectAltName::Dns("alt.test".into())])),
        ),
        (
            "uri-san",
            tls_cluster(
                spiffe_backend,
                AppProtocol::Http1,
                trusted("backend.test", vec![SubjectAltName::Uri("spiffe://cluster.local/ns/web/sa/backend".into())]),
            ),
        ),
        (
            "uri-san-mismatch",
            tls_cluster(
                spiffe_backend,
                AppProtocol::Http1,
                trusted("backend.test", vec![SubjectAltName::Uri("spiffe://cluster.local/ns/web/sa/other".into())]),
            ),
        ),
        ("plain", cluster(&[backend])),
        // ingress-nginx's proxy-ssl-verify without proxy-ssl-server-name: checked, no SNI.
        (
            "no-sni",
            tls_cluster(backend, AppProtocol::Http1, UpstreamTls { no_sni: true, ..trusted("backend.test", vec![]) }),
        ),
        (
            "no-sni-wrong-name",
            tls_cluster(backend, AppProtocol::Http1, UpstreamTls { no_sni: true, ..trusted("mismatch.test", vec![]) }),
        ),
        // proxy-ssl-verify-depth: 1 takes only what the CA signed itself.
        (
            "depth-1",
            tls_cluster(
                deep,
                AppProtocol::Http1,
                UpstreamTls { verify_depth: Some(1), ..trusted("deep.test", vec![]) },
            ),
        ),
        (
            "depth-2",
            tls_cluster(
                deep,
                AppProtocol::Http1,
                UpstreamTls { verify_depth: Some(2), ..trusted("deep.test", vec![]) },
            ),
        ),
        ("depth-any", tls_cluster(deep, AppProtocol::Http1, trusted("deep.test", vec![]))),
        // ingress-nginx's backend-protocol HTTPS: any certificate, no SNI.
        (
            "unverified",
            tls_cluster(
                backend,
                AppProtocol::Http1,
                UpstreamTls { unverified: true, ..trusted("ignored.test", vec![]) },
            ),
        ),
        (
            "unverified-h2",
            tls_cluster(
                spiffe_backend,
                AppProtocol::H2c,
                UpstreamTls {
                    unverified: true,
                    ca_pem: Some(other_ca.root_pem.as_str().into()),
                    ..trusted("x.test", vec![])
                },
            ),
        ),
    ];
    let routes = clusters.iter().map(|(name, _)| route(PathMatch::prefix(&format!("/{name}")).unwrap(), name, false));
    let mut routes: Vec<_> = routes.collect();
    routes.sort_by_key(|r| r.matches.precedence_key());
    r.gw.apply(snapshot(vec![(host("a.test"), routes)], clusters)).unwrap();

    let get = |path: &'static str| async move { http_get(r.http, "a.test", path).await.unwrap() };
    let ok = get("/ok").await;
    assert_eq!((ok.status, ok.body.as_str()), (200, "backend.test http/1.1 HTTP/1.1"));
    let h2 = get("/h2").await;
    assert_eq!((h2.status, h2.body.as_str()), (200, "alt.test h2 HTTP/2.0"), "the SNI is the policy's hostname");
    let dns = get("/dns-san").await;
    assert_eq!((dns.status, dns.body.as_str()), (200, "sni.only http/1.1 HTTP/1.1"), "a SAN stands in for the name");
    assert_eq!(get("/uri-san").await.status, 200);
    let unverified = get("/unverified").await;
    assert_eq!((unverified.status, unverified.body.as_str()), (200, "- http/1.1 HTTP/1.1"), "no SNI, no check");
    let unverified = get("/unverified-h2").await;
    assert_eq!((unverified.status, unverified.body.as_str()), (200, "- h2 HTTP/2.0"));
    let no_sni = get("/no-sni").await;
    assert_eq!((no_sni.status, no_sni.body.as_str()), (200, "- http/1.1 HTTP/1.1"), "checked, without SNI");
    assert_eq!(get("/depth-2").await.status, 200);
    assert_eq!(get("/depth-any").await.status, 200);
    for refused in ["/wrong-name", "/wrong-ca", "/uri-san-mismatch", "/plain", "/no-sni-wrong-name", "/depth-1"] {
        assert_eq!(get(refused).await.status, 502, "{refused}");
    }
    let m = admin_get(&r, "/metrics").await.body;
    assert!(m.contains("reason=\"connect_failed\""), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_connect_timeout_bounds_a_backend_that_never_answers_the_handshake() {
    // The gateway's own connect timeout is far beyond the client's 10 s patience: only the
    // route's can produce the answer.
    let r = start_with(wharf_dataplane::Timeouts {
        connect: std::time::Duration::from_secs(600),
        ..wharf_dataplane::Timeouts::default()
    })
    .await;
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let tls = UpstreamTls {
        server_name: "silent.test".into(),
        ca_pem: None,
        subject_alt_names: vec![],
        unverified: true,
        no_sni: true,
        verify_depth: None,
    };
    let mut bounded = route(PathMatch::prefix("/").unwrap(), "silent", false);
    if let wharf_model::Action::Forward(f) = &mut bounded.action {
        f.connect_timeout_ms = Some(300);
    }
    r.gw.apply(snapshot(
        vec![(host("a.test"), vec![bounded])],
        vec![("silent", tls_cluster(addr, AppProtocol::Http1, tls))],
    ))
    .unwrap();
    let seen = http_get(r.http, "a.test", "/").await.unwrap();
    assert_eq!(seen.status, 502, "{}", seen.body);
    let m = admin_get(&r, "/metrics").await.body;
    assert!(m.contains("reason=\"connect_timeout\""), "{m}");
}
