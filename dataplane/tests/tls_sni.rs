//! Certificates by SNI, seen by real TLS clients.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use wharf_dataplane::testing::{inspecting_client_config, Leaf, TestCa};
use wharf_model::{PathMatch, TlsHost};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sni_gets_its_certificate() {
    let r = start().await;
    let ca = TestCa::default();
    let (a, b, w, def) =
        (ca.leaf(&["a.test"]), ca.leaf(&["b.test"]), ca.leaf(&["*.w.test"]), ca.leaf(&["default.test"]));
    let backend = echo("site").await;
    let mut s = snapshot(
        vec![(host("a.test"), vec![route(PathMatch::Prefix("/".into()), "site", false)])],
        vec![("site", cluster(&[backend]))],
    );
    for (id, leaf) in [("a", &a), ("b", &b), ("w", &w), ("def", &def)] {
        s.certificates.insert(id.into(), leaf.certificate());
    }
    s.tls_hosts = vec![
        TlsHost { host: host("a.test"), certificate: "a".into() },
        TlsHost { host: host("b.test"), certificate: "b".into() },
        TlsHost { host: host("*.w.test"), certificate: "w".into() },
    ]
    .into();
    s.default_certificate = Some("def".into());
    r.gw.apply(s).unwrap();

    let cfg = inspecting_client_config(&[b"http/1.1"]);
    let cases: [(Option<&str>, &Leaf); 7] = [
        (Some("a.test"), &a),
        (Some("A.TEST"), &a),
        (Some("b.test"), &b),
        (Some("x.w.test"), &w),
        (Some("y.x.w.test"), &def),
        (Some("unknown.test"), &def),
        (None, &def),
    ];
    for (sni, want) in cases {
        let seen = https_get(r.https, sni, cfg.clone(), sni.unwrap_or("a.test"), "/").await.unwrap();
        assert_eq!(seen.peer_cert.as_ref(), Some(&want.leaf_der()), "SNI {sni:?}");
    }

    // A client that verifies the chain and the name, as browsers do.
    let verifying = ca.client_config(&[b"h2"]);
    let seen = https_get(r.https, Some("a.test"), verifying.clone(), "a.test", "/").await.unwrap();
    assert_eq!((seen.status, seen.alpn.as_deref()), (200, Some(&b"h2"[..])));
    assert_eq!(seen.echo_name(), "site");
    assert!(
        https_get(r.https, Some("unknown.test"), verifying, "unknown.test", "/").await.is_err(),
        "default cert must not verify for an unknown name"
    );

    let metrics = admin_get(&r, "/metrics").await.body;
    assert!(metrics.contains("wharf_tls_certificate_selections_total{match=\"wildcard\"} 1"), "{metrics}");
    assert!(metrics.contains("wharf_tls_handshakes_total{listener=\"https\",result=\"ok\"}"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallback_certificate_without_default_and_404() {
    let r = start().await;
    r.gw.apply(Default::default()).unwrap();
    let seen = https_get(r.https, None, inspecting_client_config(&[b"http/1.1"]), "x.test", "/").await.unwrap();
    assert_eq!(seen.status, 404);
    let der = seen.peer_cert.unwrap();
    let cn = b"Wharf default certificate";
    assert!(der.as_ref().windows(cn.len()).any(|w| w == cn), "the fallback certificate was not served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sessions_resume() {
    let r = start().await;
    r.gw.apply(Default::default()).unwrap();
    let cfg = inspecting_client_config(&[b"http/1.1"]);
    https_get(r.https, Some("x.test"), cfg.clone(), "x.test", "/").await.unwrap();
    // A new connection with the same client config offers the ticket it got.
    let tcp = tokio::net::TcpStream::connect(r.https).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(rustls::pki_types::ServerName::try_from("x.test").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.handshake_kind(), Some(rustls::HandshakeKind::Resumed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls12_sessions_resume_from_the_session_cache() {
    let r = start().await;
    r.gw.apply(Default::default()).unwrap();
    let cfg = wharf_dataplane::testing::tls12_session_id_client_config(&[b"http/1.1"]);
    let connect = || async {
        let tcp = tokio::net::TcpStream::connect(r.https).await.unwrap();
        tokio_rustls::TlsConnector::from(std::sync::Arc::clone(&cfg))
            .connect(rustls::pki_types::ServerName::try_from("x.test").unwrap(), tcp)
            .await
            .unwrap()
    };
    let first = connect().await;
    assert_eq!(first.get_ref().1.handshake_kind(), Some(rustls::HandshakeKind::Full));
    drop(first);
    // No ticket was asked for: the session ID finds the session in the gateway's cache.
    let again = connect().await;
    assert_eq!(again.get_ref().1.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_2));
    assert_eq!(again.get_ref().1.handshake_kind(), Some(rustls::HandshakeKind::Resumed));
}
