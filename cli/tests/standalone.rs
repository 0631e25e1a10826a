//! `wharf run` as a user runs it: the real binary, YAML files on disk, real TLS clients
//! (rustls in-process; curl and openssl s_client where installed).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::{addr, Wharf};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wharf_dataplane::testing::{
    eventually, free_port, http_get, https_get, inspecting_client_config, Leaf, TempDir, TestCa,
};

fn temp_dir(name: &str) -> TempDir {
    TempDir::new(&format!("test-{name}")).unwrap()
}

fn secret_yaml(name: &str, crt: &str, key: &str) -> String {
    let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
    format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: quickstart}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
        indent(crt),
        indent(key)
    )
}

/// The quickstart manifests, with backend ports moved to free ones, plus Secrets from a
/// test CA. Returns the CA, the leaves by name, the manifest dir and the backend ports.
struct Quickstart {
    ca: TestCa,
    leaves: Vec<(&'static str, Leaf)>,
    dir: TempDir,
}

async fn quickstart(name: &str) -> Quickstart {
    quickstart_with(name, None).await
}

/// Like [`quickstart`], with the "blog" backend on port `blog` (the caller serves it)
/// instead of an echo server.
async fn quickstart_with(name: &str, mut blog: Option<u16>) -> Quickstart {
    let dir = temp_dir(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart");
    let mut ports = Vec::new();
    for (backend, port) in [("web", "9001"), ("api", "9002"), ("blog", "9003")] {
        let p = match blog.take_if(|_| backend == "blog") {
            Some(p) => p,
            None => {
                let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let p = l.local_addr().unwrap().port();
                tokio::spawn(wharf_dataplane::echo::serve(l, backend.to_owned()));
                p
            }
        };
        ports.push((port, p.to_string()));
    }
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let mut text = std::fs::read_to_string(&path).unwrap();
        for (from, to) in &ports {
            text = text.replace(*from, to);
        }
        std::fs::write(dir.join(path.file_name().unwrap()), text).unwrap();
    }
    let ca = TestCa::default();
    let leaves = vec![
        ("shop-tls", ca.leaf(&["shop.example.com"])),
        ("blog-tls", ca.leaf(&["blog.example.com"])),
        ("apps-wildcard-tls", ca.leaf(&["*.apps.example.com"])),
        ("default-tls", ca.leaf(&["wharf.local"])),
    ];
    let secrets: String = leaves.iter().map(|(n, l)| secret_yaml(n, &l.chain_pem, &l.key_pem)).collect();
    std::fs::write(dir.join("30-secrets.yaml"), secrets).unwrap();
    std::fs::write(dir.join("ca.pem"), &ca.root_pem).unwrap();
    Quickstart { ca, leaves, dir }
}

impl Quickstart {
    fn leaf(&self, name: &str) -> &Leaf {
        &self.leaves.iter().find(|(n, _)| *n == name).unwrap().1
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_serves_each_host_with_its_certificate() {
    let q = quickstart("sni").await;
    let w = Wharf::start(&[&q.dir], &["--default-ssl-certificate", "quickstart/default-tls"]);
    w.wait_ready().await;
    let inspect = inspecting_client_config(&[b"h2", b"http/1.1"]);
    let cases = [
        (Some("shop.example.com"), "/", "shop-tls", "web"),
        (Some("shop.example.com"), "/api/items", "shop-tls", "api"),
        (Some("blog.example.com"), "/", "blog-tls", "blog"),
        (Some("x.apps.example.com"), "/", "apps-wildcard-tls", "api"),
        (Some("unknown.example.com"), "/", "default-tls", ""),
        (None, "/", "default-tls", ""),
    ];
    for (sni, path, cert, backend) in cases {
        let host = sni.unwrap_or("127.0.0.1");
        let seen = https_get(addr(w.https), sni, inspect.clone(), host, path).await.unwrap();
        assert_eq!(seen.peer_cert.as_ref(), Some(&q.leaf(cert).leaf_der()), "{sni:?}");
        assert_eq!(seen.echo_name(), backend, "{sni:?}{path}: {}", seen.body);
        if backend.is_empty() {
            assert_eq!(seen.status, 404);
        }
    }
    // A verifying client with the test CA, over HTTP/2.
    let seen =
        https_get(addr(w.https), Some("shop.example.com"), q.ca.client_config(&[b"h2"]), "shop.example.com", "/")
            .await
            .unwrap();
    assert_eq!((seen.status, seen.alpn.as_deref()), (200, Some(&b"h2"[..])));

    // :80 redirects the TLS host, not the one that opted out.
    let r = http_get(addr(w.http), "shop.example.com", "/cart?id=1").await.unwrap();
    assert_eq!(r.status, 308);
    assert_eq!(r.headers["location"], format!("https://shop.example.com:{}/cart?id=1", w.https));
    assert_eq!(http_get(addr(w.http), "blog.example.com", "/").await.unwrap().echo_name(), "blog");

    // Plain TCP on the configured port reaches the api Service.
    assert_eq!(http_get(addr(w.tcp), "anything", "/").await.unwrap().echo_name(), "api");

    // curl and openssl are real clients users meet; CI installs them (a missing one fails).
    {
        let out = Command::new("curl")
            .args(["-sS", "--http2", "--cacert"])
            .arg(q.dir.join("ca.pem"))
            .args(["--resolve", &format!("shop.example.com:{}:127.0.0.1", w.https)])
            .arg(format!("https://shop.example.com:{}/api/x", w.https))
            .output()
            .expect("curl is needed by this test");
        let body = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "curl failed: {}", String::from_utf8_lossy(&out.stderr));
        assert!(body.contains("\"name\":\"api\""), "{body}");
    }
    {
        for (sni, cn) in [(Some("blog.example.com"), "blog.example.com"), (None, "wharf.local")] {
            let mut cmd = Command::new("openssl");
            cmd.args(["s_client", "-connect", &format!("127.0.0.1:{}", w.https)]);
            if let Some(s) = sni {
                cmd.args(["-servername", s]);
            } else {
                cmd.arg("-noservername");
            }
            let out = cmd.stdin(Stdio::null()).output().expect("openssl is needed by this test");
            let text = String::from_utf8_lossy(&out.stdout).replace(' ', "");
            assert!(text.contains(&format!("subject=CN={cn}")), "openssl with SNI {sni:?}:\n{text}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_reaches_backend_with_client_tls_intact() {
    let q = quickstart("passthrough").await;
    // The vault backend: a TLS server with its own certificate from another CA.
    let backend_ca = TestCa::new("Vault CA");
    let vault = backend_ca.leaf(&["vault.example.com"]);
    let ck = wharf_model::tls::load(vault.chain_pem.as_bytes(), vault.key_pem.as_bytes(), 0).unwrap().certified_key;
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(ck)));
    let mut cfg = cfg;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let vault_port = l.local_addr().unwrap().port();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    tokio::spawn(async move {
        loop {
            let (s, remote) = l.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(s).await {
                    let svc = hyper::service::service_fn(move |_req| async move {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Full::new(
                            bytes::Bytes::from(format!("{{\"name\":\"vault\",\"remote\":\"{remote}\"}}")),
                        )))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                        .await;
                }
            });
        }
    });
    let slices = q.dir.join("10-backends.yaml");
    let text = std::fs::read_to_string(&slices).unwrap().replace("9443", &vault_port.to_string());
    std::fs::write(&slices, text).unwrap();
    let w = Wharf::start(&[&q.dir], &[]);
    w.wait_ready().await;
    let seen = https_get(
        addr(w.passthrough),
        Some("vault.example.com"),
        backend_ca.client_config(&[b"http/1.1"]),
        "vault.example.com",
        "/",
    )
    .await
    .unwrap();
    assert_eq!(seen.peer_cert.as_ref(), Some(&vault.leaf_der()), "the client must see the backend's own certificate");
    assert_eq!(seen.echo_name(), "vault");
    // An SNI nobody routes: closed.
    assert!(https_get(addr(w.passthrough), Some("shop.example.com"), q.ca.client_config(&[]), "x", "/").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_on_change_and_keeps_last_good_config_on_bad_input() {
    let q = quickstart("reload").await;
    let w = Wharf::start_with_workers(&[&q.dir], &["--default-ssl-certificate", "quickstart/default-tls"], Some(1));
    w.wait_ready().await;
    let https = addr(w.https);
    let inspect = inspecting_client_config(&[b"http/1.1"]);

    // A new Ingress goes live without a restart.
    let extra = q.dir.join("40-new.yaml");
    std::fs::write(&extra, "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: new, namespace: quickstart}\nspec:\n  ingressClassName: wharf\n  rules:\n  - host: new.example.com\n    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}]}\n").unwrap();
    let http = addr(w.http);
    assert!(
        eventually(Duration::from_secs(5), || async move {
            http_get(http, "new.example.com", "/").await.map(|s| s.echo_name()).unwrap_or_default() == "api"
        })
        .await
    );

    // Broken YAML: the error names the file, the document and the object; nothing changes.
    std::fs::write(&extra, "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: new, namespace: quickstart}\nspec: {rules: 12}\n").unwrap();
    let log_has = |needle: String| {
        let log = w.log_handle();
        async move {
            let ok = eventually(Duration::from_secs(5), || {
                let log = Arc::clone(&log);
                let needle = needle.clone();
                async move { log.lock().unwrap().contains(&needle) }
            })
            .await;
            (ok, log.lock().unwrap().clone())
        }
    };
    let (found, log) = log_has("40-new.yaml: document 1 (Ingress new)".into()).await;
    assert!(found, "error does not name file and object:\n{log}");
    assert_eq!(
        http_get(http, "new.example.com", "/").await.unwrap().echo_name(),
        "api",
        "last good config must keep serving"
    );

    // A malformed certificate for one host: reported with the Ingress and the reason; the
    // other hosts keep their certificates, the broken host falls back to the default.
    std::fs::remove_file(&extra).unwrap();
    let mut secrets = std::fs::read_to_string(q.dir.join("30-secrets.yaml")).unwrap();
    let blog = q.leaf("blog-tls").chain_pem.lines().nth(3).unwrap().to_owned();
    secrets = secrets.replacen(&blog, "this is not base64 at all!", 1);
    std::fs::write(q.dir.join("30-secrets.yaml"), &secrets).unwrap();
    let (found, log) = log_has("TLS Secret quickstart/blog-tls".into()).await;
    assert!(found, "bad certificate not reported:\n{log}");
    assert!(log.contains("Ingress quickstart/blog"), "{log}");
    assert!(log.contains("BadCertificatePEM") || log.contains("BadCertificate"), "{log}");
    assert!(log.contains("last good certificate"), "{log}");
    let shop = https_get(https, Some("shop.example.com"), inspect.clone(), "shop.example.com", "/").await.unwrap();
    assert_eq!(shop.peer_cert.as_ref(), Some(&q.leaf("shop-tls").leaf_der()));
    assert_eq!(shop.echo_name(), "web");
    // The process saw the good blog certificate first, so that one keeps serving.
    let blog_seen = https_get(https, Some("blog.example.com"), inspect.clone(), "blog.example.com", "/").await.unwrap();
    assert_eq!(blog_seen.peer_cert.as_ref(), Some(&q.leaf("blog-tls").leaf_der()));
    assert_eq!(blog_seen.echo_name(), "blog");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_certificate_at_start_serves_default_for_that_host_only() {
    let q = quickstart("badstart").await;
    let mut secrets = std::fs::read_to_string(q.dir.join("30-secrets.yaml")).unwrap();
    // blog's key replaced with shop's: a key that does not match the certificate.
    let (blog_key, shop_key) = (q.leaf("blog-tls").key_pem.clone(), q.leaf("shop-tls").key_pem.clone());
    let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
    secrets = secrets.replace(&indent(&blog_key), &indent(&shop_key));
    std::fs::write(q.dir.join("30-secrets.yaml"), &secrets).unwrap();
    let w = Wharf::start(&[&q.dir], &["--default-ssl-certificate", "quickstart/default-tls"]);
    w.wait_ready().await;
    let inspect = inspecting_client_config(&[b"http/1.1"]);
    let blog =
        https_get(addr(w.https), Some("blog.example.com"), inspect.clone(), "blog.example.com", "/").await.unwrap();
    assert_eq!(
        blog.peer_cert.as_ref(),
        Some(&q.leaf("default-tls").leaf_der()),
        "a mismatched key must never be served"
    );
    let shop = https_get(addr(w.https), Some("shop.example.com"), inspect, "shop.example.com", "/").await.unwrap();
    assert_eq!(shop.peer_cert.as_ref(), Some(&q.leaf("shop-tls").leaf_der()));
    let log = w.log();
    assert!(log.contains("KeyMismatch") && log.contains("Ingress quickstart/blog"), "{log}");
    // Written to a pipe, as in a pod: plain text, no terminal colour codes.
    assert!(!log.contains('\u{1b}'), "ANSI escapes in a log written to a pipe:\n{log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_requests_and_exits_zero() {
    let held = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let q = quickstart_with("drain", Some(held.local_addr().unwrap().port())).await;
    let (mut arrived, release) = wharf_dataplane::testing::holding_backend(held);
    let w = Wharf::start_with_workers(&[&q.dir], &[], Some(1));
    w.wait_ready().await;
    let http = addr(w.http);
    let slow = tokio::spawn(async move { http_get(http, "blog.example.com", "/hold").await });
    // SIGTERM while the backend holds the request.
    arrived.recv().await.unwrap();
    let kill = Command::new("kill").args(["-TERM", &w.id().to_string()]).status().unwrap();
    assert!(kill.success());
    assert!(
        eventually(Duration::from_secs(5), || async move { tokio::net::TcpStream::connect(http).await.is_err() }).await,
        "still accepting after SIGTERM"
    );
    release.send(()).unwrap();
    let seen = slow.await.unwrap().unwrap();
    assert_eq!((seen.status, seen.body.as_str()), (200, "held"), "in-flight request was dropped");
    let log = w.exits_zero().await;
    assert!(log.contains("drained"), "{log}");
}

/// The `wharf_memory_in_use_bytes` gauge of a running gateway.
async fn in_use(admin: SocketAddr) -> u64 {
    let m = http_get(admin, "x", "/metrics").await.unwrap().body;
    let line = m.lines().find(|l| l.starts_with("wharf_memory_in_use_bytes ")).unwrap_or_default().to_owned();
    line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no resident memory in:\n{m}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn above_the_memory_watermark_new_connections_are_refused_until_memory_falls() {
    let q = quickstart("memory").await;
    // What this build uses at rest, from a first run with the default watermark (80% of a
    // memory limit, which the test process does not have: off).
    let baseline = {
        let w = Wharf::start(&[&q.dir], &[]);
        w.wait_ready().await;
        let m = http_get(addr(w.admin), "x", "/metrics").await.unwrap().body;
        assert!(m.contains("wharf_memory_watermark_bytes 0"), "{m}");
        assert!(w.log().contains("admission by memory is off"), "{}", w.log());
        in_use(addr(w.admin)).await
    };
    let watermark = baseline + (24 << 20);
    let w = Wharf::start(&[&q.dir], &["--memory-watermark", &watermark.to_string()]);
    w.wait_ready().await;
    let (http, admin) = (addr(w.http), addr(w.admin));
    assert!(
        http_get(admin, "x", "/metrics")
            .await
            .unwrap()
            .body
            .contains(&format!("wharf_memory_watermark_bytes {watermark}")),
        "watermark not exported"
    );
    // Clients that send most of a large request head and stop: each makes the gateway hold
    // it (up to --max-request-header-bytes, 64 KiB).
    let head = format!("GET / HTTP/1.1\r\nHost: shop.example.com\r\nX-Pad: {}\r\n", "p".repeat(60 * 1024));
    let mut held = Vec::new();
    let mut refused_at = None;
    while held.len() < 4000 {
        let mut s = tokio::net::TcpStream::connect(http).await.unwrap();
        if s.write_all(head.as_bytes()).await.is_err() {
            refused_at = Some(held.len());
            break;
        }
        held.push(s);
        if held.len() % 25 == 0 && http_get(admin, "x", "/healthz/ready").await.map(|s| s.status) == Ok(503) {
            refused_at = Some(held.len());
            break;
        }
    }
    let Some(n) = refused_at else {
        panic!(
            "{} connections holding 60 KiB each never passed the watermark; in use {}",
            held.len(),
            in_use(admin).await
        )
    };
    let ready = http_get(admin, "x", "/healthz/ready").await.unwrap();
    assert_eq!(ready.status, 503, "after {n} connections: {}", ready.body);
    assert!(ready.body.contains("memory-watermark"), "{}", ready.body);
    // A new client is closed without an answer; the connections already open still work.
    let mut fresh = tokio::net::TcpStream::connect(http).await.unwrap();
    let _ = fresh.write_all(b"GET / HTTP/1.1\r\nHost: shop.example.com\r\nConnection: close\r\n\r\n").await;
    let mut buf = Vec::new();
    let n_read = tokio::time::timeout(Duration::from_secs(5), fresh.read_to_end(&mut buf)).await.unwrap();
    assert!(matches!(n_read, Ok(0) | Err(_)), "a new connection was served: {:?}", String::from_utf8_lossy(&buf));
    let mut first = held.swap_remove(0);
    first.write_all(b"\r\n").await.unwrap();
    let mut answer = [0u8; 12];
    first.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"HTTP/1.1 308", "an open connection was not served");
    let metrics = http_get(admin, "x", "/metrics").await.unwrap().body;
    assert!(metrics.contains("wharf_connections_refused_total{listener=\"http\",reason=\"memory\"}"), "{metrics}");
    assert!(w.log().contains("memory in use is above --memory-watermark"), "{}", w.log());
    // The clients go away: memory falls, and the gateway takes connections again.
    drop(held);
    drop(first);
    let back = eventually(Duration::from_secs(10), || async move {
        http_get(admin, "x", "/healthz/ready").await.map(|s| s.status) == Ok(200)
    })
    .await;
    assert!(back, "still refusing at {} bytes in use (watermark {watermark})", in_use(admin).await);
    assert_eq!(http_get(http, "blog.example.com", "/").await.unwrap().echo_name(), "blog");
    assert!(w.log().contains("below --memory-watermark again"), "{}", w.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_the_shutdown_delay_it_is_not_ready_and_serves_clients_asking_them_to_reconnect() {
    let q = quickstart("closing").await;
    let w = Wharf::start(&[&q.dir], &["--shutdown-delay", "2s"]);
    w.wait_ready().await;
    let (http, admin) = (addr(w.http), addr(w.admin));
    // An HTTP/2 connection opened before SIGTERM, used once.
    let tcp = tokio::net::TcpStream::connect(addr(w.https)).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("shop.example.com").unwrap();
    let tls = tokio_rustls::TlsConnector::from(q.ca.client_config(&[b"h2"])).connect(name, tcp).await.unwrap();
    let (mut h2, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    let h2_ended = tokio::spawn(async move {
        let _ = conn.await;
        std::time::Instant::now()
    });
    let req =
        || http::Request::get("https://shop.example.com/").body(http_body_util::Empty::<bytes::Bytes>::new()).unwrap();
    assert_eq!(h2.send_request(req()).await.unwrap().status(), 200);

    let kill = Command::new("kill").args(["-TERM", &w.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let sigterm = std::time::Instant::now();
    let unready = eventually(Duration::from_secs(2), || async move {
        http_get(admin, "x", "/healthz/ready").await.is_ok_and(|r| r.status == 503 && r.body.contains("shutting down"))
    })
    .await;
    assert!(unready, "still ready after SIGTERM; log:\n{}", w.log());
    // A new HTTP/1.1 client is served and asked to reconnect.
    let r = http_get(http, "blog.example.com", "/").await.unwrap();
    assert_eq!((r.status, r.echo_name()), (200, "blog".to_owned()));
    assert_eq!(r.headers.get("connection").map(|v| v.as_bytes()), Some(&b"close"[..]), "{:?}", r.headers);
    // The HTTP/2 connection got GOAWAY and was closed, well before the delay ended.
    let ended =
        tokio::time::timeout(Duration::from_secs(2), h2_ended).await.expect("HTTP/2 connection still open").unwrap();
    assert!(
        ended.duration_since(sigterm) < Duration::from_millis(1500),
        "GOAWAY only after {:?}",
        ended.duration_since(sigterm)
    );
    // After the delay, new connections are refused and the process exits 0.
    let refused =
        eventually(Duration::from_secs(5), || async move { tokio::net::TcpStream::connect(http).await.is_err() }).await;
    assert!(refused, "still accepting; log:\n{}", w.log());
    let took = sigterm.elapsed();
    assert!(took >= Duration::from_millis(1900), "stopped accepting {took:?} after SIGTERM, before the 2 s delay");
    w.exits_zero().await;
}

/// examples/gateway-api, next to the quickstart's Ingresses: the Gateway is served on its
/// own address and ports with its HTTPRoutes' matches and filters; the edge listeners keep
/// serving the Ingresses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_api_example_serves_its_routes_on_the_gateways_own_ports() {
    let q = quickstart("gateway-api").await;
    let (http, https) = (free_port(), free_port());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gateway-api");
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) == Some("yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let text = text.replace("18080", &http.to_string()).replace("18443", &https.to_string());
            std::fs::write(q.dir.join(format!("gw-{}", path.file_name().unwrap().to_string_lossy())), text).unwrap();
        }
    }
    let w = Wharf::start(&[&q.dir], &["--gateway-addresses", "127.0.0.0/8"]);
    w.wait_ready().await;
    let gw_http = addr(http);
    assert!(
        eventually(Duration::from_secs(30), || async { http_get(gw_http, "shop.example.com", "/").await.is_ok() })
            .await,
        "the Gateway's HTTP port never opened; log:\n{}",
        w.log()
    );

    let api = http_get(gw_http, "shop.example.com", "/api/orders").await.unwrap();
    let seen = api.json();
    assert_eq!((api.status, api.echo_name()), (200, "api".into()), "{}", api.body);
    assert_eq!(seen["path"], "/orders", "the prefix was replaced");
    assert_eq!(seen["headers"]["x-gateway"], "wharf");
    assert_eq!(http_get(gw_http, "shop.example.com", "/").await.unwrap().echo_name(), "web");

    let moved = http_get(gw_http, "old.example.com", "/cart?id=1").await.unwrap();
    assert_eq!(moved.status, 301);
    assert_eq!(moved.headers["location"], format!("http://shop.example.com:{http}/cart?id=1"));
    assert_eq!(http_get(gw_http, "blog.example.com", "/").await.unwrap().status, 404, "an Ingress host");

    let tls = q.ca.client_config(&[b"h2"]);
    let seen = https_get(addr(https), Some("shop.example.com"), tls, "shop.example.com", "/api/x").await.unwrap();
    assert_eq!((seen.status, seen.echo_name()), (200, "api".into()));
    assert_eq!(seen.peer_cert, Some(q.leaf("shop-tls").leaf_der()));

    // The edge listeners still serve the Ingresses, and not the HTTPRoutes.
    assert_eq!(http_get(addr(w.http), "blog.example.com", "/").await.unwrap().echo_name(), "blog");
    assert_eq!(http_get(addr(w.http), "old.example.com", "/").await.unwrap().status, 404);
}

/// A running HAProxy (TCP mode) in front of Wharf's HTTP and HTTPS ports, sending a PROXY
/// protocol v2 header on each connection, as a cloud load balancer does.
struct Haproxy {
    child: Child,
    http: u16,
    https: u16,
    _dir: TempDir,
}

impl Haproxy {
    async fn start(w: &Wharf) -> Haproxy {
        let dir = temp_dir("haproxy");
        let (http, https) = (free_port(), free_port());
        let config = format!(
            "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
             listen http\n  bind 127.0.0.1:{http}\n  server wharf 127.0.0.1:{} send-proxy-v2 source 127.0.0.1\n\
             listen https\n  bind 127.0.0.1:{https}\n  server wharf 127.0.0.1:{} send-proxy-v2 source 127.0.0.1\n",
            w.http, w.https
        );
        std::fs::write(dir.join("haproxy.cfg"), config).unwrap();
        let child = Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(dir.join("haproxy.cfg"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("haproxy is needed by this test");
        let up =
            eventually(
                Duration::from_secs(10),
                || async move { tokio::net::TcpStream::connect(addr(https)).await.is_ok() },
            )
            .await;
        assert!(up, "haproxy did not start");
        Haproxy { child, http, https, _dir: dir }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// curl from the local address `from` with `args`: its exit status and body.
fn curl_from(from: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--interface", from])
        .args(args)
        .output()
        .expect("curl is needed by this test");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_haproxy_the_client_is_the_one_haproxy_accepted() {
    let q = quickstart("proxy-protocol").await;
    std::fs::write(
        q.dir.join("40-staff.yaml"),
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: staff\n  namespace: quickstart\n  \
         annotations: {nginx.ingress.kubernetes.io/whitelist-source-range: 127.0.0.9/32}\nspec:\n  \
         ingressClassName: wharf\n  rules:\n    - host: staff.example.com\n      http:\n        paths:\n          \
         - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}\n",
    )
    .unwrap();
    let w = Wharf::start(&[&q.dir], &["--proxy-protocol", "--trusted-proxy", "127.0.0.1"]);
    w.wait_ready().await;
    let h = Haproxy::start(&w).await;
    let staff = |port: u16| format!("http://staff.example.com:{port}/");
    let resolve = |port: u16| format!("staff.example.com:{port}:127.0.0.1");

    // Wharf's peer is HAProxy (127.0.0.1); the allow-list sees the client HAProxy accepted.
    let (ok, body) = curl_from("127.0.0.9", &["--resolve", &resolve(h.http), &staff(h.http)]);
    assert!(ok, "{body}\n{}", w.log());
    let seen: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!((&seen["name"], &seen["headers"]["x-real-ip"]), (&"web".into(), &"127.0.0.9".into()), "{seen}");
    let (_, body) = curl_from(
        "127.0.0.10",
        &["-w", "%{http_code}", "-o", "/dev/null", "--resolve", &resolve(h.http), &staff(h.http)],
    );
    assert_eq!(body, "403");

    // HTTPS through HAProxy: the header, then the client's own TLS handshake.
    let ca = q.dir.join("ca.pem");
    let (ok, body) = curl_from(
        "127.0.0.9",
        &[
            "--cacert",
            ca.to_str().unwrap(),
            "--resolve",
            &format!("shop.example.com:{}:127.0.0.1", h.https),
            &format!("https://shop.example.com:{}/", h.https),
        ],
    );
    assert!(ok, "{body}\n{}", w.log());
    let seen: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&seen["headers"]["x-real-ip"], &seen["headers"]["x-forwarded-proto"]),
        (&"127.0.0.9".into(), &"https".into())
    );

    // curl's own version 1 header, straight to Wharf; no header at all is refused.
    let (ok, body) = curl_from("127.0.0.9", &["--haproxy-protocol", "--resolve", &resolve(w.http), &staff(w.http)]);
    assert!(ok && body.contains("\"name\":\"web\""), "{body}");
    let (ok, _) = curl_from("127.0.0.9", &["--resolve", &resolve(w.http), &staff(w.http)]);
    assert!(!ok, "a connection without a PROXY protocol header is closed");
    let metrics = http_get(addr(w.admin), "x", "/metrics").await.unwrap().body;
    assert!(
        metrics.contains(r#"wharf_connections_refused_total{listener="http",reason="proxy_protocol"} 1"#),
        "{metrics}"
    );
}

/// What `openssl s_client` with `args` negotiated with `w`'s HTTPS listener: the
/// protocol and cipher, or `None` when the handshake failed.
fn negotiated(w: &Wharf, args: &[&str]) -> Option<(String, String)> {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{}", w.https), "-servername", "shop.example.com"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("openssl is needed by this test");
    let text = String::from_utf8_lossy(&out.stdout);
    // "New, TLSv1.3, Cipher is TLS_AES_256_GCM_SHA384" ("(NONE)" both when it failed).
    let line = text.lines().find_map(|l| l.strip_prefix("New, "))?;
    let (protocol, cipher) = line.split_once(", Cipher is ")?;
    (protocol != "(NONE)").then(|| (protocol.to_owned(), cipher.trim().to_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_versions_and_ciphers_are_the_ones_the_flags_allow() {
    let q = quickstart("tls-policy").await;
    // ingress-nginx's ssl-ciphers form, one suite of the test certificates' ECDSA kind.
    let w = Wharf::start(&[&q.dir], &["--tls-ciphers", "ECDHE-ECDSA-AES256-GCM-SHA384"]);
    w.wait_ready().await;
    let tls12 = |cipher: &str| negotiated(&w, &["-tls1_2", "-cipher", cipher]);
    assert_eq!(
        tls12("ECDHE-ECDSA-AES256-GCM-SHA384"),
        Some(("TLSv1.2".into(), "ECDHE-ECDSA-AES256-GCM-SHA384".into()))
    );
    assert_eq!(tls12("ECDHE-ECDSA-AES128-GCM-SHA256"), None, "a suite not listed");
    assert_eq!(negotiated(&w, &["-tls1_3"]).map(|(p, _)| p), Some("TLSv1.3".into()), "TLS 1.3 suites are kept");
    drop(w);

    let w = Wharf::start(&[&q.dir], &["--tls-min-version", "1.3"]);
    w.wait_ready().await;
    assert_eq!(negotiated(&w, &["-tls1_2"]), None, "TLS 1.2 refused");
    assert_eq!(negotiated(&w, &["-tls1_3"]).map(|(p, _)| p), Some("TLSv1.3".into()));
    drop(w);

    // A suite rustls does not have is refused at start, naming it.
    let out = Command::new(env!("CARGO_BIN_EXE_wharf"))
        .args(["controller", "--tls-ciphers", "ECDHE-RSA-AES128-SHA"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("\"ECDHE-RSA-AES128-SHA\" is not a cipher suite"), "{err}");
}

#[test]
fn an_acme_issuer_whose_files_cannot_be_used_stops_the_start_with_its_name() {
    let dir = temp_dir("acme-files");
    let hmac = dir.join("hmac");
    std::fs::write(&hmac, "not base64url!").unwrap();
    let not_pem = dir.join("root.pem");
    std::fs::write(&not_pem, "no certificate here").unwrap();
    let missing = dir.join("missing.pem");
    let acme_dir = dir.join("acme");
    let directory = "directory=https://127.0.0.1:1/dir";
    for (issuer, want) in [
        (format!("name=private,{directory},ca-file={}", missing.display()), "--acme-issuer private: ca-file"),
        (format!("name=private,{directory},ca-file={}", not_pem.display()), "--acme-issuer private: ca-file"),
        (format!("name=zerossl,{directory},eab-kid=kid,eab-hmac-file={}", hmac.display()), "not base64url"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_wharf"))
            .args(["run", "-f"])
            .arg(&*dir)
            .arg("--acme-dir")
            .arg(&acme_dir)
            .args(["--acme-issuer", &issuer, "--admin-port", "0", "--http-port", "0", "--https-port", "0"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{issuer}: started");
        assert!(stderr.contains(want), "{issuer}: {stderr}");
    }
}

/// Tenant `a` and tenant `b`, each with an echo backend, and the Ingresses `b` writes to
/// take over `a`'s host: a path of its own, a canary, a rule without host.
async fn tenants(name: &str) -> TempDir {
    let dir = temp_dir(name);
    let mut yaml = String::from(
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: wharf}\nspec: {controller: wharf.dev/ingress-controller}\n",
    );
    for ns in ["a", "b"] {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(wharf_dataplane::echo::serve(l, format!("{ns}-backend")));
        yaml.push_str(&format!(
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: app, namespace: {ns}}}\nspec: {{ports: [{{name: http, port: 80, targetPort: {port}}}]}}\n\
             ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: app-1, namespace: {ns}, labels: {{kubernetes.io/service-name: app}}}}\n\
             addressType: IPv4\nports: [{{name: http, port: {port}}}]\nendpoints: [{{addresses: [\"127.0.0.1\"]}}]\n"
        ));
    }
    let ingress = |ns: &str, name: &str, minute: u32, annotations: &str, host: Option<&str>, path: &str| {
        let host = host.map(|h| format!("host: {h}, ")).unwrap_or_default();
        format!(
            "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, namespace: {ns}, creationTimestamp: \"2026-01-01T00:{minute:02}:00Z\", annotations: {{{annotations}}}}}\n\
             spec:\n  ingressClassName: wharf\n  rules: [{{{host}http: {{paths: [{{path: {path}, pathType: Prefix, backend: {{service: {{name: app, port: {{number: 80}}}}}}}}]}}}}]\n"
        )
    };
    yaml.push_str(&ingress("a", "shop", 1, "", Some("shop.a.test"), "/"));
    yaml.push_str(&ingress("a", "docs", 1, "", Some("docs.a.test"), "/app"));
    yaml.push_str(&ingress("b", "admin", 2, "", Some("shop.a.test"), "/admin"));
    let canary = "nginx.ingress.kubernetes.io/canary: \"true\", nginx.ingress.kubernetes.io/canary-weight: \"100\"";
    yaml.push_str(&ingress("b", "canary", 0, canary, Some("shop.a.test"), "/"));
    yaml.push_str(&ingress("b", "catch-all", 3, "", None, "/"));
    std::fs::write(dir.join("tenants.yaml"), yaml).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_take_over_shadow_or_canary_another_tenants_host() {
    let dir = tenants("tenants").await;
    let w = Wharf::start(&[&dir.join("tenants.yaml")], &[]);
    w.wait_ready().await;
    let http = addr(w.http);
    let who = |host: &'static str, path: &'static str| async move {
        http_get(http, host, path).await.map(|s| (s.status, s.echo_name())).unwrap()
    };
    for _ in 0..20 {
        assert_eq!(who("shop.a.test", "/").await, (200, "a-backend".into()), "b's canary took a's traffic");
    }
    assert_eq!(who("shop.a.test", "/admin").await, (200, "a-backend".into()), "b's path on a's host");
    assert_eq!(who("docs.a.test", "/favicon.ico").await.0, 404, "fell through to b's rule without host");
    assert_eq!(who("other.test", "/").await, (200, "b-backend".into()), "b's own rule without host");
    let log = w.log();
    for ingress in ["b/admin", "b/canary"] {
        assert!(
            log.lines().any(|l| l.contains("HostOwnedByOtherNamespace") && l.contains(ingress)),
            "no diagnostic for {ingress}:\n{log}"
        );
    }
    drop(w);

    // The operator's settings, as the chart passes them.
    let merged = Wharf::start(&[&dir.join("tenants.yaml")], &["--merge-hosts-across-namespaces"]);
    merged.wait_ready().await;
    let got = http_get(addr(merged.http), "shop.a.test", "/admin").await.unwrap();
    assert_eq!(got.echo_name(), "b-backend", "merging lets b's path in");
    drop(merged);
    let assigned = Wharf::start(&[&dir.join("tenants.yaml")], &["--host-owner", "*.a.test=b"]);
    assigned.wait_ready().await;
    let at = addr(assigned.http);
    assert_eq!(http_get(at, "shop.a.test", "/admin").await.unwrap().echo_name(), "b-backend");
    // a's Ingress is not served: `/` falls through to b's own rule without host.
    assert_eq!(http_get(at, "shop.a.test", "/").await.unwrap().echo_name(), "b-backend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_protocol_without_trusted_proxies_stops_the_start_and_says_how_to_fix_it() {
    let q = quickstart("proxy-protocol-untrusted").await;
    let dir = q.dir.to_string_lossy().into_owned();
    let out = Command::new(env!("CARGO_BIN_EXE_wharf"))
        .args(["run", "-f", &dir, "--proxy-protocol", "--http-port", "0", "--https-port", "0", "--admin-port", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("--proxy-protocol needs --trusted-proxy") && err.contains("0.0.0.0/0"), "{err}");
}
