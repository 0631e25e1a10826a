use super::*;

#[test]
fn timeouts_are_whole_seconds_and_protocols_are_named() {
    let (s, d) = parsed(&[
        ("nginx.ingress.kubernetes.io/proxy-connect-timeout", "5"),
        ("nginx.ingress.kubernetes.io/proxy-read-timeout", " 3600 "),
        ("nginx.ingress.kubernetes.io/proxy-send-timeout", "90"),
        ("nginx.ingress.kubernetes.io/backend-protocol", "grpcs"),
    ]);
    assert_eq!((s.connect_timeout_ms, s.read_timeout_ms, d.len()), (Some(5_000), Some(3_600_000), 0));
    assert_eq!(s.send_timeout_ms, Some(90_000));
    assert_eq!(s.backend_protocol, BackendProtocol::Grpcs);
    assert!(s.backend_protocol.h2() && s.backend_protocol.tls());
    for (value, want) in
        [("HTTP", BackendProtocol::Http), ("HTTPS", BackendProtocol::Https), ("GRPC", BackendProtocol::Grpc)]
    {
        assert_eq!(parsed(&[("wharf.dev/backend-protocol", value)]).0.backend_protocol, want);
    }
    assert!(!BackendProtocol::Https.h2() && BackendProtocol::Https.tls());
    assert!(BackendProtocol::Grpc.h2() && !BackendProtocol::Grpc.tls());
    assert!(!BackendProtocol::Http.h2() && !BackendProtocol::Http.tls());
    for bad in ["0", "5s", "-1", "86401", ""] {
        let (s, d) = parsed(&[("wharf.dev/proxy-read-timeout", bad)]);
        assert_eq!((s.read_timeout_ms, d.len()), (None, 1), "{bad:?}");
    }
    let (s, d) = parsed(&[("wharf.dev/backend-protocol", "FCGI")]);
    assert_eq!((s.backend_protocol, d.len()), (BackendProtocol::Http, 1));
    assert!(d[0].1.contains("\"FCGI\" is not supported"), "{}", d[0].1);
}

#[test]
fn upstream_host_and_forwarded_prefix_are_checked() {
    let (s, d) = parsed(&[
        ("nginx.ingress.kubernetes.io/upstream-vhost", "svc.internal:8080"),
        ("nginx.ingress.kubernetes.io/x-forwarded-prefix", "/shop"),
    ]);
    assert_eq!(
        (s.upstream_vhost.as_deref(), s.forwarded_prefix.as_deref(), d.len()),
        (Some("svc.internal:8080"), Some("/shop"), 0)
    );
    let spaced = parsed(&[("wharf.dev/x-forwarded-prefix", "/my shop")]).0;
    assert_eq!(spaced.forwarded_prefix.as_deref(), Some("/my shop"), "spaces are header-safe");
    for (key, bad) in [
        ("wharf.dev/upstream-vhost", "a b"),
        ("wharf.dev/upstream-vhost", "$host"),
        ("wharf.dev/x-forwarded-prefix", "/a\r\nX-Evil: 1"),
        ("wharf.dev/x-forwarded-prefix", "/a\r\nX"),
        ("wharf.dev/x-forwarded-prefix", ""),
    ] {
        let (s, d) = parsed(&[(key, bad)]);
        assert_eq!((s.upstream_vhost, s.forwarded_prefix, d.len()), (None, None, 1), "{key}={bad:?}");
    }
}

#[test]
fn affinity_takes_cookie_settings_with_ingress_nginx_defaults() {
    let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/affinity", "cookie")]);
    assert_eq!(
        (s.affinity.map(|b| *b), d.len()),
        (
            Some(Affinity {
                name: "INGRESSCOOKIE".into(),
                path: None,
                max_age: None,
                expires: None,
                domain: None,
                same_site: None,
                secure: false
            }),
            0
        )
    );
    let (s, d) = parsed(&[
        ("nginx.ingress.kubernetes.io/affinity", "cookie"),
        ("nginx.ingress.kubernetes.io/session-cookie-name", "route"),
        ("nginx.ingress.kubernetes.io/session-cookie-path", "/shop"),
        ("nginx.ingress.kubernetes.io/session-cookie-expires", "100"),
        ("nginx.ingress.kubernetes.io/session-cookie-max-age", "172800"),
        ("nginx.ingress.kubernetes.io/session-cookie-samesite", "strict"),
        ("nginx.ingress.kubernetes.io/session-cookie-secure", "true"),
        ("nginx.ingress.kubernetes.io/session-cookie-domain", ".shop.example"),
    ]);
    assert!(d.is_empty(), "{d:?}");
    assert_eq!(
        s.affinity.map(|b| *b),
        Some(Affinity {
            name: "route".into(),
            path: Some("/shop".into()),
            max_age: Some(172_800),
            expires: Some(100),
            domain: Some(".shop.example".into()),
            same_site: Some("Strict".into()),
            secure: true
        })
    );
    let (s, d) = parsed(&[
        ("nginx.ingress.kubernetes.io/affinity", "cookie"),
        ("nginx.ingress.kubernetes.io/session-cookie-name", "a;b"),
        ("nginx.ingress.kubernetes.io/session-cookie-path", "/a; Domain=evil"),
        ("nginx.ingress.kubernetes.io/session-cookie-max-age", "forever"),
        ("nginx.ingress.kubernetes.io/session-cookie-samesite", "sometimes"),
        ("nginx.ingress.kubernetes.io/session-cookie-expires", "999999999999"),
        ("nginx.ingress.kubernetes.io/session-cookie-domain", "a.example; Secure"),
    ]);
    assert_eq!(
        s.affinity.map(|b| *b),
        Some(Affinity {
            name: "INGRESSCOOKIE".into(),
            path: None,
            max_age: None,
            expires: None,
            domain: None,
            same_site: None,
            secure: false
        })
    );
    assert_eq!(d.len(), 6, "{d:?}");
    for bad in ["", ".", "a..b", "-a.example", "a-.example", "a_b.example", "a.example.", &"a".repeat(64)] {
        assert!(!super::super::upstream::is_cookie_domain(bad), "{bad:?}");
    }
    for good in ["a", "shop.example", ".shop.example", "x-1.a0.example", &"a".repeat(63)] {
        assert!(super::super::upstream::is_cookie_domain(good), "{good:?}");
    }
    for (value, want) in [("316224000", Some(316_224_000)), ("316224001", None)] {
        let (s, _) = parsed(&[
            ("nginx.ingress.kubernetes.io/affinity", "cookie"),
            ("nginx.ingress.kubernetes.io/session-cookie-expires", value),
        ]);
        assert_eq!(s.affinity.and_then(|a| a.expires), want, "ten years at most: {value}");
    }
    for (value, want) in [("None", "None"), ("lax", "Lax")] {
        let (s, _) = parsed(&[
            ("nginx.ingress.kubernetes.io/affinity", "cookie"),
            ("nginx.ingress.kubernetes.io/session-cookie-samesite", value),
        ]);
        assert_eq!(s.affinity.and_then(|a| a.same_site).as_deref(), Some(want), "{value}");
    }
    let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/affinity", "ip")]);
    assert_eq!((s.affinity, d.len()), (None, 1));
}

#[test]
fn error_pages_need_a_default_backend_and_take_statuses_from_400_to_599() {
    let (s, d) = parsed(&[
        ("nginx.ingress.kubernetes.io/default-backend", " errors "),
        ("nginx.ingress.kubernetes.io/custom-http-errors", "404, 503,503,,302,abc,600,500"),
    ]);
    assert_eq!((s.default_backend.as_deref(), s.custom_http_errors), (Some("errors"), vec![404, 503, 500]));
    let bad: Vec<&str> = d.iter().map(|(_, m)| m.as_str()).collect();
    assert_eq!(bad.len(), 3, "{bad:?}");
    assert!(bad.iter().all(|m| m.contains("is not a status from 400 to 599")), "{bad:?}");
    // Without a default backend, the errors are the backend's.
    let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/custom-http-errors", "404")]);
    assert!(s.custom_http_errors.is_empty());
    assert!(d.len() == 1 && d[0].1.contains("has no effect without default-backend"), "{d:?}");
    for bad in ["other/errors", "Errors", "errors.svc", ""] {
        let (s, d) = parsed(&[("wharf.dev/default-backend", bad)]);
        assert_eq!((s.default_backend, d.len()), (None, 1), "{bad:?}");
    }
}

#[test]
fn backend_certificates_are_checked_only_when_asked_and_what_cannot_be_checked_refuses() {
    let https = ("nginx.ingress.kubernetes.io/backend-protocol", "HTTPS");
    let verify = ("nginx.ingress.kubernetes.io/proxy-ssl-verify", "on");
    let (s, d) = parsed(&[https, verify]);
    let want = ProxySslSetting { secret: None, name: None, server_name: false, verify_depth: 1 };
    assert_eq!((s.proxy_ssl.map(|b| *b), d.len()), (Some(want), 0));
    let (s, d) = parsed(&[
        https,
        verify,
        ("nginx.ingress.kubernetes.io/proxy-ssl-secret", "default/backend-ca"),
        ("nginx.ingress.kubernetes.io/proxy-ssl-name", " API.internal "),
        ("nginx.ingress.kubernetes.io/proxy-ssl-server-name", "on"),
        ("nginx.ingress.kubernetes.io/proxy-ssl-verify-depth", "3"),
    ]);
    let want = ProxySslSetting {
        secret: Some(("default".into(), "backend-ca".into())),
        name: Some("api.internal".into()),
        server_name: true,
        verify_depth: 3,
    };
    assert_eq!((s.proxy_ssl.map(|b| *b), d.len()), (Some(want), 0));
    // Not asked, or not HTTPS: nothing is checked, and what does nothing is said.
    let secret = ("nginx.ingress.kubernetes.io/proxy-ssl-secret", "backend-ca");
    let (s, d) = parsed(&[https, secret]);
    assert!(s.proxy_ssl.is_none() && d.len() == 1 && d[0].1.contains("without proxy-ssl-verify: on"), "{d:?}");
    let (s, d) = parsed(&[verify, secret]);
    assert!(s.proxy_ssl.is_none() && d.len() == 2, "{d:?}");
    assert!(d.iter().all(|(_, m)| m.contains("unless backend-protocol is HTTPS or GRPCS")), "{d:?}");
    // Asked and impossible: every request is refused.
    for (pair, why) in [
        (("nginx.ingress.kubernetes.io/proxy-ssl-verify", "yes"), "proxy-ssl-verify: \"yes\" is not on or off"),
        (("nginx.ingress.kubernetes.io/proxy-ssl-secret", "other/ca"), "proxy-ssl-secret: Secret other/ca"),
        (("nginx.ingress.kubernetes.io/proxy-ssl-name", "not a name"), "proxy-ssl-name: \"not a name\""),
    ] {
        let (s, _) = parsed(&[https, verify, pair]);
        let pair_verify = pair.0.ends_with("proxy-ssl-verify");
        let (s, _) = if pair_verify { parsed(&[https, pair]) } else { (s, Vec::new()) };
        assert!(
            matches!(s.auth.as_deref(), Some(AuthSetting::Unavailable(w)) if w.starts_with(&format!("annotation {why}"))),
            "{pair:?}: {:?}",
            s.auth
        );
    }
}

#[test]
fn next_upstream_takes_conditions_tries_and_a_time_limit_with_ingress_nginx_defaults() {
    use wharf_model::Retry;
    assert_eq!(parsed(&[]).0.retry, None, "no annotation: Wharf's own (connect errors only)");
    let defaults =
        Retry { on_error: true, on_timeout: true, statuses: vec![], non_idempotent: false, tries: 3, timeout_ms: None };
    let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/proxy-next-upstream-tries", "5")]);
    assert_eq!((s.retry.map(|b| *b), d.len()), (Some(Retry { tries: 5, ..defaults.clone() }), 0));
    let (s, d) = parsed(&[
        ("nginx.ingress.kubernetes.io/proxy-next-upstream", "error http_502  http_503 http_502 non_idempotent"),
        ("nginx.ingress.kubernetes.io/proxy-next-upstream-timeout", "30"),
        ("nginx.ingress.kubernetes.io/proxy-next-upstream-tries", "0"),
    ]);
    let (big, _) = parsed(&[
        ("nginx.ingress.kubernetes.io/proxy-next-upstream-timeout", "999999"),
        ("nginx.ingress.kubernetes.io/proxy-next-upstream-tries", "888888"),
    ]);
    assert_eq!(big.retry.map(|r| (r.tries, r.timeout_ms)), Some((888_888, Some(999_999_000))), "as nginx takes them");
    let want = Retry {
        on_timeout: false,
        statuses: vec![502, 503],
        non_idempotent: true,
        tries: 0,
        timeout_ms: Some(30_000),
        ..defaults.clone()
    };
    assert_eq!((s.retry.map(|b| *b), d.len()), (Some(want), 0));
    let (s, _) = parsed(&[("nginx.ingress.kubernetes.io/proxy-next-upstream", "timeout invalid_header")]);
    assert_eq!(s.retry.map(|r| (r.on_error, r.on_timeout)), Some((true, true)), "invalid_header is an error");
    let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/proxy-next-upstream", "error timeout off http_502")]);
    let off = Retry { on_error: false, on_timeout: false, statuses: vec![], tries: 1, ..defaults.clone() };
    assert_eq!((s.retry.map(|b| *b), d.len()), (Some(off), 0), "off: one try");
    let (s, d) = parsed(&[
        ("nginx.ingress.kubernetes.io/proxy-next-upstream", "error http_418 retry"),
        ("nginx.ingress.kubernetes.io/proxy-next-upstream-timeout", "-1"),
        ("nginx.ingress.kubernetes.io/proxy-next-upstream-tries", "many"),
    ]);
    assert_eq!((s.retry.map(|b| *b), d.len()), (Some(Retry { on_timeout: false, ..defaults }), 4), "{d:?}");
}
