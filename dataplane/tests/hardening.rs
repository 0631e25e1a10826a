//! What an edge in front of many tenants must refuse or rewrite before routing: paths
//! that climb out of a route, hosts that do not belong to the connection's certificate,
//! ambiguous framing. Requests are sent as raw bytes where a client library would tidy
//! them up first.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wharf_dataplane::proxy::normalize::{EscapedSlashes, PathOptions};
use wharf_dataplane::testing::TestCa;
use wharf_dataplane::{Limits, Options};
use wharf_model::{PathMatch, TlsHost};

/// Sends `raw` on a new connection and reads until the server closes or 2 s pass; returns
/// the status code of the first response and the whole answer.
async fn raw(addr: SocketAddr, raw: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(raw.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), s.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, text)
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: t.test\r\nConnection: close\r\n\r\n")
}

/// Host t.test exposes only /public (to "public"); "/" elsewhere is not routed.
async fn tenant(paths: PathOptions) -> Running {
    let r = start_with_options(Options { access_log: false, paths, ..Options::default() }).await;
    let public = echo("public").await;
    let s = snapshot(
        vec![(host("t.test"), vec![route(PathMatch::prefix("/public").unwrap(), "public", false)])],
        vec![("public", cluster(&[public]))],
    );
    r.gw.apply(s).unwrap();
    r
}

fn backend_path(answer: &str) -> String {
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    let json: serde_json::Value = serde_json::from_str(body.trim()).unwrap_or_default();
    json["path"].as_str().unwrap_or("").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_are_normalised_before_matching_and_the_backend_gets_the_normalised_path() {
    let r = tenant(PathOptions::default()).await;
    for p in ["/public/../internal", "/public/%2e%2e/internal", "/public/%2E%2e/internal", "/public/./../internal"] {
        let (status, answer) = raw(r.http, &get(p)).await;
        assert_eq!(status, 404, "{p} climbed out of /public: {answer}");
    }
    // Escaped slashes are kept, but may not hide a dot segment.
    let (status, answer) = raw(r.http, &get("/public/..%2finternal")).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("dot segment"), "{answer}");
    // What stays inside the route reaches the backend normalised.
    let cases = [
        ("/public//../internal", "/public/internal"),
        ("/public/a/./b/../c?x=1", "/public/a/c"),
        ("/%70ublic/%7euser", "/public/~user"),
        ("/public/g%2fp", "/public/g%2Fp"),
    ];
    for (sent, want) in cases {
        let (status, answer) = raw(r.http, &get(sent)).await;
        assert_eq!(status, 200, "{sent}: {answer}");
        assert_eq!(backend_path(&answer), want, "{sent}");
    }
    let (status, _) = raw(r.http, &get("/public/%zz")).await;
    assert_eq!(status, 400);
    let m = admin_get(&r, "/metrics").await.body;
    assert!(m.contains("wharf_requests_rejected_total{reason=\"hidden_dot_segment\"} 1"), "{m}");
    assert!(m.contains("wharf_requests_rejected_total{reason=\"bad_path_escape\"} 1"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escaped_slashes_rejected_or_decoded_and_slashes_merged_when_configured() {
    let reject = tenant(PathOptions { escaped_slashes: EscapedSlashes::Reject, merge_slashes: false }).await;
    assert_eq!(raw(reject.http, &get("/public/g%2Fp")).await.0, 400);
    let decode = tenant(PathOptions { escaped_slashes: EscapedSlashes::Decode, merge_slashes: true }).await;
    assert_eq!(raw(decode.http, &get("/public/..%2Finternal")).await.0, 404);
    let (status, answer) = raw(decode.http, &get("/public/g%2Fp//q")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(backend_path(&answer), "/public/g/p/q");
    assert_eq!(raw(decode.http, &get("//public//../internal")).await.0, 404, "merged first, then ..");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_http1_framing_is_refused() {
    let r = tenant(PathOptions::default()).await;
    let (status, answer) =
        raw(r.http, "GET /public HTTP/1.1\r\nHost: t.test\r\nHost: other.test\r\nConnection: close\r\n\r\n").await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("more than one Host"), "{answer}");
    let (status, answer) = raw(r.http, "GET /public HTTP/1.1\r\nConnection: close\r\n\r\n").await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("no Host"), "{answer}");
    // Content-Length and Transfer-Encoding together: chunked wins (RFC 9112 §6.3) and the
    // backend never sees both, so it cannot read the body another way.
    let (status, answer) = raw(
        r.http,
        "POST /public HTTP/1.1\r\nHost: t.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    let json: serde_json::Value = serde_json::from_str(body.trim()).unwrap();
    assert!(json["headers"].get("content-length").is_none(), "{answer}");
    assert_eq!(json["headers"]["transfer-encoding"], "chunked", "{answer}");
    let (status, answer) =
        raw(r.http, "GET /public HTTP/1.1\r\nHost: t.test\r\nX-Folded: a\r\n b\r\nConnection: close\r\n\r\n").await;
    assert_eq!(status, 400, "obsolete line folding: {answer}");
    // Absolute-form: the target's host wins over Host, and the backend sees that host.
    let (status, answer) =
        raw(r.http, "GET http://t.test/public HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n").await;
    assert_eq!(status, 200, "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    let json: serde_json::Value = serde_json::from_str(body.trim()).unwrap();
    assert_eq!(json["host"], "t.test", "{answer}");
    // HTTP/1.0 may omit Host.
    assert_eq!(raw(r.http, "GET /public HTTP/1.0\r\n\r\n").await.0, 404);
}

/// a.test and b.test with certificates of their own, c.test sharing a.test's.
async fn two_tenants() -> (Running, TestCa) {
    let r = start().await;
    let ca = TestCa::default();
    let backend = echo("app").await;
    let mut s = snapshot(
        ["a.test", "b.test", "c.test"]
            .into_iter()
            .map(|h| (host(h), vec![route(PathMatch::prefix("/").unwrap(), "app", false)]))
            .collect(),
        vec![("app", cluster(&[backend]))],
    );
    s.certificates.insert("ac".into(), ca.leaf(&["a.test", "c.test"]).certificate());
    s.certificates.insert("b".into(), ca.leaf(&["b.test"]).certificate());
    s.tls_hosts = vec![
        TlsHost { host: host("a.test"), certificate: "ac".into() },
        TlsHost { host: host("c.test"), certificate: "ac".into() },
        TlsHost { host: host("b.test"), certificate: "b".into() },
    ]
    .into();
    r.gw.apply(s).unwrap();
    (r, ca)
}

/// An HTTP/2 connection over TLS opened for `sni`.
async fn h2_over_tls(
    addr: SocketAddr,
    ca: &TestCa,
    sni: &str,
) -> hyper::client::conn::http2::SendRequest<Empty<Bytes>> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(ca.client_config(&[b"h2"]))
        .connect(rustls::pki_types::ServerName::try_from(sni.to_owned()).unwrap(), tcp)
        .await
        .unwrap();
    let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    send
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_another_certificate_than_the_connection_gets_421() {
    let (r, ca) = two_tenants().await;
    for alpn in [&b"h2"[..], &b"http/1.1"[..]] {
        let cfg = ca.client_config(&[alpn]);
        let seen = https_get(r.https, Some("a.test"), Arc::clone(&cfg), "b.test", "/").await.unwrap();
        assert_eq!(seen.status, 421, "{}", seen.body);
        let seen = https_get(r.https, Some("a.test"), Arc::clone(&cfg), "c.test", "/").await.unwrap();
        assert_eq!(seen.status, 200, "same certificate: coalescable");
        let seen = https_get(r.https, Some("A.test"), cfg, "a.test", "/").await.unwrap();
        assert_eq!(seen.status, 200);
    }

    // One HTTP/2 connection opened for a.test, then used for b.test, c.test and a.test.
    let mut send = h2_over_tls(r.https, &ca, "a.test").await;
    let mut statuses = Vec::new();
    for authority in ["b.test", "c.test", "a.test"] {
        let req = http::Request::get(format!("https://{authority}/")).body(Empty::<Bytes>::new()).unwrap();
        let resp = send.send_request(req).await.unwrap();
        statuses.push(resp.status().as_u16());
        resp.into_body().collect().await.unwrap();
    }
    assert_eq!(statuses, [421, 200, 200]);
    assert!(admin_get(&r, "/metrics").await.body.contains("wharf_requests_rejected_total{reason=\"misdirected\"} 3"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_host_header_must_agree_with_authority() {
    let (r, ca) = two_tenants().await;
    let mut send = h2_over_tls(r.https, &ca, "a.test").await;
    let req = http::Request::get("https://a.test/").header("host", "b.test").body(Empty::<Bytes>::new()).unwrap();
    assert_eq!(send.send_request(req).await.unwrap().status(), 400);
}

/// Host t.test with "/" to an echo backend, under `limits`; "/small" allows 1 KiB bodies.
async fn limited(limits: Limits) -> Running {
    let r = start_with_options(Options { access_log: false, limits, ..Options::default() }).await;
    let app = echo("app").await;
    let mut small = route(PathMatch::prefix("/small").unwrap(), "app", false);
    small.max_body_bytes = Some(1024);
    let mut routes = vec![route(PathMatch::prefix("/").unwrap(), "app", false), small];
    routes.sort_by_key(|r| r.matches.precedence_key());
    r.gw.apply(snapshot(vec![(host("t.test"), routes)], vec![("app", cluster(&[app]))])).unwrap();
    r
}

fn rejected(metrics: &str, reason: &str) -> u64 {
    let series = format!("wharf_requests_rejected_total{{reason=\"{reason}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&series)).and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_heads_and_targets_are_refused() {
    let r = limited(Limits::default()).await;
    let big = "x".repeat(200 * 1024);
    let (status, answer) = raw(r.http, &format!("GET / HTTP/1.1\r\nHost: t.test\r\nX-Big: {big}\r\n\r\n")).await;
    assert_eq!(status, 431, "{}", &answer[..answer.len().min(200)]);
    let many: String = (0..101).map(|i| format!("X-H{i}: v\r\n")).collect();
    let (status, _) = raw(r.http, &format!("GET / HTTP/1.1\r\nHost: t.test\r\n{many}\r\n")).await;
    assert_eq!(status, 431);
    let long = format!("/{}", "a".repeat(9000));
    let (status, answer) = raw(r.http, &get(&long)).await;
    assert_eq!(status, 414, "{}", &answer[..answer.len().min(200)]);
    // Just under the limits: served.
    let (status, _) = raw(r.http, &get(&format!("/{}", "a".repeat(8000)))).await;
    assert_eq!(status, 200);
    let m = admin_get(&r, "/metrics").await.body;
    assert_eq!(rejected(&m, "header_too_large"), 2, "{m}");
    assert_eq!(rejected(&m, "url_too_long"), 1, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_header_lists_over_the_limit_are_refused() {
    let r = limited(Limits { max_header_bytes: 16 * 1024, ..Limits::default() }).await;
    let tcp = tokio::net::TcpStream::connect(r.http).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(conn);
    let req = http::Request::get("http://t.test/").header("x-big", "y".repeat(32 * 1024)).body(Empty::<Bytes>::new());
    let refused = match send.send_request(req.unwrap()).await {
        Ok(resp) => resp.status().as_u16() == 431,
        Err(_) => true,
    };
    assert!(refused, "a 32 KiB header list went through a 16 KiB limit");
    let req = http::Request::get("http://t.test/").header("x-small", "y".repeat(1024)).body(Empty::<Bytes>::new());
    assert_eq!(send.send_request(req.unwrap()).await.unwrap().status(), 200);
}

fn post(path: &str, body: &str, chunked: bool) -> String {
    if chunked {
        format!(
            "POST {path} HTTP/1.1\r\nHost: t.test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        )
    } else {
        format!(
            "POST {path} HTTP/1.1\r\nHost: t.test\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_route_or_gateway_limit_get_413() {
    let r = limited(Limits { max_body_bytes: 4096, ..Limits::default() }).await;
    let (small, medium, large) = ("s".repeat(500), "m".repeat(2000), "l".repeat(5000));
    for chunked in [false, true] {
        assert_eq!(raw(r.http, &post("/small", &small, chunked)).await.0, 200, "chunked: {chunked}");
        assert_eq!(raw(r.http, &post("/small", &medium, chunked)).await.0, 413, "route limit, chunked: {chunked}");
        assert_eq!(raw(r.http, &post("/", &medium, chunked)).await.0, 200, "chunked: {chunked}");
        assert_eq!(raw(r.http, &post("/", &large, chunked)).await.0, 413, "gateway limit, chunked: {chunked}");
    }
    assert_eq!(rejected(&admin_get(&r, "/metrics").await.body, "body_too_large"), 4);
}

/// HTTP/2: the 413 comes before the body is read, so the client, still sending, gets the
/// whole response, then RST_STREAM(NO_ERROR) (RFC 9113 §8.1), and the connection stays
/// usable. The body is larger than the flow-control window, so the client cannot finish
/// first. Declared (content-length) and undeclared lengths both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_bodies_over_the_limit_get_413_before_the_body_is_sent() {
    let r = limited(Limits { max_body_bytes: 4096, ..Limits::default() }).await;
    let tcp = tokio::net::TcpStream::connect(r.http).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(conn);
    let big = Bytes::from(vec![b'x'; 4 << 20]);
    for declared in [true, false] {
        let mut req = http::Request::post("http://t.test/upload");
        if declared {
            req = req.header("content-length", big.len());
        }
        let body = http_body_util::StreamBody::new(futures_util::stream::iter(
            big.chunks(16 * 1024)
                .map(|c| Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(Bytes::copy_from_slice(c))))
                .collect::<Vec<_>>(),
        ));
        let resp = send.send_request(req.body(body).unwrap()).await.unwrap();
        assert_eq!(resp.status(), 413, "declared length: {declared}");
        let text = resp.into_body().collect().await.unwrap().to_bytes();
        assert!(String::from_utf8_lossy(&text).contains("larger than"), "{text:?}");
    }
    assert_eq!(rejected(&admin_get(&r, "/metrics").await.body, "body_too_large"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_listener_closes_new_connections_and_is_not_ready() {
    let r = limited(Limits { max_connections: 2, ..Limits::default() }).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = tokio::net::TcpStream::connect(r.http).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: t.test\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 12];
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"HTTP/1.1 200");
        held.push(s);
    }
    // The third is closed without an answer.
    let mut third = tokio::net::TcpStream::connect(r.http).await.unwrap();
    let _ = third.write_all(b"GET / HTTP/1.1\r\nHost: t.test\r\n\r\n").await;
    let mut buf = Vec::new();
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), third.read_to_end(&mut buf)).await.unwrap();
    assert!(matches!(n, Ok(0) | Err(_)), "{:?}", String::from_utf8_lossy(&buf));
    let ready = admin_get(&r, "/healthz/ready").await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert!(admin_get(&r, "/metrics")
        .await
        .body
        .contains("wharf_connections_refused_total{listener=\"http\",reason=\"max_connections\"} 1"));
    // One closes: ready again.
    held.pop();
    let admin = r.admin;
    let back = eventually(std::time::Duration::from_secs(5), || async move {
        http_get(admin, "admin", "/healthz/ready").await.map(|s| s.status) == Ok(200)
    })
    .await;
    assert!(back);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_connections_are_asked_to_close() {
    let age = std::time::Duration::from_millis(300);
    let r = limited(Limits { max_connection_age: Some(age), ..Limits::default() }).await;
    let started = std::time::Instant::now();
    let mut s = tokio::net::TcpStream::connect(r.http).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: t.test\r\n\r\n").await.unwrap();
    let mut buf = Vec::new();
    // Keep-alive: the server closes it only because of its age.
    tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut buf)).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 200"));
    assert!(started.elapsed() >= age, "closed after {:?}", started.elapsed());

    // HTTP/2: GOAWAY, the client's connection ends.
    let tcp = tokio::net::TcpStream::connect(r.http).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await.unwrap();
    let ended = tokio::spawn(conn);
    let req = http::Request::get("http://t.test/").body(Empty::<Bytes>::new()).unwrap();
    assert_eq!(send.send_request(req).await.unwrap().status(), 200);
    tokio::time::timeout(std::time::Duration::from_secs(5), ended).await.unwrap().unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_connections_that_ask_nothing_are_closed_after_the_idle_timeout() {
    let idle = std::time::Duration::from_millis(400);
    let timeouts = wharf_dataplane::Timeouts { client_idle: idle, ..wharf_dataplane::Timeouts::default() };
    let r = start_with_options(Options { timeouts, access_log: false, ..Options::default() }).await;
    let (r, ca) = {
        let ca = TestCa::default();
        let backend = echo("app").await;
        let mut s = snapshot(
            vec![(host("t.test"), vec![route(PathMatch::prefix("/").unwrap(), "app", false)])],
            vec![("app", cluster(&[backend]))],
        );
        s.certificates.insert("t".into(), ca.leaf(&["t.test"]).certificate());
        s.tls_hosts = vec![TlsHost { host: host("t.test"), certificate: "t".into() }].into();
        r.gw.apply(s).unwrap();
        (r, ca)
    };
    let closed_within = |limit: std::time::Duration| async move {
        move |mut s: Box<dyn tokio::io::AsyncRead + Unpin + Send>| async move {
            let mut buf = [0u8; 1024];
            let started = std::time::Instant::now();
            loop {
                match tokio::time::timeout(limit, s.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
                    Ok(Ok(_)) => continue,
                    Err(_) => return None,
                }
            }
        }
    };
    let wait = closed_within(std::time::Duration::from_secs(5)).await;
    // Cleartext: half an h2c preface, then nothing.
    let mut tcp = tokio::net::TcpStream::connect(r.http).await.unwrap();
    tcp.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let took = wait(Box::new(tcp)).await.expect("a partial preface is closed");
    assert!(took >= idle - std::time::Duration::from_millis(50), "closed after {took:?}");
    // TLS with ALPN h2, then nothing.
    let tcp = tokio::net::TcpStream::connect(r.https).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(ca.client_config(&[b"h2"]))
        .connect(rustls::pki_types::ServerName::try_from("t.test").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    assert!(wait(Box::new(tls)).await.is_some(), "a silent HTTP/2 connection is closed");

    // A request longer than the idle timeout is not cut; the connection closes (GOAWAY)
    // once it has been idle that long after it.
    let slow = |uri: &str| http::Request::get(uri).body(Empty::<Bytes>::new()).unwrap();
    let answered = |resp: http::Response<hyper::body::Incoming>| async move {
        assert_eq!(resp.status(), 200);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert!(String::from_utf8_lossy(&body).contains("\"app\""), "{body:?}");
    };
    let tcp = tokio::net::TcpStream::connect(r.http).await.unwrap();
    let (mut h2c, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await.unwrap();
    let h2c_ended = tokio::spawn(conn);
    answered(h2c.send_request(slow("http://t.test/?delay_ms=700")).await.unwrap()).await;
    let ended = tokio::time::timeout(std::time::Duration::from_secs(5), h2c_ended).await;
    assert!(matches!(ended, Ok(Ok(Ok(())))), "h2c: {ended:?}");
    let mut send = h2_over_tls(r.https, &ca, "t.test").await;
    answered(send.send_request(slow("https://t.test/?delay_ms=700")).await.unwrap()).await;
    let closed = eventually(std::time::Duration::from_secs(5), || {
        let ready = send.is_closed();
        async move { ready }
    })
    .await;
    assert!(closed, "the TLS connection ends once idle");
}
