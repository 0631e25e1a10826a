//! The API server goes away and comes back: traffic keeps flowing on the last good config,
//! and a change made after it returns goes live. Needs the local harness (it stops the
//! API server); on other clusters the test says so and fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Duration;

use wharf_e2e::*;

fn harness(env: &Env, action: &str) {
    let dir = env
        .harness
        .as_deref()
        .expect("WHARF_E2E_HARNESS is not set: this test needs e2e/harness (it stops the API server)");
    let status = Command::new(format!("{dir}/apiserver.sh")).arg(action).status().unwrap();
    assert!(status.success(), "apiserver.sh {action} failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_survives_an_api_server_restart_and_changes_apply_after() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("restart").await.unwrap();
    let c = Controller::start(&env, &s, "restart-0", &[]).await.unwrap();
    let (_a, a) = backend(&env, "before").await.unwrap();
    s.service("before", a).await.unwrap();
    s.ingress("before", "before.e2e.test", "before", None).await.unwrap();
    let http = c.http;
    assert!(
        eventually(Duration::from_secs(5), || async move {
            http_get(http, "before.e2e.test", "/").await.map(|r| r.echo_name()).unwrap_or_default() == "before"
        })
        .await
    );

    harness(&env, "stop");
    for _ in 0..20 {
        let r = http_get(http, "before.e2e.test", "/").await.unwrap();
        assert_eq!(r.echo_name(), "before", "traffic broke while the API server was down");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    harness(&env, "start");

    let (_b, b) = backend(&env, "after").await.unwrap();
    s.service("after", b).await.unwrap();
    s.ingress("after", "after.e2e.test", "after", None).await.unwrap();
    let live = eventually(Duration::from_secs(30), || async move {
        http_get(http, "after.e2e.test", "/").await.map(|r| r.echo_name()).unwrap_or_default() == "after"
    })
    .await;
    assert!(live, "change after the restart did not go live; log:\n{}", c.proc.log());
    assert_eq!(http_get(http, "before.e2e.test", "/").await.unwrap().echo_name(), "before");
}
