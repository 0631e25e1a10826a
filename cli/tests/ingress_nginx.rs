//! ingress-nginx's own e2e cases, replayed against the real `wharf run`: the case files
//! and their format are in `cli/tests/ingress-nginx/` (README.md there).
//!
//! `WHARF_NGINX_CASE=TEXT` runs only the cases whose file or `it` contains TEXT.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{addr, Wharf};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde::Deserialize;
use serde_yaml::Value;
use wharf_dataplane::testing::{inspecting_client_config_as, Leaf, TempDir, TestCa};

const NAMESPACE: &str = "e2e";
const PREFIX: &str = "nginx.ingress.kubernetes.io/";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    source: String,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    it: String,
    differs: Option<String>,
    skip: Option<String>,
    #[serde(default)]
    flags: Vec<String>,
    backends: Option<Vec<BackendSpec>>,
    #[serde(default)]
    jar: bool,
    #[serde(default)]
    ingresses: Vec<IngressSpec>,
    objects: Option<String>,
    #[serde(rename = "clientCaSecret")]
    client_ca_secret: Option<String>,
    #[serde(default)]
    requests: Vec<RequestSpec>,
}

#[derive(Deserialize, Clone)]
#[serde(untagged)]
enum BackendSpec {
    Name(String),
    Replicas { name: String, replicas: u8 },
}

impl BackendSpec {
    fn name(&self) -> &str {
        match self {
            BackendSpec::Name(n) | BackendSpec::Replicas { name: n, .. } => n,
        }
    }
    fn replicas(&self) -> u8 {
        match self {
            BackendSpec::Name(_) => 1,
            BackendSpec::Replicas { replicas, .. } => *replicas,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IngressSpec {
    name: Option<String>,
    host: Option<String>,
    hosts: Option<Vec<String>>,
    paths: Option<Vec<PathSpec>>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    tls: Vec<String>,
    #[serde(rename = "tlsSecret")]
    tls_secret: Option<String>,
    #[serde(rename = "defaultBackend")]
    default_backend: Option<String>,
    class: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum PathSpec {
    Prefix(String),
    Full {
        path: Option<String>,
        #[serde(rename = "type")]
        kind: Option<String>,
        backend: Option<String>,
        port: Option<u16>,
    },
}

/// One request; its method is the key that holds its target (`GET: /path`).
#[derive(Deserialize)]
#[serde(try_from = "serde_yaml::Mapping")]
struct RequestSpec {
    method: String,
    target: String,
    fields: RequestFields,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RequestFields {
    host: Option<String>,
    scheme: Option<String>,
    sni: Option<String>,
    #[serde(rename = "clientCert", default)]
    client_cert: bool,
    from: Option<Ipv4Addr>,
    #[serde(default)]
    headers: BTreeMap<String, Strings>,
    body: Option<String>,
    repeat: Option<u32>,
    #[serde(default)]
    expect: Expect,
    #[serde(default)]
    counts: BTreeMap<String, [u32; 2]>,
}

impl TryFrom<serde_yaml::Mapping> for RequestSpec {
    type Error = String;
    fn try_from(mut m: serde_yaml::Mapping) -> Result<Self, String> {
        let methods: Vec<String> = m
            .keys()
            .filter_map(Value::as_str)
            .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase()))
            .map(str::to_owned)
            .collect();
        let [method] = methods.as_slice() else {
            return Err(format!("a request needs exactly one METHOD: target key, found {methods:?}"));
        };
        let target = m.remove(method.as_str()).and_then(|v| v.as_str().map(str::to_owned));
        let target = target.ok_or_else(|| format!("{method}: needs a target string"))?;
        let fields = serde_yaml::from_value(Value::Mapping(m)).map_err(|e| e.to_string())?;
        Ok(RequestSpec { method: method.clone(), target, fields })
    }
}

/// One value or several.
#[derive(Deserialize, Clone, Debug)]
#[serde(untagged)]
enum Strings {
    One(String),
    Many(Vec<String>),
}

impl Strings {
    fn all(&self) -> Vec<String> {
        match self {
            Strings::One(s) => vec![s.clone()],
            Strings::Many(v) => v.clone(),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Expect {
    status: Option<Statuses>,
    #[serde(default)]
    headers: BTreeMap<String, Strings>,
    #[serde(default)]
    contains: BTreeMap<String, Strings>,
    #[serde(default)]
    absent: Vec<String>,
    body_contains: Option<String>,
    backend: Option<String>,
    seen: Option<SeenSpec>,
    same_backend_as: Option<usize>,
    /// The leaf the server presented is the first certificate of this Secret's `tls.crt`
    /// (a Secret of the case's `objects`).
    certificate: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Statuses {
    One(u16),
    Many(Vec<u16>),
}

impl Statuses {
    fn allows(&self, s: u16) -> bool {
        match self {
            Statuses::One(x) => *x == s,
            Statuses::Many(v) => v.contains(&s),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SeenSpec {
    path: Option<String>,
    query: Option<String>,
    host: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    absent: Vec<String>,
}

/// The case files, in name order.
fn case_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "yaml") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ingress-nginx"), &mut out);
    out
}

/// The echo servers of one case: name → (port, one address per replica).
struct Backends(BTreeMap<String, (u16, Vec<Ipv4Addr>)>);

impl Backends {
    async fn start(specs: &[BackendSpec]) -> Backends {
        let mut out = BTreeMap::new();
        for spec in specs {
            out.insert(spec.name().to_owned(), start_replicas(spec).await);
        }
        Backends(out)
    }
}

/// Replica k listens on 127.0.0.(k+1), all on one port (an EndpointSlice has one port per
/// name); each names itself `NAME` (one replica) or `NAME-K`.
async fn start_replicas(spec: &BackendSpec) -> (u16, Vec<Ipv4Addr>) {
    'again: loop {
        let first = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = first.local_addr().unwrap().port();
        let mut listeners = vec![first];
        for k in 1..spec.replicas() {
            match tokio::net::TcpListener::bind((Ipv4Addr::new(127, 0, 0, k + 1), port)).await {
                Ok(l) => listeners.push(l),
                Err(_) => continue 'again,
            }
        }
        let mut addrs = Vec::new();
        for (k, l) in listeners.into_iter().enumerate() {
            let name = if spec.replicas() == 1 { spec.name().to_owned() } else { format!("{}-{}", spec.name(), k + 1) };
            addrs.push(match l.local_addr().unwrap().ip() {
                IpAddr::V4(a) => a,
                IpAddr::V6(_) => unreachable!("bound on IPv4"),
            });
            tokio::spawn(wharf_dataplane::echo::serve(l, name));
        }
        return (port, addrs);
    }
}

/// The certificates of one case.
struct Pki {
    serving: TestCa,
    clients: TestCa,
    client: Leaf,
}

fn secret_doc(name: &str, data: &[(&str, &str)]) -> Value {
    let mut string_data = serde_yaml::Mapping::new();
    for (k, v) in data {
        string_data.insert((*k).into(), (*v).into());
    }
    let kind = if data.iter().any(|(k, _)| *k == "tls.crt") { "kubernetes.io/tls" } else { "Opaque" };
    serde_yaml::to_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "type": kind,
    }))
    .map(|mut v| {
        v["stringData"] = Value::Mapping(string_data);
        v
    })
    .unwrap()
}

fn json_doc(j: serde_json::Value) -> Value {
    serde_yaml::to_value(j).unwrap()
}

/// The objects of one case, as `kubectl apply` would be given them.
fn manifests(case: &Case, backends: &Backends, pki: &Pki) -> Result<Vec<Value>, String> {
    let mut docs = vec![json_doc(serde_json::json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": "wharf"}, "spec": {"controller": "wharf.dev/ingress-controller"},
    }))];
    for (name, (port, addrs)) in &backends.0 {
        docs.push(json_doc(serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"ports": [
                {"name": "http", "port": 80, "targetPort": port},
                {"name": "alt", "port": 8080, "targetPort": port},
            ]},
        })));
        let endpoints: Vec<_> = addrs
            .iter()
            .map(|a| serde_json::json!({"addresses": [a.to_string()], "conditions": {"ready": true}}))
            .collect();
        docs.push(json_doc(serde_json::json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-1"), "namespace": NAMESPACE,
                         "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": port}, {"name": "alt", "port": port}],
            "endpoints": endpoints,
        })));
    }
    let first_backend = backends.0.keys().next().cloned().unwrap_or_else(|| "echo".to_owned());
    for (i, ing) in case.ingresses.iter().enumerate() {
        let name = ing.name.clone().unwrap_or_else(|| format!("ingress-{}", i + 1));
        let paths: Vec<serde_json::Value> = ing
            .paths
            .as_deref()
            .unwrap_or(&[PathSpec::Prefix("/".to_owned())])
            .iter()
            .map(|p| {
                let (path, kind, backend, port) = match p {
                    PathSpec::Prefix(path) => (Some(path.clone()), None, None, None),
                    PathSpec::Full { path, kind, backend, port } => {
                        (path.clone(), kind.clone(), backend.clone(), *port)
                    }
                };
                let mut v = serde_json::json!({
                    "pathType": kind.unwrap_or_else(|| "Prefix".to_owned()),
                    "backend": {"service": {"name": backend.unwrap_or_else(|| first_backend.clone()),
                                            "port": {"number": port.unwrap_or(80)}}},
                });
                if let Some(path) = path {
                    v["path"] = path.into();
                }
                v
            })
            .collect();
        let hosts: Vec<Option<String>> = match (&ing.hosts, &ing.host) {
            (Some(hs), _) => hs.iter().cloned().map(Some).collect(),
            (None, h) => vec![h.clone()],
        };
        let rules: Vec<serde_json::Value> = if ing.paths.as_ref().is_some_and(Vec::is_empty) {
            Vec::new()
        } else {
            hosts
                .iter()
                .map(|h| {
                    let mut r = serde_json::json!({"http": {"paths": paths}});
                    if let Some(h) = h {
                        r["host"] = h.clone().into();
                    }
                    r
                })
                .collect()
        };
        let annotations: serde_json::Map<String, serde_json::Value> = ing
            .annotations
            .iter()
            .map(|(k, v)| (if k.contains('/') { k.clone() } else { format!("{PREFIX}{k}") }, v.clone().into()))
            .collect();
        let mut spec = serde_json::json!({"rules": rules});
        match ing.class.as_deref() {
            Some("none") => {}
            Some(c) => spec["ingressClassName"] = c.into(),
            None => spec["ingressClassName"] = "wharf".into(),
        }
        if let Some(b) = &ing.default_backend {
            spec["defaultBackend"] = serde_json::json!({"service": {"name": b, "port": {"number": 80}}});
        }
        if !ing.tls.is_empty() {
            let secret = ing.tls_secret.clone().unwrap_or_else(|| format!("{name}-tls"));
            spec["tls"] = serde_json::json!([{"hosts": ing.tls, "secretName": secret}]);
            let names: Vec<&str> = ing.tls.iter().map(String::as_str).collect();
            let leaf = pki.serving.leaf(&names);
            docs.push(secret_doc(&secret, &[("tls.crt", &leaf.chain_pem), ("tls.key", &leaf.key_pem)]));
        }
        docs.push(json_doc(serde_json::json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotations},
            "spec": spec,
        })));
    }
    if let Some(name) = &case.client_ca_secret {
        docs.push(secret_doc(name, &[("ca.crt", &pki.clients.root_pem)]));
    }
    if let Some(objects) = &case.objects {
        for doc in serde_yaml::Deserializer::from_str(objects) {
            let mut v = Value::deserialize(doc).map_err(|e| format!("objects: {e}"))?;
            if v.is_null() {
                continue;
            }
            let meta =
                v.get_mut("metadata").and_then(Value::as_mapping_mut).ok_or("objects: a document without metadata")?;
            if !meta.contains_key("namespace") {
                meta.insert("namespace".into(), NAMESPACE.into());
            }
            docs.push(v);
        }
    }
    Ok(docs)
}

/// What one request got back.
struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: String,
    /// The leaf certificate the server presented (HTTPS), DER.
    peer: Option<Vec<u8>>,
}

impl Answer {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
    fn backend(&self) -> String {
        self.json()["name"].as_str().unwrap_or("").to_owned()
    }
}

async fn send(w: &Wharf, pki: &Pki, r: &RequestSpec, host: &str, cookies: &str) -> Result<Answer, String> {
    let f = &r.fields;
    let https = match f.scheme.as_deref() {
        None | Some("http") => false,
        Some("https") => true,
        Some(s) => return Err(format!("unknown scheme {s}")),
    };
    let to = addr(if https { w.https } else { w.http });
    let socket = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
    socket.bind(SocketAddr::from((f.from.unwrap_or(Ipv4Addr::LOCALHOST), 0))).map_err(|e| e.to_string())?;
    let tcp = socket.connect(to).await.map_err(|e| format!("connect: {e}"))?;
    let mut req = http::Request::builder().method(r.method.as_str()).uri(r.target.as_str());
    if !host.is_empty() {
        req = req.header("host", host);
    }
    let mut has_cookie = false;
    for (n, vs) in &f.headers {
        for v in vs.all() {
            if n.eq_ignore_ascii_case("cookie") && !cookies.is_empty() {
                has_cookie = true;
                req = req.header(n.as_str(), format!("{v}; {cookies}"));
            } else {
                req = req.header(n.as_str(), v);
            }
        }
    }
    if !cookies.is_empty() && !has_cookie {
        req = req.header("cookie", cookies);
    }
    let body = Full::new(Bytes::from(f.body.clone().unwrap_or_default()));
    let req = req.body(body).map_err(|e| e.to_string())?;
    let resp = if https {
        let client = f.client_cert.then_some(&pki.client);
        let cfg = inspecting_client_config_as(&[b"http/1.1"], client);
        let sni = f.sni.clone().unwrap_or_else(|| host.split(':').next().unwrap_or("").to_owned());
        let name = ServerName::try_from(sni).map_err(|e| e.to_string())?;
        let tls = tokio_rustls::TlsConnector::from(cfg).connect(name, tcp).await.map_err(|e| format!("TLS: {e}"))?;
        let peer = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec());
        let (mut s, c) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|e| e.to_string())?;
        tokio::spawn(c);
        (s.send_request(req).await.map_err(|e| e.to_string())?, peer)
    } else {
        let (mut s, c) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.map_err(|e| e.to_string())?;
        tokio::spawn(c);
        (s.send_request(req).await.map_err(|e| e.to_string())?, None)
    };
    let (resp, peer) = resp;
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok(Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
        peer,
    })
}

/// `echo` names the one replica `echo` or any replica `echo-K`.
fn is_backend(answered: &str, name: &str) -> bool {
    answered == name
        || answered.strip_prefix(name).and_then(|r| r.strip_prefix('-')).is_some_and(|k| k.parse::<u8>().is_ok())
}

/// The first certificate of the `tls.crt` of each Secret in `objects`, DER, by name.
fn secret_leaves(objects: Option<&str>) -> BTreeMap<String, Vec<u8>> {
    use tokio_rustls::rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut leaves = BTreeMap::new();
    for doc in serde_yaml::Deserializer::from_str(objects.unwrap_or("")) {
        let Ok(v) = Value::deserialize(doc) else { continue };
        let name = v["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let pem = v["stringData"]["tls.crt"].as_str().unwrap_or_default();
        if let Some(Ok(der)) = CertificateDer::pem_slice_iter(pem.as_bytes()).next() {
            leaves.insert(name, der.to_vec());
        }
    }
    leaves
}

/// What is wrong with `a` given `e` (empty: nothing); `leaves` are the certificates of
/// the case's Secrets.
fn check(e: &Expect, a: &Answer, earlier: &[String], leaves: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    let mut bad = Vec::new();
    if let Some(secret) = &e.certificate {
        match (leaves.get(secret), &a.peer) {
            (None, _) => bad.push(format!("certificate: no Secret {secret} with a tls.crt in the objects")),
            (Some(want), Some(got)) if want == got => {}
            (Some(_), Some(_)) => bad.push(format!("the server presented another certificate than {secret}'s")),
            (Some(_), None) => bad.push("certificate: not an HTTPS request".to_owned()),
        }
    }
    if let Some(s) = &e.status {
        if !s.allows(a.status) {
            bad.push(format!(
                "status {} (want {})",
                a.status,
                match s {
                    Statuses::One(x) => x.to_string(),
                    Statuses::Many(v) => format!("{v:?}"),
                }
            ));
        }
    }
    let values = |n: &str| -> Vec<String> {
        a.headers.get_all(n).iter().map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()).collect()
    };
    for (n, want) in &e.headers {
        let got = values(n);
        if got != want.all() {
            bad.push(format!("header {n}: {got:?} (want {:?})", want.all()));
        }
    }
    for (n, parts) in &e.contains {
        let got = values(n).join(", ");
        for part in parts.all() {
            if !got.contains(&part) {
                bad.push(format!("header {n}: {got:?} lacks {part:?}"));
            }
        }
    }
    for n in &e.absent {
        if a.headers.contains_key(n.as_str()) {
            bad.push(format!("header {n} present: {:?}", values(n)));
        }
    }
    if let Some(b) = &e.body_contains {
        if !a.body.contains(b.as_str()) {
            bad.push(format!("body lacks {b:?}"));
        }
    }
    if let Some(b) = &e.backend {
        if !is_backend(&a.backend(), b) {
            bad.push(format!("answered by {:?} (want {b})", a.backend()));
        }
    }
    if let Some(i) = e.same_backend_as {
        match earlier.get(i) {
            Some(prev) if *prev == a.backend() => {}
            Some(prev) => bad.push(format!("answered by {:?}, request {i} by {prev:?}", a.backend())),
            None => bad.push(format!("same_backend_as: no request {i} before")),
        }
    }
    if let Some(s) = &e.seen {
        let j = a.json();
        let field = |k: &str| j[k].as_str().map(str::to_owned);
        for (k, want) in [("path", &s.path), ("query", &s.query), ("host", &s.host)] {
            if let Some(want) = want {
                if field(k).as_deref() != Some(want.as_str()) {
                    bad.push(format!("backend saw {k} {:?} (want {want:?})", field(k)));
                }
            }
        }
        for (n, want) in &s.headers {
            let got = j["headers"][n.to_ascii_lowercase()].as_str();
            if got != Some(want.as_str()) {
                bad.push(format!("backend saw {n}: {got:?} (want {want:?})"));
            }
        }
        for n in &s.absent {
            if let Some(got) = j["headers"][n.to_ascii_lowercase()].as_str() {
                bad.push(format!("backend saw {n}: {got:?} (want none)"));
            }
        }
    }
    bad
}

/// Runs one case; the failures, each a line.
async fn run_case(case: &Case, dir: &Path) -> Result<(), String> {
    let specs = case.backends.clone().unwrap_or_else(|| vec![BackendSpec::Name("echo".to_owned())]);
    let backends = Backends::start(&specs).await;
    let clients = TestCa::new("Client CA");
    let pki = Pki { serving: TestCa::default(), client: clients.leaf(&["client.example.com"]), clients };
    let docs = manifests(case, &backends, &pki)?;
    let yaml: String = docs.iter().map(|d| format!("---\n{}", serde_yaml::to_string(d).unwrap())).collect();
    let file = dir.join("objects.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let mut flags: Vec<&str> = vec!["--https-redirect-port", "443"];
    flags.extend(case.flags.iter().map(String::as_str));
    let w = Wharf::start(&[&file], &flags);
    if !w.ready().await {
        return Err(format!("not ready\n{}", w.log()));
    }
    let default_host =
        case.ingresses.iter().find_map(|i| i.host.clone().or_else(|| i.hosts.as_ref()?.first().cloned()));
    let mut jar: BTreeMap<String, String> = BTreeMap::new();
    let mut answered: Vec<String> = Vec::new();
    let mut failures = String::new();
    let leaves = secret_leaves(case.objects.as_deref());
    for (i, r) in case.requests.iter().enumerate() {
        let host = r.fields.host.clone().or_else(|| default_host.clone()).unwrap_or_default();
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        let mut first_backend = None;
        for n in 0..r.fields.repeat.unwrap_or(1) {
            let cookies: String = jar.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ");
            let a = match tokio::time::timeout(Duration::from_secs(20), send(&w, &pki, r, &host, &cookies)).await {
                Ok(Ok(a)) => a,
                Ok(Err(e)) => {
                    let _ = writeln!(failures, "  request {i} ({} {} Host {host}) #{n}: {e}", r.method, r.target);
                    break;
                }
                Err(_) => {
                    let _ = writeln!(failures, "  request {i} ({} {}): no answer in 20 s", r.method, r.target);
                    break;
                }
            };
            if case.jar {
                for c in a.headers.get_all("set-cookie").iter().filter_map(|v| v.to_str().ok()) {
                    if let Some((k, v)) = c.split(';').next().and_then(|kv| kv.split_once('=')) {
                        jar.insert(k.trim().to_owned(), v.trim().to_owned());
                    }
                }
            }
            *counts.entry(a.backend()).or_default() += 1;
            let bad = check(&r.fields.expect, &a, &answered, &leaves);
            if !bad.is_empty() {
                let _ = writeln!(
                    failures,
                    "  request {i} ({} {} Host {host}) #{n}: {}\n    answer: {} {:?} {}",
                    r.method,
                    r.target,
                    bad.join("; "),
                    a.status,
                    a.headers,
                    a.body.chars().take(400).collect::<String>()
                );
                break;
            }
            first_backend.get_or_insert(a.backend());
        }
        answered.push(first_backend.unwrap_or_default());
        for (name, [lo, hi]) in &r.fields.counts {
            let got: u32 = counts.iter().filter(|(b, _)| is_backend(b, name)).map(|(_, c)| c).sum();
            if got < *lo || got > *hi {
                let _ = writeln!(
                    failures,
                    "  request {i}: {name} answered {got} times (want {lo}..={hi}); all: {counts:?}"
                );
            }
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        let log: String = w
            .log()
            .lines()
            .filter(|l| !l.contains("request served") && !l.contains("access"))
            .take(40)
            .collect::<Vec<_>>()
            .join("\n");
        Err(format!("{failures}  objects:\n{}\n  log:\n{log}", indent(&yaml)))
    }
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("    {l}\n")).collect()
}

#[derive(Default)]
struct Tally {
    passed: u32,
    differs: u32,
    skipped: u32,
    failed: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_nginx_e2e_cases_behave_as_upstream_asserts() {
    let only = std::env::var("WHARF_NGINX_CASE").ok();
    let mut loaded = Vec::new();
    for path in case_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let file: CaseFile = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let rel = path
            .strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ingress-nginx"))
            .unwrap()
            .display()
            .to_string();
        let stem = path.file_stem().unwrap().to_string_lossy();
        assert!(file.source.ends_with(&format!("/{stem}.go")), "{rel}: source {} is not {stem}.go", file.source);
        for case in file.cases {
            // A case that asserts nothing could not fail.
            let asserts = |r: &RequestSpec| {
                let e = &r.fields.expect;
                e.status.is_some()
                    || !(e.headers.is_empty() && e.contains.is_empty() && e.absent.is_empty())
                    || e.body_contains.is_some()
                    || e.backend.is_some()
                    || e.seen.is_some()
                    || e.same_backend_as.is_some()
                    || e.certificate.is_some()
                    || !r.fields.counts.is_empty()
            };
            assert!(
                case.skip.is_some() || (!case.requests.is_empty() && case.requests.iter().all(asserts)),
                "{rel}: {}: every request of a case that runs must assert something",
                case.it
            );
            if only.as_deref().is_some_and(|o| !rel.contains(o) && !case.it.contains(o)) {
                continue;
            }
            loaded.push((rel.clone(), case));
        }
    }
    let tally = Arc::new(tokio::sync::Mutex::new(Tally::default()));
    let slots = Arc::new(tokio::sync::Semaphore::new(3));
    let mut tasks = Vec::new();
    for (rel, case) in loaded {
        if case.skip.is_some() {
            tally.lock().await.skipped += 1;
            continue;
        }
        let (tally, slots) = (Arc::clone(&tally), Arc::clone(&slots));
        tasks.push(tokio::spawn(async move {
            let _slot = slots.acquire().await.unwrap();
            let dir = TempDir::new("nginx-case").unwrap();
            let result = run_case(&case, &dir).await;
            let mut t = tally.lock().await;
            match result {
                Ok(()) if case.differs.is_some() => t.differs += 1,
                Ok(()) => t.passed += 1,
                Err(e) => t.failed.push(format!("{rel}: {}\n{e}", case.it)),
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let t = tally.lock().await;
    let summary = format!(
        "ingress-nginx e2e cases: {} passed ({} as upstream asserts, {} where Wharf differs as documented), {} failed, {} not ported",
        t.passed + t.differs,
        t.passed,
        t.differs,
        t.failed.len(),
        t.skipped
    );
    eprintln!("{summary}");
    assert!(t.failed.is_empty(), "{summary}\n\n{}", t.failed.join("\n\n"));
}
