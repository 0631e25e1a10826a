//! Who the client is behind a load balancer: the PROXY protocol header it sends first, and
//! the `X-Forwarded-*` headers of the proxies `trusted_proxies` names. Address lists, the
//! backend's `X-Real-IP` and `X-Forwarded-For`, HTTPS redirects and HSTS go by that client.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::IpAddr;

use common::*;
use wharf_dataplane::testing::{http_get_after, https_get_after, TestCa};
use wharf_dataplane::Options;
use wharf_model::{ClientFilter, IpNet, PathMatch, Route};

const V1: &[u8] = b"PROXY TCP4 203.0.113.7 127.0.0.1 51234 80\r\n";

/// A version 2 header for a TCP over IPv4 connection from `src`.
fn v2(src: [u8; 4]) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
    h.extend_from_slice(&src);
    h.extend_from_slice(&[127, 0, 0, 1, 0xc8, 0x01, 0x01, 0xbb]);
    h
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// `a.test`: `/open`, `/allow` (203.0.113.0/24 only), `/secure` (redirected to HTTPS).
async fn routes(r: &Running) {
    let allow = Route {
        clients: Some(Box::new(ClientFilter {
            allow: Some(vec![IpNet::parse("203.0.113.0/24").unwrap()]),
            deny: vec![],
        })),
        ..route(PathMatch::prefix("/allow").unwrap(), "app", false)
    };
    let mut routes = vec![
        route(PathMatch::prefix("/open").unwrap(), "app", false),
        allow,
        route(PathMatch::prefix("/secure").unwrap(), "app", true),
    ];
    routes.sort_by_key(|r| r.matches.precedence_key());
    let ca = TestCa::new("client address CA");
    // Another host of the same namespace, and one of another namespace.
    let www = route(PathMatch::prefix("/").unwrap(), "app", false);
    let other = Route { source: wharf_model::ObjectRef::new("Ingress", "other", "o"), ..www.clone() };
    let hosts =
        vec![(host("a.test"), routes), (host("www.shop.example"), vec![www]), (host("other.test"), vec![other])];
    let mut s = snapshot(hosts, vec![("app", cluster(&[echo("app").await]))]);
    s.certificates = [("web/a".to_owned(), ca.leaf(&["a.test"]).certificate())].into_iter().collect();
    s.tls_hosts = vec![wharf_model::TlsHost { host: host("a.test"), certificate: "web/a".into() }].into();
    r.gw.apply(s).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_proxy_protocol_the_client_is_the_source_its_header_names() {
    let opts = Options {
        proxy_protocol: true,
        access_log: false,
        https_redirect_port: 8443,
        hsts: Some(http::HeaderValue::from_static("max-age=60")),
        ..Options::default()
    };
    let r = start_with_options(opts).await;
    routes(&r).await;
    let local = ip("127.0.0.1");

    let seen = http_get_after(local, V1, r.http, "a.test", "/allow", &[]).await.unwrap();
    assert_eq!(seen.status, 200, "{}", seen.body);
    assert!(seen.headers.get("strict-transport-security").is_none(), "HSTS over plain HTTP");
    let headers = &seen.json()["headers"];
    assert_eq!((&headers["x-real-ip"], &headers["x-forwarded-for"]), (&"203.0.113.7".into(), &"203.0.113.7".into()));
    let seen = http_get_after(local, &v2([198, 51, 100, 9]), r.http, "a.test", "/allow", &[]).await.unwrap();
    assert_eq!(seen.status, 403, "a version 2 header names another client: {}", seen.body);
    let seen = http_get_after(local, &v2([198, 51, 100, 9]), r.http, "a.test", "/open", &[]).await.unwrap();
    assert_eq!(seen.json()["headers"]["x-real-ip"], "198.51.100.9");
    // Without trusted proxies, a client's own X-Forwarded-* headers are not believed.
    let spoof = [("x-forwarded-for", "203.0.113.7"), ("x-forwarded-proto", "https")];
    let seen = http_get_after(local, &v2([198, 51, 100, 9]), r.http, "a.test", "/allow", &spoof).await.unwrap();
    assert_eq!(seen.status, 403);
    let seen = http_get_after(local, &v2([198, 51, 100, 9]), r.http, "a.test", "/secure", &spoof).await.unwrap();
    assert_eq!(seen.status, 308, "{}", seen.body);

    // HTTPS: the header, then the TLS handshake; the certificate is the host's.
    let ca_cfg = TestCa::new("other").client_config(&[]);
    assert!(https_get_after(V1, r.https, Some("a.test"), ca_cfg, "a.test", "/allow").await.is_err());
    let cfg = wharf_dataplane::testing::inspecting_client_config(&[]);
    let seen = https_get_after(&v2([203, 0, 113, 8]), r.https, Some("a.test"), cfg, "a.test", "/allow").await.unwrap();
    assert_eq!(seen.status, 200, "{}", seen.body);
    assert_eq!(seen.json()["headers"]["x-real-ip"], "203.0.113.8");
    assert_eq!(seen.json()["headers"]["x-forwarded-proto"], "https");
    assert_eq!(seen.headers["strict-transport-security"], "max-age=60");

    // A connection without a header is closed, and counted.
    let plain = http_get(r.http, "a.test", "/open").await;
    assert!(plain.is_err(), "{plain:?}");
    let m = admin_get(&r, "/metrics").await.body;
    assert!(m.contains(r#"wharf_connections_refused_total{listener="http",reason="proxy_protocol"} 1"#), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxy_names_the_client_and_its_scheme_and_no_one_else_does() {
    let trusted = vec![IpNet::parse("127.0.0.1/32").unwrap()];
    let opts = Options {
        proxy_protocol: true,
        trusted_proxies: trusted,
        hsts: Some(http::HeaderValue::from_static("max-age=60; includeSubDomains")),
        access_log: false,
        https_redirect_port: 8443,
        ..Options::default()
    };
    let r = start_with_options(opts).await;
    routes(&r).await;
    let (proxy, other) = (ip("127.0.0.1"), ip("127.0.0.2"));
    let unknown = b"PROXY UNKNOWN\r\n";
    let forwarded = [
        ("x-forwarded-for", "198.51.100.1, 203.0.113.7"),
        ("x-forwarded-proto", "https"),
        ("x-original-url", "/admin"),
        ("ssl_client_verify", "SUCCESS"),
    ];

    let seen = http_get_after(proxy, unknown, r.http, "a.test", "/allow", &forwarded).await.unwrap();
    assert_eq!(seen.status, 200, "{}", seen.body);
    let headers = &seen.json()["headers"];
    assert_eq!(headers["x-real-ip"], "203.0.113.7");
    assert_eq!(headers["x-forwarded-for"], "198.51.100.1, 203.0.113.7, 127.0.0.1");
    assert_eq!((&headers["x-forwarded-proto"], &headers["x-forwarded-port"]), (&"https".into(), &"443".into()));
    assert_eq!(headers["x-original-url"], "/admin", "a trusted proxy's word");
    assert!(headers.get("ssl_client_verify").is_none(), "no one's underscores: {headers}");
    // It says the client used HTTPS: no redirect, and HSTS.
    let seen = http_get_after(proxy, unknown, r.http, "a.test", "/secure", &forwarded).await.unwrap();
    assert_eq!(seen.status, 200, "{}", seen.body);
    assert_eq!(seen.headers["strict-transport-security"], "max-age=60; includeSubDomains");
    // The host it names is the backend's Host, and the HTTPS redirect's (without its
    // port); routing still goes by the request's own host.
    let named = [("x-forwarded-host", "www.shop.example:8080, inner.example")];
    let seen = http_get_after(proxy, unknown, r.http, "a.test", "/open", &named).await.unwrap();
    let headers = &seen.json()["headers"];
    assert_eq!((seen.status, &seen.json()["host"]), (200, &"www.shop.example:8080".into()), "{headers}");
    assert_eq!(headers["x-forwarded-host"], "www.shop.example:8080");
    assert_eq!(headers["x-original-forwarded-host"], "www.shop.example:8080, inner.example");
    let seen = http_get_after(proxy, unknown, r.http, "a.test", "/secure", &named).await.unwrap();
    assert_eq!(
        (seen.status, seen.headers["location"].to_str().unwrap()),
        (308, "https://www.shop.example:8443/secure")
    );
    let seen = http_get_after(proxy, unknown, r.http, "b.test", "/open", &named).await.unwrap();
    assert_eq!(seen.status, 404, "not routed by the forwarded host");
    // A host of another namespace, or one nobody serves, is not believed.
    for named in ["other.test", "nobody.example", "www.shop.example:abc"] {
        let h = [("x-forwarded-host", named)];
        let seen = http_get_after(proxy, unknown, r.http, "a.test", "/open", &h).await.unwrap();
        let headers = &seen.json()["headers"];
        assert_eq!(
            (&seen.json()["host"], &headers["x-forwarded-host"]),
            (&"a.test".into(), &"a.test".into()),
            "{named}"
        );
        assert_eq!(headers["x-original-forwarded-host"], named);
        let seen = http_get_after(proxy, unknown, r.http, "a.test", "/secure", &h).await.unwrap();
        assert_eq!((seen.status, seen.headers["location"].to_str().unwrap()), (308, "https://a.test:8443/secure"));
    }

    // Another peer's headers, and its PROXY protocol header's address, are not believed.
    for preamble in [&unknown[..], V1] {
        let seen = http_get_after(other, preamble, r.http, "a.test", "/allow", &forwarded).await.unwrap();
        assert_eq!(seen.status, 403, "{}", String::from_utf8_lossy(preamble));
        let seen = http_get_after(other, preamble, r.http, "a.test", "/open", &forwarded).await.unwrap();
        let headers = &seen.json()["headers"];
        assert_eq!(headers["x-real-ip"], "127.0.0.2");
        assert_eq!(headers["x-forwarded-for"], "127.0.0.2", "the peer alone");
        assert_eq!(headers["x-original-forwarded-for"], "198.51.100.1, 203.0.113.7");
        assert!(headers.get("x-original-url").is_none() && headers.get("ssl_client_verify").is_none(), "{headers}");
        assert_eq!(headers["x-forwarded-proto"], "http");
        let named = [("x-forwarded-host", "evil.example")];
        let seen = http_get_after(other, preamble, r.http, "a.test", "/open", &named).await.unwrap();
        let headers = &seen.json()["headers"];
        assert_eq!((&seen.json()["host"], &headers["x-forwarded-host"]), (&"a.test".into(), &"a.test".into()));
        assert_eq!(headers["x-original-forwarded-host"], "evil.example");
        let seen = http_get_after(other, preamble, r.http, "a.test", "/secure", &named).await.unwrap();
        assert_eq!((seen.status, seen.headers["location"].to_str().unwrap()), (308, "https://a.test:8443/secure"));
        assert!(seen.headers.get("strict-transport-security").is_none());
    }
}
