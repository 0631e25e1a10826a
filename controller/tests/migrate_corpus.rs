//! A corpus of Ingresses as ingress-nginx users write them (every annotation Wharf
//! implements, many it does not, snippets and invalid values) through `wharf migrate`'s
//! report and the translator: nothing crashes, every annotation gets a verdict, and the
//! verdicts are the documented ones.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use wharf_controller::migrate::{self, MigrateOptions, Verdict};
use wharf_controller::translate::ingress::annotations::{AnnotationOptions, IMPLEMENTED, NGINX_PREFIX};

fn corpus() -> wharf_controller::World {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/ingress-nginx-corpus");
    match wharf_controller::files::load(&[dir]) {
        Ok(loaded) => loaded.world,
        Err(errors) => panic!("{errors:?}"),
    }
}

fn opts() -> MigrateOptions {
    MigrateOptions {
        from_class: "nginx".into(),
        to_class: "wharf".into(),
        rename_annotations: false,
        annotations: AnnotationOptions::default(),
    }
}

#[test]
fn every_annotation_of_the_corpus_gets_its_documented_verdict() {
    let world = corpus();
    assert_eq!(world.ingresses.len(), 45);
    let reports = migrate::report(&world, &opts());
    assert_eq!(reports.len(), 44, "every Ingress but the traefik one");

    // Every annotation under either prefix is accounted for.
    for r in &reports {
        let ing = world.ingresses.iter().find(|i| i.metadata.name.as_deref() == Some(r.ingress.name.as_str())).unwrap();
        let ours = ing
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| k.starts_with(NGINX_PREFIX) || k.starts_with("wharf.dev/"))
            .count();
        assert_eq!(r.annotations.len(), ours, "{}", r.ingress);
    }
    // Every annotation Wharf implements appears in the corpus, valid somewhere.
    let valid: std::collections::BTreeSet<&str> = reports
        .iter()
        .flat_map(|r| r.annotations.iter())
        .filter(|(_, (_, v))| matches!(v, Verdict::Same | Verdict::Differs(_)))
        .filter_map(|(k, _)| k.strip_prefix(NGINX_PREFIX).or_else(|| k.strip_prefix("wharf.dev/")))
        .collect();
    for name in IMPLEMENTED {
        assert!(valid.contains(name), "{name} is implemented but not in the corpus with a valid value");
    }

    let verdict = |ns: &str, name: &str, key: &str| {
        let r = reports.iter().find(|r| r.ingress.namespace == ns && r.ingress.name == name).unwrap();
        let key = if key.contains('/') { key.to_owned() } else { format!("{NGINX_PREFIX}{key}") };
        r.annotations.get(&key).map(|(_, v)| v.clone()).unwrap_or_else(|| panic!("{ns}/{name}: no {key}"))
    };
    let kind = |v: Verdict| match v {
        Verdict::Same => "same",
        Verdict::Differs(_) => "differs",
        Verdict::NotSupported => "not supported",
        Verdict::NotEnforced => "not enforced",
        Verdict::Refused => "refused",
        Verdict::Invalid(_) => "invalid",
    };
    let table = [
        ("shop", "rewrite-capture", "rewrite-target", "differs"),
        ("shop", "rewrite-capture", "use-regex", "differs"),
        ("shop", "app-root", "app-root", "differs"),
        ("shop", "prefix-and-vhost", "upstream-vhost", "same"),
        ("shop", "prefix-and-vhost", "x-forwarded-prefix", "same"),
        ("shop", "bad-rewrite", "rewrite-target", "invalid"),
        ("shop", "bad-rewrite", "app-root", "invalid"),
        ("shop", "bad-rewrite", "upstream-vhost", "invalid"),
        ("web", "no-ssl-redirect", "ssl-redirect", "same"),
        ("web", "force-ssl", "from-to-www-redirect", "differs"),
        ("web", "moved", "permanent-redirect-code", "same"),
        ("web", "maintenance", "temporal-redirect-code", "same"),
        ("web", "bad-redirects", "permanent-redirect", "invalid"),
        ("web", "bad-redirects", "ssl-redirect", "invalid"),
        ("web", "passthrough", "ssl-passthrough", "same"),
        ("admin", "office-only", "whitelist-source-range", "differs"),
        ("admin", "typo-in-list", "whitelist-source-range", "invalid"),
        ("admin", "basic-auth", "auth-type", "same"),
        ("admin", "basic-auth", "auth-secret", "same"),
        ("admin", "basic-auth", "auth-realm", "same"),
        ("admin", "team-map", "auth-secret-type", "same"),
        ("admin", "digest-auth", "auth-type", "invalid"),
        ("admin", "digest-auth", "auth-secret", "same"),
        ("admin", "oauth2", "auth-url", "differs"),
        ("admin", "oauth2", "auth-signin", "same"),
        ("admin", "oauth2", "auth-response-headers", "same"),
        ("admin", "authelia", "auth-url", "differs"),
        ("admin", "authelia", "auth-signin-redirect-param", "same"),
        ("admin", "authelia", "auth-always-set-cookie", "same"),
        ("admin", "client-certs", "auth-tls-secret", "differs"),
        ("admin", "client-certs", "auth-tls-verify-client", "same"),
        ("admin", "client-certs", "auth-tls-verify-depth", "differs"),
        ("admin", "client-certs", "auth-tls-pass-certificate-to-upstream", "same"),
        ("admin", "client-certs", "auth-tls-error-page", "same"),
        ("admin", "client-cn", "auth-tls-match-cn", "same"),
        ("app", "production", "proxy-send-timeout", "differs"),
        ("app", "production", "proxy-read-timeout", "differs"),
        ("app", "canary", "canary-by-cookie", "same"),
        ("app", "canary-pattern", "canary-by-header-pattern", "differs"),
        ("app", "limited", "limit-rate", "not supported"),
        ("app", "sticky", "affinity-mode", "not supported"),
        ("app", "sticky", "session-cookie-samesite", "same"),
        ("app", "cors", "cors-allow-origin", "same"),
        ("app", "fastcgi", "backend-protocol", "invalid"),
        ("app", "bad-values", "proxy-body-size", "invalid"),
        ("app", "bad-values", "affinity", "invalid"),
        ("app", "bad-values", "canary", "invalid"),
        ("legacy", "configuration-snippet", "configuration-snippet", "refused"),
        ("legacy", "waf", "enable-modsecurity", "not enforced"),
        ("legacy", "waf", "enable-owasp-core-rules", "not enforced"),
        ("legacy", "waf", "modsecurity-snippet", "refused"),
        ("misc", "legacy-class", "custom-http-errors", "differs"),
        ("misc", "legacy-class", "default-backend", "same"),
        ("misc", "tuning", "proxy-ssl-verify", "invalid"),
        ("misc", "backend-tls", "proxy-ssl-verify", "same"),
        ("misc", "backend-tls", "proxy-ssl-name", "differs"),
        ("misc", "backend-tls", "proxy-ssl-verify-depth", "same"),
        ("misc", "tuning", "wharf.dev/ssl-redirct", "not supported"),
        ("misc", "tuning", "wharf.dev/proxy-body-size", "differs"),
    ];
    for (ns, name, key, want) in table {
        assert_eq!(kind(verdict(ns, name, key)), want, "{ns}/{name} {key}");
    }

    let mut skipped: Vec<String> =
        reports.iter().filter(|r| r.skipped).map(|r| format!("{}/{}", r.ingress.namespace, r.ingress.name)).collect();
    skipped.sort();
    assert_eq!(skipped, ["legacy/auth-snippet", "legacy/configuration-snippet", "legacy/server-snippet", "legacy/waf"]);

    let problems: Vec<String> = reports
        .iter()
        .flat_map(|r| {
            r.problems.iter().map(move |d| format!("{}/{} {}", r.ingress.namespace, r.ingress.name, d.reason))
        })
        .collect();
    for want in [
        "shop/regex-invalid InvalidPath",
        "app/lonely-canary CanaryWithoutMain",
        "misc/conflict-newer HostPathConflict",
    ] {
        assert!(problems.iter().any(|p| p == want), "{want} not in {problems:?}");
    }

    let text = migrate::render(&reports, &opts());
    assert!(text.contains("44 Ingresses of class \"nginx\""), "{text}");
}

#[test]
fn the_whole_corpus_translates_for_wharf_without_a_crash() {
    let world = corpus();
    let rewritten = wharf_controller::World {
        ingresses: world
            .ingresses
            .iter()
            .map(|i| migrate::rewrite(i, &MigrateOptions { rename_annotations: true, ..opts() }))
            .collect(),
        ingress_classes: vec![serde_json::from_value::<k8s_openapi::api::networking::v1::IngressClass>(
            serde_json::json!({"metadata": {"name": "wharf"}, "spec": {"controller": "wharf.dev/ingress-controller"}}),
        )
        .unwrap()]
        .into(),
        ..wharf_controller::World::default()
    };
    let t = wharf_controller::translate(&rewritten, &wharf_controller::Options::default(), None);
    assert!(!t.snapshot.virtual_hosts.is_empty());
    // The renamed annotations read the same as the originals.
    let original = wharf_controller::World {
        ingresses: world.ingresses.iter().map(|i| migrate::rewrite(i, &opts())).collect(),
        ingress_classes: rewritten.ingress_classes.clone(),
        ..wharf_controller::World::default()
    };
    let o = wharf_controller::translate(&original, &wharf_controller::Options::default(), None);
    assert_eq!(
        serde_json::to_value(&t.snapshot).unwrap(),
        serde_json::to_value(&o.snapshot).unwrap(),
        "renaming to wharf.dev/ changes what is served"
    );
}
