//! The gateway's mesh identity from a real istiod (e2e/harness/istiod.sh), configured
//! exactly as the chart renders `mesh.source: istio`: a CSR authenticated with a projected
//! service-account token that the real API server issued and istiod checks by TokenReview,
//! the mesh root from the `istio-ca-root-cert` ConfigMap istiod publishes, renewal before
//! expiry, and readiness that waits for the certificate.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wharf_dataplane::hbone::istio_ca::IstioCa;
use wharf_dataplane::hbone::{HboneClient, HboneError, MeshIdentity};
use wharf_dataplane::Metrics;
use wharf_e2e::*;
use wharf_model::{Hbone, Identity};

fn istiod() -> String {
    std::env::var("WHARF_E2E_ISTIOD_ADDRESS")
        .expect("WHARF_E2E_ISTIOD_ADDRESS is not set: run the suite with e2e/run.sh")
}

fn temp_dir(name: &str) -> TempDir {
    TempDir::new(&format!("e2e-{name}")).unwrap()
}

/// A token for `namespace/sa` with audience istio-ca, as a projected volume holds it.
fn token(namespace: &str, sa: &str) -> String {
    let out = std::process::Command::new("kubectl")
        .args(["create", "token", sa, "-n", namespace, "--audience", "istio-ca", "--duration", "1h"])
        .output()
        .unwrap();
    assert!(out.status.success(), "kubectl create token: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Writes the chart's two istio volumes (projected token, root ConfigMap) under `dir`.
fn write_istio_volumes(pod: &ChartPod, dir: &Path, root: &str) {
    std::fs::write(pod.volume(dir, "istio-token").unwrap().join("istio-token"), token("wharf-system", "wharf"))
        .unwrap();
    std::fs::write(pod.volume(dir, "istio-ca-root").unwrap().join("root-cert.pem"), root).unwrap();
}

fn mesh_args(pod: &ChartPod, dir: &Path) -> Vec<String> {
    let args = pod.mesh_args(dir);
    assert!(args.iter().any(|a| a.starts_with("--istio-ca-address=")), "{args:?}");
    assert!(args.iter().any(|a| a == "--mesh-service-account=wharf"), "{args:?}");
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_istio_mode_gets_its_identity_from_istiod_tunnels_with_it_and_renews_under_load() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("istio-ca").await.unwrap();
    let dir = temp_dir("istio-ca");
    let root = s.istio_root_cert().await.unwrap();

    // The backend's ztunnel stand-in, with a certificate istiod issued to the backend's own
    // ServiceAccount: both ends of the tunnel hold identities from the same real CA.
    s.apply::<k8s_openapi::api::core::v1::ServiceAccount>(json!({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "backend", "namespace": s.ns},
    }))
    .await
    .unwrap();
    std::fs::write(dir.join("backend-token"), token(&s.ns, "backend")).unwrap();
    std::fs::write(dir.join("root.pem"), &root).unwrap();
    let backend_identity = IstioCa {
        address: istiod().parse().unwrap(),
        token: dir.join("backend-token"),
        roots: dir.join("root.pem"),
        identity: Identity::new("cluster.local", &s.ns, "backend"),
        ttl: Duration::from_secs(3600),
    }
    .issue("cluster.local")
    .await
    .unwrap();
    std::fs::write(dir.join("backend.crt"), backend_identity.chain_pem()).unwrap();
    std::fs::write(dir.join("backend.key"), backend_identity.key_pem()).unwrap();
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let ztunnel = ztunnel_stand_in(&env, &dir, &p("backend.crt"), &p("backend.key"), &p("root.pem")).await.unwrap();

    // The gateway, with what the chart renders for mesh.source=istio. A 40 s certificate
    // is renewed after 20-24 s, inside this test.
    let pod = ChartPod::render(
        &["examples/ambient.yaml"],
        &[&format!("mesh.istio.caAddress={}", istiod()), "mesh.istio.certTTL=40s"],
    )
    .unwrap();
    write_istio_volumes(&pod, &dir, &root);
    let mut args = mesh_args(&pod, &dir);
    // The HBONE inbound the chart turns on (mesh.hbonePort), on a port of this test's own.
    assert!(pod.args.iter().any(|a| a == "--hbone-port=15008"), "{:?}", pod.args);
    let inbound_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    args.push(format!("--hbone-port={inbound_port}"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let c = Controller::spawn(&env, &s, "istio-ca-0", &args, &[("POD_NAMESPACE", "wharf-system")]).unwrap();
    c.wait_ready(Duration::from_secs(30)).await.unwrap();
    let log = c.proc.log();
    assert!(
        log.lines().any(
            |l| l.contains("mesh identity loaded") && l.contains("spiffe://cluster.local/ns/wharf-system/sa/wharf")
        ),
        "the gateway did not log its SPIFFE identity:\n{log}"
    );
    assert_eq!(c.metric("wharf_mesh_certificate_requests_total{result=\"ok\"}").await, 1.0);
    let expiry = c.metric("wharf_mesh_certificate_expiry_timestamp_seconds").await;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!(expiry > now && expiry < now + 120.0, "expiry {expiry} is not about 40 s from {now}");

    // A mesh client with an istiod identity tunnels into the gateway's HBONE inbound and
    // finds the gateway's istiod identity there; the tunnel reaches the gateway's own HTTP
    // listener, and nothing else on its host.
    let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client_identity = Arc::new(MeshIdentity::new("cluster.local"));
    let unix_now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    client_identity.set(backend_identity.with_roots(root.as_bytes(), unix_now).unwrap());
    let client = HboneClient::new(client_identity, Duration::from_secs(5), Metrics::new());
    let dial = std::net::SocketAddr::from(([127, 0, 0, 1], inbound_port));
    let to = |authority: String| Hbone {
        dial,
        identity: Identity::new("cluster.local", "wharf-system", "wharf"),
        authority,
    };
    let mut tunnel = client.open(&to(c.http.to_string()), None).await.unwrap();
    tunnel.write_all(b"GET / HTTP/1.1\r\nhost: nothing.e2e.test\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    tunnel.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 404"), "the gateway's own listener did not answer: {answer}");
    let refused = client.open(&to(elsewhere.local_addr().unwrap().to_string()), None).await;
    assert!(matches!(refused, Err(HboneError::Refused { status: 503, .. })), "{:?}", refused.err());
    let admin = client.open(&to(c.admin.to_string()), None).await;
    assert!(matches!(admin, Err(HboneError::Refused { status: 503, .. })), "{:?}", admin.err());

    // An ambient backend is served over HBONE with that identity.
    let (_b, addr) = backend(&env, "in-mesh").await.unwrap();
    s.pod("mesh-0", json!({"app": "mesh", "istio.io/dataplane-mode": "ambient"}), "backend").await.unwrap();
    s.service_for_pod("mesh", addr, Some("mesh-0")).await.unwrap();
    s.ingress("mesh", "mesh.e2e.test", "mesh", None).await.unwrap();
    let http = c.http;
    let served = eventually(Duration::from_secs(10), || async move {
        http_get(http, "mesh.e2e.test", "/").await.map(|r| r.echo_name()).unwrap_or_default() == "in-mesh"
    })
    .await;
    assert!(served, "not served over HBONE; gateway log:\n{}\nztunnel log:\n{}", c.proc.log(), ztunnel.log());
    assert!(c.metric("wharf_hbone_tunnels_total{direction=\"outbound\",result=\"ok\"}").await >= 1.0);

    // Requests keep flowing across the renewal, on new connections each time (each one a
    // new tunnel), and none fails.
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let load = {
        let (ok, failed) = (Arc::clone(&ok), Arc::clone(&failed));
        tokio::spawn(async move {
            loop {
                match http_get(http, "mesh.e2e.test", "/").await {
                    Ok(r) if r.status == 200 && r.echo_name() == "in-mesh" => ok.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        })
    };
    let renewed = eventually(Duration::from_secs(60), || {
        let c = &c;
        async move { c.metric("wharf_mesh_certificate_requests_total{result=\"ok\"}").await >= 2.0 }
    })
    .await;
    assert!(renewed, "no renewal within 60 s of a 40 s certificate; log:\n{}", c.proc.log());
    let after = ok.load(Ordering::Relaxed) + 50;
    assert!(
        eventually(Duration::from_secs(20), || {
            let ok = Arc::clone(&ok);
            async move { ok.load(Ordering::Relaxed) >= after }
        })
        .await,
        "requests stopped after the renewal"
    );
    load.abort();
    eprintln!(
        "across the renewal: {} requests served, {} failed",
        ok.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
    assert_eq!(failed.load(Ordering::Relaxed), 0, "requests failed across the renewal; log:\n{}", c.proc.log());
    assert!(c.metric("wharf_mesh_certificate_expiry_timestamp_seconds").await > expiry, "the new certificate is live");
}

/// A TCP relay to istiod that accepts only once `open` is called: istiod "unreachable"
/// and then "back" for one gateway, without touching the istiod other tests use.
struct Gate {
    port: u16,
    target: String,
}

impl Gate {
    fn new() -> Gate {
        let target = istiod().trim_start_matches("https://").trim_end_matches('/').to_owned();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        Gate { port, target }
    }

    async fn open(&self) {
        relay(std::net::SocketAddr::from(([127, 0, 0, 1], self.port)), self.target.clone()).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_while_istiod_is_unreachable_and_ready_once_it_answers() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("istio-down").await.unwrap();
    let dir = temp_dir("istio-down");
    let root = s.istio_root_cert().await.unwrap();
    let gate = Gate::new();
    let pod = ChartPod::render(
        &["examples/ambient.yaml"],
        &[&format!("mesh.istio.caAddress=https://localhost:{}", gate.port)],
    )
    .unwrap();
    write_istio_volumes(&pod, &dir, &root);
    let args = mesh_args(&pod, &dir);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let c = Controller::spawn(&env, &s, "istio-down-0", &args, &[("POD_NAMESPACE", "wharf-system")]).unwrap();

    // Config applied, no certificate: not ready, and the metric and the log say why.
    let admin = c.admin;
    let refused = eventually(Duration::from_secs(30), || {
        let c = &c;
        async move { c.metric("wharf_mesh_certificate_requests_total{result=\"unreachable\"}").await >= 2.0 }
    })
    .await;
    assert!(refused, "no failed CA request counted; log:\n{}", c.proc.log());
    let ready = http_get(admin, "admin", "/healthz/ready").await.unwrap();
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert!(ready.body.contains("no mesh identity"), "{}", ready.body);
    assert_eq!(c.metric("wharf_mesh_certificate_expiry_timestamp_seconds").await, 0.0);
    let log = c.proc.log();
    assert!(log.contains("cannot reach the Istio CA") && log.contains("no mesh certificate yet"), "{log}");

    // istiod reachable again: the next retry gets the certificate and the gateway is ready.
    gate.open().await;
    c.wait_ready(Duration::from_secs(40)).await.unwrap();
    assert_eq!(c.metric("wharf_mesh_certificate_requests_total{result=\"ok\"}").await, 1.0);
}
