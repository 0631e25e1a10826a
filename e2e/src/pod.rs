//! The chart's pod run as a container of the gateway image, the way the kubelet runs it,
//! where no kubelet can run: `helm template` renders the Deployment, and each container
//! gets exactly its args, its environment (the downward-API values filled in), its user
//! and group, a read-only root filesystem, dropped capabilities, no privilege escalation,
//! its memory limit, its volumes (projected tokens, ConfigMaps and Secrets read from the
//! API server, the service-account token the kubelet mounts) and its probes. The network
//! is a docker bridge in 198.19.1.0/24: the API server and cluster services the pod names
//! are reached through relays on the bridge's gateway address, as a Service would be.
//!
//! A pod-spec field the runner does not know is an error, so the chart cannot grow a
//! field that the e2e suite silently ignores.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::{eventually, http_get, relay};

/// The docker network pods run in (made by e2e/image.sh).
pub const POD_NETWORK: &str = "wharf-e2e";
/// The bridge's address on the host: where relays stand in for the cluster's Services.
pub const POD_GATEWAY: [u8; 4] = [198, 19, 1, 1];

/// `helm template` of charts/wharf with the values files and `--set` values given: every
/// rendered object.
pub fn helm_template(values: &[&str], sets: &[&str]) -> Result<Vec<Value>> {
    use serde::Deserialize;
    let chart = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/wharf");
    let mut cmd = Command::new("helm");
    cmd.args(["template", "wharf", chart, "-n", "wharf-system", "--kube-version", "1.35.4"]);
    // As on a cluster with the Gateway API CRDs: the chart's GatewayClass and Gateway too.
    cmd.args(["--api-versions", "gateway.networking.k8s.io/v1/Gateway"]);
    // Values files by their path in the chart, or absolute.
    for v in values {
        cmd.arg("-f").arg(std::path::Path::new(chart).join(v));
    }
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().context("cannot run helm")?;
    if !out.status.success() {
        bail!("helm template: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8(out.stdout)?;
    let mut objects = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc)?;
        if !v.is_null() {
            objects.push(v);
        }
    }
    Ok(objects)
}

/// Fails when `obj` has a key outside `known`.
fn only(obj: &Value, known: &[&str], what: &str) -> Result<()> {
    if let Some(map) = obj.as_object() {
        for k in map.keys() {
            if !known.contains(&k.as_str()) {
                bail!("{what}: the chart sets `{k}`, which the pod runner does not carry out");
            }
        }
    }
    Ok(())
}

fn str_list(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(|x| x.as_str().map(str::to_owned)).collect()
}

/// The Deployment `helm template` rendered.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// metadata.namespace.
    pub namespace: String,
    /// spec.replicas (1 when the chart leaves it to an autoscaler).
    pub replicas: u32,
    /// spec.template.spec.terminationGracePeriodSeconds.
    pub grace: Duration,
    pod: Value,
}

impl Deployment {
    /// Renders the chart and picks its Deployment, checking that every pod-spec field it
    /// sets is one the runner carries out.
    pub fn render(values: &[&str], sets: &[&str]) -> Result<Deployment> {
        let objects = helm_template(values, sets)?;
        let d = objects.into_iter().find(|o| o["kind"] == "Deployment").context("the chart rendered no Deployment")?;
        let pod = d["spec"]["template"]["spec"].clone();
        // Scheduling fields decide where a pod runs, not how: there is one machine here.
        only(
            &pod,
            &[
                "serviceAccountName",
                "automountServiceAccountToken",
                "terminationGracePeriodSeconds",
                "securityContext",
                "containers",
                "volumes",
                "topologySpreadConstraints",
                "nodeSelector",
                "tolerations",
                "affinity",
                "priorityClassName",
                "imagePullSecrets",
            ],
            "pod spec",
        )?;
        only(
            &pod["securityContext"],
            &["runAsNonRoot", "runAsUser", "runAsGroup", "seccompProfile"],
            "pod securityContext",
        )?;
        let containers = pod["containers"].as_array().context("no containers")?;
        if containers.len() != 1 {
            bail!("the runner runs pods of one container; the chart renders {}", containers.len());
        }
        let c = &containers[0];
        only(
            c,
            &[
                "name",
                "image",
                "imagePullPolicy",
                "command",
                "args",
                "env",
                "ports",
                "readinessProbe",
                "livenessProbe",
                "resources",
                "volumeMounts",
                "securityContext",
            ],
            "container",
        )?;
        only(
            &c["securityContext"],
            &[
                "allowPrivilegeEscalation",
                "readOnlyRootFilesystem",
                "capabilities",
                "runAsNonRoot",
                "runAsUser",
                "runAsGroup",
            ],
            "container securityContext",
        )?;
        Ok(Deployment {
            namespace: d["metadata"]["namespace"].as_str().unwrap_or("default").to_owned(),
            replicas: d["spec"]["replicas"].as_u64().unwrap_or(1) as u32,
            grace: Duration::from_secs(pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30)),
            pod,
        })
    }

    fn container(&self) -> &Value {
        &self.pod["containers"][0]
    }

    /// The container's args.
    pub fn args(&self) -> Vec<String> {
        str_list(&self.container()["args"])
    }

    /// The named container port (or a port given as a number).
    pub fn port(&self, port: &Value) -> Result<u16> {
        if let Some(n) = port.as_u64() {
            return Ok(u16::try_from(n)?);
        }
        let p = self.container()["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == *port)
            .and_then(|p| p["containerPort"].as_u64())
            .with_context(|| format!("no container port named {port}"))?;
        Ok(u16::try_from(p)?)
    }

    /// The container's volume mounts: (volume name, mount path).
    pub fn mounts(&self) -> Vec<(String, String)> {
        self.container()["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| Some((m["name"].as_str()?.to_owned(), m["mountPath"].as_str()?.to_owned())))
            .collect()
    }

    /// Every containerPort the container declares, by name.
    pub fn ports(&self) -> Result<Vec<(String, u16)>> {
        self.container()["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let n = p["containerPort"].as_u64().context("containerPort")?;
                Ok((p["name"].as_str().unwrap_or("").to_owned(), u16::try_from(n)?))
            })
            .collect()
    }

    /// (path, port) of the readiness then the liveness probe.
    pub fn probes(&self) -> Result<Vec<(String, u16)>> {
        ["readinessProbe", "livenessProbe"]
            .iter()
            .map(|k| {
                let probe = &self.container()[*k];
                only(probe, &["httpGet", "periodSeconds", "failureThreshold"], k)?;
                let get = &probe["httpGet"];
                only(get, &["path", "port"], k)?;
                let path = get["path"].as_str().with_context(|| format!("{k} without a path"))?;
                Ok((path.to_owned(), self.port(&get["port"])?))
            })
            .collect()
    }

    fn security(&self, key: &str) -> Value {
        let c = &self.container()["securityContext"][key];
        if c.is_null() {
            self.pod["securityContext"][key].clone()
        } else {
            c.clone()
        }
    }
}

/// Where pods run: the docker CLI, the image, and relays standing in for the cluster's
/// Services (the API server, and names such as istiod.istio-system.svc).
#[derive(Debug)]
pub struct PodHost {
    docker: String,
    image: String,
    api: SocketAddr,
    api_ca: PathBuf,
    aliases: Vec<String>,
    dir: PathBuf,
}

impl PodHost {
    /// Reads WHARF_E2E_IMAGE and WHARF_E2E_DOCKER (written by e2e/image.sh) and opens the
    /// API server's relay; needs the runtime of the calling tokio test.
    pub async fn new(dir: &Path) -> Result<PodHost> {
        let var = |k: &str| std::env::var(k).with_context(|| format!("{k} is not set: run the suite with e2e/run.sh"));
        let image = var("WHARF_E2E_IMAGE")?;
        let docker = var("WHARF_E2E_DOCKER")?;
        let e2e_dir = var("E2E_DIR")?;
        let kubeconfig = std::fs::read_to_string(var("KUBECONFIG")?)?;
        let server = kubeconfig
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: https://"))
            .context("no server in KUBECONFIG")?
            .to_owned();
        let api = relay(SocketAddr::from((POD_GATEWAY, 0)), server).await?;
        std::fs::create_dir_all(dir)?;
        Ok(PodHost {
            docker,
            image,
            api,
            api_ca: PathBuf::from(e2e_dir).join("pki/ca.crt"),
            aliases: Vec::new(),
            dir: dir.to_owned(),
        })
    }

    /// Makes `name:port` (a cluster DNS name the chart points at) reach `target` from pods.
    pub async fn service(&mut self, name: &str, target: &str) -> Result<u16> {
        let at = relay(SocketAddr::from((POD_GATEWAY, 0)), target.to_owned()).await?;
        self.aliases.push(name.to_owned());
        Ok(at.port())
    }

    fn docker(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(&self.docker).args(args).output().context("cannot run docker")?;
        if !out.status.success() {
            bail!("docker {}: {}", args.first().unwrap_or(&""), String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// `docker image inspect -f FORMAT` of the image.
    pub fn image_inspect(&self, format: &str) -> Result<String> {
        self.docker(&["image", "inspect", "-f", format, &self.image])
    }

    /// Runs the image with `entrypoint` (no pod spec): for checking what the image holds.
    pub fn run_entrypoint(&self, entrypoint: &str, args: &[&str]) -> Result<String> {
        let mut all = vec!["run", "--rm", "--network", "none", "--entrypoint", entrypoint, &self.image];
        all.extend(args);
        self.docker(&all)
    }

    /// Writes the files of pod volume `v` (as the kubelet would) under `dir`.
    fn volume(&self, d: &Deployment, v: &Value, sa: &str, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)?;
        let ns = d.namespace.as_str();
        let name = v["name"].as_str().unwrap_or("");
        only(v, &["name", "projected", "configMap", "secret"], &format!("volume {name}"))?;
        let write = |file: &str, bytes: &[u8]| -> Result<()> {
            let p = dir.join(file);
            std::fs::write(&p, bytes)?;
            set_mode(&p, 0o644)
        };
        if let Some(p) = v.get("projected") {
            for src in p["sources"].as_array().into_iter().flatten() {
                let t = &src["serviceAccountToken"];
                only(src, &["serviceAccountToken"], &format!("volume {name} source"))?;
                let seconds = t["expirationSeconds"].as_u64().unwrap_or(3600);
                let mut args = vec!["create", "token", sa, "-n", ns];
                let duration = format!("{seconds}s");
                args.extend(["--duration", &duration]);
                if let Some(aud) = t["audience"].as_str() {
                    args.extend(["--audience", aud]);
                }
                let token = kubectl(&args)?;
                write(t["path"].as_str().context("token path")?, token.trim().as_bytes())?;
            }
        } else if let Some(cm) = v.get("configMap") {
            let n = cm["name"].as_str().context("configMap name")?;
            let obj: Value = serde_json::from_str(&kubectl(&["get", "configmap", n, "-n", ns, "-o", "json"])?)?;
            for (k, val) in obj["data"].as_object().into_iter().flatten() {
                write(k, val.as_str().unwrap_or("").as_bytes())?;
            }
        } else if let Some(s) = v.get("secret") {
            let n = s["secretName"].as_str().context("secretName")?;
            let obj: k8s_openapi::api::core::v1::Secret =
                serde_json::from_str(&kubectl(&["get", "secret", n, "-n", ns, "-o", "json"])?)?;
            for (k, val) in obj.data.unwrap_or_default() {
                write(&k, &val.0)?;
            }
        }
        Ok(())
    }

    /// Starts one replica named `name` at `ip` (in 198.19.1.0/24) exactly as the pod spec
    /// says, with the volumes' contents read from the API server now.
    pub fn run(&self, d: &Deployment, name: &str, ip: [u8; 4]) -> Result<Container> {
        let c = d.container();
        let sa = d.pod["serviceAccountName"].as_str().unwrap_or("default");
        let ip = IpAddr::from(ip);
        let gateway = IpAddr::from(POD_GATEWAY).to_string();
        let _ = self.docker(&["rm", "-f", name]);
        let dir = self.dir.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        let mut run: Vec<String> = vec![
            "run".into(),
            "-d".into(),
            "--name".into(),
            name.into(),
            "--hostname".into(),
            name.into(),
            "--network".into(),
            POD_NETWORK.into(),
            "--ip".into(),
            ip.to_string(),
            // Kubernetes' runtimes leave ports below 1024 privileged; docker does not.
            "--sysctl".into(),
            "net.ipv4.ip_unprivileged_port_start=1024".into(),
        ];
        // User and group: what the pod says, else what the image says.
        match (d.security("runAsUser").as_u64(), d.security("runAsGroup").as_u64()) {
            (Some(u), Some(g)) => run.extend(["--user".into(), format!("{u}:{g}")]),
            (Some(u), None) => run.extend(["--user".into(), u.to_string()]),
            _ => {}
        }
        if d.security("runAsNonRoot") == Value::Bool(true) {
            let user = match d.security("runAsUser").as_u64() {
                Some(u) => u.to_string(),
                None => self.image_inspect("{{.Config.User}}")?,
            };
            if user.split(':').next().is_none_or(|u| u.is_empty() || u == "0" || u == "root") {
                bail!("runAsNonRoot, and the container would run as {user:?}: the kubelet refuses to start it");
            }
        }
        if d.security("readOnlyRootFilesystem") == Value::Bool(true) {
            run.push("--read-only".into());
        }
        if d.security("allowPrivilegeEscalation") == Value::Bool(false) {
            run.extend(["--security-opt".into(), "no-new-privileges".into()]);
        }
        let caps = d.security("capabilities");
        only(&caps, &["drop", "add"], "capabilities")?;
        for cap in str_list(&caps["drop"]) {
            run.extend(["--cap-drop".into(), cap]);
        }
        for cap in str_list(&caps["add"]) {
            run.extend(["--cap-add".into(), cap]);
        }
        // RuntimeDefault is the runtime's default profile: docker applies its own.
        let seccomp = d.security("seccompProfile");
        if !seccomp.is_null() && seccomp["type"] != "RuntimeDefault" {
            bail!("seccompProfile {seccomp}: the pod runner knows RuntimeDefault only");
        }
        if let Some(mem) = c["resources"]["limits"]["memory"].as_str() {
            run.extend(["--memory".into(), docker_quantity(mem)?]);
        }
        run.extend(["--stop-timeout".into(), d.grace.as_secs().to_string()]);
        for alias in &self.aliases {
            run.extend(["--add-host".into(), format!("{alias}:{gateway}")]);
        }
        // What the kubelet sets for a pod: the API server's Service, then the container's env.
        run.extend([
            "-e".into(),
            format!("KUBERNETES_SERVICE_HOST={gateway}"),
            "-e".into(),
            format!("KUBERNETES_SERVICE_PORT={}", self.api.port()),
        ]);
        for e in c["env"].as_array().into_iter().flatten() {
            only(e, &["name", "value", "valueFrom"], "env")?;
            let key = e["name"].as_str().context("env name")?;
            let value = match (&e["value"], &e["valueFrom"]["fieldRef"]["fieldPath"]) {
                (Value::String(v), _) => v.clone(),
                (_, Value::String(f)) => match f.as_str() {
                    "metadata.name" => name.to_owned(),
                    "metadata.namespace" => d.namespace.clone(),
                    "status.podIP" => ip.to_string(),
                    "spec.serviceAccountName" => sa.to_owned(),
                    other => bail!("env {key}: the pod runner does not fill fieldRef {other}"),
                },
                _ => bail!("env {key}: the pod runner fills value and fieldRef only"),
            };
            run.extend(["-e".into(), format!("{key}={value}")]);
        }
        // The service-account token the kubelet mounts unless told not to.
        if d.pod["automountServiceAccountToken"] != Value::Bool(false) {
            let sa_dir = dir.join("kube-api-access");
            std::fs::create_dir_all(&sa_dir)?;
            let token = kubectl(&["create", "token", sa, "-n", &d.namespace, "--duration", "3607s"])?;
            for (file, bytes) in [
                ("token", token.trim().as_bytes().to_vec()),
                ("ca.crt", std::fs::read(&self.api_ca)?),
                ("namespace", d.namespace.as_bytes().to_vec()),
            ] {
                std::fs::write(sa_dir.join(file), bytes)?;
                set_mode(&sa_dir.join(file), 0o644)?;
            }
            run.extend(["-v".into(), format!("{}:/var/run/secrets/kubernetes.io/serviceaccount:ro", sa_dir.display())]);
        }
        let volumes = d.pod["volumes"].as_array().cloned().unwrap_or_default();
        for m in c["volumeMounts"].as_array().into_iter().flatten() {
            only(m, &["name", "mountPath", "readOnly"], "volumeMount")?;
            let vname = m["name"].as_str().context("volumeMount name")?;
            let v = volumes
                .iter()
                .find(|v| v["name"] == vname)
                .with_context(|| format!("volumeMount {vname} names no volume"))?;
            let vdir = dir.join(vname);
            self.volume(d, v, sa, &vdir)?;
            let ro = if m["readOnly"] == Value::Bool(true) { ":ro" } else { "" };
            run.extend(["-v".into(), format!("{}:{}{ro}", vdir.display(), m["mountPath"].as_str().unwrap_or(""))]);
        }
        set_mode(&dir, 0o755)?;
        let command = str_list(&c["command"]);
        if let Some(entry) = command.first() {
            run.extend(["--entrypoint".into(), entry.clone()]);
        }
        run.push(self.image.clone());
        run.extend(command.into_iter().skip(1));
        run.extend(d.args());
        let args: Vec<&str> = run.iter().map(String::as_str).collect();
        self.docker(&args)?;
        Ok(Container { name: name.to_owned(), ip, docker: self.docker.clone(), grace: d.grace })
    }
}

/// A running replica.
#[derive(Debug)]
pub struct Container {
    /// The pod's (container's) name.
    pub name: String,
    /// Its address on the pod network.
    pub ip: IpAddr,
    docker: String,
    grace: Duration,
}

impl Container {
    /// `ip:port`.
    pub fn addr(&self, port: u16) -> SocketAddr {
        SocketAddr::new(self.ip, port)
    }

    /// Its stdout and stderr so far.
    pub fn logs(&self) -> String {
        Command::new(&self.docker)
            .args(["logs", &self.name])
            .output()
            .map(|o| format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
            .unwrap_or_default()
    }

    /// `docker inspect -f FORMAT`.
    pub fn inspect(&self, format: &str) -> String {
        Command::new(&self.docker)
            .args(["inspect", "-f", format, &self.name])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    }

    /// Waits until every probe answers 200, as the kubelet polls them; fails with the
    /// container's log when it exits or `within` passes.
    pub async fn wait_probes(&self, probes: &[(String, u16)], within: Duration) -> Result<()> {
        for (path, port) in probes {
            let addr = self.addr(*port);
            let ok = eventually(within, || async move {
                http_get(addr, "probe", path).await.map(|s| s.status) == Ok(200)
                    || self.inspect("{{.State.Running}}") != "true"
            })
            .await;
            if !ok || self.inspect("{{.State.Running}}") != "true" {
                bail!(
                    "{}: probe {path} on port {port} did not pass (state {}); log:\n{}",
                    self.name,
                    self.inspect("{{.State.Status}} exit={{.State.ExitCode}}"),
                    self.logs()
                );
            }
        }
        Ok(())
    }

    /// What the kubelet does to end a pod: SIGTERM, then SIGKILL after the grace period.
    /// Returns the exit code and how long it took.
    pub async fn stop(&self) -> Result<(i64, Duration)> {
        let start = Instant::now();
        let out = tokio::process::Command::new(&self.docker)
            .args(["stop", "-t", &self.grace.as_secs().to_string(), &self.name])
            .output()
            .await
            .context("docker stop")?;
        if !out.status.success() {
            bail!("docker stop: {}", String::from_utf8_lossy(&out.stderr));
        }
        let took = start.elapsed();
        let code = self.inspect("{{.State.ExitCode}}").parse().context("exit code")?;
        Ok((code, took))
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new(&self.docker).args(["rm", "-f", &self.name]).output();
    }
}

fn kubectl(args: &[&str]) -> Result<String> {
    let out = Command::new("kubectl").args(args).output().context("cannot run kubectl")?;
    if !out.status.success() {
        bail!("kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// A Kubernetes memory quantity as docker's --memory takes it (binary suffixes).
fn docker_quantity(q: &str) -> Result<String> {
    for (suffix, unit) in [("Ki", "k"), ("Mi", "m"), ("Gi", "g")] {
        if let Some(n) = q.strip_suffix(suffix) {
            return Ok(format!("{}{unit}", n.parse::<u64>()?));
        }
    }
    Ok(q.parse::<u64>().with_context(|| format!("memory quantity {q}"))?.to_string())
}
