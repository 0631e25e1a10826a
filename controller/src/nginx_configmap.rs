//! ingress-nginx's ConfigMap, for `wharf migrate`: which of its global settings Wharf has
//! (as chart values and `wharf controller` flags that keep them), which it does without,
//! and the ingress-nginx defaults that matter when a key is absent.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::migrate::Verdict;

/// The ConfigMap the ingress-nginx chart installs (`NAMESPACE/NAME`).
pub const DEFAULT_CONFIGMAP: &str = "ingress-nginx/ingress-nginx-controller";

/// One key of the ConfigMap, or an ingress-nginx default that applies when it is absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The key.
    pub key: String,
    /// Its value.
    pub value: String,
    /// The key is absent: `value` is ingress-nginx's default.
    pub default: bool,
    /// What Wharf does with it.
    pub verdict: Verdict,
}

/// The ConfigMap, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Global {
    /// Each key (and each default that matters), by key.
    pub settings: Vec<Setting>,
    /// Chart values that keep the settings Wharf has (`{"controller": {...}}`; empty when
    /// there are none).
    pub values: Value,
    /// The same, as flags of `wharf controller`.
    pub flags: Vec<String>,
}

/// Keys that only tune nginx itself: Wharf has nothing to set for them.
const NGINX_ONLY: &[&str] = &[
    "worker-processes",
    "max-worker-connections",
    "max-worker-open-files",
    "worker-cpu-affinity",
    "reuse-port",
    "server-tokens",
    "http2-max-concurrent-streams",
    "upstream-keepalive-connections",
    "upstream-keepalive-requests",
    "upstream-keepalive-timeout",
    "keep-alive-requests",
    "client-header-buffer-size",
    "client-body-buffer-size",
    "proxy-buffer-size",
    "proxy-buffers-number",
    "proxy-buffering",
    "variables-hash-bucket-size",
    "variables-hash-max-size",
    "server-name-hash-bucket-size",
    "server-name-hash-max-size",
    "map-hash-bucket-size",
];

/// Reads ingress-nginx's ConfigMap `data` (`None`: there is none, its defaults apply).
pub fn read(data: Option<&BTreeMap<String, String>>) -> Global {
    let empty = BTreeMap::new();
    let data = data.unwrap_or(&empty);
    let mut r = Reader { data, settings: Vec::new(), values: Map::new(), flags: Vec::new(), seen: Vec::new() };
    r.body_size();
    r.client_addresses();
    r.hsts();
    r.underscores();
    r.tls();
    r.header_buffers();
    r.seconds("proxy-connect-timeout", &["connectTimeout"], "--connect-timeout", Verdict::Same);
    r.seconds(
        "proxy-read-timeout",
        &["requestTimeout"],
        "--request-timeout",
        Verdict::Differs("times the wait for the response headers only; a response body that pauses is not cut"),
    );
    r.seconds("keep-alive", &["limits", "clientIdleTimeout"], "--client-idle-timeout", Verdict::Same);
    r.seconds("worker-shutdown-timeout", &["drainTimeoutSeconds"], "--drain-timeout", Verdict::Same);
    r.rest();
    let values = match r.values.is_empty() {
        true => Value::Object(Map::new()),
        false => json!({ "controller": r.values }),
    };
    let mut settings = r.settings;
    settings.sort_by(|a, b| a.key.cmp(&b.key));
    Global { settings, values, flags: r.flags }
}

struct Reader<'a> {
    data: &'a BTreeMap<String, String>,
    settings: Vec<Setting>,
    values: Map<String, Value>,
    flags: Vec<String>,
    seen: Vec<&'static str>,
}

impl Reader<'_> {
    /// The key's value, trimmed; the key counts as handled.
    fn get(&mut self, key: &'static str) -> Option<&str> {
        self.seen.push(key);
        self.data.get(key).map(|v| v.trim())
    }

    fn row(&mut self, key: &str, value: &str, default: bool, verdict: Verdict) {
        self.settings.push(Setting { key: key.to_owned(), value: value.to_owned(), default, verdict });
    }

    /// Sets the chart value at `path` under `controller`, and its flag.
    fn set(&mut self, path: &[&str], value: Value, flag: String) {
        self.set_all(path, value, [flag]);
    }

    /// Sets the chart value at `path` under `controller`, and its flags.
    fn set_all(&mut self, path: &[&str], value: Value, flags: impl IntoIterator<Item = String>) {
        let mut at = &mut self.values;
        for (i, part) in path.iter().enumerate() {
            if i + 1 == path.len() {
                at.insert((*part).to_owned(), value);
                break;
            }
            let next = at.entry((*part).to_owned()).or_insert_with(|| Value::Object(Map::new()));
            if !next.is_object() {
                *next = Value::Object(Map::new());
            }
            let Value::Object(m) = next else { return };
            at = m;
        }
        self.flags.extend(flags);
    }

    /// A boolean key as Go's `strconv.ParseBool` reads it, `default` when absent; an
    /// invalid value is reported and counts as the default.
    fn boolean(&mut self, key: &'static str, default: bool) -> bool {
        match self.get(key).map(str::to_owned) {
            None => default,
            Some(v) => match parse_bool(&v) {
                Some(b) => b,
                None => {
                    self.row(
                        key,
                        &v,
                        false,
                        Verdict::Invalid(format!("not a boolean; ingress-nginx's default {default} applies")),
                    );
                    default
                }
            },
        }
    }

    fn body_size(&mut self) {
        let (value, default) = match self.get("proxy-body-size") {
            Some(v) => (v.to_owned(), false),
            None => ("1m".to_owned(), true),
        };
        match wharf_model::parse_size(&value) {
            // Unlimited, as Wharf's default.
            Some(0) => self.row("proxy-body-size", &value, default, Verdict::Same),
            Some(_) => {
                self.set(&["limits", "maxRequestBody"], json!(value), format!("--max-request-body={value}"));
                self.row("proxy-body-size", &value, default, Verdict::Same);
            }
            None => {
                let why = "not a size like 8m; Wharf's --max-request-body stays unlimited unless set".to_owned();
                self.row("proxy-body-size", &value, default, Verdict::Invalid(why));
            }
        }
    }

    fn client_addresses(&mut self) {
        let proxy_protocol = self.boolean("use-proxy-protocol", false);
        let forwarded = self.boolean("use-forwarded-headers", false);
        let real_ip = self.boolean("enable-real-ip", false);
        let cidrs = self.get("proxy-real-ip-cidr").map(str::to_owned);
        let full = self.boolean("compute-full-forwarded-for", false);
        let header = self.get("forwarded-for-header").map(str::to_owned);
        if proxy_protocol {
            self.set(&["proxyProtocol"], json!(true), "--proxy-protocol".into());
            self.row("use-proxy-protocol", "true", false, Verdict::Same);
        }
        for (key, on) in [("use-forwarded-headers", forwarded), ("enable-real-ip", real_ip)] {
            if on {
                self.row(key, "true", false, Verdict::Same);
            }
        }
        if full {
            self.row("compute-full-forwarded-for", "true", false, Verdict::Same);
        }
        if let Some(h) = header.filter(|h| !h.eq_ignore_ascii_case("x-forwarded-for")) {
            self.row("forwarded-for-header", &h, false, Verdict::NotSupported);
        }
        let cidr_list = cidrs.as_deref().unwrap_or("0.0.0.0/0");
        let parsed: Result<Vec<wharf_model::IpNet>, _> =
            cidr_list.split(',').map(str::trim).filter(|c| !c.is_empty()).map(wharf_model::IpNet::parse).collect();
        let nets = match parsed {
            Ok(n) => n,
            Err(e) => {
                self.row("proxy-real-ip-cidr", cidr_list, false, Verdict::Invalid(e.to_string()));
                return;
            }
        };
        let everyone = nets.iter().any(|n| n.to_string().ends_with("/0"));
        let trusts_headers = forwarded || real_ip;
        // The PROXY protocol, or forwarded headers, need a list (Wharf refuses the PROXY
        // protocol without one).
        if !trusts_headers && !proxy_protocol {
            if let Some(c) = cidrs {
                self.row("proxy-real-ip-cidr", &c, false, Verdict::Same);
            }
            return;
        }
        let list: Vec<String> = nets.iter().map(ToString::to_string).collect();
        let flags: Vec<String> = list.iter().map(|n| format!("--trusted-proxy={n}")).collect();
        self.set_all(&["trustedProxies"], json!(list), flags);
        let verdict = match (trusts_headers, everyone) {
            (true, true) => Verdict::Differs(
                "every peer's X-Forwarded-For is believed, as before: list only your load balancers and proxies",
            ),
            (true, false) => Verdict::Same,
            (false, true) => Verdict::Differs(
                "every peer's PROXY header is believed, as before, and its X-Forwarded-For too: list only your load \
                 balancers",
            ),
            (false, false) => {
                Verdict::Differs("from these peers, X-Forwarded-For is believed too, not only the PROXY header")
            }
        };
        self.row("proxy-real-ip-cidr", cidr_list, cidrs.is_none(), verdict);
    }

    fn hsts(&mut self) {
        let on = self.boolean("hsts", true);
        let max_age = self.get("hsts-max-age").map(str::to_owned);
        let sub = self.boolean("hsts-include-subdomains", true);
        let preload = self.boolean("hsts-preload", false);
        if !on {
            self.row("hsts", "false", false, Verdict::Same);
            return;
        }
        let max_age = match max_age {
            Some(m) if !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()) => {
                self.row("hsts-max-age", &m, false, Verdict::Same);
                m
            }
            Some(m) => {
                let why = "not a number of seconds; ingress-nginx's default 31536000 is kept".to_owned();
                self.row("hsts-max-age", &m, false, Verdict::Invalid(why));
                "31536000".to_owned()
            }
            None => "31536000".to_owned(),
        };
        let mut value = format!("max-age={max_age}");
        if sub {
            value.push_str("; includeSubDomains");
        }
        if preload {
            value.push_str("; preload");
        }
        self.row("hsts", "true", !self.data.contains_key("hsts"), Verdict::Same);
        self.set(&["hsts"], json!(value), format!("--hsts={value}"));
    }

    /// `enable-underscores-in-headers`: off in both.
    fn underscores(&mut self) {
        if self.boolean("enable-underscores-in-headers", false) {
            self.row("enable-underscores-in-headers", "true", false, Verdict::Same);
            self.set(&["enableUnderscoresInHeaders"], json!(true), "--enable-underscores-in-headers".into());
        }
    }

    /// `ssl-protocols` and `ssl-ciphers`.
    fn tls(&mut self) {
        if let Some(v) = self.get("ssl-protocols").map(str::to_owned) {
            let names: Vec<&str> = v.split_whitespace().collect();
            let known = ["SSLv2", "SSLv3", "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"];
            let old = names.iter().any(|n| !matches!(*n, "TLSv1.2" | "TLSv1.3"));
            if names.is_empty() || !names.iter().all(|n| known.contains(n)) {
                let why = "not a list like \"TLSv1.2 TLSv1.3\"; Wharf offers TLS 1.2 and 1.3".to_owned();
                self.row("ssl-protocols", &v, false, Verdict::Invalid(why));
            } else if names.contains(&"TLSv1.2") {
                let verdict = match old {
                    true => Verdict::Differs("TLS versions before 1.2 are never offered"),
                    false => Verdict::Same,
                };
                self.row("ssl-protocols", &v, false, verdict);
            } else if names.contains(&"TLSv1.3") {
                let verdict = match old {
                    true => Verdict::Differs("TLS versions before 1.2 are never offered"),
                    false => Verdict::Same,
                };
                self.row("ssl-protocols", &v, false, verdict);
                self.set(&["tls", "minVersion"], json!("1.3"), "--tls-min-version=1.3".to_owned());
            } else {
                let why = "names only versions before TLS 1.2, which Wharf never offers; it offers 1.2 and 1.3";
                self.row("ssl-protocols", &v, false, Verdict::Invalid(why.to_owned()));
            }
        }
        let Some(v) = self.get("ssl-ciphers").map(str::to_owned) else { return };
        let (kept, left): (Vec<&str>, Vec<&str>) = v
            .split(':')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .partition(|n| wharf_model::tls::cipher_suite(n).is_some());
        if wharf_model::tls::cipher_suites(&kept.join(",")).is_err() {
            let why = "names no TLS 1.2 suite Wharf offers (it offers ECDHE with AES-GCM or ChaCha20-Poly1305); \
                       Wharf's defaults, which are those, apply"
                .to_owned();
            self.row("ssl-ciphers", &v, false, Verdict::Invalid(why));
            return;
        }
        let verdict = match left.is_empty() {
            true => Verdict::Same,
            false => Verdict::Differs("suites and keywords Wharf does not have are left out"),
        };
        self.row("ssl-ciphers", &v, false, verdict);
        self.set(&["tls", "ciphers"], json!(kept), format!("--tls-ciphers={}", kept.join(",")));
    }

    fn header_buffers(&mut self) {
        let Some(v) = self.get("large-client-header-buffers").map(str::to_owned) else { return };
        let bytes = v.split_once(' ').and_then(|(n, size)| {
            let n: u64 = n.trim().parse().ok()?;
            Some(n * wharf_model::parse_size(size.trim())?).filter(|b| *b > 0)
        });
        match bytes {
            Some(b) => {
                let b = b.max(8192);
                self.set(&["limits", "maxRequestHeaderBytes"], json!(b), format!("--max-request-header-bytes={b}"));
                let why = "Wharf limits the whole request head to NUMBER×SIZE, not each header line to SIZE";
                self.row("large-client-header-buffers", &v, false, Verdict::Differs(why));
            }
            None => {
                let why = "expected NUMBER SIZE, like 4 8k".to_owned();
                self.row("large-client-header-buffers", &v, false, Verdict::Invalid(why));
            }
        }
    }

    /// A key of whole seconds that becomes a duration value at `path`.
    fn seconds(&mut self, key: &'static str, path: &[&str], flag: &str, verdict: Verdict) {
        let Some(v) = self.get(key).map(str::to_owned) else { return };
        match v.parse::<u64>() {
            Ok(s) => {
                let value = if path == ["drainTimeoutSeconds"] { json!(s) } else { json!(format!("{s}s")) };
                self.set(path, value, format!("{flag}={s}s"));
                self.row(key, &v, false, verdict);
            }
            Err(_) => self.row(key, &v, false, Verdict::Invalid("not a number of seconds".into())),
        }
    }

    /// The keys not handled above.
    fn rest(&mut self) {
        let rest: Vec<(String, String)> = self
            .data
            .iter()
            .filter(|(k, _)| !self.seen.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (key, value) in rest {
            let verdict = match key.as_str() {
                "ssl-redirect" if parse_bool(&value) == Some(false) => Verdict::Differs(
                    "Wharf redirects TLS hosts to HTTPS per Ingress: annotate them ssl-redirect: \"false\" to keep this",
                ),
                "force-ssl-redirect" if parse_bool(&value) == Some(true) => {
                    Verdict::Differs("per Ingress only: annotate the Ingresses force-ssl-redirect: \"true\"")
                }
                "ssl-redirect" | "force-ssl-redirect" => Verdict::Same,
                // Snippets are never run; whether ingress-nginx ran them does not matter.
                "allow-snippet-annotations" if parse_bool(&value) == Some(true) => Verdict::Refused,
                "annotations-risk-level" if value.trim() == "Critical" => Verdict::Refused,
                "allow-snippet-annotations" | "annotations-risk-level" => Verdict::Same,
                "log-format-upstream" | "log-format-escape-json" | "log-format-escape-none" | "log-format-stream" => {
                    Verdict::Differs("the access log has fixed fields (docs/observability.md); --log-format json")
                }
                k if NGINX_ONLY.contains(&k) => Verdict::Differs("tunes nginx itself; Wharf has nothing to set"),
                _ => Verdict::NotSupported,
            };
            self.row(&key, &value, false, verdict);
        }
    }
}

/// The report on ingress-nginx's ConfigMap `name`, for `wharf migrate`; `missing`: why it
/// was not read (then `g` holds ingress-nginx's defaults).
pub fn render(name: &str, missing: Option<&str>, g: &Global) -> String {
    use std::fmt::Write;
    let mut out = format!("Global settings (ConfigMap {name})\n");
    if let Some(why) = missing {
        let _ = writeln!(out, "  {why}: ingress-nginx's defaults apply (--configmap names another)");
    }
    for s in &g.settings {
        let (label, note) = s.verdict.describe(": Wharf has no such setting");
        let default = if s.default { " (ingress-nginx's default)" } else { "" };
        let shown: String = s.value.chars().take(60).collect::<String>().replace('\n', " ");
        let _ = writeln!(out, "  {label:<14} {}={shown:?}{default}{note}", s.key);
    }
    if g.flags.is_empty() {
        out.push_str("\n  Nothing to set: Wharf's defaults keep these.\n");
        return out;
    }
    out.push_str(
        "\n  Chart values that keep them (wharf migrate -o values > values.yaml; helm --values values.yaml):\n",
    );
    for line in serde_yaml::to_string(&g.values).unwrap_or_default().lines() {
        let _ = writeln!(out, "    {line}");
    }
    out.push_str("  Or flags of wharf controller:\n");
    for f in &g.flags {
        let _ = writeln!(out, "    {}", shell_word(f));
    }
    out
}

/// `s` as one shell word.
fn shell_word(s: &str) -> String {
    match s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_=./:,".contains(&b)) {
        true => s.to_owned(),
        false => format!("'{}'", s.replace('\'', "'\\''")),
    }
}

/// A boolean as Go's `strconv.ParseBool` reads it.
fn parse_bool(s: &str) -> Option<bool> {
    match s.trim() {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_pairs(pairs: &[(&str, &str)]) -> Global {
        let data: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        read(Some(&data))
    }

    fn verdicts(g: &Global) -> Vec<(String, String, bool, Verdict)> {
        g.settings.iter().map(|s| (s.key.clone(), s.value.clone(), s.default, s.verdict.clone())).collect()
    }

    #[test]
    fn without_a_configmap_ingress_nginx_defaults_that_matter_are_kept() {
        let g = read(None);
        assert_eq!(
            g.values,
            json!({"controller": {"limits": {"maxRequestBody": "1m"}, "hsts": "max-age=31536000; includeSubDomains"}})
        );
        assert_eq!(g.flags, ["--max-request-body=1m", "--hsts=max-age=31536000; includeSubDomains"]);
        let rows = verdicts(&g);
        assert_eq!(
            rows,
            [
                ("hsts".into(), "true".into(), true, Verdict::Same),
                ("proxy-body-size".into(), "1m".into(), true, Verdict::Same),
            ]
        );
    }

    #[test]
    fn each_setting_wharf_has_becomes_a_chart_value_and_a_flag() {
        let g = read_pairs(&[
            ("proxy-body-size", "8m"),
            ("hsts", "true"),
            ("use-proxy-protocol", "true"),
            ("use-forwarded-headers", "True"),
            ("proxy-real-ip-cidr", "10.0.0.0/8, 192.168.0.0/16"),
            ("hsts-max-age", "600"),
            ("hsts-include-subdomains", "false"),
            ("hsts-preload", "1"),
            ("large-client-header-buffers", "4 16k"),
            ("proxy-connect-timeout", "3"),
            ("proxy-read-timeout", "120"),
            ("keep-alive", "75"),
            ("worker-shutdown-timeout", "240"),
        ]);
        assert_eq!(
            g.values,
            json!({"controller": {
                "limits": {"maxRequestBody": "8m", "maxRequestHeaderBytes": 65536, "clientIdleTimeout": "75s"},
                "proxyProtocol": true,
                "trustedProxies": ["10.0.0.0/8", "192.168.0.0/16"],
                "hsts": "max-age=600; preload",
                "connectTimeout": "3s",
                "requestTimeout": "120s",
                "drainTimeoutSeconds": 240,
            }})
        );
        assert_eq!(
            g.flags,
            [
                "--max-request-body=8m",
                "--proxy-protocol",
                "--trusted-proxy=10.0.0.0/8",
                "--trusted-proxy=192.168.0.0/16",
                "--hsts=max-age=600; preload",
                "--max-request-header-bytes=65536",
                "--connect-timeout=3s",
                "--request-timeout=120s",
                "--client-idle-timeout=75s",
                "--drain-timeout=240s",
            ]
        );
        let differs: Vec<&str> =
            g.settings.iter().filter(|s| matches!(s.verdict, Verdict::Differs(_))).map(|s| s.key.as_str()).collect();
        assert_eq!(differs, ["large-client-header-buffers", "proxy-read-timeout"]);
        assert!(g.settings.iter().all(|s| !s.default), "{:?}", g.settings);
    }

    #[test]
    fn whose_forwarded_headers_are_believed_follows_ingress_nginx() {
        let trusted = |pairs: &[(&str, &str)]| {
            let g = read_pairs(pairs);
            let row = g.settings.iter().find(|s| s.key == "proxy-real-ip-cidr").map(|s| s.verdict.clone());
            (g.values["controller"]["trustedProxies"].clone(), row)
        };
        // Off by default: nobody's.
        assert_eq!(trusted(&[]), (Value::Null, None));
        assert_eq!(trusted(&[("proxy-real-ip-cidr", "10.0.0.0/8")]), (Value::Null, Some(Verdict::Same)));
        // Everyone's, by ingress-nginx's default range: kept, and said.
        let (list, row) = trusted(&[("use-forwarded-headers", "true")]);
        assert_eq!(list, json!(["0.0.0.0/0"]));
        assert!(matches!(row, Some(Verdict::Differs(w)) if w.contains("every peer")));
        assert_eq!(
            trusted(&[("enable-real-ip", "t"), ("proxy-real-ip-cidr", "10.1.0.0/16")]).0,
            json!(["10.1.0.0/16"])
        );
        // The PROXY protocol needs a list: ingress-nginx's default believes every peer.
        let (list, row) = trusted(&[("use-proxy-protocol", "true")]);
        assert_eq!(list, json!(["0.0.0.0/0"]));
        assert!(matches!(row, Some(Verdict::Differs(w)) if w.contains("every peer's PROXY header")), "{row:?}");
        let (list, row) = trusted(&[("use-proxy-protocol", "true"), ("proxy-real-ip-cidr", "10.0.0.0/8")]);
        assert_eq!(list, json!(["10.0.0.0/8"]));
        assert!(matches!(row, Some(Verdict::Differs(w)) if w.contains("X-Forwarded-For is believed too")));
        let (list, row) = trusted(&[("use-forwarded-headers", "true"), ("proxy-real-ip-cidr", "10.0.0.0/8,nope")]);
        assert_eq!(list, Value::Null);
        assert!(matches!(row, Some(Verdict::Invalid(w)) if w.contains("nope")));
    }

    #[test]
    fn the_other_keys_are_judged_by_their_values() {
        for (key, value, want) in [
            ("ssl-redirect", "false", "differs"),
            ("ssl-redirect", "true", "same"),
            ("force-ssl-redirect", "true", "differs"),
            ("force-ssl-redirect", "false", "same"),
            ("allow-snippet-annotations", "true", "refused"),
            ("allow-snippet-annotations", "false", "same"),
            ("annotations-risk-level", "Critical", "refused"),
            ("annotations-risk-level", "High", "same"),
            ("log-format-stream", "$remote_addr", "differs"),
            ("worker-processes", "4", "differs"),
            ("no-such-key", "1", "not supported"),
            ("large-client-header-buffers", "0 16k", "invalid"),
        ] {
            let g = read_pairs(&[(key, value)]);
            let row = g.settings.iter().find(|s| s.key == key).map(|s| s.verdict.describe("").0);
            assert_eq!(row, Some(want), "{key}={value}");
        }
    }

    #[test]
    fn tls_versions_and_ciphers_become_the_tls_values() {
        let g = read_pairs(&[
            ("ssl-protocols", "TLSv1.3"),
            (
                "ssl-ciphers",
                "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES128-GCM-SHA256:!aNULL",
            ),
        ]);
        let ciphers = ["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256"];
        assert_eq!(g.values["controller"]["tls"], json!({"minVersion": "1.3", "ciphers": ciphers}));
        assert!(g.flags.contains(&"--tls-min-version=1.3".to_owned()), "{:?}", g.flags);
        assert!(g.flags.contains(&format!("--tls-ciphers={}", ciphers.join(","))), "{:?}", g.flags);
        let verdict =
            |g: &Global, key: &str| g.settings.iter().find(|s| s.key == key).map(|s| s.verdict.describe("").0);
        assert_eq!(verdict(&g, "ssl-ciphers"), Some("differs"), "DHE and !aNULL are left out");
        assert_eq!(verdict(&g, "ssl-protocols"), Some("same"));
        // ingress-nginx's default versions, and older ones, keep Wharf's default.
        for (protocols, want) in [
            ("TLSv1.2 TLSv1.3", "same"),
            ("TLSv1 TLSv1.1 TLSv1.2", "differs"),
            ("TLSv1.1 TLSv1.3", "differs"),
            ("TLSv1.1", "invalid"),
            ("TLS1.2", "invalid"),
            ("", "invalid"),
        ] {
            let g = read_pairs(&[("ssl-protocols", protocols)]);
            assert_eq!(verdict(&g, "ssl-protocols"), Some(want), "{protocols}");
            if matches!(protocols, "TLS1.2" | "") {
                let row = g.settings.iter().find(|s| s.key == "ssl-protocols");
                assert!(matches!(row.map(|r| &r.verdict), Some(Verdict::Invalid(w)) if w.starts_with("not a list")));
            }
            let min = g.values.get("controller").and_then(|c| c.get("tls")).and_then(|t| t.get("minVersion"));
            assert_eq!(min.is_some(), protocols == "TLSv1.1 TLSv1.3", "{protocols}");
        }
        let g = read_pairs(&[("ssl-ciphers", "ECDHE-RSA-CHACHA20-POLY1305")]);
        assert_eq!(verdict(&g, "ssl-ciphers"), Some("same"));
    }

    #[test]
    fn underscores_in_headers_carry_over_when_on() {
        let g = read_pairs(&[("enable-underscores-in-headers", "true")]);
        let row = |g: &Global| {
            g.settings.iter().find(|s| s.key == "enable-underscores-in-headers").map(|s| s.verdict.clone())
        };
        assert_eq!(row(&g), Some(Verdict::Same));
        assert_eq!(g.values["controller"]["enableUnderscoresInHeaders"], json!(true));
        assert!(g.flags.contains(&"--enable-underscores-in-headers".to_owned()), "{:?}", g.flags);
        let off = read_pairs(&[("enable-underscores-in-headers", "false")]);
        assert_eq!(row(&off), None, "Wharf's default already");
        assert!(!off.flags.iter().any(|f| f.contains("underscores")));
    }

    #[test]
    fn the_report_shows_each_row_the_values_and_the_flags() {
        let g = read_pairs(&[("use-forwarded-headers", "true"), ("ssl-ciphers", "HIGH")]);
        let text = render("ingress-nginx/ingress-nginx-controller", None, &g);
        let want = "Global settings (ConfigMap ingress-nginx/ingress-nginx-controller)
  same           hsts=\"true\" (ingress-nginx's default)
  same           proxy-body-size=\"1m\" (ingress-nginx's default)
  differs        proxy-real-ip-cidr=\"0.0.0.0/0\" (ingress-nginx's default): every peer's X-Forwarded-For is believed, as before: list only your load balancers and proxies
  invalid        ssl-ciphers=\"HIGH\": names no TLS 1.2 suite Wharf offers (it offers ECDHE with AES-GCM or ChaCha20-Poly1305); Wharf's defaults, which are those, apply
  same           use-forwarded-headers=\"true\"

  Chart values that keep them (wharf migrate -o values > values.yaml; helm --values values.yaml):
    controller:
      hsts: max-age=31536000; includeSubDomains
      limits:
        maxRequestBody: 1m
      trustedProxies:
      - 0.0.0.0/0
  Or flags of wharf controller:
    --max-request-body=1m
    --trusted-proxy=0.0.0.0/0
    '--hsts=max-age=31536000; includeSubDomains'
";
        assert_eq!(text, want);
        let none =
            render("x/y", Some("no such ConfigMap"), &read_pairs(&[("hsts", "false"), ("proxy-body-size", "0")]));
        assert!(none.contains("no such ConfigMap"), "{none}");
        assert!(none.ends_with("Nothing to set: Wharf's defaults keep these.\n"), "{none}");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
    }

    #[test]
    fn hsts_off_bad_values_and_keys_wharf_lacks_are_said() {
        let g = read_pairs(&[
            ("hsts", "false"),
            ("proxy-body-size", "lots"),
            ("ssl-redirect", "false"),
            ("force-ssl-redirect", "true"),
            ("allow-snippet-annotations", "true"),
            ("annotations-risk-level", "High"),
            ("ssl-ciphers", "HIGH"),
            ("worker-processes", "4"),
            ("log-format-upstream", "$remote_addr"),
            ("large-client-header-buffers", "4"),
            ("keep-alive", "75s"),
            ("use-proxy-protocol", "yes"),
            ("forwarded-for-header", "X-Real-Client"),
        ]);
        assert_eq!(g.values, json!({}));
        assert!(g.flags.is_empty(), "{:?}", g.flags);
        let rows: Vec<(&str, &str)> = g.settings.iter().map(|s| (s.key.as_str(), s.verdict.describe("").0)).collect();
        assert_eq!(
            rows,
            [
                ("allow-snippet-annotations", "refused"),
                ("annotations-risk-level", "same"),
                ("force-ssl-redirect", "differs"),
                ("forwarded-for-header", "not supported"),
                ("hsts", "same"),
                ("keep-alive", "invalid"),
                ("large-client-header-buffers", "invalid"),
                ("log-format-upstream", "differs"),
                ("proxy-body-size", "invalid"),
                ("ssl-ciphers", "invalid"),
                ("ssl-redirect", "differs"),
                ("use-proxy-protocol", "invalid"),
                ("worker-processes", "differs"),
            ]
        );
        // A header buffer setting too small for Wharf's floor is raised to it.
        let g = read_pairs(&[("hsts", "false"), ("proxy-body-size", "0"), ("large-client-header-buffers", "2 1k")]);
        assert_eq!(g.values, json!({"controller": {"limits": {"maxRequestHeaderBytes": 8192}}}));
        // A bad max-age keeps ingress-nginx's.
        let g = read_pairs(&[("hsts-max-age", "1y")]);
        assert_eq!(g.values["controller"]["hsts"], "max-age=31536000; includeSubDomains");
    }
}
