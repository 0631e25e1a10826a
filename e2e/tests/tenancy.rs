//! Tenants that are real: ServiceAccounts bound to the `edit` ClusterRole in their own
//! namespace only, every tenant object written with `kubectl --as`. Tenant b attacks
//! tenant a's host on a shared controller; a's bytes, certificate and backend stay a's,
//! and b's objects show why in `kubectl describe`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{json, Value};
use wharf_e2e::*;

/// A namespace whose objects are written as its own ServiceAccount, which may edit that
/// namespace only.
struct Tenant {
    scope: Scope,
    user: String,
}

/// Fills the aggregated ClusterRoles `view` and `edit` with the rules of the ClusterRoles
/// their selectors pick, as kube-controller-manager's aggregation controller does on a
/// cluster (the harness runs none).
fn aggregate(role: &str) {
    let get = |args: &[&str]| -> Value { serde_json::from_str(&kubectl(args, None).unwrap()).unwrap() };
    let target = get(&["get", "clusterrole", role, "-o", "json"]);
    let mut rules: Vec<Value> = Vec::new();
    for selector in target["aggregationRule"]["clusterRoleSelectors"].as_array().unwrap() {
        let labels: Vec<String> = selector["matchLabels"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
            .collect();
        let picked = get(&["get", "clusterrole", "-l", &labels.join(","), "-o", "json"]);
        for r in picked["items"].as_array().unwrap().iter().filter(|r| r["metadata"]["name"] != role) {
            rules.extend(r["rules"].as_array().cloned().unwrap_or_default());
        }
    }
    let patch = json!({"rules": rules}).to_string();
    kubectl(&["patch", "clusterrole", role, "--type", "merge", "-p", &patch], None).unwrap();
}

impl Tenant {
    async fn new(name: &str) -> Tenant {
        aggregate("view");
        aggregate("edit");
        let scope = Scope::new(name).await.unwrap();
        let ns = scope.ns.clone();
        apply(&json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant", "namespace": ns}}))
            .unwrap();
        apply(&json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "tenant-edit", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}],
        }))
        .unwrap();
        let user = format!("system:serviceaccount:{ns}:tenant");
        Tenant { scope, user }
    }

    /// `kubectl apply` of `obj` as the tenant.
    fn apply(&self, obj: &Value) -> Result<String, String> {
        kubectl(&["apply", "--as", &self.user, "-f", "-"], Some(&obj.to_string())).map_err(|e| format!("{e:#}"))
    }

    /// An Ingress of class `class` in the tenant's namespace.
    fn ingress(&self, name: &str, class: &str, annotations: Value, spec: Value) -> Value {
        let mut spec = spec;
        spec["ingressClassName"] = json!(class);
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": name, "namespace": self.scope.ns, "annotations": annotations}, "spec": spec,
        })
    }

    fn describe(&self, name: &str) -> String {
        self.scope.kubectl(&["describe", "ingress", name]).unwrap_or_default()
    }
}

/// Waits until objects `a` creates are younger than `b`'s Ingress `name`: creation times
/// have seconds, and an older object must be older by them.
async fn clock_passes(a: &Tenant, b: &Tenant, name: &str) {
    let created = |scope: &Scope, kind: &str, name: &str| {
        scope.get_json(kind, name).unwrap()["metadata"]["creationTimestamp"].as_str().unwrap().to_owned()
    };
    let old_at = created(&b.scope, "ingress", name);
    let tick = std::sync::atomic::AtomicU32::new(0);
    let later = eventually(Duration::from_secs(5), || async {
        let name = format!("clock-{}", tick.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let probe =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": a.scope.ns}});
        a.apply(&probe).is_ok() && created(&a.scope, "configmap", &name) > old_at
    })
    .await;
    assert!(later, "the API server's clock did not pass {old_at}");
}

fn rules(host: &str, path: &str, service: &str) -> Value {
    json!([{"host": host, "http": {"paths": [{"path": path, "pathType": "Prefix",
        "backend": {"service": {"name": service, "port": {"number": 80}}}}]}}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_take_serve_canary_certify_or_check_past_another_tenants_host() {
    let env = Env::from_env().unwrap();
    let a = Tenant::new("tenant-a").await;
    let b = Tenant::new("tenant-b").await;
    let class = a.scope.class.clone();
    let ca = TestCa::new("tenancy");
    let (_aw, a_web) = backend(&env, "a-web").await.unwrap();
    let (_be, b_evil) = backend(&env, "b-evil").await.unwrap();
    // The EndpointSlices, as the cluster makes them from the tenants' pods.
    a.scope.service("web", a_web).await.unwrap();
    b.scope.service("evil", b_evil).await.unwrap();
    let c = Controller::start(&env, &a.scope, "tenancy", &[]).await.unwrap();

    // The tenants are real: b may not write into a's namespace.
    let mut into_a = b.ingress("intruder", &class, json!({}), json!({"rules": rules("x.b.test", "/", "evil")}));
    into_a["metadata"]["namespace"] = json!(a.scope.ns);
    let refused = b.apply(&into_a).unwrap_err();
    assert!(refused.contains("forbidden"), "{refused}");

    // b's Ingress is older than a's (creation times have seconds: a's objects wait for the
    // API server's clock to pass b's), and names b's own host for now.
    b.apply(&b.ingress("old", &class, json!({}), json!({"rules": rules("own.b.test", "/", "evil")}))).unwrap();
    clock_passes(&a, &b, "old").await;
    // a's shop, with a's certificate.
    let a_cert = ca.leaf(&["shop.a.test"]);
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "shop-tls", "namespace": a.scope.ns},
        "stringData": {"tls.crt": a_cert.chain_pem, "tls.key": a_cert.key_pem}});
    a.apply(&secret).unwrap();
    let shop = json!({"tls": [{"hosts": ["shop.a.test"], "secretName": "shop-tls"}], "rules": rules("shop.a.test", "/", "web")});
    a.apply(&a.ingress("shop", &class, json!({}), shop)).unwrap();
    // Over HTTPS, as a's clients come (HTTP gets the redirect to it).
    let verifying = ca.client_config(&[b"http/1.1"]);
    let shop_get = |path: &'static str| {
        let verifying = verifying.clone();
        async move { https_get(c.https, Some("shop.a.test"), verifying, "shop.a.test", path).await }
    };
    let served = eventually(Duration::from_secs(20), || async {
        shop_get("/").await.map(|s| s.echo_name()).unwrap_or_default() == "a-web"
    })
    .await;
    assert!(served, "{}", c.proc.log());

    // b's attacks, each in its own Ingress.
    let b_cert = ca.leaf(&["shop.a.test"]);
    let b_secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "mine", "namespace": b.scope.ns},
        "stringData": {"tls.crt": b_cert.chain_pem, "tls.key": b_cert.key_pem}});
    b.apply(&b_secret).unwrap();
    let attacks = [
        // Paths on a's host.
        b.ingress("paths", &class, json!({}), json!({"rules": rules("shop.a.test", "/admin", "evil")})),
        // Every request of a's host, as a canary.
        b.ingress(
            "canary",
            &class,
            json!({"nginx.ingress.kubernetes.io/canary": "true", "nginx.ingress.kubernetes.io/canary-weight": "100"}),
            json!({"rules": rules("shop.a.test", "/", "evil")}),
        ),
        // b's own certificate for a's host.
        b.ingress(
            "cert",
            &class,
            json!({}),
            json!({"tls": [{"hosts": ["shop.a.test"], "secretName": "mine"}], "rules": rules("cert.b.test", "/", "evil")}),
        ),
        // A check that sends b's clients' requests to a's host, past a's checks.
        b.ingress(
            "check",
            &class,
            json!({"nginx.ingress.kubernetes.io/auth-url": "http://shop.a.test/admin$request_uri",
                   "nginx.ingress.kubernetes.io/auth-method": "DELETE"}),
            json!({"rules": rules("check.b.test", "/", "evil")}),
        ),
        // The old Ingress, edited to name a's host: its age does not make it the owner.
        b.ingress(
            "old",
            &class,
            json!({}),
            json!({"rules": [rules("own.b.test", "/", "evil")[0].clone(), rules("shop.a.test", "/", "evil")[0].clone()]}),
        ),
    ];
    for attack in &attacks {
        b.apply(attack).unwrap();
    }
    for (name, reason) in [
        ("paths", "HostOwnedByOtherNamespace"),
        ("cert", "HostOwnedByOtherNamespace"),
        ("old", "HostOwnedByOtherNamespace"),
        ("check", "AuthURLNotPermitted"),
    ] {
        let told = eventually(Duration::from_secs(20), || async { b.describe(name).contains(reason) }).await;
        assert!(told, "{name}: {}\n{}", b.describe(name), c.proc.log());
    }
    let described = b.describe("paths");
    assert!(described.contains(&format!("belongs to namespace {}", a.scope.ns)), "{described}");

    // What a's clients see: a's backend on every path, twenty times (a canary of weight
    // 100 would take each), and a's certificate.
    for i in 0..20 {
        for path in ["/", "/admin"] {
            let seen = shop_get(path).await.unwrap();
            assert_eq!((seen.status, seen.echo_name().as_str()), (200, "a-web"), "request {i} {path}");
            assert_eq!(seen.peer_cert, Some(a_cert.leaf_der()), "a's certificate, not b's");
        }
    }
    let redirected = http_get(c.http, "shop.a.test", "/").await.unwrap();
    assert_eq!(redirected.status, 308, "a's TLS host redirects to HTTPS, whatever b's rule without TLS");
    // b's own hosts are b's; its check to a's host answers 503 and sends nothing.
    assert_eq!(http_get(c.http, "own.b.test", "/").await.unwrap().echo_name(), "b-evil");
    let checked = http_get(c.http, "check.b.test", "/users/1").await.unwrap();
    assert_eq!((checked.status, checked.echo_name().as_str()), (503, ""), "{}", checked.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_namespace_that_served_a_host_keeps_it() {
    let env = Env::from_env().unwrap();
    let a = Tenant::new("keep-a").await;
    let b = Tenant::new("keep-b").await;
    let class = a.scope.class.clone();
    let (_aw, a_web) = backend(&env, "a-web").await.unwrap();
    let (_be, b_evil) = backend(&env, "b-evil").await.unwrap();
    a.scope.service("web", a_web).await.unwrap();
    b.scope.service("evil", b_evil).await.unwrap();
    b.apply(&b.ingress("old", &class, json!({}), json!({"rules": rules("own.b.test", "/", "evil")}))).unwrap();
    clock_passes(&a, &b, "old").await;
    a.apply(&a.ingress("shop", &class, json!({}), json!({"rules": rules("shop.a.test", "/", "web")}))).unwrap();
    let mut first = Controller::start(&env, &a.scope, "keep-1", &[]).await.unwrap();
    let http = first.http;
    let a_serves = || async move {
        http_get(http, "shop.a.test", "/").await.map(|s| s.echo_name()).unwrap_or_default() == "a-web"
    };
    assert!(eventually(Duration::from_secs(20), a_serves).await, "{}", first.proc.log());
    // The leader records who serves each host, in its own namespace.
    let record = format!("lease-{class}-host-owners");
    let line = format!("shop.a.test {}", a.scope.ns);
    let recorded = eventually(Duration::from_secs(20), || async {
        let got = kubectl(&["get", "configmap", &record, "-n", "wharf-system", "-o", "jsonpath={.data.owners}"], None);
        got.is_ok_and(|text| text.lines().any(|l| l == line))
    })
    .await;
    assert!(recorded, "{}", first.proc.log());
    first.proc.kill();

    // While no replica runs, b edits its older Ingress to name a's host.
    let both =
        json!({"rules": [rules("own.b.test", "/", "evil")[0].clone(), rules("shop.a.test", "/", "evil")[0].clone()]});
    b.apply(&b.ingress("old", &class, json!({}), both)).unwrap();
    let second = Controller::start(&env, &a.scope, "keep-2", &[]).await.unwrap();
    let told =
        eventually(Duration::from_secs(20), || async { b.describe("old").contains("HostOwnedByOtherNamespace") }).await;
    assert!(told, "{}\n{}", b.describe("old"), second.proc.log());
    for i in 0..10 {
        let seen = http_get(second.http, "shop.a.test", "/").await.unwrap();
        assert_eq!(seen.echo_name(), "a-web", "request {i} after the restart");
    }
    assert_eq!(http_get(second.http, "own.b.test", "/").await.unwrap().echo_name(), "b-evil");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_catch_another_tenants_paths_stall_its_sign_ins_spoof_its_headers_or_route_its_host() {
    let env = Env::from_env().unwrap();
    // Routes are for tenants too: the platform adds them to `edit`, as Gateway API's
    // own CRDs do not.
    apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "wharf-e2e-routes-edit", "labels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}},
        "rules": [{"apiGroups": ["gateway.networking.k8s.io"], "resources": ["httproutes", "grpcroutes", "tlsroutes"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}],
    }))
    .unwrap();
    let a = Tenant::new("paths-a").await;
    let b = Tenant::new("paths-b").await;
    let class = a.scope.class.clone();
    let (_aw, a_web) = backend(&env, "a-web").await.unwrap();
    let (_be, b_evil) = backend(&env, "b-evil").await.unwrap();
    a.scope.service("web", a_web).await.unwrap();
    b.scope.service("evil", b_evil).await.unwrap();
    // The platform's edge Gateway, open to routes of every namespace.
    let gateway_controller = format!("{}-gateway", a.scope.controller_name);
    let edge = format!("{}/edge", a.scope.ns);
    let c = Controller::start(
        &env,
        &a.scope,
        "paths",
        &["--gateway-controller-name", &gateway_controller, "--edge-gateway", &edge, "--edge-port", "80=http"],
    )
    .await
    .unwrap();
    a.scope.gateway_class(&gateway_controller).await.unwrap();
    apply(&json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "edge", "namespace": a.scope.ns},
        "spec": {"gatewayClassName": a.scope.class, "listeners": [
            {"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}]},
    }))
    .unwrap();

    // a serves only docs.a.test/app; b has a rule for every host.
    a.apply(&a.ingress("docs", &class, json!({}), json!({"rules": rules("docs.a.test", "/app", "web")}))).unwrap();
    let hostless = json!([{"http": {"paths": [{"path": "/", "pathType": "Prefix",
        "backend": {"service": {"name": "evil", "port": {"number": 80}}}}]}}]);
    b.apply(&b.ingress("everything", &class, json!({}), json!({"rules": hostless}))).unwrap();
    let a_serves = eventually(Duration::from_secs(20), || async {
        http_get(c.http, "docs.a.test", "/app").await.map(|s| s.echo_name()).unwrap_or_default() == "a-web"
    })
    .await;
    assert!(a_serves, "{}", c.proc.log());
    let b_everywhere = eventually(Duration::from_secs(20), || async {
        http_get(c.http, "elsewhere.test", "/").await.map(|s| s.echo_name()).unwrap_or_default() == "b-evil"
    })
    .await;
    assert!(b_everywhere, "{}", c.proc.log());
    // What a does not route does not fall to b's rule, with a's cookies.
    let favicon =
        http_get_after([127, 0, 0, 1].into(), &[], c.http, "docs.a.test", "/favicon.ico", &[("cookie", "session=a")])
            .await
            .unwrap();
    assert_eq!((favicon.status, favicon.echo_name().as_str()), (404, ""), "{}", favicon.body);

    // Headers a client sends that only Wharf and proxies may set never reach a's backend.
    let spoofed =
        [("ssl_client_verify", "SUCCESS"), ("ssl-client-subject-dn", "CN=admin"), ("x-original-url", "/admin")];
    let seen = http_get_after([127, 0, 0, 1].into(), &[], c.http, "docs.a.test", "/app", &spoofed).await.unwrap();
    let headers = &seen.json()["headers"];
    for (name, _) in spoofed {
        assert!(headers.get(name).is_none(), "{name} reached the backend: {headers}");
    }

    // b's route on the edge Gateway for a's host: refused, and the route is told.
    let route = json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "takeover", "namespace": b.scope.ns},
        "spec": {"parentRefs": [{"name": "edge", "namespace": a.scope.ns}], "hostnames": ["docs.a.test"],
                 "rules": [{"backendRefs": [{"name": "evil", "port": 80}]}]},
    });
    b.apply(&route).unwrap();
    let told = eventually(Duration::from_secs(20), || async {
        b.scope
            .kubectl(&["describe", "httproute", "takeover"])
            .unwrap_or_default()
            .contains("HostOwnedByOtherNamespace")
    })
    .await;
    assert!(told, "{}\n{}", b.scope.kubectl(&["describe", "httproute", "takeover"]).unwrap_or_default(), c.proc.log());
    for i in 0..10 {
        let seen = http_get(c.http, "docs.a.test", "/app").await.unwrap();
        assert_eq!(seen.echo_name(), "a-web", "request {i}: the route took a's host");
    }

    // A bcrypt cost that would take days per sign-in is refused with the fix, not computed.
    let costly = "mallory:$2y$31$2yEnaPyh3g.hu2XKLvyMwOnwHzDcZTOjvoK3eqjGgobt0M.HhHvBW\n";
    b.apply(&json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "users", "namespace": b.scope.ns},
        "stringData": {"auth": costly}}))
        .unwrap();
    let basic =
        json!({"nginx.ingress.kubernetes.io/auth-type": "basic", "nginx.ingress.kubernetes.io/auth-secret": "users"});
    b.apply(&b.ingress("slow", &class, basic, json!({"rules": rules("slow.b.test", "/", "evil")}))).unwrap();
    let refused =
        eventually(Duration::from_secs(20), || async { b.describe("slow").contains("bcrypt cost is 31") }).await;
    assert!(refused, "{}\n{}", b.describe("slow"), c.proc.log());
    let started = std::time::Instant::now();
    let mallory = http_get_after(
        [127, 0, 0, 1].into(),
        &[],
        c.http,
        "slow.b.test",
        "/",
        &[("authorization", "Basic bWFsbG9yeTp4")],
    )
    .await
    .unwrap();
    assert_eq!(mallory.status, 401, "{}", mallory.body);
    let a_after = http_get(c.http, "docs.a.test", "/app").await.unwrap();
    assert_eq!(a_after.echo_name(), "a-web", "a's requests go on ({:?} after b's sign-in)", started.elapsed());
}
