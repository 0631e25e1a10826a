//! A cluster without the Gateway API CRDs: `wharf controller` serves Ingresses all the
//! same, and picks Gateway API objects up once the CRDs are installed, without a restart.
//! (Its own test binary: it removes the CRDs, which no other test may see.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Duration;

use serde_json::json;
use wharf_e2e::*;

const CRDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../crds/gateway-api/");

fn kubectl(args: &[&str]) {
    let out = Command::new("kubectl").args(args).output().expect("kubectl is needed by this test");
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Installs the CRDs again when dropped, whatever the test did.
struct Reinstall;

impl Drop for Reinstall {
    fn drop(&mut self) {
        let _ = Command::new("kubectl").args(["apply", "--server-side", "-f", CRDS]).output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_crds_ingresses_are_served_and_installing_them_later_is_picked_up() {
    let env = Env::from_env().unwrap();
    let _reinstall = Reinstall;
    kubectl(&["delete", "-f", CRDS, "--ignore-not-found", "--wait"]);

    let s = Scope::new("nocrds").await.unwrap();
    let gateway_controller = format!("{}-gateway", s.controller_name);
    let c = Controller::start(
        &env,
        &s,
        "nocrds-0",
        &["--gateway-controller-name", &gateway_controller, "--gateway-addresses", "127.102.0.0/16"],
    )
    .await
    .unwrap();
    let (_b, addr) = backend(&env, "shop").await.unwrap();
    s.service("shop", addr).await.unwrap();
    s.ingress("shop", "shop.e2e.test", "shop", None).await.unwrap();
    let http = c.http;
    let served = eventually(Duration::from_secs(10), || async move {
        http_get(http, "shop.e2e.test", "/").await.map(|s| s.echo_name()).unwrap_or_default() == "shop"
    })
    .await;
    assert!(served, "the Ingress is not served while the Gateway API CRDs are absent; log:\n{}", c.proc.log());
    assert!(c.proc.log().contains("its CRD is not installed"), "log:\n{}", c.proc.log());

    kubectl(&["apply", "--server-side", "-f", CRDS]);
    // The CRDs take a moment to be served; the class can be created once they are.
    let created =
        eventually(Duration::from_secs(30), || async { s.gateway_class(&gateway_controller).await.is_ok() }).await;
    assert!(created, "GatewayClass could not be created after installing the CRDs");
    let mut last = json!(null);
    let accepted = eventually(Duration::from_secs(30), || {
        last = s.get_json("gatewayclass", &s.class).unwrap_or_default();
        let ok = has_condition(&conditions(&last["status"]["conditions"]), "Accepted", "True", "Accepted");
        async move { ok }
    })
    .await;
    assert!(accepted, "GatewayClass not accepted after the CRDs appeared:\n{last:#}\nlog:\n{}", c.proc.log());
    assert!(c.proc.log().contains("serves this kind now"), "log:\n{}", c.proc.log());
}
