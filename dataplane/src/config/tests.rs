use super::*;
use crate::reasons::UpstreamError;
use crate::routing::{CompiledAction, RequestView};
use wharf_model::{Certificate, Cluster, Endpoint, Hosts, ObjectRef, PathMatch, Route, SniRoute, TlsHost, VirtualHost};

#[test]
fn istio_sni_subset_is_normalized() {
    assert_eq!(
        normalize_istio_sni("outbound_.8080_.v1_.reviews.default.svc.cluster.local").as_deref(),
        Some("outbound_.8080_._.reviews.default.svc.cluster.local")
    );
    assert_eq!(normalize_istio_sni("outbound_.x_.v1_.a").as_deref(), None);
    assert_eq!(normalize_istio_sni("example.com"), None);
}

fn compiler() -> Compiler {
    Compiler::new(
        Metrics::new(),
        Resumption::new(16).unwrap(),
        Default::default(),
        tls::fallback_certificate().unwrap(),
    )
}

fn host(h: &str) -> Host {
    match h {
        "" => Host::Any,
        // Istio's SNI names are not DNS names; the translator makes them exact hosts.
        _ if h.starts_with("outbound_.") => Host::Exact(h.to_owned()),
        _ => Host::parse(h).unwrap(),
    }
}

fn route(source: &str, path: PathMatch, cluster: &str) -> Route {
    Route::forward(path, cluster, ObjectRef::new("Ingress", "web", source))
}

/// The route a GET of `path` on `host` takes.
fn get<'c>(config: &'c CompiledConfig, host: &str, path: &str) -> Option<&'c CompiledRoute> {
    let headers = http::HeaderMap::new();
    config.edge.router.route(host, &RequestView { path, query: None, method: &http::Method::GET, headers: &headers })
}

fn upstream_id(r: &CompiledRoute) -> Option<&str> {
    match &r.action {
        CompiledAction::Forward(f) => f.pick().ok().map(|u| u.id.as_str()),
        _ => None,
    }
}

fn prefix(p: &str) -> PathMatch {
    PathMatch::prefix(p).unwrap()
}

fn cluster(port: u16) -> Cluster {
    Cluster {
        protocol: AppProtocol::Http1,
        endpoints: vec![Endpoint::direct(([127, 0, 0, 1], port).into())],
        tls: None,
    }
}

#[test]
fn hosts_asking_for_client_certificates_get_one_config_per_ca() {
    use wharf_model::{ClientAuthHost, ClientCa};
    let ca = |name: &str| {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        ClientCa { source: name.into(), certificates: vec![cert.der().clone()].into(), verify_depth: 1 }
    };
    let (one, two) = (ca("web/one"), ca("web/two"));
    let broken = ClientCa { source: "web/broken".into(), certificates: Vec::new().into(), verify_depth: 1 };
    let asks = |h: &str, ca: &ClientCa| ClientAuthHost { host: host(h), ca: ca.clone() };
    let snapshot = Snapshot {
        client_auth: vec![asks("a.com", &one), asks("*.b.com", &one), asks("c.com", &two), asks("d.com", &broken)],
        ..Default::default()
    };
    let config = compiler().compile(Arc::new(snapshot), 1, None).unwrap();
    let t = &config.edge;
    let of = |name: &str| t.client_auth_for(Some(name)).map(Arc::as_ptr);
    assert!(of("a.com").is_some() && of("a.com") == of("x.b.com"), "one CA, one config");
    assert_eq!(of("A.COM"), of("a.com"), "names in any case");
    assert!(of("c.com").is_some() && of("c.com") != of("a.com"));
    assert_eq!((of("d.com"), of("e.com"), t.client_auth_for(None).is_some()), (None, None, false));
    assert!(Arc::ptr_eq(t.tls_for(Some("e.com")), &t.tls) && Arc::ptr_eq(t.tls_for(None), &t.tls));
    assert!(!Arc::ptr_eq(t.tls_for(Some("a.com")), &t.tls));
    assert!(t.tls_for(Some("a.com")).send_tls13_tickets == 0, "no resumption where certificates are asked for");
    assert!(config.chooses_by_hello(t), "hosts asking for certificates choose by ClientHello");
    let hello = |port, sni| config.tls_for_hello(port, sni, std::iter::empty()).map(|c| Arc::as_ptr(&c));
    assert_eq!(hello(None, Some("a.com")), of("a.com"));
    assert_eq!(hello(None, Some("e.com")), Some(Arc::as_ptr(&t.tls)));
    assert_eq!(hello(Some(([127, 0, 0, 1], 1).into()), Some("a.com")), None, "a port gone");
    let plain = compiler().compile(Arc::new(Snapshot::default()), 1, None).unwrap();
    assert!(!plain.chooses_by_hello(&plain.edge), "one config for every ClientHello");
}

#[test]
fn routes_with_the_same_users_share_one_checker_and_an_external_check_its_cluster() {
    use wharf_model::{Auth, BasicAuth, ExternalAuth, PasswordHash, Template};
    let users: Arc<[(String, PasswordHash)]> = vec![("u".to_owned(), PasswordHash::Plain("p".into()))].into();
    let basic = |users: &Arc<[(String, PasswordHash)]>| {
        Some(Auth::Basic(BasicAuth { realm: String::new(), users: Arc::clone(users) }))
    };
    let copy: Arc<[(String, PasswordHash)]> = users.iter().cloned().collect::<Vec<_>>().into();
    let other: Arc<[(String, PasswordHash)]> = vec![("u".to_owned(), PasswordHash::Plain("q".into()))].into();
    let external =
        Auth::External(ExternalAuth::new(Template::parse("http://sso.a.svc/check").unwrap(), Some("c".into())));
    let with = |p: &str, auth: Option<Auth>| Route { auth: auth.map(Box::new), ..route("r", prefix(p), "c") };
    let snapshot = Snapshot {
        virtual_hosts: vec![VirtualHost {
            host: host("a.com"),
            routes: vec![
                with("/one", basic(&users)),
                with("/two", basic(&users)),
                with("/copy", basic(&copy)),
                with("/other", basic(&other)),
                with("/ext", Some(external)),
            ],
        }
        .into()]
        .into(),
        clusters: [("c".to_owned(), cluster(1))].into_iter().collect(),
        ..Default::default()
    };
    let config = compiler().compile(Arc::new(snapshot), 1, None).unwrap();
    let auth = |p: &str| get(&config, "a.com", p).and_then(|r| r.auth.clone()).unwrap();
    assert!(Arc::ptr_eq(&auth("/one"), &auth("/two")), "one Ingress's paths share what passed");
    assert!(Arc::ptr_eq(&auth("/one"), &auth("/copy")), "the same users, read again, too");
    assert!(!Arc::ptr_eq(&auth("/one"), &auth("/other")), "other users have their own");
    match &*auth("/ext") {
        crate::auth::CompiledAuth::External(e) => {
            assert_eq!(e.forward.as_ref().and_then(|f| f.pick().ok()).map(|u| u.id.as_str()), Some("c"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_most_specific_host_with_a_matching_path_wins_then_the_default_backend() {
    let vh = |h: &str, routes| Arc::new(VirtualHost { host: host(h), routes });
    let snapshot = Snapshot {
        virtual_hosts: vec![
            vh("a.com", vec![route("exact", prefix("/api"), "c")]),
            vh("*.a.com", vec![route("wildcard", prefix("/"), "c")]),
            vh("", vec![route("any-api", prefix("/api"), "c"), route("any", PathMatch::exact("/only").unwrap(), "c")]),
        ]
        .into(),
        default_backend: Some(route("default", prefix("/"), "c")),
        clusters: [("c".to_owned(), cluster(1))].into_iter().collect(),
        ..Default::default()
    };
    let config = compiler().compile(Arc::new(snapshot), 1, None).unwrap();
    let source = |h: &str, p: &str| get(&config, h, p).map(|r| r.source());
    assert_eq!(source("a.com", "/api/v1"), Some("web/exact"));
    assert_eq!(source("a.com", "/only"), Some("web/any"), "no path of the exact host matches: rules without host");
    assert_eq!(source("b.a.com", "/api"), Some("web/wildcard"), "the wildcard host before rules without host");
    assert_eq!(source("x.b.a.com", "/api"), Some("web/any-api"), "a wildcard covers one label");
    assert_eq!(source("other.com", "/elsewhere"), Some("web/default"));
    assert_eq!(get(&config, "a.com", "/api").and_then(upstream_id), Some("c"));

    let no_default = Snapshot {
        virtual_hosts: vec![vh("a.com", vec![route("exact", prefix("/api"), "c")])].into(),
        ..Default::default()
    };
    let config = compiler().compile(Arc::new(no_default), 1, None).unwrap();
    assert!(get(&config, "a.com", "/").is_none());
    assert!(get(&config, "a.com", "/api").is_some_and(|r| upstream_id(r).is_none()), "a missing cluster answers 503");
}

#[test]
fn passthrough_by_exact_sni_istio_name_or_wildcard() {
    let pt = |h: &str, c: &str| SniRoute::passthrough(host(h), c, ObjectRef::new("Ingress", "web", "p"));
    let snapshot = Snapshot {
        passthrough: vec![
            pt("db.example.com", "db"),
            pt("outbound_.5432_._.pg.data.svc.cluster.local", "pg"),
            pt("*.w.example.com", "w"),
            pt("ghost.example.com", "missing"),
        ],
        clusters: [("db".to_owned(), cluster(1)), ("pg".to_owned(), cluster(2)), ("w".to_owned(), cluster(3))]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    let config = compiler().compile(Arc::new(snapshot), 1, None).unwrap();
    // The cluster a connection goes to, or why none takes it.
    let id = |sni: &str| {
        let route = config.edge.passthrough.lookup(sni)?;
        assert!(!route.terminate);
        Some(route.forward.pick().map_or_else(|e| e.reason().to_owned(), |u| u.id.clone()))
    };
    assert_eq!(id("db.example.com").as_deref(), Some("db"));
    assert_eq!(id("outbound_.5432_.v2_.pg.data.svc.cluster.local").as_deref(), Some("pg"));
    assert_eq!(id("outbound_.5432_._.pg.data.svc.cluster.local").as_deref(), Some("pg"));
    assert_eq!(id("x.w.example.com").as_deref(), Some("w"));
    assert_eq!(id("w.example.com").as_deref(), None);
    assert_eq!(id("ghost.example.com").as_deref(), Some("no_endpoints"), "a route to a missing cluster closes");
    assert!(config.edge.tls_stream.is_none(), "nothing terminates");
}

/// Two certificates for one key, for changing one half of a Secret at a time.
fn two_certs_one_key() -> (String, String, String) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert =
        |name: &str| rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap().self_signed(&key).unwrap().pem();
    (cert("a.example.com"), cert("b.example.com"), key.serialize_pem())
}

fn with_cert(chain: &str, key: &str) -> Arc<Snapshot> {
    let cert = Certificate::from_pem(chain.as_bytes(), key.as_bytes(), 0).unwrap();
    Arc::new(Snapshot {
        certificates: [("web/cert".to_owned(), cert)].into_iter().collect(),
        tls_hosts: vec![TlsHost { host: host("a.example.com"), certificate: "web/cert".into() }].into(),
        ..Default::default()
    })
}

#[test]
fn a_certificate_is_served_as_validation_parsed_it_and_replaced_only_when_its_pem_changed() {
    let (a, b, key) = two_certs_one_key();
    let c = compiler();
    let snapshot = with_cert(&a, &key);
    let first = c.compile(Arc::clone(&snapshot), 1, None).unwrap();
    let served = |cfg: &CompiledConfig| Arc::clone(cfg.edge.sni.select(Some("a.example.com")).0);
    assert!(Arc::ptr_eq(&served(&first), &snapshot.certificates["web/cert"].key), "the key validation parsed");

    // The same PEM parsed again: the key served stays.
    let same = c.compile(with_cert(&a, &key), 2, Some(&first)).unwrap();
    assert!(Arc::ptr_eq(&served(&same), &served(&first)));
    // The chain changes, the key stays: the new certificate is served.
    let renewed = with_cert(&b, &key);
    let cfg = c.compile(Arc::clone(&renewed), 3, Some(&same)).unwrap();
    assert!(Arc::ptr_eq(&served(&cfg), &renewed.certificates["web/cert"].key));
    assert_ne!(served(&cfg).cert[0], served(&first).cert[0]);
}

#[test]
fn tls_hosts_that_change_are_patched_into_the_previous_sni_map() {
    let (a, b, key) = two_certs_one_key();
    let tls = |hosts: &[&str]| -> Hosts<TlsHost> {
        hosts.iter().map(|h| TlsHost { host: host(h), certificate: "web/cert".into() }).collect()
    };
    let c = compiler();
    let mut snapshot = (*with_cert(&a, &key)).clone();
    snapshot.tls_hosts = tls(&["one.example.com", "two.example.com", "*.w.example.com"]);
    let first = c.compile(Arc::new(snapshot.clone()), 1, None).unwrap();
    let cert = |cfg: &CompiledConfig, sni: &str| {
        let (ck, how) = cfg.edge.sni.select(Some(sni));
        (ck.cert[0].as_ref().to_vec(), how)
    };
    let fallback = cert(&first, "none.example.com");
    let served = cert(&first, "one.example.com");
    assert_ne!(served.0, fallback.0);

    snapshot.tls_hosts.remove(&host("one.example.com"));
    snapshot.tls_hosts.insert(TlsHost { host: host("three.example.com"), certificate: "web/cert".into() });
    let second = c.compile(Arc::new(snapshot.clone()), 2, Some(&first)).unwrap();
    assert_eq!(cert(&second, "one.example.com").0, fallback.0, "a host gone is no longer served");
    for sni in ["two.example.com", "three.example.com", "x.w.example.com"] {
        assert_eq!(cert(&second, sni).0, served.0, "{sni}");
    }
    assert_eq!(cert(&first, "one.example.com").0, served.0, "the previous config is left as it was");
    assert_eq!(cert(&first, "three.example.com").0, fallback.0);

    // A certificate renewed under the same id: every host naming it gets the new one.
    let mut renewed = (*with_cert(&b, &key)).clone();
    renewed.tls_hosts = snapshot.tls_hosts.clone();
    let third = c.compile(Arc::new(renewed), 3, Some(&second)).unwrap();
    let new = cert(&third, "two.example.com").0;
    assert_ne!(new, served.0);
    for sni in ["three.example.com", "x.w.example.com"] {
        assert_eq!(cert(&third, sni).0, new, "{sni}");
    }

    // A TLS host naming a certificate the snapshot lacks is refused, patched or not.
    snapshot.tls_hosts.insert(TlsHost { host: host("four.example.com"), certificate: "web/none".into() });
    let refused = c.compile(Arc::new(snapshot), 4, Some(&second)).err().map(|e| e.reason());
    assert_eq!(refused, Some("missing_certificate"));
}

#[test]
fn a_request_falls_through_only_to_hosts_and_a_default_backend_of_the_same_namespace() {
    use wharf_model::{GatewayPort, PortProtocol};
    let of = |ns: &str, name: &str, path: PathMatch| Route::forward(path, "c", ObjectRef::new("Ingress", ns, name));
    let vh = |h: &str, routes| Arc::new(VirtualHost { host: host(h), routes });
    let snapshot = Snapshot {
        virtual_hosts: vec![
            vh("docs.a.test", vec![of("a", "docs", prefix("/app"))]),
            vh("*.a.test", vec![of("a", "wild", prefix("/"))]),
            vh("api.b.test", vec![of("b", "api", prefix("/v1"))]),
            vh("", vec![of("b", "catch-all", prefix("/"))]),
        ]
        .into(),
        default_backend: Some(of("b", "default", prefix("/"))),
        clusters: [("c".to_owned(), cluster(1))].into_iter().collect(),
        ..Default::default()
    };
    let config = compiler().compile(Arc::new(snapshot.clone()), 1, None).unwrap();
    let source = |c: &CompiledConfig, h: &str, p: &str| get(c, h, p).map(|r| r.source().to_owned());
    assert_eq!(source(&config, "docs.a.test", "/app/x").as_deref(), Some("a/docs"));
    assert_eq!(source(&config, "docs.a.test", "/favicon.ico").as_deref(), Some("a/wild"), "a's own wildcard");
    assert_eq!(source(&config, "x.y.a.test", "/").as_deref(), Some("b/catch-all"), "no host of a covers it");
    assert_eq!(source(&config, "api.b.test", "/other").as_deref(), Some("b/catch-all"), "b's own rules without host");
    assert_eq!(source(&config, "nobody.test", "/").as_deref(), Some("b/catch-all"));

    // Without a's wildcard, a's host's other paths are a's alone: 404, not b's.
    let mut only_docs = snapshot.clone();
    only_docs.virtual_hosts.remove(&host("*.a.test"));
    let config = compiler().compile(Arc::new(only_docs.clone()), 1, None).unwrap();
    assert_eq!(source(&config, "docs.a.test", "/favicon.ico"), None, "b's rule without host");
    only_docs.virtual_hosts.remove(&Host::Any);
    let config = compiler().compile(Arc::new(only_docs), 1, None).unwrap();
    assert_eq!(source(&config, "docs.a.test", "/favicon.ico"), None, "b's default backend");
    assert_eq!(source(&config, "api.b.test", "/other").as_deref(), Some("b/default"), "b's own default backend");
    assert_eq!(source(&config, "nobody.test", "/").as_deref(), Some("b/default"), "a host nobody owns");

    // The edge Gateway's routes and the Ingress rules: the most specific host first,
    // whichever API it comes from, and no fall-through to another namespace.
    let edge = |virtual_hosts: Vec<Arc<VirtualHost>>| GatewayPort {
        gateway: ObjectRef::new("Gateway", "infra", "edge"),
        bind: ([0, 0, 0, 0], 8080).into(),
        listener_port: 80,
        edge: true,
        protocol: PortProtocol::Http,
        tls_hosts: vec![],
        virtual_hosts,
        passthrough: vec![],
        tcp: Vec::new(),
    };
    let route_of =
        |ns: &str, name: &str, path: PathMatch| Route::forward(path, "c", ObjectRef::new("HTTPRoute", ns, name));
    let with_edge = Snapshot {
        gateway_ports: vec![edge(vec![
            Arc::new(VirtualHost { host: Host::Any, routes: vec![route_of("b", "everything", prefix("/"))] }),
            Arc::new(VirtualHost {
                host: Host::parse_gateway("*.b.test").unwrap(),
                routes: vec![route_of("b", "wild", prefix("/x"))],
            }),
            Arc::new(VirtualHost { host: host("api.b.test"), routes: vec![route_of("b", "api", prefix("/v1"))] }),
        ])],
        ..snapshot
    };
    let config = compiler().compile(Arc::new(with_edge), 1, None).unwrap();
    let edge_get = |h: &str, p: &str| {
        let headers = http::HeaderMap::new();
        let view = RequestView { path: p, query: None, method: &http::Method::GET, headers: &headers };
        config.route(&config.edge, None, PortProtocol::Http, h, &view).map(|r| r.source().to_owned())
    };
    assert_eq!(edge_get("docs.a.test", "/app").as_deref(), Some("a/docs"), "a's exact host beats b's catch-all route");
    assert_eq!(edge_get("docs.a.test", "/other").as_deref(), Some("a/wild"));
    assert_eq!(edge_get("api.b.test", "/v1").as_deref(), Some("b/api"), "the edge Gateway first at equal specificity");
    assert_eq!(edge_get("y.b.test", "/x").as_deref(), Some("b/wild"));
    assert_eq!(edge_get("y.b.test", "/z").as_deref(), Some("b/catch-all"), "b's own less specific hosts");
    assert_eq!(edge_get("other.test", "/").as_deref(), Some("b/everything"));

    // The chart's edge Gateway: listeners without routes own nothing, so the Ingress
    // rules without host and the default backend still serve; a host shared on purpose
    // (`--merge-hosts-across-namespaces`) falls through as before.
    let mut bare = Snapshot {
        virtual_hosts: vec![vh("docs.a.test", vec![of("a", "docs", prefix("/app"))])].into(),
        default_backend: Some(of("b", "default", prefix("/"))),
        clusters: [("c".to_owned(), cluster(1))].into_iter().collect(),
        ..Default::default()
    };
    bare.gateway_ports = vec![edge(vec![
        Arc::new(VirtualHost { host: Host::Any, routes: vec![] }),
        Arc::new(VirtualHost { host: host("docs.a.test"), routes: vec![] }),
    ])];
    bare.virtual_hosts.insert(vh("", vec![of("b", "catch-all", prefix("/"))]));
    bare.virtual_hosts.insert(vh("shared.test", vec![of("a", "one", prefix("/one")), of("b", "two", prefix("/two"))]));
    let config = compiler().compile(Arc::new(bare.clone()), 1, None).unwrap();
    let edge_get = |c: &CompiledConfig, h: &str, p: &str| {
        let headers = http::HeaderMap::new();
        let view = RequestView { path: p, query: None, method: &http::Method::GET, headers: &headers };
        c.route(&c.edge, None, PortProtocol::Http, h, &view).map(|r| r.source().to_owned())
    };
    assert_eq!(edge_get(&config, "docs.a.test", "/app").as_deref(), Some("a/docs"));
    assert_eq!(edge_get(&config, "nobody.test", "/").as_deref(), Some("b/catch-all"));
    assert_eq!(edge_get(&config, "shared.test", "/two").as_deref(), Some("b/two"));
    assert_eq!(edge_get(&config, "shared.test", "/else").as_deref(), Some("b/catch-all"), "merged: falls through");
    bare.virtual_hosts.remove(&Host::Any);
    let config = compiler().compile(Arc::new(bare), 1, None).unwrap();
    assert_eq!(edge_get(&config, "nobody.test", "/").as_deref(), Some("b/default"));
    assert_eq!(edge_get(&config, "shared.test", "/else").as_deref(), Some("b/default"));
}

#[test]
fn the_workloads_a_config_fronts_are_its_direct_endpoints() {
    let mesh = Endpoint {
        addr: ([10, 0, 0, 7], 80).into(),
        hbone: Some(wharf_model::Hbone {
            dial: ([10, 0, 0, 7], 15008).into(),
            identity: wharf_model::Identity::new("cluster.local", "app", "web"),
            authority: "10.0.0.7:80".into(),
        }),
    };
    let direct = Endpoint::direct(([10, 0, 0, 9], 3000).into());
    let c = Cluster { protocol: AppProtocol::Http1, endpoints: vec![direct, mesh], tls: None };
    let snapshot = Snapshot { clusters: [("c".to_owned(), c)].into_iter().collect(), ..Default::default() };
    let config = compiler().compile(Arc::new(snapshot), 1, None).unwrap();
    assert!(config.fronts(([10, 0, 0, 9], 3000).into()));
    assert!(!config.fronts(([10, 0, 0, 9], 3001).into()), "another port");
    assert!(!config.fronts(([10, 0, 0, 7], 80).into()), "a mesh endpoint is reached over HBONE, not dialed");
    assert!(config.fronts(([10, 0, 0, 9], 3000).into()), "asked again, from the set made once");
}

#[test]
fn refused_snapshots_say_why() {
    let missing = Snapshot {
        tls_hosts: vec![TlsHost { host: host("a.example.com"), certificate: "web/none".into() }].into(),
        ..Default::default()
    };
    let err = compiler().compile(Arc::new(missing), 1, None).err();
    assert_eq!(err.as_ref().map(CompileError::reason), Some("missing_certificate"));
    assert!(err.is_some_and(|e| e.to_string().contains("a.example.com") && e.to_string().contains("web/none")));

    assert_eq!(CompileError::Tls(rustls::Error::General("x".into())).reason(), "tls_config");
}

#[test]
fn the_edge_gateways_tables_are_found_by_edge_listener_and_its_certificates_come_first() {
    use wharf_model::{GatewayPort, PortProtocol};
    let ca = crate::testing::TestCa::new("edge");
    let (ingress, gateway, any) =
        (ca.leaf(&["a.example.com", "b.example.com"]), ca.leaf(&["a.example.com"]), ca.leaf(&["x.example.com"]));
    let bind: std::net::SocketAddr = ([0, 0, 0, 0], 8443).into();
    let edge_port = |protocol, tls_hosts| GatewayPort {
        gateway: ObjectRef::new("Gateway", "infra", "edge"),
        bind,
        listener_port: bind.port(),
        edge: true,
        protocol,
        tls_hosts,
        virtual_hosts: vec![VirtualHost { host: Host::Any, routes: vec![route("gw", prefix("/gw"), "c")] }.into()],
        passthrough: vec![],
        tcp: Vec::new(),
    };
    let mut snapshot = Snapshot {
        certificates: [
            ("web/ingress".to_owned(), ingress.certificate()),
            ("infra/gateway".to_owned(), gateway.certificate()),
            ("infra/any".to_owned(), any.certificate()),
        ]
        .into_iter()
        .collect(),
        tls_hosts: ["a.example.com", "b.example.com"]
            .map(|h| TlsHost { host: host(h), certificate: "web/ingress".into() })
            .to_vec()
            .into(),
        gateway_ports: vec![
            // A Gateway on an address of its own, with another port on the same protocol.
            GatewayPort {
                edge: false,
                bind: ([127, 0, 0, 9], 8081).into(),
                listener_port: 81,
                ..edge_port(PortProtocol::Http, vec![])
            },
            GatewayPort { listener_port: 80, ..edge_port(PortProtocol::Http, vec![]) },
            GatewayPort {
                listener_port: 443,
                ..edge_port(
                    PortProtocol::Https,
                    vec![TlsHost { host: host("a.example.com"), certificate: "infra/gateway".into() }],
                )
            },
        ],
        clusters: [("c".to_owned(), cluster(1))].into_iter().collect(),
        ..Default::default()
    };
    let c = compiler();
    let config = c.compile(Arc::new(snapshot.clone()), 1, None).unwrap();
    // Redirects name the edge listeners' declared ports, not their sockets'.
    let declared =
        [PortProtocol::Http, PortProtocol::Https, PortProtocol::Passthrough].map(|p| config.edge_listener_port(p));
    assert_eq!(declared, [Some(80), Some(443), None]);
    snapshot.gateway_ports.remove(0);
    let config = c.compile(Arc::new(snapshot.clone()), 1, None).unwrap();
    assert!(config.ports.is_empty() && config.tables(Some(bind)).is_none(), "no socket of its own");
    assert!(config.edge_gateway(None, PortProtocol::Http).is_some());
    assert!(config.edge_gateway(None, PortProtocol::Https).is_some());
    assert!(config.edge_gateway(None, PortProtocol::Passthrough).is_none());
    assert!(config.edge_gateway(Some(bind), PortProtocol::Http).is_none(), "only on the edge listeners");
    let headers = http::HeaderMap::new();
    let view = RequestView { path: "/gw", query: None, method: &http::Method::GET, headers: &headers };
    let served = config.edge_gateway(None, PortProtocol::Http).and_then(|t| t.router.route("z.test", &view));
    assert_eq!(served.map(|r| r.source()), Some("web/gw"));
    assert_eq!(
        config.route(&config.edge, None, PortProtocol::Http, "z.test", &view).map(|r| r.source()),
        Some("web/gw")
    );
    assert!(
        config.route(&config.edge, Some(bind), PortProtocol::Http, "z.test", &view).is_none(),
        "a Gateway port's own tables, never the edge Gateway's"
    );
    let leaf = |c: &CompiledConfig, sni: Option<&str>| c.edge.sni.select(sni).0.cert[0].clone();
    assert_eq!(leaf(&config, Some("a.example.com")), gateway.leaf_der(), "the Gateway's certificate for its host");
    assert_eq!(leaf(&config, Some("b.example.com")), ingress.leaf_der(), "the Ingress's for the hosts it alone names");
    assert_ne!(leaf(&config, None), any.leaf_der());
    // A Gateway listener without hostname is the default.
    snapshot.gateway_ports[1].tls_hosts.push(TlsHost { host: Host::Any, certificate: "infra/any".into() });
    let config = c.compile(Arc::new(snapshot.clone()), 2, Some(&config)).unwrap();
    assert_eq!(leaf(&config, None), any.leaf_der());
    assert_eq!(leaf(&config, Some("b.example.com")), ingress.leaf_der());
    // Not on the edge: neither the edge's certificates nor its tables.
    for p in &mut snapshot.gateway_ports {
        p.edge = false;
    }
    snapshot.gateway_ports[0].bind = ([0, 0, 0, 0], 8080).into();
    // Compiled over the config whose SNI map held the Gateway's certificates: rebuilt.
    let config = c.compile(Arc::new(snapshot), 3, Some(&config)).unwrap();
    assert_eq!(leaf(&config, Some("a.example.com")), ingress.leaf_der());
    assert!(config.edge_gateway(None, PortProtocol::Http).is_none() && config.ports.len() == 2);
}

#[test]
fn a_host_is_compiled_again_only_when_it_or_a_cluster_its_routes_look_up_changed() {
    let vh =
        |h: &str, path: &str, c: &str| Arc::new(VirtualHost { host: host(h), routes: vec![route(h, prefix(path), c)] });
    let first = Snapshot {
        virtual_hosts: vec![
            vh("keep.com", "/", "b"),
            vh("equal.com", "/", "b"),
            vh("edited.com", "/x", "b"),
            vh("moved.com", "/", "c"),
            vh("gone.com", "/", "a"),
            vh("later.com", "/", "d"),
            vh("tail.com", "/", "z"),
        ]
        .into(),
        clusters: [("a", 1), ("b", 2), ("c", 3), ("z", 4)]
            .map(|(id, port)| (id.to_owned(), cluster(port)))
            .into_iter()
            .collect(),
        ..Default::default()
    };
    let mut second = first.clone();
    // Equal but not shared, as a snapshot translated afresh has it.
    second.virtual_hosts.insert(vh("equal.com", "/", "b"));
    second.virtual_hosts.insert(vh("edited.com", "/y", "b"));
    second.clusters =
        [("b", 2), ("c", 5), ("d", 6)].map(|(id, port)| (id.to_owned(), cluster(port))).into_iter().collect();
    let c = compiler();
    let one = c.compile(Arc::new(first), 1, None).unwrap();
    let two = c.compile(Arc::new(second), 2, Some(&one)).unwrap();
    let routes = |config: &CompiledConfig, h: &str| Arc::clone(config.edge.router.hosts.get_host(&host(h)).unwrap());
    assert!(Arc::ptr_eq(&routes(&one, "keep.com"), &routes(&two, "keep.com")), "unchanged: reused");
    assert!(Arc::ptr_eq(&routes(&one, "equal.com"), &routes(&two, "equal.com")), "equal: reused");
    let upstream = |config: &CompiledConfig, h: &str, path: &str| match get(config, h, path).map(|r| &r.action) {
        Some(CompiledAction::Forward(f)) => f.pick().map(Arc::clone),
        other => panic!("{h}{path}: {other:?}"),
    };
    let (before, after) = (upstream(&one, "keep.com", "/").unwrap(), upstream(&two, "keep.com", "/").unwrap());
    assert!(Arc::ptr_eq(&before, &after), "an unchanged cluster keeps its upstream");
    assert!(Arc::ptr_eq(&after, &upstream(&two, "edited.com", "/y").unwrap()), "one upstream per cluster");
    assert!(get(&two, "edited.com", "/x").is_none(), "an edited host is compiled again");
    let moved = upstream(&two, "moved.com", "/").unwrap();
    assert_eq!(moved.endpoints.iter().map(|e| e.addr.port()).collect::<Vec<_>>(), [5], "a changed cluster");
    for h in ["moved.com", "gone.com", "later.com", "tail.com"] {
        assert!(!Arc::ptr_eq(&routes(&one, h), &routes(&two, h)), "{h}: compiled again");
    }
    assert_eq!(upstream(&two, "gone.com", "/").err(), Some(UpstreamError::NoEndpoints), "its cluster went");
    assert_eq!(upstream(&two, "tail.com", "/").err(), Some(UpstreamError::NoEndpoints), "the last cluster went");
    assert_eq!(upstream(&one, "later.com", "/").err(), Some(UpstreamError::NoEndpoints));
    assert_eq!(upstream(&two, "later.com", "/").unwrap().id, "d", "its cluster came");

    // Over the patched tables: which hosts look up a cluster is kept across configs.
    let mut third = (*two.snapshot).clone();
    third.clusters.insert("b".into(), cluster(7));
    let three = c.compile(Arc::new(third), 3, Some(&two)).unwrap();
    for h in ["keep.com", "equal.com", "edited.com"] {
        assert!(!Arc::ptr_eq(&routes(&two, h), &routes(&three, h)), "{h}: its cluster changed");
    }
    assert_eq!(upstream(&three, "keep.com", "/").unwrap().endpoints[0].addr.port(), 7);
    for h in ["moved.com", "later.com", "gone.com", "tail.com"] {
        assert!(Arc::ptr_eq(&routes(&two, h), &routes(&three, h)), "{h}: reused");
    }
    assert_eq!(upstream(&two, "keep.com", "/").unwrap().endpoints[0].addr.port(), 2, "the previous config as it was");
}

/// Random snapshots changed one entry at a time, as the controller patches its own:
/// each config compiled over the previous one serves what a config compiled from
/// nothing serves (every certificate by SNI, every route's upstream and endpoints).
#[test]
fn a_config_patched_over_the_previous_one_serves_what_one_compiled_afresh_serves() {
    let (a, b, key) = two_certs_one_key();
    let pems = [a, b];
    let certificate = |pem: &String| Certificate::from_pem(pem.as_bytes(), key.as_bytes(), 0).unwrap();
    let names = ["h0.example.com", "h1.example.com", "h2.example.com", "h3.example.com", "*.w.example.com"];
    let asked =
        ["h0.example.com", "h1.example.com", "h2.example.com", "h3.example.com", "x.w.example.com", "o.example.com"];
    let (certs, clusters) = (["web/c0", "web/c1", "web/c2"], ["k0", "k1", "k2", "k3"]);
    let served = |cfg: &CompiledConfig| {
        let sni = asked.map(|n| {
            let (ck, how) = cfg.edge.sni.select(Some(n));
            (ck.cert[0].as_ref().to_vec(), format!("{how:?}"))
        });
        let routes = asked.map(|n| {
            ["/", "/p"].map(|path| {
                get(cfg, n, path).map(|r| {
                    let to = match &r.action {
                        CompiledAction::Forward(f) => f
                            .pick()
                            .map(|u| (u.id.clone(), u.endpoints.iter().map(|e| e.addr.port()).collect::<Vec<_>>())),
                        other => panic!("{other:?}"),
                    };
                    (r.source().to_owned(), to)
                })
            })
        });
        (sni, routes)
    };
    let c = compiler();
    for seed in 0..40 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut snapshot = Snapshot::default();
        let mut previous: Option<CompiledConfig> = None;
        for step in 0..40 {
            let host = host(names[rng.usize(..names.len())]);
            match rng.u8(..4) {
                0 if rng.bool() => {
                    let routes = ["/", "/p"][..rng.usize(1..=2)]
                        .iter()
                        .map(|p| route(&format!("s{step}"), prefix(p), clusters[rng.usize(..clusters.len())]))
                        .collect();
                    snapshot.virtual_hosts.insert(Arc::new(VirtualHost { host, routes }));
                }
                0 => drop(snapshot.virtual_hosts.remove(&host)),
                1 if rng.bool() => {
                    let present: Vec<&String> = snapshot.certificates.keys().collect();
                    if let Some(id) = (!present.is_empty()).then(|| present[rng.usize(..present.len())].clone()) {
                        snapshot.tls_hosts.insert(TlsHost { host, certificate: id });
                    }
                }
                1 => drop(snapshot.tls_hosts.remove(&host)),
                2 if rng.bool() => {
                    let id = clusters[rng.usize(..clusters.len())];
                    snapshot.clusters.insert(id.into(), cluster(rng.u16(1..4)));
                }
                2 => drop(snapshot.clusters.remove(clusters[rng.usize(..clusters.len())])),
                _ => {
                    let id = certs[rng.usize(..certs.len())];
                    let named = snapshot.tls_hosts.iter().any(|t| t.certificate == id);
                    match rng.bool() {
                        false if !named => drop(snapshot.certificates.remove(id)),
                        _ => drop(snapshot.certificates.insert(id.into(), certificate(&pems[rng.usize(..2)]))),
                    }
                }
            }
            let s = Arc::new(snapshot.clone());
            let patched = c.compile(Arc::clone(&s), step, previous.as_ref()).unwrap();
            let afresh = c.compile(s, step, None).unwrap();
            assert_eq!(served(&patched), served(&afresh), "seed {seed} step {step}");
            // Each endpoint counted once per cluster that has it, and its state kept.
            let endpoints = |cfg: &CompiledConfig| {
                let mut all: Vec<_> = cfg.endpoints.iter().map(|(k, (_, n))| (k.0, *n)).collect();
                all.sort();
                all
            };
            assert_eq!(endpoints(&patched), endpoints(&afresh), "seed {seed} step {step}");
            for (k, (state, _)) in previous.iter().flat_map(|p| &p.endpoints) {
                if let Some((now, _)) = patched.endpoints.get(k) {
                    assert!(Arc::ptr_eq(state, now), "seed {seed} step {step}: {k:?} kept");
                }
            }
            previous = Some(patched);
        }
    }
}

#[test]
fn gateway_ports_reuse_their_own_hosts() {
    use wharf_model::GatewayPort;
    let port = |bind: SocketAddr, edge: bool, protocol: PortProtocol, source: &str| GatewayPort {
        gateway: ObjectRef::new("Gateway", "web", "gw"),
        bind,
        listener_port: bind.port(),
        edge,
        protocol,
        tls_hosts: Vec::new(),
        virtual_hosts: vec![
            VirtualHost { host: host("same.com"), routes: vec![route(source, prefix("/"), "c")] }.into()
        ],
        passthrough: Vec::new(),
        tcp: Vec::new(),
    };
    let (a, b): (SocketAddr, SocketAddr) = (([127, 0, 0, 9], 8080).into(), ([127, 0, 0, 9], 8081).into());
    let snapshot = Snapshot {
        virtual_hosts: vec![
            VirtualHost { host: host("same.com"), routes: vec![route("edge", prefix("/"), "c")] }.into()
        ]
        .into(),
        gateway_ports: vec![
            port(a, false, PortProtocol::Http, "a"),
            port(b, false, PortProtocol::Http, "b"),
            port(a, true, PortProtocol::Http, "edge-http"),
            port(a, true, PortProtocol::Https, "edge-https"),
        ],
        clusters: [("c".to_owned(), cluster(1))].into_iter().collect(),
        ..Default::default()
    };
    let c = compiler();
    let one = c.compile(Arc::new(snapshot.clone()), 1, None).unwrap();
    let two = c.compile(Arc::new(snapshot), 2, Some(&one)).unwrap();
    let tables = |config: &CompiledConfig| {
        [config.ports.get(&a), config.ports.get(&b), config.edge_gateway.get(&PortProtocol::Http)]
            .into_iter()
            .chain([config.edge_gateway.get(&PortProtocol::Https), Some(&config.edge)])
            .map(|t| Arc::clone(t.unwrap().router.hosts.get_host(&host("same.com")).unwrap()))
            .collect::<Vec<_>>()
    };
    let (before, after) = (tables(&one), tables(&two));
    let sources: Vec<&str> = after.iter().map(|h| h.routes[0].source()).collect();
    assert_eq!(sources, ["web/a", "web/b", "web/edge-http", "web/edge-https", "web/edge"]);
    assert!(before.iter().zip(&after).all(|(x, y)| Arc::ptr_eq(x, y)), "each table its own hosts, reused");

    // A Gateway port's hosts are compiled whole, reusing those that did not change:
    // an equal host (kept from then on as the one to compare by pointer), not an
    // edited one, not one whose cluster changed.
    let routes_of = |config: &CompiledConfig, bind: SocketAddr| {
        Arc::clone(config.ports.get(&bind).unwrap().router.hosts.get_host(&host("same.com")).unwrap())
    };
    let mut third = (*two.snapshot).clone();
    third.gateway_ports[0] = port(a, false, PortProtocol::Http, "a");
    third.gateway_ports[1].virtual_hosts[0] =
        VirtualHost { host: host("same.com"), routes: vec![route("b", prefix("/b"), "c")] }.into();
    let three = c.compile(Arc::new(third), 3, Some(&two)).unwrap();
    assert!(Arc::ptr_eq(&routes_of(&two, a), &routes_of(&three, a)), "equal: reused");
    let source = routes_of(&three, a).source.load_full().unwrap();
    assert!(Arc::ptr_eq(&source, &three.snapshot.gateway_ports[0].virtual_hosts[0]));
    assert!(!Arc::ptr_eq(&routes_of(&two, b), &routes_of(&three, b)), "edited: compiled again");
    let mut fourth = (*three.snapshot).clone();
    fourth.clusters.insert("c".into(), cluster(9));
    let four = c.compile(Arc::new(fourth), 4, Some(&three)).unwrap();
    assert!(!Arc::ptr_eq(&routes_of(&three, a), &routes_of(&four, a)), "its cluster changed");
    let CompiledAction::Forward(f) = &routes_of(&four, a).routes[0].action else { panic!() };
    assert_eq!(f.pick().unwrap().endpoints[0].addr.port(), 9);
}

#[test]
fn gateway_ports_get_tables_of_their_own_found_by_their_address() {
    use wharf_model::{Action, Forward, GatewayPort, PortProtocol, WeightedBackend};
    let ca = crate::testing::TestCa::new("ports");
    let (exact, any) = (ca.leaf(&["a.example.com"]), ca.leaf(&["other.example.com"]));
    let bind: std::net::SocketAddr = ([127, 0, 0, 9], 8080).into();
    let invalid = Route {
        action: Action::Forward(Forward::to(vec![WeightedBackend::invalid(1)])),
        ..route("bad", prefix("/bad"), "c")
    };
    let snapshot = Snapshot {
        certificates: [("web/exact".to_owned(), exact.certificate()), ("web/any".to_owned(), any.certificate())]
            .into_iter()
            .collect(),
        gateway_ports: vec![GatewayPort {
            gateway: ObjectRef::new("Gateway", "web", "gw"),
            bind,
            listener_port: bind.port(),
            protocol: PortProtocol::Https,
            tls_hosts: vec![
                TlsHost { host: host("a.example.com"), certificate: "web/exact".into() },
                TlsHost { host: Host::Any, certificate: "web/any".into() },
            ],
            virtual_hosts: vec![VirtualHost {
                host: Host::Any,
                routes: vec![invalid, route("port", prefix("/"), "c")],
            }
            .into()],
            passthrough: vec![],
            tcp: Vec::new(),
            edge: false,
        }],
        clusters: [("c".to_owned(), cluster(1))].into_iter().collect(),
        ..Default::default()
    };
    let config = compiler().compile(Arc::new(snapshot), 1, None).unwrap();
    assert!(config.tables(Some(([127, 0, 0, 9], 8081).into())).is_none(), "no such port");
    let port = config.tables(Some(bind)).unwrap();
    let edge = config.tables(None).unwrap();
    let headers = http::HeaderMap::new();
    let get = |t: &Tables, path: &str| {
        t.router
            .route("x.test", &RequestView { path, query: None, method: &http::Method::GET, headers: &headers })
            .map(|r| r.source().to_owned())
    };
    assert_eq!(get(port, "/"), Some("web/port".into()));
    assert_eq!(get(edge, "/"), None, "the edge has no routes");
    let pick = |t: &Tables, path: &str| match t
        .router
        .route("x.test", &RequestView { path, query: None, method: &http::Method::GET, headers: &headers })
        .map(|r| &r.action)
    {
        Some(CompiledAction::Forward(f)) => f.pick().err(),
        _ => None,
    };
    assert_eq!(pick(port, "/bad"), Some(crate::reasons::UpstreamError::InvalidBackend));
    let leaf = |t: &Tables, sni: Option<&str>| t.sni.select(sni).0.cert[0].clone();
    assert_eq!(leaf(port, Some("a.example.com")), exact.leaf_der());
    assert_eq!(leaf(port, Some("b.example.com")), any.leaf_der(), "a listener without hostname takes every name");
    assert_eq!(leaf(port, None), any.leaf_der(), "and clients without SNI");
    assert_ne!(leaf(edge, None), any.leaf_der(), "the edge keeps its own default");
}
