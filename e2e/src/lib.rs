//! The e2e suite's harness side: an admin client, `wharf controller` processes with their
//! own ports and IngressClass, echo backends where the cluster can reach them, and small
//! object builders. Runs against whatever `KUBECONFIG` names (see e2e/README.md).

pub mod pod;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;
pub use wharf_dataplane::testing::{
    eventually, holding_backend, http_get, http_get_after, https_get, https_get_after, inspecting_client_config, Leaf,
    Seen, TempDir, TestCa,
};

/// Settings from the environment `e2e/harness/up.sh` (or `e2e/kind.sh`) writes.
#[derive(Debug, Clone)]
pub struct Env {
    /// Kubeconfig the controller runs with (the ServiceAccount bound to the chart's RBAC).
    pub controller_kubeconfig: String,
    /// The `wharf` binary.
    pub wharf_bin: String,
    /// Address backends listen on, reachable from the controller and valid in EndpointSlices.
    pub backend_ip: String,
    /// Command prefix that runs a process where `backend_ip` lives (e.g. `ip netns exec x`).
    pub backend_exec: Vec<String>,
    /// The harness scripts directory, when the API server can be stopped and started.
    pub harness: Option<String>,
    /// An address of the test process that is valid in an EndpointSlice (the host side of
    /// the backend network), for backends the test itself runs.
    pub host_ip: Option<String>,
}

impl Env {
    /// Reads the environment; fails with what is missing.
    pub fn from_env() -> Result<Env> {
        let var = |k: &str| std::env::var(k).with_context(|| format!("{k} is not set: run the suite with e2e/run.sh"));
        Ok(Env {
            controller_kubeconfig: var("WHARF_CONTROLLER_KUBECONFIG")?,
            wharf_bin: var("WHARF_BIN")?,
            backend_ip: var("WHARF_E2E_BACKEND_IP")?,
            backend_exec: std::env::var("WHARF_E2E_BACKEND_EXEC")
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
            harness: std::env::var("WHARF_E2E_HARNESS").ok(),
            host_ip: std::env::var("WHARF_E2E_HOST_IP").ok(),
        })
    }
}

/// An admin client from `KUBECONFIG`.
pub async fn admin() -> Result<Client> {
    Client::try_default().await.context("cannot build a client from KUBECONFIG")
}

/// A fresh namespace and IngressClass for one test, so tests run side by side.
#[allow(missing_debug_implementations)]
#[derive(Clone)]
pub struct Scope {
    /// Admin client.
    pub client: Client,
    /// The test's namespace.
    pub ns: String,
    /// The test's IngressClass name.
    pub class: String,
    /// The test's controller name (`spec.controller` of `class`).
    pub controller_name: String,
}

impl Scope {
    /// Creates a namespace `e2e-<name>-<suffix>` and an IngressClass `wharf-<name>-<suffix>`.
    pub async fn new(name: &str) -> Result<Scope> {
        let client = admin().await?;
        // Unique per run: namespaces cannot be deleted without a namespace controller, and
        // a run must not meet the objects (or Leases) of an earlier one.
        let suffix = format!(
            "{:06x}",
            std::process::id()
                ^ (std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.subsec_nanos())
                    .unwrap_or(0)
                    & 0xffffff)
        );
        let ns = format!("e2e-{name}-{suffix}");
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}}))?).await?;
        let class = format!("wharf-{name}-{suffix}");
        let controller_name = format!("wharf.dev/e2e-{name}-{suffix}");
        let classes: Api<IngressClass> = Api::all(client.clone());
        let ic: IngressClass =
            serde_json::from_value(json!({"metadata": {"name": class}, "spec": {"controller": controller_name}}))?;
        classes.patch(&class, &PatchParams::apply("wharf-e2e").force(), &Patch::Apply(&ic)).await?;
        Ok(Scope { client, ns, class, controller_name })
    }

    /// Server-side applies a namespaced object given as JSON.
    pub async fn apply<K>(&self, obj: serde_json::Value) -> Result<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let k: K = serde_json::from_value(obj)?;
        let name = k.meta().name.clone().context("object has no name")?;
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.ns);
        Ok(api.patch(&name, &PatchParams::apply("wharf-e2e").force(), &Patch::Apply(&k)).await?)
    }

    /// Deletes a namespaced object.
    pub async fn delete<K>(&self, name: &str) -> Result<()>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.ns);
        api.delete(name, &DeleteParams::default()).await?;
        Ok(())
    }

    /// A kubernetes.io/tls Secret.
    pub async fn tls_secret(&self, name: &str, crt: &str, key: &str) -> Result<Secret> {
        self.apply(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": self.ns},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": crt, "tls.key": key},
        }))
        .await
    }

    /// A Service with one port 80 and an EndpointSlice pointing at `backend`.
    pub async fn service(&self, name: &str, backend: SocketAddr) -> Result<()> {
        self.service_for_pod(name, backend, None).await
    }

    /// A Pod that is never scheduled (the suite's backends run outside the cluster), with
    /// `labels` and service account `sa`: what mesh enrolment reads.
    pub async fn pod(&self, name: &str, labels: serde_json::Value, sa: &str) -> Result<()> {
        self.apply::<k8s_openapi::api::core::v1::Pod>(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.ns, "labels": labels},
            "spec": {
                "serviceAccountName": sa,
                "automountServiceAccountToken": false,
                "nodeSelector": {"wharf.dev/e2e": "never-scheduled"},
                "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
            },
        }))
        .await?;
        Ok(())
    }

    /// Like [`Scope::service`], with the endpoint's `targetRef` naming Pod `pod`.
    pub async fn service_for_pod(&self, name: &str, backend: SocketAddr, pod: Option<&str>) -> Result<()> {
        self.apply::<Service>(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": backend.port()}]},
        }))
        .await?;
        self.apply::<EndpointSlice>(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-1"), "namespace": self.ns, "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": backend.port()}],
            "endpoints": [{
                "addresses": [backend.ip().to_string()],
                "conditions": {"ready": true},
                "targetRef": pod.map(|p| json!({"kind": "Pod", "namespace": self.ns, "name": p})),
            }],
        }))
        .await?;
        Ok(())
    }

    /// An Ingress of this scope's class: `host` `/` to `service`, TLS from `secret` if given.
    pub async fn ingress(&self, name: &str, host: &str, service: &str, secret: Option<&str>) -> Result<Ingress> {
        let mut spec = json!({
            "ingressClassName": self.class,
            "rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": service, "port": {"number": 80}}}}]}}],
        });
        if let Some(s) = secret {
            spec["tls"] = json!([{"hosts": [host], "secretName": s}]);
        }
        self.apply(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": name, "namespace": self.ns}, "spec": spec,
        }))
        .await
    }

    /// Sets the LoadBalancer status of Service `name` (as a cloud controller would).
    pub async fn set_load_balancer(&self, name: &str, ip: &str) -> Result<()> {
        self.apply::<Service>(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"type": "LoadBalancer", "ports": [{"name": "https", "port": 443, "targetPort": 8443}]},
        }))
        .await?;
        let api: Api<Service> = Api::namespaced(self.client.clone(), &self.ns);
        let body = json!({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&body)).await?;
        Ok(())
    }

    /// A GatewayClass named like this scope's IngressClass, for `controller_name`.
    pub async fn gateway_class(&self, controller_name: &str) -> Result<()> {
        use wharf_gateway_api::gatewayclasses::GatewayClass;
        let gc: GatewayClass = serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": self.class}, "spec": {"controllerName": controller_name},
        }))?;
        let api: Api<GatewayClass> = Api::all(self.client.clone());
        api.patch(&self.class, &PatchParams::apply("wharf-e2e").force(), &Patch::Apply(&gc)).await?;
        Ok(())
    }

    /// `kubectl get KIND NAME -o json` in this namespace (`-n` is ignored for
    /// cluster-scoped kinds).
    pub fn get_json(&self, kind: &str, name: &str) -> Result<serde_json::Value> {
        Ok(serde_json::from_str(&self.kubectl(&["get", kind, name, "-o", "json"])?)?)
    }

    /// `kubectl ARGS -n <ns>` output.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("kubectl").args(args).args(["-n", &self.ns]).output().context("cannot run kubectl")?;
        if !out.status.success() {
            bail!("kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The mesh root istiod publishes in this namespace (the `istio-ca-root-cert`
    /// ConfigMap), waiting up to a minute: publishing into a new namespace is istiod's
    /// job, and after an API server restart its watches take a while to come back.
    pub async fn istio_root_cert(&self) -> Result<String> {
        let mut root = String::new();
        let found = eventually(Duration::from_secs(60), || {
            let got =
                self.kubectl(&["get", "configmap", "istio-ca-root-cert", "-o", "jsonpath={.data.root-cert\\.pem}"]);
            let ok = matches!(&got, Ok(pem) if pem.contains("BEGIN CERTIFICATE"));
            if let Ok(pem) = got {
                root = pem;
            }
            async move { ok }
        })
        .await;
        if !found {
            bail!("istiod did not publish istio-ca-root-cert in {}", self.ns);
        }
        Ok(root)
    }
}

use wharf_dataplane::testing::free_port;

/// A process whose stderr is collected; killed on drop.
#[derive(Debug)]
pub struct Proc {
    /// The child.
    pub child: Child,
    log: Arc<Mutex<String>>,
}

impl Proc {
    /// Starts `cmd`, collecting its stderr.
    pub fn spawn_command(cmd: Command) -> Result<Proc> {
        Proc::spawn(cmd)
    }

    fn spawn(mut cmd: Command) -> Result<Proc> {
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd.spawn().with_context(|| format!("cannot start {cmd:?}"))?;
        let log = Arc::new(Mutex::new(String::new()));
        if let Some(stderr) = child.stderr.take() {
            let sink = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(std::result::Result::ok) {
                    if let Ok(mut l) = sink.lock() {
                        l.push_str(&line);
                        l.push('\n');
                    }
                }
            });
        }
        Ok(Proc { child, log })
    }

    /// Everything the process logged so far.
    pub fn log(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Sends SIGKILL and waits.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `(type, status, reason)` of each condition in a `conditions` array.
pub fn conditions(v: &serde_json::Value) -> Vec<(String, String, String)> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let f = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (f("type"), f("status"), f("reason"))
        })
        .collect()
}

/// True when `conditions` holds a condition of this type, status and reason.
pub fn has_condition(conditions: &[(String, String, String)], kind: &str, status: &str, reason: &str) -> bool {
    conditions.iter().any(|(k, s, r)| k == kind && s == status && r == reason)
}

/// A running `wharf controller`.
#[derive(Debug)]
pub struct Controller {
    /// The process.
    pub proc: Proc,
    /// HTTP listener.
    pub http: SocketAddr,
    /// HTTPS listener.
    pub https: SocketAddr,
    /// Admin listener.
    pub admin: SocketAddr,
}

impl Controller {
    /// Starts a controller for `scope`'s class with `extra` flags, and waits until it serves.
    /// Ports are picked free but can be taken before the process binds them: a start that
    /// fails on a port in use is retried on new ports.
    pub async fn start(env: &Env, scope: &Scope, identity: &str, extra: &[&str]) -> Result<Controller> {
        let mut attempt = 0;
        loop {
            let mut c = Controller::spawn(env, scope, identity, extra, &[])?;
            match c.wait_ready(Duration::from_secs(20)).await {
                Ok(()) => return Ok(c),
                Err(e) if attempt < 2 && c.proc.log().contains("Address already in use") => {
                    c.proc.kill();
                    attempt += 1;
                    eprintln!("a picked port was taken before {identity} bound it; retrying: {e:#}");
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts a controller with `extra` flags and `vars` in its environment; does not wait.
    pub fn spawn(
        env: &Env,
        scope: &Scope,
        identity: &str,
        extra: &[&str],
        vars: &[(&str, &str)],
    ) -> Result<Controller> {
        let (http, https, admin) = (free_port(), free_port(), free_port());
        let mut cmd = Command::new(&env.wharf_bin);
        cmd.arg("controller").args(["--kubeconfig", &env.controller_kubeconfig]).args(["--passthrough-port", "0"]);
        // Loopback unless `extra` says otherwise (the ports are on every address then).
        if !extra.contains(&"--listen-address") {
            cmd.args(["--listen-address", "127.0.0.1"]);
        }
        cmd.args([
            "--http-port",
            &http.to_string(),
            "--https-port",
            &https.to_string(),
            "--admin-port",
            &admin.to_string(),
        ])
        .args(["--controller-name", &scope.controller_name, "--ingress-class", &scope.class])
        .args(["--election-namespace", "wharf-system", "--election-id", &format!("lease-{}", scope.class)])
        .args([
            "--pod-name",
            identity,
            "--lease-duration",
            "4s",
            "--lease-renew-deadline",
            "3s",
            "--lease-retry",
            "500ms",
        ])
        // No Service in front: stop accepting at SIGTERM (the image test runs the chart's
        // delay).
        .args(["--drain-timeout", "2s", "--shutdown-delay", "0s"])
        .args(extra)
        .env("RUST_LOG", "info,wharf::access=off")
        .envs(vars.iter().copied());
        Ok(Controller {
            proc: Proc::spawn(cmd)?,
            http: SocketAddr::from(([127, 0, 0, 1], http)),
            https: SocketAddr::from(([127, 0, 0, 1], https)),
            admin: SocketAddr::from(([127, 0, 0, 1], admin)),
        })
    }

    /// Waits until `/healthz/ready` answers 200.
    pub async fn wait_ready(&self, within: Duration) -> Result<()> {
        let admin_addr = self.admin;
        let ready = eventually(within, || async move {
            http_get(admin_addr, "admin", "/healthz/ready").await.map(|s| s.status) == Ok(200)
        })
        .await;
        if !ready {
            bail!("controller not ready in {within:?}; log:\n{}", self.proc.log());
        }
        Ok(())
    }

    /// The value of the metric line starting with `series` (name and labels), 0 if absent.
    pub async fn metric(&self, series: &str) -> f64 {
        let body = http_get(self.admin, "admin", "/metrics").await.map(|s| s.body).unwrap_or_default();
        body.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }
}

/// `kubectl ARGS` (no namespace added), with `stdin` as its input; its output.
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> Result<String> {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run kubectl")?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Server-side apply of one object as the suite's field manager.
pub fn apply(obj: &serde_json::Value) -> Result<String> {
    kubectl(
        &["apply", "--server-side", "--force-conflicts", "--field-manager=wharf-e2e", "-f", "-"],
        Some(&obj.to_string()),
    )
}

/// Applies the Role and RoleBinding the chart grants the controller in namespace `ns` when
/// `controller.acme.namespaces` lists it: ACME may then write the Secrets there.
pub fn grant_chart_acme(ns: &str) -> Result<()> {
    let sets = [
        "controller.acme.issuers[0].name=e2e".to_owned(),
        "controller.acme.issuers[0].directory=https://acme.invalid/dir".to_owned(),
        format!("controller.acme.namespaces[0]={ns}"),
    ];
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let objects: Vec<serde_json::Value> = pod::helm_template(&[], &sets)?
        .into_iter()
        .filter(|o| (o["kind"] == "Role" || o["kind"] == "RoleBinding") && o["metadata"]["namespace"] == ns)
        .collect();
    if objects.len() != 2 {
        bail!("the chart grants {} RBAC objects in {ns}, not a Role and its binding", objects.len());
    }
    for o in &objects {
        apply(o)?;
    }
    Ok(())
}

/// Applies the chart's GatewayClass and edge Gateway as the values files and `--set`
/// values given render them (the harness's helm install made them too, but tests that
/// reinstall the CRDs delete them); returns them.
pub fn apply_chart_gateway(values: &[&str], sets: &[&str]) -> Result<Vec<serde_json::Value>> {
    let objects: Vec<serde_json::Value> = pod::helm_template(values, sets)?
        .into_iter()
        .filter(|o| o["kind"] == "Gateway" || o["kind"] == "GatewayClass")
        .collect();
    for o in &objects {
        apply(o)?;
    }
    Ok(objects)
}

/// The gateway container of the chart's Deployment as `helm template` renders it.
#[derive(Debug, Clone)]
pub struct ChartPod {
    /// Container args.
    pub args: Vec<String>,
    /// Volume mounts: (volume name, mount path).
    pub mounts: Vec<(String, String)>,
    /// (path, container port) of the readiness and liveness probes.
    pub probes: Vec<(String, u16)>,
}

impl ChartPod {
    /// Renders charts/wharf with the values files and `--set` values given (helm on PATH).
    pub fn render(values: &[&str], sets: &[&str]) -> Result<ChartPod> {
        let d = pod::Deployment::render(values, sets)?;
        Ok(ChartPod { args: d.args(), mounts: d.mounts(), probes: d.probes()? })
    }

    /// Every arg, with each mounted path moved under `root/<volume name>`, where the test
    /// writes the volume's files.
    pub fn args_at(&self, root: &std::path::Path) -> Vec<String> {
        self.args
            .iter()
            .map(|a| {
                self.mounts.iter().fold(a.clone(), |a, (name, path)| {
                    a.replace(&format!("={path}"), &format!("={}", root.join(name).display()))
                })
            })
            .collect()
    }

    /// The mesh flags (`--istio-ca-*`, `--mesh-*`, `--trust-domain`) of [`ChartPod::args_at`].
    pub fn mesh_args(&self, root: &std::path::Path) -> Vec<String> {
        self.args_at(root)
            .into_iter()
            .filter(|a| ["--istio-ca-", "--mesh-", "--trust-domain"].iter().any(|p| a.starts_with(p)))
            .collect()
    }

    /// The directory standing in for volume `name` under `root`.
    pub fn volume(&self, root: &std::path::Path, name: &str) -> Result<std::path::PathBuf> {
        if !self.mounts.iter().any(|(n, _)| n == name) {
            bail!("the chart mounts no volume {name}: {:?}", self.mounts);
        }
        let dir = root.join(name);
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }
}

/// Accepts on `listen` and copies each connection to and from `target`.
pub async fn relay(listen: SocketAddr, target: String) -> Result<SocketAddr> {
    let l = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    let at = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = l.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    Ok(at)
}

static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// Runs `wharf ARGS` where backends live (in the backend network namespace).
pub fn spawn_at_backend(env: &Env, args: &[&str]) -> Result<Proc> {
    spawn_program_at_backend(env, std::path::Path::new(&env.wharf_bin), args)
}

/// Runs `program ARGS` where backends live (in the backend network namespace).
pub fn spawn_program_at_backend(env: &Env, program: &std::path::Path, args: &[&str]) -> Result<Proc> {
    let mut cmd = match env.backend_exec.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(program);
            c
        }
        None => Command::new(program),
    };
    cmd.args(args);
    Proc::spawn(cmd)
}

/// A free port for a backend of this test process (on the backend address).
pub fn backend_port() -> u16 {
    let base = 20000 + (std::process::id() % 400) as u16 * 100;
    base + NEXT_PORT.fetch_add(1, Ordering::Relaxed)
}

/// `wharf run` arguments for a gateway with no files, listening on `listen` with every
/// listener off but those `extra` turns on.
pub fn bare_gateway_args(dir: &std::path::Path, listen: &str, extra: &[&str]) -> Vec<String> {
    let empty = dir.join("empty");
    let _ = std::fs::create_dir_all(&empty);
    let mut args: Vec<String> =
        ["run", "-f", &empty.to_string_lossy(), "--listen-address", listen].iter().map(|s| s.to_string()).collect();
    for flag in ["--http-port", "--https-port", "--passthrough-port", "--admin-port"] {
        if !extra.contains(&flag) {
            args.extend([flag.to_owned(), "0".to_owned()]);
        }
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// A stand-in for the backend node's ztunnel: a Wharf HBONE inbound on port 15008 of the
/// backend address, with the mesh identity in `cert`/`key` and `roots`, allowed to forward
/// to the backend address (the node's pods). Port 15008 is where HBONE dials by protocol;
/// the backend network namespace is the suite's own.
pub async fn ztunnel_stand_in(env: &Env, dir: &std::path::Path, cert: &str, key: &str, roots: &str) -> Result<Proc> {
    let args = bare_gateway_args(
        dir,
        &env.backend_ip,
        &[
            "--hbone-port",
            "15008",
            "--mesh-cert",
            cert,
            "--mesh-key",
            key,
            "--mesh-roots",
            roots,
            "--hbone-allow-destination",
            &env.backend_ip,
        ],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let proc = spawn_at_backend(env, &args)?;
    let addr: SocketAddr = format!("{}:15008", env.backend_ip).parse()?;
    let up =
        eventually(Duration::from_secs(10), || async move { tokio::net::TcpStream::connect(addr).await.is_ok() }).await;
    if !up {
        bail!("the ztunnel stand-in did not listen on {addr}; log:\n{}", proc.log());
    }
    Ok(proc)
}

/// An echo backend at the backend address, answering with `name`.
pub async fn backend(env: &Env, name: &str) -> Result<(Proc, SocketAddr)> {
    for _ in 0..20 {
        let port = backend_port();
        let addr: SocketAddr = format!("{}:{port}", env.backend_ip).parse()?;
        let mut proc = spawn_at_backend(env, &["echo", "--listen", &addr.to_string(), "--name", name])?;
        let up =
            eventually(Duration::from_secs(5), || async move { tokio::net::TcpStream::connect(addr).await.is_ok() })
                .await;
        if up {
            return Ok((proc, addr));
        }
        proc.kill();
    }
    bail!("cannot start an echo backend on {}", env.backend_ip)
}
