//! `wharf migrate` as a user runs it on files: the report, and YAML that Wharf itself
//! reads back as Ingresses of its class.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use wharf_dataplane::testing::TempDir;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../controller/tests/ingress-nginx-corpus");

fn migrate(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_wharf")).arg("migrate").args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_report_names_every_ingress_and_what_wharf_does_with_it() {
    let report = migrate(&["-f", CORPUS]);
    assert!(report.contains("Ingress shop/rewrite-capture\n"), "{report}");
    assert!(report.contains("NOT SERVED"), "{report}");
    assert!(report.contains("differs        nginx.ingress.kubernetes.io/auth-tls-secret="), "{report}");
    assert!(report.contains("problem        CanaryWithoutMain"), "{report}");
    assert!(report.contains("44 Ingresses of class \"nginx\""), "{report}");
    assert!(!report.contains("traefik.example.com") && !report.contains("misc/traefik"), "{report}");
    // As a controller that serves snippet Ingresses without them would.
    let lax = migrate(&["-f", CORPUS, "--snippet-annotations", "ignore"]);
    assert!(!lax.contains("NOT SERVED"), "{lax}");
}

#[test]
fn the_yaml_is_read_back_as_ingresses_of_wharfs_class() {
    let yaml = migrate(&["-f", CORPUS, "-o", "yaml", "--rename-annotations", "--to-class", "edge"]);
    let dir = TempDir::new("migrate").unwrap();
    let file = dir.join("out.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let world = wharf_controller::files::load(&[file]).unwrap().world;
    assert_eq!(world.ingresses.len(), 44);
    for ing in &world.ingresses {
        assert_eq!(ing.spec.as_ref().and_then(|s| s.ingress_class_name.as_deref()), Some("edge"));
        let ann = ing.metadata.annotations.clone().unwrap_or_default();
        assert!(!ann.contains_key("kubernetes.io/ingress.class"));
        assert!(!ann.contains_key("nginx.ingress.kubernetes.io/rewrite-target"), "renamed");
        assert!(ing.metadata.uid.is_none() && ing.metadata.creation_timestamp.is_none());
    }
    assert!(yaml.contains("wharf.dev/rewrite-target: /$2"), "{yaml}");
    assert!(yaml.contains("nginx.ingress.kubernetes.io/proxy-buffering"), "what Wharf lacks keeps its name");
}

#[test]
fn ingress_nginx_configmap_settings_are_reported_and_given_as_chart_values() {
    let report = migrate(&["-f", CORPUS]);
    let global = report.split_once("Global settings (ConfigMap ingress-nginx/ingress-nginx-controller)\n").unwrap().1;
    for row in [
        "same           proxy-body-size=\"16m\"\n",
        "same           hsts=\"true\" (ingress-nginx's default)\n",
        "same           proxy-real-ip-cidr=\"10.0.0.0/8\"\n",
        "differs        large-client-header-buffers=\"4 16k\": ",
        "same           ssl-protocols=\"TLSv1.2 TLSv1.3\"\n",
        "differs        ssl-ciphers=\"ECDHE-ECDSA-AES128-GCM-SHA256:",
        "same           allow-snippet-annotations=\"false\"\n",
        "    --trusted-proxy=10.0.0.0/8\n",
        "    '--hsts=max-age=15724800; includeSubDomains'\n",
    ] {
        assert!(global.contains(row), "{row:?} in:\n{global}");
    }
    let values: serde_json::Value = serde_yaml::from_str(&migrate(&["-f", CORPUS, "-o", "values"])).unwrap();
    assert_eq!(
        values,
        serde_json::json!({"controller": {
            "limits": {"maxRequestBody": "16m", "maxRequestHeaderBytes": 65536, "clientIdleTimeout": "75s"},
            "trustedProxies": ["10.0.0.0/8"],
            "hsts": "max-age=15724800; includeSubDomains",
            "connectTimeout": "10s",
            "requestTimeout": "120s",
            "tls": {"ciphers": [
                "ECDHE-ECDSA-AES128-GCM-SHA256",
                "ECDHE-RSA-AES128-GCM-SHA256",
                "ECDHE-ECDSA-AES256-GCM-SHA384",
                "ECDHE-RSA-AES256-GCM-SHA384",
            ]},
        }})
    );
    // Another name: none there, so ingress-nginx's defaults.
    let report = migrate(&["-f", CORPUS, "--configmap", "ops/nginx"]);
    assert!(report.contains("Global settings (ConfigMap ops/nginx)\n  no such ConfigMap"), "{report}");
    assert!(report.contains("same           proxy-body-size=\"1m\" (ingress-nginx's default)\n"), "{report}");
}
