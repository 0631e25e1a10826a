//! Reliability scenarios (docs/reliability.md): the real `wharf` binary serving while its
//! config changes, its certificate rotates, or its replicas restart, with verifying
//! HTTPS clients counting every request that did not get the right answer.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::{TcpListener, TcpStream};
use wharf_dataplane::testing::TestCa;

/// The host every scenario serves.
pub const HOST: &str = "rel.test";

/// The echo backend's name.
pub const BACKEND: &str = "reliability-backend";

/// What the clients saw.
#[derive(Default)]
pub struct Tally {
    ok: AtomicU64,
    failed: Mutex<BTreeMap<String, u64>>,
    certs: Mutex<HashSet<Vec<u8>>>,
}

impl Tally {
    fn fail(&self, why: impl Into<String>) {
        *self.failed.lock().unwrap_or_else(|p| p.into_inner()).entry(why.into()).or_default() += 1;
    }

    /// Requests answered right.
    pub fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    /// Requests that were not, by reason.
    pub fn failed(&self) -> BTreeMap<String, u64> {
        self.failed.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Distinct server certificates new connections received.
    pub fn certs(&self) -> usize {
        self.certs.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// `requests=N failed=M (reason: n, ...)`.
    pub fn summary(&self) -> String {
        let failed = self.failed();
        let total: u64 = failed.values().sum();
        let reasons: Vec<String> = failed.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let reasons = if reasons.is_empty() { String::new() } else { format!(" ({})", reasons.join(", ")) };
        format!("requests={} failed={total}{reasons}", self.ok() + total)
    }
}

/// Load: `keepalive` connections sending requests at `rate` per second in total, and
/// `fresh` new connections per second with one request each, every one verified against
/// the CA, to `addr` until `stop`.
pub struct Load {
    /// Where the clients connect.
    pub addr: SocketAddr,
    /// Trusted CA.
    pub tls: Arc<rustls::ClientConfig>,
    /// Keep-alive connections.
    pub keepalive: usize,
    /// Their requests per second, in total.
    pub rate: f64,
    /// New connections per second.
    pub fresh: f64,
    /// The body must name this backend.
    pub backend: String,
}

impl Load {
    /// Runs until `stop` is set; returns the tally.
    pub async fn run(self, stop: Arc<AtomicBool>) -> Arc<Tally> {
        let tally = Arc::new(Tally::default());
        let me = Arc::new(self);
        let mut tasks = Vec::new();
        if me.keepalive > 0 {
            let every = Duration::from_secs_f64(me.keepalive as f64 / me.rate);
            for _ in 0..me.keepalive {
                let (me, tally, stop) = (Arc::clone(&me), Arc::clone(&tally), Arc::clone(&stop));
                tasks.push(tokio::spawn(async move { me.keepalive_client(every, &tally, &stop).await }));
            }
        }
        if me.fresh > 0.0 {
            let (me, tally, stop) = (Arc::clone(&me), Arc::clone(&tally), Arc::clone(&stop));
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / me.fresh));
                let mut running = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    let (me, tally) = (Arc::clone(&me), Arc::clone(&tally));
                    running.push(tokio::spawn(async move {
                        match me.connect(true, &tally).await {
                            Ok(mut s) => {
                                me.request(&mut s, &tally).await;
                            }
                            Err(why) => tally.fail(why),
                        }
                    }));
                }
                for r in running {
                    let _ = r.await;
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        tally
    }

    async fn keepalive_client(&self, every: Duration, tally: &Tally, stop: &AtomicBool) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Start spread over one interval.
        tokio::time::sleep(every.mul_f64(fastrand::f64())).await;
        let mut conn = None;
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            // A connection the server closed between requests is replaced before sending,
            // as every HTTP client does; only a request that was sent can fail.
            let usable = match conn.as_mut() {
                Some(s) => hyper::client::conn::http1::SendRequest::ready(s).await.is_ok(),
                None => false,
            };
            if !usable {
                match self.connect(false, tally).await {
                    Ok(s) => conn = Some(s),
                    Err(why) => {
                        conn = None;
                        tally.fail(why);
                        continue;
                    }
                }
            }
            if let Some(s) = conn.as_mut() {
                if !self.request(s, tally).await {
                    conn = None;
                }
            }
        }
    }

    async fn connect(
        &self,
        fresh: bool,
        tally: &Tally,
    ) -> Result<hyper::client::conn::http1::SendRequest<Empty<Bytes>>, String> {
        let tcp = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(self.addr))
            .await
            .map_err(|_| "connect_timeout".to_owned())?
            .map_err(|e| format!("connect_{:?}", e.kind()).to_lowercase())?;
        let _ = tcp.set_nodelay(true);
        let name = ServerName::try_from(HOST.to_owned()).map_err(|e| e.to_string())?;
        let tls = tokio::time::timeout(
            Duration::from_secs(5),
            tokio_rustls::TlsConnector::from(Arc::clone(&self.tls)).connect(name, tcp),
        )
        .await
        .map_err(|_| "tls_timeout".to_owned())?
        .map_err(|e| {
            if e.to_string().contains("certificate") { "tls_bad_certificate" } else { "tls_failed" }.to_owned()
        })?;
        if fresh {
            if let Some(c) = tls.get_ref().1.peer_certificates().and_then(|c| c.first()) {
                tally.certs.lock().unwrap_or_else(|p| p.into_inner()).insert(c.to_vec());
            }
        }
        let (sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|_| "http_handshake".to_owned())?;
        tokio::spawn(conn);
        Ok(sender)
    }

    /// One GET; true when the connection can be used again.
    async fn request(&self, s: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>, tally: &Tally) -> bool {
        let Ok(req) = http::Request::get("/").header("host", HOST).body(Empty::new()) else { return false };
        let answer = async {
            let resp = s.send_request(req).await.map_err(|e| {
                if e.is_incomplete_message() { "closed_before_response" } else { "request_error" }.to_owned()
            })?;
            let status = resp.status();
            let body = resp.into_body().collect().await.map_err(|_| "body_error".to_owned())?.to_bytes();
            if status != 200 {
                return Err(format!("status_{}", status.as_u16()));
            }
            if !String::from_utf8_lossy(&body).contains(&self.backend) {
                return Err("wrong_backend".to_owned());
            }
            Ok(())
        };
        match tokio::time::timeout(Duration::from_secs(10), answer).await {
            Ok(Ok(())) => {
                tally.ok.fetch_add(1, Ordering::Relaxed);
                true
            }
            Ok(Err(why)) => {
                tally.fail(why);
                false
            }
            Err(_) => {
                tally.fail("timeout");
                false
            }
        }
    }
}

/// A `wharf run` process.
pub struct Wharf {
    child: Child,
    /// Its log lines (warnings and errors).
    pub log: Arc<Mutex<Vec<String>>>,
    /// HTTP listener.
    pub http: SocketAddr,
    /// HTTPS listener.
    pub https: SocketAddr,
    /// Admin listener.
    pub admin: SocketAddr,
}

/// A free loopback port.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Wharf {
    /// Starts `wharf run -f dir` on free loopback ports with `extra` flags.
    pub fn start(bin: &Path, dir: &Path, extra: &[&str]) -> Result<Wharf> {
        let (http, https, admin) = (free_port()?, free_port()?, free_port()?);
        Self::start_on(bin, dir, http, https, admin, extra)
    }

    /// Same, on the given ports (a replica restarting where it ran before).
    pub fn start_on(bin: &Path, dir: &Path, http: u16, https: u16, admin: u16, extra: &[&str]) -> Result<Wharf> {
        let mut cmd = Command::new(bin);
        cmd.args(["run", "-f"]).arg(dir).args(["--watch-interval", "50ms"]).args(extra);
        Self::spawn(cmd, bin, http, https, admin)
    }

    /// `wharf controller` against the API server `kubeconfig` names, on free ports.
    pub fn controller(bin: &Path, kubeconfig: &str, extra: &[&str]) -> Result<Wharf> {
        let mut cmd = Command::new(bin);
        cmd.args([
            "controller",
            "--kubeconfig",
            kubeconfig,
            "--election-namespace",
            "wharf-system",
            "--pod-name",
            "reliability-0",
        ])
        .args(extra);
        Self::spawn(cmd, bin, free_port()?, free_port()?, free_port()?)
    }

    fn spawn(mut cmd: Command, bin: &Path, http: u16, https: u16, admin: u16) -> Result<Wharf> {
        let mut child = cmd
            .args([
                "--listen-address",
                "127.0.0.1",
                "--http-port",
                &http.to_string(),
                "--https-port",
                &https.to_string(),
            ])
            .args(["--passthrough-port", "0", "--admin-port", &admin.to_string(), "--access-log=false"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let log = Arc::new(Mutex::new(Vec::new()));
        if let Some(stderr) = child.stderr.take() {
            let sink = Arc::clone(&log);
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                    sink.lock().unwrap_or_else(|p| p.into_inner()).push(line);
                }
            });
        }
        Ok(Wharf {
            child,
            log,
            http: SocketAddr::from(([127, 0, 0, 1], http)),
            https: SocketAddr::from(([127, 0, 0, 1], https)),
            admin: SocketAddr::from(([127, 0, 0, 1], admin)),
        })
    }

    /// Waits until /healthz/ready answers 200.
    pub async fn ready(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if admin_get(self.admin, "/healthz/ready").await.is_ok_and(|(s, _)| s == 200) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!("wharf on {} not ready within 20 s", self.https)
    }

    /// The live config version.
    pub async fn version(&self) -> Result<u64> {
        let (_, m) = admin_get(self.admin, "/metrics").await?;
        m.lines()
            .find_map(|l| l.strip_prefix("wharf_config_version "))
            .and_then(|v| v.trim().parse().ok())
            .context("no wharf_config_version")
    }

    /// Log lines containing `needle`.
    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|l| l.contains(needle)).cloned().collect()
    }

    /// SIGTERM.
    pub fn terminate(&self) -> Result<()> {
        let ok = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status()?.success();
        anyhow::ensure!(ok, "kill -TERM failed");
        Ok(())
    }

    /// True while the process runs.
    pub fn child_alive(&self) -> bool {
        Command::new("kill").args(["-0", &self.child.id().to_string()]).status().is_ok_and(|s| s.success())
    }

    /// Waits for the process to exit; returns its exit code.
    pub async fn wait(mut self) -> Result<Option<i32>> {
        tokio::task::spawn_blocking(move || self.child.wait().map(|s| s.code())).await?.map_err(Into::into)
    }
}

impl Drop for Wharf {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET on the admin listener: status and body.
pub async fn admin_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    http_get(addr, "admin", path).await
}

/// Plain HTTP/1.1 GET with a Host header: status and body.
async fn http_get(addr: SocketAddr, host: &str, path: &str) -> Result<(u16, String)> {
    let tcp = TcpStream::connect(addr).await?;
    let (mut s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    let resp = s.send_request(http::Request::get(path).header("host", host).body(Empty::<Bytes>::new())?).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The manifests `wharf run` reads: the IngressClass, the backend Service and its
/// EndpointSlice, the TLS Secret and the Ingress of [`HOST`].
pub struct Site {
    /// The directory `wharf run -f` reads.
    pub dir: PathBuf,
    /// The CA of every certificate served.
    pub ca: TestCa,
    /// The backend's name (in its answers).
    pub backend: String,
}

impl Site {
    /// Writes the manifests and starts the backend on loopback.
    pub async fn new(dir: &Path) -> Result<Site> {
        let l = TcpListener::bind("127.0.0.1:0").await?;
        let backend_addr = l.local_addr()?;
        tokio::spawn(wharf_dataplane::echo::serve(l, BACKEND.to_owned()));
        Self::with_backend(dir, backend_addr)
    }

    /// Writes the manifests for an echo backend named [`BACKEND`] at `backend_addr`.
    pub fn with_backend(dir: &Path, backend_addr: SocketAddr) -> Result<Site> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)?;
        let backend = BACKEND.to_owned();
        let base = format!(
            "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {{name: wharf}}\nspec: {{controller: wharf.dev/ingress-controller}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: app, namespace: rel}}\nspec: {{ports: [{{name: http, port: 80}}]}}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: app-1, namespace: rel, labels: {{kubernetes.io/service-name: app}}}}\naddressType: IPv4\nports: [{{name: http, port: {}}}]\nendpoints: [{{addresses: [\"{}\"]}}]\n",
            backend_addr.port(),
            backend_addr.ip()
        );
        std::fs::write(dir.join("00-base.yaml"), base)?;
        let site = Site { dir: dir.to_owned(), ca: TestCa::new("reliability CA"), backend };
        site.write_secret()?;
        site.write_ingress(0)?;
        Ok(site)
    }

    /// Writes a Secret with a new certificate for [`HOST`] (atomically: rename).
    pub fn write_secret(&self) -> Result<()> {
        let leaf = self.ca.leaf(&[HOST]);
        let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
        let y = format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: rel-tls, namespace: rel}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
            indent(&leaf.chain_pem),
            indent(&leaf.key_pem)
        );
        write_atomic(&self.dir.join("10-secret.yaml"), &y)
    }

    /// Writes the Ingress; `n` varies it (an extra path `/v<n>`, an annotation) without
    /// changing where `/` goes.
    pub fn write_ingress(&self, n: u64) -> Result<()> {
        let y = format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: rel, namespace: rel, annotations: {{wharf.dev/proxy-body-size: \"{}k\"}}}}\nspec:\n  ingressClassName: wharf\n  tls: [{{hosts: [{HOST}], secretName: rel-tls}}]\n  rules: [{{host: {HOST}, http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: app, port: {{number: 80}}}}}}}}, {{path: /v{n}, pathType: Exact, backend: {{service: {{name: app, port: {{number: 80}}}}}}}}]}}}}]\n",
            64 + n
        );
        write_atomic(&self.dir.join("20-ingress.yaml"), &y)
    }

    /// Writes (or, with `None`, removes) an Ingress of another host.
    pub fn write_other(&self, n: Option<u64>) -> Result<()> {
        let path = self.dir.join("30-other.yaml");
        match n {
            None => {
                let _ = std::fs::remove_file(path);
                Ok(())
            }
            Some(n) => write_atomic(
                &path,
                &format!(
                    "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: other, namespace: rel}}\nspec:\n  ingressClassName: wharf\n  rules: [{{host: other{n}.test, http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: app, port: {{number: 80}}}}}}}}]}}}}]\n"
                ),
            ),
        }
    }

    /// A client config trusting only the CA.
    pub fn client_tls(&self) -> Arc<rustls::ClientConfig> {
        let mut cfg = (*self.ca.client_config(&[b"http/1.1"])).clone();
        cfg.resumption = rustls::client::Resumption::disabled();
        Arc::new(cfg)
    }
}

fn write_atomic(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// A stand-in for a Kubernetes Service in front of replicas: accepts on one address and
/// relays each connection to one endpoint, round robin. Like kube-proxy it does not retry:
/// a connection the chosen endpoint refuses is closed. Endpoints are added and removed by
/// the scenario, as the EndpointSlice controller and kube-proxy would, with their delay.
pub struct Service {
    /// The Service's address.
    pub addr: SocketAddr,
    endpoints: Arc<Mutex<Vec<SocketAddr>>>,
}

impl Service {
    /// Starts relaying to `endpoints`.
    pub async fn start(endpoints: Vec<SocketAddr>) -> Result<Service> {
        let l = TcpListener::bind("127.0.0.1:0").await?;
        let addr = l.local_addr()?;
        let eps = Arc::new(Mutex::new(endpoints));
        let shared = Arc::clone(&eps);
        tokio::spawn(async move {
            let next = AtomicU64::new(0);
            loop {
                let Ok((mut client, _)) = l.accept().await else { continue };
                let target = {
                    let e = shared.lock().unwrap_or_else(|p| p.into_inner());
                    (!e.is_empty()).then(|| e[next.fetch_add(1, Ordering::Relaxed) as usize % e.len()])
                };
                tokio::spawn(async move {
                    let Some(target) = target else { return };
                    match TcpStream::connect(target).await {
                        Ok(mut up) => {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
                        }
                        Err(_) => {
                            // As a refused connection looks to the client behind kube-proxy.
                            let _ = client.set_zero_linger();
                            drop(client);
                        }
                    }
                });
            }
        });
        Ok(Service { addr, endpoints: eps })
    }

    /// Replaces the endpoint list.
    pub fn set(&self, endpoints: Vec<SocketAddr>) {
        *self.endpoints.lock().unwrap_or_else(|p| p.into_inner()) = endpoints;
    }
}

/// The scenarios.
pub enum Scenario {
    /// R1.
    Changes {
        /// Config changes.
        count: u64,
    },
    /// R2.
    Rotation {
        /// One new certificate per second for this long.
        seconds: u64,
    },
    /// R5.
    Malformed,
    /// R4.
    ApiServer {
        /// How long the API server stays down.
        down: Duration,
    },
    /// R3.
    Restart {
        /// Endpoint removal delay after SIGTERM.
        lag: Duration,
        /// Extra flags for the replicas.
        flags: Vec<String>,
    },
}

/// Runs one scenario and prints one result line.
pub async fn run(scenario: Scenario, bin: &Path, work: &Path, keepalive: usize, rate: f64, fresh: f64) -> Result<()> {
    if let Scenario::ApiServer { down } = scenario {
        return api_server(bin, work, keepalive, rate, fresh, down).await;
    }
    let site = Site::new(work).await?;
    let load = |addr| Load { addr, tls: site.client_tls(), keepalive, rate, fresh, backend: site.backend.clone() };
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    match scenario {
        Scenario::Changes { count } => {
            let w = Wharf::start(bin, &site.dir, &[])?;
            w.ready().await?;
            let running = tokio::spawn(load(w.https).run(Arc::clone(&stop)));
            let mut took = Vec::new();
            let mut not_applied = 0;
            for i in 0..count {
                let before = w.version().await?;
                let t = Instant::now();
                match i % 3 {
                    0 => site.write_ingress(i + 1)?,
                    1 => site.write_secret()?,
                    _ => site.write_other((i % 2 == 0).then_some(i))?,
                }
                loop {
                    if w.version().await? > before {
                        took.push(t.elapsed());
                        break;
                    }
                    if t.elapsed() > Duration::from_secs(5) {
                        not_applied += 1;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
            stop.store(true, Ordering::Relaxed);
            let tally = running.await?;
            took.sort_unstable();
            let pct = |p: f64| {
                took.get(((took.len() as f64 * p) as usize).min(took.len().saturating_sub(1)))
                    .map_or(0.0, |d| d.as_secs_f64() * 1e3)
            };
            println!(
                "R1 changes={count} applied={} not_applied={not_applied} apply_ms_p50={:.0} apply_ms_p99={:.0} apply_ms_max={:.0} seconds={:.0} {}",
                took.len(),
                pct(0.5),
                pct(0.99),
                took.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
                started.elapsed().as_secs_f64(),
                tally.summary()
            );
        }
        Scenario::Rotation { seconds } => {
            let w = Wharf::start(bin, &site.dir, &[])?;
            w.ready().await?;
            let running = tokio::spawn(load(w.https).run(Arc::clone(&stop)));
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            for _ in 0..seconds {
                tick.tick().await;
                site.write_secret()?;
            }
            tick.tick().await;
            stop.store(true, Ordering::Relaxed);
            let tally = running.await?;
            println!(
                "R2 rotations={seconds} certificates_seen_by_new_connections={} seconds={:.0} {}",
                tally.certs(),
                started.elapsed().as_secs_f64(),
                tally.summary()
            );
        }
        Scenario::Malformed => {
            let w = Wharf::start(bin, &site.dir, &[])?;
            w.ready().await?;
            let running = tokio::spawn(load(w.https).run(Arc::clone(&stop)));
            let mut rows = Vec::new();
            for (i, (what, marker, yaml)) in malformed(&site).into_iter().enumerate() {
                let file = site.dir.join(format!("40-bad-{i:02}.yaml"));
                let before = w.version().await?;
                std::fs::write(&file, &yaml)?;
                let t = Instant::now();
                let seen = loop {
                    let lines = if marker.is_empty() { Vec::new() } else { w.lines_with(&marker) };
                    if !lines.is_empty() {
                        break lines;
                    }
                    if marker.is_empty() && w.version().await? > before {
                        break vec![format!("applied (config version {})", w.version().await?)];
                    }
                    if t.elapsed() > Duration::from_secs(10) {
                        break Vec::new();
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                };
                // A file that cannot be read holds back every change after it: take it out.
                if what.starts_with("file:") {
                    std::fs::remove_file(&file)?;
                }
                rows.push((what, seen));
            }
            // Every diagnostic is logged once, not on each reload.
            site.write_ingress(7)?;
            tokio::time::sleep(Duration::from_millis(500)).await;
            stop.store(true, Ordering::Relaxed);
            let tally = running.await?;
            let mut diagnosed = 0;
            for (what, seen) in &rows {
                if !seen.is_empty() {
                    diagnosed += 1;
                }
                let first = seen.first().map_or("NO DIAGNOSTIC", String::as_str);
                eprintln!("R5 {what}: {} line(s): {}", seen.len(), first.chars().take(400).collect::<String>());
            }
            let exited = w.child_alive();
            println!(
                "R5 inputs={} diagnosed={diagnosed} repeated={} still_running={exited} seconds={:.0} {}",
                rows.len(),
                rows.iter().filter(|(_, s)| s.len() > 1).count(),
                started.elapsed().as_secs_f64(),
                tally.summary()
            );
        }
        Scenario::ApiServer { .. } => {}
        Scenario::Restart { lag, flags } => {
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            let ports = [(free_port()?, free_port()?, free_port()?), (free_port()?, free_port()?, free_port()?)];
            let mut replicas = Vec::new();
            for (http, https, admin) in ports {
                let w = Wharf::start_on(bin, &site.dir, http, https, admin, &flags)?;
                w.ready().await?;
                replicas.push(Some(w));
            }
            let addrs: Vec<SocketAddr> = replicas.iter().flatten().map(|w| w.https).collect();
            let svc = Service::start(addrs.clone()).await?;
            let running = tokio::spawn(load(svc.addr).run(Arc::clone(&stop)));
            tokio::time::sleep(Duration::from_secs(2)).await;
            let mut exits = Vec::new();
            for (i, (http, https, admin)) in ports.into_iter().enumerate() {
                let Some(old) = replicas[i].take() else { continue };
                old.terminate()?;
                let t = Instant::now();
                tokio::time::sleep(lag).await;
                svc.set(addrs.iter().copied().filter(|a| *a != old.https).collect());
                let code = old.wait().await?;
                exits.push(format!("{:?}@{:.1}s", code, t.elapsed().as_secs_f64()));
                let new = Wharf::start_on(bin, &site.dir, http, https, admin, &flags)?;
                new.ready().await?;
                svc.set(addrs.clone());
                replicas[i] = Some(new);
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            stop.store(true, Ordering::Relaxed);
            let tally = running.await?;
            println!(
                "R3 restarts=2 endpoint_lag_ms={} exits=[{}] seconds={:.0} {}",
                lag.as_millis(),
                exits.join(" "),
                started.elapsed().as_secs_f64(),
                tally.summary()
            );
        }
    }
    Ok(())
}

/// Malformed inputs for R5: (what, a string its diagnostic names — empty: it is valid and
/// must simply apply, YAML).
fn malformed(site: &Site) -> Vec<(String, String, Vec<u8>)> {
    let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
    let secret = |name: &str, crt: &str, key: &str, ty: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: rel}}\ntype: {ty}\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
            indent(crt),
            indent(key)
        )
    };
    let ingress = |name: &str, host: &str, secret: Option<&str>, extra: &str| {
        let tls = secret.map_or(String::new(), |s| format!("  tls: [{{hosts: [\"{host}\"], secretName: {s}}}]\n"));
        format!(
            "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, namespace: rel{extra}}}\nspec:\n  ingressClassName: wharf\n{tls}  rules: [{{host: \"{host}\", http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: app, port: {{number: 80}}}}}}}}]}}}}]\n"
        )
    };
    let leaf = site.ca.leaf(&["wrongkey.test"]);
    let other = site.ca.leaf(&["other.test"]);
    let junk = "A".repeat(1 << 20);
    let many: String = (0..10_000)
        .map(|i| format!("      - {{path: /p{i}, pathType: Prefix, backend: {{service: {{name: app, port: {{number: 80}}}}}}}}\n"))
        .collect();
    let mut out: Vec<(String, String, Vec<u8>)> = vec![
        (
            "Secret with a certificate that is not PEM".into(),
            "rel/bad-pem".into(),
            (secret("bad-pem", "not a certificate", "not a key", "kubernetes.io/tls") + &ingress("bad-pem", "badpem.test", Some("bad-pem"), "")).into_bytes(),
        ),
        (
            "Secret whose key belongs to another certificate".into(),
            "rel/wrong-key".into(),
            (secret("wrong-key", &leaf.chain_pem, &other.key_pem, "kubernetes.io/tls") + &ingress("wrong-key", "wrongkey.test", Some("wrong-key"), "")).into_bytes(),
        ),
        (
            "Secret of 1 MiB of junk".into(),
            "rel/huge-secret".into(),
            (secret("huge-secret", &junk, &junk, "kubernetes.io/tls") + &ingress("huge-secret", "huge.test", Some("huge-secret"), "")).into_bytes(),
        ),
        (
            "Secret of type Opaque without tls.key".into(),
            "rel/opaque".into(),
            ("apiVersion: v1\nkind: Secret\nmetadata: {name: opaque, namespace: rel}\ntype: Opaque\nstringData: {password: hunter2}\n".to_owned() + &ingress("opaque", "opaque.test", Some("opaque"), "")).into_bytes(),
        ),
        (
            "Ingress naming a Secret that does not exist".into(),
            "rel/missing-secret".into(),
            ingress("missing-secret", "missing.test", Some("no-such-secret"), "").into_bytes(),
        ),
        ("Ingress with an invalid host".into(), "rel/bad-host".into(), ingress("bad-host", "bad..host", None, "").into_bytes()),
        (
            "Ingress with an invalid proxy-body-size annotation".into(),
            "rel/bad-body-size".into(),
            ingress("bad-body-size", "bodysize.test", None, ", annotations: {wharf.dev/proxy-body-size: lots}").into_bytes(),
        ),
        (
            "Ingress with a backend port its Service does not have".into(),
            "rel/bad-port".into(),
            ingress("bad-port", "badport.test", None, "").replace("number: 80", "number: 81").into_bytes(),
        ),
        (
            "newer Ingress claiming the served host".into(),
            "rel/thief".into(),
            ingress("thief", HOST, None, ", creationTimestamp: \"2030-01-01T00:00:00Z\"").into_bytes(),
        ),
        (
            "Ingress with 10,000 paths on one host".into(),
            String::new(),
            format!("apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: many, namespace: rel}}\nspec:\n  ingressClassName: wharf\n  rules:\n  - host: many.test\n    http:\n      paths:\n{many}").into_bytes(),
        ),
    ];
    // "caf" then a byte that is never UTF-8.
    let mut bad_utf8 = ingress("bad-utf8", "utf8.test", None, ", annotations: {note: \"caf~\"}").into_bytes();
    if let Some(p) = bad_utf8.iter().position(|&b| b == b'~') {
        bad_utf8[p] = 0xff;
    }
    out.push(("file: invalid UTF-8 in an annotation".into(), "40-bad-10.yaml".into(), bad_utf8));
    out
}

/// Kills a child process when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn command(argv: &[&str]) -> Result<String> {
    let (first, rest) = argv.split_first().context("empty command")?;
    let out = Command::new(first).args(rest).output().with_context(|| format!("cannot run {first}"))?;
    anyhow::ensure!(out.status.success(), "{argv:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// R4: `wharf controller` under load while the harness's API server is stopped for
/// `down` and started again; then a change made after it returns, timed until live; then
/// SIGTERM while the API server is gone, timed until exit. Needs the e2e harness's
/// environment (bench/reliability.sh starts one).
async fn api_server(bin: &Path, work: &Path, keepalive: usize, rate: f64, fresh: f64, down: Duration) -> Result<()> {
    let var = |k: &str| {
        std::env::var(k)
            .with_context(|| format!("{k} is not set: run this under e2e/harness (bench/reliability.sh starts one)"))
    };
    let (kubeconfig, harness) = (var("WHARF_CONTROLLER_KUBECONFIG")?, var("WHARF_E2E_HARNESS")?);
    let (backend_ip, exec) = (var("WHARF_E2E_BACKEND_IP")?, var("WHARF_E2E_BACKEND_EXEC")?);
    let apiserver = |action: &str| command(&[&format!("{harness}/apiserver.sh"), action]);
    // The backend where the API server accepts an endpoint address: the harness's netns.
    let backend_addr: SocketAddr = format!("{backend_ip}:19500").parse()?;
    let mut argv: Vec<String> = exec.split_whitespace().map(str::to_owned).collect();
    argv.extend([
        bin.display().to_string(),
        "echo".into(),
        "--listen".into(),
        backend_addr.to_string(),
        "--name".into(),
        BACKEND.into(),
    ]);
    let (first, rest) = argv.split_first().context("empty WHARF_E2E_BACKEND_EXEC")?;
    let _backend = Reaped(Command::new(first).args(rest).stdout(Stdio::null()).stderr(Stdio::null()).spawn()?);
    let site = Site::with_backend(work, backend_addr)?;
    let _ = command(&["kubectl", "create", "namespace", "rel"]);
    command(&["kubectl", "apply", "-f", &site.dir.display().to_string()])?;
    let w = Wharf::controller(bin, &kubeconfig, &[])?;
    w.ready().await?;
    let probe = Load {
        addr: w.https,
        tls: site.client_tls(),
        keepalive: 0,
        rate: 1.0,
        fresh: 0.0,
        backend: site.backend.clone(),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let t = Tally::default();
        if let Ok(mut s) = probe.connect(false, &t).await {
            if probe.request(&mut s, &t).await {
                break;
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{HOST} not served within 30 s; log:\n{}",
            w.log.lock().unwrap_or_else(|p| p.into_inner()).join("\n")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let load = Load { addr: w.https, tls: site.client_tls(), keepalive, rate, fresh, backend: site.backend.clone() };
    let running = tokio::spawn(load.run(Arc::clone(&stop)));
    tokio::time::sleep(Duration::from_secs(3)).await;
    apiserver("stop")?;
    tokio::time::sleep(down).await;
    apiserver("start")?;
    // A change after the API server is back: a new host, live when it answers.
    let after = format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: after, namespace: rel}}\nspec:\n  ingressClassName: wharf\n  rules: [{{host: after.{HOST}, http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: app, port: {{number: 80}}}}}}}}]}}}}]\n"
    );
    let file = work.join("50-after.yaml");
    std::fs::write(&file, after)?;
    command(&["kubectl", "apply", "-f", &file.display().to_string()])?;
    let written = Instant::now();
    let host = format!("after.{HOST}");
    let live = loop {
        if http_get(w.http, &host, "/").await.is_ok_and(|(s, b)| s == 200 && b.contains(BACKEND)) {
            break Some(written.elapsed());
        }
        if written.elapsed() > Duration::from_secs(30) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let tally = running.await?;
    // SIGTERM with the API server gone: the exit must not wait for it.
    apiserver("stop")?;
    w.terminate()?;
    let t = Instant::now();
    let code = w.wait().await?;
    let exit = t.elapsed();
    apiserver("start")?;
    println!(
        "R4 api_down_s={} change_after_return_live_ms={} sigterm_with_api_down_exit={:?}@{:.1}s {}",
        down.as_secs(),
        live.map_or("never".to_owned(), |d| format!("{:.0}", d.as_secs_f64() * 1e3)),
        code,
        exit.as_secs_f64(),
        tally.summary()
    );
    Ok(())
}
