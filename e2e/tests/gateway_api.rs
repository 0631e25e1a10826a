//! Gateway API on a real API server: `wharf controller` reconciles a GatewayClass, its
//! Gateways and HTTPRoutes; what `kubectl get -o json` shows and where traffic goes follow
//! each change (a bad certificateRef fixed, a namespace a listener does not allow, a port
//! two listeners fight over, a ReferenceGrant added and removed). Listener ports are
//! unprivileged so the suite also runs as a normal user (e2e/kind.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use wharf_e2e::*;
use wharf_gateway_api::gateways::Gateway;
use wharf_gateway_api::httproutes::HttpRoute;
use wharf_gateway_api::referencegrants::ReferenceGrant;

/// Waits until `f` holds for the JSON of `kind/name`; on failure shows it and the log.
async fn until(s: &Scope, c: &Controller, kind: &str, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let ok = eventually(Duration::from_secs(15), || {
        last = s.get_json(kind, name).unwrap_or(Value::Null);
        let hit = f(&last);
        async move { hit }
    })
    .await;
    assert!(ok, "{kind}/{name}: {what}; it shows:\n{last:#}\nlog:\n{}", c.proc.log());
    last
}

fn listener<'v>(gw: &'v Value, name: &str) -> &'v Value {
    gw["status"]["listeners"].as_array().and_then(|l| l.iter().find(|l| l["name"] == name)).unwrap_or(&Value::Null)
}

fn listener_has(gw: &Value, name: &str, kind: &str, status: &str, reason: &str) -> bool {
    has_condition(&conditions(&listener(gw, name)["conditions"]), kind, status, reason)
}

/// The conditions of the parents entry for Gateway `gw` on a route.
fn parent_has(route: &Value, gw: &str, kind: &str, status: &str, reason: &str) -> bool {
    route["status"]["parents"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|p| p["parentRef"]["name"] == gw && has_condition(&conditions(&p["conditions"]), kind, status, reason))
}

async fn status_of(addr: SocketAddr, host: &str, path: &str) -> u16 {
    http_get(addr, host, path).await.map(|s| s.status).unwrap_or(0)
}

async fn start(env: &Env, s: &Scope, pool: &str) -> (Controller, String) {
    let gateway_controller = format!("{}-gateway", s.controller_name);
    let c = Controller::start(
        env,
        s,
        &format!("{}-0", s.class),
        &["--gateway-controller-name", &gateway_controller, "--gateway-addresses", pool],
    )
    .await
    .unwrap();
    s.gateway_class(&gateway_controller).await.unwrap();
    (c, gateway_controller)
}

fn route(ns: &str, name: &str, parent: Value, host: &str, service_ns: &str) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "parentRefs": [parent], "hostnames": [host],
            "rules": [{"backendRefs": [{"name": "shop", "namespace": service_ns, "port": 80}]}],
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_and_routes_go_live_and_status_says_why_not() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("gwapi").await.unwrap();
    let other = Scope::new("gwapi-other").await.unwrap();
    let (c, _) = start(&env, &s, "127.101.0.0/16").await;
    until(&s, &c, "gatewayclass", &s.class, "Accepted", |v| {
        has_condition(&conditions(&v["status"]["conditions"]), "Accepted", "True", "Accepted")
    })
    .await;

    let (_b, backend) = backend(&env, "shop").await.unwrap();
    s.service("shop", backend).await.unwrap();
    let ca = TestCa::default();
    let leaf = ca.leaf(&["shop.e2e.test"]);
    s.apply::<Gateway>(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": s.ns},
        "spec": {"gatewayClassName": s.class, "listeners": [
            {"name": "http", "port": 18080, "protocol": "HTTP"},
            {"name": "https", "port": 18443, "protocol": "HTTPS", "hostname": "shop.e2e.test",
             "tls": {"certificateRefs": [{"name": "shop-tls"}]}},
            {"name": "everyone", "port": 18081, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}},
            {"name": "plain", "port": 19090, "protocol": "HTTP"},
            {"name": "secure", "port": 19090, "protocol": "HTTPS", "tls": {"certificateRefs": [{"name": "shop-tls"}]}},
        ]},
    }))
    .await
    .unwrap();
    s.apply::<HttpRoute>(route(&s.ns, "shop", json!({"name": "gw"}), "shop.e2e.test", &s.ns)).await.unwrap();

    // The Gateway gets an address; the HTTP listener serves the route there.
    let gw = until(&s, &c, "gateway", "gw", "an address and Programmed", |v| {
        v["status"]["addresses"][0]["value"].is_string()
            && has_condition(&conditions(&v["status"]["conditions"]), "Programmed", "True", "Programmed")
            && v["status"]["listeners"].as_array().is_some_and(|l| l.len() == 5)
    })
    .await;
    let ip = gw["status"]["addresses"][0]["value"].as_str().unwrap().to_owned();
    assert!(ip.starts_with("127.101."), "{ip}");
    let at = |port: u16| -> SocketAddr { format!("{ip}:{port}").parse().unwrap() };
    let live = eventually(Duration::from_secs(10), || async {
        http_get(at(18080), "shop.e2e.test", "/").await.map(|s| s.echo_name()).unwrap_or_default() == "shop"
    })
    .await;
    assert!(live, "the route is not served at {ip}:18080; log:\n{}", c.proc.log());
    // The route may be counted in a later status write than the address.
    let gw = until(&s, &c, "gateway", "gw", "the route attached to its HTTP listener", |v| {
        listener(v, "http")["attachedRoutes"] == 1
    })
    .await;
    assert_eq!(listener(&gw, "http")["attachedRoutes"], 1);
    assert_eq!(status_of(at(18080), "other.e2e.test", "/").await, 404);
    let r =
        until(&s, &c, "httproute", "shop", "Accepted", |v| parent_has(v, "gw", "Accepted", "True", "Accepted")).await;
    assert!(parent_has(&r, "gw", "ResolvedRefs", "True", "ResolvedRefs"), "{r:#}");

    // A bad certificateRef: the listener says so and serves nothing; the fix is picked up.
    assert!(listener_has(&gw, "https", "ResolvedRefs", "False", "InvalidCertificateRef"), "{gw:#}");
    assert!(listener_has(&gw, "https", "Programmed", "False", "Invalid"));
    assert!(tokio::net::TcpStream::connect(at(18443)).await.is_err(), "no socket for a listener without certificate");
    s.tls_secret("shop-tls", &leaf.chain_pem, &leaf.key_pem).await.unwrap();
    until(&s, &c, "gateway", "gw", "the https listener resolved", |v| {
        listener_has(v, "https", "ResolvedRefs", "True", "ResolvedRefs")
            && listener_has(v, "https", "Programmed", "True", "Programmed")
    })
    .await;
    let tls = ca.client_config(&[b"h2"]);
    let served = eventually(Duration::from_secs(10), || {
        let tls = tls.clone();
        async move {
            https_get(at(18443), Some("shop.e2e.test"), tls, "shop.e2e.test", "/").await.is_ok_and(|s| s.status == 200)
        }
    })
    .await;
    assert!(served, "HTTPS not served after the Secret appeared; log:\n{}", c.proc.log());

    // Two listeners fighting over a port: both say why, neither is served.
    let gw = s.get_json("gateway", "gw").unwrap();
    for l in ["plain", "secure"] {
        assert!(listener_has(&gw, l, "Conflicted", "True", "ProtocolConflict"), "{l}: {gw:#}");
    }
    assert!(has_condition(&conditions(&gw["status"]["conditions"]), "Accepted", "True", "ListenersNotValid"));
    assert!(tokio::net::TcpStream::connect(at(19090)).await.is_err());

    // A route from a namespace the listener does not allow: not attached, not served.
    other.service("shop", backend).await.unwrap();
    other
        .apply::<HttpRoute>(route(
            &other.ns,
            "visitor",
            json!({"name": "gw", "namespace": s.ns, "sectionName": "http"}),
            "visitor.e2e.test",
            &other.ns,
        ))
        .await
        .unwrap();
    until(&other, &c, "httproute", "visitor", "NotAllowedByListeners", |v| {
        parent_has(v, "gw", "Accepted", "False", "NotAllowedByListeners")
    })
    .await;
    assert_eq!(status_of(at(18080), "visitor.e2e.test", "/").await, 404);

    // On a listener open to all namespaces, a backend in another namespace needs a grant.
    other
        .apply::<HttpRoute>(route(
            &other.ns,
            "borrower",
            json!({"name": "gw", "namespace": s.ns, "sectionName": "everyone"}),
            "borrow.e2e.test",
            &s.ns,
        ))
        .await
        .unwrap();
    until(&other, &c, "httproute", "borrower", "RefNotPermitted", |v| {
        parent_has(v, "gw", "Accepted", "True", "Accepted")
            && parent_has(v, "gw", "ResolvedRefs", "False", "RefNotPermitted")
    })
    .await;
    assert!(status_of(at(18081), "borrow.e2e.test", "/").await == 500, "a backend not granted answers 500");
    s.apply::<ReferenceGrant>(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ReferenceGrant",
        "metadata": {"name": "let-them", "namespace": s.ns},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": other.ns}],
                 "to": [{"group": "", "kind": "Service", "name": "shop"}]},
    }))
    .await
    .unwrap();
    until(&other, &c, "httproute", "borrower", "ResolvedRefs after the grant", |v| {
        parent_has(v, "gw", "ResolvedRefs", "True", "ResolvedRefs")
    })
    .await;
    let granted = eventually(Duration::from_secs(10), || async {
        http_get(at(18081), "borrow.e2e.test", "/").await.map(|s| s.echo_name()).unwrap_or_default() == "shop"
    })
    .await;
    assert!(granted, "not served after the grant; log:\n{}", c.proc.log());
    s.delete::<ReferenceGrant>("let-them").await.unwrap();
    until(&other, &c, "httproute", "borrower", "RefNotPermitted after the grant went", |v| {
        parent_has(v, "gw", "ResolvedRefs", "False", "RefNotPermitted")
    })
    .await;
    let revoked =
        eventually(Duration::from_secs(10), || async { status_of(at(18081), "borrow.e2e.test", "/").await == 500 })
            .await;
    assert!(revoked, "still served after the grant was removed");
    let gw = s.get_json("gateway", "gw").unwrap();
    assert_eq!(listener(&gw, "everyone")["attachedRoutes"], 2, "shop (no sectionName: every listener) and borrower");
    assert_eq!(listener(&gw, "http")["attachedRoutes"], 1, "the visitor did not attach");
}

/// The edge Gateway shares Wharf's own listeners with the Ingresses: for a host both
/// claim, its routes come first, what they do not take goes to the Ingress rules, and the
/// Ingress whose rule a route overrides gets an Event naming the route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_gateway_and_ingresses_share_the_edge_listeners_and_the_gateway_routes_come_first() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("gwedge").await.unwrap();
    let (_a, legacy) = backend(&env, "legacy").await.unwrap();
    let (_b, modern) = backend(&env, "modern").await.unwrap();
    s.service("legacy", legacy).await.unwrap();
    s.service("modern", modern).await.unwrap();
    let gateway_controller = format!("{}-gateway", s.controller_name);
    // The Gateway's HTTP listener port (80) is served on the controller's --http-port.
    let edge = format!("{}/edge", s.ns);
    let c = Controller::start(
        &env,
        &s,
        &format!("{}-0", s.class),
        &["--gateway-controller-name", &gateway_controller, "--edge-gateway", &edge, "--edge-port", "80=http"],
    )
    .await
    .unwrap();
    s.gateway_class(&gateway_controller).await.unwrap();
    let host = "shop.edge.e2e.test";
    s.ingress("shop", host, "legacy", None).await.unwrap();
    let ok = eventually(Duration::from_secs(10), || async {
        http_get(c.http, host, "/api").await.map(|r| r.echo_name()).unwrap_or_default() == "legacy"
    })
    .await;
    assert!(ok, "the Ingress is served; log:\n{}", c.proc.log());

    s.apply::<Gateway>(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "edge", "namespace": s.ns},
        "spec": {"gatewayClassName": s.class, "listeners": [
            {"name": "http", "port": 80, "protocol": "HTTP"},
            {"name": "other", "port": 8081, "protocol": "HTTP"},
        ]},
    }))
    .await
    .unwrap();
    let mut r = route(&s.ns, "shop-api", json!({"name": "edge", "sectionName": "http"}), host, &s.ns);
    r["spec"]["rules"][0]["matches"] = json!([{"path": {"type": "PathPrefix", "value": "/api"}}]);
    r["spec"]["rules"][0]["backendRefs"][0]["name"] = json!("modern");
    s.apply::<HttpRoute>(r).await.unwrap();

    let gw = until(&s, &c, "gateway", "edge", "Programmed on Wharf's listeners, the odd port refused", |g| {
        has_condition(&conditions(&g["status"]["conditions"]), "Programmed", "True", "Programmed")
            && listener_has(g, "other", "Accepted", "False", "PortUnavailable")
            && listener(g, "http")["attachedRoutes"] == 1
    })
    .await;
    assert_eq!(gw["status"]["addresses"], json!([]), "nothing published: no --publish-* flag");
    let moved = eventually(Duration::from_secs(10), || async {
        http_get(c.http, host, "/api/orders").await.map(|r| r.echo_name()).unwrap_or_default() == "modern"
    })
    .await;
    assert!(moved, "the route takes /api on the same listener; log:\n{}", c.proc.log());
    let rest = http_get(c.http, host, "/about").await.map(|r| r.echo_name()).unwrap_or_default();
    assert_eq!(rest, "legacy", "what no route takes stays with the Ingress");

    // The Ingress rule for / is not taken whole (only /api is): no Event. A route for /
    // takes it whole: the Ingress is told.
    let mut all = route(&s.ns, "shop-all", json!({"name": "edge", "sectionName": "http"}), host, &s.ns);
    all["spec"]["rules"][0]["backendRefs"][0]["name"] = json!("modern");
    s.apply::<HttpRoute>(all).await.unwrap();
    let described = eventually(Duration::from_secs(10), || async {
        s.kubectl(&["describe", "ingress", "shop"]).unwrap_or_default().contains("OverriddenByGatewayRoute")
    })
    .await;
    let text = s.kubectl(&["describe", "ingress", "shop"]).unwrap_or_default();
    assert!(described, "no OverriddenByGatewayRoute Event:\n{text}\nlog:\n{}", c.proc.log());
    assert!(text.contains(&format!("HTTPRoute {}/shop-all", s.ns)), "{text}");
    let all_modern = eventually(Duration::from_secs(10), || async {
        http_get(c.http, host, "/about").await.map(|r| r.echo_name()).unwrap_or_default() == "modern"
    })
    .await;
    assert!(all_modern, "log:\n{}", c.proc.log());

    // The route gone, the Ingress serves again.
    s.delete::<HttpRoute>("shop-all").await.unwrap();
    let back = eventually(Duration::from_secs(10), || async {
        http_get(c.http, host, "/about").await.map(|r| r.echo_name()).unwrap_or_default() == "legacy"
    })
    .await;
    assert!(back, "log:\n{}", c.proc.log());
}
