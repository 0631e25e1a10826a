//! The admin port as a pod's neighbours see it: health and metrics for probes and
//! Prometheus, but the config dump (every host, route, backend address and certificate
//! name) only from inside the pod, and never through a route, even one whose endpoint is
//! the pod's own address. The gateway runs in the backend network namespace, so the test
//! process is a different host to it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use wharf_e2e::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_endpoints_answer_only_on_localhost() {
    let env = Env::from_env().unwrap();
    let dir = TempDir::new("e2e-admin").unwrap();
    // A route whose endpoint is the gateway's own pod address at its admin port, as an
    // EndpointSlice written by hand can name it.
    let manifests = dir.join("routes");
    std::fs::create_dir_all(&manifests).unwrap();
    let ip = &env.backend_ip;
    std::fs::write(
        manifests.join("self.yaml"),
        format!(
            "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {{name: wharf}}\nspec: {{controller: wharf.dev/ingress-controller}}\n\
             ---\napiVersion: v1\nkind: Service\nmetadata: {{name: self, namespace: t}}\nspec: {{ports: [{{name: http, port: 80, targetPort: 15021}}]}}\n\
             ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: self-1, namespace: t, labels: {{kubernetes.io/service-name: self}}}}\n\
             addressType: IPv4\nports: [{{name: http, port: 15021}}]\nendpoints: [{{addresses: [\"{ip}\"]}}]\n\
             ---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: self, namespace: t}}\n\
             spec:\n  ingressClassName: wharf\n  rules: [{{host: self.test, http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: self, port: {{number: 80}}}}}}}}]}}}}]\n"
        ),
    )
    .unwrap();
    let manifests = manifests.to_string_lossy();
    let args =
        ["run", "-f", &manifests, "--listen-address", "0.0.0.0", "--admin-port", "15021", "--http-port", "18080"];
    let args = [&args[..], &["--https-port", "0", "--passthrough-port", "0"]].concat();
    let gateway = spawn_at_backend(&env, &args).unwrap();
    let admin: std::net::SocketAddr = format!("{}:15021", env.backend_ip).parse().unwrap();
    let ready = eventually(Duration::from_secs(10), || async move {
        http_get(admin, "admin", "/healthz/ready").await.map(|s| s.status) == Ok(200)
    })
    .await;
    assert!(ready, "{}", gateway.log());
    assert_eq!(http_get(admin, "admin", "/metrics").await.unwrap().status, 200);
    let dump = http_get(admin, "admin", "/debug/config").await.unwrap();
    assert_eq!(dump.status, 403, "{}", dump.body);
    assert!(dump.body.contains("localhost"), "{}", dump.body);

    // Through the route: the gateway refuses to dial its own admin socket on its pod address.
    let http: std::net::SocketAddr = format!("{ip}:18080").parse().unwrap();
    let via_route = http_get(http, "self.test", "/metrics").await.unwrap();
    assert_eq!(via_route.status, 500, "{}\n{}", via_route.body, gateway.log());
    assert!(!via_route.body.contains("wharf_"), "{}", via_route.body);
    assert!(gateway.log().contains("own admin or HBONE port on one of its addresses"), "{}", gateway.log());

    // From inside the "pod" (its own loopback), as kubectl port-forward connects.
    let mut cmd = std::process::Command::new(&env.backend_exec[0]);
    cmd.args(&env.backend_exec[1..]).args([
        "curl",
        "-s",
        "-w",
        "\n%{http_code}",
        "http://127.0.0.1:15021/debug/config",
    ]);
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with("\n200") && text.contains("\"version\""), "{text}");
}
