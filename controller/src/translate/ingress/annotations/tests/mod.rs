use super::*;
use wharf_model::{IpNet, Pattern};

mod access;
mod routing;
mod upstream;

fn src() -> ObjectRef {
    ObjectRef::new("Ingress", "default", "web")
}

fn parse_with(pairs: &[(&str, &str)], opts: &AnnotationOptions) -> (Settings, Vec<(&'static str, String)>) {
    let ann: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let mut diags = Vec::new();
    let s = parse(Some(&ann), &src(), opts, &mut diags);
    (s, diags.into_iter().map(|d| (d.reason.as_str(), d.message)).collect())
}

fn parsed(pairs: &[(&str, &str)]) -> (Settings, Vec<(&'static str, String)>) {
    parse_with(pairs, &AnnotationOptions::default())
}

fn nets(list: &[&str]) -> Vec<IpNet> {
    list.iter().filter_map(|n| IpNet::parse(n).ok()).collect()
}

/// Every Ingress's settings are held while a translation runs: the settings few
/// Ingresses use are boxed (10,000 Ingresses: 3 MB instead of 12).
#[test]
fn settings_without_extras_stay_small() {
    let size = std::mem::size_of::<Settings>();
    assert!(size <= 336, "Settings is {size} bytes: box what few Ingresses set");
}

#[test]
fn acme_annotations_are_read_only_under_wharfs_prefix() {
    let (s, d) = parsed(&[("wharf.dev/acme", "true"), ("wharf.dev/acme-issuer", "le-2")]);
    assert_eq!((s.acme, s.acme_issuer.as_deref(), d.len()), (Some(true), Some("le-2"), 0), "{d:?}");
    let (s, d) =
        parsed(&[("nginx.ingress.kubernetes.io/acme", "true"), ("nginx.ingress.kubernetes.io/acme-issuer", "le")]);
    assert_eq!((s.acme, s.acme_issuer), (None, None));
    assert_eq!(
        d.iter().map(|(r, _)| *r).collect::<Vec<_>>(),
        ["UnsupportedAnnotation", "UnsupportedAnnotation"],
        "{d:?}"
    );
    for bad in ["", "LE", "le_2", "le.prod"] {
        let (s, d) = parsed(&[("wharf.dev/acme-issuer", bad)]);
        assert_eq!((s.acme_issuer, d.len()), (None, 1), "{bad:?}: {d:?}");
    }
    for good in ["le", "2", "-"] {
        assert_eq!(parsed(&[("wharf.dev/acme-issuer", good)]).0.acme_issuer.as_deref(), Some(good));
    }
}

#[test]
fn without_annotations_the_defaults_hold() {
    let mut diags = Vec::new();
    let s = parse(None, &src(), &AnnotationOptions::default(), &mut diags);
    assert_eq!(s, Settings::default());
    assert!(s.ssl_redirect && !s.skip && !s.ssl_passthrough && diags.is_empty());
}

#[test]
fn both_prefixes_are_read_and_the_wharf_name_wins() {
    for key in ["wharf.dev/ssl-redirect", "nginx.ingress.kubernetes.io/ssl-redirect"] {
        let (s, d) = parsed(&[(key, "false")]);
        assert!(!s.ssl_redirect, "{key}");
        assert!(d.is_empty(), "{d:?}");
    }
    let (s, _) = parsed(&[("wharf.dev/proxy-body-size", "1k"), ("nginx.ingress.kubernetes.io/proxy-body-size", "8m")]);
    assert_eq!(s.max_body_bytes, Some(1024));
}

#[test]
fn booleans_and_sizes_take_valid_values_and_report_the_rest() {
    let (s, d) = parsed(&[
        ("nginx.ingress.kubernetes.io/ssl-passthrough", "true"),
        ("nginx.ingress.kubernetes.io/force-ssl-redirect", " true "),
        ("nginx.ingress.kubernetes.io/from-to-www-redirect", "true"),
        ("nginx.ingress.kubernetes.io/proxy-body-size", "0"),
    ]);
    assert!(s.ssl_passthrough && s.force_ssl_redirect && s.from_to_www && d.is_empty());
    assert_eq!(s.max_body_bytes, Some(0));
    let (s, d) = parsed(&[("wharf.dev/ssl-redirect", "no"), ("wharf.dev/proxy-body-size", "lots")]);
    assert!(s.ssl_redirect, "an invalid value is ignored: the default holds");
    assert_eq!(s.max_body_bytes, None);
    let reasons: Vec<_> = d.iter().map(|(r, m)| (*r, m.split(':').next().unwrap_or(""))).collect();
    assert_eq!(
        reasons,
        [
            ("InvalidAnnotation", "annotation wharf.dev/ssl-redirect"),
            ("InvalidAnnotation", "annotation wharf.dev/proxy-body-size")
        ]
    );
}

#[test]
fn snippets_skip_the_ingress_or_are_ignored_as_configured() {
    let snippet = [("nginx.ingress.kubernetes.io/configuration-snippet", "more_set_headers \"X: y\";")];
    let (s, d) = parsed(&snippet);
    assert!(s.skip);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].0, "SnippetRefused");
    assert!(d[0].1.contains("configuration-snippet") && d[0].1.contains("not served"), "{}", d[0].1);
    let ignore = AnnotationOptions { snippets: SnippetPolicy::Ignore, ..AnnotationOptions::default() };
    let (s, d) = parse_with(&snippet, &ignore);
    assert!(!s.skip);
    assert!(d[0].0 == "SnippetRefused" && d[0].1.contains("served without it"), "{d:?}");
    // Refused under either prefix, and even with the nginx names off.
    let off = AnnotationOptions { nginx_names: false, ..AnnotationOptions::default() };
    assert!(parse_with(&snippet, &off).0.skip);
    assert!(parsed(&[("wharf.dev/server-snippet", "x")]).0.skip);
}

#[test]
fn every_other_annotation_under_our_prefixes_is_reported_by_name() {
    let (s, d) = parsed(&[
        ("nginx.ingress.kubernetes.io/proxy-buffering", "on"),
        ("wharf.dev/ssl-redirct", "false"),
        ("kubernetes.io/ingress.class", "wharf"),
        ("example.com/owner", "team-a"),
        ("nginx.ingress.kubernetes.io/ssl-redirect", "false"),
    ]);
    assert!(!s.ssl_redirect && !s.skip);
    assert_eq!(d.len(), 2, "{d:?}");
    assert!(d.iter().all(|(r, _)| *r == "UnsupportedAnnotation"));
    assert!(d[0].1.contains("nginx.ingress.kubernetes.io/proxy-buffering") && d[0].1.contains("served without it"));
    assert!(d[1].1.contains("wharf.dev/ssl-redirct") && d[1].1.contains("misspelling"));
}

#[test]
fn with_nginx_names_off_only_wharf_names_count_and_the_others_are_reported() {
    let off = AnnotationOptions { nginx_names: false, ..AnnotationOptions::default() };
    let (s, d) =
        parse_with(&[("nginx.ingress.kubernetes.io/ssl-redirect", "false"), ("wharf.dev/proxy-body-size", "1k")], &off);
    assert!(s.ssl_redirect, "the nginx name is not read");
    assert_eq!(s.max_body_bytes, Some(1024));
    assert_eq!(d.len(), 1);
    assert!(
        d[0].1.contains("--nginx-annotations=false") && d[0].1.contains("use wharf.dev/ssl-redirect"),
        "{}",
        d[0].1
    );
}

#[test]
fn every_implemented_name_is_read() {
    // An annotation named in IMPLEMENTED but not read would be silently ignored: each
    // one, set to a valid value, must change the settings.
    let value = |name: &str| match name {
        "proxy-body-size" => "1k",
        "ssl-redirect" => "false",
        n if n.ends_with("-source-range") => "10.0.0.0/8",
        n if n.ends_with("-code") => "308",
        "app-root" => "/app",
        "rewrite-target" => "/$1",
        "proxy-connect-timeout" | "proxy-read-timeout" | "proxy-send-timeout" => "30",
        "backend-protocol" => "GRPC",
        "upstream-vhost" => "internal.example",
        "enable-cors" => "true",
        "cors-allow-origin" => "https://a.example",
        "cors-allow-credentials" => "false",
        "cors-max-age" => "60",
        "limit-rps" | "limit-rpm" | "limit-connections" | "limit-burst-multiplier" => "7",
        "limit-allowlist" | "limit-whitelist" => "10.0.0.0/8",
        "affinity" => "cookie",
        "session-cookie-path" => "/app",
        "session-cookie-max-age" | "session-cookie-expires" => "60",
        "session-cookie-samesite" => "Lax",
        "session-cookie-domain" => "shop.example",
        "proxy-next-upstream" => "error timeout http_502",
        "auth-cache-key" => "$http_authorization",
        "auth-cache-duration" => "200 1h",
        "affinity-canary-behavior" => "legacy",
        "proxy-next-upstream-tries" | "proxy-next-upstream-timeout" => "3",
        "session-cookie-name" => "route",
        n if n.starts_with("cors-") => "X-Custom",
        "x-forwarded-prefix" => "/app",
        "auth-type" => "basic",
        "auth-secret" => "users",
        "auth-secret-type" => "auth-map",
        "auth-realm" => "Staff only",
        "auth-url" => "http://auth.sso.svc/check",
        "auth-method" => "POST",
        "auth-signin" => "https://sso.example/start",
        "auth-signin-redirect-param" => "orig",
        "auth-response-headers" => "X-User",
        "auth-request-redirect" => "/x",
        "auth-tls-secret" => "ca",
        "auth-tls-verify-client" => "optional",
        "auth-tls-error-page" => "https://sso.example/certificate",
        "auth-tls-match-cn" => "CN=ops",
        "default-backend" => "errors",
        "proxy-ssl-verify" | "proxy-ssl-server-name" => "on",
        "proxy-ssl-secret" => "ca",
        "proxy-ssl-name" => "svc.example",
        "proxy-ssl-verify-depth" => "2",
        "custom-http-errors" => "404,503",
        "auth-tls-verify-depth" => "3",
        "canary" => "true",
        n if n.starts_with("canary-by-") => "x-canary",
        n if n.starts_with("canary-weight") => "30",
        n if n.ends_with("redirect") && n != "force-ssl-redirect" && n != "from-to-www-redirect" => "https://x.example",
        _ => "true",
    };
    for name in IMPLEMENTED {
        let mut pairs = vec![(format!("wharf.dev/{name}"), value(name).to_owned())];
        // What the name modifies, when it modifies another.
        if let Some(base) = name.strip_suffix("-code") {
            pairs.push((format!("wharf.dev/{base}"), "https://x.example".to_owned()));
        } else if name == "relative-redirects" {
            pairs.push(("wharf.dev/permanent-redirect".to_owned(), "/new".to_owned()));
        } else if name.starts_with("canary-") || name == "affinity-canary-behavior" {
            pairs.push(("wharf.dev/canary".to_owned(), "true".to_owned()));
        } else if name.starts_with("cors-") {
            pairs.push(("wharf.dev/enable-cors".to_owned(), "true".to_owned()));
        } else if matches!(name, "limit-burst-multiplier" | "limit-allowlist" | "limit-whitelist") {
            pairs.push(("wharf.dev/limit-rps".to_owned(), "3".to_owned()));
        } else if name.starts_with("proxy-ssl-") {
            pairs.push(("wharf.dev/backend-protocol".to_owned(), "HTTPS".to_owned()));
            if name != "proxy-ssl-verify" {
                pairs.push(("wharf.dev/proxy-ssl-verify".to_owned(), "on".to_owned()));
            }
        } else if name == "custom-http-errors" {
            pairs.push(("wharf.dev/default-backend".to_owned(), "errors".to_owned()));
        } else if name.starts_with("session-cookie-") {
            pairs.push(("wharf.dev/affinity".to_owned(), "cookie".to_owned()));
        } else if name.starts_with("auth-tls-") {
            if name != "auth-tls-secret" {
                pairs.push(("wharf.dev/auth-tls-secret".to_owned(), "ca".to_owned()));
            }
        } else if name.starts_with("auth-")
            && !matches!(name, "auth-type" | "auth-secret" | "auth-secret-type" | "auth-realm")
        {
            if name != "auth-url" {
                pairs.push(("wharf.dev/auth-url".to_owned(), "http://auth.sso.svc/check".to_owned()));
            }
            if name == "auth-cache-duration" {
                pairs.push(("wharf.dev/auth-cache-key".to_owned(), "$http_authorization".to_owned()));
            }
        } else if name.starts_with("auth-") {
            for (other, v) in [("auth-type", "basic"), ("auth-secret", "users")] {
                if name != other {
                    pairs.push((format!("wharf.dev/{other}"), v.to_owned()));
                }
            }
        }
        let borrowed: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let (s, d) = parsed(&borrowed);
        assert!(d.is_empty(), "{name}: {d:?}");
        let baseline = parsed(&borrowed[1..]).0;
        assert_ne!(s, baseline, "{name} is listed as implemented but changes nothing");
    }
}
