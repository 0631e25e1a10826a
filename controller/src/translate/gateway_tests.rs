use serde_json::{json, Value};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::Ingress;
use wharf_gateway_api::gatewayclasses::GatewayClass;
use wharf_gateway_api::gateways::Gateway;
use wharf_gateway_api::httproutes::HttpRoute;
use wharf_gateway_api::referencegrants::ReferenceGrant;
use wharf_model::{GatewayPort, PortProtocol};

use super::gateway_api::{AddressPool, GatewayOptions};
use super::tests::{obj, service, slice, tls_secret};
use super::*;
use wharf_model::Host;

const CONTROLLER: &str = "wharf.dev/gateway-controller";

fn opts() -> Options {
    Options {
        now: 1_800_000_000,
        gateway: GatewayOptions {
            controller_name: CONTROLLER.into(),
            addresses: AddressPool::parse("127.1.0.0/16").ok(),
            edge: None,
        },
        ..Options::default()
    }
}

fn gateway_class(name: &str, controller: &str) -> GatewayClass {
    obj(json!({"metadata": {"name": name, "generation": 1}, "spec": {"controllerName": controller}}))
}

fn gateway(ns: &str, name: &str, age: u32, listeners: Value) -> Gateway {
    obj(json!({
        "metadata": {"name": name, "namespace": ns, "generation": 2,
                      "creationTimestamp": format!("2026-01-01T00:{age:02}:00Z")},
        "spec": {"gatewayClassName": "wharf", "listeners": listeners},
    }))
}

fn http_route(ns: &str, name: &str, age: u32, spec: Value) -> HttpRoute {
    obj(json!({
        "metadata": {"name": name, "namespace": ns, "generation": 3,
                      "creationTimestamp": format!("2026-01-01T00:{age:02}:00Z")},
        "spec": spec,
    }))
}

fn to_app(parent: Value, hostnames: Value, path: &str) -> Value {
    json!({
        "parentRefs": [parent], "hostnames": hostnames,
        "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": path}}],
                   "backendRefs": [{"name": "app", "port": 80}]}],
    })
}

fn http(name: &str, port: u16, hostname: Option<&str>) -> Value {
    match hostname {
        Some(h) => json!({"name": name, "port": port, "protocol": "HTTP", "hostname": h}),
        None => json!({"name": name, "port": port, "protocol": "HTTP"}),
    }
}

fn world(gateways: Vec<Gateway>, routes: Vec<HttpRoute>) -> World {
    World {
        gateway_classes: vec![gateway_class("wharf", CONTROLLER), gateway_class("other", "example.com/other")].into(),
        gateways: gateways.into(),
        http_routes: routes.into(),
        services: vec![service("app", json!([{"name": "http", "port": 80}]))].into(),
        endpoint_slices: vec![slice("app", "http", 8080, json!([{"addresses": ["10.0.0.1"]}]))].into(),
        namespaces: vec![
            obj::<Namespace>(json!({"metadata": {"name": "web", "labels": {"team": "web"}}})),
            obj::<Namespace>(json!({"metadata": {"name": "shop", "labels": {"team": "shop"}}})),
        ]
        .into(),
        ..Default::default()
    }
}

/// `(type, status, reason)` of each condition.
fn conds(c: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]) -> Vec<(String, String, String)> {
    c.iter().map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone())).collect()
}

fn has(c: &[(String, String, String)], kind: &str, status: &str, reason: &str) -> bool {
    c.contains(&(kind.into(), status.into(), reason.into()))
}

fn gateway_conds(t: &Translation, name: &str) -> Vec<(String, String, String)> {
    let (_, s) = t.gateway_status.gateways.iter().find(|(o, _)| o.name == name).unwrap();
    conds(s.conditions.as_deref().unwrap_or_default())
}

fn listener_conds(t: &Translation, gw: &str, listener: &str) -> (Vec<(String, String, String)>, i32) {
    let (_, s) = t.gateway_status.gateways.iter().find(|(o, _)| o.name == gw).unwrap();
    let l = s.listeners.iter().flatten().find(|l| l.name == listener).unwrap();
    (conds(&l.conditions), l.attached_routes)
}

fn route_conds(t: &Translation, name: &str) -> Vec<Vec<(String, String, String)>> {
    t.gateway_status
        .http_routes
        .iter()
        .filter(|(o, _)| o.name == name)
        .flat_map(|(_, parents)| parents.iter().map(|p| conds(&p.conditions)))
        .collect()
}

fn ports(t: &Translation) -> &[GatewayPort] {
    &t.snapshot.gateway_ports
}

/// (host, [(route name, path)]) of a port's virtual hosts.
fn hosts(p: &GatewayPort) -> Vec<(String, Vec<(String, String)>)> {
    p.virtual_hosts
        .iter()
        .map(|vh| {
            (
                vh.host.to_string(),
                vh.routes.iter().map(|r| (r.source.name.clone(), r.matches.path.path().to_owned())).collect(),
            )
        })
        .collect()
}

#[test]
fn a_route_attached_to_our_gateway_is_served_on_the_gateways_own_address() {
    let mut other = gateway("web", "theirs", 1, json!([http("http", 80, None)]));
    other.spec.gateway_class_name = "other".into();
    let w = world(
        vec![gateway("web", "gw", 0, json!([http("http", 80, None)])), other],
        vec![http_route("web", "r", 0, to_app(json!({"name": "gw"}), json!(["a.example.com"]), "/api"))],
    );
    let t = translate(&w, &opts(), None);

    let classes: Vec<_> = t
        .gateway_status
        .gateway_classes
        .iter()
        .map(|(n, s)| (n.as_str(), conds(s.conditions.as_deref().unwrap_or_default())))
        .collect();
    assert_eq!(classes, [("wharf", vec![("Accepted".into(), "True".into(), "Accepted".into())])], "only our class");
    assert_eq!(t.gateway_status.gateways.len(), 1, "only Gateways of our class");
    let features: Vec<String> =
        t.gateway_status.gateway_classes[0].1.supported_features.iter().flatten().map(|f| f.name.clone()).collect();
    let mut sorted = features.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(features, sorted, "sorted, once each");
    assert!(
        features.len() <= 64
            && ["Gateway", "HTTPRoute", "ReferenceGrant"].iter().all(|f| features.contains(&f.to_string()))
    );
    let g = gateway_conds(&t, "gw");
    assert!(has(&g, "Accepted", "True", "Accepted") && has(&g, "Programmed", "True", "Programmed"), "{g:?}");
    let (l, attached) = listener_conds(&t, "gw", "http");
    assert_eq!(attached, 1);
    for want in [
        ("Accepted", "True", "Accepted"),
        ("Conflicted", "False", "NoConflicts"),
        ("ResolvedRefs", "True", "ResolvedRefs"),
        ("Programmed", "True", "Programmed"),
    ] {
        assert!(has(&l, want.0, want.1, want.2), "{want:?} in {l:?}");
    }
    assert_eq!(
        route_conds(&t, "r"),
        [vec![
            ("Accepted".into(), "True".into(), "Accepted".into()),
            ("ResolvedRefs".into(), "True".into(), "ResolvedRefs".into())
        ]]
    );
    let (_, status) = &t.gateway_status.gateways[0];
    let addr = status.addresses.as_ref().map(|a| a[0].value.clone()).unwrap_or_default();
    let ip: std::net::IpAddr = addr.parse().unwrap();
    assert!(addr.starts_with("127.1."), "{addr}");
    let conditions = status.conditions.as_deref().unwrap_or_default();
    assert!(conditions.iter().all(|c| c.observed_generation == Some(2)));

    assert_eq!(ports(&t).len(), 1);
    let p = &ports(&t)[0];
    assert_eq!((p.bind, p.protocol), ((ip, 80).into(), PortProtocol::Http));
    assert_eq!(p.gateway, ObjectRef::new("Gateway", "web", "gw"));
    assert_eq!(hosts(p), [("a.example.com".into(), vec![("r".into(), "/api".into())]), ("*".into(), vec![])]);
    assert!(p.virtual_hosts.iter().all(|v| v.routes.capacity() == v.routes.len()), "no spare room");
    assert!(t.snapshot.clusters.contains_key("web/app:80"));
}

#[test]
fn routes_from_namespaces_a_listener_does_not_allow_do_not_attach() {
    let listeners = json!([
        {"name": "same", "port": 80, "protocol": "HTTP", "hostname": "same.example.com"},
        {"name": "selected", "port": 80, "protocol": "HTTP", "hostname": "sel.example.com",
         "allowedRoutes": {"namespaces": {"from": "Selector", "selector": {"matchLabels": {"team": "shop"}}}}},
        {"name": "all", "port": 80, "protocol": "HTTP", "hostname": "all.example.com",
         "allowedRoutes": {"namespaces": {"from": "All"}}},
    ]);
    let route = |name: &str, section: &str| {
        http_route(
            "shop",
            name,
            0,
            to_app(json!({"name": "gw", "namespace": "web", "sectionName": section}), json!([]), "/"),
        )
    };
    let w = world(
        vec![gateway("web", "gw", 0, listeners)],
        vec![route("to-same", "same"), route("to-sel", "selected"), route("to-all", "all")],
    );
    let t = translate(&w, &opts(), None);
    assert!(has(&route_conds(&t, "to-same")[0], "Accepted", "False", "NotAllowedByListeners"));
    assert!(has(&route_conds(&t, "to-sel")[0], "Accepted", "True", "Accepted"));
    assert!(has(&route_conds(&t, "to-all")[0], "Accepted", "True", "Accepted"));
    let attached: Vec<i32> = ["same", "selected", "all"].iter().map(|l| listener_conds(&t, "gw", l).1).collect();
    assert_eq!(attached, [0, 1, 1]);
    let served: Vec<String> = hosts(&ports(&t)[0]).into_iter().filter(|(_, r)| !r.is_empty()).map(|(h, _)| h).collect();
    assert_eq!(served, ["all.example.com", "sel.example.com"]);

    let mut w = w;
    w.namespaces[1] = obj(json!({"metadata": {"name": "shop", "labels": {"team": "other"}}}));
    let t = translate(&w, &opts(), None);
    assert!(
        has(&route_conds(&t, "to-sel")[0], "Accepted", "False", "NotAllowedByListeners"),
        "the label selects no more"
    );
}

#[test]
fn parents_and_hostnames_that_do_not_match_are_reported() {
    let w = world(
        vec![gateway("web", "gw", 0, json!([http("http", 80, Some("*.example.com"))]))],
        vec![
            http_route("web", "elsewhere", 0, to_app(json!({"name": "gw"}), json!(["a.example.org"]), "/")),
            http_route("web", "no-section", 1, to_app(json!({"name": "gw", "sectionName": "nope"}), json!([]), "/")),
            http_route("web", "wrong-port", 2, to_app(json!({"name": "gw", "port": 81}), json!([]), "/")),
            http_route("web", "not-ours", 3, to_app(json!({"name": "missing"}), json!([]), "/")),
        ],
    );
    let t = translate(&w, &opts(), None);
    assert!(has(&route_conds(&t, "elsewhere")[0], "Accepted", "False", "NoMatchingListenerHostname"));
    assert!(has(&route_conds(&t, "no-section")[0], "Accepted", "False", "NoMatchingParent"));
    assert!(has(&route_conds(&t, "wrong-port")[0], "Accepted", "False", "NoMatchingParent"));
    assert!(route_conds(&t, "not-ours").is_empty(), "a parent that is not our Gateway gets no status from us");
    assert_eq!(listener_conds(&t, "gw", "http").1, 0);
}

#[test]
fn listeners_sharing_a_port_must_agree_on_protocol_and_differ_in_hostname() {
    let w = world(
        vec![gateway(
            "web",
            "gw",
            0,
            json!([
                http("plain", 8080, None),
                {"name": "secure", "port": 8080, "protocol": "HTTPS", "tls": {"certificateRefs": [{"name": "cert"}]}},
                http("one", 80, Some("a.example.com")),
                http("two", 80, Some("a.example.com")),
                http("three", 80, Some("b.example.com")),
                {"name": "udp", "port": 53, "protocol": "UDP"},
            ]),
        )],
        vec![],
    );
    let mut w = w;
    w.secrets = vec![tls_secret("cert", &["a.example.com"])].into();
    let t = translate(&w, &opts(), None);
    for l in ["plain", "secure"] {
        let (c, _) = listener_conds(&t, "gw", l);
        assert!(
            has(&c, "Conflicted", "True", "ProtocolConflict") && has(&c, "Programmed", "False", "Invalid"),
            "{l}: {c:?}"
        );
    }
    for l in ["one", "two"] {
        assert!(has(&listener_conds(&t, "gw", l).0, "Conflicted", "True", "HostnameConflict"), "{l}");
    }
    assert!(has(&listener_conds(&t, "gw", "three").0, "Programmed", "True", "Programmed"));
    assert!(has(&listener_conds(&t, "gw", "udp").0, "Accepted", "False", "UnsupportedProtocol"));
    let g = gateway_conds(&t, "gw");
    assert!(has(&g, "Accepted", "True", "ListenersNotValid"), "{g:?}");
    let served: Vec<(u16, Vec<String>)> =
        ports(&t).iter().map(|p| (p.bind.port(), hosts(p).into_iter().map(|(h, _)| h).collect())).collect();
    assert_eq!(served, [(80, vec!["b.example.com".to_owned()])], "no conflicted listener is served");
}

#[test]
fn certificate_refs_resolve_to_secrets_of_the_namespace_or_granted_ones() {
    let https = |name: &str, host: &str, secret: Value| json!({"name": name, "port": 443, "protocol": "HTTPS", "hostname": host, "tls": {"certificateRefs": [secret]}});
    let mut w = world(
        vec![gateway(
            "shop",
            "gw",
            0,
            json!([
                https("missing", "m.example.com", json!({"name": "nope"})),
                https("other-ns", "o.example.com", json!({"name": "cert", "namespace": "web"})),
                https("kind", "k.example.com", json!({"name": "cert", "kind": "ConfigMap"})),
            ]),
        )],
        vec![],
    );
    w.secrets = vec![tls_secret("cert", &["o.example.com"])].into();
    w.http_routes =
        vec![http_route("shop", "r", 0, to_app(json!({"name": "gw", "sectionName": "missing"}), json!([]), "/"))]
            .into();
    let t = translate(&w, &opts(), None);
    assert!(has(&listener_conds(&t, "gw", "missing").0, "ResolvedRefs", "False", "InvalidCertificateRef"));
    assert_eq!(
        listener_conds(&t, "gw", "missing").1,
        1,
        "a route attaches to a listener that waits for its certificate"
    );
    assert!(has(&route_conds(&t, "r")[0], "Accepted", "True", "Accepted"));
    assert!(has(&listener_conds(&t, "gw", "other-ns").0, "ResolvedRefs", "False", "RefNotPermitted"));
    assert!(has(&listener_conds(&t, "gw", "kind").0, "ResolvedRefs", "False", "InvalidCertificateRef"));
    assert!(has(&gateway_conds(&t, "gw"), "Accepted", "False", "ListenersNotValid"));
    assert!(ports(&t).is_empty());

    w.reference_grants = vec![obj::<ReferenceGrant>(json!({
        "metadata": {"name": "g", "namespace": "web"},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "shop"}],
                 "to": [{"group": "", "kind": "Secret"}]},
    }))]
    .into();
    let t = translate(&w, &opts(), None);
    assert!(has(&listener_conds(&t, "gw", "other-ns").0, "ResolvedRefs", "True", "ResolvedRefs"));
    let p = &ports(&t)[0];
    assert_eq!(p.protocol, PortProtocol::Https);
    assert_eq!(
        p.tls_hosts.iter().map(|t| (t.host.to_string(), t.certificate.clone())).collect::<Vec<_>>(),
        [("o.example.com".to_owned(), "web/cert".to_owned())]
    );
    assert!(t.snapshot.certificates.contains_key("web/cert"));
}

#[test]
fn backend_refs_that_do_not_resolve_are_reported_and_not_served() {
    let route = |name: &str, backend: Value| {
        http_route(
            "shop",
            name,
            0,
            json!({"parentRefs": [{"name": "gw", "namespace": "web"}], "rules": [{"backendRefs": [backend]}]}),
        )
    };
    let listeners =
        json!([{"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}]);
    let mut w = world(
        vec![gateway("web", "gw", 0, listeners)],
        vec![
            route("cross", json!({"name": "app", "namespace": "web", "port": 80})),
            route("missing", json!({"name": "nope", "port": 80})),
            route("kind", json!({"name": "app", "kind": "ConfigMap", "group": "", "port": 80})),
        ],
    );
    let t = translate(&w, &opts(), None);
    assert!(has(&route_conds(&t, "cross")[0], "ResolvedRefs", "False", "RefNotPermitted"));
    assert!(has(&route_conds(&t, "missing")[0], "ResolvedRefs", "False", "BackendNotFound"));
    assert!(has(&route_conds(&t, "kind")[0], "ResolvedRefs", "False", "InvalidKind"));
    assert!(
        has(&route_conds(&t, "cross")[0], "Accepted", "True", "Accepted"),
        "the route attaches; its backend answers errors"
    );
    assert!(!t.snapshot.clusters.contains_key("web/app:80"));

    w.reference_grants = vec![obj::<ReferenceGrant>(json!({
        "metadata": {"name": "g", "namespace": "web"},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "shop"}],
                 "to": [{"group": "", "kind": "Service", "name": "app"}]},
    }))]
    .into();
    let t = translate(&w, &opts(), None);
    assert!(has(&route_conds(&t, "cross")[0], "ResolvedRefs", "True", "ResolvedRefs"));
    assert!(t.snapshot.clusters.contains_key("web/app:80"));
}

#[test]
fn each_gateway_keeps_its_address_and_a_requested_one_wins() {
    let gw = |name: &str, age: u32| gateway("web", name, age, json!([http("http", 80, None)]));
    let w = world(vec![gw("a", 0), gw("b", 1)], vec![]);
    let t = translate(&w, &opts(), None);
    let addr = |t: &Translation, name: &str| {
        let (_, s) = t.gateway_status.gateways.iter().find(|(o, _)| o.name == name).unwrap();
        s.addresses.as_ref().map(|a| a[0].value.clone())
    };
    let (a, b) = (addr(&t, "a").unwrap(), addr(&t, "b").unwrap());
    assert_ne!(a, b);
    let binds: Vec<String> = ports(&t).iter().map(|p| p.bind.ip().to_string()).collect();
    assert!(binds.contains(&a) && binds.contains(&b));

    // The address its status shows stays, and one in spec.addresses is taken.
    let mut shown = gw("a", 0);
    shown.status = Some(obj(json!({"addresses": [{"type": "IPAddress", "value": "127.1.2.3"}]})));
    let mut asked = gw("b", 1);
    asked.spec.addresses = Some(vec![obj(json!({"type": "IPAddress", "value": "127.1.9.9"}))]);
    let mut outside = gw("c", 2);
    outside.spec.addresses = Some(vec![obj(json!({"value": "10.0.0.1"}))]);
    let t = translate(&world(vec![shown, asked, outside], vec![]), &opts(), None);
    assert_eq!(addr(&t, "a").as_deref(), Some("127.1.2.3"));
    assert_eq!(addr(&t, "b").as_deref(), Some("127.1.9.9"));
    assert_eq!(addr(&t, "c"), None);
    assert!(has(&gateway_conds(&t, "c"), "Programmed", "False", "AddressNotUsable"));

    let no_pool = Options { gateway: GatewayOptions { addresses: None, ..opts().gateway }, ..opts() };
    let t = translate(&world(vec![gw("a", 0)], vec![]), &no_pool, None);
    assert!(has(&gateway_conds(&t, "a"), "Programmed", "False", "AddressNotAssigned"));
    assert!(ports(&t).is_empty());
}

#[test]
fn a_request_belongs_to_the_most_specific_listener_and_routes_keep_gateway_precedence() {
    let listeners = json!([http("wild", 80, Some("*.example.com")), http("foo", 80, Some("foo.example.com"))]);
    let w = world(
        vec![gateway("web", "gw", 0, listeners)],
        vec![
            // On the wildcard listener, naming foo.example.com: foo's listener takes those.
            http_route("web", "old", 0, to_app(json!({"name": "gw", "sectionName": "wild"}), json!([]), "/")),
            http_route(
                "web",
                "named",
                1,
                to_app(
                    json!({"name": "gw", "sectionName": "wild"}),
                    json!(["foo.example.com", "bar.example.com"]),
                    "/bar",
                ),
            ),
            http_route("web", "new", 2, to_app(json!({"name": "gw", "sectionName": "wild"}), json!([]), "/")),
            http_route(
                "web",
                "exact",
                3,
                json!({
                    "parentRefs": [{"name": "gw", "sectionName": "wild"}],
                    "rules": [{"matches": [{"path": {"type": "Exact", "value": "/"}}], "backendRefs": [{"name": "app", "port": 80}]}],
                }),
            ),
            http_route("web", "on-foo", 4, to_app(json!({"name": "gw", "sectionName": "foo"}), json!([]), "/foo")),
        ],
    );
    let t = translate(&w, &opts(), None);
    assert_eq!(
        hosts(&ports(&t)[0]),
        [
            (
                "bar.example.com".to_owned(),
                vec![
                    ("named".into(), "/bar".into()),
                    ("exact".into(), "/".into()),
                    ("old".into(), "/".into()),
                    ("new".into(), "/".into())
                ]
            ),
            ("foo.example.com".to_owned(), vec![("on-foo".into(), "/foo".into())]),
            (
                "*.example.com".to_owned(),
                vec![("exact".into(), "/".into()), ("old".into(), "/".into()), ("new".into(), "/".into())]
            ),
        ]
    );
}

#[test]
fn each_host_takes_the_routes_whose_hostnames_cover_it_exact_wildcard_or_none() {
    let route = |name: &str, age: u32, hostnames: Value| {
        http_route("web", name, age, to_app(json!({"name": "gw"}), hostnames, "/"))
    };
    let w = world(
        vec![gateway("web", "gw", 0, json!([http("http", 80, None)]))],
        vec![
            route("any", 0, json!([])),
            route("wild", 1, json!(["*.example.com"])),
            route("a", 2, json!(["a.example.com"])),
            route("b", 3, json!(["b.example.com", "a.example.com"])),
        ],
    );
    let t = translate(&w, &opts(), None);
    let names = |routes: &[&str]| routes.iter().map(|n| (n.to_string(), "/".to_owned())).collect::<Vec<_>>();
    assert_eq!(
        hosts(&ports(&t)[0]),
        [
            // Exact route hostnames before wildcards before none.
            ("a.example.com".to_owned(), names(&["a", "b", "wild", "any"])),
            ("b.example.com".to_owned(), names(&["b", "wild", "any"])),
            ("*.example.com".to_owned(), names(&["wild", "any"])),
            ("*".to_owned(), names(&["any"])),
        ]
    );
}

#[test]
fn gateway_classes_with_parameters_are_not_accepted_and_address_ranges_parse() {
    let mut w = world(vec![], vec![]);
    w.gateway_classes[0] = obj(json!({"metadata": {"name": "wharf"}, "spec": {"controllerName": CONTROLLER,
        "parametersRef": {"group": "example.com", "kind": "Params", "name": "p"}}}));
    let t = translate(&w, &opts(), None);
    let (_, s) = &t.gateway_status.gateway_classes[0];
    assert!(has(&conds(s.conditions.as_deref().unwrap_or_default()), "Accepted", "False", "InvalidParameters"));

    assert!(AddressPool::parse("127.1.0.0/16").is_ok());
    for bad in ["127.1.0.0", "127.1.0.0/31", "127.1.0.0/7", "::1/120", "x/16"] {
        assert!(AddressPool::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn rules_with_fields_not_implemented_are_dropped_and_the_route_says_so() {
    let spec = json!({
        "parentRefs": [{"name": "gw"}],
        "rules": [
            {"matches": [{"path": {"value": "/timed"}}], "timeouts": {"request": "5s", "backendRequest": "2s"}, "backendRefs": [{"name": "app", "port": 80}]},
            {"matches": [{"path": {"value": "/forever"}}], "timeouts": {"request": "1d"}, "backendRefs": [{"name": "app", "port": 80}]},
            {"matches": [{"path": {"value": "/filtered"}}], "backendRefs": [{"name": "app", "port": 80,
                "filters": [{"type": "URLRewrite", "urlRewrite": {"hostname": "x.example.com"}}]}]},
            {"matches": [{"path": {"value": "/fine"}}], "backendRefs": [{"name": "app", "port": 80}, {"name": "app", "port": 80,
                "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"add": [{"name": "X-Canary", "value": "1"}]}},
                            {"type": "ResponseHeaderModifier", "responseHeaderModifier": {"remove": ["server"]}}]}]},
        ],
    });
    let w =
        world(vec![gateway("web", "gw", 0, json!([http("http", 80, None)]))], vec![http_route("web", "r", 0, spec)]);
    let t = translate(&w, &opts(), None);
    let c = &route_conds(&t, "r")[0];
    assert!(has(c, "Accepted", "True", "Accepted") && has(c, "PartiallyInvalid", "True", "UnsupportedValue"), "{c:?}");
    assert_eq!(
        hosts(&ports(&t)[0]),
        [("*".to_owned(), vec![("r".to_owned(), "/timed".to_owned()), ("r".to_owned(), "/fine".to_owned())])]
    );
    let timeouts: Vec<Option<u64>> = ports(&t)[0].virtual_hosts[0]
        .routes
        .iter()
        .map(|r| match &r.action {
            wharf_model::Action::Forward(f) => f.timeout_ms,
            _ => None,
        })
        .collect();
    assert_eq!(timeouts, [Some(2_000), None], "the shorter of request and backendRequest; else the default");
    let wharf_model::Action::Forward(fine) = &ports(&t)[0].virtual_hosts[0].routes[1].action else { panic!() };
    let edits: Vec<_> =
        fine.backends.iter().map(|b| (b.request_headers.add.clone(), b.response_headers.remove.clone())).collect();
    assert_eq!(
        edits,
        [(vec![], vec![]), (vec![("x-canary".to_owned(), "1".to_owned())], vec!["server".to_owned()])],
        "a backendRef's header filters are its own"
    );

    let only_bad = json!({"parentRefs": [{"name": "gw"}], "rules": [{"timeouts": {"request": "1d"}}]});
    let w = world(
        vec![gateway("web", "gw", 0, json!([http("http", 80, None)]))],
        vec![http_route("web", "r", 0, only_bad)],
    );
    let t = translate(&w, &opts(), None);
    assert!(has(&route_conds(&t, "r")[0], "Accepted", "False", "UnsupportedValue"));
}

#[test]
fn a_rule_without_backends_answers_500() {
    let spec = json!({"parentRefs": [{"name": "gw"}], "rules": [{"matches": [{"path": {"value": "/none"}}]}, {"backendRefs": []}]});
    let w =
        world(vec![gateway("web", "gw", 0, json!([http("http", 80, None)]))], vec![http_route("web", "r", 0, spec)]);
    let t = translate(&w, &opts(), None);
    let routes = &ports(&t)[0].virtual_hosts[0].routes;
    assert_eq!(routes.len(), 2);
    for r in routes {
        match &r.action {
            wharf_model::Action::Forward(f) => assert_eq!(f.backends, [wharf_model::WeightedBackend::invalid(1)]),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn grpc_routes_match_service_and_method_and_reach_their_backend_over_http2() {
    use wharf_gateway_api::grpcroutes::GrpcRoute;
    let grpc: GrpcRoute = obj(json!({
        "metadata": {"name": "g", "namespace": "web", "generation": 1, "creationTimestamp": "2026-01-01T00:05:00Z"},
        "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["grpc.example.com"], "rules": [
            {"matches": [{"method": {"service": "echo.Echo", "method": "Ping"}, "headers": [
                {"name": "X-Env", "value": "canary"}, {"name": "x-env", "value": "ignored"}, {"name": "x-tier", "value": "gold"}]}],
             "filters": [{"type": "ResponseHeaderModifier", "responseHeaderModifier": {"add": [{"name": "x-via", "value": "wharf"}]}}],
             "backendRefs": [{"name": "app", "port": 80}]},
            {"matches": [{"method": {"service": "echo.Echo"}}], "backendRefs": [{"name": "app", "port": 80}]},
            {"matches": [{"method": {"method": "Ping"}}], "backendRefs": [{"name": "app", "port": 80}]},
        ]},
    }));
    let mut w = world(vec![gateway("web", "gw", 0, json!([http("http", 80, None)]))], vec![]);
    w.grpc_routes = vec![grpc].into();
    let t = translate(&w, &opts(), None);
    let (_, parents) = t.gateway_status.grpc_routes.iter().find(|(o, _)| o.name == "g").unwrap();
    let c = conds(&parents[0].conditions);
    assert!(
        has(&c, "Accepted", "True", "Accepted") && has(&c, "PartiallyInvalid", "True", "UnsupportedValue"),
        "{c:?}"
    );
    assert!(t.gateway_status.http_routes.is_empty());
    let (_, status) = &t.gateway_status.gateways[0];
    let kinds: Vec<String> = status
        .listeners
        .iter()
        .flatten()
        .flat_map(|l| l.supported_kinds.iter().flatten().map(|k| k.kind.clone()))
        .collect();
    assert_eq!(kinds, ["HTTPRoute", "GRPCRoute"]);

    let vh = ports(&t)[0].virtual_hosts.iter().find(|v| v.host.to_string() == "grpc.example.com").unwrap();
    let paths: Vec<(String, Vec<String>)> = vh
        .routes
        .iter()
        .map(|r| {
            (
                format!("{:?}", r.matches.path),
                r.matches.headers.iter().map(|h| format!("{}={}", h.name, h.value)).collect(),
            )
        })
        .collect();
    assert_eq!(
        paths,
        [
            (
                format!("{:?}", wharf_model::PathMatch::exact("/echo.Echo/Ping").unwrap()),
                vec!["x-env=canary".to_owned(), "x-tier=gold".to_owned()]
            ),
            (format!("{:?}", wharf_model::PathMatch::prefix("/echo.Echo/").unwrap()), vec![]),
        ]
    );
    let cluster = match &vh.routes[0].action {
        wharf_model::Action::Forward(f) => f.backends[0].cluster.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(cluster, "web/app:80/h2c");
    assert_eq!(t.snapshot.clusters[&cluster].protocol, wharf_model::AppProtocol::H2c);
    let wharf_model::Action::Forward(f) = &vh.routes[0].action else { panic!() };
    assert_eq!(f.response_headers.add, [("x-via".to_owned(), "wharf".to_owned())], "the rule's filter is kept");
}

#[test]
fn tls_routes_pass_through_or_terminate_by_sni_and_both_modes_share_a_port() {
    use wharf_gateway_api::tlsroutes::TlsRoute;
    let tls_route = |name: &str, age: u32, section: &str, host: &str, backends: Value| -> TlsRoute {
        obj(json!({
            "metadata": {"name": name, "namespace": "web", "generation": 1, "creationTimestamp": format!("2026-01-01T00:{age:02}:00Z")},
            "spec": {"parentRefs": [{"name": "gw", "sectionName": section}], "hostnames": [host], "rules": [{"backendRefs": backends}]},
        }))
    };
    let listeners = json!([
        {"name": "pass", "port": 443, "protocol": "TLS", "hostname": "*.example.com", "tls": {"mode": "Passthrough"}},
        {"name": "term", "port": 8443, "protocol": "TLS", "hostname": "t.example.com", "tls": {"mode": "Terminate", "certificateRefs": [{"name": "cert"}]}},
        {"name": "no-cert", "port": 8444, "protocol": "TLS", "tls": {"mode": "Terminate"}},
        {"name": "mixed-pass", "port": 9443, "protocol": "TLS", "hostname": "a.example.com", "tls": {"mode": "Passthrough"}},
        {"name": "mixed-term", "port": 9443, "protocol": "TLS", "hostname": "b.example.com", "tls": {"mode": "Terminate", "certificateRefs": [{"name": "cert"}]}},
    ]);
    let mut w = world(vec![gateway("web", "gw", 0, listeners)], vec![]);
    w.secrets = vec![tls_secret("cert", &["t.example.com", "b.example.com"])].into();
    let app = json!([{"name": "app", "port": 80}]);
    w.tls_routes = vec![
        tls_route("db", 0, "pass", "db.example.com", app.clone()),
        tls_route("db-later", 1, "pass", "db.example.com", app.clone()),
        tls_route("wild", 2, "pass", "*.example.com", json!([{"name": "nope", "port": 80}])),
        tls_route("elsewhere", 3, "pass", "db.example.org", app.clone()),
        tls_route(
            "weighted",
            4,
            "term",
            "t.example.com",
            json!([{"name": "app", "port": 80, "weight": 3}, {"name": "nope", "port": 80, "weight": 1}]),
        ),
        tls_route("mixed-a", 5, "mixed-pass", "a.example.com", app.clone()),
        tls_route("mixed-b", 6, "mixed-term", "b.example.com", app.clone()),
    ]
    .into();
    let t = translate(&w, &opts(), None);
    let (pass, attached) = listener_conds(&t, "gw", "pass");
    assert!(has(&pass, "Accepted", "True", "Accepted") && has(&pass, "Programmed", "True", "Programmed"), "{pass:?}");
    assert_eq!(attached, 3);
    for l in ["term", "mixed-pass", "mixed-term"] {
        let (c, attached) = listener_conds(&t, "gw", l);
        assert!(has(&c, "Accepted", "True", "Accepted") && has(&c, "Programmed", "True", "Programmed"), "{l}: {c:?}");
        assert_eq!(attached, 1, "{l}");
    }
    let no_cert = listener_conds(&t, "gw", "no-cert").0;
    assert!(has(&no_cert, "ResolvedRefs", "False", "InvalidCertificateRef"), "{no_cert:?}");
    assert!(has(&no_cert, "Programmed", "False", "Invalid"), "{no_cert:?}");
    let (_, status) = &t.gateway_status.gateways[0];
    let kinds = |l: &str| -> Vec<String> {
        let l = status.listeners.iter().flatten().find(|x| x.name == l).unwrap();
        l.supported_kinds.iter().flatten().map(|k| k.kind.clone()).collect()
    };
    assert_eq!(kinds("pass"), ["TLSRoute"]);
    assert_eq!(kinds("term"), ["TLSRoute"]);
    let route = |name: &str| {
        t.gateway_status.tls_routes.iter().find(|(o, _)| o.name == name).map(|(_, p)| conds(&p[0].conditions))
    };
    assert!(has(&route("wild").unwrap(), "ResolvedRefs", "False", "BackendNotFound"));
    assert!(has(&route("weighted").unwrap(), "ResolvedRefs", "False", "BackendNotFound"));
    assert!(has(&route("elsewhere").unwrap(), "Accepted", "False", "NoMatchingListenerHostname"));

    let port = |n: u16| ports(&t).iter().find(|p| p.bind.port() == n).unwrap();
    assert_eq!(ports(&t).len(), 3, "the listener without a certificate is not served");
    // (host, backends with weights and validity, terminate, route)
    type Backends = Vec<(String, u32, bool)>;
    let routes = |p: &GatewayPort| -> Vec<(String, Backends, bool, String)> {
        p.passthrough
            .iter()
            .map(|r| {
                let b = r.backends.iter().map(|b| (b.cluster.clone(), b.weight, b.invalid)).collect();
                (r.host.to_string(), b, r.terminate, r.source.name.clone())
            })
            .collect()
    };
    let app = |w| ("web/app:80".to_owned(), w, false);
    let p = port(443);
    assert_eq!(p.protocol, PortProtocol::Passthrough);
    assert!(p.tls_hosts.is_empty(), "nothing is terminated on a passthrough port");
    let r = routes(p);
    assert!(r.contains(&("db.example.com".into(), vec![app(1)], false, "db".into())), "the oldest route: {r:?}");
    assert!(r.iter().any(|(h, b, _, n)| h == "*.example.com" && b[0].2 && n == "wild"), "unresolved: closes: {r:?}");

    let p = port(8443);
    assert_eq!(p.tls_hosts.len(), 1);
    assert_eq!(p.tls_hosts[0].host.to_string(), "t.example.com");
    assert_eq!(routes(p), [("t.example.com".into(), vec![app(3), (String::new(), 1, true)], true, "weighted".into())]);

    let p = port(9443);
    assert_eq!(p.tls_hosts.iter().map(|t| t.host.to_string()).collect::<Vec<_>>(), ["b.example.com"]);
    assert_eq!(
        routes(p),
        [
            ("a.example.com".into(), vec![app(1)], false, "mixed-a".into()),
            ("b.example.com".into(), vec![app(1)], true, "mixed-b".into()),
        ]
    );
}

#[test]
fn tls_listeners_on_one_port_still_conflict_with_other_protocols() {
    let listeners = json!([
        {"name": "tls", "port": 9443, "protocol": "TLS", "hostname": "a.example.com", "tls": {"mode": "Passthrough"}},
        {"name": "https", "port": 9443, "protocol": "HTTPS", "hostname": "b.example.com", "tls": {"certificateRefs": [{"name": "cert"}]}},
    ]);
    let mut w = world(vec![gateway("web", "gw", 0, listeners)], vec![]);
    w.secrets = vec![tls_secret("cert", &["b.example.com"])].into();
    let t = translate(&w, &opts(), None);
    for l in ["tls", "https"] {
        let c = listener_conds(&t, "gw", l).0;
        assert!(
            has(&c, "Accepted", "False", "ProtocolConflict") && has(&c, "Conflicted", "True", "ProtocolConflict"),
            "{l}: {c:?}"
        );
    }
    assert!(ports(&t).is_empty());
}

#[test]
fn older_gateways_win_a_requested_address_and_the_reasons_say_which_way_it_failed() {
    let gw = |name: &str, age: u32, ip: &str| {
        let mut g = gateway("web", name, age, json!([http("http", 80, None)]));
        g.spec.addresses = Some(vec![obj(json!({"type": "IPAddress", "value": ip}))]);
        g
    };
    // Listed newest first: the age decides, not the order.
    let w = world(vec![gw("newer", 5, "127.1.0.7"), gw("older", 1, "127.1.0.7"), gw("outside", 2, "10.1.2.3")], vec![]);
    let t = translate(&w, &opts(), None);
    let (_, older) = t.gateway_status.gateways.iter().find(|(o, _)| o.name == "older").unwrap();
    assert_eq!(older.addresses.as_ref().map(|a| a[0].value.as_str()), Some("127.1.0.7"));
    let message = |name: &str| {
        let (_, s) = t.gateway_status.gateways.iter().find(|(o, _)| o.name == name).unwrap();
        let c = s.conditions.iter().flatten().find(|c| c.type_ == "Programmed").unwrap();
        (c.reason.clone(), c.message.clone())
    };
    let (reason, msg) = message("newer");
    assert_eq!(reason, "AddressNotUsable");
    assert!(msg.contains("taken by an older Gateway"), "{msg}");
    let (reason, msg) = message("outside");
    assert_eq!(reason, "AddressNotUsable");
    assert!(msg.contains("not in this Wharf's Gateway address range"), "{msg}");
}

#[test]
fn allowed_route_kinds_keep_the_supported_ones_and_name_the_others() {
    let listeners = json!([{"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"kinds": [
        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"},
        {"kind": "GRPCRoute"},
        {"group": "example.com", "kind": "HTTPRoute"},
        {"kind": "TLSRoute"},
    ]}}]);
    let w = world(
        vec![gateway("web", "gw", 0, listeners)],
        vec![http_route("web", "r", 0, to_app(json!({"name": "gw"}), json!([]), "/"))],
    );
    let t = translate(&w, &opts(), None);
    let (_, status) = &t.gateway_status.gateways[0];
    let l = &status.listeners.as_ref().unwrap()[0];
    let kinds: Vec<(Option<String>, String)> =
        l.supported_kinds.iter().flatten().map(|k| (k.group.clone(), k.kind.clone())).collect();
    let group = Some("gateway.networking.k8s.io".to_owned());
    assert_eq!(kinds, [(group.clone(), "HTTPRoute".to_owned()), (group, "GRPCRoute".to_owned())]);
    let rr = l.conditions.iter().find(|c| c.type_ == "ResolvedRefs").unwrap();
    assert_eq!((rr.status.as_str(), rr.reason.as_str()), ("False", "InvalidRouteKinds"));
    assert!(rr.message.contains("example.com/HTTPRoute") && rr.message.contains("/TLSRoute"), "{}", rr.message);
    assert!(!rr.message.contains("gateway.networking.k8s.io/GRPCRoute,"), "{}", rr.message);
    assert!(has(&listener_conds(&t, "gw", "http").0, "Programmed", "True", "Programmed"), "the valid kinds are served");
    assert_eq!(listener_conds(&t, "gw", "http").1, 1);

    let only_bad =
        json!([{"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"kinds": [{"kind": "Foo"}]}}]);
    let t = translate(&world(vec![gateway("web", "gw", 0, only_bad)], vec![]), &opts(), None);
    assert!(has(&listener_conds(&t, "gw", "http").0, "Programmed", "False", "Invalid"));
    let g = gateway_conds(&t, "gw");
    assert!(has(&g, "Accepted", "False", "ListenersNotValid") && has(&g, "Programmed", "False", "Invalid"), "{g:?}");
}

#[test]
fn namespace_selectors_use_labels_and_expressions() {
    let selector = |sel: Value| {
        json!([{"name": "http", "port": 80, "protocol": "HTTP",
                "allowedRoutes": {"namespaces": {"from": "Selector", "selector": sel}}}])
    };
    let cases = [
        (json!({"matchExpressions": [{"key": "team", "operator": "In", "values": ["shop", "x"]}]}), true),
        (json!({"matchExpressions": [{"key": "team", "operator": "In", "values": ["x"]}]}), false),
        (json!({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["x"]}]}), true),
        (json!({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["shop"]}]}), false),
        (json!({"matchExpressions": [{"key": "team", "operator": "Exists"}]}), true),
        (json!({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}), false),
        (json!({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}), true),
        (json!({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}), false),
        (json!({"matchExpressions": [{"key": "team", "operator": "Unknown"}]}), false),
        (json!({"matchLabels": {"team": "shop"}, "matchExpressions": [{"key": "zone", "operator": "Exists"}]}), false),
    ];
    for (sel, allowed) in cases {
        let w = world(
            vec![gateway("web", "gw", 0, selector(sel.clone()))],
            vec![http_route("shop", "r", 0, to_app(json!({"name": "gw", "namespace": "web"}), json!([]), "/"))],
        );
        let t = translate(&w, &opts(), None);
        let c = &route_conds(&t, "r")[0];
        assert_eq!(has(c, "Accepted", "True", "Accepted"), allowed, "{sel}: {c:?}");
    }
}

#[test]
fn parent_refs_to_other_kinds_are_not_ours() {
    let spec = json!({"parentRefs": [{"name": "gw", "kind": "Service", "group": ""}, {"name": "gw", "group": "example.com"}],
                      "rules": [{"backendRefs": [{"name": "app", "port": 80}]}]});
    let w =
        world(vec![gateway("web", "gw", 0, json!([http("http", 80, None)]))], vec![http_route("web", "r", 0, spec)]);
    let t = translate(&w, &opts(), None);
    assert!(route_conds(&t, "r").is_empty());
    assert_eq!(listener_conds(&t, "gw", "http").1, 0);
}

#[test]
fn grpc_and_tls_routes_refuse_what_they_cannot_serve() {
    use wharf_gateway_api::grpcroutes::GrpcRoute;
    use wharf_gateway_api::tlsroutes::TlsRoute;
    let grpc = |name: &str, rule: Value| -> GrpcRoute {
        obj(
            json!({"metadata": {"name": name, "namespace": "web"}, "spec": {"parentRefs": [{"name": "gw", "sectionName": "http"}], "rules": [rule]}}),
        )
    };
    let tls = |name: &str, rules: Value| -> TlsRoute {
        obj(json!({"metadata": {"name": name, "namespace": "web"},
                   "spec": {"parentRefs": [{"name": "gw", "sectionName": "pass"}], "hostnames": ["db.example.com"], "rules": rules}}))
    };
    let listeners = json!([http("http", 80, None), {"name": "pass", "port": 443, "protocol": "TLS", "tls": {"mode": "Passthrough"}}]);
    let mut w = world(vec![gateway("web", "gw", 0, listeners)], vec![]);
    let app = json!({"name": "app", "port": 80});
    w.grpc_routes = vec![
        grpc(
            "backend-filter",
            json!({"backendRefs": [{"name": "app", "port": 80, "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"add": [{"name": "a", "value": "b"}]}}]}]}),
        ),
        grpc(
            "header-regex",
            json!({"matches": [{"headers": [{"type": "RegularExpression", "name": "x", "value": "("}]}], "backendRefs": [app]}),
        ),
        grpc(
            "method-regex",
            json!({"matches": [{"method": {"type": "RegularExpression", "service": "a.B"}}], "backendRefs": [app]}),
        ),
        grpc("method-only", json!({"matches": [{"method": {"method": "Ping"}}], "backendRefs": [app]})),
        grpc(
            "fine",
            json!({"matches": [{"headers": [{"name": "x", "value": "y"}]}], "backendRefs": [{"name": "app", "port": 80, "filters": []}]}),
        ),
    ].into();
    w.tls_routes = vec![
        tls("two-backends", json!([{"backendRefs": [app, {"name": "app", "port": 80, "weight": 2}]}])),
        tls("two-rules", json!([{"backendRefs": [app]}, {"backendRefs": [app]}])),
        tls("one", json!([{"backendRefs": [app]}])),
    ]
    .into();
    let t = translate(&w, &opts(), None);
    let conds_of = |list: &[(ObjectRef, Vec<wharf_gateway_api::httproutes::HttpRouteStatusParents>)], name: &str| {
        list.iter().find(|(o, _)| o.name == name).map(|(_, p)| conds(&p[0].conditions)).unwrap()
    };
    for name in ["header-regex", "method-regex", "method-only"] {
        assert!(has(&conds_of(&t.gateway_status.grpc_routes, name), "Accepted", "False", "UnsupportedValue"), "{name}");
    }
    for name in ["fine", "backend-filter"] {
        assert!(has(&conds_of(&t.gateway_status.grpc_routes, name), "Accepted", "True", "Accepted"), "{name}");
    }
    assert!(has(&conds_of(&t.gateway_status.tls_routes, "two-backends"), "Accepted", "True", "Accepted"));
    let two_rules = conds_of(&t.gateway_status.tls_routes, "two-rules");
    assert!(has(&two_rules, "PartiallyInvalid", "True", "UnsupportedValue"), "{two_rules:?}");
    assert!(has(&conds_of(&t.gateway_status.tls_routes, "one"), "Accepted", "True", "Accepted"));
}

#[test]
fn certificate_refs_must_be_core_secrets_and_a_secret_gone_bad_keeps_its_last_good_certificate() {
    let https = |name: &str, host: &str, r: Value| json!({"name": name, "port": 443, "protocol": "HTTPS", "hostname": host, "tls": {"certificateRefs": [r]}});
    let mut w = world(
        vec![gateway(
            "web",
            "gw",
            0,
            json!([
                https("kind", "k.example.com", json!({"name": "cert", "kind": "ConfigMap"})),
                https("group", "g.example.com", json!({"name": "cert", "group": "example.com"})),
                https("good", "o.example.com", json!({"name": "cert"})),
            ]),
        )],
        vec![],
    );
    w.secrets = vec![tls_secret("cert", &["o.example.com"])].into();
    let t = translate(&w, &opts(), None);
    for l in ["kind", "group"] {
        assert!(has(&listener_conds(&t, "gw", l).0, "ResolvedRefs", "False", "InvalidCertificateRef"), "{l}");
    }
    assert!(has(&listener_conds(&t, "gw", "good").0, "ResolvedRefs", "True", "ResolvedRefs"));

    // The Secret turns bad: the listener says so and keeps serving the last good certificate.
    let before = t.snapshot.clone();
    w.secrets = vec![super::tests::secret("cert", "not a certificate", "not a key")].into();
    let t = translate(&w, &opts(), Some(&before));
    let (c, _) = listener_conds(&t, "gw", "good");
    assert!(
        has(&c, "ResolvedRefs", "False", "InvalidCertificateRef") && has(&c, "Programmed", "True", "Programmed"),
        "{c:?}"
    );
    let hosts: Vec<String> = ports(&t)[0].tls_hosts.iter().map(|h| h.host.to_string()).collect();
    assert_eq!(hosts, ["o.example.com"]);
    assert_eq!(t.snapshot.certificates.get("web/cert"), before.certificates.get("web/cert"));
}

#[test]
fn tcp_routes_forward_by_weight_and_the_oldest_route_of_a_listener_is_served() {
    use wharf_gateway_api::tcproutes::TcpRoute;
    let tcp_route = |name: &str, age: u32, parent: Value, backends: Value| -> TcpRoute {
        obj(json!({
            "metadata": {"name": name, "namespace": "web", "generation": 1, "creationTimestamp": format!("2026-01-01T00:{age:02}:00Z")},
            "spec": {"parentRefs": [parent], "rules": [{"backendRefs": backends}]},
        }))
    };
    let listeners = json!([
        {"name": "db", "port": 5432, "protocol": "TCP"},
        {"name": "web", "port": 80, "protocol": "HTTP"},
        {"name": "udp", "port": 53, "protocol": "UDP"},
    ]);
    let mut w = world(vec![gateway("web", "gw", 0, listeners)], vec![]);
    w.services.push(service("other", json!([{"name": "tcp", "port": 5432}])));
    w.endpoint_slices.push(slice("other", "tcp", 5432, json!([{"addresses": ["10.0.0.2"]}])));
    w.tcp_routes = vec![
        tcp_route(
            "weighted",
            0,
            json!({"name": "gw", "sectionName": "db"}),
            json!([{"name": "app", "port": 80, "weight": 7}, {"name": "other", "port": 5432, "weight": 3}, {"name": "gone", "port": 1, "weight": 0}]),
        ),
        tcp_route("newer", 1, json!({"name": "gw", "port": 5432}), json!([{"name": "other", "port": 5432}])),
        tcp_route("on-http", 2, json!({"name": "gw", "sectionName": "web"}), json!([{"name": "app", "port": 80}])),
    ].into();
    let t = translate(&w, &opts(), None);
    let (db, attached) = listener_conds(&t, "gw", "db");
    assert!(has(&db, "Accepted", "True", "Accepted") && has(&db, "Programmed", "True", "Programmed"), "{db:?}");
    assert_eq!(attached, 2, "both routes attach");
    assert!(has(&listener_conds(&t, "gw", "udp").0, "Accepted", "False", "UnsupportedProtocol"));
    let route = |name: &str| {
        t.gateway_status.tcp_routes.iter().find(|(o, _)| o.name == name).map(|(_, p)| conds(&p[0].conditions))
    };
    let weighted = route("weighted").unwrap();
    assert!(has(&weighted, "Accepted", "True", "Accepted"), "{weighted:?}");
    assert!(has(&weighted, "ResolvedRefs", "False", "BackendNotFound"), "{weighted:?}");
    assert!(has(&route("newer").unwrap(), "Accepted", "True", "Accepted"));
    assert!(has(&route("on-http").unwrap(), "Accepted", "False", "NotAllowedByListeners"));

    let p = ports(&t).iter().find(|p| p.protocol == PortProtocol::Tcp).unwrap();
    assert_eq!(p.bind.port(), 5432);
    let backends: Vec<(String, u32, bool)> = p.tcp.iter().map(|b| (b.cluster.clone(), b.weight, b.invalid)).collect();
    assert_eq!(
        backends,
        [("web/app:80".to_owned(), 7, false), ("web/other:5432".to_owned(), 3, false), (String::new(), 0, true)],
        "the oldest route's backends, by weight; an unresolved one keeps its weight"
    );
    let web = ports(&t).iter().find(|p| p.protocol == PortProtocol::Http).unwrap();
    assert!(web.tcp.is_empty() && web.virtual_hosts.iter().all(|vh| vh.routes.is_empty()));
}

#[test]
fn the_edge_gateway_is_served_on_wharfs_own_listeners_ahead_of_ingress_rules() {
    use super::gateway_api::{EdgeGateway, EdgeSocket};
    use wharf_gateway_api::tcproutes::TcpRoute;
    let socket = |port: u16, local: u16, protocol| EdgeSocket { port, bind: ([0, 0, 0, 0], local).into(), protocol };
    let mut o = opts();
    o.gateway.edge = Some(EdgeGateway {
        namespace: "web".into(),
        name: "edge".into(),
        sockets: vec![
            socket(80, 8080, PortProtocol::Http),
            socket(443, 8443, PortProtocol::Https),
            socket(15443, 15443, PortProtocol::Passthrough),
            socket(31400, 31400, PortProtocol::Tcp),
        ],
    });
    let listeners = json!([
        http("http", 80, None),
        {"name": "https", "port": 443, "protocol": "HTTPS", "tls": {"certificateRefs": [{"name": "cert"}]}},
        {"name": "tls", "port": 15443, "protocol": "TLS", "tls": {"mode": "Passthrough"}},
        {"name": "tcp", "port": 31400, "protocol": "TCP"},
        http("elsewhere", 8081, None),
    ]);
    let mut w = world(
        vec![gateway("web", "edge", 0, listeners), gateway("web", "own", 1, json!([http("http", 80, None)]))],
        vec![
            http_route(
                "web",
                "shop",
                0,
                to_app(json!({"name": "edge", "sectionName": "http"}), json!(["shop.example.com"]), "/"),
            ),
            http_route("web", "own", 1, to_app(json!({"name": "own"}), json!([]), "/")),
        ],
    );
    w.secrets = vec![tls_secret("cert", &["shop.example.com"])].into();
    w.tcp_routes = vec![obj::<TcpRoute>(json!({
        "metadata": {"name": "db", "namespace": "web"},
        "spec": {"parentRefs": [{"name": "edge"}], "rules": [{"backendRefs": [{"name": "app", "port": 80}]}]},
    }))]
    .into();
    w.ingresses = vec![obj::<Ingress>(json!({
        "metadata": {"name": "legacy", "namespace": "web", "annotations": {"kubernetes.io/ingress.class": "wharf"}},
        "spec": {"rules": [{"host": "shop.example.com", "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "app", "port": {"number": 80}}}},
        ]}}]},
    }))]
    .into();
    let t = translate(&w, &o, None);

    assert_eq!(t.gateway_status.edge_gateway, Some(ObjectRef::new("Gateway", "web", "edge")));
    let c = gateway_conds(&t, "edge");
    assert!(has(&c, "Programmed", "True", "Programmed") && has(&c, "Accepted", "True", "ListenersNotValid"), "{c:?}");
    let (_, status) = t.gateway_status.gateways.iter().find(|(g, _)| g.name == "edge").unwrap();
    assert_eq!(status.addresses, None, "the published addresses are filled in when status is written");
    let (elsewhere, _) = listener_conds(&t, "edge", "elsewhere");
    assert!(has(&elsewhere, "Accepted", "False", "PortUnavailable"), "{elsewhere:?}");

    let edge: Vec<(u16, u16, PortProtocol, bool)> = ports(&t)
        .iter()
        .filter(|p| p.gateway.name == "edge")
        .map(|p| (p.listener_port, p.bind.port(), p.protocol, p.edge))
        .collect();
    assert_eq!(
        edge,
        [
            (80, 8080, PortProtocol::Http, true),
            (443, 8443, PortProtocol::Https, true),
            (15443, 15443, PortProtocol::Passthrough, true),
            (31400, 31400, PortProtocol::Tcp, false),
        ],
        "HTTP, HTTPS and passthrough on the edge sockets (the listeners keep their declared ports); TCP on a socket of its own"
    );
    let http_port = ports(&t).iter().find(|p| p.gateway.name == "edge" && p.protocol == PortProtocol::Http).unwrap();
    assert_eq!(
        hosts(http_port),
        [("shop.example.com".to_owned(), vec![("shop".to_owned(), "/".to_owned())]), ("*".to_owned(), vec![])]
    );
    let own = ports(&t).iter().find(|p| p.gateway.name == "own").unwrap();
    assert!(!own.edge && own.bind.ip().to_string().starts_with("127.1."), "other Gateways keep their own address");

    let overridden: Vec<&Diagnostic> =
        t.diagnostics.iter().filter(|d| d.reason == "OverriddenByGatewayRoute").collect();
    assert_eq!(overridden.len(), 1, "{:?}", t.diagnostics);
    assert_eq!(overridden[0].object, ObjectRef::new("Ingress", "web", "legacy"));
    assert!(overridden[0].message.contains("HTTPRoute web/shop"), "{}", overridden[0].message);

    // A listener on an edge port must speak that socket's protocol.
    let mut w2 = w.clone();
    w2.gateways = vec![gateway("web", "edge", 0, json!([{"name": "tcp", "port": 80, "protocol": "TCP"}]))].into();
    let t2 = translate(&w2, &o, None);
    let (tcp, _) = listener_conds(&t2, "edge", "tcp");
    assert!(has(&tcp, "Accepted", "False", "UnsupportedProtocol"), "{tcp:?}");
    assert!(has(&gateway_conds(&t2, "edge"), "Programmed", "False", "Invalid"), "no listener can be served");
    let (_, s2) = &t2.gateway_status.gateways[0];
    let msg = &s2.listeners.as_ref().unwrap()[0].conditions.iter().find(|c| c.type_ == "Accepted").unwrap().message;
    assert!(msg.contains("port 80 of this Gateway is Wharf's HTTP listener; use protocol HTTP"), "{msg}");
}

#[test]
fn backend_tls_policies_put_backends_behind_tls_and_say_why_they_cannot() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use wharf_gateway_api::backendtlspolicies::BackendTlsPolicy;
    let ca = rcgen::CertificateParams::new(Vec::<String>::new())
        .unwrap()
        .self_signed(&rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap())
        .unwrap()
        .pem();
    let cm = |name: &str, data: Value| -> ConfigMap {
        obj(json!({"metadata": {"name": name, "namespace": "web"}, "data": data}))
    };
    let policy = |name: &str, age: u32, target: Value, validation: Value| -> BackendTlsPolicy {
        obj(json!({
            "metadata": {"name": name, "namespace": "web", "generation": 4, "creationTimestamp": format!("2026-01-01T00:{age:02}:00Z")},
            "spec": {"targetRefs": [target], "validation": validation},
        }))
    };
    let svc = |name: &str| json!({"group": "", "kind": "Service", "name": name});
    let port =
        |name: &str, section: &str| json!({"group": "", "kind": "Service", "name": name, "sectionName": section});
    let with_ca = |cm: &str| json!({"caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": cm}], "hostname": "app.example.com"});
    let services = ["app", "named", "other", "bad-kind", "no-cm", "garbage", "system", "sans"];
    let mut rules: Vec<Value> = services
        .iter()
        .map(|s| {
            json!({
                "matches": [{"path": {"type": "PathPrefix", "value": format!("/{s}")}}],
                "backendRefs": [{"name": s, "port": 443}],
            })
        })
        .collect();
    // Not a Service, though it has the name of one a policy targets.
    rules.push(json!({"matches": [{"path": {"value": "/thing"}}], "backendRefs": [{"kind": "Thing", "name": "ghost", "port": 443}]}));
    let spec = json!({"parentRefs": [{"name": "gw"}], "rules": rules});
    // A route of the same name elsewhere, which the Gateway does not accept.
    let elsewhere = json!({"parentRefs": [{"name": "gw", "namespace": "web"}],
                           "rules": [{"backendRefs": [{"name": "lonely", "namespace": "web", "port": 443}]}]});
    let mut w = world(
        vec![gateway("web", "gw", 0, json!([http("http", 80, None)]))],
        vec![http_route("web", "r", 0, spec), http_route("shop", "r", 1, elsewhere)],
    );
    w.services = services.iter().map(|s| service(s, json!([{"name": "https", "port": 443}]))).collect();
    w.endpoint_slices =
        services.iter().map(|s| slice(s, "https", 8443, json!([{"addresses": ["10.0.0.1"]}]))).collect();
    w.config_maps = vec![
        cm("ca", json!({"ca.crt": ca})),
        cm("empty", json!({})),
        cm("garbage", json!({"ca.crt": "not a certificate"})),
    ]
    .into();
    w.backend_tls_policies = vec![
        policy("app", 0, svc("app"), with_ca("ca")),
        policy("app-later", 1, svc("app"), with_ca("ca")),
        policy(
            "named-service",
            2,
            svc("named"),
            json!({"wellKnownCACertificates": "System", "hostname": "service.example.com"}),
        ),
        policy("named-port", 3, port("named", "https"), with_ca("ca")),
        policy(
            "bad-kind",
            4,
            svc("bad-kind"),
            json!({"caCertificateRefs": [{"group": "", "kind": "Secret", "name": "ca"}], "hostname": "x"}),
        ),
        policy("no-cm", 5, svc("no-cm"), with_ca("empty")),
        policy("garbage", 6, svc("garbage"), with_ca("garbage")),
        policy("system", 7, svc("system"), json!({"wellKnownCACertificates": "System", "hostname": "s.example.com"})),
        policy(
            "sans",
            8,
            svc("sans"),
            json!({
                "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "ca"}], "hostname": "sni.example.com",
                "subjectAltNames": [{"type": "Hostname", "hostname": "a.example.com"}, {"type": "URI", "uri": "spiffe://td/ns/web/sa/app"}],
            }),
        ),
        policy("unused", 9, svc("nobody-routes-here"), with_ca("ca")),
        policy("ghost", 10, svc("ghost"), with_ca("ca")),
        policy("lonely", 11, svc("lonely"), with_ca("ca")),
    ].into();
    let t = translate(&w, &opts(), None);

    // What each path's backend is: its cluster's TLS settings, or refused (None).
    let p = &ports(&t)[0];
    let backend = |path: &str| -> Option<Option<wharf_model::UpstreamTls>> {
        let r = p.virtual_hosts[0].routes.iter().find(|r| r.matches.path.path() == path).unwrap();
        let wharf_model::Action::Forward(f) = &r.action else { panic!("{path}") };
        let b = &f.backends[0];
        (!b.invalid).then(|| t.snapshot.clusters[&b.cluster].tls.clone())
    };
    let tls = backend("/app").unwrap().unwrap();
    assert_eq!((tls.server_name.as_str(), tls.ca_pem.as_deref()), ("app.example.com", Some(ca.as_str())));
    assert_eq!(backend("/other"), Some(None), "a Service no policy targets is spoken to in plain text");
    let named = backend("/named").unwrap().unwrap();
    assert_eq!(named.server_name, "app.example.com", "the policy naming the port wins over the one naming the Service");
    for refused in ["/bad-kind", "/no-cm", "/garbage"] {
        assert_eq!(backend(refused), None, "{refused}: answered 500, never plain text");
    }
    let system = backend("/system").unwrap().unwrap();
    assert_eq!((system.server_name.as_str(), system.ca_pem), ("s.example.com", None));
    let sans = backend("/sans").unwrap().unwrap().subject_alt_names;
    assert_eq!(
        sans,
        [
            wharf_model::SubjectAltName::Dns("a.example.com".into()),
            wharf_model::SubjectAltName::Uri("spiffe://td/ns/web/sa/app".into())
        ]
    );
    let route = &route_conds(&t, "r")[0];
    let refused: Vec<_> = route.iter().filter(|c| c.1 == "False").collect();
    assert_eq!(refused, [&("ResolvedRefs".into(), "False".into(), "InvalidKind".into())], "only the Thing: {route:?}");

    // Each policy's conditions, on the Gateway whose route uses its Service.
    let status = |name: &str| {
        let (_, ancestors) = t.gateway_status.backend_tls_policies.iter().find(|(o, _)| o.name == name)?;
        assert_eq!(ancestors.len(), 1);
        let a = &ancestors[0];
        let r = &a.ancestor_ref;
        assert_eq!((r.name.as_str(), r.namespace.as_deref()), ("gw", Some("web")));
        assert_eq!((r.group.as_deref(), r.kind.as_deref()), (Some("gateway.networking.k8s.io"), Some("Gateway")));
        assert_eq!(a.controller_name, CONTROLLER);
        assert!(a.conditions.iter().all(|c| c.observed_generation == Some(4)));
        Some(conds(&a.conditions))
    };
    let ok = |name: &str| {
        let c = status(name).unwrap();
        assert!(
            has(&c, "Accepted", "True", "Accepted") && has(&c, "ResolvedRefs", "True", "ResolvedRefs"),
            "{name}: {c:?}"
        );
    };
    for name in ["app", "named-service", "named-port", "system", "sans"] {
        ok(name);
    }
    assert!(has(&status("app-later").unwrap(), "Accepted", "False", "Conflicted"));
    let bad_kind = status("bad-kind").unwrap();
    assert!(
        has(&bad_kind, "Accepted", "False", "NoValidCACertificate")
            && has(&bad_kind, "ResolvedRefs", "False", "InvalidKind")
    );
    for name in ["no-cm", "garbage"] {
        let c = status(name).unwrap();
        assert!(
            has(&c, "Accepted", "False", "NoValidCACertificate")
                && has(&c, "ResolvedRefs", "False", "InvalidCACertificateRef"),
            "{name}: {c:?}"
        );
    }
    for unused in ["unused", "ghost", "lonely"] {
        assert!(status(unused).is_none(), "{unused}: no route a Gateway of ours accepted uses its Service");
    }
}

#[test]
fn request_mirror_filters_copy_requests_to_their_resolved_backends() {
    let spec = json!({
        "parentRefs": [{"name": "gw"}],
        "rules": [
            {"matches": [{"path": {"value": "/shadow"}}], "backendRefs": [{"name": "app", "port": 80}],
             "filters": [
                {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "app", "port": 80}, "percent": 30}},
                {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "nope", "port": 80}}},
             ]},
        ],
    });
    let w =
        world(vec![gateway("web", "gw", 0, json!([http("http", 80, None)]))], vec![http_route("web", "r", 0, spec)]);
    let t = translate(&w, &opts(), None);
    let c = &route_conds(&t, "r")[0];
    assert!(has(c, "Accepted", "True", "Accepted") && has(c, "ResolvedRefs", "False", "BackendNotFound"), "{c:?}");
    let wharf_model::Action::Forward(f) = &ports(&t)[0].virtual_hosts[0].routes[0].action else { panic!() };
    assert_eq!(f.backends[0].cluster, "web/app:80");
    assert_eq!(f.mirrors, [wharf_model::Mirror { cluster: "web/app:80".into(), per_million: 300_000 }]);
}

#[test]
fn listeners_ask_acme_for_their_hostname_into_their_certificate_refs() {
    let listener = |name: &str, port: u16, host: Option<&str>, refs: Value, options: Value| {
        let mut l = json!({"name": name, "port": port, "protocol": "HTTPS",
                           "tls": {"certificateRefs": refs, "options": options}});
        if let Some(h) = host {
            l["hostname"] = json!(h);
        }
        l
    };
    let one = |name: &str| json!([{"name": name}]);
    let none = json!({});
    let gw = gateway(
        "web",
        "gw",
        0,
        json!([
            // A missing Secret: ordered for the listener's hostname, from the default issuer.
            listener("missing", 443, Some("M.example.com"), one("m-tls"), none.clone()),
            // Two listeners on one Secret: one certificate for both names.
            listener("a", 443, Some("a.example.com"), one("shared-tls"), none.clone()),
            listener("b", 443, Some("b.example.com"), one("shared-tls"), none.clone()),
            // Opted out; asked for on a Secret Wharf does not manage; not asked for on one.
            listener("no", 443, Some("no.example.com"), one("no-tls"), json!({"wharf.dev/acme": "false"})),
            listener("foreign", 443, Some("f.example.com"), one("foreign-tls"), json!({"wharf.dev/acme": "true"})),
            listener("own", 443, Some("own.example.com"), one("own-tls"), none.clone()),
            // Another issuer by name.
            listener("staging", 443, Some("s.example.com"), one("s-tls"), json!({"wharf.dev/acme-issuer": "staging-2"})),
            // No hostname, a wildcard: nothing to order, and asking says why.
            listener("any", 8443, None, one("any-tls"), json!({"wharf.dev/acme": "true"})),
            listener("wild", 443, Some("*.w.example.com"), one("w-tls"), none.clone()),
            // Options that are not valid are reported and ignored.
            listener("bad", 443, Some("bad.example.com"), one("bad-tls"),
                     json!({"wharf.dev/acme": "yes", "wharf.dev/acme-issuer": "Not_A_Name"})),
            // A Secret of another namespace: only with a ReferenceGrant, into that namespace.
            listener("granted", 443, Some("g.example.com"), json!([{"name": "g-tls", "namespace": "shop"}]), none.clone()),
            listener("ungranted", 443, Some("u.example.com"), json!([{"name": "u-tls", "namespace": "other"}]), none.clone()),
            // Not a Secret: nothing.
            listener("kind", 443, Some("k.example.com"), json!([{"name": "k", "kind": "ConfigMap"}]), none.clone()),
            // A TLS listener that terminates asks too; one that passes through does not.
            {"name": "term", "port": 9443, "protocol": "TLS", "hostname": "t.example.com",
             "tls": {"mode": "Terminate", "certificateRefs": [{"name": "t-tls"}]}},
            {"name": "pass", "port": 9443, "protocol": "TLS", "hostname": "p.example.com",
             "tls": {"mode": "Passthrough", "certificateRefs": [{"name": "p-tls"}]}},
        ]),
    );
    let mut w = world(vec![gw], vec![]);
    w.secrets = vec![tls_secret("foreign-tls", &["f.example.com"]), tls_secret("own-tls", &["own.example.com"])].into();
    w.reference_grants = vec![obj::<ReferenceGrant>(json!({
        "metadata": {"name": "g", "namespace": "shop"},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "web"}],
                 "to": [{"group": "", "kind": "Secret"}]},
    }))]
    .into();
    // An Ingress on a Secret a listener uses: one certificate for both, the Ingress first.
    let rules = json!([super::tests::rule(
        Some("i.example.com"),
        json!([super::tests::path("/", "Prefix", "app", json!({"number": 80}))])
    )]);
    w.ingresses = vec![super::tests::ingress(
        "ing",
        30,
        json!({}),
        json!({"ingressClassName": "wharf", "tls": [{"hosts": ["i.example.com"], "secretName": "shared-tls"}],
               "rules": rules}),
    )]
    .into();
    w.ingress_classes = vec![super::tests::class("wharf", "wharf.dev/ingress-controller", false)].into();
    let mut o = opts();
    o.acme.issuers = vec!["le".into(), "staging-2".into()];
    let t = translate(&w, &o, None);
    let got: Vec<(String, Vec<&str>, &str, Vec<String>)> = t
        .acme
        .iter()
        .map(|d| {
            let names = d.names.iter().map(String::as_str).collect();
            (d.id(), names, d.issuer.as_str(), d.sources.iter().map(|s| format!("{} {}", s.kind, s.name)).collect())
        })
        .collect();
    let gw = || vec!["Gateway gw".to_owned()];
    assert_eq!(
        got,
        [
            ("shop/g-tls".to_owned(), vec!["g.example.com"], "le", gw()),
            ("web/bad-tls".into(), vec!["bad.example.com"], "le", gw()),
            ("web/m-tls".into(), vec!["m.example.com"], "le", gw()),
            ("web/s-tls".into(), vec!["s.example.com"], "staging-2", gw()),
            (
                "web/shared-tls".into(),
                vec!["a.example.com", "b.example.com", "i.example.com"],
                "le",
                vec!["Ingress ing".to_owned(), "Gateway gw".to_owned()]
            ),
            ("web/t-tls".into(), vec!["t.example.com"], "le", gw()),
        ]
    );
    let mut acme: Vec<(&str, &str, &str)> = t
        .diagnostics
        .iter()
        .filter(|d| d.reason.as_str().starts_with("Acme") || d.reason == "InvalidListenerOption")
        .map(|d| (&*d.object.kind, d.object.name.as_str(), d.reason.as_str()))
        .collect();
    acme.sort();
    assert_eq!(
        acme,
        [
            ("Gateway", "gw", "AcmeNoHost"),
            ("Gateway", "gw", "AcmeSecretNotManaged"),
            ("Gateway", "gw", "AcmeWildcardNotSupported"),
            ("Gateway", "gw", "InvalidListenerOption"),
            ("Gateway", "gw", "InvalidListenerOption"),
        ]
    );
    let message = |reason: &str| t.diagnostics.iter().find(|d| d.reason == reason).map(|d| d.message.clone());
    assert!(message("AcmeNoHost").is_some_and(|m| m.contains("listener any")), "{:?}", message("AcmeNoHost"));
    assert!(message("AcmeSecretNotManaged").is_some_and(|m| m.contains("Secret web/foreign-tls")));
    // The listener waiting for its certificate says so until it is there.
    assert!(has(&listener_conds(&t, "gw", "missing").0, "ResolvedRefs", "False", "InvalidCertificateRef"));

    // Without issuers nothing is ordered, and a listener asking says so.
    let t = translate(&w, &opts(), None);
    assert!(t.acme.is_empty());
    let asked: Vec<&str> =
        t.diagnostics.iter().filter(|d| d.reason == "AcmeNotConfigured").map(|d| d.object.name.as_str()).collect();
    assert_eq!(asked, ["gw"], "the listeners foreign and any, in one diagnostic");
    assert!(!t.diagnostics.iter().any(|d| d.reason == "AcmeNoHost"), "without issuers, only AcmeNotConfigured");
}

/// `KIND namespace/name` of each object that lost a host to another namespace, once.
fn losers(t: &Translation) -> Vec<String> {
    let mut lost: Vec<String> = t
        .diagnostics
        .iter()
        .filter(|d| d.reason == super::owners::HOST_OWNED)
        .map(|d| format!("{} {}/{}", d.object.kind, d.object.namespace, d.object.name))
        .collect();
    lost.sort();
    lost.dedup();
    lost
}

#[test]
fn on_the_edge_listeners_a_host_belongs_to_its_oldest_claim_whichever_api_made_it() {
    use super::gateway_api::{EdgeGateway, EdgeSocket};
    let mut o = opts();
    o.gateway.edge = Some(EdgeGateway {
        namespace: "wharf".into(),
        name: "edge".into(),
        sockets: vec![EdgeSocket { port: 80, bind: ([0, 0, 0, 0], 8080).into(), protocol: PortProtocol::Http }],
    });
    let everyone =
        json!([{"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}]);
    let ingress = |ns: &str, name: &str, age: u32, host: Option<&str>| -> Ingress {
        let rule = match host {
            Some(h) => {
                json!({"host": h, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "app", "port": {"number": 80}}}}]}})
            }
            None => {
                json!({"http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "app", "port": {"number": 80}}}}]}})
            }
        };
        obj(json!({
            "metadata": {"name": name, "namespace": ns, "annotations": {"kubernetes.io/ingress.class": "wharf"},
                         "creationTimestamp": format!("2026-01-01T00:{age:02}:00Z")},
            "spec": {"rules": [rule]},
        }))
    };
    let edge = json!({"name": "edge", "namespace": "wharf"});
    let mut w = world(
        vec![gateway("wharf", "edge", 0, everyone)],
        vec![
            // b takes over a's Ingress host: refused (a's Ingress is older).
            http_route("b", "takeover", 5, to_app(edge.clone(), json!(["shop.a.test"]), "/")),
            // b's exact name under a's older Ingress wildcard: refused.
            http_route("b", "under", 5, to_app(edge.clone(), json!(["login.a.test"]), "/")),
            // b's route without hostname: a's rules without host are older.
            http_route("b", "everything", 5, to_app(edge.clone(), json!([]), "/")),
            // a's route is older than b's Ingress: a keeps the host.
            http_route("a", "blog", 1, to_app(edge.clone(), json!(["blog.c.test"]), "/")),
            // b's own host: served.
            http_route("b", "own", 5, to_app(edge.clone(), json!(["api.b.test"]), "/")),
            // a's route wildcard covers names of any depth: b's Ingress two labels down is
            // refused.
            http_route("a", "deep", 1, to_app(edge, json!(["*.deep.test"]), "/")),
        ],
    );
    w.ingresses = vec![
        ingress("a", "shop", 2, Some("shop.a.test")),
        ingress("a", "wild", 2, Some("*.a.test")),
        ingress("a", "any", 2, None),
        ingress("b", "blog", 6, Some("blog.c.test")),
        ingress("b", "nested", 6, Some("x.y.deep.test")),
        // With a TLS entry of a new Secret: no ACME order for a's host either.
        obj(json!({
            "metadata": {"name": "blog-tls", "namespace": "b", "annotations": {"kubernetes.io/ingress.class": "wharf"},
                         "creationTimestamp": "2026-01-01T00:07:00Z"},
            "spec": {"tls": [{"hosts": ["blog.c.test", "mine.b.test"], "secretName": "stolen"},
                             {"hosts": ["blog.c.test"], "secretName": "b-cert"}],
                     "rules": [{"host": "blog.c.test", "http": {"paths": [
                         {"path": "/x", "pathType": "Prefix", "backend": {"service": {"name": "app", "port": {"number": 80}}}}]}}]},
        })),
    ]
    .into();
    let mut b_cert = tls_secret("b-cert", &["blog.c.test"]);
    b_cert.metadata.namespace = Some("b".into());
    w.secrets.push(b_cert);
    o.acme.issuers = vec!["le".into()];
    let t = translate(&w, &o, None);
    let tls: Vec<String> = t.snapshot.tls_hosts.iter().map(|h| format!("{} {}", h.host, h.certificate)).collect();
    assert!(!tls.iter().any(|h| h.starts_with("blog.c.test")), "b's certificate for a's host: {tls:?}");
    let ordered: Vec<(String, Vec<String>)> = t.acme.iter().map(|d| (d.id(), d.names.clone())).collect();
    assert_eq!(ordered, [("b/stolen".to_owned(), vec!["mine.b.test".to_owned()])], "b's own name only");
    let port = ports(&t).iter().find(|p| p.edge).unwrap();
    let served: Vec<(String, Vec<String>)> =
        hosts(port).into_iter().map(|(h, rs)| (h, rs.into_iter().map(|(n, _)| n).collect())).collect();
    // b's route without hostname stays on b's own host (a route for every host is merged
    // into each host of an isolated listener), and nowhere else.
    let want = [
        ("api.b.test".to_owned(), vec!["own".to_owned(), "everything".to_owned()]),
        ("blog.c.test".to_owned(), vec!["blog".to_owned()]),
        ("*.deep.test".to_owned(), vec!["deep".to_owned()]),
    ];
    assert_eq!(served, want);
    let ingress_hosts: Vec<(String, Vec<String>)> = t
        .snapshot
        .virtual_hosts
        .iter()
        .map(|v| {
            (v.host.to_string(), v.routes.iter().map(|r| format!("{}/{}", r.source.namespace, r.source.name)).collect())
        })
        .collect();
    assert!(
        !ingress_hosts.iter().any(|(h, _)| h == "blog.c.test"),
        "b's Ingress lost a's route host: {ingress_hosts:?}"
    );
    assert!(ingress_hosts.contains(&("shop.a.test".to_owned(), vec!["a/shop".to_owned()])), "{ingress_hosts:?}");
    let lost = losers(&t);
    assert_eq!(
        lost,
        [
            "HTTPRoute b/everything",
            "HTTPRoute b/takeover",
            "HTTPRoute b/under",
            "Ingress b/blog",
            "Ingress b/blog-tls",
            "Ingress b/nested"
        ]
    );
    let m = t.diagnostics.iter().find(|d| d.object.name == "takeover").unwrap();
    assert!(m.message.starts_with("host shop.a.test belongs to namespace a"), "{}", m.message);
    // The routes left with no host on the edge are not accepted there; the one that keeps
    // b's own host is.
    for refused in ["takeover", "under"] {
        assert!(has(&route_conds(&t, refused)[0], "Accepted", "False", "NotAllowedByListeners"), "{refused}");
    }
    assert!(has(&route_conds(&t, "everything")[0], "Accepted", "True", "Accepted"));
    assert!(has(&route_conds(&t, "own")[0], "Accepted", "True", "Accepted"));
}

#[test]
fn the_edge_ownership_rule_weighs_grpc_and_tls_routes_and_passthrough_ingresses_and_ignores_merging() {
    use super::gateway_api::{EdgeGateway, EdgeSocket};
    use wharf_gateway_api::grpcroutes::GrpcRoute;
    use wharf_gateway_api::tlsroutes::TlsRoute;
    let mut o = opts();
    o.gateway.edge = Some(EdgeGateway {
        namespace: "wharf".into(),
        name: "edge".into(),
        sockets: vec![
            EdgeSocket { port: 80, bind: ([0, 0, 0, 0], 8080).into(), protocol: PortProtocol::Http },
            EdgeSocket { port: 15443, bind: ([0, 0, 0, 0], 15443).into(), protocol: PortProtocol::Passthrough },
        ],
    });
    // Merging lets Ingresses of several namespaces share a host, not routes of the edge.
    o.ownership.merge_across_namespaces = true;
    let all = json!({"namespaces": {"from": "All"}});
    let listeners = json!([
        {"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": all},
        {"name": "tls", "port": 15443, "protocol": "TLS", "tls": {"mode": "Passthrough"}, "allowedRoutes": all},
    ]);
    let backend = json!({"service": {"name": "app", "port": {"number": 80}}});
    let ingress = |ns: &str, name: &str, age: u32, host: &str, passthrough: bool| -> Ingress {
        let mut annotations = json!({"kubernetes.io/ingress.class": "wharf"});
        if passthrough {
            annotations["nginx.ingress.kubernetes.io/ssl-passthrough"] = json!("true");
        }
        obj(json!({
            "metadata": {"name": name, "namespace": ns, "annotations": annotations,
                         "creationTimestamp": format!("2026-01-01T00:{age:02}:00Z")},
            "spec": {"rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}]},
        }))
    };
    let meta = |ns: &str, name: &str, age: u32| json!({"name": name, "namespace": ns, "generation": 1, "creationTimestamp": format!("2026-01-01T00:{age:02}:00Z")});
    let edge = |section: &str| json!([{"name": "edge", "namespace": "wharf", "sectionName": section}]);
    let tls_route = |ns: &str, name: &str, age: u32, host: &str| -> TlsRoute {
        obj(json!({"metadata": meta(ns, name, age), "spec": {"parentRefs": edge("tls"), "hostnames": [host],
            "rules": [{"backendRefs": [{"name": "app", "port": 80}]}]}}))
    };
    // A wildcard of the edge: the Ingress names under it are weighed with it, no others.
    let wild = to_app(json!({"name": "edge", "namespace": "wharf", "sectionName": "http"}), json!(["*.z.test"]), "/");
    let mut w = world(vec![gateway("wharf", "edge", 0, listeners)], vec![http_route("a", "wild", 1, wild)]);
    w.grpc_routes = vec![obj::<GrpcRoute>(json!({"metadata": meta("b", "grpc", 5), "spec": {
        "parentRefs": edge("http"), "hostnames": ["rpc.a.test"], "rules": [{"backendRefs": [{"name": "app", "port": 80}]}]}}))]
    .into();
    w.tls_routes = vec![
        // Newer than a's passthrough Ingress: refused.
        tls_route("b", "db", 5, "db.a.test"),
        // Older than b's passthrough Ingress: b's Ingress is refused.
        tls_route("a", "mq", 1, "mq.a.test"),
    ]
    .into();
    w.ingresses = vec![
        ingress("a", "rpc", 2, "rpc.a.test", false),
        ingress("a", "db", 2, "db.a.test", true),
        ingress("b", "mq", 6, "mq.a.test", true),
        // An Ingress host that merges two namespaces and no route claims: left as merged.
        ingress("a", "shared", 2, "shared.c.test", false),
        {
            let mut other = ingress("b", "shared", 3, "shared.c.test", false);
            let rules = other.spec.as_mut().and_then(|s| s.rules.as_mut()).unwrap();
            rules[0].http.as_mut().unwrap().paths[0].path = Some("/b".into());
            other
        },
    ]
    .into();
    let t = translate(&w, &o, None);
    let lost = losers(&t);
    assert_eq!(lost, ["GRPCRoute b/grpc", "Ingress b/mq", "TLSRoute b/db"]);
    let accepted = |list: &[(ObjectRef, Vec<wharf_gateway_api::httproutes::HttpRouteStatusParents>)], name: &str| {
        let (_, parents) = list.iter().find(|(o, _)| o.name == name).unwrap();
        conds(&parents[0].conditions).into_iter().find(|(k, _, _)| k == "Accepted").map(|(_, s, r)| format!("{s} {r}"))
    };
    let s = &t.gateway_status;
    assert_eq!(accepted(&s.grpc_routes, "grpc").as_deref(), Some("False NotAllowedByListeners"));
    assert_eq!(accepted(&s.tls_routes, "db").as_deref(), Some("False NotAllowedByListeners"));
    assert_eq!(accepted(&s.tls_routes, "mq").as_deref(), Some("True Accepted"), "a's own");
    let edge_pass: Vec<String> = ports(&t)
        .iter()
        .filter(|p| p.edge)
        .flat_map(|p| p.passthrough.iter().map(|r| format!("{} {}", r.host, r.source.name)))
        .collect();
    assert_eq!(edge_pass, ["mq.a.test mq"], "b's TLSRoute for a's passthrough host is out");
    let ingress_pass: Vec<String> =
        t.snapshot.passthrough.iter().map(|p| format!("{} {}/{}", p.host, p.source.namespace, p.source.name)).collect();
    assert_eq!(ingress_pass, ["db.a.test a/db"], "b's passthrough Ingress for a's route host is out");
    let http_hosts: Vec<String> = ports(&t)
        .iter()
        .filter(|p| p.edge && p.protocol == PortProtocol::Http)
        .flat_map(|p| p.virtual_hosts.iter().filter(|v| !v.routes.is_empty()).map(|v| v.host.to_string()))
        .collect();
    assert!(!http_hosts.contains(&"rpc.a.test".to_owned()), "{http_hosts:?}");
    let shared = t.snapshot.virtual_hosts.get(&Host::Exact("shared.c.test".into())).unwrap();
    assert_eq!(shared.routes.len(), 2, "merged Ingress routes no route claims stay merged");
    // Who serves each host, as the next translation reads it.
    let holder = |h: &str| super::owners::holder(&t.snapshot, &Host::parse(h).unwrap());
    assert_eq!(holder("mq.a.test"), Some("a"), "a TLSRoute on the edge");
    assert_eq!(holder("db.a.test"), Some("a"), "a passthrough Ingress");
    assert_eq!(holder("rpc.a.test"), Some("a"), "an Ingress rule");
    assert_eq!(holder("nobody.a.test"), None);
}

#[test]
fn on_the_edge_an_older_route_edited_to_name_a_served_host_takes_nothing() {
    use super::gateway_api::{EdgeGateway, EdgeSocket};
    let mut o = opts();
    o.gateway.edge = Some(EdgeGateway {
        namespace: "wharf".into(),
        name: "edge".into(),
        sockets: vec![EdgeSocket { port: 80, bind: ([0, 0, 0, 0], 8080).into(), protocol: PortProtocol::Http }],
    });
    let everyone =
        json!([{"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}]);
    let edge = json!({"name": "edge", "namespace": "wharf"});
    let shop: Ingress = obj(json!({
        "metadata": {"name": "shop", "namespace": "a", "annotations": {"kubernetes.io/ingress.class": "wharf"},
                     "creationTimestamp": "2026-01-01T00:02:00Z"},
        "spec": {"rules": [{"host": "shop.a.test", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                  "backend": {"service": {"name": "app", "port": {"number": 80}}}}]}}]},
    }));
    let at = |hosts: Value| {
        let mut w = world(
            vec![gateway("wharf", "edge", 0, everyone.clone())],
            vec![http_route("b", "old", 1, to_app(edge.clone(), hosts, "/"))],
        );
        w.ingresses = vec![shop.clone()].into();
        w
    };
    let first = translate(&at(json!(["own.b.test"])), &o, None);
    let t = translate(&at(json!(["own.b.test", "shop.a.test"])), &o, Some(&first.snapshot));
    assert_eq!(losers(&t), ["HTTPRoute b/old"], "the older route, named a host a serves");
    assert!(t.snapshot.virtual_hosts.get(&Host::parse("shop.a.test").unwrap()).is_some(), "a's rule stays");
    let port = ports(&t).iter().find(|p| p.edge).unwrap();
    let served: Vec<String> = hosts(port).into_iter().map(|(h, _)| h).collect();
    assert_eq!(served, ["own.b.test"]);
    let fresh = translate(&at(json!(["own.b.test", "shop.a.test"])), &o, None);
    assert_eq!(losers(&fresh), ["Ingress a/shop"], "on a fresh start, age decides");
    // And the other way round: a's route keeps its host against b's older Ingress.
    let mut w = at(json!(["shop.a.test"]));
    w.http_routes = vec![http_route("a", "new", 3, to_app(edge.clone(), json!(["blog.a.test"]), "/"))].into();
    let mut old_b = shop.clone();
    old_b.metadata.namespace = Some("b".into());
    old_b.metadata.name = Some("older".into());
    old_b.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-01-01T00:00:00Z".parse().unwrap()));
    let mut own = old_b.clone();
    own.spec.as_mut().unwrap().rules.as_mut().unwrap()[0].host = Some("own.b.test".into());
    w.ingresses = vec![own].into();
    let first = translate(&w, &o, None);
    let mut blog = old_b;
    blog.spec.as_mut().unwrap().rules.as_mut().unwrap()[0].host = Some("blog.a.test".into());
    w.ingresses = vec![blog].into();
    let t = translate(&w, &o, Some(&first.snapshot));
    assert_eq!(losers(&t), ["Ingress b/older"]);
    assert!(t.snapshot.virtual_hosts.get(&Host::parse("blog.a.test").unwrap()).is_none());
}

#[test]
fn on_the_edge_a_tls_host_of_an_ingress_claims_its_host_too() {
    use super::gateway_api::{EdgeGateway, EdgeSocket};
    let mut o = opts();
    o.gateway.edge = Some(EdgeGateway {
        namespace: "wharf".into(),
        name: "edge".into(),
        sockets: vec![EdgeSocket { port: 443, bind: ([0, 0, 0, 0], 8443).into(), protocol: PortProtocol::Https }],
    });
    let everyone = json!([{"name": "https", "port": 443, "protocol": "HTTPS",
        "tls": {"certificateRefs": [{"name": "edge-cert"}]}, "allowedRoutes": {"namespaces": {"from": "All"}}}]);
    let edge = json!({"name": "edge", "namespace": "wharf"});
    // a's Ingress names pay.a.test in spec.tls only (its rules are elsewhere).
    let tls_only = |age: u32| -> Ingress {
        obj(json!({
            "metadata": {"name": "pay", "namespace": "a", "annotations": {"kubernetes.io/ingress.class": "wharf"},
                         "creationTimestamp": format!("2026-01-01T00:{age:02}:00Z")},
            "spec": {"tls": [{"hosts": ["pay.a.test"], "secretName": "pay-tls"}]},
        }))
    };
    let at = |ingress_age: u32| {
        let mut w = world(
            vec![gateway("wharf", "edge", 0, everyone.clone())],
            vec![http_route("b", "pay", 5, to_app(edge.clone(), json!(["pay.a.test"]), "/"))],
        );
        w.ingresses = vec![tls_only(ingress_age)].into();
        let mut cert = tls_secret("pay-tls", &["pay.a.test"]);
        cert.metadata.namespace = Some("a".into());
        w.secrets.push(cert);
        let mut edge_cert = tls_secret("edge-cert", &["*.b.test"]);
        edge_cert.metadata.namespace = Some("wharf".into());
        w.secrets.push(edge_cert);
        w
    };
    let older = translate(&at(1), &o, None);
    assert_eq!(losers(&older), ["HTTPRoute b/pay"], "a's TLS host is older than b's route");
    let tls: Vec<String> = older.snapshot.tls_hosts.iter().map(|h| format!("{} {}", h.host, h.certificate)).collect();
    assert_eq!(tls, ["pay.a.test a/pay-tls"]);
    let newer = translate(&at(9), &o, None);
    assert_eq!(losers(&newer), ["Ingress a/pay"], "b's route is older: a's certificate is not served for it");
    assert!(newer.snapshot.tls_hosts.get(&Host::parse("pay.a.test").unwrap()).is_none());
}
