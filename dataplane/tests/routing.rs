//! HTTP routing and proxying, seen by real HTTP/1.1 and HTTP/2 clients.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use wharf_dataplane::testing::TestCa;
use wharf_dataplane::Timeouts;
use wharf_model::{PathMatch, TlsHost};

/// A gateway serving TLS host a.test (certificate from the returned CA) with every path
/// routed to an echo backend named "app".
async fn tls_host_to_echo(https_redirect: bool) -> (Running, TestCa) {
    let r = start().await;
    let ca = TestCa::default();
    let leaf = ca.leaf(&["a.test"]);
    let backend = echo("app").await;
    let mut s = snapshot(
        vec![(host("a.test"), vec![route(PathMatch::Prefix("/".into()), "app", https_redirect)])],
        vec![("app", cluster(&[backend]))],
    );
    s.certificates.insert("a".into(), leaf.certificate());
    s.tls_hosts = vec![TlsHost { host: host("a.test"), certificate: "a".into() }].into();
    r.gw.apply(s).unwrap();
    (r, ca)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_and_http2_clients_reach_http1_backend_with_forwarded_headers() {
    let (r, ca) = tls_host_to_echo(true).await;

    for alpn in [&b"h2"[..], &b"http/1.1"[..]] {
        let seen = https_get(r.https, Some("a.test"), ca.client_config(&[alpn]), "a.test", "/hello?x=1").await.unwrap();
        assert_eq!(seen.alpn.as_deref(), Some(alpn));
        assert_eq!(seen.status, 200, "{}", seen.body);
        let j = seen.json();
        assert_eq!(j["name"], "app");
        assert_eq!(j["path"], "/hello");
        assert_eq!(j["query"], "x=1");
        assert_eq!(j["proto"], "HTTP/1.1", "backend speaks HTTP/1.1");
        assert_eq!(j["host"], "a.test");
        let h = &j["headers"];
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-for"], "127.0.0.1");
        assert_eq!(h["x-forwarded-host"], "a.test");
        assert_eq!(h["x-request-id"].as_str().map(str::len), Some(32));
        assert!(h.get("connection").is_none() || h["connection"] == "keep-alive");
    }

    // Plain HTTP to a TLS host: 308 to https on the configured port, path and query kept.
    let seen = http_get(r.http, "a.test", "/p?q=1").await.unwrap();
    assert_eq!(seen.status, 308);
    assert_eq!(seen.headers["location"], "https://a.test:8443/p?q=1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_precedence_as_kubernetes_defines_it() {
    let r = start().await;
    let mut names = Vec::new();
    for n in ["root", "prefix-foo", "exact-foo", "foo-bar", "any-host", "wild"] {
        names.push((n, cluster(&[echo(n).await])));
    }
    let mut routes = vec![
        route(PathMatch::prefix("/").unwrap(), "root", false),
        route(PathMatch::prefix("/foo").unwrap(), "prefix-foo", false),
        route(PathMatch::exact("/foo").unwrap(), "exact-foo", false),
        route(PathMatch::prefix("/foo/bar").unwrap(), "foo-bar", false),
    ];
    routes.sort_by_key(|r| r.matches.precedence_key());
    let s = snapshot(
        vec![
            (host("a.test"), routes),
            (host("*.w.test"), vec![route(PathMatch::prefix("/").unwrap(), "wild", false)]),
            (wharf_model::Host::Any, vec![route(PathMatch::prefix("/any").unwrap(), "any-host", false)]),
        ],
        names,
    );
    r.gw.apply(s).unwrap();
    let cases = [
        ("a.test", "/foo", "exact-foo"),
        ("a.test", "/foo/", "prefix-foo"),
        ("a.test", "/foobar", "root"),
        ("a.test", "/foo/bar", "foo-bar"),
        ("a.test", "/foo/bar/baz", "foo-bar"),
        ("a.test", "/foo/barbaz", "prefix-foo"),
        ("A.Test:8080", "/foo", "exact-foo"),
        ("x.w.test", "/", "wild"),
        ("x.y.w.test", "/any", "any-host"),
        ("other.test", "/any/thing", "any-host"),
    ];
    for (h, p, want) in cases {
        let seen = http_get(r.http, h, p).await.unwrap();
        assert_eq!(seen.echo_name(), want, "{h}{p}");
    }
    let miss = http_get(r.http, "other.test", "/nothing").await.unwrap();
    assert_eq!(miss.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failures_map_to_502_503_504_and_failover() {
    let timeouts = Timeouts { request: Duration::from_millis(300), ..Timeouts::default() };
    let r = start_with(timeouts).await;
    let (good, dead) = (echo("good").await, dead_addr().await);
    let s = snapshot(
        vec![(
            host("a.test"),
            vec![
                route(PathMatch::prefix("/dead").unwrap(), "dead", false),
                route(PathMatch::prefix("/empty").unwrap(), "empty", false),
                route(PathMatch::prefix("/missing").unwrap(), "missing", false),
                route(PathMatch::prefix("/").unwrap(), "mixed", false),
            ],
        )],
        vec![("dead", cluster(&[dead])), ("empty", cluster(&[])), ("mixed", cluster(&[dead, good]))],
    );
    r.gw.apply(s.clone()).unwrap();
    assert_eq!(http_get(r.http, "a.test", "/dead").await.unwrap().status, 502);
    assert_eq!(http_get(r.http, "a.test", "/empty").await.unwrap().status, 503);
    assert_eq!(http_get(r.http, "a.test", "/missing").await.unwrap().status, 503);
    assert_eq!(http_get(r.http, "a.test", "/slow?delay_ms=2000").await.unwrap().status, 504);
    // A route's own timeout instead of the gateway's 300 ms: shorter, or none at all.
    let own = |path: &str, timeout_ms: u64| wharf_model::Route {
        action: wharf_model::Action::Forward(wharf_model::Forward {
            timeout_ms: Some(timeout_ms),
            connect_timeout_ms: None,
            send_timeout_ms: None,
            ..match wharf_model::Action::forward("mixed") {
                wharf_model::Action::Forward(f) => f,
                _ => unreachable!(),
            }
        }),
        ..route(PathMatch::prefix(path).unwrap(), "mixed", false)
    };
    let mut timed = s.clone();
    let mut vh = std::sync::Arc::clone(timed.virtual_hosts.first().unwrap());
    std::sync::Arc::make_mut(&mut vh).routes.insert(0, own("/hasty", 50));
    std::sync::Arc::make_mut(&mut vh).routes.insert(0, own("/patient", 0));
    timed.virtual_hosts.insert(vh);
    r.gw.apply(timed).unwrap();
    assert_eq!(http_get(r.http, "a.test", "/hasty?delay_ms=150").await.unwrap().status, 504);
    assert_eq!(http_get(r.http, "a.test", "/patient?delay_ms=600").await.unwrap().status, 200);
    r.gw.apply(s.clone()).unwrap();
    // One endpoint refuses connections: every request still succeeds on the other.
    for _ in 0..20 {
        let seen = http_get(r.http, "a.test", "/").await.unwrap();
        assert_eq!((seen.status, seen.echo_name().as_str()), (200, "good"));
    }
    let m = admin_get(&r, "/metrics").await.body;
    for line in [
        "wharf_upstream_errors_total{reason=\"connect_failed\"}",
        "wharf_upstream_errors_total{reason=\"no_endpoints\"} 2",
        "wharf_upstream_errors_total{reason=\"request_timeout\"} 2",
        "wharf_http_requests_total{code=\"5xx\",route=\"test/dead\"} 1",
        "wharf_http_requests_total{code=\"2xx\",route=\"test/mixed\"} 21",
    ] {
        assert!(m.contains(line), "missing {line} in\n{m}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_is_spread_over_endpoints() {
    let r = start().await;
    let (a, b) = (echo("one").await, echo("two").await);
    r.gw.apply(snapshot(
        vec![(host("a.test"), vec![route(PathMatch::prefix("/").unwrap(), "c", false)])],
        vec![("c", cluster(&[a, b]))],
    ))
    .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        seen.insert(http_get(r.http, "a.test", "/").await.unwrap().echo_name());
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["one", "two"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_backend_gets_http2() {
    let r = start().await;
    let b = echo("h2").await;
    let mut c = cluster(&[b]);
    c.protocol = wharf_model::AppProtocol::H2c;
    r.gw.apply(snapshot(
        vec![(host("a.test"), vec![route(PathMatch::prefix("/").unwrap(), "c", false)])],
        vec![("c", c)],
    ))
    .unwrap();
    let seen = http_get(r.http, "a.test", "/x").await.unwrap();
    assert_eq!(seen.status, 200, "{}", seen.body);
    assert_eq!(seen.json()["proto"], "HTTP/2.0");
    assert_eq!(seen.json()["path"], "/x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrade_passes_through() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let r = start().await;
    let b = echo("ws").await;
    r.gw.apply(snapshot(
        vec![(host("a.test"), vec![route(PathMatch::prefix("/").unwrap(), "c", false)])],
        vec![("c", cluster(&[b]))],
    ))
    .unwrap();
    let mut s = tokio::net::TcpStream::connect(r.http).await.unwrap();
    s.write_all(b"GET /chat HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n").await.unwrap();
    let mut buf = vec![0u8; 1024];
    let n = s.read(&mut buf).await.unwrap();
    let head = String::from_utf8_lossy(&buf[..n]).to_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: websocket"), "{head}");
    s.write_all(b"ping over the tunnel").await.unwrap();
    let mut got = vec![0u8; 20];
    s.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"ping over the tunnel");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints() {
    let r = start().await;
    assert_eq!(admin_get(&r, "/healthz/ready").await.status, 503);
    let ca = TestCa::default();
    let mut s = snapshot(vec![], vec![]);
    let leaf = ca.leaf(&["a.test"]);
    s.certificates.insert("a".into(), leaf.certificate());
    s.default_certificate = Some("a".into());
    r.gw.apply(s).unwrap();
    assert_eq!(admin_get(&r, "/healthz/ready").await.status, 200);
    let dump = admin_get(&r, "/debug/config").await.body;
    // A certificate shows as its digest and names; neither the key nor the PEM is kept.
    let digest = wharf_model::Certificate::digest(leaf.chain_pem.as_bytes(), leaf.key_pem.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    assert!(dump.contains(&format!("\"sha256\": \"{hex}\"")), "{dump}");
    assert!(dump.contains("\"a.test\""), "{dump}");
    assert!(
        !dump.contains("PRIVATE KEY") && !dump.contains(leaf.key_pem.lines().nth(1).unwrap()),
        "a private key leaked"
    );
    let m = admin_get(&r, "/metrics").await.body;
    assert!(m.contains("wharf_config_version 1"), "{m}");
    assert!(m.contains("wharf_config_applies_total 1"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_snapshot_is_rejected_whole_and_previous_keeps_serving() {
    let r = start().await;
    let b = echo("v1").await;
    r.gw.apply(snapshot(
        vec![(host("a.test"), vec![route(PathMatch::prefix("/").unwrap(), "c", false)])],
        vec![("c", cluster(&[b]))],
    ))
    .unwrap();
    let mut bad = snapshot(vec![], vec![]);
    bad.tls_hosts = vec![TlsHost { host: host("x.test"), certificate: "nope".into() }].into();
    let err = r.gw.apply(bad).unwrap_err();
    assert_eq!(err.reason(), "missing_certificate");
    assert_eq!(http_get(r.http, "a.test", "/").await.unwrap().echo_name(), "v1");
    let m = admin_get(&r, "/metrics").await.body;
    assert!(m.contains("wharf_config_rejects_total 1"), "{m}");
    assert!(m.contains("wharf_config_version 1"), "{m}");
}

/// Many streams on one HTTP/2 connection: responses that share TLS records and writes must
/// each reach their own stream, none may stall, and bodies larger than the write buffer
/// must arrive whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_http2_streams_on_one_connection_all_complete() {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let (r, ca) = tls_host_to_echo(false).await;

    let tcp = tokio::net::TcpStream::connect(r.https).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("a.test").unwrap();
    let tls = tokio_rustls::TlsConnector::from(ca.client_config(&[b"h2"])).connect(name, tcp).await.unwrap();
    let (sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    let mut tasks = Vec::new();
    for i in 0..200 {
        let mut sender = sender.clone();
        tasks.push(tokio::spawn(async move {
            // Every tenth answer is larger than the write buffer (64 KiB).
            let size = if i % 10 == 0 { 100_000 } else { 0 };
            let path = format!("/n/{i}");
            let req = http::Request::get(format!("https://a.test{path}?size={size}"))
                .body(Empty::<bytes::Bytes>::new())
                .unwrap();
            let resp = sender.send_request(req).await.unwrap();
            let status = resp.status();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            let j: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert!(body.len() >= size, "{} of {size} bytes", body.len());
            (status, j["path"].as_str().map(str::to_owned), path)
        }));
    }
    for t in tasks {
        let (status, seen, sent) =
            tokio::time::timeout(Duration::from_secs(20), t).await.expect("stream stalled").unwrap();
        assert_eq!(status, 200);
        assert_eq!(seen.as_deref(), Some(sent.as_str()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_match_on_method_headers_and_query_and_act_by_weight_redirect_or_fixed_answer() {
    use wharf_model::{
        Action, Forward, HeaderEdits, HeaderMatch, PathRewrite, QueryMatch, Redirect, Respond, Route, RouteMatch,
        UrlRewrite, WeightedBackend,
    };
    let r = start().await;
    let mut clusters = Vec::new();
    for n in ["plain", "post", "canary", "v2", "heavy", "light"] {
        clusters.push((n, cluster(&[echo(n).await])));
    }
    let pairs = |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>();
    let with = |m: RouteMatch, action: Action| Route { matches: m, action, ..route(m_path("/"), "unused", false) };
    let api = |method: Option<&str>, headers: &[(&str, &str)], query: &[(&str, &str)]| RouteMatch {
        path: m_path("/api"),
        method: method.map(str::to_owned),
        headers: headers.iter().map(|(n, v)| HeaderMatch::exact(n, v)).collect(),
        query: query.iter().map(|(n, v)| QueryMatch::exact(n, v)).collect(),
    };
    let mut routes = vec![
        route(m_path("/api"), "plain", false),
        with(api(Some("POST"), &[], &[]), Action::forward("post")),
        with(api(None, &[("x-env", "canary")], &[]), Action::forward("canary")),
        with(api(None, &[], &[("v", "2")]), Action::forward("v2")),
        with(
            RouteMatch::path(m_path("/split")),
            Action::Forward(Forward {
                backends: vec![
                    WeightedBackend {
                        request_headers: HeaderEdits { set: pairs(&[("x-backend", "heavy")]), ..Default::default() }
                            .into(),
                        response_headers: HeaderEdits { add: pairs(&[("x-picked", "heavy")]), ..Default::default() }
                            .into(),
                        ..WeightedBackend::new("heavy", 3)
                    },
                    WeightedBackend {
                        request_headers: HeaderEdits { set: pairs(&[("x-set", "by-light")]), ..Default::default() }
                            .into(),
                        ..WeightedBackend::new("light", 1)
                    },
                    WeightedBackend::new("plain", 0),
                ],
                request_headers: HeaderEdits {
                    set: pairs(&[("x-set", "by-route")]),
                    remove: vec!["x-drop".into()],
                    ..Default::default()
                }
                .into(),
                response_headers: HeaderEdits { add: pairs(&[("x-served-by", "wharf")]), ..Default::default() }.into(),
                rewrite: None,
                timeout_ms: None,
                connect_timeout_ms: None,
                send_timeout_ms: None,
                mirrors: Vec::new(),
                affinity: None,
                fallback: None,
                retry: None,
            }),
        ),
        with(
            RouteMatch::path(m_path("/v1")),
            Action::Forward(Forward {
                rewrite: Some(Box::new(UrlRewrite {
                    host: Some("internal.test".into()),
                    path: Some(PathRewrite::Prefix("/v2".into())),
                })),
                ..Forward::to(vec![WeightedBackend::new("plain", 1)])
            }),
        ),
        with(
            RouteMatch::path(m_path("/old")),
            Action::Redirect(Redirect {
                scheme: Some("https".into()),
                host: Some("new.test".into()),
                port: None,
                path: Some(PathRewrite::Prefix("/new".into())),
                status: 301,
                location: None,
                port_as_sent: false,
                relative: false,
            }),
        ),
        with(RouteMatch::path(m_path("/gone")), Action::Respond(Respond { status: 410, body: "moved away\n".into() })),
        with(
            RouteMatch::path(m_path("/half-invalid")),
            Action::Forward(Forward::to(vec![WeightedBackend::new("plain", 1), WeightedBackend::invalid(1)])),
        ),
    ];
    routes.sort_by_key(|r| r.matches.precedence_key());
    r.gw.apply(snapshot(vec![(host("a.test"), routes)], clusters)).unwrap();

    let name = |s: Seen| s.echo_name();
    let get = |method: &'static str, path: &'static str, headers: &'static [(&'static str, &'static str)]| {
        http_request(r.http, method, "a.test", path, headers)
    };
    assert_eq!(name(get("GET", "/api/x", &[]).await.unwrap()), "plain");
    assert_eq!(name(get("POST", "/api/x", &[]).await.unwrap()), "post", "a method match wins over none");
    assert_eq!(name(get("POST", "/api/x", &[("x-env", "canary")]).await.unwrap()), "post", "method before headers");
    assert_eq!(name(get("GET", "/api", &[("x-env", "canary")]).await.unwrap()), "canary");
    assert_eq!(name(get("GET", "/api?v=2", &[("x-env", "canary")]).await.unwrap()), "canary", "headers before query");
    assert_eq!(name(get("GET", "/api?a=b&v=2", &[]).await.unwrap()), "v2");
    assert_eq!(name(get("GET", "/api?v=3", &[("x-env", "prod")]).await.unwrap()), "plain");

    let mut counts = std::collections::BTreeMap::<String, u32>::new();
    for _ in 0..200 {
        let seen = get("GET", "/split", &[("x-drop", "secret"), ("x-set", "client")]).await.unwrap();
        let served: Vec<&str> = seen.headers.get_all("x-served-by").iter().filter_map(|v| v.to_str().ok()).collect();
        assert_eq!(served, ["wharf"]);
        let j = seen.json();
        assert!(j["headers"].get("x-drop").is_none(), "{j}");
        // Each backend's own changes come after the route's, and only for the requests it gets.
        let picked: Vec<&str> = seen.headers.get_all("x-picked").iter().filter_map(|v| v.to_str().ok()).collect();
        match seen.echo_name().as_str() {
            "heavy" => {
                assert_eq!((&j["headers"]["x-set"], &j["headers"]["x-backend"]), (&"by-route".into(), &"heavy".into()));
                assert_eq!(picked, ["heavy"]);
            }
            _ => {
                assert_eq!(j["headers"]["x-set"], "by-light", "{j}");
                assert!(j["headers"].get("x-backend").is_none() && picked.is_empty(), "{j}");
            }
        }
        *counts.entry(seen.echo_name()).or_default() += 1;
    }
    assert_eq!(counts.keys().map(String::as_str).collect::<Vec<_>>(), ["heavy", "light"], "weight 0 takes nothing");
    // 3:1 of 200 is 150:50; a fair split lands within 120..=180 with overwhelming odds.
    assert!((120..=180).contains(&counts["heavy"]), "{counts:?}");

    let moved = get("GET", "/old/page?q=1", &[]).await.unwrap();
    assert_eq!(moved.status, 301);
    assert_eq!(moved.headers["location"], "https://new.test/new/page?q=1");
    let rewritten = get("GET", "/v1/items?page=2", &[]).await.unwrap().json();
    assert_eq!(rewritten["path"], "/v2/items");
    assert_eq!(rewritten["query"], "page=2");
    assert_eq!(rewritten["host"], "internal.test");
    assert_eq!(rewritten["headers"]["x-forwarded-host"], "a.test", "the client's host");
    let gone = get("GET", "/gone", &[]).await.unwrap();
    assert_eq!((gone.status, gone.body.as_str()), (410, "moved away\n"));

    // An invalid backend's share answers 500; the other share is served.
    let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
    for _ in 0..100 {
        *statuses.entry(get("GET", "/half-invalid", &[]).await.unwrap().status).or_default() += 1;
    }
    assert_eq!(statuses.keys().copied().collect::<Vec<_>>(), [200, 500], "{statuses:?}");
    assert!((25..=75).contains(&statuses[&500]), "{statuses:?}");
}

fn m_path(p: &str) -> PathMatch {
    PathMatch::prefix(p).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regular_expressions_match_whole_paths_and_values() {
    use wharf_model::{HeaderMatch, Pattern, QueryMatch, Route, RouteMatch};
    let r = start().await;
    let (items, beta, fallback) = (echo("items").await, echo("beta").await, echo("fallback").await);
    let re = |p: &str| Pattern::full(p).unwrap();
    let with = |matches: RouteMatch, cluster: &str| Route { matches, ..route(m_path("/"), cluster, false) };
    let mut routes = vec![
        with(RouteMatch::path(PathMatch::Regex(Box::new(re("/items/[0-9]+")))), "items"),
        with(
            RouteMatch {
                headers: vec![HeaderMatch::regex("x-channel", re("beta|canary"))],
                query: vec![QueryMatch::regex("v", re("[0-9]"))],
                ..RouteMatch::path(m_path("/"))
            },
            "beta",
        ),
        route(m_path("/"), "fallback", false),
    ];
    routes.sort_by_key(|r| r.matches.precedence_key());
    let clusters = vec![("items", cluster(&[items])), ("beta", cluster(&[beta])), ("fallback", cluster(&[fallback]))];
    r.gw.apply(snapshot(vec![(host("a.test"), routes)], clusters)).unwrap();
    let name = |path: &'static str, headers: &'static [(&'static str, &'static str)]| async move {
        http_request(r.http, "GET", "a.test", path, headers).await.unwrap().echo_name()
    };
    assert_eq!(name("/items/42", &[]).await, "items");
    assert_eq!(name("/items/42/x", &[]).await, "fallback", "the whole path must match");
    assert_eq!(name("/items/", &[]).await, "fallback");
    assert_eq!(name("/?v=3", &[("x-channel", "canary")]).await, "beta");
    assert_eq!(name("/?v=33", &[("x-channel", "canary")]).await, "fallback", "the whole value must match");
    assert_eq!(name("/?v=3", &[("x-channel", "canary-1")]).await, "fallback");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_address_filters_answer_403_to_others_and_fixed_redirects_send_their_location() {
    use std::net::IpAddr;
    use wharf_dataplane::testing::http_get_from;
    use wharf_model::{Action, ClientFilter, IpNet, Redirect};

    let r = start().await;
    let net = |s: &str| IpNet::parse(s).unwrap();
    let filtered = |p: &str, clients: ClientFilter| wharf_model::Route {
        clients: Some(Box::new(clients)),
        ..route(PathMatch::prefix(p).unwrap(), "app", false)
    };
    let mut routes = vec![
        route(PathMatch::prefix("/open").unwrap(), "app", false),
        filtered("/allow", ClientFilter { allow: Some(vec![net("127.0.0.1/32")]), deny: vec![] }),
        filtered("/deny", ClientFilter { allow: None, deny: vec![net("127.0.0.2")] }),
        filtered("/both", ClientFilter { allow: Some(vec![net("127.0.0.0/8")]), deny: vec![net("127.0.0.2/32")] }),
        filtered("/nobody", ClientFilter { allow: Some(vec![]), deny: vec![] }),
        wharf_model::Route {
            action: Action::Redirect(Redirect {
                scheme: None,
                host: None,
                port: None,
                path: None,
                status: 301,
                location: Some("https://new.example/landing".into()),
                port_as_sent: false,
                relative: false,
            }),
            ..route(PathMatch::prefix("/moved").unwrap(), "app", false)
        },
    ];
    routes.sort_by_key(|r| r.matches.precedence_key());
    r.gw.apply(snapshot(vec![(host("a.test"), routes)], vec![("app", cluster(&[echo("app").await]))])).unwrap();

    let one: IpAddr = [127, 0, 0, 1].into();
    let two: IpAddr = [127, 0, 0, 2].into();
    let cases = [
        (one, "/open", 200),
        (two, "/open", 200),
        (one, "/allow", 200),
        (two, "/allow", 403),
        (one, "/deny/x", 200),
        (two, "/deny/x", 403),
        (one, "/both", 200),
        (two, "/both", 403),
        (one, "/nobody", 403),
        (two, "/nobody", 403),
    ];
    for (from, path, want) in cases {
        let seen = http_get_from(from, r.http, "a.test", path).await.unwrap();
        assert_eq!(seen.status, want, "GET {path} from {from}: {}", seen.body);
        if want == 200 {
            assert_eq!(seen.json()["name"], "app");
            assert_eq!(seen.json()["headers"]["x-forwarded-for"], from.to_string());
        } else {
            assert!(seen.body.contains("not allowed"), "{}", seen.body);
        }
    }
    let seen = http_get(r.http, "a.test", "/moved/deep?q=1").await.unwrap();
    assert_eq!((seen.status, seen.headers["location"].to_str().unwrap()), (301, "https://new.example/landing"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capture_rewrites_send_the_backend_the_groups_of_a_leading_regex_path() {
    use wharf_model::{Action, PathRewrite, Pattern, UrlRewrite};

    let r = start().await;
    let mut rewriting =
        route(PathMatch::Regex(Box::new(Pattern::leading("/something(/|$)(.*)").unwrap())), "app", false);
    if let Action::Forward(f) = &mut rewriting.action {
        f.rewrite = Some(Box::new(UrlRewrite { host: None, path: Some(PathRewrite::Captures("/$2".into())) }));
    }
    r.gw.apply(snapshot(vec![(host("a.test"), vec![rewriting])], vec![("app", cluster(&[echo("app").await]))]))
        .unwrap();
    for (path, want_path, want_query) in
        [("/something/new/x?q=1", "/new/x", "q=1"), ("/SOMETHING", "/", ""), ("/something/", "/", "")]
    {
        let seen = http_get(r.http, "a.test", path).await.unwrap();
        assert_eq!(seen.status, 200, "{path}: {}", seen.body);
        let j = seen.json();
        assert_eq!((j["path"].as_str(), j["query"].as_str().unwrap_or("")), (Some(want_path), want_query), "{path}");
    }
    for path in ["/other", "/somethingelse"] {
        assert_eq!(http_get(r.http, "a.test", path).await.unwrap().status, 404, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_preflights_are_answered_here_and_responses_to_allowed_origins_carry_the_headers() {
    use wharf_dataplane::testing::http_request;
    use wharf_model::Cors;

    let r = start().await;
    let policy = |origins: &[&str]| Cors {
        allow_origins: origins.iter().map(|o| (*o).to_owned()).collect(),
        allow_methods: "GET, POST".into(),
        allow_headers: "X-Token".into(),
        expose_headers: String::new(),
        allow_credentials: true,
        max_age: 600,
    };
    let with = |p: &str, cors: Cors| wharf_model::Route {
        cors: Some(Box::new(cors)),
        ..route(PathMatch::prefix(p).unwrap(), "app", false)
    };
    // One request a minute, not counting preflights.
    let limited = wharf_model::Route {
        rate_limit: Some(Box::new(wharf_model::RateLimit { per_minute: Some(1), ..unlimited("web/limited") })),
        ..with("/limited", policy(&["*"]))
    };
    let mut routes = vec![with("/listed", policy(&["https://app.example"])), with("/any", policy(&["*"])), limited];
    routes.sort_by_key(|r| r.matches.precedence_key());
    r.gw.apply(snapshot(vec![(host("a.test"), routes)], vec![("app", cluster(&[echo("app").await]))])).unwrap();

    let ask = |method: &'static str, path: &'static str, origin: &'static str| async move {
        let headers: Vec<(&str, &str)> = if origin.is_empty() { vec![] } else { vec![("origin", origin)] };
        http_request(r.http, method, "a.test", path, &headers).await.unwrap()
    };
    let h = |seen: &wharf_dataplane::testing::Seen, name: &str| {
        seen.headers.get(name).map(|v| v.to_str().unwrap_or("").to_owned())
    };

    let get = ask("GET", "/listed", "https://app.example").await;
    assert_eq!((get.status, get.echo_name()), (200, "app".to_owned()), "the backend answers");
    assert_eq!(h(&get, "access-control-allow-origin").as_deref(), Some("https://app.example"));
    assert_eq!(h(&get, "access-control-allow-credentials").as_deref(), Some("true"));
    assert_eq!(h(&get, "access-control-allow-methods").as_deref(), Some("GET, POST"));
    assert_eq!(h(&get, "access-control-allow-headers").as_deref(), Some("X-Token"));
    assert_eq!(h(&get, "access-control-max-age").as_deref(), Some("600"));
    assert_eq!(h(&get, "vary").as_deref(), Some("Origin"));
    assert_eq!(h(&get, "access-control-expose-headers"), None);

    let preflight = ask("OPTIONS", "/listed", "https://app.example").await;
    assert_eq!((preflight.status, preflight.body.as_str()), (204, ""), "answered here, not by the backend");
    assert_eq!(h(&preflight, "access-control-allow-origin").as_deref(), Some("https://app.example"));

    for (method, origin) in [("GET", "https://evil.example"), ("OPTIONS", "https://evil.example"), ("GET", "")] {
        let seen = ask(method, "/listed", origin).await;
        assert_eq!(
            (seen.status, seen.echo_name()),
            (200, "app".to_owned()),
            "{method} from {origin:?} goes to the backend"
        );
        assert_eq!(h(&seen, "access-control-allow-origin"), None, "{method} from {origin:?}");
    }
    for _ in 0..3 {
        assert_eq!(ask("OPTIONS", "/limited", "https://a.example").await.status, 204);
    }
    assert_eq!(ask("GET", "/limited", "https://a.example").await.status, 200, "preflights are not counted");
    assert_eq!(ask("GET", "/limited", "https://a.example").await.status, 503);
    let any = ask("GET", "/any", "https://whoever.example").await;
    assert_eq!(h(&any, "access-control-allow-origin").as_deref(), Some("*"));
    assert_eq!(h(&any, "vary"), None);
    // `*` answers a request without Origin too (as ingress-nginx does), and stays `*`
    // beside credentials: the origin is never echoed back.
    let plain = ask("GET", "/any", "").await;
    assert_eq!((plain.status, plain.echo_name()), (200, "app".to_owned()));
    assert_eq!(h(&plain, "access-control-allow-origin").as_deref(), Some("*"));
    assert_eq!(h(&plain, "access-control-allow-credentials").as_deref(), Some("true"));
    assert_eq!(ask("OPTIONS", "/any", "").await.status, 204, "a preflight of `*` needs no Origin");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_a_request_in_progress_gets_503_for_another_over_its_limit() {
    use wharf_model::RateLimit;

    let r = start().await;
    let limit = RateLimit { connections: Some(1), ..unlimited("web/app") };
    let limited = wharf_model::Route {
        rate_limit: Some(Box::new(limit)),
        ..route(PathMatch::prefix("/").unwrap(), "app", false)
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend = listener.local_addr().unwrap();
    let (mut arrived, release) = wharf_dataplane::testing::holding_backend(listener);
    r.gw.apply(snapshot(vec![(host("a.test"), vec![limited])], vec![("app", cluster(&[backend]))])).unwrap();
    // One request held at the backend: a second at the same time is refused, and served
    // once the first has ended.
    let http = r.http;
    let slow = tokio::spawn(async move { http_get(http, "a.test", "/hold").await.map(|s| s.status) });
    assert!(arrived.recv().await.is_some(), "the first request never reached the backend");
    assert_eq!(http_get(r.http, "a.test", "/").await.map(|s| s.status), Ok(503), "a second request in progress");
    let _ = release.send(());
    assert_eq!(slow.await.unwrap(), Ok(200));
    assert_eq!(http_get(r.http, "a.test", "/").await.unwrap().status, 200);
    let m = admin_get(&r, "/metrics").await.body;
    assert!(m.lines().any(|l| l.starts_with("wharf_rate_limited_requests_total ") && !l.ends_with(" 0")), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_sessions_keep_a_client_on_the_endpoint_its_cookie_names() {
    use wharf_dataplane::testing::http_request;
    use wharf_model::{Action, CookieAffinity};

    let r = start().await;
    let mut sticky = route(PathMatch::prefix("/").unwrap(), "app", false);
    if let Action::Forward(f) = &mut sticky.action {
        f.affinity = Some(Box::new(CookieAffinity {
            name: "route".into(),
            path: "/".into(),
            max_age: Some(3600),
            expires: None,
            domain: None,
            same_site: Some("Lax".into()),
            secure: false,
        }));
    }
    let endpoints = [echo("one").await, echo("two").await, echo("three").await];
    r.gw.apply(snapshot(vec![(host("a.test"), vec![sticky])], vec![("app", cluster(&endpoints))])).unwrap();

    let get = |cookie: Option<String>| async move {
        let headers: Vec<(&str, String)> = cookie.map(|c| vec![("cookie", c)]).unwrap_or_default();
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let seen = http_request(r.http, "GET", "a.test", "/", &headers).await.unwrap();
        let set = seen.headers.get("set-cookie").map(|v| v.to_str().unwrap_or("").to_owned());
        (seen.echo_name(), set)
    };
    let (first, set) = get(None).await;
    let set = set.expect("the first response sets the cookie");
    let (pair, attrs) = set.split_once(';').unwrap();
    assert!(pair.starts_with("route=") && pair.len() == "route=".len() + 16, "{set}");
    assert_eq!(attrs, " Path=/; HttpOnly; Max-Age=3600; SameSite=Lax");
    for _ in 0..30 {
        let (name, set) = get(Some(format!("a=b; {pair}"))).await;
        assert_eq!(name, first, "the cookie's endpoint answers");
        assert_eq!(set, None, "a cookie that names the endpoint is not set again");
    }
    // A cookie of the same name set for a parent domain does not hide the host's own.
    let (name, set) = get(Some(format!("route=0000000000000000; {pair}"))).await;
    assert_eq!((name, set), (first.clone(), None), "the value that names an endpoint is followed");
    // A cookie naming no endpoint: the balancer chooses, and the cookie is set anew.
    let (_, set) = get(Some("route=0000000000000000".into())).await;
    assert!(set.is_some_and(|s| s.starts_with("route=") && !s.starts_with("route=0000")));
    // Without the cookie the choice is the balancer's: all three answer over many requests.
    let mut names = std::collections::BTreeSet::new();
    for _ in 0..60 {
        names.insert(get(None).await.0);
    }
    assert_eq!(names.len(), 3, "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_affinity_cookie_keeps_a_client_on_a_backend_the_weights_give_no_share() {
    use wharf_dataplane::testing::http_request;
    use wharf_model::{Action, CookieAffinity, HeaderMatch, WeightedBackend};

    let r = start().await;
    let sticky = |r: &mut wharf_model::Route, backends: Vec<WeightedBackend>| {
        if let Action::Forward(f) = &mut r.action {
            f.backends = backends;
            f.affinity = Some(Box::new(CookieAffinity::session("aff", "/")));
        }
    };
    // As a canary by header: the header sends to `canary`; without it, `main` takes every
    // request by weight, and `canary` is there with weight 0.
    let mut by_header = route(PathMatch::prefix("/").unwrap(), "canary", false);
    by_header.matches.headers.push(HeaderMatch::exact("x-canary", "yes"));
    sticky(&mut by_header, vec![WeightedBackend::new("canary", 1)]);
    let mut main = route(PathMatch::prefix("/").unwrap(), "main", false);
    sticky(&mut main, vec![WeightedBackend::new("main", 1), WeightedBackend::new("canary", 0)]);
    let clusters = vec![("main", cluster(&[echo("main").await])), ("canary", cluster(&[echo("canary").await]))];
    r.gw.apply(snapshot(vec![(host("a.test"), vec![by_header, main])], clusters)).unwrap();

    let get = |headers: Vec<(&'static str, String)>| async move {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let seen = http_request(r.http, "GET", "a.test", "/", &headers).await.unwrap();
        let set = seen.headers.get("set-cookie").and_then(|v| v.to_str().ok()?.split(';').next().map(str::to_owned));
        (seen.echo_name(), set)
    };
    let (name, to_canary) = get(vec![("x-canary", "yes".into())]).await;
    let to_canary = to_canary.expect("the canary's answer sets the cookie");
    assert_eq!(name, "canary");
    for _ in 0..20 {
        assert_eq!(get(vec![("cookie", to_canary.clone())]).await, ("canary".to_owned(), None), "kept by its cookie");
        assert_eq!(get(vec![]).await.0, "main", "weight 0: no share without the cookie");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_counts_against_its_client_until_its_response_body_ends() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use wharf_model::RateLimit;

    // A backend whose first answer sends its headers and half its body, then the rest
    // when released; later ones answer at once, on their own connections.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend = l.local_addr().unwrap();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut released = Some(released);
        while let Ok((mut s, _)) = l.accept().await {
            let first = released.take();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut n = 0;
                while !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                    n += s.read(&mut buf[n..]).await.unwrap_or(0);
                }
                match first {
                    Some(released) => {
                        let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nab").await;
                        let _ = released.await;
                        let _ = s.write_all(b"cd").await;
                    }
                    None => {
                        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n").await;
                    }
                }
            });
        }
    });
    let r = start().await;
    let limit = RateLimit { connections: Some(1), ..unlimited("web/app") };
    let limited = wharf_model::Route {
        rate_limit: Some(Box::new(limit)),
        ..route(PathMatch::prefix("/").unwrap(), "app", false)
    };
    r.gw.apply(snapshot(vec![(host("a.test"), vec![limited])], vec![("app", cluster(&[backend]))])).unwrap();

    let mut first = tokio::net::TcpStream::connect(r.http).await.unwrap();
    first.write_all(b"GET / HTTP/1.1\r\nhost: a.test\r\n\r\n").await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"ab") {
        let n = first.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&got));
    // The headers are out, the body is not: the request still counts.
    assert_eq!(http_get(r.http, "a.test", "/").await.unwrap().status, 503);
    release.send(()).unwrap();
    while !got.ends_with(b"abcd") {
        let n = first.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    // The body ended: the place is free.
    let after = eventually(Duration::from_secs(5), || async {
        http_get(r.http, "a.test", "/").await.map(|s| s.status) == Ok(200)
    })
    .await;
    assert!(after, "the place was not freed when the body ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_authentication_admits_its_users_after_the_address_check_and_hides_their_credentials() {
    use wharf_model::{Auth, BasicAuth, ClientFilter, IpNet, PasswordHash};

    let r = start().await;
    let users: Vec<(String, PasswordHash)> = [
        ("alice", "$2y$05$2yEnaPyh3g.hu2XKLvyMwOnwHzDcZTOjvoK3eqjGgobt0M.HhHvBW"),
        ("bob", "$apr1$aBlCDgVn$lrQ0SRClIT9Den5NwehZ4."),
    ]
    .iter()
    .map(|(u, h)| ((*u).to_owned(), PasswordHash::parse(h).unwrap()))
    .collect();
    let basic = Auth::Basic(BasicAuth { realm: "Staff only".into(), users: users.into() });
    let with = |p: &str, auth: Auth| wharf_model::Route {
        auth: Some(Box::new(auth)),
        ..route(PathMatch::prefix(p).unwrap(), "app", false)
    };
    let fenced = wharf_model::Route {
        clients: Some(Box::new(ClientFilter { allow: Some(vec![IpNet::parse("10.0.0.0/8").unwrap()]), deny: vec![] })),
        ..with("/fenced", basic.clone())
    };
    let mut routes = vec![
        with("/staff", basic),
        with("/down", Auth::Unavailable("auth-secret web/x does not exist".into())),
        fenced,
    ];
    routes.sort_by_key(|r| r.matches.precedence_key());
    r.gw.apply(snapshot(vec![(host("a.test"), routes)], vec![("app", cluster(&[echo("app").await]))])).unwrap();

    let ask = |path: &'static str, authorization: &'static str| async move {
        let headers: Vec<(&str, &str)> =
            if authorization.is_empty() { vec![] } else { vec![("authorization", authorization)] };
        http_request(r.http, "GET", "a.test", path, &headers).await.unwrap()
    };
    let alice = "Basic YWxpY2U6Y29ycmVjdCBob3JzZQ=="; // alice:correct horse
    let bob = "Basic Ym9iOmNvcnJlY3QgaG9yc2U="; // bob:correct horse
    let wrong = "Basic YWxpY2U6Y29ycmVjdCBob3JzZTI="; // alice:correct horse2

    let none = ask("/staff", "").await;
    assert_eq!(none.status, 401);
    assert_eq!(none.headers["www-authenticate"], "Basic realm=\"Staff only\"");
    assert_eq!(none.echo_name(), "", "the backend was not asked");
    for (who, want) in [(alice, 200), (bob, 200), (wrong, 401), ("Bearer abc", 401)] {
        let seen = ask("/staff", who).await;
        assert_eq!(seen.status, want, "{who}");
        if want == 200 {
            assert_eq!(seen.echo_name(), "app");
            assert!(seen.json()["headers"].get("authorization").is_none(), "the backend got the credentials");
        }
    }
    // Twice more for alice: the remembered credentials still pass (and a wrong password
    // after them still fails).
    assert_eq!(ask("/staff", alice).await.status, 200);
    assert_eq!(ask("/staff", wrong).await.status, 401);
    let down = ask("/down", alice).await;
    assert_eq!((down.status, down.echo_name()), (503, String::new()), "authentication that cannot be set up refuses");
    // The address check comes first: a client outside the list gets 403 with or without
    // credentials.
    assert_eq!(ask("/fenced", "").await.status, 403);
    assert_eq!(ask("/fenced", alice).await.status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_check_decides_and_its_headers_and_cookies_go_where_ingress_nginx_sends_them() {
    use wharf_model::{Auth, ExternalAuth, Template};

    let r = start().await;
    let external = |url: &str, cluster: Option<&str>| {
        let mut check = ExternalAuth::new(Template::parse(url).unwrap(), cluster.map(str::to_owned));
        check.response_headers = vec!["x-user".into()];
        Auth::External(check)
    };
    let with = |host_path: &str, auth: Auth| wharf_model::Route {
        auth: Some(Box::new(auth)),
        ..route(PathMatch::prefix(host_path).unwrap(), "app", false)
    };
    let mut signin = external("http://$host/sso/check?u=$escaped_request_uri", None);
    if let Auth::External(e) = &mut signin {
        e.signin = Some(Template::parse("https://login.test/start").unwrap());
        e.always_set_cookie = true;
    }
    let sso = wharf_model::Route { ..route(PathMatch::prefix("/sso").unwrap(), "sso", false) };
    let mut routes = vec![
        with("/svc", external("http://sso.auth.svc/check", Some("sso"))),
        with("/self", signin),
        with("/nowhere", external("http://$host/none", None)),
        sso,
    ];
    routes.sort_by_key(|r| r.matches.precedence_key());
    let clusters = vec![("app", cluster(&[echo("app").await])), ("sso", cluster(&[echo("sso").await]))];
    r.gw.apply(snapshot(vec![(host("a.test"), routes)], clusters)).unwrap();

    let ask = |path: &'static str, headers: Vec<(&'static str, &'static str)>| async move {
        http_request(r.http, "GET", "a.test", path, &headers).await.unwrap()
    };
    // The check's answer decides; the backend gets the check's X-User, not the client's.
    let pass = ask("/svc/x", vec![("x-echo-header", "X-User: alice"), ("x-user", "mallory")]).await;
    assert_eq!((pass.status, pass.echo_name()), (200, "app".to_owned()), "{}", pass.body);
    assert_eq!(pass.json()["headers"]["x-user"], "alice");
    let bare = ask("/svc/x", vec![("x-user", "mallory")]).await;
    assert!(bare.json()["headers"].get("x-user").is_none(), "{}", bare.body);
    for (status, want) in [("401", 401), ("403", 403), ("404", 500), ("500", 500), ("307", 500)] {
        let seen = ask("/svc/x", vec![("x-echo-status", status)]).await;
        assert_eq!((seen.status, seen.echo_name()), (want, String::new()), "the check answered {status}");
    }
    // An upgrade request's check is no upgrade: it passes like any other.
    let up = ask("/svc/x", vec![("x-echo-status", "403"), ("connection", "upgrade"), ("upgrade", "websocket")]).await;
    assert_eq!(up.status, 403);

    // Routed through this gateway: the check reaches /sso with the request's URL in its
    // own, and the headers ingress-nginx sends.
    let seen = ask("/self/p?q=1", vec![("x-echo-status", "401")]).await;
    assert_eq!(seen.status, 302);
    assert_eq!(seen.headers["location"], "https://login.test/start?rd=http%3A%2F%2Fa.test%2Fself%2Fp%3Fq%3D1");
    // The check's echo is visible through its cookie: always set, here on a 401 too.
    let cookie = ask("/self/p", vec![("x-echo-status", "401"), ("x-echo-header", "Set-Cookie: s=1")]).await;
    assert_eq!(
        cookie.headers.get_all("set-cookie").iter().map(|v| v.to_str().unwrap_or("")).collect::<Vec<_>>(),
        ["s=1"]
    );
    let through = ask("/self/p?q=1", vec![("x-echo-header", "X-User: carol")]).await;
    assert_eq!((through.status, through.json()["headers"]["x-user"].as_str()), (200, Some("carol")));
    // No route for the check's URL: 500.
    assert_eq!(ask("/nowhere", vec![]).await.status, 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_check_carries_the_clients_headers_and_ingress_nginxs_but_not_its_body() {
    use tokio::io::AsyncWriteExt;
    use wharf_model::{Auth, ExternalAuth, Template};

    // The authentication service: passes everything, and tells the test what it got.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sso = listener.local_addr().unwrap();
    let (got_tx, mut got) = tokio::sync::mpsc::channel::<String>(4);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let got_tx = got_tx.clone();
            tokio::spawn(async move {
                let Some(head) = wharf_dataplane::testing::read_request_head(&mut s).await else { return };
                let _ = got_tx.send(String::from_utf8_lossy(&head).into_owned()).await;
                let _ = s.write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n").await;
            });
        }
    });

    let r = start().await;
    let check = Auth::External(ExternalAuth::new(
        Template::parse("http://sso.auth.svc/check?for=$host").unwrap(),
        Some("sso".into()),
    ));
    let protected =
        wharf_model::Route { auth: Some(Box::new(check)), ..route(PathMatch::prefix("/").unwrap(), "app", false) };
    let clusters = vec![("app", cluster(&[echo("app").await])), ("sso", cluster(&[sso]))];
    r.gw.apply(snapshot(vec![(host("a.test"), vec![protected])], clusters)).unwrap();

    let forged = [("cookie", "s=1"), ("ssl-client-verify", "SUCCESS"), ("ssl_client_subject_dn", "CN=admin")];
    let seen = http_request_with_body(r.http, "POST", "a.test", "/orders?id=7", &forged, b"{\"n\":1}").await.unwrap();
    assert_eq!((seen.status, seen.json()["body_bytes"].as_u64()), (200, Some(7)), "the backend got the body");
    let head = got.recv().await.unwrap().to_ascii_lowercase();
    assert!(head.starts_with("get /check?for=a.test http/1.1\r\n"), "{head}");
    for line in [
        "host: sso.auth.svc\r\n",
        "cookie: s=1\r\n",
        "x-original-url: http://a.test/orders?id=7\r\n",
        "x-original-method: post\r\n",
        "x-sent-from: nginx-ingress-controller\r\n",
        "x-real-ip: 127.0.0.1\r\n",
        "x-auth-request-redirect: /orders?id=7\r\n",
    ] {
        assert!(head.contains(line), "{line:?} not in\n{head}");
    }
    assert!(!head.contains("content-length: 7") && !head.contains("transfer-encoding"), "{head}");
    assert!(!head.contains("ssl-client") && !head.contains("ssl_client"), "a client's own certificate headers: {head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_routed_through_the_gateway_passes_that_routes_checks_and_stays_in_its_namespace() {
    use wharf_model::{Auth, BasicAuth, ClientFilter, ExternalAuth, IpNet, ObjectRef, PasswordHash, Template};

    let r = start().await;
    let of = |ns: &str, path: &str, cluster: &str| {
        wharf_model::Route::forward(PathMatch::prefix(path).unwrap(), cluster, ObjectRef::new("Ingress", ns, cluster))
    };
    let checked_by = |ns: &str, path: &str, url: &str| wharf_model::Route {
        auth: Some(Box::new(Auth::External(ExternalAuth {
            method: Some("DELETE".into()),
            ..ExternalAuth::new(Template::parse(url).unwrap(), None)
        }))),
        ..of(ns, path, "app")
    };
    // a's admin API admits one address only; a's sign-in check wants a password.
    let admin = wharf_model::Route {
        clients: Some(Box::new(ClientFilter {
            allow: Some(vec![IpNet::parse("10.99.99.99/32").unwrap()]),
            deny: vec![],
        })),
        ..of("a", "/", "admin")
    };
    let users: Vec<(String, PasswordHash)> = vec![("alice".into(), PasswordHash::parse("{PLAIN}pw").unwrap())];
    let login = wharf_model::Route {
        auth: Some(Box::new(Auth::Basic(BasicAuth { realm: "a".into(), users: users.into() }))),
        ..of("a", "/", "login")
    };
    let mut a_routes =
        vec![checked_by("a", "/admin", "http://admin.a.test/api"), checked_by("a", "/pw", "http://login.a.test/check")];
    a_routes.sort_by_key(|r| r.matches.precedence_key());
    let clusters = vec![
        ("app", cluster(&[echo("app").await])),
        ("admin", cluster(&[echo("admin").await])),
        ("login", cluster(&[echo("login").await])),
    ];
    r.gw.apply(snapshot(
        vec![
            (host("admin.a.test"), vec![admin]),
            (host("login.a.test"), vec![login]),
            (host("a.test"), a_routes),
            (host("b.test"), vec![checked_by("b", "/", "http://admin.a.test/api$request_uri")]),
        ],
        clusters,
    ))
    .unwrap();
    let ask = |host: &'static str, path: &'static str, headers: Vec<(&'static str, &'static str)>| async move {
        http_request(r.http, "GET", host, path, &headers).await.unwrap()
    };
    // b's check names a's admin host: another namespace's route is never its check.
    let b = ask("b.test", "/users/1", vec![]).await;
    assert_eq!((b.status, b.echo_name()), (500, String::new()), "{}", b.body);
    // a's own check to its admin host: the client's address is not on its list.
    let a = ask("a.test", "/admin", vec![]).await;
    assert_eq!((a.status, a.echo_name()), (403, String::new()), "{}", a.body);
    // A check to a host behind a password passes with the client's own credentials only.
    let none = ask("a.test", "/pw", vec![]).await;
    assert_eq!(none.status, 401);
    assert_eq!(none.headers["www-authenticate"], "Basic realm=\"a\"");
    let wrong = ask("a.test", "/pw", vec![("authorization", "Basic YWxpY2U6bm8=")]).await;
    assert_eq!(wrong.status, 401);
    let right = ask("a.test", "/pw", vec![("authorization", "Basic YWxpY2U6cHc=")]).await;
    assert_eq!((right.status, right.echo_name()), (200, "app".to_owned()), "alice:pw");
}

/// A rate limit in `zone` that limits nothing until a field says so.
fn unlimited(zone: &str) -> wharf_model::RateLimit {
    wharf_model::RateLimit {
        zone: zone.into(),
        per_second: None,
        per_minute: None,
        burst: 0,
        burst_per_minute: 0,
        connections: None,
        exempt: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_namespaces_costly_sign_ins_do_not_hold_up_anothers() {
    // b:pw, htpasswd -B -C 12.
    const B_COST_12: &str = "$2y$12$XPBK7mc7eXOcbVaLP5To.uOnvrVxCWBf4J4.2/qZ/5wVgcU/oMb4m";
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use wharf_model::{Auth, BasicAuth, PasswordHash};

    let r = start().await;
    // b's user b:pw hashed at cost 12 (the most Wharf checks), a's a:pw at cost 4.
    let basic = |user: &str, h: &str| {
        let users: Vec<(String, PasswordHash)> = vec![(user.to_owned(), PasswordHash::parse(h).unwrap())];
        Some(Box::new(Auth::Basic(BasicAuth { realm: "r".into(), users: users.into() })))
    };
    let app = echo("app").await;
    let guarded = |ns: &str, h: &str| wharf_model::Route {
        auth: basic(ns, h),
        ..wharf_model::Route::forward(
            PathMatch::prefix("/").unwrap(),
            "app",
            wharf_model::ObjectRef::new("Ingress", ns, "x"),
        )
    };
    r.gw.apply(snapshot(
        vec![
            (host("b.test"), vec![guarded("b", B_COST_12)]),
            (host("a.test"), vec![guarded("a", "$2y$04$0X13S/5.GPMGWS2yZVLJ1epZyJgqsjBIH6l13jPm4E.HibXehmnkC")]),
        ],
        vec![("app", cluster(&[app]))],
    ))
    .unwrap();
    // b's six sign-ins with wrong passwords (none is remembered), all sent before a's.
    let done = std::sync::Arc::new(AtomicUsize::new(0));
    let mut flood = Vec::new();
    for i in 0..6 {
        let mut s = tokio::net::TcpStream::connect(r.http).await.unwrap();
        let creds = ["Yjp3cm9uZzA=", "Yjp3cm9uZzE=", "Yjp3cm9uZzI=", "Yjp3cm9uZzM=", "Yjp3cm9uZzQ=", "Yjp3cm9uZzU="][i];
        let req =
            format!("GET / HTTP/1.1\r\nHost: b.test\r\nAuthorization: Basic {creds}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let done = std::sync::Arc::clone(&done);
        flood.push(tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf).await;
            done.fetch_add(1, Ordering::SeqCst);
            String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 401")
        }));
    }
    let a = http_request(r.http, "GET", "a.test", "/", &[("authorization", "Basic YTpwdw==")]).await.unwrap();
    let b_done = done.load(Ordering::SeqCst);
    assert_eq!((a.status, a.echo_name().as_str()), (200, "app"), "a:pw");
    assert!(b_done <= 2, "a's sign-in waited for {b_done} of b's six");
    for f in flood {
        assert!(f.await.unwrap(), "each of b's wrong passwords is refused");
    }
}
