//! Tenancy: one namespace's Ingresses never serve, shadow, canary or order certificates
//! for a host another namespace owns.

use k8s_openapi::api::networking::v1::Ingress;
use serde_json::{json, Value};

use super::tests::{class, ingress, path, rule, tls_secret};
use super::*;
use wharf_model::{Action, Host, PathMatch};

/// An Ingress of namespace `ns`, created at minute `age`.
fn ing(ns: &str, name: &str, age: u32, annotations: Value, spec: Value) -> Ingress {
    let mut i = ingress(name, age, annotations, spec);
    i.metadata.namespace = Some(ns.into());
    i
}

fn spec(host: Option<&str>, p: &str, svc: &str) -> Value {
    json!({"ingressClassName": "wharf", "rules": [rule(host, json!([path(p, "Prefix", svc, json!({"number": 80}))]))]})
}

fn world(ingresses: Vec<Ingress>) -> World {
    World {
        ingress_classes: vec![class("wharf", "wharf.dev/ingress-controller", false)].into(),
        ingresses: ingresses.into(),
        ..Default::default()
    }
}

fn opts() -> Options {
    Options { now: 1_800_000_000, ..Options::default() }
}

/// (host, namespace/name of each route's source).
fn served(t: &Translation) -> Vec<(String, Vec<String>)> {
    t.snapshot
        .virtual_hosts
        .iter()
        .map(|v| {
            (v.host.to_string(), v.routes.iter().map(|r| format!("{}/{}", r.source.namespace, r.source.name)).collect())
        })
        .collect()
}

fn owned_diags(t: &Translation) -> Vec<(String, String)> {
    t.diagnostics
        .iter()
        .filter(|d| d.reason == owners::HOST_OWNED)
        .map(|d| (format!("{}/{}", d.object.namespace, d.object.name), d.message.clone()))
        .collect()
}

#[test]
fn another_namespace_cannot_add_paths_to_an_owned_host() {
    let w = world(vec![
        ing("a", "shop", 1, json!({}), spec(Some("shop.a.test"), "/", "web")),
        ing("b", "evil", 2, json!({}), spec(Some("shop.a.test"), "/admin", "evil")),
        ing("a", "more", 3, json!({}), spec(Some("shop.a.test"), "/api", "api")),
    ]);
    let t = translate(&w, &opts(), None);
    assert_eq!(served(&t), [("shop.a.test".to_owned(), vec!["a/more".to_owned(), "a/shop".to_owned()])]);
    let d = owned_diags(&t);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].0, "b/evil");
    assert!(d[0].1.starts_with("host shop.a.test belongs to namespace a"), "{}", d[0].1);
    assert!(t.ingresses.contains(&ObjectRef::new("Ingress", "b", "evil")), "still ours: its status is written");

    // The operator's merging lets it in, as ingress-nginx did.
    let mut merge = opts();
    merge.ownership.merge_across_namespaces = true;
    let t = translate(&w, &merge, None);
    assert_eq!(served(&t)[0].1, ["b/evil", "a/more", "a/shop"]);
    assert!(owned_diags(&t).is_empty());

    // The operator's assignment beats age.
    let mut assigned = opts();
    assigned.ownership.assigned = vec![owners::Assignment::parse("*.a.test=b").unwrap()];
    let t = translate(&w, &assigned, None);
    assert_eq!(served(&t)[0].1, ["b/evil"]);
    assert_eq!(owned_diags(&t).len(), 2, "both of a's Ingresses are told");
}

#[test]
fn an_exact_host_under_an_older_wildcard_of_another_namespace_is_refused() {
    let w = world(vec![
        ing("a", "wild", 1, json!({}), spec(Some("*.a.test"), "/", "web")),
        ing("b", "evil", 2, json!({}), spec(Some("login.a.test"), "/", "evil")),
        ing("c", "early", 0, json!({}), spec(Some("early.a.test"), "/", "c")),
    ]);
    let t = translate(&w, &opts(), None);
    let hosts: Vec<(String, Vec<String>)> = served(&t);
    assert_eq!(
        hosts,
        [("early.a.test".to_owned(), vec!["c/early".to_owned()]), ("*.a.test".to_owned(), vec!["a/wild".to_owned()])]
    );
    assert_eq!(owned_diags(&t).iter().map(|(o, _)| o.as_str()).collect::<Vec<_>>(), ["b/evil"]);
}

#[test]
fn a_canary_in_another_namespace_takes_nothing() {
    let canary =
        json!({"nginx.ingress.kubernetes.io/canary": "true", "nginx.ingress.kubernetes.io/canary-weight": "100"});
    let w = world(vec![
        ing("a", "shop", 1, json!({}), spec(Some("shop.a.test"), "/", "web")),
        // Older than a's Ingress: a canary claims nothing, so it cannot become the owner.
        ing("b", "evil", 0, canary.clone(), spec(Some("shop.a.test"), "/", "evil")),
        ing("a", "beta", 2, canary, spec(Some("shop.a.test"), "/", "beta")),
    ]);
    let t = translate(&w, &opts(), None);
    let route = &t.snapshot.virtual_hosts.iter().next().unwrap().routes[0];
    let Action::Forward(f) = &route.action else { panic!("{route:?}") };
    let clusters: Vec<(&str, u32)> = f.backends.iter().map(|b| (b.cluster.as_str(), b.weight)).collect();
    assert_eq!(clusters, [("a/web:80", 0), ("a/beta:80", 100)], "a's own canary only");
    assert_eq!(owned_diags(&t).iter().map(|(o, _)| o.as_str()).collect::<Vec<_>>(), ["b/evil"]);
}

#[test]
fn another_namespace_cannot_make_a_hosts_paths_regular_expressions() {
    let w = world(vec![
        ing("a", "shop", 1, json!({}), spec(Some("shop.a.test"), "/api", "web")),
        ing(
            "b",
            "evil",
            2,
            json!({"nginx.ingress.kubernetes.io/use-regex": "true"}),
            spec(Some("shop.a.test"), "/x", "evil"),
        ),
        ing("b", "own", 3, json!({"nginx.ingress.kubernetes.io/use-regex": "true"}), spec(Some("b.test"), "/x", "b")),
    ]);
    let t = translate(&w, &opts(), None);
    let paths = |host: &str| -> Vec<PathMatch> {
        let v = t.snapshot.virtual_hosts.iter().find(|v| v.host.to_string() == host).unwrap();
        v.routes.iter().map(|r| r.matches.path.clone()).collect()
    };
    assert_eq!(paths("shop.a.test"), [PathMatch::Prefix("/api".into())], "still a's own prefix");
    assert!(matches!(paths("b.test")[..], [PathMatch::Regex(_)]), "b's own host takes its use-regex");
}

#[test]
fn no_certificate_and_no_acme_order_for_another_namespaces_host() {
    let tls = |secret: &str, host: &str| {
        json!({"ingressClassName": "wharf", "tls": [{"hosts": [host], "secretName": secret}],
               "rules": [rule(Some(host), json!([path("/", "Prefix", "web", json!({"number": 80}))]))]})
    };
    let mut w = world(vec![
        ing("a", "shop", 1, json!({}), tls("shop-tls", "shop.a.test")),
        // A new Secret name: Wharf would order shop.a.test into b's Secret.
        ing("b", "order", 2, json!({}), tls("stolen", "shop.a.test")),
        // A Secret of b's own holding a certificate for a's host.
        ing("b", "cert", 3, json!({}), tls("b-cert", "shop.a.test")),
    ]);
    let mut a_secret = tls_secret("shop-tls", &["shop.a.test"]);
    a_secret.metadata.namespace = Some("a".into());
    let mut b_secret = tls_secret("b-cert", &["shop.a.test"]);
    b_secret.metadata.namespace = Some("b".into());
    w.secrets.push(a_secret);
    w.secrets.push(b_secret);
    let mut o = opts();
    o.acme.issuers = vec!["le".into()];
    let t = translate(&w, &o, None);
    let orders: Vec<String> = t.acme.iter().map(|d| d.id()).collect();
    assert!(orders.is_empty(), "ordered: {orders:?}");
    let certs: Vec<(String, String)> =
        t.snapshot.tls_hosts.iter().map(|h| (h.host.to_string(), h.certificate.clone())).collect();
    assert_eq!(certs, [("shop.a.test".to_owned(), "a/shop-tls".to_owned())]);
    let d: Vec<String> = owned_diags(&t).into_iter().map(|(o, m)| format!("{o}: {m}")).collect();
    assert_eq!(d.len(), 4, "a TLS host and a host each: {d:?}");
    assert!(d.iter().any(|m| m.starts_with("b/order: TLS host shop.a.test belongs to namespace a")), "{d:?}");
}

#[test]
fn rules_without_host_and_passthrough_hosts_have_one_owner_too() {
    let pass = json!({"nginx.ingress.kubernetes.io/ssl-passthrough": "true"});
    let w = world(vec![
        ing("a", "any", 1, json!({}), spec(None, "/", "web")),
        ing("b", "any", 2, json!({}), spec(None, "/other", "evil")),
        ing("a", "db", 3, pass.clone(), spec(Some("db.a.test"), "/", "db")),
        ing("b", "db", 4, pass, spec(Some("db.a.test"), "/", "evil")),
    ]);
    let t = translate(&w, &opts(), None);
    assert_eq!(served(&t), [("*".to_owned(), vec!["a/any".to_owned()])]);
    let pass: Vec<String> =
        t.snapshot.passthrough.iter().map(|p| format!("{} {}", p.host, p.source.namespace)).collect();
    assert_eq!(pass, ["db.a.test a"]);
    let d = owned_diags(&t);
    assert_eq!(d.len(), 2, "{d:?}");
    assert!(
        d[0].1.starts_with("passthrough host db.a.test belongs to namespace a")
            || d[1].1.starts_with("passthrough host db.a.test"),
        "{d:?}"
    );
    assert!(d.iter().any(|(_, m)| m.starts_with("host * (rules without host) belongs to namespace a")), "{d:?}");
}

#[test]
fn a_www_redirect_never_lands_on_a_host_another_namespace_claims() {
    let www = json!({"nginx.ingress.kubernetes.io/from-to-www-redirect": "true"});
    // b asks for www.a.test -> a.test (its own, say); a already claims www.a.test by TLS only.
    let w = world(vec![
        ing(
            "a",
            "tls-only",
            1,
            json!({}),
            json!({"ingressClassName": "wharf", "tls": [{"hosts": ["www.a.test"], "secretName": "x"}]}),
        ),
        ing("b", "apex", 2, www, spec(Some("a.test"), "/", "evil")),
    ]);
    let t = translate(&w, &opts(), None);
    let hosts: Vec<String> = served(&t).into_iter().map(|(h, _)| h).collect();
    assert_eq!(hosts, ["a.test"], "no redirect for www.a.test");
}

#[test]
fn a_server_alias_never_serves_a_host_another_namespace_claims() {
    let alias = json!({"nginx.ingress.kubernetes.io/server-alias": "www.a.test, shop.a.test, own.b.test"});
    // a claims www.a.test by TLS only and serves shop.a.test; b aliases both to its host.
    let w = world(vec![
        ing(
            "a",
            "tls-only",
            1,
            json!({}),
            json!({"ingressClassName": "wharf", "tls": [{"hosts": ["www.a.test"], "secretName": "x"}]}),
        ),
        ing("a", "shop", 2, json!({}), spec(Some("shop.a.test"), "/", "web")),
        ing("b", "apex", 3, alias, spec(Some("b.test"), "/", "evil")),
    ]);
    let t = translate(&w, &opts(), None);
    let hosts: Vec<(String, Vec<String>)> = served(&t);
    assert_eq!(
        hosts,
        [
            ("b.test".to_owned(), vec!["b/apex".to_owned()]),
            ("own.b.test".to_owned(), vec!["b/apex".to_owned()]),
            ("shop.a.test".to_owned(), vec!["a/shop".to_owned()]),
        ]
    );
    let d = owned_diags(&t);
    assert!(d.iter().any(|(_, m)| m.starts_with("server-alias www.a.test belongs to namespace a")), "{d:?}");
}

#[test]
fn an_older_ingress_edited_to_name_a_served_host_takes_nothing() {
    // b's Ingress is the oldest of all, but names a's host only after a serves it.
    let before = world(vec![
        ing("b", "old", 1, json!({}), spec(Some("own.b.test"), "/", "web")),
        ing("a", "shop", 2, json!({}), spec(Some("shop.a.test"), "/", "web")),
    ]);
    let first = translate(&before, &opts(), None);
    let edited = |b_host: &str| {
        let b = json!({"ingressClassName": "wharf", "rules": [
            rule(Some("own.b.test"), json!([path("/", "Prefix", "web", json!({"number": 80}))])),
            rule(Some(b_host), json!([path("/", "Prefix", "evil", json!({"number": 80}))])),
        ]});
        world(vec![
            ing("b", "old", 1, json!({}), b),
            ing("a", "shop", 2, json!({}), spec(Some("shop.a.test"), "/", "web")),
        ])
    };
    let after = edited("shop.a.test");
    let held = translate(&after, &opts(), Some(&first.snapshot));
    let shop = |t: &Translation| served(t).into_iter().find(|(h, _)| h == "shop.a.test").map(|(_, r)| r);
    assert_eq!(shop(&held), Some(vec!["a/shop".to_owned()]), "a serves shop.a.test, so a keeps it");
    assert_eq!(owned_diags(&held).len(), 1, "{:?}", owned_diags(&held));
    assert!(owned_diags(&held)[0].1.starts_with("host shop.a.test belongs to namespace a"));
    // The incremental translation of the change decides the same.
    let mut parts = incremental::Incremental::default();
    let _ = parts.translate(&before, &opts(), None, &crate::changes::Changes::everything());
    let changed = crate::changes::Changes {
        ingresses: [("b".into(), "old".into())].into(),
        ..crate::changes::Changes::default()
    };
    let t = parts.translate(&after, &opts(), Some(&first.snapshot), &changed);
    assert_eq!(shop(&t), Some(vec!["a/shop".to_owned()]));
    // Nobody serving the host (a fresh start): age decides.
    assert_eq!(shop(&translate(&after, &opts(), None)), Some(vec!["b/old".to_owned()]));
    // A wildcard b names after a serves a name under it does not take that name either.
    let wild = translate(&edited("*.a.test"), &opts(), Some(&first.snapshot));
    assert_eq!(shop(&wild), Some(vec!["a/shop".to_owned()]));
    // Once a's Ingress is gone and a serves nothing there, b may have it.
    let gone = world(vec![ing("b", "old", 1, json!({}), spec(Some("shop.a.test"), "/", "evil"))]);
    let t = translate(&gone, &opts(), Some(&held.snapshot));
    assert_eq!(shop(&t), Some(vec!["b/old".to_owned()]));
}

#[test]
fn the_holder_of_a_tls_only_host_is_its_secrets_namespace() {
    let mut w = world(vec![ing(
        "c",
        "tls-only",
        1,
        json!({}),
        json!({"ingressClassName": "wharf", "tls": [{"hosts": ["x.c.test"], "secretName": "x"}]}),
    )]);
    let mut secret = tls_secret("x", &["x.c.test"]);
    secret.metadata.namespace = Some("c".into());
    w.secrets.push(secret);
    let t = translate(&w, &opts(), None);
    assert_eq!(owners::holder(&t.snapshot, &Host::parse("x.c.test").unwrap()), Some("c"));
    assert_eq!(owners::holder(&t.snapshot, &Host::parse("y.c.test").unwrap()), None);
}

#[test]
fn an_auth_url_reaches_only_its_own_namespaces_hosts_and_shared_services() {
    let checked = |ns: &str, name: &str, age: u32, host: &str, url: &str| {
        ing(ns, name, age, json!({"nginx.ingress.kubernetes.io/auth-url": url}), spec(Some(host), "/", "web"))
    };
    let mut w = world(vec![
        ing("a", "admin", 1, json!({}), spec(Some("admin.a.test"), "/", "admin")),
        // b's check names a's host: refused.
        checked("b", "host", 2, "b.test", "http://admin.a.test/api$request_uri"),
        // b shares a's host name by a rule of its own, still refused (a owns it).
        checked("b", "shared", 3, "admin.a.test", "http://admin.a.test/api"),
        // b's check names a Service of namespace a: refused without a grant.
        checked("b", "svc", 4, "svc.b.test", "http://admin.a.svc/api"),
        // ... and admitted to the one a grants to b's Ingresses.
        checked("b", "granted", 5, "granted.b.test", "http://sso.a.svc/check"),
        // a's own check to its own host.
        checked("a", "own", 6, "own.a.test", "http://admin.a.test/check"),
    ]);
    w.reference_grants.push(super::tests::obj::<wharf_gateway_api::referencegrants::ReferenceGrant>(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ReferenceGrant",
        "metadata": {"name": "sso", "namespace": "a"},
        "spec": {"from": [{"group": "networking.k8s.io", "kind": "Ingress", "namespace": "b"}],
                 "to": [{"group": "", "kind": "Service", "name": "sso"}]},
    })));
    let t = translate(&w, &opts(), None);
    let auth = |host: &str| {
        let vh = t.snapshot.virtual_hosts.get(&Host::parse(host).unwrap()).unwrap();
        match vh.routes[0].auth.as_deref() {
            Some(wharf_model::Auth::External(e)) => e.cluster.clone().unwrap_or_else(|| "routed".into()),
            Some(wharf_model::Auth::Unavailable(why)) => format!("503 {why}"),
            other => format!("{other:?}"),
        }
    };
    assert!(auth("b.test").starts_with("503 auth-url host admin.a.test belongs to namespace a"), "{}", auth("b.test"));
    assert!(auth("svc.b.test").starts_with("503 auth-url names Service a/admin, of another namespace"));
    assert_eq!(auth("granted.b.test"), "a/sso:80");
    assert_eq!(auth("own.a.test"), "routed");
    let refused: Vec<String> = t
        .diagnostics
        .iter()
        .filter(|d| d.reason == ingress::auth::AUTH_URL_NOT_PERMITTED)
        .map(|d| format!("{}/{}", d.object.namespace, d.object.name))
        .collect();
    assert_eq!(refused, ["b/host", "b/shared", "b/svc"]);
}

#[test]
fn endpoints_of_another_namespace_or_no_workloads_address_are_not_dialed() {
    use super::tests::{service, slice};
    let mut w = world(vec![ing("web", "app", 1, json!({}), spec(Some("app.test"), "/", "app"))]);
    w.services.push(service("app", json!([{"name": "http", "port": 80}])));
    let pod = |ns: &str, name: &str| json!({"kind": "Pod", "namespace": ns, "name": name});
    w.endpoint_slices = vec![slice(
        "app",
        "http",
        8080,
        json!([
            {"addresses": ["10.0.0.1"], "targetRef": pod("web", "mine")},
            {"addresses": ["10.0.0.2"], "targetRef": pod("a", "theirs")},
            {"addresses": ["10.0.0.3"]},
            {"addresses": ["127.0.0.1"]},
            {"addresses": ["169.254.169.254"]},
            {"addresses": ["224.0.0.1"]},
            {"addresses": ["0.0.0.0"]},
        ]),
    )]
    .into();
    let t = translate(&w, &opts(), None);
    let dialed: Vec<String> = t.snapshot.clusters["web/app:80"].endpoints.iter().map(|e| e.addr.to_string()).collect();
    assert_eq!(dialed, ["10.0.0.1:8080", "10.0.0.3:8080", "127.0.0.1:8080"]);
    let d: Vec<&Diagnostic> = t.diagnostics.iter().filter(|d| d.reason == backend::ENDPOINT_REFUSED).collect();
    assert_eq!(d.len(), 1, "{:?}", t.diagnostics);
    assert_eq!(d[0].object.name, "app");
    assert_eq!(
        d[0].message,
        "Service web/app: endpoints not dialed: 0.0.0.0 is link-local, multicast or unspecified: no workload has it; \
         10.0.0.2 names Pod a/theirs, of another namespace; 169.254.169.254 is link-local, multicast or unspecified: \
         no workload has it; 224.0.0.1 is link-local, multicast or unspecified: no workload has it"
    );
}

#[test]
fn acme_orders_only_into_the_namespaces_the_operator_lists() {
    let tls = |ns: &str, host: &str| {
        let s = json!({"ingressClassName": "wharf", "tls": [{"hosts": [host], "secretName": "site-tls"}],
                       "rules": [rule(Some(host), json!([path("/", "Prefix", "web", json!({"number": 80}))]))]});
        ing(ns, "site", 1, json!({}), s)
    };
    let w = world(vec![tls("shop", "shop.test"), tls("blog", "blog.test")]);
    let mut o = opts();
    o.acme.issuers = vec!["le".into()];
    let everywhere = translate(&w, &o, None);
    let ids = |t: &Translation| t.acme.iter().map(|d| d.id()).collect::<Vec<_>>();
    assert_eq!(ids(&everywhere), ["blog/site-tls", "shop/site-tls"], "no list: any namespace");
    o.acme.namespaces = vec!["shop".into()];
    let listed = translate(&w, &o, None);
    assert_eq!(ids(&listed), ["shop/site-tls"]);
    let d: Vec<String> = listed
        .diagnostics
        .iter()
        .filter(|d| d.reason == acme::ACME_NAMESPACE_NOT_ALLOWED)
        .map(|d| format!("{}/{}: {}", d.object.namespace, d.object.name, d.message))
        .collect();
    assert_eq!(
        d,
        ["blog/site: no certificate is ordered for Secret blog/site-tls: the operator lets ACME write Secrets of \
          namespaces shop only (--acme-namespace, chart value controller.acme.namespaces)"]
    );
}

#[test]
fn after_a_restart_the_record_keeps_the_owner_an_edited_old_ingress_would_take() {
    let b_old = json!({"ingressClassName": "wharf", "rules": [
        rule(Some("own.b.test"), json!([path("/", "Prefix", "web", json!({"number": 80}))])),
        rule(Some("shop.a.test"), json!([path("/", "Prefix", "evil", json!({"number": 80}))])),
    ]});
    let mut w = world(vec![
        ing("b", "old", 1, json!({}), b_old),
        ing("a", "shop", 2, json!({}), spec(Some("shop.a.test"), "/", "web")),
    ]);
    let record = |ns: &str, name: &str, text: &str| {
        super::tests::obj::<k8s_openapi::api::core::v1::ConfigMap>(json!({
            "metadata": {"name": name, "namespace": ns}, "data": {"owners": text}}))
    };
    w.config_maps.push(record("wharf", "wharf-leader-host-owners", "shop.a.test a\n"));
    // A tenant's own "record" is nobody's word.
    w.config_maps.push(record("b", "wharf-leader-host-owners", "own.b.test b\nshop.a.test b\n"));
    let shop = |t: &Translation| served(t).into_iter().find(|(h, _)| h == "shop.a.test").map(|(_, r)| r);
    let mut o = opts();
    assert_eq!(shop(&translate(&w, &o, None)), Some(vec!["b/old".to_owned()]), "without the record, age decides");
    o.ownership.record = Some(("wharf".into(), "wharf-leader-host-owners".into()));
    let t = translate(&w, &o, None);
    assert_eq!(shop(&t), Some(vec!["a/shop".to_owned()]), "the record keeps a");
    assert_eq!(owners::record(&t.snapshot), "own.b.test b\nshop.a.test a\n", "and the next record says so");
    o.ownership.record = Some(("b".into(), "wharf-leader-host-owners".into()));
    assert_eq!(
        shop(&translate(&w, &o, None)),
        Some(vec!["b/old".to_owned()]),
        "b's own ConfigMap is read only where named"
    );
}
