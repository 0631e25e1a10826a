//! Two controller replicas: both serve, exactly one writes status; the other takes over
//! when the leader dies.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use wharf_e2e::*;

fn status_writes(c: &Controller) -> usize {
    c.proc.log().matches("status written").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_writes_status_and_the_other_takes_over() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("replicas").await.unwrap();
    let publish = ["--publish-address", "203.0.113.20"];
    let a = Controller::start(&env, &s, "replica-a", &publish).await.unwrap();
    let b = Controller::start(&env, &s, "replica-b", &publish).await.unwrap();
    let (_be, addr) = backend(&env, "app").await.unwrap();
    s.service("app", addr).await.unwrap();
    for i in 0..3 {
        s.ingress(&format!("app-{i}"), &format!("app{i}.e2e.test"), "app", None).await.unwrap();
    }
    for i in 0..3 {
        let name = format!("app-{i}");
        assert!(
            eventually(Duration::from_secs(10), || async {
                s.kubectl(&["get", "ingress", &name]).unwrap_or_default().contains("203.0.113.20")
            })
            .await
        );
    }
    // Both replicas serve traffic.
    for c in [&a, &b] {
        assert_eq!(http_get(c.http, "app0.e2e.test", "/").await.unwrap().echo_name(), "app");
    }
    // Exactly one wrote status.
    let (wa, wb) = (status_writes(&a), status_writes(&b));
    assert!(
        (wa == 3 && wb == 0) || (wa == 0 && wb == 3),
        "writes: a={wa} b={wb}\na:\n{}\nb:\n{}",
        a.proc.log(),
        b.proc.log()
    );
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), "wharf-system");
    let lease = leases.get(&format!("lease-{}", s.class)).await.unwrap();
    let holder = lease.spec.unwrap().holder_identity.unwrap();
    let (mut leader, follower, follower_name) = if wa == 3 { (a, b, "replica-b") } else { (b, a, "replica-a") };
    assert_eq!(holder, if wa == 3 { "replica-a" } else { "replica-b" });

    // The leader dies without releasing the lease: the follower takes over once the lease
    // expires (4 s here; it notices within one retry, 500 ms, and writes within another)
    // and writes status for a new Ingress.
    let holder_is = |name: &'static str| {
        let leases = leases.clone();
        let lease_name = format!("lease-{}", s.class);
        move || {
            let (leases, lease_name) = (leases.clone(), lease_name.clone());
            async move { leases.get(&lease_name).await.ok().and_then(|l| l.spec?.holder_identity).as_deref() == Some(name) }
        }
    };
    let killed = std::time::Instant::now();
    leader.proc.kill();
    assert!(eventually(Duration::from_secs(15), holder_is(follower_name)).await, "{}", follower.proc.log());
    let took = killed.elapsed();
    assert!(took <= Duration::from_millis(6500), "take-over after SIGKILL took {took:?} with a 4 s lease");
    eprintln!("take-over after SIGKILL: {took:?}");
    s.ingress("app-late", "late.e2e.test", "app", None).await.unwrap();
    let wrote = eventually(Duration::from_secs(5), || async {
        s.kubectl(&["get", "ingress", "app-late"]).unwrap_or_default().contains("203.0.113.20")
    })
    .await;
    assert!(wrote, "the new leader did not write status; log:\n{}", follower.proc.log());
    assert!(follower.proc.log().contains("became the leader"));

    // SIGTERM: the leader releases the lease as it drains, and a standby takes it within
    // about one retry instead of a lease duration.
    let standby = Controller::start(&env, &s, "replica-c", &publish).await.unwrap();
    let termed = std::time::Instant::now();
    let kill = std::process::Command::new("kill").args(["-TERM", &follower.proc.child.id().to_string()]).status();
    assert!(kill.unwrap().success());
    assert!(eventually(Duration::from_secs(10), holder_is("replica-c")).await, "{}", standby.proc.log());
    let took = termed.elapsed();
    assert!(took <= Duration::from_secs(3), "take-over after SIGTERM took {took:?}");
    eprintln!("take-over after SIGTERM: {took:?}");
    assert!(follower.proc.log().contains("released the lease"), "{}", follower.proc.log());
}
