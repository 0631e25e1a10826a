//! Certificates from ACME, proven against Pebble (Let's Encrypt's test server) with its
//! defaults: 5 % of nonces refused, half of the authorizations reused. Pebble validates by
//! connecting to the gateway's ports on the address its DNS server (pebble-challtestsrv)
//! gives for every name: 127.0.0.1, or a Gateway's own address.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use wharf_e2e::*;

/// The tools directory (`build-tools.sh`), where Pebble and its certificates are.
fn tools() -> PathBuf {
    let pebble = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .find(|d| d.join("pebble").is_file());
    pebble.expect("pebble is on PATH: run the suite with e2e/run.sh")
}

use wharf_dataplane::testing::free_port;

/// Pebble and its DNS server, validating on `http_port` and `tls_port` of 127.0.0.1 (or
/// of the address given to [`Pebble::start_at`]).
struct Pebble {
    _dns: Proc,
    server: Proc,
    directory: String,
    management: SocketAddr,
    ca_file: PathBuf,
}

impl Pebble {
    /// Its directory URL when it listens on `listen`, and the CA its TLS chains to.
    fn address(listen: u16) -> (String, PathBuf) {
        (format!("https://127.0.0.1:{listen}/dir"), tools().join("pebble-certs/pebble.minica.pem"))
    }

    async fn start(dir: &Path, listen: u16, http_port: u16, tls_port: u16) -> Pebble {
        Pebble::start_at(dir, listen, ("127.0.0.1", http_port, tls_port), 7_776_000).await
    }

    /// [`Pebble::start`] issuing certificates valid for `validity` seconds.
    async fn start_with(dir: &Path, listen: u16, http_port: u16, tls_port: u16, validity: u64) -> Pebble {
        Pebble::start_at(dir, listen, ("127.0.0.1", http_port, tls_port), validity).await
    }

    /// Pebble validating on the ports of `at` (address, HTTP port, TLS port), issuing
    /// certificates valid for `validity` seconds.
    async fn start_at(dir: &Path, listen: u16, at: (&str, u16, u16), validity: u64) -> Pebble {
        let (address, http_port, tls_port) = at;
        let tools = tools();
        let certs = tools.join("pebble-certs");
        let (management, dns, dns_management) = (free_port(), free_port(), free_port());
        let mut dns_cmd = Command::new(tools.join("pebble-challtestsrv"));
        dns_cmd.args(["-defaultIPv4", address, "-defaultIPv6", ""]).args([
            "-dnsserver",
            &format!("127.0.0.1:{dns}"),
            "-management",
            &format!("127.0.0.1:{dns_management}"),
            "-http01",
            "",
            "-https01",
            "",
            "-tlsalpn01",
            "",
            "-doh",
            "",
        ]);
        let dns_proc = Proc::spawn_command(dns_cmd).unwrap();
        let config = serde_json::json!({"pebble": {
            "listenAddress": format!("127.0.0.1:{listen}"),
            "managementListenAddress": format!("127.0.0.1:{management}"),
            "certificate": certs.join("cert.pem"),
            "privateKey": certs.join("key.pem"),
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
            "retryAfter": {"authz": 1, "order": 1},
            "profiles": {"default": {"description": "the test's", "validityPeriod": validity}},
        }});
        let config_path = dir.join("pebble.json");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let mut cmd = Command::new(tools.join("pebble"));
        cmd.args(["-config", &config_path.to_string_lossy(), "-dnsserver", &format!("127.0.0.1:{dns}")])
            .env("PEBBLE_VA_NOSLEEP", "1");
        let server = Proc::spawn_command(cmd).unwrap();
        let (directory, ca_file) = Pebble::address(listen);
        let pebble = Pebble {
            _dns: dns_proc,
            server,
            directory,
            management: SocketAddr::from(([127, 0, 0, 1], management)),
            ca_file,
        };
        let up = eventually(Duration::from_secs(20), || async { pebble.roots().is_some() }).await;
        assert!(up, "Pebble did not start:\n{}", pebble.server.log());
        pebble
    }

    /// The root Pebble signs with (a new one at every start), PEM.
    fn roots(&self) -> Option<String> {
        let out = Command::new("curl")
            .args(["-sf", "--cacert", &self.ca_file.to_string_lossy()])
            .arg(format!("https://{}/roots/0", self.management))
            .output()
            .ok()?;
        let pem = String::from_utf8(out.stdout).ok()?;
        pem.contains("BEGIN CERTIFICATE").then_some(pem)
    }

    /// A client trusting only Pebble's root, resuming no session (a resumed session shows
    /// the certificate of the session it resumes).
    fn client(&self) -> Arc<rustls::ClientConfig> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        let pem = self.roots().expect("Pebble's root");
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.resumption = rustls::client::Resumption::disabled();
        Arc::new(cfg)
    }
}

/// `wharf run` on the files of `dir`, keeping ACME state in `dir/acme`.
fn wharf(env: &Env, dir: &Path, ports: (u16, u16, u16), issuers: &[String]) -> Proc {
    let (http, https, admin) = ports;
    let mut cmd = Command::new(&env.wharf_bin);
    cmd.args(["run", "-f", &dir.join("site").to_string_lossy(), "--listen-address", "127.0.0.1"])
        .args(["--http-port", &http.to_string(), "--https-port", &https.to_string()])
        .args(["--admin-port", &admin.to_string(), "--passthrough-port", "0"])
        .args(["--acme-dir", &dir.join("acme").to_string_lossy(), "--acme-propagation-delay", "0s"])
        .env("RUST_LOG", "info,wharf::access=off");
    for i in issuers {
        cmd.args(["--acme-issuer", i]);
    }
    Proc::spawn_command(cmd).unwrap()
}

/// Writes our IngressClass and `files` (name, content) into `dir/site`.
fn site(dir: &Path, files: &[(&str, String)]) {
    std::fs::create_dir_all(dir.join("site")).unwrap();
    let class = serde_json::json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": "wharf"}, "spec": {"controller": "wharf.dev/ingress-controller"}});
    std::fs::write(dir.join("site/class.yaml"), serde_yaml::to_string(&class).unwrap()).unwrap();
    for (name, content) in files {
        std::fs::write(dir.join("site").join(name), content).unwrap();
    }
}

/// An Ingress for `host` whose TLS Secret `secret` does not exist, with `annotations`.
fn ingress(name: &str, host: &str, secret: &str, annotations: serde_json::Value, backend: SocketAddr) -> String {
    let objects = [
        serde_json::json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": name, "namespace": "web", "annotations": annotations},
            "spec": {"ingressClassName": "wharf", "tls": [{"hosts": [host], "secretName": secret}],
                "rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": name, "port": {"number": 80}}}}]}}]}}),
        serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "web"},
            "spec": {"ports": [{"port": 80, "targetPort": backend.port()}]}}),
        serde_json::json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "web", "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4", "ports": [{"port": backend.port()}],
            "endpoints": [{"addresses": [backend.ip().to_string()]}]}),
    ];
    objects.iter().map(|o| serde_yaml::to_string(o).unwrap()).collect::<Vec<_>>().join("---\n")
}

async fn served_by_pebble(https: u16, host: &str, client: &Arc<rustls::ClientConfig>) -> Option<Seen> {
    let addr = SocketAddr::from(([127, 0, 0, 1], https));
    https_get(addr, Some(host), Arc::clone(client), host, "/").await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_gets_certificates_by_http01_and_tls_alpn01_and_keeps_them_across_restarts() {
    let env = Env::from_env().unwrap();
    let dir = TempDir::new("e2e-acme").unwrap();
    let ports = (free_port(), free_port(), free_port());
    let pebble = Pebble::start(&dir, free_port(), ports.0, ports.1).await;
    let (_echo, backend) = wharf_echo(&env, &dir).await;
    let alpn = serde_json::json!({"wharf.dev/acme-issuer": "alpn"});
    site(
        &dir,
        &[
            ("http01.yaml", ingress("shop", "shop.example.test", "shop-tls", serde_json::json!({}), backend)),
            ("alpn.yaml", ingress("api", "api.example.test", "api-tls", alpn, backend)),
        ],
    );
    let ca = pebble.ca_file.to_string_lossy().into_owned();
    let issuers = [
        format!("name=pebble,directory={},ca-file={ca},email=ops@example.test", pebble.directory),
        format!("name=alpn,directory={},ca-file={ca},challenge=tls-alpn-01", pebble.directory),
    ];
    let mut gateway = wharf(&env, &dir, ports, &issuers);
    let client = pebble.client();

    // Each host gets a certificate chained to Pebble's root, by SNI.
    for host in ["shop.example.test", "api.example.test"] {
        let issued =
            eventually(Duration::from_secs(90), || async { served_by_pebble(ports.1, host, &client).await.is_some() })
                .await;
        assert!(issued, "no certificate for {host}:\n{}\n--- pebble:\n{}", gateway.log(), pebble.server.log());
    }
    let shop = served_by_pebble(ports.1, "shop.example.test", &client).await.unwrap();
    assert_eq!(shop.echo_name(), "acme-backend");
    let log = gateway.log();
    assert!(log.contains("answered an ACME HTTP-01 validation"), "{log}");
    assert!(log.contains("answered an ACME TLS-ALPN-01 validation"), "{log}");
    let metrics = http_get(SocketAddr::from(([127, 0, 0, 1], ports.2)), "admin", "/metrics").await.unwrap().body;
    assert!(metrics.contains("wharf_acme_orders_total{result=\"issued\"} 2"), "{metrics}");
    assert!(metrics.contains("wharf_acme_certificate_expiry_seconds{secret=\"web/shop-tls\"}"), "{metrics}");
    let secrets = std::fs::read_dir(dir.join("acme/secrets")).unwrap().count();
    assert_eq!(secrets, 2, "the challenges are withdrawn, the certificates stay");

    // A restart serves the same certificates without ordering again.
    let before = shop.peer_cert.clone();
    gateway.kill();
    let mut gateway = wharf(&env, &dir, ports, &issuers);
    let again = eventually(Duration::from_secs(20), || async {
        served_by_pebble(ports.1, "shop.example.test", &client).await.map(|s| s.peer_cert) == Some(before.clone())
    })
    .await;
    assert!(again, "{}", gateway.log());
    let metrics = http_get(SocketAddr::from(([127, 0, 0, 1], ports.2)), "admin", "/metrics").await.unwrap().body;
    assert!(!metrics.contains("wharf_acme_orders_total{"), "ordered again after a restart: {metrics}");
    gateway.kill();

    // The directory moves the certificate's renewal window into the past (ARI, through
    // Pebble's management API): the next replica to ask renews it at once.
    let stored = std::fs::read_to_string(dir.join("acme/secrets/certificate.web.shop-tls.yaml")).unwrap();
    let stored: k8s_openapi::api::core::v1::Secret = serde_yaml::from_str(&stored).unwrap();
    let pem = String::from_utf8(stored.data.unwrap()["tls.crt"].0.clone()).unwrap();
    let window = r#"{"suggestedWindow": {"start": "2020-01-01T00:00:00Z", "end": "2020-01-02T00:00:00Z"}}"#;
    let body = serde_json::json!({"Certificate": pem, "ARIResponse": window}).to_string();
    let set = Command::new("curl")
        .args(["-sf", "--cacert", &pebble.ca_file.to_string_lossy(), "-X", "POST", "--data-binary", &body])
        .arg(format!("https://{}/set-renewal-info/", pebble.management))
        .output()
        .unwrap();
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    // The account is lost as well: the renewal comes from a new account, which the server
    // refuses to let name the certificate it replaces; it is ordered without naming it.
    std::fs::remove_file(dir.join("acme/accounts/pebble.json")).unwrap();
    let gateway = wharf(&env, &dir, ports, &issuers);
    let renewed = eventually(Duration::from_secs(60), || async {
        served_by_pebble(ports.1, "shop.example.test", &client).await.is_some_and(|s| s.peer_cert != before)
    })
    .await;
    assert!(renewed, "{}", gateway.log());
    let log = gateway.log();
    assert!(log.contains("the ACME directory suggests a renewal window"), "{log}");
    assert!(log.contains("refused the renewal naming the certificate it replaces"), "{log}");
    let metrics = http_get(SocketAddr::from(([127, 0, 0, 1], ports.2)), "admin", "/metrics").await.unwrap().body;
    assert!(metrics.contains("wharf_acme_orders_total{result=\"issued\"} 1"), "{metrics}");
}

/// An echo backend answering as `acme-backend`.
async fn wharf_echo(env: &Env, _dir: &Path) -> (Proc, SocketAddr) {
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut cmd = Command::new(&env.wharf_bin);
    cmd.args(["echo", "--listen", &addr.to_string(), "--name", "acme-backend"]);
    let p = Proc::spawn_command(cmd).unwrap();
    let up = eventually(Duration::from_secs(10), || async { http_get(addr, "x", "/").await.is_ok() }).await;
    assert!(up, "{}", p.log());
    (p, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_orders_into_missing_secrets_and_leaves_secrets_it_does_not_manage_alone() {
    use k8s_openapi::api::core::v1::Secret;
    let env = Env::from_env().unwrap();
    let s = Scope::new("acme").await.unwrap();
    grant_chart_acme(&s.ns).unwrap();
    // A tenant the operator did not list: its TLS Secret gets no certificate.
    let other = Scope::new("acme-unlisted").await.unwrap();
    let dir = TempDir::new("e2e-acme-controller").unwrap();
    let (_backend, addr) = backend(&env, "acme-app").await.unwrap();
    s.service("app", addr).await.unwrap();
    let listen = free_port();
    let (directory, ca_file) = Pebble::address(listen);
    let issuer = format!("name=pebble,directory={directory},ca-file={},email=ops@example.test", ca_file.display());
    let c = Controller::start(
        &env,
        &s,
        "acme-1",
        &["--acme-issuer", &issuer, "--acme-propagation-delay", "0s", "--acme-namespace", &s.ns],
    )
    .await
    .unwrap();
    let pebble = Pebble::start(&dir, listen, c.http.port(), c.https.port()).await;
    let client = pebble.client();

    // A TLS Secret that does not exist: ordered, stored as an ordinary TLS Secret, served.
    s.ingress("shop", "shop.acme.test", "app", Some("shop-tls")).await.unwrap();
    let issued = eventually(Duration::from_secs(90), || async {
        https_get(c.https, Some("shop.acme.test"), Arc::clone(&client), "shop.acme.test", "/").await.is_ok()
    })
    .await;
    assert!(issued, "no certificate:\n{}\n--- pebble:\n{}", c.proc.log(), pebble.server.log());
    let seen = https_get(c.https, Some("shop.acme.test"), Arc::clone(&client), "shop.acme.test", "/").await.unwrap();
    assert_eq!(seen.echo_name(), "acme-app");
    let secrets: kube::Api<Secret> = kube::Api::namespaced(s.client.clone(), &s.ns);
    let stored = secrets.get("shop-tls").await.unwrap();
    assert_eq!(stored.type_.as_deref(), Some("kubernetes.io/tls"));
    let labels = stored.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("wharf.dev/acme-issuer").map(String::as_str), Some("pebble"), "{labels:?}");
    let described = eventually(Duration::from_secs(10), || async {
        let text = s.kubectl(&["describe", "ingress", "shop"]).unwrap_or_default();
        text.contains("Issuing") && text.contains("Issued")
    })
    .await;
    assert!(described, "{}", s.kubectl(&["describe", "ingress", "shop"]).unwrap_or_default());
    // The order's challenge Secret was withdrawn (the other tests' orders publish theirs in
    // the same namespace meanwhile).
    let challenges: kube::Api<Secret> = kube::Api::namespaced(s.client.clone(), "wharf-system");
    assert!(c.proc.log().contains("answered an ACME HTTP-01 validation"), "{}", c.proc.log());
    let name = wharf_controller::k8s::acme::challenge_secret_name(&s.ns, "shop-tls");
    assert!(challenges.get_opt(&name).await.unwrap().is_none(), "{name} is still there");
    assert_eq!(c.metric("wharf_acme_orders_total{result=\"issued\"}").await, 1.0);

    // A Secret Wharf does not manage is never overwritten, even when asked for ACME.
    let ca = TestCa::default();
    let own = ca.leaf(&["own.acme.test"]);
    s.tls_secret("own-tls", &own.chain_pem, &own.key_pem).await.unwrap();
    s.apply::<k8s_openapi::api::networking::v1::Ingress>(serde_json::json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "own", "namespace": s.ns, "annotations": {"wharf.dev/acme": "true"}},
        "spec": {"ingressClassName": s.class, "tls": [{"hosts": ["own.acme.test"], "secretName": "own-tls"}],
            "rules": [{"host": "own.acme.test", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "app", "port": {"number": 80}}}}]}}]},
    }))
    .await
    .unwrap();
    let told = eventually(Duration::from_secs(10), || async {
        s.kubectl(&["describe", "ingress", "own"]).unwrap_or_default().contains("AcmeSecretNotManaged")
    })
    .await;
    assert!(told, "{}", c.proc.log());
    // The unlisted namespace's Ingress of this class: told why, and no Secret written.
    other
        .apply::<k8s_openapi::api::networking::v1::Ingress>(serde_json::json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "elsewhere", "namespace": other.ns},
            "spec": {"ingressClassName": s.class, "tls": [{"hosts": ["elsewhere.acme.test"], "secretName": "e-tls"}],
                "rules": [{"host": "elsewhere.acme.test", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": "app", "port": {"number": 80}}}}]}}]},
        }))
        .await
        .unwrap();
    let refused = eventually(Duration::from_secs(10), || async {
        other.kubectl(&["describe", "ingress", "elsewhere"]).unwrap_or_default().contains("AcmeNamespaceNotAllowed")
    })
    .await;
    assert!(refused, "{}", c.proc.log());
    let theirs: kube::Api<Secret> = kube::Api::namespaced(other.client.clone(), &other.ns);
    assert!(theirs.get_opt("e-tls").await.unwrap().is_none(), "no certificate written there");
    let kept = secrets.get("own-tls").await.unwrap();
    let crt = kept.data.as_ref().and_then(|d| d.get("tls.crt")).map(|b| b.0.clone());
    assert_eq!(crt, Some(own.chain_pem.as_bytes().to_vec()));
    let verifying = ca.client_config(&[b"http/1.1"]);
    let seen = https_get(c.https, Some("own.acme.test"), verifying, "own.acme.test", "/").await.unwrap();
    assert_eq!(seen.echo_name(), "acme-app");
    assert_eq!(c.metric("wharf_acme_orders_total{result=\"issued\"}").await, 1.0);
}

/// The leaf certificate a new connection to `host` gets, verified against Pebble's root.
async fn leaf(https: u16, host: &str, client: &Arc<rustls::ClientConfig>) -> Option<Vec<u8>> {
    served_by_pebble(https, host, client).await.and_then(|s| s.peer_cert).map(|c| c.as_ref().to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_swaps_the_certificate_under_open_connections_and_a_failed_one_keeps_the_old() {
    let env = Env::from_env().unwrap();
    let dir = TempDir::new("e2e-acme-renewal").unwrap();
    let ports = (free_port(), free_port(), free_port());
    // Certificates of 30 s: renewed at two thirds, 20 s after issuance.
    let mut pebble = Pebble::start_with(&dir, free_port(), ports.0, ports.1, 30).await;
    let (_echo, backend) = wharf_echo(&env, &dir).await;
    site(&dir, &[("shop.yaml", ingress("shop", "renew.example.test", "renew-tls", serde_json::json!({}), backend))]);
    let issuer = format!("name=pebble,directory={},ca-file={}", pebble.directory, pebble.ca_file.display());
    let gateway = wharf(&env, &dir, ports, &[issuer]);
    let client = pebble.client();
    let host = "renew.example.test";
    let first = eventually(Duration::from_secs(60), || async { leaf(ports.1, host, &client).await.is_some() }).await;
    assert!(first, "no certificate:\n{}", gateway.log());
    let first = leaf(ports.1, host, &client).await.unwrap();

    // A keep-alive client sends requests on one connection through the renewal.
    let addr = SocketAddr::from(([127, 0, 0, 1], ports.1));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(host).unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::clone(&client)).connect(name, tcp).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let requests = tokio::spawn(async move {
        let (mut ok, mut failed) = (0u32, Vec::new());
        while !*stopped.borrow_and_update() {
            let req = http::Request::get("/").header("host", host).body(http_body_util::Empty::<bytes::Bytes>::new());
            match sender.send_request(req.unwrap()).await {
                Ok(r) if r.status() == 200 => ok += 1,
                Ok(r) => failed.push(r.status().to_string()),
                Err(e) => failed.push(e.to_string()),
            }
            tokio::select! {
                _ = stopped.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        (ok, failed)
    });
    let renewed = eventually(Duration::from_secs(45), || async {
        leaf(ports.1, host, &client).await.is_some_and(|l| l != first)
    })
    .await;
    stop.send_replace(true);
    let (ok, failed) = requests.await.unwrap();
    assert!(renewed, "not renewed:\n{}\n--- pebble:\n{}", gateway.log(), pebble.server.log());
    assert!(failed.is_empty() && ok > 20, "{ok} answered, failed: {failed:?}");
    let second = leaf(ports.1, host, &client).await.unwrap();
    let admin = SocketAddr::from(([127, 0, 0, 1], ports.2));
    let metric = |body: String, series: &str| {
        body.lines().find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok()).unwrap_or(0.0)
    };
    let body = http_get(admin, "admin", "/metrics").await.unwrap().body;
    assert_eq!(metric(body, "wharf_acme_orders_total{result=\"issued\"}"), 2.0);

    // The ACME server goes away: the renewal fails, says so, and the certificate it has
    // keeps serving.
    pebble.server.kill();
    let failed = eventually(Duration::from_secs(45), || async {
        let body = http_get(admin, "admin", "/metrics").await.map(|s| s.body).unwrap_or_default();
        metric(body, "wharf_acme_orders_total{result=\"unreachable\"}") >= 1.0
    })
    .await;
    assert!(failed, "{}", gateway.log());
    let log = gateway.log();
    assert!(log.contains("the current certificate keeps serving; next attempt in 60s"), "{log}");
    let insecure = inspecting_client_config(&[b"http/1.1"]);
    let seen = https_get(addr, Some(host), insecure, host, "/").await.unwrap();
    assert_eq!(seen.peer_cert.map(|c| c.as_ref().to_vec()), Some(second));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_replicas_the_one_that_is_not_the_leader_answers_the_validation() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("acme-ha").await.unwrap();
    grant_chart_acme(&s.ns).unwrap();
    let dir = TempDir::new("e2e-acme-ha").unwrap();
    let (_backend, addr) = backend(&env, "acme-ha-app").await.unwrap();
    s.service("app", addr).await.unwrap();
    let listen = free_port();
    let (directory, ca_file) = Pebble::address(listen);
    let ca = ca_file.display();
    let http01 = format!("name=pebble,directory={directory},ca-file={ca}");
    let alpn = format!("name=alpn,directory={directory},ca-file={ca},challenge=tls-alpn-01");
    let flags = ["--acme-issuer", &http01, "--acme-issuer", &alpn];
    let leader = Controller::start(&env, &s, "acme-a", &flags).await.unwrap();
    let led = eventually(Duration::from_secs(20), || async { leader.proc.log().contains("became the leader") }).await;
    assert!(led, "{}", leader.proc.log());
    let follower = Controller::start(&env, &s, "acme-b", &flags).await.unwrap();
    // Pebble validates on the follower's ports only.
    let pebble = Pebble::start(&dir, listen, follower.http.port(), follower.https.port()).await;
    let client = pebble.client();

    s.ingress("shop", "shop.ha.test", "app", Some("shop-tls")).await.unwrap();
    s.apply::<k8s_openapi::api::networking::v1::Ingress>(serde_json::json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "api", "namespace": s.ns, "annotations": {"wharf.dev/acme-issuer": "alpn"}},
        "spec": {"ingressClassName": s.class, "tls": [{"hosts": ["api.ha.test"], "secretName": "api-tls"}],
            "rules": [{"host": "api.ha.test", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "app", "port": {"number": 80}}}}]}}]},
    }))
    .await
    .unwrap();
    for host in ["shop.ha.test", "api.ha.test"] {
        let issued = eventually(Duration::from_secs(90), || async {
            https_get(follower.https, Some(host), Arc::clone(&client), host, "/").await.is_ok()
                && https_get(leader.https, Some(host), Arc::clone(&client), host, "/").await.is_ok()
        })
        .await;
        let (l, f, p) = (leader.proc.log(), follower.proc.log(), pebble.server.log());
        assert!(issued, "{host}:\n{l}\n--- follower:\n{f}\n--- pebble:\n{p}");
    }
    let (l, f) = (leader.proc.log(), follower.proc.log());
    assert!(
        f.contains("answered an ACME HTTP-01 validation") && f.contains("answered an ACME TLS-ALPN-01 validation"),
        "{f}"
    );
    assert!(!l.contains("answered an ACME"), "{l}");
    assert_eq!(leader.metric("wharf_acme_orders_total{result=\"issued\"}").await, 2.0);
    assert_eq!(follower.metric("wharf_acme_orders_total{result=\"issued\"}").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_listener_gets_its_certificate_on_the_gateways_own_address() {
    use serde_json::json;
    use wharf_gateway_api::gateways::Gateway;
    use wharf_gateway_api::httproutes::HttpRoute;
    let env = Env::from_env().unwrap();
    let s = Scope::new("acme-gw").await.unwrap();
    grant_chart_acme(&s.ns).unwrap();
    let dir = TempDir::new("e2e-acme-gateway").unwrap();
    let (_backend, addr) = backend(&env, "acme-gw-app").await.unwrap();
    s.service("app", addr).await.unwrap();
    let listen = free_port();
    let (directory, ca_file) = Pebble::address(listen);
    let issuer = format!("name=pebble,directory={directory},ca-file={}", ca_file.display());
    let gateway_controller = format!("{}-gateway", s.controller_name);
    let flags = [
        "--gateway-controller-name",
        &gateway_controller,
        "--gateway-addresses",
        "127.104.0.0/16",
        "--acme-issuer",
        &issuer,
        "--acme-propagation-delay",
        "0s",
    ];
    let c = Controller::start(&env, &s, "acme-gw-0", &flags).await.unwrap();
    s.gateway_class(&gateway_controller).await.unwrap();
    // The Gateway asks for its address, so that Pebble's DNS server gives it for every name.
    let ip = "127.104.0.7";
    let pebble = Pebble::start_at(&dir, listen, (ip, 18080, 18443), 7_776_000).await;
    let host = "shop.gw-acme.test";
    s.apply::<Gateway>(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": s.ns},
        "spec": {"gatewayClassName": s.class, "addresses": [{"type": "IPAddress", "value": ip}], "listeners": [
            {"name": "http", "port": 18080, "protocol": "HTTP"},
            {"name": "https", "port": 18443, "protocol": "HTTPS", "hostname": host,
             "tls": {"certificateRefs": [{"name": "shop-tls"}]}},
            {"name": "nameless", "port": 18444, "protocol": "HTTPS",
             "tls": {"certificateRefs": [{"name": "nameless-tls"}], "options": {"wharf.dev/acme": "true"}}},
        ]},
    }))
    .await
    .unwrap();
    s.apply::<HttpRoute>(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "shop", "namespace": s.ns},
        "spec": {"parentRefs": [{"name": "gw"}], "hostnames": [host],
                 "rules": [{"backendRefs": [{"name": "app", "port": 80}]}]},
    }))
    .await
    .unwrap();

    // Pebble validates HTTP-01 on the Gateway's HTTP listener; the HTTPS listener then
    // serves the certificate, chained to Pebble's root, and routes to the backend.
    let client = pebble.client();
    let https: SocketAddr = format!("{ip}:18443").parse().unwrap();
    let issued = eventually(Duration::from_secs(90), || async {
        https_get(https, Some(host), Arc::clone(&client), host, "/").await.is_ok()
    })
    .await;
    assert!(issued, "no certificate:\n{}\n--- pebble:\n{}", c.proc.log(), pebble.server.log());
    let seen = https_get(https, Some(host), Arc::clone(&client), host, "/").await.unwrap();
    assert_eq!(seen.echo_name(), "acme-gw-app");
    assert!(c.proc.log().contains("answered an ACME HTTP-01 validation"), "{}", c.proc.log());
    assert_eq!(c.metric("wharf_acme_orders_total{result=\"issued\"}").await, 1.0);

    // kubectl shows the listener resolved, and the order and what cannot be ordered as
    // Events on the Gateway.
    let resolved = eventually(Duration::from_secs(10), || async {
        let gw = s.get_json("gateway", "gw").unwrap_or_default();
        gw["status"]["listeners"].as_array().into_iter().flatten().any(|l| {
            l["name"] == "https" && has_condition(&conditions(&l["conditions"]), "ResolvedRefs", "True", "ResolvedRefs")
        })
    })
    .await;
    assert!(resolved, "{:#}", s.get_json("gateway", "gw").unwrap_or_default());
    let described = eventually(Duration::from_secs(10), || async {
        let text = s.kubectl(&["describe", "gateway", "gw"]).unwrap_or_default();
        text.contains("Issuing") && text.contains("Issued") && text.contains("AcmeNoHost")
    })
    .await;
    assert!(described, "{}", s.kubectl(&["describe", "gateway", "gw"]).unwrap_or_default());
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(s.client.clone(), &s.ns);
    let stored = secrets.get("shop-tls").await.unwrap();
    let labels = stored.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("wharf.dev/acme-issuer").map(String::as_str), Some("pebble"), "{labels:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_withdraws_what_the_old_one_left_mid_order_and_orders_again() {
    use k8s_openapi::api::core::v1::Secret;
    let env = Env::from_env().unwrap();
    let s = Scope::new("acme-takeover").await.unwrap();
    grant_chart_acme(&s.ns).unwrap();
    let dir = TempDir::new("e2e-acme-takeover").unwrap();
    let (_backend, addr) = backend(&env, "acme-takeover-app").await.unwrap();
    s.service("app", addr).await.unwrap();
    let listen = free_port();
    let (directory, ca_file) = Pebble::address(listen);
    let issuer = format!("name=pebble,directory={directory},ca-file={}", ca_file.display());
    // The first leader waits long between publishing its answers and asking for
    // validation; it dies there.
    let slow = ["--acme-issuer", &issuer, "--acme-propagation-delay", "300s"];
    let mut first = Controller::start(&env, &s, "acme-first", &slow).await.unwrap();
    let led = eventually(Duration::from_secs(20), || async { first.proc.log().contains("became the leader") }).await;
    assert!(led, "{}", first.proc.log());
    let second =
        Controller::start(&env, &s, "acme-second", &["--acme-issuer", &issuer, "--acme-propagation-delay", "0s"])
            .await
            .unwrap();
    let pebble = Pebble::start(&dir, listen, second.http.port(), second.https.port()).await;
    let client = pebble.client();

    let host = "shop.takeover.test";
    s.ingress("shop", host, "app", Some("shop-tls")).await.unwrap();
    let challenges: kube::Api<Secret> = kube::Api::namespaced(s.client.clone(), "wharf-system");
    let name = wharf_controller::k8s::acme::challenge_secret_name(&s.ns, "shop-tls");
    let published =
        eventually(Duration::from_secs(60), || async { challenges.get_opt(&name).await.ok().flatten().is_some() })
            .await;
    assert!(published, "{}", first.proc.log());
    first.proc.kill();

    // The second replica takes the Lease, withdraws the answers the first left, orders
    // again, and serves what it got.
    let issued = eventually(Duration::from_secs(90), || async {
        https_get(second.https, Some(host), Arc::clone(&client), host, "/").await.is_ok()
    })
    .await;
    assert!(issued, "{}\n--- pebble:\n{}", second.proc.log(), pebble.server.log());
    let log = second.proc.log();
    assert!(log.contains("withdrew the ACME challenges of orders an earlier leader left unfinished"), "{log}");
    assert_eq!(second.metric("wharf_acme_orders_total{result=\"issued\"}").await, 1.0);
    assert!(challenges.get_opt(&name).await.unwrap().is_none(), "{name} is still there");
}
