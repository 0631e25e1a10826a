//! An Ingress whose backend pods are enrolled in the Istio ambient mesh is served over
//! HBONE with the gateway's mesh identity; one whose pods are not goes direct. The
//! backend's "ztunnel" is a Wharf HBONE inbound listener in the backend network
//! namespace, presenting the pod's service-account identity. The gateway runs with the
//! mesh flags and files the chart renders for `mesh.source: secret` (files on disk, as
//! cert-manager istio-csr or SPIRE provide them). Gateway API backends in the mesh go over
//! HBONE the same way.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::json;
use wharf_e2e::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambient_backends_are_reached_over_hbone_and_others_directly() {
    let env = Env::from_env().unwrap();
    let s = Scope::new("ambient").await.unwrap();
    let ca = TestCa::new("e2e mesh root");
    let dir = TempDir::new("e2e-mesh").unwrap();
    let write = |name: &str, leaf: &Leaf| {
        std::fs::write(dir.join(format!("{name}.crt")), &leaf.chain_pem).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), &leaf.key_pem).unwrap();
    };
    std::fs::write(dir.join("roots.pem"), &ca.root_pem).unwrap();
    write("backend", &ca.workload(&format!("spiffe://cluster.local/ns/{}/sa/backend", s.ns)));
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();

    // The ztunnel stand-in on the backend address, port 15008.
    let ztunnel = ztunnel_stand_in(&env, &dir, &p("backend.crt"), &p("backend.key"), &p("roots.pem")).await.unwrap();

    // The gateway: the chart's Secret volume, written where its flags point.
    let pod = ChartPod::render(&["examples/mesh-secret.yaml"], &[]).unwrap();
    let secret = pod.volume(&dir, "mesh-identity").unwrap();
    let gateway = ca.workload("spiffe://cluster.local/ns/wharf-system/sa/wharf");
    std::fs::write(secret.join("tls.crt"), &gateway.chain_pem).unwrap();
    std::fs::write(secret.join("tls.key"), &gateway.key_pem).unwrap();
    std::fs::write(secret.join("ca.crt"), &ca.root_pem).unwrap();
    let mesh_args = pod.mesh_args(&dir);
    assert!(mesh_args.iter().any(|a| a.starts_with("--mesh-cert=")), "{mesh_args:?}");
    let mut mesh_args: Vec<&str> = mesh_args.iter().map(String::as_str).collect();
    // An edge Gateway on the same listeners, for the HTTPRoute below.
    let gateway_controller = format!("{}-gateway", s.controller_name);
    let edge = format!("{}/edge", s.ns);
    mesh_args.extend(["--gateway-controller-name", &gateway_controller, "--edge-gateway", &edge]);
    let c = Controller::start(&env, &s, "ambient-0", &mesh_args).await.unwrap();
    let (_m, mesh_addr) = backend(&env, "in-mesh").await.unwrap();
    let (_d, direct_addr) = backend(&env, "direct").await.unwrap();
    s.pod("mesh-0", json!({"app": "mesh", "istio.io/dataplane-mode": "ambient"}), "backend").await.unwrap();
    s.pod("direct-0", json!({"app": "direct"}), "backend").await.unwrap();
    s.service_for_pod("mesh", mesh_addr, Some("mesh-0")).await.unwrap();
    s.service_for_pod("direct", direct_addr, Some("direct-0")).await.unwrap();
    s.ingress("mesh", "mesh.e2e.test", "mesh", None).await.unwrap();
    s.ingress("direct", "direct.e2e.test", "direct", None).await.unwrap();

    let http = c.http;
    let served = eventually(Duration::from_secs(10), || async move {
        http_get(http, "mesh.e2e.test", "/").await.map(|r| r.echo_name()).unwrap_or_default() == "in-mesh"
    })
    .await;
    assert!(served, "not served over HBONE; controller log:\n{}\nztunnel log:\n{}", c.proc.log(), ztunnel.log());
    let tunnels = |m: &str| {
        m.lines()
            .find(|l| l.starts_with("wharf_hbone_tunnels_total{direction=\"outbound\",result=\"ok\"}"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = tunnels(&http_get(c.admin, "a", "/metrics").await.unwrap().body);
    assert!(before >= 1, "no HBONE tunnel counted");
    // The config dump shows the endpoint's mesh identity.
    let dump = http_get(c.admin, "a", "/debug/config").await.unwrap().body;
    assert!(dump.contains(&format!("spiffe://cluster.local/ns/{}/sa/backend", s.ns)), "{dump}");

    // The other Service's pods are not enrolled: direct, no new tunnel. (Its Ingress may
    // land in a later snapshot than the first one.)
    let direct = eventually(Duration::from_secs(10), || async move {
        http_get(http, "direct.e2e.test", "/").await.map(|r| r.echo_name()).unwrap_or_default() == "direct"
    })
    .await;
    assert!(direct, "not served directly; controller log:\n{}", c.proc.log());
    for _ in 0..3 {
        assert_eq!(http_get(http, "direct.e2e.test", "/").await.unwrap().echo_name(), "direct");
    }
    assert_eq!(tunnels(&http_get(c.admin, "a", "/metrics").await.unwrap().body), before);

    // An HTTPRoute to another Service of enrolled pods: over HBONE too, a tunnel of its own.
    let (_r, route_addr) = backend(&env, "route-in-mesh").await.unwrap();
    s.pod("route-0", json!({"app": "route", "istio.io/dataplane-mode": "ambient"}), "backend").await.unwrap();
    s.service_for_pod("route", route_addr, Some("route-0")).await.unwrap();
    s.gateway_class(&gateway_controller).await.unwrap();
    s.apply::<wharf_gateway_api::gateways::Gateway>(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "edge", "namespace": s.ns},
        "spec": {"gatewayClassName": s.class, "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]},
    }))
    .await
    .unwrap();
    s.apply::<wharf_gateway_api::httproutes::HttpRoute>(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "route", "namespace": s.ns},
        "spec": {"parentRefs": [{"name": "edge"}], "hostnames": ["route.e2e.test"],
                 "rules": [{"backendRefs": [{"name": "route", "port": 80}]}]},
    }))
    .await
    .unwrap();
    let routed = eventually(Duration::from_secs(10), || async move {
        http_get(http, "route.e2e.test", "/").await.map(|r| r.echo_name()).unwrap_or_default() == "route-in-mesh"
    })
    .await;
    assert!(routed, "the HTTPRoute is not served; controller log:\n{}\nztunnel log:\n{}", c.proc.log(), ztunnel.log());
    assert!(tunnels(&http_get(c.admin, "a", "/metrics").await.unwrap().body) > before, "not over HBONE");
    // The config dump shows the route on the edge Gateway's port, and its cluster's
    // endpoint with the pod's mesh identity.
    let dump: serde_json::Value =
        serde_json::from_str(&http_get(c.admin, "a", "/debug/config").await.unwrap().body).unwrap();
    let port = dump["snapshot"]["gateway_ports"]
        .as_array()
        .and_then(|ports| ports.iter().find(|p| p["gateway"]["name"] == "edge"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(port["edge"], true, "{dump:#}");
    let cluster = format!("{}/route:80", s.ns);
    assert!(port.to_string().contains(&cluster), "{port:#}");
    let endpoints = dump["snapshot"]["clusters"][&cluster].to_string();
    assert!(endpoints.contains(&format!("spiffe://cluster.local/ns/{}/sa/backend", s.ns)), "{endpoints}");
}
