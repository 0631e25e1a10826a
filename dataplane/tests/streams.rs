//! TLS passthrough, plain TCP, hot swaps under load and graceful shutdown.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wharf_dataplane::testing::TestCa;
use wharf_model::{Host, PathMatch, SniRoute, TcpRoute};

/// A TLS server that answers every line with "tls-backend:" + the line.
async fn tls_backend(leaf: &wharf_dataplane::testing::Leaf) -> SocketAddr {
    let ck = wharf_model::tls::load(leaf.chain_pem.as_bytes(), leaf.key_pem.as_bytes(), 0).unwrap().certified_key;
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(ck)));
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                let mut buf = vec![0u8; 1024];
                let n = tls.read(&mut buf).await.unwrap_or(0);
                let mut out = b"tls-backend:".to_vec();
                out.extend_from_slice(&buf[..n]);
                let _ = tls.write_all(&out).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_keeps_client_tls_end_to_end() {
    let r = start().await;
    let ca = TestCa::new("Backend CA");
    let leaf = ca.leaf(&["db.test"]);
    let backend = tls_backend(&leaf).await;
    let mut s = snapshot(vec![], vec![("db", cluster(&[backend]))]);
    s.passthrough = vec![
        SniRoute::passthrough(Host::parse("db.test").unwrap(), "db", src("db")),
        SniRoute::passthrough(Host::Exact("outbound_.5432_._.db.prod.svc.cluster.local".into()), "db", src("db")),
    ];
    r.gw.apply(s).unwrap();

    for sni in ["db.test", "outbound_.5432_.v2_.db.prod.svc.cluster.local"] {
        let tcp = TcpStream::connect(r.passthrough).await.unwrap();
        // The client verifies the backend's certificate for db.test: TLS ends at the backend.
        let name = rustls::pki_types::ServerName::try_from(sni.to_owned()).unwrap();
        let cfg = if sni == "db.test" {
            ca.client_config(&[])
        } else {
            wharf_dataplane::testing::inspecting_client_config(&[])
        };
        let mut tls = tokio_rustls::TlsConnector::from(cfg).connect(name, tcp).await.unwrap();
        assert_eq!(tls.get_ref().1.peer_certificates().unwrap()[0], leaf.leaf_der());
        tls.write_all(b"hello").await.unwrap();
        let mut got = Vec::new();
        tls.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"tls-backend:hello", "{sni}");
    }

    // Unknown SNI: closed without a word, and counted.
    let tcp = TcpStream::connect(r.passthrough).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("nope.test").unwrap();
    assert!(tokio_rustls::TlsConnector::from(ca.client_config(&[])).connect(name, tcp).await.is_err());
    let m = admin_get(&r, "/metrics").await.body;
    assert!(m.contains("wharf_passthrough_unknown_sni_total 1"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_proxy_protocol_passthrough_reads_the_header_and_relays_only_the_client_bytes() {
    let r = start_with_options(wharf_dataplane::Options { proxy_protocol: true, ..Default::default() }).await;
    let ca = TestCa::new("Backend CA");
    let leaf = ca.leaf(&["db.test"]);
    let mut s = snapshot(vec![], vec![("db", cluster(&[tls_backend(&leaf).await]))]);
    s.passthrough = vec![SniRoute::passthrough(Host::parse("db.test").unwrap(), "db", src("db"))];
    r.gw.apply(s).unwrap();
    let mut tcp = TcpStream::connect(r.passthrough).await.unwrap();
    tcp.write_all(b"PROXY TCP4 203.0.113.7 127.0.0.1 51234 443\r\n").await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("db.test").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(ca.client_config(&[])).connect(name, tcp).await.unwrap();
    tls.write_all(b"hello").await.unwrap();
    let mut got = Vec::new();
    tls.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"tls-backend:hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tls_port_terminates_some_names_and_passes_others_through() {
    let r = start().await;
    let ca = TestCa::new("Port CA");
    let (backend_leaf, gateway_leaf) = (ca.leaf(&["db.test"]), ca.leaf(&["plain.test"]));
    let (tls, plain) = (tls_backend(&backend_leaf).await, tcp_echo().await);
    let mut s = snapshot(vec![], vec![("tls", cluster(&[tls])), ("plain", cluster(&[plain]))]);
    s.certificates = [("infra/plain".to_owned(), gateway_leaf.certificate())].into_iter().collect();
    s.tls_hosts = vec![wharf_model::TlsHost { host: host("plain.test"), certificate: "infra/plain".into() }].into();
    s.passthrough = vec![
        SniRoute::passthrough(Host::parse("db.test").unwrap(), "tls", src("db")),
        SniRoute {
            terminate: true,
            ..SniRoute::passthrough(Host::parse("plain.test").unwrap(), "plain", src("plain"))
        },
    ];
    r.gw.apply(s).unwrap();

    let connect = |sni: &'static str| {
        let cfg = ca.client_config(&[b"h2"]);
        async move {
            let tcp = TcpStream::connect(r.passthrough).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from(sni).unwrap();
            tokio_rustls::TlsConnector::from(cfg).connect(name, tcp).await.unwrap()
        }
    };
    // Terminated here: the port's certificate, no ALPN, and the backend gets plain bytes.
    let mut t = connect("plain.test").await;
    assert_eq!(t.get_ref().1.peer_certificates().unwrap()[0], gateway_leaf.leaf_der());
    assert_eq!(t.get_ref().1.alpn_protocol(), None, "what runs inside is not HTTP");
    let payload: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    t.write_all(&payload).await.unwrap();
    t.shutdown().await.unwrap();
    let mut got = Vec::new();
    t.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, payload, "the plain-text echo backend answered through the terminated stream");

    // Passed through on the same socket: the backend's own certificate.
    let mut p = connect("db.test").await;
    assert_eq!(p.get_ref().1.peer_certificates().unwrap()[0], backend_leaf.leaf_der());
    p.write_all(b"hello").await.unwrap();
    let mut got = Vec::new();
    p.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"tls-backend:hello");

    // Counted once the relay has closed both directions (just after the client's last read).
    let counted = "wharf_proxied_bytes_total{direction=\"upstream\",listener=\"passthrough\"}";
    let shows = || async { admin_get(&r, "/metrics").await.body.contains(counted) };
    assert!(eventually(Duration::from_secs(10), shows).await, "{}", admin_get(&r, "/metrics").await.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_round_trip_with_half_close() {
    let r = start().await;
    let backend = tcp_echo().await;
    let mut s = snapshot(vec![], vec![("tcp", cluster(&[backend]))]);
    s.tcp_routes = vec![TcpRoute { port: 31400, cluster: "tcp".into() }];
    r.gw.apply(s).unwrap();
    let mut c = TcpStream::connect(r.tcp).await.unwrap();
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let (mut rd, mut wr) = c.split();
    let send = async {
        wr.write_all(&payload).await.unwrap();
        wr.shutdown().await.unwrap();
    };
    let mut got = Vec::new();
    let recv = rd.read_to_end(&mut got);
    let (_, n) = tokio::join!(send, recv);
    n.unwrap();
    assert_eq!(got, payload);
    // The relay counts its bytes once both directions are closed, which may be just after
    // the client has read the last byte.
    let counted = "wharf_proxied_bytes_total{direction=\"upstream\",listener=\"tcp\"} 200000";
    let shows = || async { admin_get(&r, "/metrics").await.body.contains(counted) };
    assert!(eventually(Duration::from_secs(10), shows).await, "{}", admin_get(&r, "/metrics").await.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_swaps_under_load_lose_no_request() {
    let r = start().await;
    let (a, b) = (echo("blue").await, echo("green").await);
    let snap = |name: &str, addr| {
        snapshot(
            vec![(host("a.test"), vec![route(PathMatch::prefix("/").unwrap(), name, false)])],
            vec![(name, cluster(&[addr]))],
        )
    };
    r.gw.apply(snap("blue", a)).unwrap();
    let (ok, failed, done) =
        (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let names = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<String, usize>::new()));
    let mut clients = Vec::new();
    for _ in 0..16 {
        let (ok, failed, done, names, addr) = (ok.clone(), failed.clone(), done.clone(), names.clone(), r.http);
        clients.push(tokio::spawn(async move {
            // Keep-alive connection per client, like real load.
            let tcp = TcpStream::connect(addr).await.unwrap();
            let (mut s, c) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await.unwrap();
            tokio::spawn(c);
            for _ in 0..60 {
                let req = http::Request::get("/?delay_ms=2")
                    .header("host", "a.test")
                    .body(http_body_util::Empty::<bytes::Bytes>::new())
                    .unwrap();
                // Wait until the connection has finished the previous exchange.
                if s.ready().await.is_err() {
                    failed.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                // Success is a whole answer from one of the two backends.
                let answered = match s.send_request(req).await {
                    Ok(resp) if resp.status() == 200 => {
                        use http_body_util::BodyExt;
                        resp.into_body().collect().await.ok().and_then(|b| {
                            let j: serde_json::Value = serde_json::from_slice(&b.to_bytes()).ok()?;
                            j["name"].as_str().map(str::to_owned)
                        })
                    }
                    _ => None,
                };
                match answered {
                    Some(name) => {
                        *names.lock().unwrap().entry(name).or_default() += 1;
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    None => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            done.fetch_add(1, Ordering::Relaxed);
        }));
    }
    // Swap back and forth for as long as the clients run (at least 50 times).
    let mut swaps = 0;
    while swaps < 50 || done.load(Ordering::Relaxed) < 16 {
        let s = if swaps % 2 == 0 { snap("green", b) } else { snap("blue", a) };
        r.gw.apply(s).unwrap();
        swaps += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for c in clients {
        c.await.unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0);
    assert_eq!(ok.load(Ordering::Relaxed), 16 * 60);
    assert_eq!(r.gw.version(), 1 + swaps);
    let names = names.lock().unwrap().clone();
    assert_eq!(names.keys().map(String::as_str).collect::<Vec<_>>(), ["blue", "green"], "both answered: {names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_finishes_in_flight_requests_then_stops_listening() {
    let mut r = start().await;
    // A backend that holds the request until told to answer.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let b = l.local_addr().unwrap();
    let (arrived_tx, arrived) = tokio::sync::oneshot::channel::<()>();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let mut n = 0;
        while !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
            n += s.read(&mut buf[n..]).await.unwrap();
        }
        arrived_tx.send(()).unwrap();
        released.await.unwrap();
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nslow").await.unwrap();
    });
    r.gw.apply(snapshot(
        vec![(host("a.test"), vec![route(PathMatch::prefix("/").unwrap(), "c", false)])],
        vec![("c", cluster(&[b]))],
    ))
    .unwrap();
    let http = r.http;
    let in_flight = tokio::spawn(async move { http_get(http, "a.test", "/").await });
    // Drain starts while the backend holds the request.
    arrived.await.unwrap();
    let signal = r.drain.take().unwrap();
    let drained = tokio::spawn(signal.drain(Duration::from_secs(5)));
    // New connections are refused once draining has begun, in-flight ones finish.
    let http = r.http;
    assert!(
        eventually(Duration::from_secs(5), || async move { TcpStream::connect(http).await.is_err() }).await,
        "still accepting while draining"
    );
    release.send(()).unwrap();
    let seen = in_flight.await.unwrap().unwrap();
    assert_eq!((seen.status, seen.body.as_str()), (200, "slow"));
    assert!(drained.await.unwrap(), "drain did not finish before its deadline");
    (&mut r.done).await.unwrap();
    assert!(TcpStream::connect(r.http).await.is_err(), "listener still accepting after drain");
}
