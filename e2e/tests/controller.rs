//! `wharf controller` against a real API server: objects in, certificates, routes, status
//! and Events out, seen by real clients and by kubectl.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::Ingress;
use wharf_e2e::*;

async fn cert_for(c: &Controller, sni: &str) -> Option<Vec<u8>> {
    https_get(c.https, Some(sni), inspecting_client_config(&[b"http/1.1"]), sni, "/")
        .await
        .ok()
        .and_then(|s| s.peer_cert.map(|c| c.as_ref().to_vec()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_goes_live_and_status_shows_the_address() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("live").await.unwrap();
    s.set_load_balancer("gateway", "203.0.113.7").await.unwrap();
    let c = Controller::start(&env, &s, "live-0", &["--publish-service", &format!("{}/gateway", s.ns)]).await.unwrap();
    let (_b, addr) = backend(&env, "shop").await.unwrap();
    let ca = TestCa::default();
    let leaf = ca.leaf(&["shop.e2e.test"]);

    let created = Instant::now();
    s.tls_secret("shop-tls", &leaf.chain_pem, &leaf.key_pem).await.unwrap();
    s.service("shop", addr).await.unwrap();
    s.ingress("shop", "shop.e2e.test", "shop", Some("shop-tls")).await.unwrap();
    let https = c.https;
    let cfg = ca.client_config(&[b"h2"]);
    // The propagation figure is measured in bench/ (M5); here the bound only catches a
    // change that never arrives, with room for a debug build on two busy cores.
    let live = eventually(Duration::from_secs(5), || {
        let cfg = cfg.clone();
        async move {
            https_get(https, Some("shop.e2e.test"), cfg, "shop.e2e.test", "/")
                .await
                .map(|s| s.echo_name())
                .unwrap_or_default()
                == "shop"
        }
    })
    .await;
    assert!(live, "not live within 5s of creation; log:\n{}", c.proc.log());
    eprintln!("live {:?} after the objects were created", created.elapsed());

    let shown = eventually(Duration::from_secs(5), || async {
        s.kubectl(&["get", "ingress", "shop"]).unwrap_or_default().contains("203.0.113.7")
    })
    .await;
    assert!(
        shown,
        "kubectl get ingress shows no ADDRESS:\n{}\nlog:\n{}",
        s.kubectl(&["get", "ingress", "shop"]).unwrap_or_default(),
        c.proc.log()
    );

    // The published address changes: status follows.
    s.set_load_balancer("gateway", "203.0.113.8").await.unwrap();
    let followed = eventually(Duration::from_secs(5), || async {
        s.kubectl(&["get", "ingress", "shop"]).unwrap_or_default().contains("203.0.113.8")
    })
    .await;
    assert!(followed, "status did not follow the Service");

    // The Ingress leaves our class: its status is cleared.
    let ing: Ingress = serde_json::from_value(serde_json::json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "shop", "namespace": s.ns},
        "spec": {"ingressClassName": "someone-else", "rules": [{"host": "shop.e2e.test"}]},
    }))
    .unwrap();
    s.apply::<Ingress>(serde_json::to_value(ing).unwrap()).await.unwrap();
    // A failing kubectl counts as not cleared.
    let cleared = eventually(Duration::from_secs(5), || async {
        matches!(s.kubectl(&["get", "ingress", "shop"]), Ok(out) if out.contains("shop") && !out.contains("203.0.113"))
    })
    .await;
    assert!(cleared, "status not cleared after the Ingress left our class");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_update_serves_new_certificate_and_keeps_old_connections() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("rotate").await.unwrap();
    let c = Controller::start(&env, &s, "rotate-0", &[]).await.unwrap();
    let (_b, addr) = backend(&env, "app").await.unwrap();
    let ca = TestCa::default();
    let (old, new) = (ca.leaf(&["app.e2e.test"]), ca.leaf(&["app.e2e.test"]));
    s.tls_secret("app-tls", &old.chain_pem, &old.key_pem).await.unwrap();
    s.service("app", addr).await.unwrap();
    s.ingress("app", "app.e2e.test", "app", Some("app-tls")).await.unwrap();
    let want_old = old.leaf_der().as_ref().to_vec();
    assert!(
        eventually(Duration::from_secs(5), || async { cert_for(&c, "app.e2e.test").await == Some(want_old.clone()) })
            .await
    );

    // A keep-alive connection opened before the rotation.
    let tcp = tokio::net::TcpStream::connect(c.https).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("app.e2e.test").unwrap();
    let tls = tokio_rustls::TlsConnector::from(ca.client_config(&[b"http/1.1"])).connect(name, tcp).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);

    s.tls_secret("app-tls", &new.chain_pem, &new.key_pem).await.unwrap();
    let want_new = new.leaf_der().as_ref().to_vec();
    assert!(
        eventually(Duration::from_secs(5), || async { cert_for(&c, "app.e2e.test").await == Some(want_new.clone()) })
            .await,
        "new certificate not served"
    );

    for _ in 0..3 {
        // The connection takes the next request once it has finished the previous one.
        sender.ready().await.expect("the connection opened before the rotation broke");
        let req = http::Request::get("/")
            .header("host", "app.e2e.test")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let resp = sender.send_request(req).await.expect("the connection opened before the rotation broke");
        assert_eq!(resp.status(), 200);
        use http_body_util::BodyExt;
        let _ = resp.into_body().collect().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_ingress_host_is_gone() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("delete").await.unwrap();
    let c = Controller::start(&env, &s, "delete-0", &[]).await.unwrap();
    let (_b, addr) = backend(&env, "gone").await.unwrap();
    let ca = TestCa::default();
    let leaf = ca.leaf(&["gone.e2e.test"]);
    s.tls_secret("gone-tls", &leaf.chain_pem, &leaf.key_pem).await.unwrap();
    s.service("gone", addr).await.unwrap();
    s.ingress("gone", "gone.e2e.test", "gone", Some("gone-tls")).await.unwrap();
    let http = c.http;
    assert!(
        eventually(Duration::from_secs(5), || async move {
            http_get(http, "gone.e2e.test", "/").await.map(|r| r.status) == Ok(308)
        })
        .await
    );
    s.delete::<Ingress>("gone").await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async move {
            http_get(http, "gone.e2e.test", "/").await.map(|r| r.status) == Ok(404)
        })
        .await
    );
    let served = cert_for(&c, "gone.e2e.test").await.unwrap();
    assert_ne!(served, leaf.leaf_der().as_ref().to_vec(), "a deleted Ingress's certificate is still served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_secret_gets_an_event_and_other_hosts_are_unaffected() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("badsecret").await.unwrap();
    let c = Controller::spawn(
        &env,
        &s,
        "badsecret-0",
        &["--resync-interval", "1s"],
        &[("RUST_LOG", "info,wharf_controller::k8s=debug,wharf::access=off")],
    )
    .unwrap();
    c.wait_ready(Duration::from_secs(20)).await.unwrap();
    let (_b, addr) = backend(&env, "ok").await.unwrap();
    let ca = TestCa::default();
    let (good, other) = (ca.leaf(&["good.e2e.test"]), ca.leaf(&["bad.e2e.test"]));
    s.service("ok", addr).await.unwrap();
    s.tls_secret("good-tls", &good.chain_pem, &good.key_pem).await.unwrap();
    // A key that belongs to another certificate.
    s.tls_secret("bad-tls", &other.chain_pem, &good.key_pem).await.unwrap();
    s.ingress("good", "good.e2e.test", "ok", Some("good-tls")).await.unwrap();
    s.ingress("bad", "bad.e2e.test", "ok", Some("bad-tls")).await.unwrap();
    // First the diagnostic, then what is served: the bad Ingress has been processed.
    let described = eventually(Duration::from_secs(10), || async {
        s.kubectl(&["describe", "ingress", "bad"]).unwrap_or_default().contains("KeyMismatch")
    })
    .await;
    let text = s.kubectl(&["describe", "ingress", "bad"]).unwrap_or_default();
    assert!(described, "no KeyMismatch Event in kubectl describe:\n{text}\nlog:\n{}", c.proc.log());
    assert!(text.contains("Warning"), "{text}");
    assert!(text.contains("does not match the certificate"), "{text}");
    let want = good.leaf_der().as_ref().to_vec();
    assert!(
        eventually(Duration::from_secs(5), || async { cert_for(&c, "good.e2e.test").await == Some(want.clone()) })
            .await
    );
    let bad_cert = cert_for(&c, "bad.e2e.test").await.unwrap();
    assert_ne!(bad_cert, other.leaf_der().as_ref().to_vec(), "a certificate with a mismatched key was served");

    // Unrelated changes and resyncs (every second here) do not repeat the Event: one
    // Event object, never bumped into a series.
    s.ingress("good", "good.e2e.test", "ok", None).await.unwrap();
    let resyncs = |log: &str| log.matches("periodic re-translation").count();
    let seen = resyncs(&c.proc.log());
    assert!(
        eventually(Duration::from_secs(10), || async { resyncs(&c.proc.log()) >= seen + 2 }).await,
        "no resync logged; log:\n{}",
        c.proc.log()
    );
    let events = s
        .kubectl(&[
            "get",
            "events.events.k8s.io",
            "--field-selector",
            "regarding.name=bad,reason=KeyMismatch",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} series={.series.count}{\"\\n\"}{end}",
        ])
        .unwrap();
    let lines: Vec<&str> = events.lines().collect();
    assert_eq!(lines.len(), 1, "{events}");
    assert!(lines[0].ends_with("series="), "the Event was repeated: {events}");

    // Fixing the Secret serves the right certificate.
    s.tls_secret("bad-tls", &other.chain_pem, &other.key_pem).await.unwrap();
    let fixed = other.leaf_der().as_ref().to_vec();
    assert!(
        eventually(Duration::from_secs(5), || async { cert_for(&c, "bad.e2e.test").await == Some(fixed.clone()) })
            .await
    );
    let _ = s.delete::<Secret>("bad-tls").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_ingress_wins_a_host_and_the_other_gets_an_event() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("conflict").await.unwrap();
    let c = Controller::start(&env, &s, "conflict-0", &[]).await.unwrap();
    let (_a, a) = backend(&env, "first").await.unwrap();
    let (_b, b) = backend(&env, "second").await.unwrap();
    s.service("first", a).await.unwrap();
    s.service("second", b).await.unwrap();
    let first = s.ingress("first", "same.e2e.test", "first", None).await.unwrap();
    // creationTimestamp has one-second resolution: the second must be created in a later
    // second to be younger.
    let created = first.metadata.creation_timestamp.map(|t| t.0.as_second()).unwrap();
    let unix = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!(eventually(Duration::from_secs(3), || async move { unix() > created }).await);
    s.ingress("second", "same.e2e.test", "second", None).await.unwrap();
    let http = c.http;
    // Once the loser has been told, the winner serves.
    let told = eventually(Duration::from_secs(10), || async {
        s.kubectl(&["describe", "ingress", "second"]).unwrap_or_default().contains("HostPathConflict")
    })
    .await;
    assert!(told, "{}", s.kubectl(&["describe", "ingress", "second"]).unwrap_or_default());
    for _ in 0..5 {
        assert_eq!(http_get(http, "same.e2e.test", "/").await.unwrap().echo_name(), "first");
    }
    // The winner goes away: the other takes the host.
    s.delete::<Ingress>("first").await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async move {
            http_get(http, "same.e2e.test", "/").await.map(|r| r.echo_name()).unwrap_or_default() == "second"
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingress_that_left_the_class_while_no_replica_ran_is_cleared() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("leftdown").await.unwrap();
    let publish = ["--publish-address", "203.0.113.9"];
    let mut first = Controller::start(&env, &s, "leftdown-0", &publish).await.unwrap();
    s.ingress("x", "x.e2e.test", "x", None).await.unwrap();
    let shown = eventually(Duration::from_secs(10), || async {
        matches!(s.kubectl(&["get", "ingress", "x"]), Ok(out) if out.contains("203.0.113.9"))
    })
    .await;
    assert!(shown, "no address written; log:\n{}", first.proc.log());
    first.proc.kill();

    // While no replica runs, the Ingress moves to another class.
    s.apply::<Ingress>(serde_json::json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "x", "namespace": s.ns},
        "spec": {"ingressClassName": "someone-else", "rules": [{"host": "x.e2e.test"}]},
    }))
    .await
    .unwrap();
    let second = Controller::start(&env, &s, "leftdown-1", &publish).await.unwrap();
    // The new replica takes the Lease once the killed one's expires (4 s), then clears.
    let cleared = eventually(Duration::from_secs(20), || async {
        matches!(s.kubectl(&["get", "ingress", "x"]), Ok(out) if out.contains("x.e2e.test") && !out.contains("203.0.113.9"))
    })
    .await;
    assert!(cleared, "status of an Ingress that left the class is still ours; log:\n{}", second.proc.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_request_in_flight_refuses_new_ones_and_exits() {
    let env = Env::from_env().unwrap();
    let host_ip = env.host_ip.clone().expect("WHARF_E2E_HOST_IP is not set");
    let s = Scope::new("drain").await.unwrap();
    let mut c = Controller::start(&env, &s, "drain-0", &[]).await.unwrap();
    // The backend runs in this process, on the host side of the backend network.
    let l = tokio::net::TcpListener::bind((host_ip.as_str(), 0)).await.unwrap();
    let addr = l.local_addr().unwrap();
    let (mut arrived, release) = holding_backend(l);
    s.service("held", addr).await.unwrap();
    s.ingress("held", "held.e2e.test", "held", None).await.unwrap();
    let http = c.http;
    assert!(
        eventually(Duration::from_secs(10), || async move {
            http_get(http, "held.e2e.test", "/ready").await.map(|r| r.status) == Ok(200)
        })
        .await,
        "{}",
        c.proc.log()
    );
    let in_flight = tokio::spawn(async move { http_get(http, "held.e2e.test", "/hold").await });
    arrived.recv().await.unwrap();

    let kill = std::process::Command::new("kill").args(["-TERM", &c.proc.child.id().to_string()]).status();
    assert!(kill.unwrap().success());
    // Draining: new connections are refused while the request is still held.
    assert!(
        eventually(Duration::from_secs(5), || async move { tokio::net::TcpStream::connect(http).await.is_err() }).await,
        "still accepting after SIGTERM"
    );
    release.send(()).unwrap();
    let seen = in_flight.await.unwrap().unwrap();
    assert_eq!((seen.status, seen.body.as_str()), (200, "held"), "the request in flight was dropped");
    // Then the process exits, well within the drain deadline (2 s here) plus shutdown.
    let exited = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Ok(Some(status)) = c.proc.child.try_wait() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the controller did not exit after draining");
    assert!(exited.success(), "exit status {exited:?}; log:\n{}", c.proc.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_deleted_while_in_use_keeps_open_connections_and_new_ones_get_the_default() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("secretgone").await.unwrap();
    let c = Controller::start(&env, &s, "secretgone-0", &[]).await.unwrap();
    let (_b, addr) = backend(&env, "app").await.unwrap();
    let ca = TestCa::default();
    let leaf = ca.leaf(&["gone-secret.e2e.test"]);
    s.tls_secret("app-tls", &leaf.chain_pem, &leaf.key_pem).await.unwrap();
    s.service("app", addr).await.unwrap();
    s.ingress("app", "gone-secret.e2e.test", "app", Some("app-tls")).await.unwrap();
    let want = leaf.leaf_der().as_ref().to_vec();
    assert!(
        eventually(Duration::from_secs(5), || async {
            cert_for(&c, "gone-secret.e2e.test").await == Some(want.clone())
        })
        .await
    );
    let tcp = tokio::net::TcpStream::connect(c.https).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("gone-secret.e2e.test").unwrap();
    let tls = tokio_rustls::TlsConnector::from(ca.client_config(&[b"http/1.1"])).connect(name, tcp).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);

    s.delete::<Secret>("app-tls").await.unwrap();
    let told = eventually(Duration::from_secs(10), || async {
        s.kubectl(&["describe", "ingress", "app"]).unwrap_or_default().contains("SecretNotFound")
    })
    .await;
    assert!(told, "no SecretNotFound Event; log:\n{}", c.proc.log());
    let now = cert_for(&c, "gone-secret.e2e.test").await.unwrap();
    assert_ne!(now, want, "a deleted Secret's certificate is still served to new connections");
    // The connection made before keeps working.
    sender.ready().await.unwrap();
    let req = http::Request::get("/")
        .header("host", "gone-secret.e2e.test")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    assert_eq!(sender.send_request(req).await.unwrap().status(), 200);
}
