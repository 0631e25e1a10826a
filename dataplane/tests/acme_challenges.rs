//! ACME validation requests answered from the snapshot: HTTP-01 on the HTTP listener
//! ahead of routes and HTTPS redirects, TLS-ALPN-01 on the HTTPS listener to clients
//! offering `acme-tls/1`, with every other request and handshake served as before.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use wharf_dataplane::testing::TestCa;
use wharf_model::{Certificate, PathMatch, TlsHost};

const TOKEN: &str = "LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0";

/// A TLS-ALPN-01 challenge certificate for `name` (RFC 8737 §3): self-signed, the name as
/// its only SAN, the critical acmeIdentifier extension.
fn challenge_certificate(name: &str) -> Certificate {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(&[7; 32])];
    let cert = params.self_signed(&key).unwrap();
    Certificate::from_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes(), 0).unwrap()
}

/// shop.test served over HTTPS with a redirect from HTTP, and the given challenges.
fn site_snapshot(ca: &TestCa, backend: std::net::SocketAddr) -> wharf_model::Snapshot {
    let mut s = snapshot(
        vec![(host("shop.test"), vec![route(PathMatch::Prefix("/".into()), "site", true)])],
        vec![("site", cluster(&[backend]))],
    );
    s.certificates.insert("shop".into(), ca.leaf(&["shop.test"]).certificate());
    s.tls_hosts = vec![TlsHost { host: host("shop.test"), certificate: "shop".into() }].into();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http01_is_answered_ahead_of_routes_and_redirects_on_the_http_listener() {
    let r = start().await;
    let ca = TestCa::default();
    let mut s = site_snapshot(&ca, echo("site").await);
    let path = format!("/.well-known/acme-challenge/{TOKEN}");
    // Before the challenge is published the path is the site's: redirected to HTTPS.
    r.gw.apply(s.clone()).unwrap();
    assert_eq!(http_get(r.http, "shop.test", &path).await.unwrap().status, 308);

    s.acme.http01.insert(TOKEN.into(), format!("{TOKEN}.thumbprint"));
    r.gw.apply(s).unwrap();
    // Whatever the host: the validator asks for the name being validated, which may have
    // no route at all yet.
    for host in ["shop.test", "new.test"] {
        let seen = http_get(r.http, host, &path).await.unwrap();
        assert_eq!((seen.status, seen.body.as_str()), (200, format!("{TOKEN}.thumbprint").as_str()), "{host}");
        assert_eq!(seen.headers["content-type"], "application/octet-stream");
    }
    // Other tokens, other methods and the HTTPS listener get what they got before.
    let other = http_get(r.http, "shop.test", "/.well-known/acme-challenge/other").await.unwrap();
    assert_eq!(other.status, 308);
    let post = http_request(r.http, "POST", "shop.test", &path, &[]).await.unwrap();
    assert_eq!(post.status, 308);
    let tls = https_get(r.https, Some("shop.test"), ca.client_config(&[b"http/1.1"]), "shop.test", &path).await;
    assert_eq!(tls.unwrap().echo_name(), "site");

    let metrics = admin_get(&r, "/metrics").await.body;
    assert!(metrics.contains("wharf_acme_challenges_answered_total{type=\"http-01\"} 2"), "{metrics}");
}

/// What `openssl s_client` saw of a handshake with `sni` offering the ALPN protocols
/// `alpn`, then sending an HTTP request: the server's certificate (PEM), the protocol agreed
/// and whether an HTTP response came back. OpenSSL stands in for a validation server:
/// rustls's own client refuses the critical acmeIdentifier extension before it looks at the
/// certificate, as it should.
fn s_client(addr: std::net::SocketAddr, sni: &str, alpn: &str) -> (Option<String>, Option<String>, bool) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect", &addr.to_string(), "-servername", sni, "-alpn", alpn, "-ign_eof"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl is installed");
    let request = format!("GET / HTTP/1.1\r\nHost: {sni}\r\nConnection: close\r\n\r\n");
    let _ = child.stdin.take().expect("stdin").write_all(request.as_bytes());
    let out = child.wait_with_output().expect("openssl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let cert = text.find("-----BEGIN CERTIFICATE-----").and_then(|b| {
        let end = text[b..].find("-----END CERTIFICATE-----")? + b + "-----END CERTIFICATE-----".len();
        Some(text[b..end].to_owned())
    });
    let agreed = text.lines().find_map(|l| l.strip_prefix("ALPN protocol: ")).map(str::to_owned);
    (cert, agreed, text.contains("HTTP/1.1 "))
}

/// The DER of the first certificate of `pem`.
fn der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_alpn01_serves_the_challenge_certificate_only_to_acme_tls_clients_of_its_name() {
    let r = start().await;
    let ca = TestCa::default();
    let mut s = site_snapshot(&ca, echo("site").await);
    let challenge = challenge_certificate("shop.test");
    s.acme.tls_alpn01.insert("shop.test".into(), challenge.clone());
    r.gw.apply(s).unwrap();
    let want = challenge.key.cert[0].clone();
    let https = r.https;
    let seen =
        move |sni: &'static str, alpn: &'static str| tokio::task::spawn_blocking(move || s_client(https, sni, alpn));

    // The validator: only acme-tls/1, the name as SNI. It gets the challenge certificate,
    // agrees on acme-tls/1, and the connection serves nothing after the handshake.
    let (cert, agreed, http) = seen("shop.test", "acme-tls/1").await.unwrap();
    assert_eq!(cert.as_deref().map(der), Some(want.clone()));
    assert_eq!((agreed.as_deref(), http), (Some("acme-tls/1"), false));
    let (cert, ..) = seen("SHOP.test", "acme-tls/1").await.unwrap();
    assert_eq!(cert.as_deref().map(der), Some(want.clone()));

    // Browsers of the same name get the site's certificate and the site.
    let (cert, agreed, http) = seen("shop.test", "http/1.1").await.unwrap();
    assert_ne!(cert.as_deref().map(der), Some(want.clone()));
    assert_eq!((agreed.as_deref(), http), (Some("http/1.1"), true));
    let site = https_get(r.https, Some("shop.test"), ca.client_config(&[b"h2"]), "shop.test", "/").await.unwrap();
    assert_eq!(site.echo_name(), "site");

    // acme-tls/1 for a name without a challenge is not agreed.
    let (cert, agreed, _) = seen("other.test", "acme-tls/1").await.unwrap();
    assert_eq!((cert, agreed), (None, None));

    let metrics = admin_get(&r, "/metrics").await.body;
    assert!(metrics.contains("wharf_acme_challenges_answered_total{type=\"tls-alpn-01\"} 2"), "{metrics}");

    // Once the challenge is gone, acme-tls/1 is not agreed for the name either.
    r.gw.apply(site_snapshot(&ca, echo("site").await)).unwrap();
    let (_, agreed, _) = seen("shop.test", "acme-tls/1").await.unwrap();
    assert_eq!(agreed, None);
}
