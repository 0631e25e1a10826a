//! Translation by parts: random worlds changed one object at a time, translated by the
//! parts a change touches, afresh by parts, and whole (all Ingresses one part, as
//! [`translate`] does), must agree.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use serde_json::{json, Map, Value};

use crate::changes::{Changes, Read};
use crate::translate::incremental::Incremental;
use crate::translate::tests::{class, ingress, obj, path, rule, secret, service, slice, tls_secret};
use crate::translate::*;

const HOSTS: [&str; 7] =
    ["a.example.com", "b.example.com", "www.a.example.com", "*.example.com", "c.test", "www.c.test", "bad_host!"];
const SERVICES: [&str; 3] = ["app", "h2", "missing"];
const SECRETS: [&str; 4] = ["s1", "s2", "bad", "nosuch"];

struct Gen {
    rng: fastrand::Rng,
}

impl Gen {
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.rng.usize(..from.len())]
    }

    fn chance(&mut self, percent: u8) -> bool {
        self.rng.u8(..100) < percent
    }

    fn ingress(&mut self, name: &str) -> Ingress {
        let mut rules = Vec::new();
        for _ in 0..self.rng.usize(1..=2) {
            let mut paths = Vec::new();
            for _ in 0..self.rng.usize(1..=2) {
                let p = self.pick(&["/", "/x", "/x/y"]);
                let ty = self.pick(&["Prefix", "Exact", "ImplementationSpecific"]);
                let port = match self.rng.u8(..3) {
                    0 => json!({"number": 80}),
                    1 => json!({"number": 81}),
                    _ => json!({"name": "http"}),
                };
                paths.push(path(p, ty, self.pick(&SERVICES), port));
            }
            let host = if self.chance(10) { None } else { Some(self.pick(&HOSTS)) };
            rules.push(rule(host, Value::Array(paths)));
        }
        let mut spec = json!({"ingressClassName": if self.chance(90) { "wharf" } else { "nginx" }, "rules": rules});
        if self.chance(50) {
            let hosts: Vec<&str> = (0..self.rng.usize(0..=2)).map(|_| self.pick(&HOSTS)).collect();
            spec["tls"] = json!([{"hosts": hosts, "secretName": self.pick(&SECRETS)}]);
        }
        if self.chance(10) {
            spec["defaultBackend"] = json!({"service": {"name": self.pick(&SERVICES), "port": {"number": 80}}});
        }
        let mut ann = Map::new();
        let mut set = |k: &str, v: &str| {
            ann.insert(format!("nginx.ingress.kubernetes.io/{k}"), Value::from(v));
        };
        let settings: [(u8, &[(&str, &str)]); 13] = [
            (10, &[("canary", "true"), ("canary-weight", "30")]),
            (5, &[("canary", "true"), ("canary-by-header", "x-canary")]),
            (10, &[("use-regex", "true")]),
            (15, &[("from-to-www-redirect", "true")]),
            (10, &[("server-alias", "c.test, www.a.example.com, x.example.com")]),
            (10, &[("force-ssl-redirect", "true")]),
            (10, &[("ssl-redirect", "false")]),
            (5, &[("app-root", "/app")]),
            (10, &[("auth-type", "basic"), ("auth-secret", "users")]),
            (5, &[("default-backend", "app")]),
            (3, &[("auth-url", "http://auth.web.svc.cluster.local/check")]),
            (5, &[("ssl-passthrough", "true")]),
            (5, &[("backend-protocol", "HTTPS")]),
        ];
        for (percent, pairs) in settings {
            if self.rng.u8(..100) < percent {
                pairs.iter().for_each(|(k, v)| set(k, v));
            }
        }
        ingress(name, self.rng.u32(..4), Value::Object(ann), spec)
    }
}

/// The objects of a world, by name, with the certificates and variants changes pick from.
struct Objects {
    ingresses: BTreeMap<String, Ingress>,
    secrets: BTreeMap<String, Secret>,
    services: BTreeMap<String, Service>,
    slices: BTreeMap<String, EndpointSlice>,
    /// Namespace `web` is in the ambient mesh.
    ambient: bool,
    /// The endpoints' Pods, by address: opted out of the mesh or not.
    pods: BTreeMap<&'static str, bool>,
    variants: BTreeMap<&'static str, Vec<Option<Secret>>>,
}

impl Objects {
    fn new() -> Objects {
        let users = |v: &str| {
            obj::<Secret>(json!({"metadata": {"name": "users", "namespace": "web"}, "data": {"auth": b64(v)}}))
        };
        let bad = secret("bad", "not a certificate", "not a key");
        let variants = BTreeMap::from([
            (
                "s1",
                vec![Some(tls_secret("s1", &["a.example.com", "*.example.com"])), Some(tls_secret("s1", &["c.test"]))],
            ),
            ("s2", vec![Some(tls_secret("s2", &["b.example.com", "www.c.test"])), None]),
            ("bad", vec![Some(bad), Some(tls_secret("bad", &["c.test"])), None]),
            ("users", vec![Some(users("alice:{PLAIN}a\n")), Some(users("bob:nonsense\n")), None]),
        ]);
        let secrets = variants.iter().filter_map(|(k, v)| Some((k.to_string(), v[0].clone()?))).collect();
        let services = [
            service("app", json!([{"name": "http", "port": 80}])),
            service("h2", json!([{"port": 81, "appProtocol": "kubernetes.io/h2c"}])),
        ];
        let services = services.into_iter().map(|s| (s.metadata.name.clone().unwrap_or_default(), s)).collect();
        let slices = BTreeMap::from([("app".to_owned(), endpoints(&["10.0.0.1"]))]);
        let pods = BTreeMap::from([("10.0.0.1", false), ("10.0.0.2", false), ("10.0.0.3", false)]);
        Objects { ingresses: BTreeMap::new(), secrets, services, slices, ambient: false, pods, variants }
    }

    fn world(&self) -> World {
        World {
            ingress_classes: vec![
                class("wharf", "wharf.dev/ingress-controller", false),
                class("nginx", "k8s.io/ingress-nginx", false),
            ]
            .into(),
            ingresses: self.ingresses.values().cloned().collect(),
            // Secrets no Ingress names, enough that a translation of a few parts searches
            // the objects where they are (in key order); the references below look them
            // up through maps, so the two ways are compared too.
            secrets: self.secrets.values().cloned().chain((0..FILLER).map(filler)).collect(),
            services: self.services.values().cloned().collect(),
            endpoint_slices: self.slices.values().cloned().collect(),
            namespaces: vec![obj::<Namespace>(json!({"metadata": {"name": "web",
                "labels": if self.ambient { json!({"istio.io/dataplane-mode": "ambient"}) } else { json!({}) }}}))]
            .into(),
            pods: self
                .pods
                .iter()
                .map(|(ip, out)| {
                    let labels = if *out { json!({"istio.io/dataplane-mode": "none"}) } else { json!({}) };
                    obj::<Pod>(json!({"metadata": {"name": format!("p-{ip}"), "namespace": "web", "labels": labels},
                                      "spec": {"containers": [], "serviceAccountName": "app"}}))
                })
                .collect(),
            ..Default::default()
        }
    }

    /// Makes one random change and says what it changed.
    fn change(&mut self, g: &mut Gen) -> Changes {
        let mut changes = Changes::default();
        let key = |name: &str| ("web".to_owned(), name.to_owned());
        match g.rng.u8(..12) {
            0..=4 => {
                let name = format!("i{}", g.rng.u8(..8));
                self.ingresses.insert(name.clone(), g.ingress(&name));
                changes.ingresses.insert(key(&name));
            }
            5 => {
                let name = format!("i{}", g.rng.u8(..8));
                self.ingresses.remove(&name);
                changes.ingresses.insert(key(&name));
            }
            6 => {
                let name = g.pick(&["s1", "s2", "bad", "users"]);
                let options = &self.variants[name];
                match options[g.rng.usize(..options.len())].clone() {
                    Some(s) => self.secrets.insert(name.to_owned(), s),
                    None => self.secrets.remove(name),
                };
                changes.reads.insert(Read::Secret(key(name)));
            }
            7 => {
                let name = g.pick(&SERVICES);
                match self.services.remove(name) {
                    Some(_) => {}
                    None => {
                        self.services.insert(name.to_owned(), service(name, json!([{"name": "http", "port": 80}])));
                    }
                }
                changes.reads.insert(Read::Service(key(name)));
            }
            8 => {
                let ips = ["10.0.0.1", "10.0.0.2", "10.0.0.3"];
                let chosen: Vec<&str> = ips.into_iter().filter(|_| g.chance(50)).collect();
                self.slices.insert("app".into(), endpoints(&chosen));
                changes.reads.insert(Read::Service(key("app")));
            }
            9 => {
                self.ambient = !self.ambient;
                changes.reads.insert(Read::Namespace("web".into()));
            }
            10 => {
                let ip = g.pick(&["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
                if let Some(out) = self.pods.get_mut(ip) {
                    *out = !*out;
                }
                changes.reads.insert(Read::Pod(key(&format!("p-{ip}"))));
            }
            _ => {}
        }
        changes
    }
}

/// How many Secrets no Ingress names a world holds besides its own.
const FILLER: usize = 300;

fn filler(i: usize) -> Secret {
    obj(json!({"metadata": {"name": format!("f{i:03}"), "namespace": "zz-unused"}, "type": "Opaque"}))
}

fn endpoints(ips: &[&str]) -> EndpointSlice {
    let eps: Vec<Value> = ips
        .iter()
        .map(|ip| {
            json!({"addresses": [ip], "conditions": {"ready": true},
                   "targetRef": {"kind": "Pod", "namespace": "web", "name": format!("p-{ip}")}})
        })
        .collect();
    slice("app", "http", 8080, Value::Array(eps))
}

fn b64(s: &str) -> String {
    serde_json::to_value(k8s_openapi::ByteString(s.as_bytes().to_vec())).unwrap().as_str().unwrap().to_owned()
}

fn same(got: &Translation, want: &Translation, what: &str) {
    assert_eq!(got.snapshot, want.snapshot, "{what}: snapshot");
    assert_eq!(got.diagnostics, want.diagnostics, "{what}: diagnostics");
    assert_eq!(got.ingresses, want.ingresses, "{what}: Ingresses served");
    assert_eq!(got.acme, want.acme, "{what}: ACME demands");
    assert_eq!(got.gateway_status, want.gateway_status, "{what}: Gateway API status");
}

fn opts(acme: bool) -> Options {
    let mut opts = Options { now: 1_800_000_000, ..Options::default() };
    if acme {
        opts.acme.issuers = vec!["le".into()];
    }
    opts
}

#[test]
fn translating_the_parts_a_change_touches_gives_what_translating_everything_gives() {
    for seed in 0..60 {
        let mut g = Gen { rng: fastrand::Rng::with_seed(seed) };
        let opts = opts(seed % 4 == 3);
        let mut objects = Objects::new();
        // Some of the runs with every Ingress and every object read under one hash.
        let mut parts = if seed % 5 == 4 { Incremental::colliding() } else { Incremental::default() };
        let mut last = parts.translate(&objects.world(), &opts, None, &Changes::everything());
        for step in 0..40 {
            let changes = objects.change(&mut g);
            let world = objects.world();
            assert!(
                crate::translate::incremental::search_in_place(&world, 8),
                "a change of up to 8 Ingresses searches in place"
            );
            let previous = Some(&*last.snapshot);
            let got = parts.translate(&world, &opts, previous, &changes);
            // The references look the objects up through maps: out of key order.
            let mut maps = world.clone();
            maps.secrets = world.secrets.iter().rev().cloned().collect();
            maps.services = world.services.iter().rev().cloned().collect();
            maps.pods = world.pods.iter().rev().cloned().collect();
            let fresh = Incremental::default().translate(&maps, &opts, previous, &Changes::everything());
            let whole = translate(&maps, &opts, previous);
            let what = format!("seed {seed} step {step} after {changes:?}");
            same(&got, &fresh, &what);
            same(&fresh, &whole, &format!("{what}, whole"));
            last = got;
        }
    }
}

#[test]
fn ingresses_of_one_hash_are_told_apart() {
    let mut objects = Objects::new();
    let opts = opts(false);
    let hosts = ["a.example.com", "b.example.com", "c.test"];
    for (i, host) in hosts.iter().enumerate() {
        let name = format!("i{i}");
        let spec = json!({"ingressClassName": "wharf", "rules": [rule(Some(host), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]});
        objects.ingresses.insert(name.clone(), ingress(&name, 0, json!({}), spec));
    }
    let mut parts = Incremental::colliding();
    parts.translate(&objects.world(), &opts, None, &Changes::everything());
    assert_eq!(parts.parts(), 3);
    let key = |name: &str| ("web".to_owned(), name.to_owned());
    assert!(!parts.hash_apart(&key("i0"), &key("i2")), "translating everything kept the hashes");
    // The last goes: its part goes, not the first part under the same hash.
    objects.ingresses.remove("i2");
    let changes = Changes { ingresses: [("web".into(), "i2".into())].into(), ..Changes::default() };
    let t = parts.translate(&objects.world(), &opts, None, &changes);
    assert_eq!((parts.parts(), parts.translated()), (2, 0));
    let served: Vec<String> = t.snapshot.virtual_hosts.iter().map(|vh| vh.host.to_string()).collect();
    assert_eq!(served, &hosts[..2]);
}

#[test]
fn keys_hash_apart() {
    let parts = Incremental::default();
    let key = |ns: &str, name: &str| (ns.to_owned(), name.to_owned());
    assert!(parts.hash_apart(&key("web", "a"), &key("web", "b")));
    assert!(parts.hash_apart(&key("web", "a"), &key("shop", "a")));
    assert!(!Incremental::colliding().hash_apart(&key("web", "a"), &key("web", "b")));
}

#[test]
fn a_change_translates_only_the_parts_it_touches() {
    let mut objects = Objects::new();
    let opts = opts(false);
    for (i, host) in ["a.example.com", "b.example.com", "c.test"].iter().enumerate() {
        let name = format!("i{i}");
        let spec = json!({"ingressClassName": "wharf", "rules": [rule(Some(host), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]});
        objects.ingresses.insert(name.clone(), ingress(&name, 0, json!({}), spec));
    }
    let mut parts = Incremental::default();
    parts.translate(&objects.world(), &opts, None, &Changes::everything());
    assert_eq!(parts.parts(), 3, "three hosts, three parts");
    assert_eq!(parts.translated(), 3);

    // A fourth Ingress on the first's host joins its part; the others are kept.
    let spec = json!({"ingressClassName": "wharf", "rules": [rule(Some("a.example.com"), json!([path("/x", "Prefix", "h2", json!({"number": 81}))]))]});
    objects.ingresses.insert("i3".into(), ingress("i3", 1, json!({}), spec));
    let changes = Changes { ingresses: [("web".into(), "i3".into())].into(), ..Changes::default() };
    let t = parts.translate(&objects.world(), &opts, None, &changes);
    assert_eq!((parts.parts(), parts.translated()), (3, 2), "i0 and i3 translated, together");
    assert_eq!(t.snapshot.virtual_hosts.first().unwrap().routes.len(), 2);

    // Every part reads Service app but i3's: a change to h2 translates only i0 and i3.
    let changes = Changes { reads: [Read::Service(("web".into(), "h2".into()))].into(), ..Changes::default() };
    parts.translate(&objects.world(), &opts, None, &changes);
    assert_eq!(parts.translated(), 2);
    let changes = Changes { reads: [Read::Service(("web".into(), "app".into()))].into(), ..Changes::default() };
    parts.translate(&objects.world(), &opts, None, &changes);
    assert_eq!(parts.translated(), 4);

    // Nothing of the Ingresses changed (a Gateway did): nothing is translated again.
    parts.translate(&objects.world(), &opts, None, &Changes::default());
    assert_eq!(parts.translated(), 0);
    // A resync translates everything again.
    parts.translate(&objects.world(), &opts, None, &Changes::everything());
    assert_eq!((parts.parts(), parts.translated()), (3, 4));

    // Changed over and over, the lookups to parts gone are dropped now and then.
    let bound = parts.lookups() * 3;
    for round in 0..50 {
        let spec = json!({"ingressClassName": "wharf", "rules": [rule(Some("a.example.com"), json!([path(&format!("/{round}"), "Prefix", "h2", json!({"number": 81}))]))]});
        objects.ingresses.insert("i3".into(), ingress("i3", 1, json!({}), spec));
        let changes = Changes { ingresses: [("web".into(), "i3".into())].into(), ..Changes::default() };
        parts.translate(&objects.world(), &opts, None, &changes);
        assert!(parts.lookups() <= bound, "round {round}: {} lookups", parts.lookups());
    }

    let mut whole = Incremental::whole();
    whole.translate(&objects.world(), &opts, None, &Changes::everything());
    assert_eq!(whole.parts(), 1, "whole: one part");
}

#[test]
fn a_certificate_and_a_cluster_many_parts_hold_stay_until_the_last_goes() {
    let mut objects = Objects::new();
    let opts = opts(false);
    let hosts = ["a.example.com", "b.example.com", "x.example.com", "y.example.com"];
    for (i, host) in hosts.iter().enumerate() {
        let name = format!("i{i}");
        let spec = json!({"ingressClassName": "wharf", "tls": [{"hosts": [host], "secretName": "s1"}],
                          "rules": [rule(Some(host), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]});
        objects.ingresses.insert(name.clone(), ingress(&name, 0, json!({}), spec));
    }
    let mut parts = Incremental::default();
    let mut last = parts.translate(&objects.world(), &opts, None, &Changes::everything());
    assert_eq!(parts.parts(), 4, "four hosts, four parts, one certificate and one cluster");
    for (i, _) in hosts.iter().enumerate() {
        let name = format!("i{i}");
        objects.ingresses.remove(&name);
        let changes = Changes { ingresses: [("web".into(), name.clone())].into(), ..Changes::default() };
        let got = parts.translate(&objects.world(), &opts, Some(&last.snapshot), &changes);
        let fresh = translate(&objects.world(), &opts, Some(&last.snapshot));
        same(&got, &fresh, &format!("{name} gone"));
        let held = (got.snapshot.certificates.len(), got.snapshot.clusters.len());
        assert_eq!(held, if i + 1 < hosts.len() { (1, 1) } else { (0, 0) }, "{name} gone");
        last = got;
    }
}

#[test]
fn changes_gather_until_translated() {
    let key = |n: &str| ("web".to_owned(), n.to_owned());
    let mut c = Changes { ingresses: [key("a")].into(), ..Changes::default() };
    c.extend(Changes { reads: [Read::Secret(key("s"))].into(), ..Changes::default() });
    assert!(!c.all);
    assert_eq!((c.ingresses.len(), c.reads.len()), (1, 1));
    c.extend(Changes::everything());
    assert!(c.all);
    c.extend(Changes::default());
    assert!(c.all, "everything stays everything");
}

#[test]
fn a_part_is_translated_again_once_a_certificate_it_serves_expires() {
    let mut objects = Objects::new();
    let mut params = rcgen::CertificateParams::new(vec!["a.example.com".to_owned()]).unwrap();
    params.not_after = rcgen::date_time_ymd(2027, 1, 1);
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert = params.self_signed(&key).unwrap();
    objects.secrets.insert("short".into(), secret("short", &cert.pem(), &key.serialize_pem()));
    let spec = json!({"ingressClassName": "wharf", "tls": [{"hosts": ["a.example.com"], "secretName": "short"}],
                      "rules": [rule(Some("a.example.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]});
    objects.ingresses.insert("i0".into(), ingress("i0", 0, json!({}), spec));
    // Another part, whose certificate lasts longer.
    params.not_after = rcgen::date_time_ymd(2028, 1, 1);
    params.subject_alt_names = vec![rcgen::SanType::DnsName("b.example.com".try_into().unwrap())];
    let long = params.self_signed(&key).unwrap();
    objects.secrets.insert("long".into(), secret("long", &long.pem(), &key.serialize_pem()));
    let spec = json!({"ingressClassName": "wharf", "tls": [{"hosts": ["b.example.com"], "secretName": "long"}],
                      "rules": [rule(Some("b.example.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]});
    objects.ingresses.insert("i1".into(), ingress("i1", 1, json!({}), spec));
    let mut opts = opts(false);
    opts.now = 1_790_000_000; // 2026-09
    let mut parts = Incremental::default();
    let before = parts.translate(&objects.world(), &opts, None, &Changes::everything());
    assert!(before.diagnostics.is_empty(), "{:?}", before.diagnostics);

    opts.now = 1_798_761_600; // 2027-01-01, the last second it is valid
    parts.translate(&objects.world(), &opts, Some(&before.snapshot), &Changes::default());
    assert_eq!(parts.translated(), 0);

    opts.now = 1_800_000_000; // 2027-01-15
    let after = parts.translate(&objects.world(), &opts, Some(&before.snapshot), &Changes::default());
    assert_eq!(parts.translated(), 1, "only the part whose certificate expired");
    let reasons: Vec<&str> = after.diagnostics.iter().map(|d| d.reason.as_str()).collect();
    assert_eq!(reasons, ["CertificateExpired"]);
    same(&after, &translate(&objects.world(), &opts, Some(&before.snapshot)), "expired");
}

#[test]
fn few_lookups_search_the_objects_where_they_are_many_build_maps() {
    use crate::translate::incremental::search_in_place;
    let mut w = World::default();
    for i in 0..96 {
        w.secrets.push(secret(&format!("s{i:03}"), "", ""));
    }
    assert!(search_in_place(&w, 2), "2 x 32 < 96");
    assert!(!search_in_place(&w, 3), "3 x 32 is not below 96");
    assert!(!search_in_place(&w, usize::MAX));
    let mut services = World::default();
    for i in 0..96 {
        services.services.push(service(&format!("a{i:03}"), json!([{"port": 80}])));
    }
    services.secrets.push(secret("one", "", ""));
    assert!(search_in_place(&services, 2), "the larger of Secrets and Services counts");
    // The Gateway API routes look up as well (translated whole each time).
    let route = |kind: &str| {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": kind,
        "metadata": {"name": "r", "namespace": "web"}, "spec": {"rules": [], "hostnames": []}})
    };
    for kind in ["HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute"] {
        let mut with = w.clone();
        for _ in 0..2 {
            match kind {
                "HTTPRoute" => with.http_routes.push(obj::<wharf_gateway_api::httproutes::HttpRoute>(route(kind))),
                "GRPCRoute" => with.grpc_routes.push(obj::<wharf_gateway_api::grpcroutes::GrpcRoute>(route(kind))),
                "TLSRoute" => with.tls_routes.push(obj::<wharf_gateway_api::tlsroutes::TlsRoute>(route(kind))),
                _ => with.tcp_routes.push(obj::<wharf_gateway_api::tcproutes::TcpRoute>(route(kind))),
            }
        }
        assert!(!search_in_place(&with, 1), "{kind}: (1 + 2) x 32 is not below 96");
        assert!(search_in_place(&with, 0), "{kind}: 2 x 32 < 96");
    }
}

#[test]
fn our_ingresses_are_found_by_key_with_a_missing_namespace_taken_as_default() {
    use crate::translate::class::Classes;
    use crate::translate::incremental::Ours;
    let ours_in = |name: &str, namespace: Option<&str>, class: &str| {
        let mut ing = ingress(name, 0, json!({}), json!({"ingressClassName": class, "rules": []}));
        ing.metadata.namespace = namespace.map(str::to_owned);
        ing
    };
    let mut w = World::default();
    w.ingress_classes.push(class("wharf", "wharf.dev/ingress-controller", false));
    // In key order: a missing namespace is the empty one.
    w.ingresses.push(ours_in("bare", None, "wharf"));
    w.ingresses.push(ours_in("a", Some("default"), "wharf"));
    w.ingresses.push(ours_in("b", Some("web"), "wharf"));
    w.ingresses.push(ours_in("other", Some("web"), "nginx"));
    let opts = opts(false);
    let classes = Classes::new(&w.ingress_classes, &opts);
    let name = |i: Option<&crate::stored::Ingress>| i.and_then(|i| i.metadata.name.as_deref().map(str::to_owned));
    for many in [false, true] {
        let ours = Ours::new(&w, &classes, many);
        assert_eq!(name(ours.get("default", "bare")), Some("bare".into()), "many: {many}");
        assert_eq!(name(ours.get("", "bare")), None, "many: {many}");
        assert_eq!(name(ours.get("default", "a")), Some("a".into()), "many: {many}");
        assert_eq!(name(ours.get("web", "b")), Some("b".into()), "many: {many}");
        assert_eq!(name(ours.get("web", "other")), None, "another class's, many: {many}");
        assert_eq!(name(ours.get("web", "a")), None, "many: {many}");
        let mut all: Vec<_> = ours.all().map(|(k, _)| k).collect();
        all.sort();
        assert_eq!(all, [("default", "a"), ("default", "bare"), ("web", "b")], "many: {many}");
    }
}

#[test]
fn an_ingress_with_an_external_check_is_translated_again_when_the_host_it_names_comes() {
    let mut objects = Objects::new();
    let opts = opts(false);
    let ann = json!({"nginx.ingress.kubernetes.io/auth-url": "http://auth.example.com/check"});
    let spec = json!({"ingressClassName": "wharf", "rules": [rule(Some("a.example.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]});
    objects.ingresses.insert("checked".into(), ingress("checked", 0, ann, spec));
    let mut parts = Incremental::default();
    let first = parts.translate(&objects.world(), &opts, None, &Changes::everything());
    let not_served = |t: &Translation| t.diagnostics.iter().any(|d| d.reason == "AuthURLNotServed");
    assert!(not_served(&first), "no Ingress serves auth.example.com yet: {:?}", first.diagnostics);

    // The check's host comes: the checking Ingress, in another part until now, is
    // translated again with it.
    let spec = json!({"ingressClassName": "wharf", "rules": [rule(Some("auth.example.com"), json!([path("/", "Prefix", "app", json!({"number": 80}))]))]});
    objects.ingresses.insert("auth".into(), ingress("auth", 1, json!({}), spec));
    let changes = Changes { ingresses: [("web".into(), "auth".into())].into(), ..Changes::default() };
    let got = parts.translate(&objects.world(), &opts, None, &changes);
    assert!(!not_served(&got), "{:?}", got.diagnostics);
    assert_eq!(parts.translated(), 2);
    same(&got, &translate(&objects.world(), &opts, None), "after the check's host came");
}
