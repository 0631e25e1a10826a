//! The admin port as a pod's neighbours see it: health and metrics for probes and
//! Prometheus, but the config dump (every host, route, backend address and certificate
//! name) only from inside the pod. The gateway runs in the backend network namespace, so
//! the test process is a different host to it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use wharf_e2e::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_endpoints_answer_only_on_localhost() {
    let env = Env::from_env().unwrap();
    let dir = TempDir::new("e2e-admin").unwrap();
    let args = bare_gateway_args(&dir, "0.0.0.0", &["--admin-port", "15021"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
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
