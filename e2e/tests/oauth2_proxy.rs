//! The oauth2-proxy pattern of ingress-nginx users, against a real oauth2-proxy (built
//! from its Go module by the harness) and the real API server: `auth-url` to its
//! `/oauth2/auth`, `auth-signin` to its `/oauth2/start`, `auth-response-headers` with the
//! user it names. A client signs in with oauth2-proxy's own form (an htpasswd user, so no
//! identity provider is needed) and the backend gets that user, never one the client
//! names.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::networking::v1::Ingress;
use serde_json::{json, Value};
use wharf_dataplane::testing::{http_request, http_request_with_body, Seen};
use wharf_e2e::*;

fn oauth2_proxy() -> PathBuf {
    let bin = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join("oauth2-proxy"))
        .find(|b| b.is_file());
    bin.expect("oauth2-proxy is on PATH: run the suite with e2e/run.sh")
}

/// oauth2-proxy on the backend network, in ingress-nginx's auth_request mode, with user
/// `alice` (password `bar`, bcrypt) in its htpasswd file.
async fn start_oauth2_proxy(env: &Env, dir: &std::path::Path) -> (Proc, SocketAddr) {
    let users = dir.join("users");
    std::fs::write(&users, "alice:$2a$10$tjQGGMSbXpbJCsN5ausAd.r43i6xuRX3trWOiqzzrL5CAGzzmCwYe\n").unwrap();
    let bin = oauth2_proxy();
    for _ in 0..10 {
        let addr: SocketAddr = format!("{}:{}", env.backend_ip, backend_port()).parse().unwrap();
        let args = [
            format!("--http-address={addr}"),
            "--upstream=static://202".into(),
            "--cookie-secret=0123456789abcdef0123456789abcdef".into(),
            "--cookie-secure=false".into(),
            "--email-domain=*".into(),
            format!("--htpasswd-file={}", users.display()),
            "--client-id=wharf-e2e".into(),
            "--client-secret=unused".into(),
            "--set-xauthrequest".into(),
            "--reverse-proxy".into(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut proc = spawn_program_at_backend(env, &bin, &args).unwrap();
        let up =
            eventually(Duration::from_secs(10), || async move { tokio::net::TcpStream::connect(addr).await.is_ok() })
                .await;
        if up {
            return (proc, addr);
        }
        proc.kill();
    }
    panic!("oauth2-proxy did not start on {}", env.backend_ip)
}

fn ingress(s: &Scope, name: &str, path: &str, service: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": s.ns, "annotations": annotations},
        "spec": {"ingressClassName": s.class, "rules": [{"host": "app.e2e.test", "http": {"paths": [{"path": path,
            "pathType": "Prefix", "backend": {"service": {"name": service, "port": {"number": 80}}}}]}}]},
    })
}

/// The `name=value` of the `Set-Cookie` of `seen` for cookie `name`.
fn set_cookie(seen: &Seen, name: &str) -> Option<String> {
    seen.headers.get_all("set-cookie").iter().filter_map(|v| v.to_str().ok()).find_map(|v| {
        let pair = v.split(';').next()?.trim();
        pair.starts_with(&format!("{name}=")).then(|| pair.to_owned())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_signs_in_with_oauth2_proxy_and_the_backend_gets_its_user() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("oauth2").await.unwrap();
    let dir = std::env::temp_dir().join(format!("wharf-e2e-oauth2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (proxy, at) = start_oauth2_proxy(&env, &dir).await;
    s.service("oauth2-proxy", at).await.unwrap();
    let (_b, app) = backend(&env, "app").await.unwrap();
    s.service("app", app).await.unwrap();
    let c = Controller::start(&env, &s, "oauth2-0", &[]).await.unwrap();

    // As oauth2-proxy's documentation has it for ingress-nginx.
    let protected = json!({
        "nginx.ingress.kubernetes.io/auth-url": format!("http://oauth2-proxy.{}.svc.cluster.local/oauth2/auth", s.ns),
        "nginx.ingress.kubernetes.io/auth-signin": "http://$host/oauth2/start?rd=$escaped_request_uri",
        "nginx.ingress.kubernetes.io/auth-response-headers": "X-Auth-Request-User, X-Auth-Request-Email",
    });
    s.apply::<Ingress>(ingress(&s, "app", "/", "app", protected)).await.unwrap();
    s.apply::<Ingress>(ingress(&s, "oauth2-proxy", "/oauth2", "oauth2-proxy", json!({}))).await.unwrap();

    let get = |path: &'static str, headers: Vec<(&'static str, String)>| async move {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        http_request(c.http, "GET", "app.e2e.test", path, &headers).await.unwrap()
    };
    // Not signed in: to oauth2-proxy's start, with the page to come back to.
    let served =
        eventually(Duration::from_secs(15), || async { get("/private?x=1", vec![]).await.status == 302 }).await;
    assert!(served, "not served; log:\n{}\noauth2-proxy:\n{}", c.proc.log(), proxy.log());
    let out = get("/private?x=1", vec![("x-auth-request-user", "mallory".into())]).await;
    assert_eq!(
        out.headers["location"].to_str().unwrap(),
        "http://app.e2e.test/oauth2/start?rd=%2Fprivate%3Fx%3D1",
        "a client's own user header changes nothing"
    );

    // oauth2-proxy's sign-in form, through the gateway: a wrong password gets no session.
    let sign_in = |form: &'static str| async move {
        let headers = [("content-type", "application/x-www-form-urlencoded")];
        http_request_with_body(c.http, "POST", "app.e2e.test", "/oauth2/sign_in", &headers, form.as_bytes())
            .await
            .unwrap()
    };
    let wrong = sign_in("username=alice&password=wrong&rd=%2Fprivate").await;
    assert_eq!((wrong.status, set_cookie(&wrong, "_oauth2_proxy")), (401, None), "{}", proxy.log());
    let signed = sign_in("username=alice&password=bar&rd=%2Fprivate").await;
    assert_eq!(signed.status, 302, "{}", signed.body);
    assert_eq!(signed.headers["location"].to_str().unwrap(), "/private");
    let session = set_cookie(&signed, "_oauth2_proxy").expect("oauth2-proxy set its session cookie");

    // Signed in: the backend gets the request, with the user oauth2-proxy named, in place
    // of the one the client sent.
    let seen = get("/private?x=1", vec![("cookie", session.clone()), ("x-auth-request-user", "mallory".into())]).await;
    assert_eq!((seen.status, seen.echo_name()), (200, "app".to_owned()), "{}", seen.body);
    let told = seen.json();
    assert_eq!((&told["path"], &told["query"]), (&"/private".into(), &"x=1".into()));
    assert_eq!(told["headers"]["x-auth-request-user"], "alice", "{told}");
    // A session cookie oauth2-proxy did not sign is refused.
    let forged = format!("{}x", session);
    assert_eq!(get("/private", vec![("cookie", forged)]).await.status, 302);
}
