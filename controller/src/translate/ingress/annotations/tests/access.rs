use super::*;

#[test]
fn source_ranges_allow_deny_and_fail_closed() {
    let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/whitelist-source-range", "10.0.0.0/8, 192.168.0.1")]);
    assert_eq!(
        s.clients.map(|b| *b),
        Some(ClientFilter { allow: Some(nets(&["10.0.0.0/8", "192.168.0.1"])), deny: vec![] })
    );
    assert!(d.is_empty(), "{d:?}");
    // The new name wins over the old one.
    let (s, _) = parsed(&[
        ("nginx.ingress.kubernetes.io/whitelist-source-range", "10.0.0.0/8"),
        ("nginx.ingress.kubernetes.io/allowlist-source-range", "172.16.0.0/12"),
    ]);
    assert_eq!(s.clients.and_then(|c| c.allow), Some(nets(&["172.16.0.0/12"])));
    let (s, _) = parsed(&[("wharf.dev/denylist-source-range", "203.0.113.0/24,2001:db8::/32")]);
    assert_eq!(
        s.clients.map(|b| *b),
        Some(ClientFilter { allow: None, deny: nets(&["203.0.113.0/24", "2001:db8::/32"]) })
    );
    // Unparsable: no one is served, and the message says so.
    let nobody = Some(ClientFilter { allow: Some(vec![]), deny: vec![] });
    for (key, value) in [
        ("wharf.dev/allowlist-source-range", "10.0.0.0/8,10.0.0.300"),
        ("wharf.dev/allowlist-source-range", ""),
        ("wharf.dev/denylist-source-range", "not-an-ip"),
    ] {
        let (s, d) = parsed(&[(key, value), ("wharf.dev/whitelist-source-range", "10.0.0.0/8")]);
        if key.ends_with("allowlist-source-range") {
            assert_eq!(s.clients.map(|b| *b), nobody, "{key}={value:?}");
        } else {
            assert_eq!(s.clients.map(|b| *b), nobody, "{key}={value:?}: an invalid deny list serves no one");
        }
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].0, "InvalidAnnotation");
        assert!(d[0].1.contains(key) && d[0].1.contains("every client is refused (403)"), "{}", d[0].1);
    }
}

#[test]
fn limits_take_ingress_nginx_bursts_and_exempt_networks() {
    let (s, d) = parsed(&[
        ("nginx.ingress.kubernetes.io/limit-rps", "5"),
        ("nginx.ingress.kubernetes.io/limit-rpm", "100"),
        ("nginx.ingress.kubernetes.io/limit-connections", "3"),
        ("nginx.ingress.kubernetes.io/limit-whitelist", "10.0.0.0/8, 192.168.1.1"),
    ]);
    assert!(d.is_empty(), "{d:?}");
    assert_eq!(
        s.rate_limit.map(|b| *b),
        Some(wharf_model::RateLimit {
            zone: "default/web".into(),
            per_second: Some(5),
            per_minute: Some(100),
            burst: 25,
            burst_per_minute: 500,
            connections: Some(3),
            exempt: vec![
                IpNet::parse("10.0.0.0/8").unwrap_or_else(|e| panic!("{e}")),
                IpNet::parse("192.168.1.1").unwrap_or_else(|e| panic!("{e}")),
            ],
        })
    );
    let (s, _) = parsed(&[
        ("nginx.ingress.kubernetes.io/limit-rps", "2"),
        ("nginx.ingress.kubernetes.io/limit-burst-multiplier", "1"),
    ]);
    assert_eq!(s.rate_limit.map(|l| (l.burst, l.burst_per_minute, l.connections)), Some((2, 0, None)));
    let (s, d) = parsed(&[
        ("nginx.ingress.kubernetes.io/limit-rps", "0"),
        ("nginx.ingress.kubernetes.io/limit-connections", "lots"),
    ]);
    assert_eq!((s.rate_limit, d.len()), (None, 2));
    assert_eq!(parsed(&[("nginx.ingress.kubernetes.io/limit-burst-multiplier", "3")]).0.rate_limit, None);
}

fn auth_of(pairs: &[(&str, &str)]) -> (Option<AuthSetting>, Vec<(&'static str, String)>) {
    let (s, d) = parsed(pairs);
    (s.auth.map(|b| *b), d)
}

#[test]
fn basic_auth_names_its_secret_realm_and_form() {
    let basic = |secret: (&str, &str), realm: &str, map: bool| {
        Some(AuthSetting::Basic { realm: realm.into(), secret: (secret.0.into(), secret.1.into()), map })
    };
    let (a, d) = auth_of(&[
        ("nginx.ingress.kubernetes.io/auth-type", "basic"),
        ("nginx.ingress.kubernetes.io/auth-secret", "users"),
    ]);
    assert_eq!((a, d.len()), (basic(("default", "users"), "", false), 0));
    let (a, d) = auth_of(&[
        ("nginx.ingress.kubernetes.io/auth-type", " basic "),
        ("nginx.ingress.kubernetes.io/auth-secret", "default/users"),
        ("nginx.ingress.kubernetes.io/auth-secret-type", "auth-map"),
        ("nginx.ingress.kubernetes.io/auth-realm", "Staff \"only\""),
    ]);
    assert_eq!((a, d.len()), (basic(("default", "users"), "Staff \"only\"", true), 0));
    let (a, _) = auth_of(&[
        ("wharf.dev/auth-type", "basic"),
        ("wharf.dev/auth-secret", "users"),
        ("wharf.dev/auth-secret-type", "auth-file"),
    ]);
    assert_eq!(a, basic(("default", "users"), "", false));
    // A realm that is no header value is reported and left empty.
    let (a, d) = auth_of(&[
        ("wharf.dev/auth-type", "basic"),
        ("wharf.dev/auth-secret", "users"),
        ("wharf.dev/auth-realm", "a\nb"),
    ]);
    assert_eq!((a, d.len()), (basic(("default", "users"), "", false), 1));
}

#[test]
fn authentication_that_cannot_be_set_up_refuses_rather_than_opens() {
    let unavailable = |pairs: &[(&str, &str)], key: &str, words: &str| {
        let (a, d) = auth_of(pairs);
        let name = key.rsplit('/').next().unwrap_or(key);
        let why = format!("annotation {name}: ");
        assert!(matches!(&a, Some(AuthSetting::Unavailable(w)) if w.starts_with(&why)), "{pairs:?}: {a:?}");
        let said = d.iter().any(|(r, m)| {
            *r == "InvalidAnnotation"
                && m.contains(key)
                && m.contains(words)
                && m.ends_with("requests are answered 503 until it is fixed")
        });
        assert!(said, "{pairs:?}: {d:?}");
    };
    let t = "wharf.dev/auth-type";
    let sec = "wharf.dev/auth-secret";
    unavailable(&[(t, "digest"), (sec, "users")], t, "digest authentication is not supported");
    unavailable(&[(t, "ldap"), (sec, "users")], t, "\"ldap\" is not basic");
    unavailable(&[(t, "basic")], t, "needs auth-secret");
    unavailable(&[(t, "basic"), (sec, "other/users")], sec, "another namespace");
    for bad in ["Users", "a/b/c", "/users", "default/", "a.b/users", ""] {
        unavailable(&[(t, "basic"), (sec, bad)], sec, "is not a Secret's NAME or NAMESPACE/NAME");
    }
    unavailable(
        &[(t, "basic"), (sec, "users"), ("wharf.dev/auth-secret-type", "htdigest")],
        "wharf.dev/auth-secret-type",
        "is not auth-file or auth-map",
    );
    // A web application firewall Wharf does not have: refused, whatever else is set, and
    // the Event says so; "false" asks for nothing.
    let (key, value) = ("nginx.ingress.kubernetes.io/enable-modsecurity", "true");
    let (a, d) = auth_of(&[(key, value), (t, "basic"), (sec, "users")]);
    let name = key.rsplit('/').next().unwrap_or_default();
    assert_eq!(a, Some(AuthSetting::Unavailable(format!("annotation {name} is not supported"))));
    let msg = d.iter().find(|(_, m)| m.contains(key)).map(|(r, m)| (*r, m.clone()));
    assert!(matches!(&msg, Some(("UnsupportedAnnotation", m)) if m.contains("answered 503")), "{key}: {d:?}");
    let (a, d) = auth_of(&[("nginx.ingress.kubernetes.io/enable-owasp-core-rules", "false")]);
    assert_eq!(a, None);
    assert!(d.iter().all(|(_, m)| !m.contains("answered 503")), "{d:?}");
    // With the nginx names off, an nginx name is not read, so nothing is refused.
    let off = AnnotationOptions { nginx_names: false, ..AnnotationOptions::default() };
    let (s, _) = parse_with(&[(key, value)], &off);
    assert_eq!(s.auth, None);
    // Basic and external authentication together are not supported.
    unavailable(&[(t, "basic"), (sec, "users"), ("wharf.dev/auth-url", "http://a.b.svc/")], t, "together");
}

#[test]
fn client_certificates_are_read_and_what_cannot_be_checked_refuses() {
    let secret = "wharf.dev/auth-tls-secret";
    let tls = |pairs: &[(&str, &str)]| {
        let (s, d) = parsed(pairs);
        (
            s.client_tls.map(|b| *b),
            s.auth.map(|b| *b),
            d.into_iter().map(|(r, m)| format!("{r}: {m}")).collect::<Vec<_>>(),
        )
    };
    let setting = |verify, pass, page: Option<&str>| ClientTlsSetting {
        secret: ("default".into(), "ca".into()),
        check: wharf_model::ClientCertCheck {
            verify,
            pass_certificate: pass,
            error_page: page.map(str::to_owned),
            match_subject: None,
        },
        verify_depth: 1,
    };
    use wharf_model::VerifyClient::{On, Optional};
    assert_eq!(tls(&[(secret, "ca")]), (Some(setting(On, false, None)), None, vec![]));
    let all = [
        (secret, "default/ca"),
        ("wharf.dev/auth-tls-verify-client", "optional"),
        ("wharf.dev/auth-tls-pass-certificate-to-upstream", "true"),
        ("wharf.dev/auth-tls-error-page", "https://sso.example/cert"),
    ];
    assert_eq!(tls(&all), (Some(setting(Optional, true, Some("https://sso.example/cert"))), None, vec![]));
    // Off: nothing is asked for.
    assert_eq!(tls(&[(secret, "ca"), ("wharf.dev/auth-tls-verify-client", "off")]), (None, None, vec![]));
    // What cannot be checked refuses every request, and says why.
    for (pairs, why) in [
        (vec![(secret, "other/ca")], "auth-tls-secret: Secret other/ca is in another namespace"),
        (vec![(secret, "a/b/c")], "auth-tls-secret: \"a/b/c\" is not a Secret's NAME"),
        (
            vec![(secret, "ca"), ("wharf.dev/auth-tls-verify-client", "optional_no_ca")],
            "auth-tls-verify-client: optional_no_ca",
        ),
        (
            vec![(secret, "ca"), ("wharf.dev/auth-tls-verify-client", "yes")],
            "auth-tls-verify-client: \"yes\" is not on",
        ),
    ] {
        let (c, auth, d) = tls(&pairs);
        assert_eq!(c, None, "{pairs:?}");
        assert!(
            matches!(&auth, Some(AuthSetting::Unavailable(w)) if w.starts_with(&format!("annotation {why}"))),
            "{pairs:?}: {auth:?}"
        );
        assert!(
            d.len() == 1 && d[0].starts_with("InvalidAnnotation") && d[0].ends_with("answered 503 until it is fixed"),
            "{d:?}"
        );
    }
    // The subject, searched anywhere; the depth.
    let (c, auth, d) = tls(&[
        (secret, "ca"),
        ("nginx.ingress.kubernetes.io/auth-tls-match-cn", " CN=(ops|admin) "),
        ("nginx.ingress.kubernetes.io/auth-tls-verify-depth", "2"),
    ]);
    let c = c.unwrap_or_else(|| panic!("no client certificates: {auth:?} {d:?}"));
    let pattern = c.check.match_subject.as_ref().map(|p| p.as_str());
    assert_eq!((pattern, c.verify_depth, d.len()), (Some(".*(?:CN=(ops|admin)).*"), 2, 0));
    for bad in ["0", "17", "two", ""] {
        let (c, _, d) = tls(&[(secret, "ca"), ("wharf.dev/auth-tls-verify-depth", bad)]);
        assert_eq!(c.map(|c| c.verify_depth), Some(1), "{bad:?}");
        assert!(d.len() == 1 && d[0].contains("the depth is 1"), "{bad:?}: {d:?}");
    }
    for (bad, why) in [("CN=(ops", "auth-tls-match-cn: \"CN=(ops\""), (" ", "auth-tls-match-cn: is empty")] {
        let (c, auth, _) = tls(&[(secret, "ca"), ("wharf.dev/auth-tls-match-cn", bad)]);
        assert_eq!(c, None, "{bad:?}");
        assert!(
            matches!(&auth, Some(AuthSetting::Unavailable(w)) if w.starts_with(&format!("annotation {why}"))),
            "{bad:?}: {auth:?}"
        );
    }
    // A bad error page is dropped (400 instead), and settings without the Secret do nothing.
    let (c, _, d) = tls(&[(secret, "ca"), ("wharf.dev/auth-tls-error-page", "javascript:x")]);
    assert_eq!((c, d.len()), (Some(setting(On, false, None)), 1));
    let (c, auth, d) =
        tls(&[("wharf.dev/auth-tls-verify-client", "on"), ("wharf.dev/auth-tls-pass-certificate-to-upstream", "true")]);
    assert_eq!((c, auth, d.len()), (None, None, 2));
}

fn external(pairs: &[(&str, &str)]) -> ExternalSetting {
    match auth_of(pairs) {
        (Some(AuthSetting::External(e)), d) if d.is_empty() => e,
        other => panic!("{pairs:?}: {other:?}"),
    }
}

#[test]
fn external_auth_reads_its_url_and_settings_with_ingress_nginx_defaults() {
    let e = external(&[(
        "nginx.ingress.kubernetes.io/auth-url",
        " http://oauth2-proxy.sso.svc.cluster.local/oauth2/auth ",
    )]);
    assert_eq!(e.url.as_str(), "http://oauth2-proxy.sso.svc.cluster.local/oauth2/auth");
    assert_eq!((e.tls, e.host.as_deref(), e.port), (false, Some("oauth2-proxy.sso.svc.cluster.local"), 80));
    assert_eq!((e.method, e.signin, e.signin_redirect_param.as_str()), (None, None, "rd"));
    assert!(e.response_headers.is_empty() && e.request_redirect.is_none() && !e.always_set_cookie);
    let e = external(&[
        ("nginx.ingress.kubernetes.io/auth-url", "https://$host/oauth2/auth"),
        ("nginx.ingress.kubernetes.io/auth-signin", "https://$host/oauth2/start?rd=$escaped_request_uri"),
        ("nginx.ingress.kubernetes.io/auth-signin-redirect-param", "orig_2-b"),
        ("nginx.ingress.kubernetes.io/auth-method", "POST"),
        ("nginx.ingress.kubernetes.io/auth-response-headers", "X-Auth-Request-User, X-Auth-Request-Email,"),
        ("nginx.ingress.kubernetes.io/auth-request-redirect", "https://app.example/"),
        ("nginx.ingress.kubernetes.io/auth-always-set-cookie", "true"),
    ]);
    assert_eq!((e.tls, e.host, e.port), (true, None, 443));
    assert_eq!(
        e.signin.map(|t| t.as_str().to_owned()).as_deref(),
        Some("https://$host/oauth2/start?rd=$escaped_request_uri")
    );
    assert_eq!((e.method.as_deref(), e.signin_redirect_param.as_str()), (Some("POST"), "orig_2-b"));
    assert_eq!(e.response_headers, ["x-auth-request-user", "x-auth-request-email"]);
    assert_eq!((e.request_redirect.as_deref(), e.always_set_cookie), (Some("https://app.example/"), true));
    for (url, host, port) in [
        ("http://Auth.Example:8080/x", Some("auth.example"), 8080),
        ("http://10.0.0.1", Some("10.0.0.1"), 80),
        ("https://[fd00::1]:8443/check?x=1", Some("[fd00::1]"), 8443),
        ("http://${host}:81/", None, 81),
    ] {
        let e = external(&[("wharf.dev/auth-url", url)]);
        assert_eq!((e.host.as_deref(), e.port), (host, port), "{url}");
    }
}

#[test]
fn auth_cache_takes_a_key_of_the_clients_values_and_statuses_then_a_time() {
    let url = ("nginx.ingress.kubernetes.io/auth-url", "http://oauth2-proxy.sso.svc/oauth2/auth");
    let cache = |pairs: &[(&str, &str)]| {
        let mut all = vec![url];
        all.extend_from_slice(pairs);
        let (auth, findings) = auth_of(&all);
        let Some(AuthSetting::External(e)) = auth else { panic!("{auth:?}") };
        (e.cache.map(|c| (c.key.as_str().to_owned(), c.statuses.clone(), c.ttl_s)), findings.len())
    };
    assert_eq!(cache(&[]), (None, 0));
    let key = ("nginx.ingress.kubernetes.io/auth-cache-key", "$remote_user$http_authorization");
    assert_eq!(cache(&[key]), (Some((key.1.to_owned(), vec![200, 202, 401], 300)), 0), "ingress-nginx's default");
    for (duration, statuses, ttl) in [
        ("200 201 401 30m", vec![200, 201, 401], 1_800),
        ("200 1h", vec![200], 3_600),
        ("45s", vec![200, 301, 302], 45),
    ] {
        let got = cache(&[key, ("nginx.ingress.kubernetes.io/auth-cache-duration", duration)]);
        assert_eq!(got, (Some((key.1.to_owned(), statuses, ttl)), 0), "{duration}");
    }
    for bad in ["", "200", "200 5x", "abc 5m", "200 0s", "99 5m", "600 5m"] {
        let got = cache(&[key, ("nginx.ingress.kubernetes.io/auth-cache-duration", bad)]);
        assert_eq!(got, (None, 1), "{bad:?}");
    }
    for bad in ["", "$remote_addr", "$http_"] {
        assert_eq!(cache(&[("nginx.ingress.kubernetes.io/auth-cache-key", bad)]), (None, 1), "{bad:?}");
    }
}

#[test]
fn an_external_auth_that_does_not_parse_refuses_every_request() {
    let url = "wharf.dev/auth-url";
    for (pairs, key, words) in [
        (vec![(url, "ftp://auth/")], url, "is not an http:// or https:// URL"),
        (vec![(url, "http://auth check/")], url, "characters a URL cannot have"),
        (vec![(url, "http:///check")], url, "has no host"),
        (vec![(url, "http://a:0/")], url, "has no valid port"),
        (vec![(url, "http://a:x/")], url, "has no valid port"),
        (vec![(url, "http://[fd00::1/")], url, "unclosed ["),
        (vec![(url, "http://$remote_addr/")], url, "$remote_addr is not a variable"),
        (vec![(url, "http://a/"), ("wharf.dev/auth-method", "FETCH")], "wharf.dev/auth-method", "not an HTTP method"),
        (vec![(url, "http://a/"), ("wharf.dev/auth-signin", "/start")], "wharf.dev/auth-signin", "not an http://"),
        (
            vec![(url, "http://a/"), ("wharf.dev/auth-signin-redirect-param", "r d")],
            "wharf.dev/auth-signin-redirect-param",
            "not a query parameter name",
        ),
        (
            vec![(url, "http://a/"), ("wharf.dev/auth-response-headers", "X-User, X User")],
            "wharf.dev/auth-response-headers",
            "\"X User\" is not a header name",
        ),
    ] {
        let (a, d) = auth_of(&pairs);
        let name = key.rsplit('/').next().unwrap_or(key);
        assert!(
            matches!(&a, Some(AuthSetting::Unavailable(w)) if w.starts_with(&format!("annotation {name}: "))),
            "{pairs:?}: {a:?}"
        );
        assert!(d.iter().any(|(_, m)| m.contains(key) && m.contains(words)), "{pairs:?}: {d:?}");
    }
    // An invalid auth-request-redirect is only reported: the request's URI is sent.
    let (a, d) = auth_of(&[(url, "http://a/"), ("wharf.dev/auth-request-redirect", "a b")]);
    assert!(matches!(a, Some(AuthSetting::External(e)) if e.request_redirect.is_none()));
    assert_eq!(d.len(), 1);
}

#[test]
fn a_secret_without_a_type_does_nothing_as_in_ingress_nginx_and_says_so() {
    let (a, d) = auth_of(&[("nginx.ingress.kubernetes.io/auth-secret", "users")]);
    assert_eq!(a, None);
    assert_eq!(d.len(), 1);
    assert!(d[0].1.contains("has no effect without auth-type: basic"), "{d:?}");
    assert_eq!(auth_of(&[("nginx.ingress.kubernetes.io/auth-realm", "x")]), (None, vec![]));
}
