use serde_json::{json, Value};

use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};

use super::*;
use wharf_model::{Action, PathMatch, PathRewrite, TcpRoute, UrlRewrite};

pub(super) fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

pub(super) fn class(name: &str, controller: &str, default: bool) -> IngressClass {
    let ann = if default { json!({"ingressclass.kubernetes.io/is-default-class": "true"}) } else { json!({}) };
    obj(json!({"metadata": {"name": name, "annotations": ann}, "spec": {"controller": controller}}))
}

/// An Ingress created at minute `age` with the given spec and annotations.
pub(super) fn ingress(name: &str, age: u32, annotations: Value, spec: Value) -> Ingress {
    obj(json!({
        "metadata": {"name": name, "namespace": "web", "annotations": annotations,
                      "creationTimestamp": format!("2026-01-01T00:{age:02}:00Z")},
        "spec": spec,
    }))
}

pub(super) fn rule(host: Option<&str>, paths: Value) -> Value {
    match host {
        Some(h) => json!({"host": h, "http": {"paths": paths}}),
        None => json!({"http": {"paths": paths}}),
    }
}

pub(super) fn path(p: &str, ty: &str, svc: &str, port: Value) -> Value {
    json!({"path": p, "pathType": ty, "backend": {"service": {"name": svc, "port": port}}})
}

pub(super) fn service(name: &str, ports: Value) -> Service {
    obj(json!({"metadata": {"name": name, "namespace": "web"}, "spec": {"ports": ports}}))
}

pub(super) fn slice(svc: &str, port_name: &str, port: u16, endpoints: Value) -> EndpointSlice {
    obj(json!({
        "metadata": {"name": format!("{svc}-x"), "namespace": "web", "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "ports": [{"name": port_name, "port": port}],
        "endpoints": endpoints,
    }))
}

pub(super) fn tls_secret(name: &str, hosts: &[&str]) -> Secret {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let params = rcgen::CertificateParams::new(hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>()).unwrap();
    let cert = params.self_signed(&key).unwrap();
    secret(name, &cert.pem(), &key.serialize_pem())
}

pub(super) fn secret(name: &str, crt: &str, key: &str) -> Secret {
    obj(json!({
        "metadata": {"name": name, "namespace": "web"}, "type": "kubernetes.io/tls",
        "data": {"tls.crt": b64(crt), "tls.key": b64(key)},
    }))
}

fn b64(s: &str) -> String {
    // The JSON form of k8s ByteString is base64; round-trip through it.
    serde_json::to_value(k8s_openapi::ByteString(s.as_bytes().to_vec())).unwrap().as_str().unwrap().to_owned()
}

fn opts() -> Options {
    Options { now: 1_800_000_000, ..Options::default() }
}

/// A world with our class, one Service `app` (port 80 "http" -> 8080, two ready endpoints).
fn world(ingresses: Vec<Ingress>) -> World {
    World {
        ingress_classes: vec![
            class("wharf", "wharf.dev/ingress-controller", false),
            class("nginx", "k8s.io/ingress-nginx", true),
        ]
        .into(),
        ingresses: ingresses.into(),
        secrets: Default::default(),
        services: vec![
            service("app", json!([{"name": "http", "port": 80}])),
            service("h2", json!([{"port": 81, "appProtocol": "kubernetes.io/h2c"}])),
        ]
        .into(),
        endpoint_slices: vec![slice(
            "app",
            "http",
            8080,
            json!([
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"]},
            ]),
        )]
        .into(),
        ..Default::default()
    }
}

fn simple(name: &str, age: u32, host: &str, p: &str) -> Ingress {
    ingress(
        name,
        age,
        json!({}),
        json!({"ingressClassName": "wharf", "rules": [rule(Some(host), json!([path(p, "Prefix", "app", json!({"number": 80}))]))]}),
    )
}

fn reasons(t: &Translation) -> Vec<(&str, &str)> {
    t.diagnostics.iter().map(|d| (d.object.name.as_str(), d.reason.as_str())).collect()
}

#[test]
fn class_selection() {
    let none = json!({"rules": [rule(Some("a.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]});
    let with_class = |c: &str| {
        let mut s = none.clone();
        s["ingressClassName"] = json!(c);
        s
    };
    let cases = [
        (ingress("by-name", 0, json!({}), with_class("wharf")), true),
        (ingress("other-class", 0, json!({}), with_class("nginx")), false),
        (ingress("unknown-class", 0, json!({}), with_class("missing")), false),
        (ingress("legacy", 0, json!({"kubernetes.io/ingress.class": "wharf"}), none.clone()), true),
        (ingress("legacy-other", 0, json!({"kubernetes.io/ingress.class": "nginx"}), none.clone()), false),
        // The default class here belongs to ingress-nginx, not us.
        (ingress("no-class", 0, json!({}), none.clone()), false),
    ];
    for (ing, want) in cases {
        let name = ing.metadata.name.clone().unwrap();
        let t = translate(&world(vec![ing]), &opts(), None);
        assert_eq!(t.ingresses.len() == 1, want, "{name}");
    }
    // Our class marked default adopts Ingresses without a class.
    let mut w = world(vec![ingress("no-class", 0, json!({}), none)]);
    w.ingress_classes = vec![class("wharf", "wharf.dev/ingress-controller", true)].into();
    assert_eq!(translate(&w, &opts(), None).ingresses.len(), 1);
}

#[test]
fn hosts_exact_wildcard_any_and_invalid() {
    let ing = ingress(
        "i",
        0,
        json!({}),
        json!({"ingressClassName": "wharf", "rules": [
            rule(Some("A.example.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))])),
            rule(Some("*.example.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))])),
            rule(None, json!([path("/", "Prefix", "app", json!({"number": 80}))])),
            rule(Some("bad_host"), json!([path("/", "Prefix", "app", json!({"number": 80}))])),
        ]}),
    );
    let t = translate(&world(vec![ing]), &opts(), None);
    let hosts: Vec<String> = t.snapshot.virtual_hosts.iter().map(|v| v.host.to_string()).collect();
    assert_eq!(hosts, ["a.example.com", "*.example.com", "*"]);
    assert_eq!(reasons(&t), [("i", "InvalidHost")]);
}

#[test]
fn paths_ordered_by_kubernetes_precedence() {
    let ing = ingress(
        "i",
        0,
        json!({}),
        json!({"ingressClassName": "wharf", "rules": [rule(Some("a.com"), json!([
            path("/", "Prefix", "app", json!({"number": 80})),
            path("/foo", "Prefix", "app", json!({"number": 80})),
            path("/foo", "Exact", "app", json!({"number": 80})),
            path("/foo/bar/", "ImplementationSpecific", "app", json!({"number": 80})),
            path("nope", "Prefix", "app", json!({"number": 80})),
            path("/x", "Regex", "app", json!({"number": 80})),
        ]))]}),
    );
    let t = translate(&world(vec![ing]), &opts(), None);
    let got: Vec<String> =
        t.snapshot.virtual_hosts.first().unwrap().routes.iter().map(|r| format!("{:?}", r.matches.path)).collect();
    // Exact paths first (Gateway API's order); for the requests both can match, the same
    // as Kubernetes' longest-first, since a matching prefix is never longer than the path.
    assert_eq!(got, [r#"Exact("/foo")"#, r#"Prefix("/foo/bar")"#, r#"Prefix("/foo")"#, r#"Prefix("/")"#]);
    assert_eq!(reasons(&t), [("i", "InvalidPath"), ("i", "InvalidPathType")]);
}

#[test]
fn conflicts_oldest_wins_loser_told() {
    // Listed newest first: order of input must not matter.
    let t = translate(
        &world(vec![
            simple("newer", 5, "a.com", "/"),
            simple("older", 1, "a.com", "/"),
            simple("other-path", 9, "a.com", "/x"),
        ]),
        &opts(),
        None,
    );
    let routes = &t.snapshot.virtual_hosts.first().unwrap().routes;
    assert_eq!(routes.iter().map(|r| r.source.name.as_str()).collect::<Vec<_>>(), ["other-path", "older"]);
    assert_eq!(reasons(&t), [("newer", "HostPathConflict")]);
    assert!(t.diagnostics[0].message.contains("Ingress web/older"), "{}", t.diagnostics[0].message);
}

#[test]
fn service_ports_by_number_and_name_and_endpoints() {
    let ing = ingress(
        "i",
        0,
        json!({}),
        json!({"ingressClassName": "wharf", "rules": [rule(Some("a.com"), json!([
            path("/num", "Prefix", "app", json!({"number": 80})),
            path("/name", "Prefix", "app", json!({"name": "http"})),
            path("/badport", "Prefix", "app", json!({"number": 99})),
            path("/nosvc", "Prefix", "ghost", json!({"number": 80})),
            path("/h2", "Prefix", "h2", json!({"number": 81})),
            path("/h2name", "Prefix", "h2", json!({"name": "grpc"})),
        ]))]}),
    );
    let t = translate(&world(vec![ing]), &opts(), None);
    let routes = &t.snapshot.virtual_hosts.first().unwrap().routes;
    let cluster_of = |p: &str| routes.iter().find(|r| r.matches.path.path() == p).map(cluster);
    assert_eq!(cluster_of("/num"), Some("web/app:80"));
    assert_eq!(cluster_of("/name"), Some("web/app:80"));
    assert_eq!(cluster_of("/nosvc"), Some("web/ghost:80"), "kept, to answer 503");
    assert_eq!(cluster_of("/badport"), Some("web/app:99"));
    let app = &t.snapshot.clusters["web/app:80"];
    let addrs: Vec<String> = app.endpoints.iter().map(|e| e.addr.to_string()).collect();
    assert_eq!(addrs, ["10.0.0.1:8080", "10.0.0.2:8080"]);
    assert_eq!(t.snapshot.clusters["web/h2:81"].protocol, wharf_model::AppProtocol::H2c);
    assert!(!t.snapshot.clusters.contains_key("web/ghost:80"));
    assert_eq!(reasons(&t), [("i", "ServiceNotFound"), ("i", "ServicePortNotFound"), ("i", "ServicePortNotFound")]);
    // The message lists the ports the Service has.
    let messages: Vec<&str> = t.diagnostics.iter().map(|d| d.message.as_str()).collect();
    assert!(messages[1].contains("Service web/app has no port 99 (it has: 80 (http))"), "{}", messages[1]);
    assert!(messages[2].contains("Service web/h2 has no port grpc (it has: 81)"), "{}", messages[2]);
}

#[test]
fn not_ready_endpoints_skipped_terminating_as_fallback() {
    let mut w = world(vec![simple("i", 0, "a.com", "/")]);
    w.endpoint_slices = vec![slice(
        "app",
        "http",
        8080,
        json!([
            {"addresses": ["10.0.0.1"], "conditions": {"ready": false}},
            {"addresses": ["10.0.0.2"], "conditions": {"ready": false, "serving": true, "terminating": true}},
            // Never used: terminating but not serving; serving but neither ready nor terminating.
            {"addresses": ["10.0.0.3"], "conditions": {"ready": false, "serving": false, "terminating": true}},
            {"addresses": ["10.0.0.4"], "conditions": {"ready": false, "serving": true, "terminating": false}},
        ]),
    )]
    .into();
    let t = translate(&w, &opts(), None);
    assert_eq!(t.snapshot.clusters["web/app:80"].endpoints.len(), 1);
    assert_eq!(t.snapshot.clusters["web/app:80"].endpoints[0].addr.to_string(), "10.0.0.2:8080");
    w.endpoint_slices[0].endpoints[0].ready = Some(true);
    let t = translate(&w, &opts(), None);
    assert_eq!(t.snapshot.clusters["web/app:80"].endpoints[0].addr.to_string(), "10.0.0.1:8080");
}

#[test]
fn default_backend_oldest_wins() {
    let spec =
        json!({"ingressClassName": "wharf", "defaultBackend": {"service": {"name": "app", "port": {"number": 80}}}});
    let t = translate(
        &world(vec![ingress("b", 2, json!({}), spec.clone()), ingress("a", 1, json!({}), spec)]),
        &opts(),
        None,
    );
    assert_eq!(t.snapshot.default_backend.as_ref().map(|r| r.source.name.as_str()), Some("a"));
    assert_eq!(reasons(&t), [("b", "DefaultBackendConflict")]);
}

#[test]
fn tls_hosts_certificates_and_redirects() {
    let spec = |secret: &str| {
        json!({"ingressClassName": "wharf",
        "tls": [{"hosts": ["a.com", "*.w.com"], "secretName": secret}],
        "rules": [rule(Some("a.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))])),
                  rule(Some("x.w.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))])),
                  rule(Some("plain.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]})
    };
    let mut w = world(vec![ingress("i", 0, json!({}), spec("cert"))]);
    let source = tls_secret("cert", &["a.com", "*.w.com"]);
    let pem = |k: &str| source.data.as_ref().unwrap()[k].0.clone();
    w.secrets = vec![source.clone()].into();
    assert_eq!((w.secrets[0].get("tls.crt"), w.secrets[0].get("tls.key")), (None, None), "the PEM is not kept");
    let t = translate(&w, &opts(), None);
    assert!(t.diagnostics.is_empty(), "{:?}", t.diagnostics);
    let tls: Vec<(String, &str)> =
        t.snapshot.tls_hosts.iter().map(|h| (h.host.to_string(), h.certificate.as_str())).collect();
    assert_eq!(tls, [("a.com".into(), "web/cert"), ("*.w.com".into(), "web/cert")]);
    // The key validation parsed goes to the data plane with the certificate: the Secret's.
    let cert = &t.snapshot.certificates["web/cert"];
    use rustls::pki_types::pem::PemObject as _;
    let leaf = rustls::pki_types::CertificateDer::pem_slice_iter(&pem("tls.crt")).next().unwrap().unwrap();
    assert_eq!(cert.key.cert[0], leaf);
    assert_eq!(cert.sha256, wharf_model::Certificate::digest(&pem("tls.crt"), &pem("tls.key")));
    // Each host holds its routes and no spare room (10,000 hosts of one route each).
    assert!(t.snapshot.virtual_hosts.iter().all(|v| v.routes.capacity() == v.routes.len()));
    let redirect: Vec<(String, bool)> =
        t.snapshot.virtual_hosts.iter().map(|v| (v.host.to_string(), v.routes[0].https_redirect)).collect();
    assert_eq!(redirect, [("a.com".into(), true), ("plain.com".into(), false), ("x.w.com".into(), true)]);

    // Opting out of the redirect.
    let mut w2 = w.clone();
    w2.ingresses =
        vec![ingress("i", 0, json!({"nginx.ingress.kubernetes.io/ssl-redirect": "false"}), spec("cert"))].into();
    let t2 = translate(&w2, &opts(), None);
    assert!(t2.snapshot.virtual_hosts.iter().all(|v| !v.routes[0].https_redirect));

    // The Secret turns bad: the last good certificate keeps serving, and the user is told.
    let mut bad = w.clone();
    bad.secrets = vec![secret("cert", "not a cert", "nor a key")].into();
    let t3 = translate(&bad, &opts(), Some(&t.snapshot));
    assert_eq!(t3.snapshot.certificates["web/cert"], t.snapshot.certificates["web/cert"]);
    assert_eq!(reasons(&t3), [("i", "BadCertificatePEM")]);
    assert!(t3.diagnostics[0].message.contains("last good certificate"), "{}", t3.diagnostics[0].message);
    // Without a previous snapshot the hosts fall back to the default certificate.
    let t4 = translate(&bad, &opts(), None);
    assert!(t4.snapshot.tls_hosts.is_empty());

    // Key from another certificate.
    let other = tls_secret("other", &["a.com"]);
    let mut mismatch = w.clone();
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
    let (crt, key) = (text(&pem("tls.crt")), text(other.data.as_ref().unwrap()["tls.key"].0.as_slice()));
    mismatch.secrets[0] = secret("cert", &crt, &key).into();
    assert_eq!(reasons(&translate(&mismatch, &opts(), None)), [("i", "KeyMismatch")]);

    // A Secret of another type, without tls.crt or tls.key: said as such.
    for (missing, data) in [("tls.crt", json!({"password": b64("x")})), ("tls.key", json!({"tls.crt": b64("x")}))] {
        let mut opaque = w.clone();
        opaque.secrets = vec![obj::<Secret>(
            json!({"metadata": {"name": "cert", "namespace": "web"}, "type": "Opaque", "data": data}),
        )]
        .into();
        let t = translate(&opaque, &opts(), None);
        assert_eq!(reasons(&t), [("i", "SecretNotTLS")]);
        let m = &t.diagnostics[0].message;
        assert!(
            m.contains(&format!("has no {missing} (its type is Opaque)")) && m.contains("kubectl create secret tls"),
            "{m}"
        );
    }
}

#[test]
fn tls_secret_errors_missing_cross_namespace_and_mismatch() {
    let spec = |secret: &str, host: &str| json!({"ingressClassName": "wharf", "tls": [{"hosts": [host], "secretName": secret}]});
    let mut w = world(vec![
        ingress("missing", 0, json!({}), spec("nope", "a.com")),
        ingress("cross", 1, json!({}), spec("other-ns/cert", "b.com")),
        ingress("uncovered", 2, json!({}), spec("cert", "c.com")),
        ingress("conflict", 3, json!({}), spec("cert2", "d.com")),
        ingress("owner", 0, json!({}), spec("cert", "d.com")),
    ]);
    w.secrets = vec![tls_secret("cert", &["d.com"]), tls_secret("cert2", &["d.com"])].into();
    let t = translate(&w, &opts(), None);
    assert_eq!(
        reasons(&t),
        [
            ("conflict", "TLSHostConflict"),
            ("cross", "SecretInOtherNamespace"),
            ("missing", "SecretNotFound"),
            ("uncovered", "CertificateHostMismatch")
        ]
    );
    let hosts: Vec<(String, &str)> =
        t.snapshot.tls_hosts.iter().map(|h| (h.host.to_string(), h.certificate.as_str())).collect();
    assert_eq!(hosts, [("c.com".into(), "web/cert"), ("d.com".into(), "web/cert")]);
}

#[test]
fn expired_certificate_is_refused() {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["a.com".to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let cert = params.self_signed(&key).unwrap();
    let mut w = world(vec![ingress(
        "i",
        0,
        json!({}),
        json!({"ingressClassName": "wharf", "tls": [{"hosts": ["a.com"], "secretName": "old"}]}),
    )]);
    w.secrets = vec![secret("old", &cert.pem(), &key.serialize_pem())].into();
    let t = translate(&w, &opts(), None);
    assert_eq!(reasons(&t), [("i", "CertificateExpired")]);
    assert!(t.snapshot.certificates.is_empty());
}

#[test]
fn passthrough_annotation_and_auto_passthrough() {
    let ing = ingress(
        "pt",
        0,
        json!({"wharf.dev/ssl-passthrough": "true"}),
        json!({"ingressClassName": "wharf", "rules": [
            rule(Some("db.example.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))])),
        ]}),
    );
    let bad = ingress(
        "bad-ann",
        1,
        json!({"nginx.ingress.kubernetes.io/ssl-passthrough": "yes"}),
        json!({"ingressClassName": "wharf"}),
    );
    let t = translate(&world(vec![ing, bad]), &Options { auto_passthrough: true, ..opts() }, None);
    let pt: Vec<(String, &str)> =
        t.snapshot.passthrough.iter().map(|p| (p.host.to_string(), p.backends[0].cluster.as_str())).collect();
    assert!(pt.contains(&("db.example.com".into(), "web/app:80")), "{pt:?}");
    assert!(pt.contains(&("outbound_.80_._.app.web.svc.cluster.local".into(), "web/app:80")), "{pt:?}");
    assert!(t.snapshot.virtual_hosts.is_empty(), "passthrough hosts get no HTTP routes");
    assert_eq!(reasons(&t), [("bad-ann", "InvalidAnnotation")]);
}

#[test]
fn tcp_services_and_default_certificate() {
    let mut w = world(vec![]);
    w.secrets = vec![tls_secret("fallback", &["fallback.local"])].into();
    let o = Options {
        tcp_services: vec![TcpService {
            listen_port: 31400,
            namespace: "web".into(),
            service: "app".into(),
            port: ServicePortRef::Name("http".into()),
        }],
        default_certificate: Some(("web".into(), "fallback".into())),
        ..opts()
    };
    let t = translate(&w, &o, None);
    assert_eq!(t.snapshot.tcp_routes, [TcpRoute { port: 31400, cluster: "web/app:80".into() }]);
    assert_eq!(t.snapshot.default_certificate.as_deref(), Some("web/fallback"));
}

#[test]
fn ambient_endpoints_are_reached_over_hbone_with_the_pod_identity() {
    let mut w = world(vec![simple("i", 0, "a.com", "/")]);
    let ep =
        |ip: &str, pod: &str| json!({"addresses": [ip], "targetRef": {"kind": "Pod", "namespace": "web", "name": pod}});
    w.endpoint_slices = vec![slice(
        "app",
        "http",
        8080,
        json!([ep("10.0.0.1", "in-ns"), ep("10.0.0.2", "opted-out"), ep("10.0.0.3", "no-pod")]),
    )]
    .into();
    let pod = |name: &str, labels: Value, sa: Option<&str>| -> Pod {
        obj(
            json!({"metadata": {"name": name, "namespace": "web", "labels": labels}, "spec": {"containers": [], "serviceAccountName": sa}}),
        )
    };
    w.pods = vec![
        pod("in-ns", json!({}), Some("frontend")),
        pod("opted-out", json!({"istio.io/dataplane-mode": "none"}), None),
    ]
    .into();
    let t = translate(&w, &opts(), None);
    let eps = &t.snapshot.clusters["web/app:80"].endpoints;
    assert!(eps.iter().all(|e| e.hbone.is_none()), "namespace not enrolled yet: direct");

    w.namespaces = vec![obj::<k8s_openapi::api::core::v1::Namespace>(
        json!({"metadata": {"name": "web", "labels": {"istio.io/dataplane-mode": "ambient"}}}),
    )]
    .into();
    let t = translate(&w, &Options { trust_domain: "mesh.example".into(), ..opts() }, None);
    let eps = &t.snapshot.clusters["web/app:80"].endpoints;
    let h = eps[0].hbone.as_ref().expect("enrolled pod goes over HBONE");
    assert_eq!(h.identity.to_string(), "spiffe://mesh.example/ns/web/sa/frontend");
    assert_eq!(h.dial.to_string(), "10.0.0.1:15008");
    assert_eq!(h.authority, "10.0.0.1:8080");
    assert!(eps[1].hbone.is_none(), "pod opted out with istio.io/dataplane-mode=none");
    assert!(eps[2].hbone.is_none(), "unknown pod: direct");

    // A pod enrolled by its own label, in a namespace that is not; default service account.
    w.namespaces = Default::default();
    w.pods = vec![pod("in-ns", json!({"istio.io/dataplane-mode": "ambient"}), None)].into();
    let t = translate(&w, &opts(), None);
    let h = t.snapshot.clusters["web/app:80"].endpoints[0].hbone.clone().unwrap();
    assert_eq!(h.identity.to_string(), "spiffe://cluster.local/ns/web/sa/default");
}

#[test]
fn services_using_a_waypoint_are_reached_through_it_with_the_service_authority() {
    let mut w = world(vec![simple("i", 0, "a.com", "/")]);
    w.services = vec![
        obj::<Service>(json!({"metadata": {"name": "app", "namespace": "web", "labels": {"istio.io/use-waypoint": "wp"}},
                   "spec": {"clusterIP": "10.96.0.20", "ports": [{"name": "http", "port": 80}]}})),
        obj(
            json!({"metadata": {"name": "wp", "namespace": "web"}, "spec": {"ports": [{"name": "mesh", "port": 15008}]}}),
        ),
    ].into();
    w.endpoint_slices.push(obj::<EndpointSlice>(json!({
        "metadata": {"name": "wp-1", "namespace": "web", "labels": {"kubernetes.io/service-name": "wp"}},
        "addressType": "IPv4",
        "ports": [{"name": "mesh", "port": 15008}],
        "endpoints": [
            {"addresses": ["10.1.0.5"], "targetRef": {"kind": "Pod", "namespace": "web", "name": "wp-0"}},
            // Not ready: not dialed.
            {"addresses": ["10.1.0.6"], "conditions": {"ready": false}, "targetRef": {"kind": "Pod", "namespace": "web", "name": "wp-1"}},
            // Another namespace's Pod in the waypoint's slice: never dialed, and told.
            {"addresses": ["10.1.0.7"], "targetRef": {"kind": "Pod", "namespace": "attacker", "name": "tap"}},
        ],
    })));
    w.pods = vec![obj::<Pod>(
        json!({"metadata": {"name": "wp-0", "namespace": "web"}, "spec": {"containers": [], "serviceAccountName": "wp-sa"}}),
    )].into();
    let t = translate(&w, &opts(), None);
    let eps = &t.snapshot.clusters["web/app:80"].endpoints;
    assert_eq!(eps.len(), 1, "{eps:?}");
    let h = eps[0].hbone.as_ref().unwrap();
    assert_eq!(h.dial.to_string(), "10.1.0.5:15008");
    assert_eq!(h.authority, "10.96.0.20:80");
    assert_eq!(h.identity.to_string(), "spiffe://cluster.local/ns/web/sa/wp-sa");
    let refused: Vec<&str> =
        t.diagnostics.iter().filter(|d| d.reason == "EndpointRefused").map(|d| d.message.as_str()).collect();
    assert!(refused.iter().any(|m| m.contains("10.1.0.7") && m.contains("attacker/tap")), "{refused:?}");

    // The namespace label works too; "none" on the Service opts out.
    w.services[0].labels = Default::default();
    w.namespaces = vec![obj::<k8s_openapi::api::core::v1::Namespace>(
        json!({"metadata": {"name": "web", "labels": {"istio.io/use-waypoint": "wp"}}}),
    )]
    .into();
    assert!(translate(&w, &opts(), None).snapshot.clusters["web/app:80"].endpoints[0].hbone.is_some());
    w.services[0].labels = [("istio.io/use-waypoint", "none")].into_iter().collect();
    let t = translate(&w, &opts(), None);
    assert!(t.snapshot.clusters["web/app:80"].endpoints.iter().all(|e| e.hbone.is_none()));
}

#[test]
fn body_size_annotation_sets_each_route_limit() {
    let spec = |host: &str| {
        json!({"ingressClassName": "wharf", "defaultBackend": {"service": {"name": "app", "port": {"number": 80}}}, "rules": [
            rule(Some(host), json!([path("/", "Prefix", "app", json!({"number": 80}))])),
        ]})
    };
    let limited = ingress("limited", 0, json!({"nginx.ingress.kubernetes.io/proxy-body-size": "8m"}), spec("a.com"));
    let ours = ingress(
        "ours",
        1,
        json!({"wharf.dev/proxy-body-size": "0", "nginx.ingress.kubernetes.io/proxy-body-size": "1k"}),
        spec("b.com"),
    );
    let bad = ingress("bad", 2, json!({"wharf.dev/proxy-body-size": "lots"}), spec("c.com"));
    let t = translate(&world(vec![limited, ours, bad]), &opts(), None);
    let limits: Vec<(String, Option<u64>)> = t
        .snapshot
        .virtual_hosts
        .iter()
        .flat_map(|v| v.routes.iter().map(move |r| (v.host.to_string(), r.max_body_bytes)))
        .collect();
    assert_eq!(
        limits,
        [("a.com".into(), Some(8 << 20)), ("b.com".into(), Some(0)), ("c.com".into(), None)],
        "the wharf.dev name wins over the nginx one; 0 is unlimited; a bad value is ignored"
    );
    assert_eq!(
        t.snapshot.default_backend.as_ref().and_then(|r| r.max_body_bytes),
        Some(8 << 20),
        "the oldest sets the default backend"
    );
    assert!(reasons(&t).contains(&("bad", "InvalidAnnotation")), "{:?}", reasons(&t));
}

#[test]
fn an_empty_tls_host_list_covers_the_rules_and_a_wildcard_rule_redirects_only_under_its_own_wildcard() {
    let route = || json!([path("/", "Prefix", "app", json!({"number": 80}))]);
    let covered = json!({"ingressClassName": "wharf", "tls": [{"hosts": [], "secretName": "cert"}],
        "rules": [rule(Some("a.com"), route()), rule(Some("*.w.com"), route())]});
    let narrower = json!({"ingressClassName": "wharf", "tls": [{"hosts": ["x.v.com"], "secretName": "cert"}],
        "rules": [rule(Some("*.v.com"), route())]});
    let mut w = world(vec![ingress("covered", 0, json!({}), covered), ingress("narrower", 1, json!({}), narrower)]);
    w.secrets = vec![tls_secret("cert", &["a.com", "*.w.com", "x.v.com"])].into();
    let t = translate(&w, &opts(), None);
    assert!(t.diagnostics.is_empty(), "{:?}", t.diagnostics);
    let tls: Vec<String> = t.snapshot.tls_hosts.iter().map(|h| h.host.to_string()).collect();
    assert_eq!(tls, ["a.com", "x.v.com", "*.w.com"]);
    let redirect: Vec<(String, bool)> =
        t.snapshot.virtual_hosts.iter().map(|v| (v.host.to_string(), v.routes[0].https_redirect)).collect();
    assert_eq!(redirect, [("a.com".into(), true), ("*.v.com".into(), false), ("*.w.com".into(), true)]);
}

#[test]
fn a_changed_secret_is_validated_again_and_an_unchanged_one_still_expires() {
    // Stored from a watch (parsed when stored) and read from a file (parsed when translated).
    for from_file in [false, true] {
        changed_secret_validated_again(|s| match from_file {
            false => s.into(),
            true => crate::stored::Secret::unparsed(s),
        });
    }
}

fn changed_secret_validated_again(store: impl Fn(Secret) -> crate::stored::Secret) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["a.com".to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2026, 1, 1);
    params.not_after = rcgen::date_time_ymd(2027, 6, 1);
    let (crt, key) = (params.self_signed(&key).unwrap().pem(), key.serialize_pem());
    let spec = json!({"ingressClassName": "wharf", "tls": [{"hosts": ["a.com"], "secretName": "cert"}]});
    let mut w = world(vec![ingress("i", 0, json!({}), spec)]);
    w.secrets = vec![store(secret("cert", &crt, &key))].into();
    let first = translate(&w, &opts(), None);
    assert!(first.diagnostics.is_empty(), "{:?}", first.diagnostics);
    let served = &first.snapshot.certificates["web/cert"];

    // Either half replaced by one that does not match the other: refused, even though
    // the previous snapshot holds a good certificate under the same id.
    let other = tls_secret("other", &["a.com"]);
    let pem = |s: &Secret, k: &str| String::from_utf8(s.data.as_ref().unwrap()[k].0.clone()).unwrap();
    for (crt, key) in [(crt.clone(), pem(&other, "tls.key")), (pem(&other, "tls.crt"), key.clone())] {
        let mut changed = w.clone();
        changed.secrets = vec![store(secret("cert", &crt, &key))].into();
        let t = translate(&changed, &opts(), Some(&first.snapshot));
        assert_eq!(reasons(&t), [("i", "KeyMismatch")]);
        assert_eq!(&t.snapshot.certificates["web/cert"], served, "the last good certificate keeps serving");
    }

    // Unchanged: valid through its last second, expired after it.
    let at = |now| Options { now, ..opts() };
    let t = translate(&w, &at(served.not_after), Some(&first.snapshot));
    assert!(t.diagnostics.is_empty(), "{:?}", t.diagnostics);
    let again = &t.snapshot.certificates["web/cert"].key;
    assert!(std::sync::Arc::ptr_eq(again, &served.key), "an unchanged Secret is not parsed again");
    let t = translate(&w, &at(served.not_after + 1), Some(&first.snapshot));
    assert_eq!(reasons(&t), [("i", "CertificateExpired")]);
}

/// The cluster an Ingress route forwards to.
fn cluster(r: &wharf_model::Route) -> &str {
    match &r.action {
        wharf_model::Action::Forward(f) => f.backends[0].cluster.as_str(),
        other => panic!("{other:?} is not a forward"),
    }
}

fn host_routes<'t>(t: &'t Translation, host: &str) -> &'t [wharf_model::Route] {
    t.snapshot.virtual_hosts.iter().find(|v| v.host.to_string() == host).map(|v| v.routes.as_slice()).unwrap_or(&[])
}

#[test]
fn an_ingress_with_a_snippet_is_not_served_unless_snippets_are_ignored() {
    let ann = json!({"nginx.ingress.kubernetes.io/configuration-snippet": "deny all;",
                     "nginx.ingress.kubernetes.io/proxy-buffering": "on"});
    let w = world(vec![ingress(
        "snippet",
        0,
        ann,
        json!({"ingressClassName": "wharf", "rules": [
        rule(Some("a.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]}),
    )]);
    let t = translate(&w, &opts(), None);
    assert!(t.snapshot.virtual_hosts.is_empty(), "{:?}", t.snapshot.virtual_hosts);
    assert!(t.ingresses.is_empty(), "a skipped Ingress is not ours to publish an address for");
    assert_eq!(reasons(&t), [("snippet", "SnippetRefused"), ("snippet", "UnsupportedAnnotation")]);

    let ignore = Options {
        annotations: annotations::AnnotationOptions {
            snippets: annotations::SnippetPolicy::Ignore,
            ..annotations::AnnotationOptions::default()
        },
        ..opts()
    };
    let t = translate(&w, &ignore, None);
    assert_eq!(host_routes(&t, "a.com").len(), 1);
    assert_eq!(t.ingresses.len(), 1);
    assert!(reasons(&t).contains(&("snippet", "SnippetRefused")));
}

#[test]
fn source_ranges_go_on_every_route_of_the_ingress_and_the_default_backend() {
    let spec = json!({"ingressClassName": "wharf", "defaultBackend": {"service": {"name": "app", "port": {"number": 80}}},
        "rules": [rule(Some("a.com"), json!([path("/", "Prefix", "app", json!({"number": 80})),
                                             path("/x", "Exact", "app", json!({"number": 80}))]))]});
    let ann = json!({"nginx.ingress.kubernetes.io/whitelist-source-range": "10.0.0.0/8",
                     "nginx.ingress.kubernetes.io/denylist-source-range": "10.9.0.0/16"});
    let open = json!({"ingressClassName": "wharf", "rules": [
        rule(Some("b.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]});
    let t =
        translate(&world(vec![ingress("limited", 0, ann, spec), ingress("open", 1, json!({}), open)]), &opts(), None);
    let want = wharf_model::ClientFilter {
        allow: Some(vec![wharf_model::IpNet::parse("10.0.0.0/8").unwrap()]),
        deny: vec![wharf_model::IpNet::parse("10.9.0.0/16").unwrap()],
    };
    let routes = host_routes(&t, "a.com");
    assert_eq!(routes.len(), 2);
    assert!(routes.iter().all(|r| r.clients.as_deref() == Some(&want)), "{routes:?}");
    assert_eq!(t.snapshot.default_backend.as_ref().and_then(|r| r.clients.as_deref()), Some(&want));
    assert_eq!(host_routes(&t, "b.com")[0].clients, None, "another Ingress's hosts are not limited");
}

#[test]
fn fixed_redirects_answer_every_path_before_the_https_redirect() {
    let route = || {
        json!([path("/", "Prefix", "app", json!({"number": 80})), path("/a", "Prefix", "app", json!({"number": 80}))])
    };
    let spec = json!({"ingressClassName": "wharf", "tls": [{"hosts": ["a.com"], "secretName": "cert"}],
        "rules": [rule(Some("a.com"), route())]});
    let ann = json!({"nginx.ingress.kubernetes.io/permanent-redirect": "https://new.example/x",
                     "nginx.ingress.kubernetes.io/permanent-redirect-code": "308",
                     "nginx.ingress.kubernetes.io/whitelist-source-range": "10.0.0.0/8"});
    let mut w = world(vec![ingress("moved", 0, ann, spec)]);
    w.secrets = vec![tls_secret("cert", &["a.com"])].into();
    let t = translate(&w, &opts(), None);
    let routes = host_routes(&t, "a.com");
    assert_eq!(routes.len(), 2);
    for r in routes {
        let Action::Redirect(rd) = &r.action else { panic!("not a redirect: {r:?}") };
        assert_eq!((rd.location.as_deref(), rd.status), (Some("https://new.example/x"), 308));
        assert!(!r.https_redirect && r.clients.is_none(), "the redirect answers first: {r:?}");
    }
}

#[test]
fn app_root_redirects_only_the_root_of_hosts_whose_paths_cover_it() {
    let spec = json!({"ingressClassName": "wharf", "rules": [
        rule(Some("a.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))])),
        rule(Some("b.com"), json!([path("/api", "Prefix", "app", json!({"number": 80}))]))]});
    let t = translate(
        &world(vec![ingress("app", 0, json!({"nginx.ingress.kubernetes.io/app-root": "/app1"}), spec)]),
        &opts(),
        None,
    );
    let a = host_routes(&t, "a.com");
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!(a[0].matches.path, PathMatch::Exact("/".into()), "the root redirect comes first");
    let Action::Redirect(rd) = &a[0].action else { panic!("not a redirect: {:?}", a[0]) };
    assert_eq!((rd.path.clone(), rd.status), (Some(PathRewrite::Full("/app1".into())), 302));
    assert_eq!(cluster(&a[1]), "web/app:80");
    let b = host_routes(&t, "b.com");
    assert_eq!(b.len(), 1, "no path of b.com covers /: {b:?}");
}

#[test]
fn from_to_www_redirects_the_other_name_unless_it_is_served() {
    let spec = |host: &str| json!({"ingressClassName": "wharf", "rules": [rule(Some(host), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]});
    let www = json!({"nginx.ingress.kubernetes.io/from-to-www-redirect": "true"});
    let t = translate(
        &world(vec![
            ingress("bare", 0, www.clone(), spec("a.com")),
            ingress("www", 1, www.clone(), spec("www.b.com")),
            ingress("both", 2, www, spec("c.com")),
            ingress("served", 3, json!({}), spec("www.c.com")),
        ]),
        &opts(),
        None,
    );
    let redirect_to = |host: &str| match host_routes(&t, host) {
        [r] => match &r.action {
            Action::Redirect(rd) => Some((rd.host.clone(), rd.status, rd.path.clone())),
            _ => None,
        },
        _ => None,
    };
    assert_eq!(redirect_to("www.a.com"), Some((Some("a.com".into()), 308, None)));
    assert_eq!(redirect_to("b.com"), Some((Some("www.b.com".into()), 308, None)));
    assert_eq!(redirect_to("www.c.com"), None, "an Ingress serves www.c.com itself");
    assert_eq!(cluster(&host_routes(&t, "www.c.com")[0]), "web/app:80");
}

#[test]
fn a_server_alias_serves_every_route_of_its_host_unless_an_ingress_serves_the_alias() {
    let spec = |host: &str, p: &str| json!({"ingressClassName": "wharf", "rules": [rule(Some(host), json!([path(p, "Prefix", "app", json!({"number": 80}))]))]});
    let alias = json!({"nginx.ingress.kubernetes.io/server-alias": "bar.com, served.com, bad_name!"});
    let t = translate(
        &world(vec![
            ingress("app-a", 0, json!({}), spec("foo.com", "/app-a")),
            ingress("app-b", 1, alias, spec("foo.com", "/app-b")),
            ingress("served", 2, json!({}), spec("served.com", "/")),
        ]),
        &opts(),
        None,
    );
    let paths = |host: &str| -> Vec<String> {
        host_routes(&t, host).iter().map(|r| r.matches.path.path().to_owned()).collect()
    };
    assert_eq!(paths("bar.com"), ["/app-a", "/app-b"], "both Ingresses' paths of foo.com");
    assert_eq!(paths("bar.com"), paths("foo.com"));
    assert_eq!(paths("served.com"), ["/"]);
    let r = reasons(&t);
    assert!(r.contains(&("app-b", "HostPathConflict")), "{r:?}");
    assert!(r.contains(&("app-b", "InvalidAnnotation")), "{r:?}");
}

#[test]
fn rewrite_target_makes_every_path_of_its_hosts_a_leading_case_insensitive_regex() {
    let rewrite = ingress(
        "rewrite",
        0,
        json!({"nginx.ingress.kubernetes.io/rewrite-target": "/$2"}),
        json!({"ingressClassName": "wharf", "rules": [rule(Some("a.com"), json!([
            path("/something(/|$)(.*)", "ImplementationSpecific", "app", json!({"number": 80})),
            path("/bad(", "ImplementationSpecific", "app", json!({"number": 80})),
            path("/typed(.*)", "Prefix", "app", json!({"number": 80})),
        ]))]}),
    );
    // No annotation, but on the same host: its paths become regexes too (ingress-nginx).
    let plain = ingress(
        "plain",
        1,
        json!({}),
        json!({"ingressClassName": "wharf", "rules": [
            rule(Some("a.com"), json!([path("/api", "Prefix", "app", json!({"number": 80}))])),
            rule(Some("b.com"), json!([path("/api", "Prefix", "app", json!({"number": 80}))]))]}),
    );
    let t = translate(&world(vec![rewrite, plain]), &opts(), None);
    let a = host_routes(&t, "a.com");
    let shown: Vec<(String, Option<String>)> = a
        .iter()
        .map(|r| {
            let rw = match &r.action {
                Action::Forward(f) => f.rewrite.as_ref().and_then(|u| u.path.clone()).map(|p| format!("{p:?}")),
                _ => None,
            };
            (serde_json::to_value(&r.matches.path).unwrap()["value"].as_str().unwrap_or("").to_owned(), rw)
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("~* ^/something(/|$)(.*)".to_owned(), Some("Captures(\"/$2\")".to_owned())),
            ("~* ^/typed(.*)".to_owned(), Some("Captures(\"/$2\")".to_owned())),
            ("~* ^/api".to_owned(), None),
        ],
        "longest first; only the annotated Ingress rewrites; regex syntax in a Prefix path too"
    );
    assert!(a[2].matches.path.matches("/APIARY"), "prefix-open and case-insensitive, as ingress-nginx");
    assert_eq!(host_routes(&t, "b.com")[0].matches.path, PathMatch::Prefix("/api".into()), "other hosts keep prefixes");
    let invalid: Vec<&str> =
        t.diagnostics.iter().filter(|d| d.reason == "InvalidPath").map(|d| d.message.as_str()).collect();
    assert_eq!(invalid.len(), 1, "{invalid:?}");
    assert!(invalid.iter().any(|m| m.contains("/bad(")), "{invalid:?}");
}

#[test]
fn timeouts_and_backend_protocols_shape_the_forward_and_its_cluster() {
    let spec = |host: &str| json!({"ingressClassName": "wharf", "rules": [rule(Some(host), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]});
    let t = translate(
        &world(vec![
            ingress(
                "slow",
                0,
                json!({"nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
                       "nginx.ingress.kubernetes.io/proxy-send-timeout": "120",
                       "nginx.ingress.kubernetes.io/proxy-connect-timeout": "2"}),
                spec("slow.com"),
            ),
            ingress("grpc", 1, json!({"nginx.ingress.kubernetes.io/backend-protocol": "GRPC"}), spec("grpc.com")),
            ingress("https", 2, json!({"nginx.ingress.kubernetes.io/backend-protocol": "HTTPS"}), spec("https.com")),
            ingress("grpcs", 3, json!({"nginx.ingress.kubernetes.io/backend-protocol": "GRPCS"}), spec("grpcs.com")),
            ingress("plain", 4, json!({}), spec("plain.com")),
        ]),
        &opts(),
        None,
    );
    assert!(t.diagnostics.is_empty(), "{:?}", t.diagnostics);
    let forward = |host: &str| match &host_routes(&t, host)[0].action {
        Action::Forward(f) => f.clone(),
        other => panic!("{host}: {other:?}"),
    };
    let slow = forward("slow.com");
    assert_eq!(
        (slow.timeout_ms, slow.connect_timeout_ms, slow.send_timeout_ms),
        (Some(3_600_000), Some(2_000), Some(120_000))
    );
    let plain = forward("plain.com");
    assert_eq!((plain.timeout_ms, plain.connect_timeout_ms, plain.send_timeout_ms), (None, None, None));
    let cluster_of = |host: &str| forward(host).backends[0].cluster.clone();
    assert_eq!(cluster_of("plain.com"), "web/app:80");
    assert_eq!(cluster_of("grpc.com"), "web/app:80/h2c");
    assert_eq!(cluster_of("https.com"), "web/app:80/tls-unverified");
    assert_eq!(cluster_of("grpcs.com"), "web/app:80/h2c/tls-unverified");
    let c = &t.snapshot.clusters;
    assert_eq!(c["web/app:80/h2c"].protocol, wharf_model::AppProtocol::H2c);
    let https = &c["web/app:80/tls-unverified"];
    assert_eq!(https.protocol, wharf_model::AppProtocol::Http1);
    assert!(https.tls.as_ref().is_some_and(|t| t.unverified), "{https:?}");
    assert_eq!(https.endpoints, c["web/app:80"].endpoints);
    let grpcs = &c["web/app:80/h2c/tls-unverified"];
    assert!(grpcs.protocol == wharf_model::AppProtocol::H2c && grpcs.tls.as_ref().is_some_and(|t| t.unverified));
    assert!(c["web/app:80"].tls.is_none());
}

#[test]
fn a_canary_takes_requests_by_header_then_cookie_then_weight() {
    let spec = |svc: &str| {
        json!({"ingressClassName": "wharf", "rules": [rule(Some("a.com"), json!([
            path("/", "Prefix", svc, json!({"number": 80})),
            path("/api", "Prefix", svc, json!({"number": 80}))]))]})
    };
    let mut w = world(vec![
        ingress("main", 0, json!({"nginx.ingress.kubernetes.io/proxy-read-timeout": "5"}), spec("app")),
        ingress(
            "canary",
            1,
            json!({"nginx.ingress.kubernetes.io/canary": "true",
                   "nginx.ingress.kubernetes.io/canary-by-header": "X-Canary",
                   "nginx.ingress.kubernetes.io/canary-by-cookie": "canary",
                   "nginx.ingress.kubernetes.io/canary-weight": "20",
                   "nginx.ingress.kubernetes.io/proxy-read-timeout": "99"}),
            json!({"ingressClassName": "wharf", "rules": [rule(Some("a.com"), json!([
                path("/api", "Prefix", "v2", json!({"number": 80})),
                path("/none", "Prefix", "v2", json!({"number": 80}))]))]}),
        ),
        ingress(
            "second",
            2,
            json!({"nginx.ingress.kubernetes.io/canary": "true", "nginx.ingress.kubernetes.io/canary-weight": "50"}),
            json!({"ingressClassName": "wharf", "rules": [rule(Some("a.com"), json!([path("/api", "Prefix", "v2", json!({"number": 80}))]))]}),
        ),
    ]);
    w.services.push(service("v2", json!([{"name": "http", "port": 80, "targetPort": 8080}])));
    let t = translate(&w, &opts(), None);
    let routes = host_routes(&t, "a.com");
    // (path, header matches, backends and weights, source)
    type Shown = (String, Vec<String>, Vec<(String, u32)>, String);
    let shown: Vec<Shown> = routes
        .iter()
        .map(|r| {
            let Action::Forward(f) = &r.action else { panic!("{r:?}") };
            assert_eq!(f.timeout_ms, Some(5_000), "the main Ingress's settings apply: {r:?}");
            (
                r.matches.path.path().to_owned(),
                r.matches.headers.iter().map(|h| format!("{}={}", h.name, h.value)).collect(),
                f.backends.iter().map(|b| (b.cluster.clone(), b.weight)).collect(),
                r.source.name.clone(),
            )
        })
        .collect();
    let cookie = |v: &str| format!(r"cookie=(?:.*;)?\s*canary={v}\s*(?:;.*)?");
    let app = || ("web/app:80".to_owned(), 1);
    let v2 = || ("web/v2:80".to_owned(), 1);
    assert_eq!(
        shown,
        [
            ("/api".into(), vec!["x-canary=always".into()], vec![v2()], "canary".into()),
            ("/api".into(), vec!["x-canary=never".into()], vec![app()], "main".into()),
            ("/api".into(), vec![cookie("always")], vec![v2()], "canary".into()),
            ("/api".into(), vec![cookie("never")], vec![app()], "main".into()),
            ("/api".into(), vec![], vec![("web/app:80".into(), 80), ("web/v2:80".into(), 20)], "main".into()),
            ("/".into(), vec![], vec![app()], "main".into()),
        ]
    );
    assert_eq!(reasons(&t), [("canary", "CanaryWithoutMain"), ("second", "CanaryConflict")], "{:?}", t.diagnostics);
    assert_eq!(t.ingresses.len(), 3, "canaries get the address in their status too");
}

#[test]
fn upstream_vhost_and_forwarded_prefix_go_with_a_capture_rewrite() {
    let t = translate(
        &world(vec![ingress(
            "app",
            0,
            json!({"nginx.ingress.kubernetes.io/upstream-vhost": "internal.svc",
                   "nginx.ingress.kubernetes.io/x-forwarded-prefix": "/shop",
                   "nginx.ingress.kubernetes.io/rewrite-target": "/$1"}),
            json!({"ingressClassName": "wharf", "rules": [rule(Some("a.com"), json!([
                path("/shop/(.*)", "ImplementationSpecific", "app", json!({"number": 80}))]))]}),
        )]),
        &opts(),
        None,
    );
    let Action::Forward(f) = &host_routes(&t, "a.com")[0].action else { panic!("not a forward") };
    assert_eq!(
        f.rewrite.as_deref(),
        Some(&UrlRewrite { host: Some("internal.svc".into()), path: Some(PathRewrite::Captures("/$1".into())) })
    );
    assert_eq!(f.request_headers.set, [("x-forwarded-prefix".to_owned(), "/shop".to_owned())]);
}

#[test]
fn sticky_sessions_take_the_route_path_for_their_cookie_unless_set() {
    let spec = json!({"ingressClassName": "wharf", "rules": [rule(Some("a.com"), json!([
        path("/api", "Prefix", "app", json!({"number": 80})),
        path("/", "Prefix", "app", json!({"number": 80}))]))]});
    let t = translate(
        &world(vec![ingress("sticky", 0, json!({"nginx.ingress.kubernetes.io/affinity": "cookie"}), spec)]),
        &opts(),
        None,
    );
    let paths: Vec<Option<(String, String)>> = host_routes(&t, "a.com")
        .iter()
        .map(|r| match &r.action {
            Action::Forward(f) => f.affinity.as_ref().map(|a| (a.name.clone(), a.path.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(paths, [Some(("INGRESSCOOKIE".into(), "/api".into())), Some(("INGRESSCOOKIE".into(), "/".into()))]);
}

#[test]
fn cors_limits_and_the_default_backend_take_the_ingress_settings() {
    let spec = json!({"ingressClassName": "wharf", "defaultBackend": {"service": {"name": "app", "port": {"number": 80}}},
        "rules": [rule(Some("a.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]});
    let ann = json!({"nginx.ingress.kubernetes.io/enable-cors": "true",
                     "nginx.ingress.kubernetes.io/limit-rps": "5",
                     "nginx.ingress.kubernetes.io/force-ssl-redirect": "true"});
    let t = translate(&world(vec![ingress("web", 0, ann, spec)]), &opts(), None);
    let r = &host_routes(&t, "a.com")[0];
    assert_eq!(r.cors.as_ref().map(|c| c.allow_origins.clone()), Some(vec!["*".to_owned()]));
    assert_eq!(r.rate_limit.as_ref().map(|l| (l.zone.as_str(), l.per_second)), Some(("web/web", Some(5))));
    assert!(r.https_redirect);
    let d = t.snapshot.default_backend.as_ref().unwrap();
    assert!(!d.https_redirect, "the default backend answers plain HTTP, whatever the Ingress asks of its hosts");
    assert!(d.cors.is_some() && d.rate_limit.is_some());
}

#[test]
fn a_canary_by_header_alone_leaves_the_main_route_whole() {
    let spec = |svc: &str| json!({"ingressClassName": "wharf", "rules": [rule(Some("a.com"), json!([path("/", "Prefix", svc, json!({"number": 80}))]))]});
    let mut w = world(vec![
        ingress("main", 0, json!({}), spec("app")),
        ingress(
            "canary",
            1,
            json!({"nginx.ingress.kubernetes.io/canary": "true", "nginx.ingress.kubernetes.io/canary-by-header": "x-v2"}),
            spec("v2"),
        ),
    ]);
    w.services.push(service("v2", json!([{"name": "http", "port": 80, "targetPort": 8080}])));
    let t = translate(&w, &opts(), None);
    let routes = host_routes(&t, "a.com");
    let Action::Forward(base) = &routes.last().unwrap().action else { panic!("{routes:?}") };
    let backends: Vec<(&str, u32)> = base.backends.iter().map(|b| (b.cluster.as_str(), b.weight)).collect();
    assert_eq!(backends, [("web/app:80", 1)], "no weight: the canary gets no share of the rest");
}

#[test]
fn a_sticky_main_route_keeps_its_canary_reachable_by_cookie_and_a_broken_pattern_sends_to_the_main() {
    let spec = |svc: &str| json!({"ingressClassName": "wharf", "rules": [rule(Some("a.com"), json!([path("/", "Prefix", svc, json!({"number": 80}))]))]});
    let mut w = world(vec![
        ingress("main", 0, json!({"nginx.ingress.kubernetes.io/affinity": "cookie"}), spec("app")),
        ingress(
            "canary",
            1,
            json!({"nginx.ingress.kubernetes.io/canary": "true",
                   "nginx.ingress.kubernetes.io/canary-by-header": "x-v2",
                   "nginx.ingress.kubernetes.io/canary-by-header-pattern": "[][**",
                   "nginx.ingress.kubernetes.io/canary-by-cookie": "v2"}),
            spec("v2"),
        ),
    ]);
    w.services.push(service("v2", json!([{"name": "http", "port": 80, "targetPort": 8080}])));
    let t = translate(&w, &opts(), None);
    // (header matches, backends and weights, sticky)
    type Shown<'a> = (Vec<String>, Vec<(&'a str, u32)>, bool);
    let shown: Vec<Shown> = host_routes(&t, "a.com")
        .iter()
        .map(|r| {
            let Action::Forward(f) = &r.action else { panic!("{r:?}") };
            (
                r.matches.headers.iter().map(|h| format!("{}={}", h.name, h.value)).collect(),
                f.backends.iter().map(|b| (b.cluster.as_str(), b.weight)).collect(),
                f.affinity.is_some(),
            )
        })
        .collect();
    let cookie = |v: &str| format!(r"cookie=(?:.*;)?\s*v2={v}\s*(?:;.*)?");
    assert_eq!(
        shown,
        [
            // Any value of the header: the pattern cannot be matched, so the main.
            (vec!["x-v2=.*".to_owned()], vec![("web/app:80", 1)], true),
            (vec![cookie("always")], vec![("web/v2:80", 1)], true),
            (vec![cookie("never")], vec![("web/app:80", 1)], true),
            // No share by weight, but reachable by the affinity cookie.
            (vec![], vec![("web/app:80", 1), ("web/v2:80", 0)], true),
        ]
    );
    assert_eq!(reasons(&t), [("canary", "InvalidAnnotation")], "{:?}", t.diagnostics);

    // A canary no header, cookie or weight reaches is not reachable by a forged cookie;
    // one a header or a cookie reaches is.
    for (canary, reached) in [
        (json!({"nginx.ingress.kubernetes.io/canary": "true"}), false),
        (
            json!({"nginx.ingress.kubernetes.io/canary": "true", "nginx.ingress.kubernetes.io/canary-by-header": "x-v2"}),
            true,
        ),
        (
            json!({"nginx.ingress.kubernetes.io/canary": "true", "nginx.ingress.kubernetes.io/canary-by-cookie": "v2"}),
            true,
        ),
    ] {
        let mut w = world(vec![
            ingress("main", 0, json!({"nginx.ingress.kubernetes.io/affinity": "cookie"}), spec("app")),
            ingress("canary", 1, canary.clone(), spec("v2")),
        ]);
        w.services.push(service("v2", json!([{"name": "http", "port": 80, "targetPort": 8080}])));
        let t = translate(&w, &opts(), None);
        let routes = host_routes(&t, "a.com");
        let Action::Forward(f) = &routes.last().unwrap().action else { panic!("{routes:?}") };
        let backends: Vec<&str> = f.backends.iter().map(|b| b.cluster.as_str()).collect();
        let want = if reached { vec!["web/app:80", "web/v2:80"] } else { vec!["web/app:80"] };
        assert_eq!(backends, want, "{canary}");
    }

    // `legacy`: the canary's backend is not the affinity cookie's, by header or by weight.
    let legacy = json!({"nginx.ingress.kubernetes.io/canary": "true",
                        "nginx.ingress.kubernetes.io/canary-by-header": "x-v2",
                        "nginx.ingress.kubernetes.io/canary-weight": "50",
                        "nginx.ingress.kubernetes.io/affinity-canary-behavior": "legacy"});
    for (weight, header_only) in [("50", false), ("0", true)] {
        let mut legacy = legacy.clone();
        legacy["nginx.ingress.kubernetes.io/canary-weight"] = json!(weight);
        let mut w = world(vec![
            ingress("main", 0, json!({"nginx.ingress.kubernetes.io/affinity": "cookie"}), spec("app")),
            ingress("canary", 1, legacy, spec("v2")),
        ]);
        w.services.push(service("v2", json!([{"name": "http", "port": 80, "targetPort": 8080}])));
        let t = translate(&w, &opts(), None);
        let shown: Vec<Vec<(&str, bool)>> = host_routes(&t, "a.com")
            .iter()
            .map(|r| {
                let Action::Forward(f) = &r.action else { panic!("{r:?}") };
                f.backends.iter().map(|b| (b.cluster.as_str(), b.no_affinity)).collect()
            })
            .collect();
        let main =
            if header_only { vec![("web/app:80", false)] } else { vec![("web/app:80", false), ("web/v2:80", true)] };
        assert_eq!(
            shown,
            [vec![("web/v2:80", true)], vec![("web/app:80", false)], main],
            "weight {weight}: always, never, then the rest"
        );
    }
}

#[test]
fn app_root_yields_to_an_exact_root_of_an_older_ingress() {
    let exact = json!({"ingressClassName": "wharf", "rules": [rule(Some("a.com"), json!([path("/", "Exact", "app", json!({"number": 80}))]))]});
    let prefix = json!({"ingressClassName": "wharf", "rules": [rule(Some("a.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]});
    let t = translate(
        &world(vec![
            ingress("older", 0, json!({}), exact),
            ingress("app", 1, json!({"nginx.ingress.kubernetes.io/app-root": "/app1"}), prefix),
            // A third Ingress's Exact `/` conflicts with the older one, not with app-root.
            ingress(
                "third",
                2,
                json!({}),
                json!({"ingressClassName": "wharf", "rules": [rule(Some("a.com"), json!([path("/", "Exact", "app", json!({"number": 80}))]))]}),
            ),
        ]),
        &opts(),
        None,
    );
    let routes = host_routes(&t, "a.com");
    assert!(routes.iter().all(|r| matches!(r.action, Action::Forward(_))), "{routes:?}");
    assert_eq!(routes[0].source.name, "older");
    let conflict = t.diagnostics.iter().find(|d| d.object.name == "third").unwrap();
    assert!(conflict.message.contains("web/older"), "{}", conflict.message);
}

#[test]
fn basic_auth_reaches_every_route_of_its_ingress_and_its_canaries_and_fails_closed() {
    let spec = |svc: &str, paths: &[&str]| {
        let paths: Vec<Value> = paths.iter().map(|p| path(p, "Prefix", svc, json!({"number": 80}))).collect();
        json!({"ingressClassName": "wharf", "defaultBackend": {"service": {"name": svc, "port": {"number": 80}}},
               "rules": [rule(Some("a.com"), json!(paths))]})
    };
    let auth = |secret: &str| {
        json!({"nginx.ingress.kubernetes.io/auth-type": "basic", "nginx.ingress.kubernetes.io/auth-secret": secret,
               "nginx.ingress.kubernetes.io/auth-realm": "staff"})
    };
    let mut w = world(vec![
        ingress("main", 0, auth("users"), spec("app", &["/", "/api"])),
        ingress(
            "canary",
            1,
            json!({"nginx.ingress.kubernetes.io/canary": "true", "nginx.ingress.kubernetes.io/canary-by-header": "x-v2",
                   "nginx.ingress.kubernetes.io/auth-type": "basic", "nginx.ingress.kubernetes.io/auth-secret": "nobody"}),
            json!({"ingressClassName": "wharf", "rules": [rule(Some("a.com"), json!([path("/api", "Prefix", "app", json!({"number": 80}))]))]}),
        ),
        ingress(
            "open",
            2,
            json!({}),
            json!({"ingressClassName": "wharf", "rules": [rule(Some("b.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]}),
        ),
        ingress(
            "locked",
            3,
            auth("missing"),
            json!({"ingressClassName": "wharf", "rules": [rule(Some("c.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]}),
        ),
    ]);
    w.secrets.push(obj::<Secret>(json!({
        "metadata": {"name": "users", "namespace": "web"}, "type": "Opaque",
        "data": {"auth": b64("alice:{PLAIN}a\n")},
    })));
    let t = translate(&w, &opts(), None);
    let users = |auth: &Option<Box<wharf_model::Auth>>| match auth.as_deref() {
        Some(wharf_model::Auth::Basic(b)) => format!("{}:{}", b.realm, b.users.len()),
        Some(wharf_model::Auth::Unavailable(why)) => format!("503 {why}"),
        Some(wharf_model::Auth::External(e)) => format!("external {}", e.url.as_str()),
        None => "open".to_owned(),
    };
    let seen: Vec<(String, String, String)> = host_routes(&t, "a.com")
        .iter()
        .map(|r| (r.matches.path.path().to_owned(), r.source.name.clone(), users(&r.auth)))
        .collect();
    // The canary's own auth annotations do not apply; the main Ingress's do.
    assert_eq!(
        seen,
        [
            ("/api".into(), "canary".into(), "staff:1".into()),
            ("/api".into(), "main".into(), "staff:1".into()),
            ("/api".into(), "main".into(), "staff:1".into()),
            ("/".into(), "main".into(), "staff:1".into()),
        ]
    );
    assert_eq!(users(&t.snapshot.default_backend.as_ref().unwrap().auth), "staff:1", "the default backend too");
    assert_eq!(users(&host_routes(&t, "b.com")[0].auth), "open");
    assert_eq!(users(&host_routes(&t, "c.com")[0].auth), "503 auth-secret web/missing does not exist");
    assert_eq!(reasons(&t), [("locked", "AuthSecretInvalid")], "{:?}", t.diagnostics);
}

#[test]
fn external_auth_checks_go_to_the_service_their_url_names_or_through_this_gateway() {
    let on = |name: &str, age: u32, host: &str, url: &str| {
        ingress(
            name,
            age,
            json!({"nginx.ingress.kubernetes.io/auth-url": url,
                   "nginx.ingress.kubernetes.io/auth-response-headers": "X-User"}),
            json!({"ingressClassName": "wharf", "rules": [rule(Some(host), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]}),
        )
    };
    let mut w = world(vec![
        on("svc", 0, "a.com", "http://sso.auth.svc.cluster.local:4180/oauth2/auth"),
        on("short", 1, "b.com", "https://sso.auth.svc:4180/oauth2/auth"),
        on("self", 2, "c.com", "https://$host/oauth2/auth"),
        on("served", 3, "d.com", "https://a.com/oauth2/auth"),
        on("elsewhere", 4, "e.com", "https://sso.example.net/check"),
        on("missing", 5, "f.com", "http://nope.auth.svc/check"),
        // Not Service names: one label too many or too few.
        on("deep", 6, "g.com", "http://sso.auth.x.svc/check"),
        on("no-name", 7, "h.com", "http://.auth.svc/check"),
        on("no-namespace", 8, "i.com", "http://sso..svc/check"),
    ]);
    // A canary's own auth-url does not apply (nor is it checked): the main Ingress's does.
    let mut shadow = on("shadow", 9, "a.com", "http://nowhere.example/");
    shadow.metadata.annotations.get_or_insert_with(Default::default).extend([
        ("nginx.ingress.kubernetes.io/canary".to_owned(), "true".to_owned()),
        ("nginx.ingress.kubernetes.io/canary-by-header".to_owned(), "x-v2".to_owned()),
    ]);
    w.ingresses.push(shadow);
    let mut sso = service("sso", json!([{"name": "http", "port": 4180}]));
    sso.metadata.namespace = Some("auth".into());
    w.services.push(sso);
    // The Services of namespace auth are shared with web's Ingresses.
    w.reference_grants.push(obj::<wharf_gateway_api::referencegrants::ReferenceGrant>(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ReferenceGrant",
        "metadata": {"name": "sso", "namespace": "auth"},
        "spec": {"from": [{"group": "networking.k8s.io", "kind": "Ingress", "namespace": "web"}],
                 "to": [{"group": "", "kind": "Service"}]},
    })));
    let t = translate(&w, &opts(), None);
    let check = |host: &str| match host_routes(&t, host)[0].auth.as_deref() {
        Some(wharf_model::Auth::External(e)) => {
            format!("{} -> {}", e.url.as_str(), e.cluster.as_deref().unwrap_or("routed"))
        }
        Some(wharf_model::Auth::Unavailable(why)) => format!("503 {why}"),
        other => format!("{other:?}"),
    };
    assert_eq!(check("a.com"), "http://sso.auth.svc.cluster.local:4180/oauth2/auth -> auth/sso:4180");
    assert_eq!(check("b.com"), "https://sso.auth.svc:4180/oauth2/auth -> auth/sso:4180/tls-unverified");
    assert!(t.snapshot.clusters["auth/sso:4180/tls-unverified"].tls.as_ref().is_some_and(|t| t.unverified));
    assert_eq!(check("c.com"), "https://$host/oauth2/auth -> routed");
    assert_eq!(check("d.com"), "https://a.com/oauth2/auth -> routed");
    assert!(check("e.com").starts_with("503 auth-url host sso.example.net is neither a Service"), "{}", check("e.com"));
    assert_eq!(check("f.com"), "http://nope.auth.svc/check -> auth/nope:80");
    for host in ["g.com", "h.com", "i.com"] {
        assert!(check(host).starts_with("503 auth-url host "), "{host}: {}", check(host));
    }
    let canary_auth: Vec<String> = host_routes(&t, "a.com")
        .iter()
        .map(|r| match r.auth.as_deref() {
            Some(wharf_model::Auth::External(e)) => format!("{}: {}", r.source.name, e.url.as_str()),
            other => format!("{}: {other:?}", r.source.name),
        })
        .collect();
    let main = "http://sso.auth.svc.cluster.local:4180/oauth2/auth";
    assert_eq!(canary_auth, [format!("shadow: {main}"), format!("svc: {main}"), format!("svc: {main}")]);
    assert_eq!(
        reasons(&t),
        [
            ("deep", "AuthURLNotServed"),
            ("elsewhere", "AuthURLNotServed"),
            ("missing", "ServiceNotFound"),
            ("no-name", "AuthURLNotServed"),
            ("no-namespace", "AuthURLNotServed"),
        ],
        "{:?}",
        t.diagnostics
    );
}

#[test]
fn client_certificates_ask_each_host_for_one_ca_and_what_cannot_be_checked_refuses() {
    let on = |host: &str, name: &str, secret: &str, age: u32, more: Value| {
        let mut ann = json!({"nginx.ingress.kubernetes.io/auth-tls-secret": secret,
                             "nginx.ingress.kubernetes.io/auth-tls-pass-certificate-to-upstream": "true"});
        if let (Some(a), Some(m)) = (ann.as_object_mut(), more.as_object()) {
            a.extend(m.clone());
        }
        let spec = json!({"ingressClassName": "wharf",
                          "rules": [rule(Some(host), json!([path(&format!("/{name}"), "Prefix", "app", json!({"number": 80}))]))]});
        ingress(name, age, ann, spec)
    };
    let mut w = world(vec![
        on("a.com", "mtls", "ca", 0, json!({})),
        on("a.com", "same-ca", "web/ca", 1, json!({"nginx.ingress.kubernetes.io/auth-tls-verify-client": "optional"})),
        on("a.com", "other-ca", "ca2", 2, json!({})),
        on("c.com", "missing", "nope", 3, json!({})),
        on("d.com", "no-key", "users", 4, json!({})),
        on("e.com", "off", "ca", 5, json!({"nginx.ingress.kubernetes.io/auth-tls-verify-client": "off"})),
        on("a.com", "deeper", "ca", 6, json!({"nginx.ingress.kubernetes.io/auth-tls-verify-depth": "2"})),
        // Neither a canary nor an Ingress that is not served asks its hosts for anything.
        on("f.com", "canary", "ca", 7, json!({"nginx.ingress.kubernetes.io/canary": "true"})),
        on("g.com", "snippet", "ca", 8, json!({"nginx.ingress.kubernetes.io/server-snippet": "deny all;"})),
    ]);
    let ca_pem = |cn: &str| {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    };
    for (name, key, pem) in
        [("ca", "ca.crt", ca_pem("one")), ("ca2", "ca.crt", ca_pem("two")), ("users", "auth", "x".into())]
    {
        w.secrets.push(obj::<Secret>(json!({
            "metadata": {"name": name, "namespace": "web"}, "type": "Opaque", "data": {key: b64(&pem)},
        })));
    }
    let t = translate(&w, &opts(), None);
    let hosts: Vec<(String, &str, usize, u8)> = t
        .snapshot
        .client_auth
        .iter()
        .map(|c| (c.host.to_string(), c.ca.source.as_str(), c.ca.certificates.len(), c.ca.verify_depth))
        .collect();
    assert_eq!(hosts, [("a.com".to_owned(), "web/ca", 1, 1)], "one CA and depth per host, the oldest Ingress's");
    let route = |host: &str, name: &str| {
        host_routes(&t, host).iter().find(|r| r.source.name == name).cloned().unwrap_or_else(|| panic!("{name}"))
    };
    let check =
        |verify| wharf_model::ClientCertCheck { verify, pass_certificate: true, error_page: None, match_subject: None };
    assert_eq!(route("a.com", "mtls").client_cert, Some(Box::new(check(wharf_model::VerifyClient::On))));
    assert_eq!(route("a.com", "same-ca").client_cert, Some(Box::new(check(wharf_model::VerifyClient::Optional))));
    for (host, name, why) in [
        ("a.com", "other-ca", "host a.com already asks for client certificates of web/ca"),
        ("a.com", "deeper", "host a.com already asks for client certificates of web/ca at verify depth 1"),
        ("c.com", "missing", "auth-tls-secret web/nope does not exist"),
        ("d.com", "no-key", "auth-tls-secret web/users has no key \"ca.crt\""),
    ] {
        let r = route(host, name);
        assert_eq!(r.client_cert, None, "{name}");
        assert!(
            matches!(r.auth.as_deref(), Some(wharf_model::Auth::Unavailable(w)) if w.starts_with(why)),
            "{name}: {:?}",
            r.auth
        );
    }
    let off = route("e.com", "off");
    assert_eq!((off.client_cert, off.auth), (None, None), "verify-client off asks for nothing");
    assert_eq!(
        reasons(&t),
        [
            ("canary", "CanaryWithoutMain"),
            ("deeper", "ClientAuthConflict"),
            ("missing", "AuthTLSSecretInvalid"),
            ("no-key", "AuthTLSSecretInvalid"),
            ("other-ca", "ClientAuthConflict"),
            ("snippet", "SnippetRefused")
        ]
    );
}

#[test]
fn a_default_backend_is_the_first_port_of_a_service_of_the_namespace_and_carries_the_error_codes() {
    let ann = |backend: &str| {
        json!({"nginx.ingress.kubernetes.io/default-backend": backend,
               "nginx.ingress.kubernetes.io/custom-http-errors": "404,503"})
    };
    let spec = |host: &str| {
        json!({"ingressClassName": "wharf",
               "defaultBackend": {"service": {"name": "app", "port": {"name": "http"}}},
               "rules": [rule(Some(host), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]})
    };
    let mut w = world(vec![
        ingress("web", 0, ann("errors"), spec("a.com")),
        ingress(
            "missing",
            1,
            ann("nope"),
            json!({"ingressClassName": "wharf",
            "rules": [rule(Some("b.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]}),
        ),
    ]);
    w.services.push(service("errors", json!([{"name": "page", "port": 8080}, {"name": "other", "port": 9090}])));
    let t = translate(&w, &opts(), None);
    let fallback = |r: &wharf_model::Route| match &r.action {
        Action::Forward(f) => f.fallback.as_deref().cloned(),
        _ => None,
    };
    let want = wharf_model::Fallback {
        cluster: "web/errors:8080".into(),
        error_codes: vec![404, 503],
        namespace: "web".into(),
        ingress: "web".into(),
        service: "app".into(),
        service_port: "80".into(),
    };
    assert_eq!(fallback(&host_routes(&t, "a.com")[0]), Some(want.clone()));
    assert!(t.snapshot.clusters.contains_key("web/errors:8080"));
    let default = t.snapshot.default_backend.as_ref().unwrap_or_else(|| panic!("no default backend"));
    assert_eq!(fallback(default), Some(wharf_model::Fallback { service_port: "http".into(), ..want }));
    // A Service that does not exist: served without, and said.
    assert_eq!(fallback(&host_routes(&t, "b.com")[0]), None);
    assert!(t.diagnostics.iter().any(|d| d.object.name == "missing"
        && d.reason == "ServiceNotFound"
        && d.message.contains("default-backend Service web/nope")));
}

#[test]
fn https_backends_are_checked_against_the_proxy_ssl_secret_and_a_bad_one_refuses() {
    let ann = |secret: &str, more: Value| {
        let mut a = json!({"nginx.ingress.kubernetes.io/backend-protocol": "HTTPS",
                           "nginx.ingress.kubernetes.io/proxy-ssl-verify": "on",
                           "nginx.ingress.kubernetes.io/proxy-ssl-secret": secret});
        if let (Some(a), Some(m)) = (a.as_object_mut(), more.as_object()) {
            a.extend(m.clone());
        }
        a
    };
    let spec = |host: &str| {
        json!({"ingressClassName": "wharf",
               "rules": [rule(Some(host), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]})
    };
    let named = json!({"nginx.ingress.kubernetes.io/proxy-ssl-name": "app.internal",
                       "nginx.ingress.kubernetes.io/proxy-ssl-server-name": "on"});
    let mut w = world(vec![
        ingress("checked", 0, ann("backend-ca", json!({})), spec("a.com")),
        ingress("named", 1, ann("backend-ca", named), spec("b.com")),
        ingress("missing", 2, ann("nope", json!({})), spec("c.com")),
    ]);
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = params.self_signed(&key).unwrap().pem();
    w.secrets.push(obj::<Secret>(json!({
        "metadata": {"name": "backend-ca", "namespace": "web"}, "type": "Opaque", "data": {"ca.crt": b64(&ca)},
    })));
    let t = translate(&w, &opts(), None);
    let tls_of = |host: &str| {
        let Action::Forward(f) = &host_routes(&t, host)[0].action else { panic!("{host}: not forwarded") };
        let cluster = &t.snapshot.clusters[&f.backends[0].cluster];
        cluster.tls.clone().unwrap_or_else(|| panic!("{host}: no TLS"))
    };
    let checked = tls_of("a.com");
    assert_eq!(
        (
            checked.server_name.as_str(),
            checked.ca_pem.as_deref(),
            checked.unverified,
            checked.no_sni,
            checked.verify_depth
        ),
        ("app.web.svc", Some(ca.as_str()), false, true, Some(1))
    );
    let named = tls_of("b.com");
    assert_eq!((named.server_name.as_str(), named.no_sni), ("app.internal", false));
    let missing = &host_routes(&t, "c.com")[0];
    assert!(
        matches!(missing.auth.as_deref(), Some(wharf_model::Auth::Unavailable(w)) if w.contains("proxy-ssl-secret web/nope")),
        "{:?}",
        missing.auth
    );
    assert_eq!(reasons(&t), [("missing", "ProxySSLSecretInvalid")]);
}

#[test]
fn ingresses_ask_acme_for_missing_managed_and_annotated_secrets_of_their_issuer() {
    use crate::acme::plan::certificate_secret;
    let tls = |secret: &str, hosts: &[&str]| json!([{"hosts": hosts, "secretName": secret}]);
    let spec = |secret: &str, hosts: &[&str]| {
        json!({"ingressClassName": "wharf", "tls": tls(secret, hosts),
               "rules": [rule(Some(hosts[0]), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]})
    };
    let a = |v: &str| json!({"wharf.dev/acme": v});
    let mut w = world(vec![
        // Missing Secret: ordered from the default issuer.
        ingress("missing", 1, json!({}), spec("missing-tls", &["a.example.com", "B.example.com"])),
        // A second Ingress on the same Secret: one certificate for both.
        ingress("sharing", 2, json!({}), spec("missing-tls", &["c.example.com", "a.example.com"])),
        // Opted out.
        ingress("no", 3, a("false"), spec("no-tls", &["no.example.com"])),
        // Asked for, on a Secret Wharf does not manage: refused, with a diagnostic.
        ingress("foreign", 4, a("true"), spec("foreign-tls", &["f.example.com"])),
        // Not asked for, on a Secret of its own: left alone, silently.
        ingress("own", 5, json!({}), spec("own-tls", &["own.example.com"])),
        // Managed: kept renewed, with its current certificate.
        ingress("managed", 6, json!({}), spec("managed-tls", &["m.example.com"])),
        // Another issuer by name; an unknown one.
        ingress("staging", 7, json!({"wharf.dev/acme-issuer": "staging"}), spec("staging-tls", &["s.example.com"])),
        ingress("unknown", 8, json!({"wharf.dev/acme-issuer": "nope"}), spec("unknown-tls", &["u.example.com"])),
        // A wildcard host is left out; nothing left, nothing ordered.
        ingress("wild", 9, json!({}), spec("wild-tls", &["*.w.example.com"])),
        // A Secret in another namespace, or none: nothing (the TLS diagnostics say why).
        ingress("slash", 11, a("true"), spec("other/x-tls", &["x.example.com"])),
        ingress("empty", 12, a("true"), spec("", &["e.example.com"])),
        // The shared Secret with another issuer: the older Ingress's issuer wins.
        ingress("late", 10, json!({"wharf.dev/acme-issuer": "staging"}), spec("missing-tls", &["d.example.com"])),
    ]);
    w.secrets.push(tls_secret("foreign-tls", &["f.example.com"]));
    w.secrets.push(tls_secret("own-tls", &["own.example.com"]));
    let issued = tls_secret("x", &["m.example.com"]);
    let data = issued.data.clone().unwrap_or_default();
    let text = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
    w.secrets.push(certificate_secret("web", "managed-tls", "le", &text("tls.crt"), &text("tls.key")));
    let mut o = opts();
    o.acme.issuers = vec!["le".into(), "staging".into()];
    let t = translate(&w, &o, None);
    let got: Vec<(String, Vec<String>, String, Vec<String>)> = t
        .acme
        .iter()
        .map(|d| (d.id(), d.names.clone(), d.issuer.clone(), d.sources.iter().map(|s| s.name.clone()).collect()))
        .collect();
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        got,
        [
            ("web/managed-tls".into(), strings(&["m.example.com"]), "le".into(), strings(&["managed"])),
            (
                "web/missing-tls".into(),
                strings(&["a.example.com", "b.example.com", "c.example.com", "d.example.com"]),
                "le".into(),
                strings(&["missing", "sharing", "late"])
            ),
            ("web/staging-tls".into(), strings(&["s.example.com"]), "staging".into(), strings(&["staging"])),
        ]
    );
    let current = t.acme[0].current.clone().unwrap();
    assert_eq!((current.issuer.as_str(), current.dns_names.clone()), ("le", strings(&["m.example.com"])));
    assert!(current.not_after > current.not_before);
    assert!(t.acme[1].current.is_none());
    let reasons: Vec<(&str, &str)> = t
        .diagnostics
        .iter()
        .filter(|d| d.reason.as_str().starts_with("Acme"))
        .map(|d| (d.object.name.as_str(), d.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("foreign", "AcmeSecretNotManaged"),
            ("late", "AcmeIssuerConflict"),
            ("unknown", "AcmeIssuerUnknown"),
            ("wild", "AcmeWildcardNotSupported"),
        ]
    );

    // The default issuer by name; without issuers nothing is ordered, and asking says so.
    o.acme.default_issuer = Some("staging".into());
    let t = translate(&w, &o, None);
    assert_eq!(t.acme.iter().find(|d| d.secret.1 == "missing-tls").map(|d| d.issuer.as_str()), Some("staging"));
    let t = translate(&w, &opts(), None);
    assert!(t.acme.is_empty());
    let asked: Vec<&str> =
        t.diagnostics.iter().filter(|d| d.reason == "AcmeNotConfigured").map(|d| d.object.name.as_str()).collect();
    assert_eq!(asked, ["empty", "foreign", "slash"]);
}
