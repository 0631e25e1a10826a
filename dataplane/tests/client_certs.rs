//! Client certificates (ingress-nginx's `auth-tls-*`): hosts whose handshakes ask for a
//! certificate of their CA, routes that require one, what the backend is told, and the
//! 421 that keeps one host's connection from serving another's requests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use wharf_dataplane::testing::{http_get, inspecting_client_config_as, TestCa};
use wharf_model::{ClientAuthHost, ClientCa, ClientCertCheck, PathMatch, Route, TlsHost, VerifyClient};

fn check(verify: VerifyClient, pass_certificate: bool, error_page: Option<&str>) -> ClientCertCheck {
    ClientCertCheck { verify, pass_certificate, error_page: error_page.map(str::to_owned), match_subject: None }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_ask_for_certificates_of_their_ca_and_routes_require_them() {
    let r = start().await;
    let server_ca = TestCa::new("server CA");
    let client_ca = TestCa::new("client CA");
    let client = client_ca.leaf(&["client-1"]);
    let intruder = TestCa::new("another CA").leaf(&["client-1"]);
    let names = ["a.test", "b.test", "c.test", "d.test"];
    let routes = |host: &str, cert: Option<ClientCertCheck>| {
        let route = Route { client_cert: cert.map(Box::new), ..route(PathMatch::prefix("/").unwrap(), "app", false) };
        (common::host(host), vec![route])
    };
    let mut s = snapshot(
        vec![
            routes("a.test", Some(check(VerifyClient::On, true, None))),
            routes("b.test", Some(check(VerifyClient::Optional, false, None))),
            routes("c.test", None),
            routes("d.test", Some(check(VerifyClient::On, false, Some("https://login.test/certificate")))),
        ],
        vec![("app", cluster(&[echo("app").await]))],
    );
    s.certificates = [("web/all".to_owned(), server_ca.leaf(&names).certificate())].into_iter().collect();
    s.tls_hosts = names.iter().map(|n| TlsHost { host: common::host(n), certificate: "web/all".into() }).collect();
    let ca = ClientCa {
        source: "web/client-ca".into(),
        certificates: wharf_model::parse_ca_bundle(client_ca.root_pem.as_bytes()).unwrap(),
        verify_depth: 1,
    };
    s.client_auth = ["a.test", "b.test", "d.test"]
        .iter()
        .map(|n| ClientAuthHost { host: common::host(n), ca: ca.clone() })
        .collect();
    r.gw.apply(s).unwrap();
    let with_cert = inspecting_client_config_as(&[b"h2", b"http/1.1"], Some(&client));
    let without = inspecting_client_config_as(&[], None);
    let get = |sni: &'static str, host: &'static str, cfg| https_get(r.https, Some(sni), cfg, host, "/");

    // Required, presented: the backend hears who it is, and gets the certificate.
    let seen = get("a.test", "a.test", with_cert.clone()).await.unwrap();
    assert_eq!((seen.status, seen.alpn.as_deref()), (200, Some(&b"h2"[..])), "{}", seen.body);
    let headers = &seen.json()["headers"];
    assert_eq!(headers["ssl-client-verify"], "SUCCESS");
    assert_eq!(headers["ssl-client-subject-dn"], "CN=client-1");
    assert_eq!(headers["ssl-client-issuer-dn"], "CN=client CA");
    let pem = headers["ssl-client-cert"].as_str().unwrap_or_default();
    assert!(pem.starts_with("-----BEGIN%20CERTIFICATE-----%0A"), "{pem}");
    // Required, missing: 400 as nginx answers, or the error page.
    let seen = get("a.test", "a.test", without.clone()).await.unwrap();
    assert_eq!((seen.status, seen.body.trim()), (400, "400 Bad Request: No required SSL certificate was sent"));
    let seen = get("d.test", "d.test", without.clone()).await.unwrap();
    assert_eq!((seen.status, seen.headers["location"].to_str().unwrap()), (302, "https://login.test/certificate"));
    // A certificate of another CA fails the handshake.
    let refused = get("a.test", "a.test", inspecting_client_config_as(&[], Some(&intruder))).await;
    assert!(refused.is_err(), "{refused:?}");
    // Optional: NONE without one, SUCCESS with one, and no certificate passed on.
    let seen = get("b.test", "b.test", without.clone()).await.unwrap();
    assert_eq!((seen.status, &seen.json()["headers"]["ssl-client-verify"]), (200, &"NONE".into()));
    let seen = get("b.test", "b.test", with_cert.clone()).await.unwrap();
    assert_eq!(seen.json()["headers"]["ssl-client-verify"], "SUCCESS");
    assert!(seen.json()["headers"].get("ssl-client-cert").is_none());
    // A host that asks for nothing.
    let seen = get("c.test", "c.test", with_cert.clone()).await.unwrap();
    assert_eq!(seen.status, 200);
    assert!(seen.json()["headers"].get("ssl-client-verify").is_none());
    // A connection made for a host without client certificates does not serve one with:
    // 421, the client opens a connection of its own for it. Hosts of one CA share theirs.
    assert_eq!(get("c.test", "a.test", with_cert.clone()).await.unwrap().status, 421);
    assert_eq!(get("a.test", "c.test", with_cert.clone()).await.unwrap().status, 421);
    assert_eq!(get("a.test", "b.test", with_cert.clone()).await.unwrap().status, 200);
    // Plain HTTP carries no certificate.
    assert_eq!(http_get(r.http, "a.test", "/").await.unwrap().status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subjects_must_match_and_chains_stay_within_the_verify_depth() {
    let r = start().await;
    let server_ca = TestCa::new("server CA");
    let client_ca = TestCa::new("client CA");
    let intermediate = client_ca.intermediate("client intermediate");
    let ops = client_ca.leaf(&["ops"]);
    let dev = client_ca.leaf(&["dev"]);
    let ops_via_intermediate = intermediate.leaf(&["ops"]);
    let names = ["one.test", "two.test", "match.test"];
    let matching = |verify| ClientCertCheck {
        match_subject: Some(wharf_model::Pattern::full(".*(?:CN=(ops|admin)).*").unwrap()),
        ..check(verify, false, None)
    };
    let routes = |host: &str, cert: ClientCertCheck| {
        let route = Route { client_cert: Some(Box::new(cert)), ..route(PathMatch::prefix("/").unwrap(), "app", false) };
        (common::host(host), vec![route])
    };
    let mut s = snapshot(
        vec![
            routes("one.test", check(VerifyClient::On, false, None)),
            routes("two.test", check(VerifyClient::On, false, None)),
            routes("match.test", matching(VerifyClient::Optional)),
        ],
        vec![("app", cluster(&[echo("app").await]))],
    );
    s.certificates = [("web/all".to_owned(), server_ca.leaf(&names).certificate())].into_iter().collect();
    s.tls_hosts = names.iter().map(|n| TlsHost { host: common::host(n), certificate: "web/all".into() }).collect();
    let ca = |verify_depth| ClientCa {
        source: "web/client-ca".into(),
        certificates: wharf_model::parse_ca_bundle(client_ca.root_pem.as_bytes()).unwrap(),
        verify_depth,
    };
    s.client_auth = vec![
        ClientAuthHost { host: common::host("one.test"), ca: ca(1) },
        ClientAuthHost { host: common::host("two.test"), ca: ca(2) },
        ClientAuthHost { host: common::host("match.test"), ca: ca(1) },
    ];
    r.gw.apply(s).unwrap();
    let get = |host: &'static str, leaf: Option<&wharf_dataplane::testing::Leaf>| {
        https_get(r.https, Some(host), inspecting_client_config_as(&[], leaf), host, "/")
    };

    // Depth 1 (ingress-nginx's default): only certificates the CA signed itself; the
    // client sends its chain up to the root, which is no step of its own.
    let seen = get("one.test", Some(&ops)).await.unwrap();
    assert_eq!(seen.json()["headers"]["ssl-client-issuer-dn"], "CN=client CA");
    let refused = get("one.test", Some(&ops_via_intermediate)).await;
    assert!(refused.is_err(), "a chain through an intermediate is deeper than 1: {refused:?}");
    // Depth 2: one intermediate.
    let seen = get("two.test", Some(&ops_via_intermediate)).await.unwrap();
    assert_eq!(seen.json()["headers"]["ssl-client-issuer-dn"], "CN=client intermediate");
    assert_eq!(seen.json()["headers"]["ssl-client-subject-dn"], "CN=ops");

    // auth-tls-match-cn: a subject that does not match, or no certificate, is 403.
    assert_eq!(get("match.test", Some(&ops)).await.unwrap().status, 200);
    let seen = get("match.test", Some(&dev)).await.unwrap();
    assert_eq!((seen.status, seen.body.trim()), (403, "403 Forbidden: client certificate unauthorized"));
    assert_eq!(get("match.test", None).await.unwrap().status, 403);
}
