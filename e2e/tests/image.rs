//! The gateway image built from the repository's Dockerfile (e2e/image.sh), run as the
//! chart's Deployment runs it: for the chart's defaults and each example, a container with
//! the rendered args, env, user, read-only root filesystem, dropped capabilities, mounted
//! volumes and probes (see e2e/src/pod.rs). Each must get ready on its readiness probe,
//! listen on every containerPort it declares, serve an Ingress by SNI to curl, and exit
//! cleanly on SIGTERM within terminationGracePeriodSeconds. The defaults run as their two
//! replicas: one leader writing status, both serving; SIGTERM to the leader with a request
//! in flight finishes it, and the other replica takes over.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use wharf_dataplane::memory::Watermark;
use wharf_e2e::pod::{Deployment, PodHost};
use wharf_e2e::*;

fn temp_dir(name: &str) -> TempDir {
    TempDir::new(&format!("e2e-{name}")).unwrap()
}

/// curl over TLS to `addr` for the site's host (SNI and Host), trusting only the site's
/// CA, with `args` before the URL: its output, or its error.
fn curl(addr: SocketAddr, site: &Site, path: &str, args: &[&str]) -> Result<String, String> {
    let host = &site.host;
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(&site.ca_file)
        .arg("--resolve")
        .arg(format!("{host}:{}:{}", addr.port(), addr.ip()))
        .args(args)
        .arg(format!("https://{host}:{}{path}", addr.port()))
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_holds_the_binary_runs_as_nonroot_and_has_no_shell() {
    let dir = temp_dir("image-inspect");
    let host = PodHost::new(&dir).await.unwrap();
    assert_eq!(host.image_inspect("{{.Config.User}}").unwrap(), "65532:65532");
    assert_eq!(host.image_inspect("{{json .Config.Entrypoint}}").unwrap(), r#"["/wharf"]"#);
    assert_eq!(host.image_inspect("{{json .Config.Cmd}}").unwrap(), r#"["controller"]"#);
    // The binary finds every library it links at run time.
    let version = host.run_entrypoint("/wharf", &["--version"]).unwrap();
    assert!(version.starts_with("wharf "), "{version}");
    // No shell to exec into, nothing to install with.
    for tool in ["/bin/sh", "/bin/bash", "/usr/bin/apt-get"] {
        assert!(host.run_entrypoint(tool, &[]).is_err(), "the image holds {tool}");
    }
    let size: u64 = host.image_inspect("{{.Size}}").unwrap().parse().unwrap();
    eprintln!("image size: {:.1} MiB", size as f64 / 1048576.0);
}

/// The objects every rendering serves: a TLS Ingress of the chart's class to an echo backend.
struct Site {
    host: String,
    ca_file: PathBuf,
}

async fn site(env: &Env, s: &Scope, dir: &Path) -> (Site, Proc) {
    let (backend, addr) = backend(env, "image-backend").await.unwrap();
    s.service("app", addr).await.unwrap();
    let host = format!("{}.e2e.test", s.ns);
    let ca = TestCa::new("image e2e");
    let leaf = ca.leaf(&[&host]);
    s.tls_secret("site-tls", &leaf.chain_pem, &leaf.key_pem).await.unwrap();
    s.apply::<Ingress>(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "site", "namespace": s.ns},
        "spec": {
            "ingressClassName": "wharf",
            "tls": [{"hosts": [host], "secretName": "site-tls"}],
            "rules": [{"host": host, "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "app", "port": {"number": 80}}}}]}}],
        },
    }))
    .await
    .unwrap();
    let ca_file = dir.join("site-ca.pem");
    std::fs::write(&ca_file, &ca.root_pem).unwrap();
    (Site { host, ca_file }, backend)
}

/// Ready on the probes, listening on every declared port, serving the site by SNI, and
/// confined as the chart says.
async fn check_serves(d: &Deployment, c: &wharf_e2e::pod::Container, site: &Site, what: &str) {
    assert_eq!(
        c.inspect("{{.Config.User}} ro={{.HostConfig.ReadonlyRootfs}} drop={{.HostConfig.CapDrop}} {{.HostConfig.SecurityOpt}}"),
        "65532:65532 ro=true drop=[ALL] [no-new-privileges]",
        "{what}"
    );
    c.wait_probes(&d.probes().unwrap(), Duration::from_secs(60)).await.unwrap_or_else(|e| panic!("{what}: {e:#}"));
    for (name, port) in d.ports().unwrap() {
        let addr = c.addr(port);
        // The tcp port is the edge Gateway's TCP listener (or --tcp-service), opened once
        // the controller has read the Gateway.
        let open = eventually(Duration::from_secs(10), || async move {
            matches!(
                tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr)).await,
                Ok(Ok(_))
            )
        })
        .await;
        assert!(open, "{what}: nothing listens on containerPort {name} ({port}); log:\n{}", c.logs());
    }
    let https = c.addr(d.port(&json!("https")).unwrap());
    let served = eventually(Duration::from_secs(20), || async move {
        curl(https, site, "/", &[]).map(|b| b.contains("image-backend")).unwrap_or(false)
    })
    .await;
    assert!(served, "{what}: {} not served over TLS: {:?}; log:\n{}", site.host, curl(https, site, "/", &[]), c.logs());
    check_memory_watermark(d, c, what).await;
}

/// The rendered `--memory-watermark` is resolved against the memory limit the container
/// got (`resources.limits.memory`), as its cgroup shows it to the process.
async fn check_memory_watermark(d: &Deployment, c: &wharf_e2e::pod::Container, what: &str) {
    let rendered = d.args().iter().find_map(|a| a.strip_prefix("--memory-watermark=").map(str::to_owned));
    let rendered: Watermark = rendered.as_deref().unwrap_or("").parse().unwrap_or_else(|e| panic!("{what}: {e}"));
    let limit: u64 = c.inspect("{{.HostConfig.Memory}}").parse().unwrap();
    assert!(limit > 0, "{what}: no memory limit");
    let want = rendered.resolve(Some(limit)).unwrap_or(0);
    let admin = c.addr(d.port(&json!("admin")).unwrap());
    let metrics = http_get(admin, "admin", "/metrics").await.unwrap().body;
    let got = metrics.lines().find_map(|l| l.strip_prefix("wharf_memory_watermark_bytes ")).unwrap_or("none");
    assert_eq!(got, want.to_string(), "{what}: {rendered:?} of a {limit}-byte limit");
    assert!(metrics.contains("wharf_memory_in_use_bytes "), "{what}");
}

/// The request-body limit the rendering's values set (`controller.limits.maxRequestBody`)
/// is the one the gateway enforces: a body one byte over gets 413.
fn check_body_limit(d: &Deployment, c: &wharf_e2e::pod::Container, site: &Site, dir: &Path, what: &str, bytes: u64) {
    let limit = d.args().iter().find_map(|a| a.strip_prefix("--max-request-body=").map(str::to_owned));
    assert_eq!(limit.as_deref().and_then(wharf_model::parse_size), Some(bytes), "{what}: rendered {limit:?}");
    if bytes == 0 {
        return;
    }
    let body = dir.join("over-limit.bin");
    std::fs::write(&body, vec![b'x'; bytes as usize + 1]).unwrap();
    let https = c.addr(d.port(&json!("https")).unwrap());
    // HTTP/1.1: over HTTP/2 the 413 arrives while curl still uploads, followed by
    // RST_STREAM(NO_ERROR) as RFC 9113 §8.1 says; curl before the fix for curl/curl#22984
    // (Debian 12 has 7.88) reports that as error 92. dataplane/tests/hardening.rs checks
    // HTTP/2 with hyper.
    let upload = format!("@{}", body.display());
    let status =
        curl(https, site, "/upload", &["--http1.1", "-o", "/dev/null", "-w", "%{http_code}", "--data-binary", &upload]);
    assert_eq!(status.as_deref(), Ok("413"), "{what}: a body of {bytes} + 1 bytes");
}

async fn check_drains(c: &wharf_e2e::pod::Container, grace: Duration, what: &str) {
    let (code, took) = c.stop().await.unwrap();
    assert_eq!(code, 0, "{what}: exit code {code} after SIGTERM ({took:?}); log:\n{}", c.logs());
    assert!(took < grace, "{what}: took {took:?} to exit on SIGTERM, the grace period is {grace:?}");
    eprintln!("{what}: exited 0 on SIGTERM in {took:?} (grace {grace:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_pod_runs_from_the_image_for_each_configuration() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("image").await.unwrap();
    let dir = temp_dir("image");
    let mut host = PodHost::new(&dir).await.unwrap();
    let (site, _backend) = site(&env, &s, &dir).await;

    // The chart's default CA address is istiod's Service name: pods reach it through a
    // relay to the harness's istiod, whose serving certificate names that Service.
    let istiod = std::env::var("WHARF_E2E_ISTIOD_ADDRESS").unwrap();
    let istiod = istiod.trim_start_matches("https://").trim_end_matches('/');
    let istiod_port = host.service("istiod.istio-system.svc", istiod).await.unwrap();
    // The Secret the mesh-secret example names, as cert-manager istio-csr would write it.
    let mesh_ca = TestCa::new("image mesh root");
    let mesh = mesh_ca.workload("spiffe://cluster.local/ns/wharf-system/sa/wharf");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(s.client.clone(), "wharf-system");
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "wharf-mesh-identity", "namespace": "wharf-system"},
        "stringData": {"tls.crt": mesh.chain_pem, "tls.key": mesh.key_pem, "ca.crt": mesh_ca.root_pem},
    });
    secrets
        .patch("wharf-mesh-identity", &PatchParams::apply("wharf-e2e").force(), &Patch::Apply(&secret))
        .await
        .unwrap();

    // The private ACME directory's root and the EAB key the acme-private example mounts.
    let files = [
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "internal-ca-root", "namespace": "wharf-system"},
               "data": {"root_ca.crt": mesh_ca.root_pem}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "zerossl-eab", "namespace": "wharf-system"},
               "stringData": {"hmac": "c2VjcmV0LWhtYWMta2V5LWZvci10ZXN0cw"}}),
    ];
    for f in &files {
        apply(f).unwrap();
    }
    let ca_address = format!("mesh.istio.caAddress=https://istiod.istio-system.svc:{istiod_port}");
    // Its directories point at a closed local port: nothing the suite does reaches out.
    let acme_local =
        ["0", "1"].map(|i| format!("controller.acme.issuers[{i}].directory=https://127.0.0.1:1/directory"));
    // With the request-body limit each sets (0: unlimited).
    let cases: [(&str, Vec<&str>, u64); 6] = [
        ("examples/acme-private.yaml", acme_local.iter().map(String::as_str).collect(), 0),
        ("examples/ambient.yaml", vec![&ca_address], 0),
        ("examples/autoscaling.yaml", vec![], 0),
        ("examples/kind.yaml", vec![], 0),
        ("examples/mesh-secret.yaml", vec![], 0),
        ("examples/production.yaml", vec![], 8 << 20),
    ];
    for (n, (values, sets, body_limit)) in cases.iter().enumerate() {
        let d = Deployment::render(&[values], sets).unwrap();
        apply_chart_gateway(&[values], sets).unwrap();
        let name = format!("wharf-{}", values.trim_start_matches("examples/").trim_end_matches(".yaml"));
        let c = host.run(&d, &name, [198, 19, 1, 20 + n as u8]).unwrap();
        check_serves(&d, &c, &site, values).await;
        check_body_limit(&d, &c, &site, &dir, values, *body_limit);
        check_drains(&c, d.grace, values).await;
    }

    // The defaults: two replicas, one leader publishing the Service's address, both serving.
    let d = Deployment::render(&[], &[]).unwrap();
    apply_chart_gateway(&[], &[]).unwrap();
    assert_eq!(d.replicas, 2);
    let services: Api<Service> = Api::namespaced(s.client.clone(), "wharf-system");
    let lb = json!({"status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}}});
    services.patch_status("wharf", &PatchParams::default(), &Patch::Merge(&lb)).await.unwrap();
    let pods: Vec<_> = (0..d.replicas)
        .map(|i| host.run(&d, &format!("wharf-default-{i}"), [198, 19, 1, 10 + i as u8]).unwrap())
        .collect();
    for c in &pods {
        check_serves(&d, c, &site, &c.name).await;
    }
    let ingresses: Api<Ingress> = Api::namespaced(s.client.clone(), &s.ns);
    let published = eventually(Duration::from_secs(30), || {
        let ingresses = ingresses.clone();
        async move {
            let ing = ingresses.get("site").await.ok();
            let ip = ing.and_then(|i| i.status?.load_balancer?.ingress?.first()?.ip.clone());
            ip.as_deref() == Some("198.51.100.7")
        }
    })
    .await;
    assert!(published, "status not written; logs:\n{}\n{}", pods[0].logs(), pods[1].logs());
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), "wharf-system");
    let holder = || {
        let leases = leases.clone();
        async move { leases.get("wharf-leader").await.ok().and_then(|l| l.spec?.holder_identity).unwrap_or_default() }
    };
    let names: Vec<String> = pods.iter().map(|p| p.name.clone()).collect();
    let led = eventually(Duration::from_secs(30), || {
        let names = &names;
        async move { names.contains(&holder().await) }
    })
    .await;
    assert!(led, "the Lease is held by {:?}, not a replica", holder().await);
    let now = holder().await;
    let leader = names.iter().position(|n| *n == now).unwrap();
    let (first, second) = (&pods[leader], &pods[1 - leader]);

    // SIGTERM with a request in flight: it completes, new connections are refused after
    // the shutdown delay, and the process exits 0 within the grace period. The backend is this test, on the host side
    // of the backend network.
    let host_ip = env.host_ip.clone().expect("WHARF_E2E_HOST_IP is not set");
    let l = tokio::net::TcpListener::bind((host_ip.as_str(), 0)).await.unwrap();
    let held_addr = l.local_addr().unwrap();
    let (mut arrived, release) = holding_backend(l);
    s.service("held", held_addr).await.unwrap();
    let held_host = format!("held.{}.e2e.test", s.ns);
    s.apply::<Ingress>(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "held", "namespace": s.ns},
        "spec": {"ingressClassName": "wharf", "rules": [{"host": held_host, "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "held", "port": {"number": 80}}}}]}}]},
    }))
    .await
    .unwrap();
    let http = first.addr(d.port(&json!("http")).unwrap());
    let h = held_host.as_str();
    let routed = eventually(Duration::from_secs(20), || async move {
        http_get(http, h, "/ready").await.map(|r| r.status) == Ok(200)
    })
    .await;
    assert!(routed, "{}: {held_host} not routed; log:\n{}", first.name, first.logs());
    let in_flight = tokio::spawn({
        let held_host = held_host.clone();
        async move { http_get(http, &held_host, "/hold").await }
    });
    arrived.recv().await.unwrap();
    // The chart's shutdown delay: at once not ready, still serving new clients but asking
    // each to reconnect (the Service moves them to the other replica); then new connections
    // are refused while the request in flight is still held.
    let delay = d
        .args()
        .iter()
        .find_map(|a| a.strip_prefix("--shutdown-delay=")?.strip_suffix('s')?.parse().ok())
        .map(Duration::from_secs)
        .expect("the chart renders --shutdown-delay in seconds");
    let admin = first.addr(d.port(&json!("admin")).unwrap());
    let sigterm = std::time::Instant::now();
    let (stopped, (unready, during, refused_after)) = tokio::join!(first.stop(), async {
        let unready = eventually(Duration::from_secs(5), || async move {
            http_get(admin, "admin", "/healthz/ready")
                .await
                .is_ok_and(|r| r.status == 503 && r.body.contains("shutting down"))
        })
        .await;
        let during = http_get(http, h, "/ready").await;
        let refused = eventually(delay + Duration::from_secs(5), || async move {
            tokio::net::TcpStream::connect(http).await.is_err()
        })
        .await;
        let refused_after = refused.then(|| sigterm.elapsed());
        release.send(()).unwrap();
        (unready, during, refused_after)
    });
    assert!(unready, "{}: still ready after SIGTERM", first.name);
    let during =
        during.unwrap_or_else(|e| panic!("{}: a new client during the shutdown delay failed: {e}", first.name));
    assert_eq!(during.status, 200, "{}: during the shutdown delay", first.name);
    assert_eq!(
        during.headers.get("connection").map(|v| v.as_bytes()),
        Some(&b"close"[..]),
        "{}: a response during the shutdown delay does not ask the client to reconnect",
        first.name
    );
    let refused_after =
        refused_after.unwrap_or_else(|| panic!("{}: still accepting connections after SIGTERM", first.name));
    assert!(
        refused_after >= delay - Duration::from_millis(500),
        "{}: stopped accepting {refused_after:?} after SIGTERM, before the {delay:?} shutdown delay",
        first.name
    );
    let seen = in_flight.await.unwrap().unwrap();
    assert_eq!((seen.status, seen.body.as_str()), (200, "held"), "the request in flight was dropped");
    let (code, took) = stopped.unwrap();
    assert_eq!(code, 0, "{}: exit code {code} after SIGTERM; log:\n{}", first.name, first.logs());
    assert!(took < d.grace, "{}: {took:?} to drain and exit, the grace period is {:?}", first.name, d.grace);
    eprintln!("{}: finished the request in flight and exited 0 in {took:?} (grace {:?})", first.name, d.grace);
    let second_name = second.name.clone();
    let took_over = eventually(Duration::from_secs(30), || {
        let second_name = &second_name;
        async move { holder().await == *second_name }
    })
    .await;
    assert!(took_over, "{} did not take the Lease over; it is held by {:?}", second.name, holder().await);
    check_serves(&d, second, &site, &second.name).await;
    check_drains(second, d.grace, &second.name).await;
}
