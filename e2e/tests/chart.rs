//! Every configuration the chart ships (its defaults and each example) run as the chart
//! runs it: the exact args `helm template` renders for the container, its mounted files,
//! the environment the Deployment sets. Each must start, get ready on the chart's readiness
//! probe path and port, and serve an Ingress of the chart's class on the chart's HTTP port,
//! and routes attached to the chart's Gateway on the same ports.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use wharf_e2e::*;

fn port_of(args: &[String], flag: &str) -> u16 {
    args.iter().find_map(|a| a.strip_prefix(&format!("{flag}="))).and_then(|p| p.parse().ok()).unwrap()
}

/// The PROXY protocol header a load balancer in front sends, when the chart's args ask for
/// one.
fn preamble(proxy_protocol: bool, port: u16) -> Vec<u8> {
    match proxy_protocol {
        true => format!("PROXY TCP4 203.0.113.7 127.0.0.1 51234 {port}\r\n").into_bytes(),
        false => Vec::new(),
    }
}

/// The files under `dir` that `args` name (as `FLAG=PATH` or a `KEY=PATH` item of one).
fn files_named_in(args: &[String], dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let dir = dir.to_string_lossy().into_owned();
    let named = args.iter().flat_map(|a| a.split(',')).filter_map(|item| item.split_once('=').map(|(_, v)| v));
    let files: Vec<_> = named.filter(|v| v.starts_with(&dir)).map(std::path::PathBuf::from).collect();
    assert!(!files.is_empty(), "no arg names a file in {dir}: {args:?}");
    files
}

/// GET `/` of `host` on the HTTP port (after the balancer's header, if any).
async fn get(proxy_protocol: bool, addr: SocketAddr, host: &str) -> Result<Seen, String> {
    http_get_after([127, 0, 0, 1].into(), &preamble(proxy_protocol, addr.port()), addr, host, "/", &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_chart_configuration_starts_gets_ready_and_serves() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("chart").await.unwrap();
    let dir = TempDir::new("e2e-chart").unwrap();
    let (_b, addr) = backend(&env, "chart-backend").await.unwrap();
    s.service("app", addr).await.unwrap();
    // Unique per run: the class is the chart's, shared with earlier runs on this API server.
    let host = format!("{}.e2e.test", s.ns);
    s.apply::<k8s_openapi::api::networking::v1::Ingress>(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "chart", "namespace": s.ns},
        "spec": {"ingressClassName": "wharf", "rules": [{"host": host, "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "app", "port": {"number": 80}}}}]}}]},
    }))
    .await
    .unwrap();
    // An Ingress with a snippet annotation: served only where the chart renders
    // `controller.annotations.snippets: ignore`.
    let snippet_host = format!("snippet.{}.e2e.test", s.ns);
    s.apply::<k8s_openapi::api::networking::v1::Ingress>(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "snippet", "namespace": s.ns,
                     "annotations": {"nginx.ingress.kubernetes.io/server-snippet": "listen 81;"}},
        "spec": {"ingressClassName": "wharf", "rules": [{"host": snippet_host, "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "app", "port": {"number": 80}}}}]}}]},
    }))
    .await
    .unwrap();
    // Routes attached to the chart's Gateway (wharf-system/wharf), from this namespace.
    let route_host = format!("route.{}.e2e.test", s.ns);
    let parent = |section: &str| json!({"name": "wharf", "namespace": "wharf-system", "sectionName": section});
    apply(&json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "chart", "namespace": s.ns},
        "spec": {"parentRefs": [parent("http")], "hostnames": [route_host],
                 "rules": [{"backendRefs": [{"name": "app", "port": 80}]}]},
    }))
    .unwrap();
    apply(&json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "TCPRoute",
        "metadata": {"name": "chart", "namespace": s.ns},
        "spec": {"parentRefs": [parent("tcp")], "rules": [{"backendRefs": [{"name": "app", "port": 80}]}]},
    }))
    .unwrap();
    // The Service's LoadBalancer address, as a cloud would set it.
    kubectl(
        &[
            "patch",
            "service",
            "wharf",
            "-n",
            "wharf-system",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.80"}]}}}"#,
        ],
        None,
    )
    .unwrap();

    // What the volumes hold in a cluster: a projected token and istiod's root for the
    // Istio CA, a Secret with the mesh identity.
    let root = s.istio_root_cert().await;
    let token = Command::new("kubectl")
        .args(["create", "token", "wharf", "-n", "wharf-system", "--audience", "istio-ca"])
        .output()
        .unwrap();
    let ca = TestCa::new("chart mesh root");
    let mesh = ca.workload("spiffe://cluster.local/ns/wharf-system/sa/wharf");
    let istiod = std::env::var("WHARF_E2E_ISTIOD_ADDRESS").unwrap();

    // What `wharf migrate -o values` makes of an ingress-nginx ConfigMap is a values file
    // the chart takes.
    let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/../controller/tests/ingress-nginx-corpus");
    let migrated = Command::new(&env.wharf_bin).args(["migrate", "-f", corpus, "-o", "values"]).output().unwrap();
    assert!(migrated.status.success(), "{}", String::from_utf8_lossy(&migrated.stderr));
    let migrated_values = dir.join("migrated-values.yaml");
    std::fs::write(&migrated_values, &migrated.stdout).unwrap();
    let migrated_values = migrated_values.to_str().unwrap();

    // The ACME example's directories are Let's Encrypt's; here they point at a closed local
    // port, so that nothing the suite does reaches the outside.
    let local_acme = |i: usize| format!("controller.acme.issuers[{i}].directory=https://127.0.0.1:1/directory");
    let cases: [(&str, Vec<String>); 11] = [
        ("", vec![]),
        (migrated_values, vec![]),
        ("examples/acme.yaml", vec![local_acme(0), local_acme(1)]),
        ("examples/acme-private.yaml", vec![local_acme(0), local_acme(1)]),
        ("examples/ambient.yaml", vec![format!("mesh.istio.caAddress={istiod}")]),
        ("examples/annotations.yaml", vec![]),
        ("examples/autoscaling.yaml", vec![]),
        ("examples/behind-a-load-balancer.yaml", vec![]),
        ("examples/kind.yaml", vec![]),
        ("examples/mesh-secret.yaml", vec![]),
        ("examples/production.yaml", vec![]),
    ];
    for (values, sets) in cases {
        let name = match values {
            "" => "default",
            v if v == migrated_values => "migrated-values",
            v => v,
        };
        let files: Vec<&str> = if values.is_empty() { vec![] } else { vec![values] };
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let pod = ChartPod::render(&files, &sets).unwrap();
        // Opened to every namespace, as an operator upgrading from an `All` default would:
        // the routes above are in the test's namespace.
        let open: Vec<&str> = sets.iter().copied().chain(["gateway.allowedRoutes=All"]).collect();
        let gateway_objects = apply_chart_gateway(&files, &open).unwrap();
        let tcp_listener = gateway_objects
            .iter()
            .filter(|o| o["kind"] == "Gateway")
            .flat_map(|g| g["spec"]["listeners"].as_array().cloned().unwrap_or_default())
            .any(|l| l["name"] == "tcp");
        let at = dir.join(name.replace('/', "-"));
        let args = pod.args_at(&at);
        for (volume, _) in &pod.mounts {
            let d = pod.volume(&at, volume).unwrap();
            match volume.as_str() {
                "istio-token" => std::fs::write(d.join("istio-token"), &token.stdout).unwrap(),
                "istio-ca-root" => std::fs::write(d.join("root-cert.pem"), root.as_ref().unwrap()).unwrap(),
                "mesh-identity" => {
                    std::fs::write(d.join("tls.crt"), &mesh.chain_pem).unwrap();
                    std::fs::write(d.join("tls.key"), &mesh.key_pem).unwrap();
                    std::fs::write(d.join("ca.crt"), &ca.root_pem).unwrap();
                }
                // The files of an ACME issuer: the private directory's root, the EAB key;
                // the binary reads both at start.
                v if v.starts_with("acme-ca-") => {
                    for file in files_named_in(&args, &d) {
                        std::fs::write(file, &ca.root_pem).unwrap();
                    }
                }
                v if v.starts_with("acme-eab-") => {
                    for file in files_named_in(&args, &d) {
                        std::fs::write(file, "c2VjcmV0LWhtYWMta2V5LWZvci10ZXN0cw").unwrap();
                    }
                }
                other => panic!("{name}: the chart mounts {other}, which this test does not know"),
            }
        }
        let http = port_of(&args, "--http-port");
        let mut cmd = Command::new(&env.wharf_bin);
        cmd.args(&args)
            .env("WHARF_KUBECONFIG", &env.controller_kubeconfig)
            .env("POD_NAME", format!("chart-{}", name.replace(['/', '.'], "-")))
            .env("POD_NAMESPACE", "wharf-system")
            .env("RUST_LOG", "info,wharf::access=off");
        let gateway = Proc::spawn_command(cmd).unwrap();
        // The probes exactly as the Deployment declares them.
        for (path, port) in pod.probes.clone() {
            let probe = SocketAddr::from(([127, 0, 0, 1], port));
            let ok = eventually(Duration::from_secs(30), || {
                let path = path.clone();
                async move { http_get(probe, "probe", &path).await.map(|s| s.status) == Ok(200) }
            })
            .await;
            assert!(ok, "{name}: probe {path} on {port} failed with {args:?}; log:\n{}", gateway.log());
        }
        let http_addr = SocketAddr::from(([127, 0, 0, 1], http));
        let host = host.as_str();
        let pp = args.iter().any(|a| a == "--proxy-protocol");
        let served = eventually(Duration::from_secs(10), || async move {
            get(pp, http_addr, host).await.map(|r| r.echo_name()).unwrap_or_default() == "chart-backend"
        })
        .await;
        assert!(served, "{name}: the Ingress is not served; log:\n{}", gateway.log());
        if pp {
            // The balancer's header is required; this peer (127.0.0.1) is not among the
            // trusted proxies, so its header's address is not believed.
            assert!(http_get(http_addr, host, "/").await.is_err(), "{name}: served without a PROXY header");
            let seen = get(pp, http_addr, host).await.unwrap();
            let trusted = args.iter().any(|a| a.starts_with("--trusted-proxy="));
            let want = if trusted { "127.0.0.1" } else { "203.0.113.7" };
            assert_eq!(seen.json()["headers"]["x-real-ip"], want, "{name}: {args:?}");
        }
        // Headers with underscores reach the backend only where the chart lets them.
        let seen =
            http_get_after([127, 0, 0, 1].into(), &preamble(pp, http), http_addr, host, "/", &[("x_api_key", "k")])
                .await
                .unwrap();
        let underscores = args.iter().any(|a| a == "--enable-underscores-in-headers");
        let got = seen.json()["headers"]["x_api_key"].as_str().map(str::to_owned);
        assert_eq!(got.as_deref(), underscores.then_some("k"), "{name}: {args:?}");
        // HTTPS responses carry the chart's HSTS setting, and none without one.
        let https_addr = SocketAddr::from(([127, 0, 0, 1], port_of(&args, "--https-port")));
        let insecure = inspecting_client_config(&[]);
        let seen = https_get_after(&preamble(pp, https_addr.port()), https_addr, Some(host), insecure, host, "/")
            .await
            .unwrap();
        let hsts = seen.headers.get("strict-transport-security").map(|v| v.to_str().unwrap_or_default());
        let want = args.iter().find_map(|a| a.strip_prefix("--hsts="));
        assert_eq!((seen.echo_name().as_str(), hsts), ("chart-backend", want), "{name}: {args:?}");
        let snippets_ignored = args.iter().any(|a| a == "--snippet-annotations=ignore");
        let snippet = get(pp, http_addr, &snippet_host).await.map(|r| r.status);
        assert_eq!(
            snippet,
            Ok(if snippets_ignored { 200 } else { 404 }),
            "{name}: the Ingress with a snippet annotation, with {args:?}; log:\n{}",
            gateway.log()
        );
        assert!(!gateway_objects.is_empty(), "{name}: the chart renders the edge Gateway");
        let route_host = route_host.as_str();
        let routed = eventually(Duration::from_secs(10), || async move {
            get(pp, http_addr, route_host).await.map(|r| r.echo_name()).unwrap_or_default() == "chart-backend"
        })
        .await;
        assert!(routed, "{name}: the HTTPRoute on the chart's Gateway is not served; log:\n{}", gateway.log());
        if tcp_listener {
            // The tcp listener's socket is the container port the chart's Service targets.
            let tcp_addr = SocketAddr::from(([127, 0, 0, 1], 31400));
            let relayed = eventually(Duration::from_secs(10), || async move {
                http_get(tcp_addr, "any", "/").await.map(|r| r.echo_name()).unwrap_or_default() == "chart-backend"
            })
            .await;
            assert!(relayed, "{name}: the TCPRoute on the chart's Gateway is not served; log:\n{}", gateway.log());
        }
        // Status is the leader's to write: a replica of an earlier test may still hold the
        // chart's Lease (15 s) when this one starts.
        let status = eventually(Duration::from_secs(30), || async {
            let g = kubectl(&["get", "gateway", "wharf", "-n", "wharf-system", "-o", "json"], None).unwrap_or_default();
            let g: serde_json::Value = serde_json::from_str(&g).unwrap_or_default();
            has_condition(&conditions(&g["status"]["conditions"]), "Programmed", "True", "Programmed")
                && g["status"]["addresses"] == json!([{"type": "IPAddress", "value": "192.0.2.80"}])
        })
        .await;
        assert!(
            status,
            "{name}: the Gateway does not show Programmed and the Service's address; log:\n{}",
            gateway.log()
        );
        drop(gateway);
    }
}
