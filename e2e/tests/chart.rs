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

    let cases: [(&str, Vec<String>); 7] = [
        ("", vec![]),
        ("examples/ambient.yaml", vec![format!("mesh.istio.caAddress={istiod}")]),
        ("examples/annotations.yaml", vec![]),
        ("examples/autoscaling.yaml", vec![]),
        ("examples/kind.yaml", vec![]),
        ("examples/mesh-secret.yaml", vec![]),
        ("examples/production.yaml", vec![]),
    ];
    for (values, sets) in cases {
        let name = if values.is_empty() { "default" } else { values };
        let files: Vec<&str> = if values.is_empty() { vec![] } else { vec![values] };
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let pod = ChartPod::render(&files, &sets).unwrap();
        let gateway_objects = apply_chart_gateway(&files, &sets).unwrap();
        let tcp_listener = gateway_objects
            .iter()
            .filter(|o| o["kind"] == "Gateway")
            .flat_map(|g| g["spec"]["listeners"].as_array().cloned().unwrap_or_default())
            .any(|l| l["name"] == "tcp");
        let at = dir.join(name.replace('/', "-"));
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
                other => panic!("{name}: the chart mounts {other}, which this test does not know"),
            }
        }
        let args = pod.args_at(&at);
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
        let served = eventually(Duration::from_secs(10), || async move {
            http_get(http_addr, host, "/").await.map(|r| r.echo_name()).unwrap_or_default() == "chart-backend"
        })
        .await;
        assert!(served, "{name}: the Ingress is not served; log:\n{}", gateway.log());
        let snippets_ignored = args.iter().any(|a| a == "--snippet-annotations=ignore");
        let snippet = http_get(http_addr, &snippet_host, "/").await.map(|r| r.status);
        assert_eq!(
            snippet,
            Ok(if snippets_ignored { 200 } else { 404 }),
            "{name}: the Ingress with a snippet annotation, with {args:?}; log:\n{}",
            gateway.log()
        );
        assert!(!gateway_objects.is_empty(), "{name}: the chart renders the edge Gateway");
        let route_host = route_host.as_str();
        let routed = eventually(Duration::from_secs(10), || async move {
            http_get(http_addr, route_host, "/").await.map(|r| r.echo_name()).unwrap_or_default() == "chart-backend"
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
