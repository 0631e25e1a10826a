//! Runs pods where no kubelet can run, for suites that apply Deployments and wait for
//! their pods (the Gateway API conformance suite): registers one Node, binds the pods no
//! scheduler binds, starts each pod's containers in a network namespace of its own with
//! an address on a bridge of this host, reports the pod Running and Ready once its ports
//! accept connections, and stops it and removes it when it is deleted, as the kubelet
//! does. Its containers' output is served to the API server as a kubelet serves it
//! (`kubectl logs`).
//!
//! What a container runs comes from its image: `--image NAME=PATH` maps an image name
//! (without registry and tag) to a program on this host, run with the container's
//! environment (fieldRef values filled in). Volume mounts of Secrets and ConfigMaps are
//! written to a directory per pod, and environment values naming a file under a mount path
//! are pointed at that directory. Images named with `--ready-only NAME` are reported ready
//! without running anything (a DNS server the suite deploys but our profiles never use).
//! Pods with a `nodeSelector` this node does not match are left alone.
//!
//! Needs root (network namespaces) and `ip`.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Node, Pod, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::Mutex;

const BRIDGE: &str = "wharfpods0";
/// Where the API server fetches container logs (`kubectl logs`), as from a kubelet.
const KUBELET_PORT: u16 = 10250;

struct Args {
    node: String,
    /// The bridge's address; pods get the next ones of its /18.
    gateway: Ipv4Addr,
    images: HashMap<String, PathBuf>,
    ready_only: Vec<String>,
    state: PathBuf,
}

fn args() -> Result<Args> {
    let mut a = Args {
        node: "wharf-e2e-node".into(),
        gateway: Ipv4Addr::new(198, 18, 64, 1),
        images: HashMap::new(),
        ready_only: Vec::new(),
        state: std::env::temp_dir().join("wharf-e2e-pods"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--node" => a.node = value()?,
            "--state-dir" => a.state = value()?.into(),
            "--image" => {
                let v = value()?;
                let (name, path) = v.split_once('=').context("--image NAME=PATH")?;
                a.images.insert(name.to_owned(), path.into());
            }
            "--ready-only" => a.ready_only.push(value()?),
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(a)
}

/// `registry.k8s.io/gateway-api/echo-basic:v1.5.1` -> `echo-basic`.
fn image_name(image: &str) -> &str {
    let last = image.rsplit('/').next().unwrap_or(image);
    last.split(['@', ':']).next().unwrap_or(last)
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip").args(args).output().context("cannot run ip")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// A pod this runner started.
struct Running {
    netns: String,
    children: Vec<Child>,
    dir: PathBuf,
}

impl Running {
    fn stop(mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = ip(&["netns", "del", &self.netns]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Runner {
    client: Client,
    args: Args,
    /// By pod uid.
    pods: Mutex<HashMap<String, Running>>,
    /// Pod uids starting or started, with their slot in the address range.
    slots: Mutex<BTreeMap<u32, String>>,
    /// Each pod's directory (its containers' logs) by namespace and name, for the logs
    /// endpoint.
    logs: Arc<std::sync::Mutex<HashMap<(String, String), PathBuf>>>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = args()?;
    let client = Client::try_default().await.context("cannot build a client from KUBECONFIG")?;
    leftovers(&args);
    bridge(args.gateway)?;
    node(&client, &args).await?;
    std::fs::create_dir_all(&args.state)?;
    let logs = Arc::new(std::sync::Mutex::new(HashMap::new()));
    tokio::spawn(kubelet_logs(SocketAddr::from((args.gateway, KUBELET_PORT)), Arc::clone(&logs)));
    let runner =
        Arc::new(Runner { client: client.clone(), args, pods: Mutex::default(), slots: Mutex::default(), logs });
    eprintln!("wharf-e2e-pods: node {} ready, pods on {BRIDGE}", runner.args.node);
    let pods: Api<Pod> = Api::all(client);
    let mut stream = watcher(pods, watcher::Config::default()).boxed();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let event = tokio::select! {
            e = stream.next() => match e { Some(e) => e, None => break },
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        };
        let pods = match event {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => vec![p],
            Ok(_) => continue,
            Err(e) => {
                eprintln!("wharf-e2e-pods: watch: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        for pod in pods {
            let r = Arc::clone(&runner);
            tokio::spawn(async move {
                let name = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
                if let Err(e) = r.handle(pod).await {
                    eprintln!("wharf-e2e-pods: {name}: {e:#}");
                }
            });
        }
    }
    // Stopping: the pods' processes and network namespaces go too.
    for (_, r) in runner.pods.lock().await.drain() {
        r.stop();
    }
    let _ = ip(&["link", "del", BRIDGE]);
    Ok(())
}

/// Removes what an earlier run that did not stop cleanly left: processes of the programs
/// this runner runs, pod network namespaces and their links.
fn leftovers(args: &Args) {
    for program in args.images.values() {
        // Anchored: this runner's own command line names the programs too.
        let _ = Command::new("pkill").arg("-f").arg(format!("^{}", program.display())).output();
    }
    let netns =
        Command::new("ip").args(["netns", "list"]).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    for name in netns.unwrap_or_default().lines().filter_map(|l| l.split_whitespace().next()) {
        if name.strip_prefix("wp").is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())) {
            let _ = ip(&["netns", "del", name]);
        }
    }
    let links =
        Command::new("ip").args(["-o", "link"]).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    for line in links.unwrap_or_default().lines() {
        let Some(name) = line.split(':').nth(1).map(|n| n.trim().split('@').next().unwrap_or("")) else { continue };
        if name.strip_prefix("wpv").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
            let _ = ip(&["link", "del", name]);
        }
    }
}

/// The bridge pods attach to, with `gateway` as this host's address on it.
fn bridge(gateway: Ipv4Addr) -> Result<()> {
    let _ = ip(&["link", "del", BRIDGE]);
    ip(&["link", "add", BRIDGE, "type", "bridge"])?;
    ip(&["addr", "add", &format!("{gateway}/18"), "dev", BRIDGE])?;
    ip(&["link", "set", BRIDGE, "up"])
}

/// Registers the Node, Ready, with the bridge address as its InternalIP.
async fn node(client: &Client, args: &Args) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let obj = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": args.node, "labels": {"kubernetes.io/hostname": args.node, "kubernetes.io/os": "linux"}},
    });
    nodes.patch(&args.node, &PatchParams::apply("wharf-e2e-pods").force(), &Patch::Apply(&obj)).await?;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "wharf-e2e-pods runs this node",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}],
        // No Hostname address: the API server would prefer it for reaching the logs
        // endpoint and look the node's name up in DNS.
        "addresses": [{"type": "InternalIP", "address": args.gateway.to_string()}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}},
    }});
    nodes.patch_status(&args.node, &PatchParams::default(), &Patch::Merge(&status)).await?;
    Ok(())
}

impl Runner {
    async fn handle(&self, pod: Pod) -> Result<()> {
        let uid = pod.uid().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let name = pod.name_any();
        if pod.metadata.deletion_timestamp.is_some() {
            if spec.node_name.as_deref() == Some(self.args.node.as_str()) {
                if let Some(r) = self.pods.lock().await.remove(&uid) {
                    r.stop();
                }
                self.slots.lock().await.retain(|_, u| *u != uid);
                let dp = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions { uid: Some(uid.clone()), resource_version: None }),
                    ..DeleteParams::default()
                };
                let _ = api.delete(&name, &dp).await;
            }
            return Ok(());
        }
        match spec.node_name.as_deref() {
            None | Some("") => {
                let ours = spec.node_selector.as_ref().is_none_or(|s| {
                    s.iter().all(|(k, v)| {
                        (k == "kubernetes.io/hostname" && *v == self.args.node)
                            || (k == "kubernetes.io/os" && v == "linux")
                    })
                });
                if ours && spec.scheduler_name.as_deref().unwrap_or("default-scheduler") == "default-scheduler" {
                    let binding = json!({
                        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": self.args.node},
                    });
                    api.create_subresource::<_, serde_json::Value>("binding", &name, &PostParams::default(), &binding)
                        .await?;
                }
                Ok(())
            }
            Some(n) if n == self.args.node => {
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
                let known = self.slots.lock().await.values().any(|u| *u == uid);
                if known || phase != "Pending" {
                    return Ok(());
                }
                let slot = {
                    let mut slots = self.slots.lock().await;
                    let slot = (1..16_000).find(|s| !slots.contains_key(s)).context("no pod address left")?;
                    slots.insert(slot, uid.clone());
                    slot
                };
                let started = self.start(&pod, slot).await;
                if started.is_err() {
                    self.slots.lock().await.remove(&slot);
                }
                started
            }
            Some(_) => Ok(()),
        }
    }

    async fn start(&self, pod: &Pod, slot: u32) -> Result<()> {
        let ns = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let uid = pod.uid().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let pod_ip = Ipv4Addr::from(u32::from(self.args.gateway) + slot);
        let dir = self.args.state.join(&uid);
        std::fs::create_dir_all(&dir)?;

        // Volumes: Secrets and ConfigMaps written to disk, waited for as the kubelet does.
        let mut mounts: HashMap<String, PathBuf> = HashMap::new();
        for v in spec.volumes.iter().flatten() {
            let target = dir.join(&v.name);
            if let Some(s) = &v.secret {
                let secret_name = s.secret_name.clone().unwrap_or_default();
                let secret = wait_for::<Secret>(&self.client, &ns, &secret_name).await?;
                let data: BTreeMap<String, Vec<u8>> =
                    secret.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
                write_volume(
                    &target,
                    &data,
                    s.items.as_deref().map(|i| i.iter().map(|i| (i.key.clone(), i.path.clone())).collect()),
                )?;
            } else if let Some(c) = &v.config_map {
                let cm = wait_for::<ConfigMap>(&self.client, &ns, &c.name).await?;
                let data: BTreeMap<String, Vec<u8>> =
                    cm.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())).collect();
                write_volume(
                    &target,
                    &data,
                    c.items.as_deref().map(|i| i.iter().map(|i| (i.key.clone(), i.path.clone())).collect()),
                )?;
            } else {
                std::fs::create_dir_all(&target)?;
            }
            mounts.insert(v.name.clone(), target);
        }

        let netns = format!("wp{slot}");
        let veth = format!("wpv{slot}");
        let _ = ip(&["netns", "del", &netns]);
        let _ = ip(&["link", "del", &veth]);
        ip(&["netns", "add", &netns])?;
        ip(&["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &netns])?;
        ip(&["link", "set", &veth, "master", BRIDGE, "up"])?;
        ip(&["-n", &netns, "addr", "add", &format!("{pod_ip}/18"), "dev", "eth0"])?;
        ip(&["-n", &netns, "link", "set", "eth0", "up"])?;
        ip(&["-n", &netns, "link", "set", "lo", "up"])?;
        ip(&["-n", &netns, "route", "add", "default", "via", &self.args.gateway.to_string()])?;
        // A pod deleted earlier may have had this address: the host must not keep sending
        // to its MAC address.
        ip(&["neigh", "flush", "to", &pod_ip.to_string(), "dev", BRIDGE])?;

        let mut running = Running { netns: netns.clone(), children: Vec::new(), dir: dir.clone() };
        for c in spec.containers.iter() {
            let image = image_name(c.image.as_deref().unwrap_or_default());
            if self.args.ready_only.iter().any(|r| r == image) {
                continue;
            }
            let Some(program) = self.args.images.get(image) else {
                running.stop();
                bail!("container {} has image {image:?}, which this runner has no program for (--image)", c.name);
            };
            let env = environment(c, pod, &pod_ip, &self.args.node, &mounts);
            let log = std::fs::File::create(dir.join(format!("{}.log", c.name)))?;
            let child = Command::new("ip")
                .args(["netns", "exec", &netns])
                .arg(program)
                .env_clear()
                .envs(env)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .with_context(|| format!("cannot start {}", program.display()))?;
            running.children.push(child);
        }
        if let Ok(mut logs) = self.logs.lock() {
            logs.insert((ns.clone(), name.clone()), dir.clone());
        }
        self.pods.lock().await.insert(uid.clone(), running);

        // Ready once something listens: the conformance manifests declare no ports and no
        // probes. Containers this runner only reports (ready-only) do not count.
        if !self.pods.lock().await.get(&uid).is_some_and(|r| r.children.is_empty()) {
            let mut up = false;
            for _ in 0..300 {
                if listening(&netns) {
                    up = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if !up {
                bail!("nothing listens in {netns} after 30s (see {})", dir.display());
            }
        }

        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let condition = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
        let statuses: Vec<_> = spec
            .containers
            .iter()
            .map(|c| {
                json!({"name": c.name, "image": c.image, "imageID": c.image, "ready": true, "started": true, "restartCount": 0,
                       "containerID": format!("wharf-e2e-pods://{uid}/{}", c.name), "state": {"running": {"startedAt": now}}})
            })
            .collect();
        let status = json!({"status": {
            "phase": "Running", "hostIP": self.args.gateway.to_string(), "hostIPs": [{"ip": self.args.gateway.to_string()}],
            "podIP": pod_ip.to_string(), "podIPs": [{"ip": pod_ip.to_string()}], "startTime": now,
            "conditions": [condition("PodScheduled"), condition("Initialized"), condition("ContainersReady"), condition("Ready")],
            "containerStatuses": statuses,
        }});
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        api.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&status)).await?;
        eprintln!("wharf-e2e-pods: {ns}/{name} running at {pod_ip}");
        Ok(())
    }
}

/// True when a TCP socket listens in network namespace `netns`.
fn listening(netns: &str) -> bool {
    let out = Command::new("ip").args(["netns", "exec", netns, "cat", "/proc/net/tcp", "/proc/net/tcp6"]).output();
    // The fourth column is the socket state; 0A is LISTEN.
    out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).lines().any(|l| l.split_whitespace().nth(3) == Some("0A")))
}

/// Gets a namespaced object, waiting up to two minutes for it to exist.
async fn wait_for<K>(client: &Client, ns: &str, name: &str) -> Result<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    for _ in 0..240 {
        if let Some(obj) = api.get_opt(name).await? {
            return Ok(obj);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("{ns}/{name} did not appear within two minutes")
}

/// Writes a volume's keys as files (all keys, or the `items` mapping key -> path).
fn write_volume(dir: &Path, data: &BTreeMap<String, Vec<u8>>, items: Option<Vec<(String, String)>>) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let files: Vec<(String, String)> = items.unwrap_or_else(|| data.keys().map(|k| (k.clone(), k.clone())).collect());
    for (key, path) in files {
        if let Some(bytes) = data.get(&key) {
            let target = dir.join(&path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(target, bytes)?;
        }
    }
    Ok(())
}

/// A container's environment: plain values and fieldRefs, with values naming a file
/// under a volume mount pointed at the pod's copy of that volume.
fn environment(
    c: &Container,
    pod: &Pod,
    pod_ip: &Ipv4Addr,
    node: &str,
    mounts: &HashMap<String, PathBuf>,
) -> Vec<(String, String)> {
    let mount_paths: Vec<(String, &PathBuf)> = c
        .volume_mounts
        .iter()
        .flatten()
        .filter_map(|m| mounts.get(&m.name).map(|dir| (m.mount_path.trim_end_matches('/').to_owned(), dir)))
        .collect();
    let mut out = vec![("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())];
    for e in c.env.iter().flatten() {
        let value = match (&e.value, e.value_from.as_ref().and_then(|v| v.field_ref.as_ref())) {
            (Some(v), _) => v.clone(),
            (None, Some(f)) => match f.field_path.as_str() {
                "metadata.name" => pod.name_any(),
                "metadata.namespace" => pod.namespace().unwrap_or_default(),
                "status.podIP" => pod_ip.to_string(),
                "spec.nodeName" => node.to_owned(),
                _ => String::new(),
            },
            (None, None) => String::new(),
        };
        let value = mount_paths
            .iter()
            .find_map(|(mp, dir)| value.strip_prefix(mp.as_str()).map(|rest| format!("{}{rest}", dir.display())))
            .unwrap_or(value);
        out.push((e.name.clone(), value));
    }
    out
}

/// The kubelet's container-logs endpoint, which the API server proxies `pods/log` to:
/// `GET /containerLogs/NAMESPACE/POD/CONTAINER` answers with what the container wrote so
/// far (its stdout and stderr). HTTPS with a self-signed certificate: the harness's API
/// server does not check kubelet certificates.
async fn kubelet_logs(addr: SocketAddr, logs: Arc<std::sync::Mutex<HashMap<(String, String), PathBuf>>>) {
    let tls = match wharf_dataplane::tls::fallback_certificate().and_then(|ck| {
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .map(|b| b.with_no_client_auth().with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(ck))))
            .map_err(|e| e.to_string())
    }) {
        Ok(cfg) => tokio_rustls::TlsAcceptor::from(Arc::new(cfg)),
        Err(e) => return eprintln!("wharf-e2e-pods: no logs endpoint: {e}"),
    };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => return eprintln!("wharf-e2e-pods: no logs endpoint on {addr}: {e}"),
    };
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let (tls, logs) = (tls.clone(), Arc::clone(&logs));
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let Ok(mut s) = tls.accept(stream).await else { return };
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let line = String::from_utf8_lossy(&head).lines().next().unwrap_or("").to_owned();
            let path = line.split_whitespace().nth(1).unwrap_or("");
            let body = container_log(path, &logs);
            let (status, body) = match body {
                Some(b) => ("200 OK", b),
                None => ("404 Not Found", b"no such container\n".to_vec()),
            };
            eprintln!("wharf-e2e-pods: logs: GET {path}: {status}");
            let head = format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(head.as_bytes()).await;
            let _ = s.write_all(&body).await;
            let _ = s.shutdown().await;
        });
    }
}

/// The log of the container a `/containerLogs/NS/POD/CONTAINER[?...]` path names.
fn container_log(path: &str, logs: &std::sync::Mutex<HashMap<(String, String), PathBuf>>) -> Option<Vec<u8>> {
    let path = path.split('?').next()?;
    let mut parts = path.strip_prefix("/containerLogs/")?.split('/');
    let (ns, pod, container) = (parts.next()?, parts.next()?, parts.next()?);
    if container.is_empty() || container.contains("..") {
        return None;
    }
    let dir = logs.lock().ok()?.get(&(ns.to_owned(), pod.to_owned()))?.clone();
    std::fs::read(dir.join(format!("{container}.log"))).ok()
}

#[cfg(test)]
mod tests {
    use super::image_name;

    #[test]
    fn image_names_drop_registry_and_tag() {
        assert_eq!(image_name("registry.k8s.io/gateway-api/echo-basic:v1.5.1"), "echo-basic");
        assert_eq!(image_name("gcr.io/x/coredns@sha256:abc"), "coredns");
        assert_eq!(image_name("busybox"), "busybox");
    }

    #[test]
    fn container_logs_are_found_by_namespace_pod_and_container() {
        use super::container_log;
        let dir = std::env::temp_dir().join(format!("wharf-e2e-pods-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("echo.log"), "Echoing back request made to /mirror\n").unwrap();
        let logs = std::sync::Mutex::new([(("ns".to_owned(), "pod-1".to_owned()), dir.clone())].into());
        let got = container_log("/containerLogs/ns/pod-1/echo?sinceTime=2026-01-01T00%3A00%3A00Z", &logs);
        assert_eq!(got.as_deref(), Some(&b"Echoing back request made to /mirror\n"[..]));
        for missing in [
            "/containerLogs/ns/pod-2/echo",
            "/containerLogs/other/pod-1/echo",
            "/containerLogs/ns/pod-1/x",
            "/containerLogs/ns/pod-1/",
            "/pods",
        ] {
            assert_eq!(container_log(missing, &logs), None, "{missing}");
        }
        assert_eq!(container_log("/containerLogs/ns/pod-1/..", &logs), None);
        let _ = std::fs::remove_dir_all(dir);
    }
}
