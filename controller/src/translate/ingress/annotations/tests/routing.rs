use super::*;
use crate::translate::ingress::annotations::routing::{is_origin, CORS_HEADERS, CORS_MAX_AGE, CORS_METHODS};

#[test]
fn redirects_take_urls_codes_and_temporal_wins() {
    let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/permanent-redirect", "https://new.example/x?y=1")]);
    assert_eq!(
        s.redirect.map(|b| *b),
        Some(FixedRedirect { url: "https://new.example/x?y=1".into(), status: 301, relative: false })
    );
    assert!(d.is_empty());
    let (s, _) = parsed(&[
        ("nginx.ingress.kubernetes.io/permanent-redirect", "https://a.example"),
        ("nginx.ingress.kubernetes.io/permanent-redirect-code", "308"),
    ]);
    assert_eq!(s.redirect.map(|r| r.status), Some(308));
    let (s, _) = parsed(&[
        ("nginx.ingress.kubernetes.io/permanent-redirect", "https://a.example"),
        ("nginx.ingress.kubernetes.io/temporal-redirect", "http://b.example/"),
    ]);
    assert_eq!(
        s.redirect.map(|b| *b),
        Some(FixedRedirect { url: "http://b.example/".into(), status: 302, relative: false })
    );
    let (s, d) =
        parsed(&[("wharf.dev/temporal-redirect", "https://b.example"), ("wharf.dev/temporal-redirect-code", "200")]);
    assert_eq!(s.redirect.map(|r| r.status), Some(302));
    assert_eq!(d.len(), 1);
    assert!(d[0].1.contains("temporal-redirect-code") && d[0].1.contains("302 is used"), "{}", d[0].1);
    // A path is kept, made absolute by the data plane unless `relative-redirects`.
    let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/permanent-redirect", "/new-location")]);
    assert_eq!(
        (s.redirect.map(|b| *b), d.len()),
        (Some(FixedRedirect { url: "/new-location".into(), status: 301, relative: false }), 0)
    );
    let (s, _) = parsed(&[
        ("nginx.ingress.kubernetes.io/permanent-redirect", "/new-location"),
        ("nginx.ingress.kubernetes.io/relative-redirects", "true"),
    ]);
    assert_eq!(s.redirect.map(|b| b.relative), Some(true));
    for bad in [
        "ftp://a.example",
        "relative",
        "//other.example/x",
        "/a b",
        "https://",
        "https://:80/x",
        "https://a.example/x\r\nSet-Cookie: a",
        "https://a b",
    ] {
        let (s, d) = parsed(&[("wharf.dev/permanent-redirect", bad)]);
        assert_eq!(s.redirect, None, "{bad:?}");
        assert_eq!(d.len(), 1, "{bad:?}: {d:?}");
    }
}

#[test]
fn rewrite_target_implies_regex_paths() {
    let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/rewrite-target", "/$2")]);
    assert_eq!((s.rewrite_target.as_deref(), s.use_regex, s.regex(), d.len()), (Some("/$2"), false, true, 0));
    let (s, _) = parsed(&[("nginx.ingress.kubernetes.io/use-regex", "true")]);
    assert!(s.regex() && s.rewrite_target.is_none());
    assert!(!Settings::default().regex());
    for bad in ["", "/a b", "/x?y=1", "/x#f"] {
        let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/rewrite-target", bad)]);
        assert_eq!((s.rewrite_target, d.len()), (None, 1), "{bad:?}");
    }
}

#[test]
fn canaries_take_header_cookie_and_weight_settings() {
    assert_eq!(parsed(&[("nginx.ingress.kubernetes.io/canary-weight", "10")]).0.canary, None, "not a canary");
    let (s, d) = parsed(&[
        ("nginx.ingress.kubernetes.io/canary", "true"),
        ("nginx.ingress.kubernetes.io/canary-by-header", "X-Canary"),
        ("nginx.ingress.kubernetes.io/canary-by-header-value", "yes"),
        ("nginx.ingress.kubernetes.io/canary-by-header-pattern", "ignored"),
        ("nginx.ingress.kubernetes.io/canary-by-cookie", "canary"),
        ("nginx.ingress.kubernetes.io/canary-weight", "250"),
        ("nginx.ingress.kubernetes.io/canary-weight-total", "200"),
    ]);
    assert!(d.is_empty(), "{d:?}");
    let c = s.canary.unwrap_or_default();
    assert_eq!(c.header.as_deref(), Some("x-canary"));
    assert_eq!(c.header_value.as_deref(), Some("yes"));
    assert!(c.header_pattern.is_none(), "a value wins over a pattern");
    assert_eq!((c.cookie.as_deref(), c.weight, c.weight_total), (Some("canary"), 200, 200), "the weight is capped");
    let (s, _) = parsed(&[
        ("nginx.ingress.kubernetes.io/canary", "true"),
        ("nginx.ingress.kubernetes.io/canary-by-header-pattern", "^v[12]$"),
    ]);
    let p = s.canary.and_then(|c| c.header_pattern).unwrap_or_else(|| panic!("no pattern"));
    assert!(p.is_match("v2") && !p.is_match("v3") && !p.is_match("xv1"));
    let unanchored = Pattern::full(".*(?:beta).*").ok();
    let (s, _) = parsed(&[
        ("nginx.ingress.kubernetes.io/canary", "true"),
        ("nginx.ingress.kubernetes.io/canary-by-header-pattern", "beta"),
    ]);
    assert_eq!(s.canary.and_then(|c| c.header_pattern), unanchored, "searched anywhere in the value");
    let (s, d) = parsed(&[
        ("nginx.ingress.kubernetes.io/canary", "true"),
        ("nginx.ingress.kubernetes.io/canary-by-header", "bad header"),
        ("nginx.ingress.kubernetes.io/canary-by-header-pattern", "(?<=x)"),
        ("nginx.ingress.kubernetes.io/canary-by-cookie", "a;b"),
        ("nginx.ingress.kubernetes.io/canary-weight", "ten"),
        ("nginx.ingress.kubernetes.io/canary-weight-total", "0"),
    ]);
    assert_eq!(
        s.canary.map(|b| *b),
        Some(Canary { weight_total: 100, header_pattern_broken: true, ..Canary::default() })
    );
    assert_eq!(d.len(), 5, "{d:?}");
    for (behavior, legacy, findings) in [("legacy", true, 0), ("sticky", false, 0), ("loose", false, 1)] {
        let (s, d) = parsed(&[
            ("nginx.ingress.kubernetes.io/canary", "true"),
            ("nginx.ingress.kubernetes.io/affinity-canary-behavior", behavior),
        ]);
        assert_eq!((s.canary.map(|c| c.legacy_affinity), d.len()), (Some(legacy), findings), "{behavior}");
    }
}

#[test]
fn cors_takes_ingress_nginx_defaults_and_checks_each_value() {
    assert_eq!(parsed(&[("nginx.ingress.kubernetes.io/cors-allow-origin", "https://a.example")]).0.cors, None);
    let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/enable-cors", "true")]);
    assert!(d.is_empty());
    assert_eq!(
        s.cors.map(|b| *b),
        Some(wharf_model::Cors {
            allow_origins: vec!["*".into()],
            allow_methods: CORS_METHODS.into(),
            allow_headers: CORS_HEADERS.into(),
            expose_headers: String::new(),
            allow_credentials: true,
            max_age: 1_728_000,
        })
    );
    let (s, d) = parsed(&[
        ("nginx.ingress.kubernetes.io/enable-cors", "true"),
        (
            "nginx.ingress.kubernetes.io/cors-allow-origin",
            "https://a.example, https://*.b.example:8443 ,bad origin, *.c.example",
        ),
        ("nginx.ingress.kubernetes.io/cors-allow-methods", "GET, POST"),
        ("nginx.ingress.kubernetes.io/cors-allow-headers", "X-Token,Content-Type"),
        ("nginx.ingress.kubernetes.io/cors-expose-headers", "*, X-Total"),
        ("nginx.ingress.kubernetes.io/cors-allow-credentials", "false"),
        ("nginx.ingress.kubernetes.io/cors-max-age", "600"),
    ]);
    let c = s.cors.unwrap_or_else(|| panic!("no CORS"));
    assert_eq!(c.allow_origins, ["https://a.example", "https://*.b.example:8443"]);
    for bad in [
        "://a.example",
        "ht tp://a.example",
        "http_s://a.example",
        "https://",
        "https://:8443",
        "https://a_b.example",
        "https://*.",
    ] {
        assert!(!is_origin(bad), "{bad}");
    }
    for good in ["*", "http://localhost:3000", "https://[::1]:8443", "https://*.a.example", "app+v1://x.example"] {
        assert!(is_origin(good), "{good}");
    }
    assert_eq!(d.len(), 2, "the two bad origins are reported: {d:?}");
    assert_eq!((c.allow_methods.as_str(), c.allow_headers.as_str()), ("GET, POST", "X-Token,Content-Type"));
    assert_eq!((c.expose_headers.as_str(), c.allow_credentials, c.max_age), ("*, X-Total", false, 600));
    let (s, d) = parsed(&[
        ("wharf.dev/enable-cors", "true"),
        ("wharf.dev/cors-allow-methods", "GET;rm"),
        ("wharf.dev/cors-allow-headers", "*"),
        ("wharf.dev/cors-max-age", "a day"),
    ]);
    let c = s.cors.unwrap_or_else(|| panic!("no CORS"));
    assert_eq!(
        (c.allow_methods.as_str(), c.allow_headers.as_str(), c.max_age),
        (CORS_METHODS, CORS_HEADERS, CORS_MAX_AGE)
    );
    assert_eq!(d.len(), 3, "{d:?}");
    for origins in ["   ", "", "https://a.example, *", "*, bad origin"] {
        let (s, d) = parsed(&[
            ("nginx.ingress.kubernetes.io/enable-cors", "true"),
            ("nginx.ingress.kubernetes.io/cors-allow-origin", origins),
        ]);
        let c = s.cors.unwrap_or_else(|| panic!("no CORS for {origins:?}"));
        assert_eq!((c.allow_origins, d.len()), (vec!["*".to_owned()], 0), "{origins:?}");
    }
    // Not blank, but no origin in it: none allowed (as in ingress-nginx).
    let (s, _) = parsed(&[
        ("nginx.ingress.kubernetes.io/enable-cors", "true"),
        ("nginx.ingress.kubernetes.io/cors-allow-origin", " , "),
    ]);
    assert_eq!(s.cors.map(|c| c.allow_origins), Some(vec![]));
}

#[test]
fn app_root_is_an_absolute_path() {
    let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/app-root", "/app1")]);
    assert_eq!((s.app_root.as_deref(), d.len()), (Some("/app1"), 0));
    for bad in ["app1", "/", "", "/a b", "https://x/app"] {
        let (s, d) = parsed(&[("nginx.ingress.kubernetes.io/app-root", bad)]);
        assert_eq!((s.app_root, d.len()), (None, 1), "{bad:?}");
    }
}

#[test]
fn server_aliases_are_host_names_each_once_and_an_invalid_one_is_told() {
    let (s, d) =
        parsed(&[("nginx.ingress.kubernetes.io/server-alias", " a.example, *.b.example,a.example, ,bad_name!")]);
    let shown: Vec<String> = s.server_aliases.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["a.example", "*.b.example"]);
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].1.contains("bad_name!"), "{d:?}");
    assert!(parsed(&[]).0.server_aliases.is_empty());
}
