//! The API server goes away and comes back: traffic keeps flowing on the last good config,
//! and a change made after it returns goes live. With the API server hanging, SIGTERM
//! still ends the process within the drain deadline. Needs the local harness (it stops the
//! API server); on other clusters the test says so and fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Duration;

use wharf_e2e::*;

/// The tests of this file take turns: one stops the API server, which the other's
/// leadership depends on.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
    let _turn = ONE_AT_A_TIME.lock().await;
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
    let log = c.proc.log();
    assert!(log.contains("watch failed") && log.contains("watch restored"), "outage not logged:\n{log}");
}

/// A TCP relay to the API server that can start hanging: connections stay open and
/// nothing more passes either way, as with a partitioned or wedged API server.
struct Wedge {
    addr: std::net::SocketAddr,
    hang: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Wedge {
    async fn new(target: String) -> Wedge {
        use std::sync::atomic::AtomicBool;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let hang = std::sync::Arc::new(AtomicBool::new(false));
        let h = hang.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = l.accept().await {
                let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else { continue };
                let (ri, wi) = inbound.into_split();
                let (ro, wo) = outbound.into_split();
                tokio::spawn(pump(ri, wo, h.clone()));
                tokio::spawn(pump(ro, wi, h.clone()));
            }
        });
        Wedge { addr, hang }
    }
}

/// Copies `r` to `w` until EOF; once `hang` is set, holds both open and passes nothing.
async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    hang: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = w.shutdown().await;
                return;
            }
            Ok(n) => {
                if hang.load(std::sync::atomic::Ordering::Relaxed) {
                    let _held = (r, w);
                    match std::future::pending::<std::convert::Infallible>().await {}
                }
                if w.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_the_api_server_hangs_exits_within_the_drain_deadline() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let env = Env::from_env().unwrap();
    let s = Scope::new("wedged").await.unwrap();
    // The controller reaches the API server only through the wedge.
    let kubeconfig = std::fs::read_to_string(&env.controller_kubeconfig).unwrap();
    let server = kubeconfig.lines().find_map(|l| l.trim().strip_prefix("server: https://")).unwrap().to_owned();
    let wedge = Wedge::new(server.clone()).await;
    let dir = TempDir::new("e2e-wedged").unwrap();
    let path = dir.join("kubeconfig");
    std::fs::write(&path, kubeconfig.replace(&server, &wedge.addr.to_string())).unwrap();
    let mut env = env.clone();
    env.controller_kubeconfig = path.to_string_lossy().into_owned();
    let mut c = Controller::start(&env, &s, "wedged-0", &[]).await.unwrap();
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(s.client.clone(), "wharf-system");
    let name = format!("lease-{}", s.class);
    let leader = eventually(Duration::from_secs(20), || {
        let (leases, name) = (leases.clone(), name.clone());
        async move { leases.get(&name).await.ok().and_then(|l| l.spec?.holder_identity).as_deref() == Some("wedged-0") }
    })
    .await;
    assert!(leader, "wedged-0 never held the Lease; log:\n{}", c.proc.log());

    wedge.hang.store(true, std::sync::atomic::Ordering::Relaxed);
    let start = std::time::Instant::now();
    let kill = Command::new("kill").args(["-TERM", &c.proc.child.id().to_string()]).status();
    assert!(kill.unwrap().success());
    // Nothing in flight, a 2 s drain deadline: the exit must not wait on the API server.
    let exited = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Ok(Some(status)) = c.proc.child.try_wait() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let took = start.elapsed();
    let status = exited.unwrap_or_else(|_| panic!("still running {took:?} after SIGTERM with the API server hanging"));
    assert!(status.success(), "exit status {status:?}; log:\n{}", c.proc.log());
    assert!(took < Duration::from_secs(5), "{took:?} to exit after SIGTERM; log:\n{}", c.proc.log());
    assert!(c.proc.log().contains("the lease expires by itself"), "{}", c.proc.log());
    eprintln!("exited {took:?} after SIGTERM with the API server hanging");
}
