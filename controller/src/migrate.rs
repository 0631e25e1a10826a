//! `wharf migrate`: what Wharf will do with Ingresses written for ingress-nginx (the same,
//! differently, or not at all), and the same Ingresses rewritten for Wharf's class.

use std::collections::BTreeMap;
use std::fmt::Write;

use k8s_openapi::api::networking::v1::{Ingress, IngressClass};

use crate::stored::Ingress as Stored;
use wharf_model::ObjectRef;

use crate::translate::ingress::annotations::{
    self, AnnotationOptions, Finding, IMPLEMENTED, NGINX_PREFIX, WHARF_PREFIX,
};
use crate::translate::{self, Diagnostic, Options, Reason};
use crate::World;

/// The legacy class annotation.
const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

/// What `wharf migrate` works on.
#[derive(Debug, Clone)]
pub struct MigrateOptions {
    /// The class the Ingresses have now (ingress-nginx's, usually `nginx`).
    pub from_class: String,
    /// Wharf's class.
    pub to_class: String,
    /// In the rewritten Ingresses, `nginx.ingress.kubernetes.io/NAME` becomes
    /// `wharf.dev/NAME` for the names Wharf implements.
    pub rename_annotations: bool,
    /// How Wharf will read the annotations.
    pub annotations: AnnotationOptions,
}

/// What Wharf does with one annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// As ingress-nginx does.
    Same,
    /// Supported, with this difference.
    Differs(&'static str),
    /// Not supported: the Ingress is served without it.
    NotSupported,
    /// Access control Wharf does not enforce yet: the Ingress's requests are answered 503.
    NotEnforced,
    /// A snippet: the Ingress is not served (or served without it, as configured).
    Refused,
    /// The value is invalid; what Wharf does instead.
    Invalid(String),
}

impl Verdict {
    /// Its label in the report, and what follows the value (`not_supported` for
    /// [`Verdict::NotSupported`]).
    pub fn describe(&self, not_supported: &str) -> (&'static str, String) {
        match self {
            Verdict::Same => ("same", String::new()),
            Verdict::Differs(why) => ("differs", format!(": {why}")),
            Verdict::NotSupported => ("not supported", not_supported.to_owned()),
            Verdict::NotEnforced => {
                ("not supported", ": protection Wharf does not give; requests are answered 503".to_owned())
            }
            Verdict::Refused => ("refused", ": raw proxy configuration, never run".to_owned()),
            Verdict::Invalid(why) => ("invalid", format!(": {why}")),
        }
    }
}

/// One Ingress, as Wharf will see it.
#[derive(Debug, Clone)]
pub struct IngressReport {
    /// The Ingress.
    pub ingress: ObjectRef,
    /// Each annotation under either prefix, by key: its value and verdict.
    pub annotations: BTreeMap<String, (String, Verdict)>,
    /// What translating it for Wharf reports (conflicts, invalid paths, ...).
    pub problems: Vec<Diagnostic>,
    /// It will not be served at all (a snippet, with `--snippet-annotations=skip-ingress`).
    pub skipped: bool,
}

/// Where Wharf's behaviour differs for an annotation it implements.
fn difference(name: &str) -> Option<&'static str> {
    Some(match name {
        "proxy-send-timeout" => {
            "times each part of the body the backend takes as the client streams it (ingress-nginx reads the whole body first, then times its writes)"
        }
        "proxy-read-timeout" => "times the wait for the response headers only; a response body that pauses is not cut",
        "from-to-www-redirect" => {
            "the redirect keeps a trailing / that ingress-nginx drops, and has the port the client used, not the pod's"
        }
        "server-alias" => "an alias another namespace owns, or an Ingress serves itself, is not served",
        "app-root" => "the redirect keeps the query",
        "use-regex" | "rewrite-target" => {
            "regular expressions use Rust's syntax (no look-around or backreferences); equal-length paths are tried oldest Ingress first"
        }
        "canary-by-header-pattern" => "Rust regular expression syntax (no look-around or backreferences)",
        "whitelist-source-range" | "allowlist-source-range" | "denylist-source-range" => {
            "an entry that does not parse refuses every client, where ingress-nginx may keep the valid entries"
        }
        "affinity" => "sessions stay on their endpoint while it exists (affinity-mode persistent); WebSocket upgrades are not sticky",
        "proxy-body-size" => "without it, the gateway's --max-request-body applies, not 1m",
        "auth-tls-secret" => {
            "a presented certificate that does not chain to the CA fails the TLS handshake (ingress-nginx answers 400)"
        }
        "auth-tls-verify-depth" => {
            "chains are built from the certificates the client sends in order (its issuer first), leaving out copies of the CA"
        }
        "proxy-ssl-name" | "proxy-ssl-secret" => {
            "without proxy-ssl-name the certificate must cover SERVICE.NAMESPACE.svc (nginx checks the upstream's name); the Secret's tls.crt is not presented to the backend"
        }
        "custom-http-errors" => {
            "replaces the backend's answers and the gateway's own 502, 503 and 504, not the answers of the gateway's checks (401, 403, 413, ...); the error request has no body"
        }
        "auth-url" => {
            "the check goes to the Service the URL names (NAME.NAMESPACE.svc) or through Wharf's own routes for its host; another host is refused (503)"
        }
        "auth-cache-key" | "auth-cache-duration" => {
            "answers are kept in each replica's memory (at most 10,000), per host and route; answers that set cookies are not kept"
        }
        "proxy-next-upstream" | "proxy-next-upstream-tries" | "proxy-next-upstream-timeout" => {
            "a request with a body is never sent twice (ingress-nginx buffers bodies and sends them again); without these annotations only a connection that cannot be made is tried elsewhere"
        }
        _ => return None,
    })
}

/// True when `ing` is of class `class` (by `spec.ingressClassName` or the legacy
/// annotation), or has no class at all (which a default ingress-nginx served).
pub fn is_of_class(ing: &Stored, class: &str) -> bool {
    let by_spec = ing.spec.as_ref().and_then(|s| s.ingress_class_name.as_deref());
    let by_annotation = ing.metadata.annotations.as_ref().and_then(|a| a.get(CLASS_ANNOTATION)).map(String::as_str);
    match (by_spec, by_annotation) {
        (Some(c), _) | (None, Some(c)) => c == class,
        (None, None) => true,
    }
}

/// Reports on each Ingress of `world` in the `from_class`, as Wharf would serve them.
/// Services and Secrets in `world` are used when present; without any, what depends on
/// them is not reported.
pub fn report(world: &World, opts: &MigrateOptions) -> Vec<IngressReport> {
    let selected: Vec<&Stored> = world.ingresses.iter().filter(|i| is_of_class(i, &opts.from_class)).collect();
    let mut reports = Vec::new();
    for ing in &selected {
        let src = ing.object_ref();
        let (settings, findings) = annotations::inspect(ing.metadata.annotations.as_ref(), &src, &opts.annotations);
        let mut found = BTreeMap::new();
        for (key, value) in ing.metadata.annotations.iter().flatten() {
            let Some(name) = key.strip_prefix(NGINX_PREFIX).or_else(|| key.strip_prefix(WHARF_PREFIX)) else {
                continue;
            };
            let verdict = match findings.iter().find(|(k, _)| k == key).map(|(_, f)| f) {
                Some(Finding::Refused(_)) => Verdict::Refused,
                Some(Finding::Invalid(m)) => Verdict::Invalid(m.clone()),
                Some(Finding::NotSupported(_)) if annotations::UNENFORCED_ACCESS_CONTROL.contains(&name) => {
                    Verdict::NotEnforced
                }
                Some(Finding::NotSupported(_)) => Verdict::NotSupported,
                None => difference(name).map_or(Verdict::Same, Verdict::Differs),
            };
            found.insert(key.clone(), (value.clone(), verdict));
        }
        reports.push(IngressReport { ingress: src, annotations: found, problems: Vec::new(), skipped: settings.skip });
    }

    // Translation as Wharf's class, for what only shows across Ingresses: with the names
    // as they are (with --nginx-annotations=false, renamed ones would read differently),
    // and the Services and Secrets given (endpoints change no diagnostic).
    let keep_names = MigrateOptions { rename_annotations: false, ..opts.clone() };
    let moved = World {
        ingresses: selected.iter().map(|i| rewrite(i, &keep_names)).collect(),
        ingress_classes: vec![wharf_class(&opts.to_class)].into(),
        services: world.services.clone(),
        secrets: world.secrets.clone(),
        ..World::default()
    };
    let topts = Options { annotations: opts.annotations.clone(), ..Options::default() };
    let t = translate::translate(&moved, &topts, None);
    let (no_services, no_secrets) = (world.services.is_empty(), world.secrets.is_empty());
    for d in t.diagnostics {
        let unknowable = match d.reason {
            // Not known without the Services.
            Reason::ServiceNotFound | Reason::ServicePortNotFound => no_services,
            // Not known without the Secrets.
            Reason::SecretNotFound
            | Reason::SecretInOtherNamespace
            | Reason::SecretNotTls
            | Reason::CertificateExpired
            | Reason::CertificateHostMismatch
            | Reason::AuthSecretInvalid
            | Reason::AuthTlsSecretInvalid
            | Reason::AuthUrlNotPermitted
            | Reason::AuthUrlNotServed => no_secrets,
            // Told for each annotation already.
            Reason::InvalidAnnotation | Reason::UnsupportedAnnotation | Reason::SnippetRefused => true,
            _ => false,
        };
        if unknowable {
            continue;
        }
        if let Some(r) = reports.iter_mut().find(|r| r.ingress == d.object) {
            r.problems.push(d);
        }
    }
    reports
}

fn wharf_class(name: &str) -> IngressClass {
    IngressClass {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::networking::v1::IngressClassSpec {
            controller: Some(Options::default().controller_name),
            ..Default::default()
        }),
    }
}

/// `ing` for Wharf: `spec.ingressClassName` set to `to_class`, the legacy class
/// annotation removed, and, when asked, the annotations Wharf implements under their
/// `wharf.dev/` names.
pub fn rewrite(ing: &Stored, opts: &MigrateOptions) -> Ingress {
    let mut out = Ingress::from(ing);
    let m = &mut out.metadata;
    if let Some(ann) = m.annotations.as_mut() {
        ann.remove(CLASS_ANNOTATION);
        ann.remove("kubectl.kubernetes.io/last-applied-configuration");
        if opts.rename_annotations {
            let renamed: BTreeMap<String, String> = std::mem::take(ann)
                .into_iter()
                .map(|(k, v)| match k.strip_prefix(NGINX_PREFIX) {
                    Some(name) if IMPLEMENTED.contains(&name) => (format!("{WHARF_PREFIX}{name}"), v),
                    _ => (k, v),
                })
                .collect();
            *ann = renamed;
        }
    }
    out.spec.get_or_insert_with(Default::default).ingress_class_name = Some(opts.to_class.clone());
    out
}

/// [`rewrite`], without the fields the API server sets, ready for `kubectl apply`.
pub fn for_apply(ing: &Stored, opts: &MigrateOptions) -> Ingress {
    let mut out = rewrite(ing, opts);
    let m = &mut out.metadata;
    m.managed_fields = None;
    m.resource_version = None;
    m.uid = None;
    m.generation = None;
    m.creation_timestamp = None;
    out.status = None;
    out
}

/// The report as text: per Ingress, each annotation and its verdict, then the totals.
pub fn render(reports: &[IngressReport], opts: &MigrateOptions) -> String {
    let mut out = String::new();
    let mut totals: BTreeMap<&str, usize> = BTreeMap::new();
    for r in reports {
        let _ = writeln!(out, "Ingress {}/{}", r.ingress.namespace, r.ingress.name);
        if r.skipped {
            let _ = writeln!(
                out,
                "  NOT SERVED: it has a snippet annotation (start Wharf with --snippet-annotations=ignore to serve it without)"
            );
            *totals.entry("not served").or_default() += 1;
        }
        for (key, (value, verdict)) in &r.annotations {
            let (label, note) = verdict.describe(": served without it");
            *totals.entry(label).or_default() += 1;
            let shown: String = value.chars().take(60).collect::<String>().replace('\n', " ");
            let _ = writeln!(out, "  {label:<14} {key}={shown:?}{note}");
        }
        for d in &r.problems {
            *totals.entry("problems").or_default() += 1;
            let _ = writeln!(out, "  {:<14} {}: {}", "problem", d.reason, d.message);
        }
        if r.annotations.is_empty() && r.problems.is_empty() && !r.skipped {
            let _ = writeln!(out, "  nothing to change but the class");
        }
    }
    let _ = writeln!(
        out,
        "\n{} Ingresses of class {:?} (or without a class) for class {:?}.",
        reports.len(),
        opts.from_class,
        opts.to_class
    );
    for (label, n) in totals {
        let _ = writeln!(out, "  {label}: {n}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ingress(name: &str, class: Option<&str>, annotations: serde_json::Value, path: &str, ty: &str) -> Ingress {
        let mut spec = json!({"rules": [{"host": "a.example", "http": {"paths": [{"path": path, "pathType": ty,
            "backend": {"service": {"name": "app", "port": {"number": 80}}}}]}}]});
        if let Some(c) = class {
            spec["ingressClassName"] = json!(c);
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "shop", "annotations": annotations, "uid": "x", "resourceVersion": "7"},
            "spec": spec,
        }))
        .unwrap_or_default()
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
    fn annotations_that_behave_differently_say_how() {
        for name in [
            "proxy-send-timeout",
            "proxy-read-timeout",
            "auth-tls-secret",
            "auth-tls-verify-depth",
            "proxy-ssl-name",
            "proxy-ssl-secret",
            "custom-http-errors",
        ] {
            assert!(difference(name).is_some_and(|d| !d.is_empty()), "{name}");
        }
        for name in ["auth-tls-match-cn", "default-backend", "proxy-ssl-verify", "ssl-redirect"] {
            assert_eq!(difference(name), None, "{name}");
        }
    }

    #[test]
    fn each_annotation_gets_a_verdict_and_cross_ingress_problems_are_found() {
        let world = World {
            ingresses: vec![
                ingress(
                    "web",
                    Some("nginx"),
                    json!({"nginx.ingress.kubernetes.io/ssl-redirect": "false",
                           "nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
                           "nginx.ingress.kubernetes.io/enable-modsecurity": "true",
                           "nginx.ingress.kubernetes.io/proxy-buffering": "on",
                           "nginx.ingress.kubernetes.io/limit-rps": "lots",
                           "nginx.ingress.kubernetes.io/use-regex": "true",
                           "example.com/team": "a"}),
                    "/api(/|$)(.*",
                    "Prefix",
                ),
                ingress(
                    "legacy",
                    None,
                    json!({"kubernetes.io/ingress.class": "nginx",
                           "nginx.ingress.kubernetes.io/configuration-snippet": "deny all;"}),
                    "/",
                    "Prefix",
                ),
                ingress("other", Some("traefik"), json!({}), "/", "Prefix"),
            ]
            .into(),
            ..World::default()
        };
        let reports = report(&world, &opts());
        assert_eq!(reports.len(), 2, "the traefik Ingress is not ingress-nginx's");
        let web = &reports[0];
        let verdict =
            |k: &str| web.annotations.get(&format!("nginx.ingress.kubernetes.io/{k}")).map(|(_, v)| v.clone());
        assert_eq!(verdict("ssl-redirect"), Some(Verdict::Same));
        assert!(matches!(verdict("proxy-read-timeout"), Some(Verdict::Differs(_))));
        assert_eq!(verdict("enable-modsecurity"), Some(Verdict::NotEnforced));
        assert_eq!(verdict("proxy-buffering"), Some(Verdict::NotSupported));
        assert!(matches!(verdict("limit-rps"), Some(Verdict::Invalid(m)) if m.contains("not a whole number")));
        assert_eq!(web.annotations.len(), 6, "other prefixes are not reported");
        let problems: Vec<&str> = web.problems.iter().map(|d| d.reason.as_str()).collect();
        assert_eq!(problems, ["InvalidPath"], "a regex path that does not compile");
        assert!(!web.skipped);
        let legacy = &reports[1];
        assert!(legacy.skipped);
        assert_eq!(
            legacy.annotations.get("nginx.ingress.kubernetes.io/configuration-snippet").map(|(_, v)| v),
            Some(&Verdict::Refused)
        );
        let text = render(&reports, &opts());
        assert!(text.contains("Ingress shop/web") && text.contains("NOT SERVED"), "{text}");
        let refused =
            "not supported  nginx.ingress.kubernetes.io/enable-modsecurity=\"true\": protection Wharf does not give; \
             requests are answered 503";
        assert!(text.contains(refused), "{text}");
        let dropped = "not supported  nginx.ingress.kubernetes.io/proxy-buffering=\"on\": served without it";
        assert!(text.contains(dropped), "{text}");
        assert!(text.contains("2 Ingresses of class \"nginx\""), "{text}");
    }

    #[test]
    fn translation_problems_come_from_the_objects_given_and_the_controllers_settings() {
        let backend = |svc: &str| json!({"service": {"name": svc, "port": {"number": 80}}});
        let ing = |name: &str, annotations: serde_json::Value, svc: &str, tls: bool| -> Ingress {
            let mut spec = json!({"ingressClassName": "nginx", "rules": [{"host": "a.example", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": backend(svc)}]}}]});
            if tls {
                spec["tls"] = json!([{"hosts": ["a.example"], "secretName": "missing"}]);
            }
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "shop", "annotations": annotations,
                "creationTimestamp": format!("2026-01-01T00:0{}:00Z", name.len())}, "spec": spec}))
            .unwrap_or_default()
        };
        let ingresses = vec![
            ing(
                "main",
                json!({"nginx.ingress.kubernetes.io/limit-rps": "many",
                       "nginx.ingress.kubernetes.io/auth-type": "basic",
                       "nginx.ingress.kubernetes.io/auth-secret": "users"}),
                "app",
                true,
            ),
            ing("canary", json!({"nginx.ingress.kubernetes.io/canary": "true"}), "v2", false),
        ];
        let problems = |world: &World, opts: &MigrateOptions| -> Vec<String> {
            report(world, opts)
                .iter()
                .flat_map(|r| r.problems.iter().map(move |d| format!("{} {}", r.ingress.name, d.reason)))
                .collect()
        };
        // Without Services or Secrets, what depends on them is not reported; an invalid
        // annotation is in the annotation's verdict, not among the problems.
        let bare = World { ingresses: ingresses.clone().into(), ..World::default() };
        assert!(problems(&bare, &opts()).is_empty(), "{:?}", problems(&bare, &opts()));
        // With them, it is.
        let app: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
            "metadata": {"name": "app", "namespace": "shop"}, "spec": {"ports": [{"port": 80}]}}))
        .unwrap_or_default();
        // The Secret exists, but holds no certificate.
        let opaque: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(json!({"metadata": {"name": "missing", "namespace": "shop"}})).unwrap_or_default();
        let full = World { services: vec![app].into(), secrets: vec![opaque].into(), ..bare };
        assert_eq!(problems(&full, &opts()), ["main AuthSecretInvalid", "main SecretNotTLS", "canary ServiceNotFound"]);
        // As a controller that reads only wharf.dev names: the canary annotation is not
        // read, so the canary is one more Ingress for the same path, even when the YAML
        // would rename it.
        let wharf_only = MigrateOptions {
            rename_annotations: true,
            annotations: AnnotationOptions { nginx_names: false, ..AnnotationOptions::default() },
            ..opts()
        };
        assert!(
            problems(&full, &wharf_only).contains(&"canary HostPathConflict".to_owned()),
            "{:?}",
            problems(&full, &wharf_only)
        );
    }

    #[test]
    fn each_documented_difference_is_a_verdict() {
        for name in [
            "proxy-read-timeout",
            "from-to-www-redirect",
            "server-alias",
            "app-root",
            "use-regex",
            "rewrite-target",
            "canary-by-header-pattern",
            "whitelist-source-range",
            "allowlist-source-range",
            "denylist-source-range",
            "affinity",
            "proxy-body-size",
            "auth-url",
            "auth-cache-key",
            "auth-cache-duration",
            "proxy-next-upstream",
            "proxy-next-upstream-tries",
            "proxy-next-upstream-timeout",
        ] {
            assert!(difference(name).is_some(), "{name}");
            assert!(IMPLEMENTED.contains(&name), "{name} is a difference of something not implemented");
        }
        assert_eq!(difference("ssl-redirect"), None);
    }

    #[test]
    fn the_report_counts_each_verdict_and_says_when_only_the_class_changes() {
        let world = World {
            ingresses: vec![
                ingress(
                    "web",
                    Some("nginx"),
                    json!({"nginx.ingress.kubernetes.io/ssl-redirect": "false",
                           "nginx.ingress.kubernetes.io/force-ssl-redirect": "true",
                           "nginx.ingress.kubernetes.io/app-root": "/app",
                           "nginx.ingress.kubernetes.io/mirror-target": "http://copy.shop.svc"}),
                    "/",
                    "Prefix",
                ),
                ingress("plain", Some("nginx"), json!({}), "/b", "Prefix"),
                // Same host and path as `plain`, and after it by name: a conflict.
                ingress("zzz", Some("nginx"), json!({}), "/b", "Prefix"),
                ingress(
                    "snippet",
                    Some("nginx"),
                    json!({"nginx.ingress.kubernetes.io/server-snippet": "x"}),
                    "/c",
                    "Prefix",
                ),
            ]
            .into(),
            ..World::default()
        };
        let text = render(&report(&world, &opts()), &opts());
        let section = |name: &str| {
            let after = text.split(&format!("Ingress shop/{name}\n")).nth(1).unwrap_or("");
            after.split("Ingress ").next().unwrap_or("").split("\n\n").next().unwrap_or("").to_owned()
        };
        assert_eq!(section("plain"), "  nothing to change but the class\n", "{text}");
        for name in ["web", "zzz", "snippet"] {
            let s = section(name);
            assert!(!s.is_empty() && !s.contains("nothing to change"), "{name}: {text}");
        }
        let totals = text.split("(or without a class)").nth(1).unwrap_or("");
        for line in
            ["  same: 2", "  differs: 1", "  not supported: 1", "  refused: 1", "  not served: 1", "  problems: 1"]
        {
            assert!(totals.lines().any(|l| l == line), "{line} not in:\n{text}");
        }
    }

    #[test]
    fn rewriting_sets_the_class_and_renames_what_wharf_implements() {
        let ing = ingress(
            "legacy",
            None,
            json!({"kubernetes.io/ingress.class": "nginx",
                   "nginx.ingress.kubernetes.io/rewrite-target": "/$1",
                   "nginx.ingress.kubernetes.io/mirror-target": "http://copy.shop.svc"}),
            "/",
            "Prefix",
        );
        let kept = for_apply(&ing.clone().into(), &opts());
        assert_eq!(kept.spec.as_ref().and_then(|s| s.ingress_class_name.as_deref()), Some("wharf"));
        let ann = kept.metadata.annotations.clone().unwrap_or_default();
        assert!(!ann.contains_key(CLASS_ANNOTATION));
        assert!(ann.contains_key("nginx.ingress.kubernetes.io/rewrite-target"));
        assert!(kept.metadata.uid.is_none() && kept.metadata.resource_version.is_none());
        let renamed = rewrite(&ing.clone().into(), &MigrateOptions { rename_annotations: true, ..opts() });
        let ann = renamed.metadata.annotations.unwrap_or_default();
        assert_eq!(ann.get("wharf.dev/rewrite-target").map(String::as_str), Some("/$1"));
        assert!(ann.contains_key("nginx.ingress.kubernetes.io/mirror-target"), "what Wharf lacks keeps its name");
    }
}
