//! ingress-nginx annotations through the real API server: what a client gets, and the
//! Events `kubectl describe` shows for what Wharf refuses or does not support.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use wharf_dataplane::testing::{http_get_from, http_request};
use wharf_e2e::*;

fn ingress(s: &Scope, name: &str, host: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": s.ns, "annotations": annotations},
        "spec": {"ingressClassName": s.class, "rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "app", "port": {"number": 80}}}}]}}]},
    })
}

/// The status a client at `from` gets for GET / on `host`: from the backend network
/// namespace (its own address) when the suite has one, else from a loopback address.
async fn status_from(env: &Env, from: &Client, port: u16, host: &str) -> u16 {
    match from {
        Client::Loopback(ip) => {
            http_get_from(*ip, SocketAddr::from(([127, 0, 0, 1], port)), host, "/").await.map(|s| s.status).unwrap_or(0)
        }
        Client::BackendNetwork(gateway) => {
            let (first, rest) = env.backend_exec.split_first().unwrap();
            let out = Command::new(first)
                .args(rest)
                .args(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", "-H"])
                .arg(format!("Host: {host}"))
                .arg(format!("http://{gateway}:{port}/"))
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0)
        }
    }
}

/// Waits until `kubectl describe ingress NAME` shows an Event `reason` with `words`.
async fn shows_event(s: &Scope, name: &str, reason: &str, words: &str) {
    let described = eventually(Duration::from_secs(10), || async {
        let text = s.kubectl(&["describe", "ingress", name]).unwrap_or_default();
        text.contains(reason) && text.contains(words)
    })
    .await;
    assert!(
        described,
        "kubectl describe ingress {name} shows no {reason} with {words}:\n{}",
        s.kubectl(&["describe", "ingress", name]).unwrap_or_default()
    );
}

enum Client {
    Loopback(IpAddr),
    /// In the backend network namespace, reaching Wharf at the host side's address.
    BackendNetwork(String),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_annotations_as_a_user_sees_them() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("annotations").await.unwrap();
    let c = Controller::start(&env, &s, "annotations-0", &["--listen-address", "0.0.0.0"]).await.unwrap();
    let (_b, addr) = backend(&env, "app").await.unwrap();
    s.service("app", addr).await.unwrap();
    let port = c.http.port();

    // The client outside the allow list: the backend network when there is one.
    let (outsider, outsider_ip) = match (&env.host_ip, env.backend_exec.is_empty()) {
        (Some(gateway), false) => (Client::BackendNetwork(gateway.clone()), env.backend_ip.clone()),
        _ => (Client::Loopback([127, 0, 0, 2].into()), "127.0.0.2".to_owned()),
    };
    let local = Client::Loopback([127, 0, 0, 1].into());

    // Only loopback may use allow.e2e.test; the outsider's own address may not use deny.e2e.test;
    // an unparsable list serves no one.
    for (name, host, ann) in [
        ("allow", "allow.e2e.test", json!({"nginx.ingress.kubernetes.io/whitelist-source-range": "127.0.0.0/8"})),
        ("deny", "deny.e2e.test", json!({"nginx.ingress.kubernetes.io/denylist-source-range": outsider_ip})),
        (
            "broken",
            "broken.e2e.test",
            json!({"nginx.ingress.kubernetes.io/allowlist-source-range": "10.0.0.0/8,10.0.0.256"}),
        ),
        ("open", "open.e2e.test", json!({})),
        (
            "limited",
            "limited.e2e.test",
            json!({"nginx.ingress.kubernetes.io/limit-rpm": "1",
                   "nginx.ingress.kubernetes.io/limit-burst-multiplier": "1"}),
        ),
        (
            "moved",
            "moved.e2e.test",
            json!({"nginx.ingress.kubernetes.io/permanent-redirect": "https://new.e2e.test/landing",
                   "nginx.ingress.kubernetes.io/permanent-redirect-code": "308"}),
        ),
        (
            "snippet",
            "snippet.e2e.test",
            json!({"nginx.ingress.kubernetes.io/configuration-snippet": "more_set_headers \"X-A: b\";"}),
        ),
        ("buffered", "buffered.e2e.test", json!({"nginx.ingress.kubernetes.io/proxy-buffering": "on"})),
    ] {
        s.apply::<k8s_openapi::api::networking::v1::Ingress>(ingress(&s, name, host, ann)).await.unwrap();
    }
    // The most used ingress-nginx pair: a regex path with capture groups and a rewrite.
    s.apply::<k8s_openapi::api::networking::v1::Ingress>(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "rewrite", "namespace": s.ns,
                     "annotations": {"nginx.ingress.kubernetes.io/rewrite-target": "/$2"}},
        "spec": {"ingressClassName": s.class, "rules": [{"host": "rewrite.e2e.test", "http": {"paths": [{
            "path": "/something(/|$)(.*)", "pathType": "ImplementationSpecific",
            "backend": {"service": {"name": "app", "port": {"number": 80}}}}]}}]},
    }))
    .await
    .unwrap();
    // A canary Ingress beside a main one: by header, else 30 % by weight.
    let (_b2, addr2) = backend(&env, "v2").await.unwrap();
    s.service("v2", addr2).await.unwrap();
    s.apply::<k8s_openapi::api::networking::v1::Ingress>(ingress(&s, "main", "canary.e2e.test", json!({})))
        .await
        .unwrap();
    let mut canary = ingress(
        &s,
        "canary",
        "canary.e2e.test",
        json!({"nginx.ingress.kubernetes.io/canary": "true",
               "nginx.ingress.kubernetes.io/canary-by-header": "X-Canary",
               "nginx.ingress.kubernetes.io/canary-weight": "30"}),
    );
    canary["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] = json!("v2");
    s.apply::<k8s_openapi::api::networking::v1::Ingress>(canary).await.unwrap();
    // Sticky sessions over a Service with two endpoints (one EndpointSlice each).
    let (_s1, one) = backend(&env, "one").await.unwrap();
    let (_s2, two) = backend(&env, "two").await.unwrap();
    s.apply::<k8s_openapi::api::core::v1::Service>(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "pair", "namespace": s.ns},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    }))
    .await
    .unwrap();
    for (i, addr) in [one, two].iter().enumerate() {
        s.apply::<k8s_openapi::api::discovery::v1::EndpointSlice>(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("pair-{i}"), "namespace": s.ns, "labels": {"kubernetes.io/service-name": "pair"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": addr.port()}],
            "endpoints": [{"addresses": [addr.ip().to_string()], "conditions": {"ready": true}}],
        }))
        .await
        .unwrap();
    }
    let mut sticky =
        ingress(&s, "sticky", "sticky.e2e.test", json!({"nginx.ingress.kubernetes.io/affinity": "cookie"}));
    sticky["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] = json!("pair");
    s.apply::<k8s_openapi::api::networking::v1::Ingress>(sticky).await.unwrap();
    let live = eventually(Duration::from_secs(10), || async {
        http_get(c.http, "open.e2e.test", "/").await.map(|r| r.status) == Ok(200)
            && http_get(c.http, "buffered.e2e.test", "/").await.map(|r| r.status) == Ok(200)
    })
    .await;
    assert!(live, "the Ingresses are not served; log:\n{}", c.proc.log());

    let cases = [
        (&local, "allow.e2e.test", 200),
        (&outsider, "allow.e2e.test", 403),
        (&local, "deny.e2e.test", 200),
        (&outsider, "deny.e2e.test", 403),
        (&local, "broken.e2e.test", 403),
        (&outsider, "broken.e2e.test", 403),
        (&outsider, "open.e2e.test", 200),
    ];
    for (from, host, want) in cases {
        let got = status_from(&env, from, port, host).await;
        assert_eq!(got, want, "GET http://{host}/ from {outsider_ip} or loopback; log:\n{}", c.proc.log());
    }

    for (path, want) in [("/something/new/x?q=1", "/new/x"), ("/something", "/"), ("/SOMETHING/up", "/up")] {
        let seen = http_get(c.http, "rewrite.e2e.test", path).await.unwrap();
        assert_eq!((seen.status, seen.json()["path"].as_str()), (200, Some(want)), "GET {path}: {}", seen.body);
    }
    assert_eq!(http_get(c.http, "rewrite.e2e.test", "/other").await.map(|r| r.status), Ok(404));

    let name_with = |header: Option<&'static str>| async move {
        let headers: Vec<(&str, &str)> = header.map(|v| vec![("x-canary", v)]).unwrap_or_default();
        http_request(c.http, "GET", "canary.e2e.test", "/", &headers).await.map(|r| r.echo_name()).unwrap_or_default()
    };
    let split = eventually(Duration::from_secs(10), || async { name_with(Some("always")).await == "v2" }).await;
    assert!(split, "the canary is not served; log:\n{}", c.proc.log());
    for _ in 0..10 {
        assert_eq!(name_with(Some("always")).await, "v2");
        assert_eq!(name_with(Some("never")).await, "app");
    }
    let mut to_canary = 0;
    for _ in 0..300 {
        match name_with(None).await.as_str() {
            "v2" => to_canary += 1,
            "app" => {}
            other => panic!("answered by {other:?}"),
        }
    }
    // 30 % of 300 is 90; the bounds are more than five standard deviations (7.9) away.
    assert!((50..=130).contains(&to_canary), "{to_canary} of 300 requests went to the 30 % canary");
    eprintln!("canary-weight 30: {to_canary} of 300 requests went to the canary");

    // One request a minute and a burst of one: two pass, the rest get 503 (all well
    // within a minute), and the metric counts them.
    let before = c.metric("wharf_rate_limited_requests_total").await;
    let mut statuses = std::collections::BTreeMap::new();
    for _ in 0..20 {
        let status = http_get(c.http, "limited.e2e.test", "/").await.map(|r| r.status).unwrap_or(0);
        *statuses.entry(status).or_insert(0) += 1;
    }
    assert_eq!(statuses, [(200, 2), (503, 18)].into(), "limit-rpm 1 with a burst of 1");
    assert_eq!(c.metric("wharf_rate_limited_requests_total").await - before, 18.0);
    assert_eq!(status_from(&env, &outsider, port, "limited.e2e.test").await, 200, "another client has its own count");

    let both = eventually(Duration::from_secs(10), || async {
        let mut names = std::collections::BTreeSet::new();
        for _ in 0..40 {
            names.insert(http_get(c.http, "sticky.e2e.test", "/").await.map(|r| r.echo_name()).unwrap_or_default());
        }
        names == ["one".to_owned(), "two".to_owned()].into()
    })
    .await;
    assert!(both, "without the cookie, both endpoints answer; log:\n{}", c.proc.log());
    let first = http_get(c.http, "sticky.e2e.test", "/").await.unwrap();
    let set = first.headers["set-cookie"].to_str().unwrap().to_owned();
    let pair = set.split(';').next().unwrap().to_owned();
    assert!(pair.starts_with("INGRESSCOOKIE=") && set.contains("Path=/; HttpOnly"), "{set}");
    for _ in 0..100 {
        let seen = http_request(c.http, "GET", "sticky.e2e.test", "/", &[("cookie", &pair)]).await.unwrap();
        assert_eq!(seen.echo_name(), first.echo_name(), "the session moved ({pair})");
    }

    let moved = http_get(c.http, "moved.e2e.test", "/a?b=c").await.unwrap();
    assert_eq!((moved.status, moved.headers["location"].to_str().unwrap()), (308, "https://new.e2e.test/landing"));

    // `wharf migrate` reads the same Ingresses from the API server.
    let out = Command::new(&env.wharf_bin)
        .args(["migrate", "--kubeconfig", &env.controller_kubeconfig, "-n", &s.ns, "--from-class", &s.class])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}{}", String::from_utf8_lossy(&out.stderr));
    assert!(report.contains(&format!("Ingress {}/snippet\n  NOT SERVED", s.ns)), "{report}");
    assert!(report.contains("not supported  nginx.ingress.kubernetes.io/proxy-buffering=\"on\""), "{report}");
    assert!(report.contains("differs        nginx.ingress.kubernetes.io/rewrite-target=\"/$2\""), "{report}");
    // The gateway's own account may not read ingress-nginx's ConfigMap: said, not fatal.
    let global = "Global settings (ConfigMap ingress-nginx/ingress-nginx-controller)\n  ";
    assert!(report.contains(global) && report.contains("ingress-nginx's defaults apply"), "{report}");

    // The snippet's Ingress is not served (it would miss whatever the snippet did) and
    // says why; the unsupported annotation is named; the bad list too.
    assert_eq!(http_get(c.http, "snippet.e2e.test", "/").await.map(|r| r.status), Ok(404));
    for (name, reason, words) in [
        ("snippet", "SnippetRefused", "configuration-snippet"),
        ("buffered", "UnsupportedAnnotation", "nginx.ingress.kubernetes.io/proxy-buffering"),
        ("broken", "InvalidAnnotation", "every client is refused"),
    ] {
        shows_event(&s, name, reason, words).await;
    }
}

/// An htpasswd line made by the real `htpasswd` (`-B` bcrypt, `-m` apr1).
fn htpasswd(scheme: &str, user: &str, password: &str) -> String {
    let out =
        Command::new("htpasswd").args(["-nb", scheme, user, password]).output().expect("htpasswd (apache2-utils)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn basic(user: &str, password: &str) -> String {
    use std::fmt::Write;
    // Base64 by hand keeps the test's dependencies as they are.
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let raw = format!("{user}:{password}").into_bytes();
    let mut out = String::from("Basic ");
    for chunk in raw.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            let c = if i <= chunk.len() { ABC[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' };
            let _ = out.write_char(c);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_authentication_and_access_control_wharf_cannot_enforce() {
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::api::networking::v1::Ingress;
    let env = Env::from_env().unwrap();
    let s = Scope::new("auth").await.unwrap();
    let c = Controller::start(&env, &s, "auth-0", &[]).await.unwrap();
    let (_b, addr) = backend(&env, "app").await.unwrap();
    s.service("app", addr).await.unwrap();

    let users = format!("{}\n{}\n", htpasswd("-B", "alice", "correct horse"), htpasswd("-m", "bob", "hunter2"));
    let secret = |name: &str, data: Value| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": s.ns},
               "type": "Opaque", "stringData": data})
    };
    s.apply::<Secret>(secret("users", json!({"auth": users}))).await.unwrap();
    let map = htpasswd("-B", "carol", "s3cret");
    let carol_hash = map.split_once(':').unwrap().1;
    s.apply::<Secret>(secret("map", json!({"carol": carol_hash}))).await.unwrap();
    let auth = |secret: &str| {
        json!({"nginx.ingress.kubernetes.io/auth-type": "basic",
               "nginx.ingress.kubernetes.io/auth-secret": secret,
               "nginx.ingress.kubernetes.io/auth-realm": "Staff only"})
    };
    s.apply::<Ingress>(ingress(&s, "basic", "basic.e2e.test", auth("users"))).await.unwrap();
    let mut mapped = auth(&format!("{}/map", s.ns));
    mapped["nginx.ingress.kubernetes.io/auth-secret-type"] = json!("auth-map");
    s.apply::<Ingress>(ingress(&s, "mapped", "mapped.e2e.test", mapped)).await.unwrap();
    s.apply::<Ingress>(ingress(&s, "later", "later.e2e.test", auth("later"))).await.unwrap();
    let external = json!({"nginx.ingress.kubernetes.io/auth-url": "http://auth.elsewhere.test/check"});
    s.apply::<Ingress>(ingress(&s, "external", "external.e2e.test", external)).await.unwrap();
    let mtls = json!({"nginx.ingress.kubernetes.io/auth-tls-secret": format!("{}/ca", s.ns)});
    s.apply::<Ingress>(ingress(&s, "mtls", "mtls.e2e.test", mtls)).await.unwrap();

    let get = |host: &'static str, authorization: Option<String>| async move {
        let headers: Vec<(&str, &str)> =
            authorization.as_deref().map(|a| vec![("authorization", a)]).unwrap_or_default();
        http_request(c.http, "GET", host, "/", &headers).await.unwrap()
    };
    // Every Ingress applied above is served (the last ones too, whose access control
    // cannot be set up).
    let live = eventually(Duration::from_secs(10), || async {
        get("basic.e2e.test", None).await.status == 401
            && get("mapped.e2e.test", None).await.status == 401
            && get("mtls.e2e.test", None).await.status != 404
    })
    .await;
    assert!(live, "the protected Ingresses are not served; log:\n{}", c.proc.log());

    let challenge = get("basic.e2e.test", None).await;
    assert_eq!(challenge.headers["www-authenticate"], "Basic realm=\"Staff only\"");
    for (host, user, password, want) in [
        ("basic.e2e.test", "alice", "correct horse", 200),
        ("basic.e2e.test", "bob", "hunter2", 200),
        ("basic.e2e.test", "alice", "hunter2", 401),
        ("basic.e2e.test", "carol", "s3cret", 401),
        ("mapped.e2e.test", "carol", "s3cret", 200),
        ("mapped.e2e.test", "alice", "correct horse", 401),
    ] {
        let seen = get(host, Some(basic(user, password))).await;
        assert_eq!(seen.status, want, "{user} on {host}: {}", seen.body);
        if want == 200 {
            assert!(seen.json()["headers"].get("authorization").is_none(), "the backend got the credentials");
        }
    }
    // curl, as a user would.
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-u",
            "alice:correct horse",
            "-H",
            "Host: basic.e2e.test",
        ])
        .arg(format!("http://{}/", c.http))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");

    // A missing Secret refuses every request, and says so, until the Secret appears.
    assert_eq!(get("later.e2e.test", Some(basic("dave", "pw"))).await.status, 503);
    // Access control that cannot be set up is never skipped silently: a check no Service
    // or route of this gateway answers, client certificates of a CA that is not there.
    assert_eq!(get("external.e2e.test", None).await.status, 503);
    assert_eq!(get("mtls.e2e.test", None).await.status, 503);
    for (name, reason, words) in [
        ("later", "AuthSecretInvalid", "does not exist"),
        ("external", "AuthURLNotServed", "auth.elsewhere.test"),
        ("mtls", "AuthTLSSecretInvalid", "does not exist"),
    ] {
        shows_event(&s, name, reason, words).await;
    }
    s.apply::<Secret>(secret("later", json!({"auth": htpasswd("-B", "dave", "pw")}))).await.unwrap();
    let served = eventually(Duration::from_secs(10), || async {
        get("later.e2e.test", Some(basic("dave", "pw"))).await.status == 200
    })
    .await;
    assert!(served, "the Secret's arrival did not open the Ingress; log:\n{}", c.proc.log());

    // A changed password applies without a restart; the old one stops working.
    s.apply::<Secret>(secret("users", json!({"auth": htpasswd("-m", "alice", "new horse")}))).await.unwrap();
    let rotated = eventually(Duration::from_secs(10), || async {
        get("basic.e2e.test", Some(basic("alice", "new horse"))).await.status == 200
    })
    .await;
    assert!(rotated, "the new password is not taken; log:\n{}", c.proc.log());
    assert_eq!(get("basic.e2e.test", Some(basic("alice", "correct horse"))).await.status, 401);
    assert_eq!(get("basic.e2e.test", Some(basic("bob", "hunter2"))).await.status, 401, "bob was removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_authentication_asks_a_service_and_follows_its_answer() {
    use k8s_openapi::api::networking::v1::Ingress;
    let env = Env::from_env().unwrap();
    let s = Scope::new("extauth").await.unwrap();
    let c = Controller::start(&env, &s, "extauth-0", &[]).await.unwrap();
    let (_b, addr) = backend(&env, "app").await.unwrap();
    s.service("app", addr).await.unwrap();
    // The authentication service: an echo that answers with the status and headers the
    // client's request names (its headers reach the check).
    let (_a, sso) = backend(&env, "sso").await.unwrap();
    s.service("sso", sso).await.unwrap();

    let by_service = json!({
        "nginx.ingress.kubernetes.io/auth-url": format!("http://sso.{}.svc.cluster.local/oauth2/auth", s.ns),
        "nginx.ingress.kubernetes.io/auth-response-headers": "X-User",
    });
    s.apply::<Ingress>(ingress(&s, "ext", "ext.e2e.test", by_service)).await.unwrap();
    let with_signin = json!({
        "nginx.ingress.kubernetes.io/auth-url": "http://$host/oauth2/auth",
        "nginx.ingress.kubernetes.io/auth-signin": "https://$host/oauth2/start",
        // Which echo answered the check: the backend gets its name.
        "nginx.ingress.kubernetes.io/auth-response-headers": "X-Echo-Name",
    });
    s.apply::<Ingress>(ingress(&s, "self", "self.e2e.test", with_signin)).await.unwrap();
    // The same host's /oauth2 goes to the authentication service itself, unprotected.
    let mut sso_paths = ingress(&s, "self-sso", "self.e2e.test", json!({}));
    sso_paths["spec"]["rules"][0]["http"]["paths"][0]["path"] = json!("/oauth2");
    sso_paths["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] = json!("sso");
    s.apply::<Ingress>(sso_paths).await.unwrap();

    let get = |host: &'static str, path: &'static str, headers: Vec<(&'static str, &'static str)>| async move {
        http_request(c.http, "GET", host, path, &headers).await.unwrap()
    };
    let live = eventually(Duration::from_secs(10), || async {
        get("ext.e2e.test", "/", vec![("x-echo-status", "401")]).await.status == 401
            && get("self.e2e.test", "/", vec![("x-echo-status", "401")]).await.status == 302
            && get("self.e2e.test", "/oauth2/start", vec![]).await.echo_name() == "sso"
    })
    .await;
    assert!(live, "the protected Ingresses are not served; log:\n{}", c.proc.log());

    // A passing check: the request goes on, with the check's X-User (not the client's).
    let pass = get(
        "ext.e2e.test",
        "/p?a=b",
        vec![("x-echo-header", "X-User: alice"), ("x-user", "mallory"), ("cookie", "session=s1")],
    )
    .await;
    assert_eq!((pass.status, pass.echo_name()), (200, "app".to_owned()), "{}", pass.body);
    assert_eq!(pass.json()["headers"]["x-user"], "alice");
    // A passing check without the header removes the client's.
    let bare = get("ext.e2e.test", "/", vec![("x-user", "mallory")]).await;
    assert_eq!(bare.status, 200);
    assert!(bare.json()["headers"].get("x-user").is_none(), "{}", bare.body);
    // 401 and 403 are the client's answer (with the check's challenge); anything else is 500.
    let denied =
        get("ext.e2e.test", "/", vec![("x-echo-status", "401"), ("x-echo-header", "WWW-Authenticate: Bearer")]).await;
    assert_eq!((denied.status, denied.headers["www-authenticate"].to_str().unwrap()), (401, "Bearer"));
    assert_eq!(get("ext.e2e.test", "/", vec![("x-echo-status", "403")]).await.status, 403);
    assert_eq!(get("ext.e2e.test", "/", vec![("x-echo-status", "302")]).await.status, 500);
    assert_eq!(get("ext.e2e.test", "/", vec![("x-echo-status", "503")]).await.status, 500);

    // Through this gateway's own route for the same host ($host), with a sign-in page.
    let signin = get("self.e2e.test", "/orders?id=7", vec![("x-echo-status", "401")]).await;
    assert_eq!(signin.status, 302);
    assert_eq!(
        signin.headers["location"].to_str().unwrap(),
        "https://self.e2e.test/oauth2/start?rd=http%3A%2F%2Fself.e2e.test%2Forders%3Fid%3D7"
    );
    let cookie =
        get("self.e2e.test", "/orders", vec![("x-echo-header", "Set-Cookie: _oauth2_proxy=refreshed; Path=/")]).await;
    assert_eq!((cookie.status, cookie.echo_name()), (200, "app".to_owned()));
    assert_eq!(cookie.json()["headers"]["x-echo-name"], "sso", "the check went to the host's /oauth2 route");
    let cookies: Vec<&str> = cookie.headers.get_all("set-cookie").iter().map(|v| v.to_str().unwrap()).collect();
    assert!(cookies.contains(&"_oauth2_proxy=refreshed; Path=/"), "{cookies:?}");
    assert_eq!(get("self.e2e.test", "/oauth2/start", vec![]).await.echo_name(), "sso", "its own paths are open");

    // The authentication service gone: 500, never the backend.
    s.delete::<k8s_openapi::api::core::v1::Service>("sso").await.unwrap();
    let gone =
        eventually(Duration::from_secs(10), || async { get("ext.e2e.test", "/", vec![]).await.status == 500 }).await;
    assert!(gone, "requests still pass without the authentication service; log:\n{}", c.proc.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_of_the_secrets_ca_are_required_with_curl() {
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::api::networking::v1::Ingress;
    let env = Env::from_env().unwrap();
    let s = Scope::new("mtls").await.unwrap();
    let c = Controller::start(&env, &s, "mtls-0", &[]).await.unwrap();
    let (_b, addr) = backend(&env, "app").await.unwrap();
    s.service("app", addr).await.unwrap();
    let (server_ca, client_ca) = (TestCa::new("e2e server CA"), TestCa::new("e2e client CA"));
    let server = server_ca.leaf(&["mtls.e2e.test"]);
    let (client, stranger) = (client_ca.leaf(&["client-1"]), TestCa::new("e2e other CA").leaf(&["client-1"]));
    s.apply::<Secret>(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mtls-tls", "namespace": s.ns},
        "type": "kubernetes.io/tls", "stringData": {"tls.crt": server.chain_pem, "tls.key": server.key_pem}}),
    )
    .await
    .unwrap();
    s.apply::<Secret>(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "client-ca", "namespace": s.ns},
        "type": "Opaque", "stringData": {"ca.crt": client_ca.root_pem}}),
    )
    .await
    .unwrap();
    let mut mtls = ingress(
        &s,
        "mtls",
        "mtls.e2e.test",
        json!({"nginx.ingress.kubernetes.io/auth-tls-secret": format!("{}/client-ca", s.ns),
               "nginx.ingress.kubernetes.io/auth-tls-pass-certificate-to-upstream": "true"}),
    );
    mtls["spec"]["tls"] = json!([{"hosts": ["mtls.e2e.test"], "secretName": "mtls-tls"}]);
    s.apply::<Ingress>(mtls).await.unwrap();

    let dir = TempDir::new("e2e-mtls").unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let server_ca_file = file("server-ca.pem", &server_ca.root_pem);
    let (cert, key) = (file("client.pem", &client.chain_pem), file("client.key", &client.key_pem));
    let (other_cert, other_key) = (file("other.pem", &stranger.chain_pem), file("other.key", &stranger.key_pem));
    let port = c.https.port();
    let curl = |extra: &[&str]| {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "10", "-w", "\n%{http_code}", "--cacert", &server_ca_file])
            .args(["--resolve", &format!("mtls.e2e.test:{port}:127.0.0.1")])
            .args(extra)
            .arg(format!("https://mtls.e2e.test:{port}/"))
            .output()
            .expect("curl is needed by this test");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "000"));
        (code.to_owned(), body.to_owned())
    };
    // Without a certificate: 400, once the Ingress is served.
    let asks = eventually(Duration::from_secs(10), || async { curl(&[]).0 == "400" }).await;
    assert!(asks, "{:?}; log:\n{}", curl(&[]), c.proc.log());
    // With one of the Secret's CA: served, and the backend hears who it is.
    let (code, body) = curl(&["--cert", &cert, "--key", &key]);
    assert_eq!(code, "200", "{body}");
    let seen: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(seen["headers"]["ssl-client-verify"], "SUCCESS");
    assert_eq!(seen["headers"]["ssl-client-subject-dn"], "CN=client-1");
    assert!(seen["headers"]["ssl-client-cert"].as_str().unwrap_or_default().starts_with("-----BEGIN%20CERTIFICATE"));
    // Another CA's: the handshake fails.
    assert_eq!(curl(&["--cert", &other_cert, "--key", &other_key]).0, "000");
    // A new CA in the Secret applies without a restart: the old client is refused.
    s.apply::<Secret>(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "client-ca", "namespace": s.ns},
        "type": "Opaque", "stringData": {"ca.crt": TestCa::new("e2e rotated CA").root_pem}}),
    )
    .await
    .unwrap();
    let rotated =
        eventually(Duration::from_secs(10), || async { curl(&["--cert", &cert, "--key", &key]).0 == "000" }).await;
    assert!(rotated, "the rotated CA is not taken; log:\n{}", c.proc.log());
}
