//! `wharf-loadgen`: the two measurements the usual tools here lack.
//!
//! - `handshakes`: full TLS 1.3 handshakes per second (no resumption), each followed by
//!   one request, optionally with a random SNI per connection from a file.
//! - `rate`: HTTPS keep-alive requests at a fixed rate (open loop); latency is measured
//!   from when each request was due, not when it was sent, so a stalled server is not
//!   hidden (coordinated omission).
//! - `idle`: memory per idle client connection: many TLS connections, one request each,
//!   then held open while the proxy's RSS is read.
//! - `live`: how long a new object written to the API server takes to be served, over
//!   connections opened before the first write.

// A command-line tool whose output is its result.
#![allow(clippy::print_stdout)]

mod idle;
mod live;
mod rebuild;
mod reliability;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// New TLS connections as fast as possible: handshake, one GET, close.
    Handshakes {
        #[arg(long)]
        addr: SocketAddr,
        /// SNI (and Host); ignored with --sni-file.
        #[arg(long, default_value = "bench.local")]
        sni: String,
        /// One name per line: each connection picks one at random.
        #[arg(long)]
        sni_file: Option<std::path::PathBuf>,
        #[arg(long, default_value = "/")]
        path: String,
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
    },
    /// Writes N Ingresses (each its own host, optionally with its own certificate) routed
    /// to one backend, as multi-document YAML for `wharf run`.
    Ingresses {
        #[arg(long)]
        count: usize,
        /// Give every host its own ECDSA P-256 certificate and Secret.
        #[arg(long)]
        certs: bool,
        /// Give every Ingress its own Service and EndpointSlice (all to the one backend).
        #[arg(long)]
        services: bool,
        /// Write only the objects of Ingresses `from..count`, without the IngressClass and
        /// the shared backend (to grow a set already stored).
        #[arg(long, default_value_t = 0)]
        from: usize,
        /// Backend address.
        #[arg(long, default_value = "127.0.0.1:9000")]
        backend: SocketAddr,
        /// Host names are `<prefix><n>.bench.local`.
        #[arg(long, default_value = "host-")]
        prefix: String,
        #[arg(long)]
        out: std::path::PathBuf,
        /// Also write the host names here, one per line.
        #[arg(long)]
        names: Option<std::path::PathBuf>,
    },
    /// A reliability scenario against the real `wharf` binary (docs/reliability.md).
    Reliability {
        #[command(subcommand)]
        scenario: Scenario,
        /// The `wharf` binary.
        #[arg(long, global = true, default_value = "target/release/wharf")]
        wharf: std::path::PathBuf,
        /// Working directory for manifests.
        #[arg(long, global = true, default_value = "target/reliability")]
        work: std::path::PathBuf,
        /// Keep-alive client connections.
        #[arg(long, global = true, default_value_t = 8)]
        keepalive: usize,
        /// Their requests per second, in total.
        #[arg(long, global = true, default_value_t = 400.0)]
        rate: f64,
        /// New client connections (one request each) per second.
        #[arg(long, global = true, default_value_t = 20.0)]
        fresh: f64,
    },
    /// Opens many TLS connections, sends one request on each (HTTP/1.1 keep-alive, or
    /// HTTP/2 with --h2), holds them open and idle, and prints how much the proxy's RSS grew
    /// per connection.
    Idle {
        #[arg(long)]
        addr: SocketAddr,
        /// SNI and Host.
        #[arg(long, default_value = "bench.local")]
        sni: String,
        #[arg(long, default_value = "/")]
        path: String,
        #[arg(long, default_value_t = 10_000)]
        connections: usize,
        /// Negotiate HTTP/2 (ALPN h2) instead of HTTP/1.1.
        #[arg(long)]
        h2: bool,
        /// The process holding the connections (nginx: its worker); its VmRSS is read
        /// before the first connection and after the last one is idle.
        #[arg(long)]
        pid: u32,
        /// Connections being opened at a time.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// Seconds between the last response and the second reading.
        #[arg(long, default_value_t = 1.0)]
        settle: f64,
    },
    /// Translates and compiles the objects of a file (as `wharf run -f` reads them) once,
    /// then ROUNDS more times, and prints the milliseconds of each step.
    Rebuild {
        #[arg(long)]
        file: std::path::PathBuf,
        #[arg(long, default_value_t = 10)]
        rounds: usize,
        /// Each round changes one Ingress (a path of the next one in turn) and translates
        /// only what that change touches, as the controller does; without it, each round
        /// translates everything, as a resync does.
        #[arg(long)]
        change: bool,
    },
    /// POSTs COUNT new objects to the API server, one at a time, and times each from the
    /// write until the proxy answers 200 for its host; prints p50 / p99 (nearest rank) of
    /// that and of the API server's own answer.
    Live {
        /// The API server, https://IP:PORT.
        #[arg(long)]
        api: String,
        /// Client certificate and key (PEM) the API server accepts.
        #[arg(long)]
        cert: std::path::PathBuf,
        #[arg(long)]
        key: std::path::PathBuf,
        /// The collection to POST to, e.g. /apis/networking.k8s.io/v1/namespaces/bench/ingresses.
        #[arg(long)]
        path: String,
        /// The object as JSON, with {name} and {host} where its name and host go.
        #[arg(long)]
        template: String,
        /// Objects are named <prefix>-<k> and served at <prefix>-<k>.bench.local.
        #[arg(long)]
        prefix: String,
        /// The proxy's plain HTTP listener.
        #[arg(long)]
        proxy: SocketAddr,
        #[arg(long, default_value_t = 20)]
        count: usize,
        /// Pause after each object is live, before the next write.
        #[arg(long, default_value_t = 500)]
        pause_ms: u64,
    },
    /// Fixed-rate keep-alive HTTPS/1.1 requests; prints latency percentiles.
    Rate {
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long, default_value = "bench.local")]
        sni: String,
        #[arg(long, default_value = "/")]
        path: String,
        /// Requests per second, in total.
        #[arg(long)]
        rate: f64,
        #[arg(long, default_value_t = 50)]
        connections: usize,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
    },
}

#[derive(Subcommand)]
enum Scenario {
    /// R1: config changes under load (the served Ingress, its Secret, another Ingress, in
    /// turn), each waited for until live.
    Changes {
        #[arg(long, default_value_t = 1000)]
        count: u64,
    },
    /// R2: the served certificate replaced every second.
    Rotation {
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
    /// R4: `wharf controller` while the e2e harness's API server is stopped and started
    /// again (run under the harness's environment).
    ApiServer {
        /// Seconds the API server stays down.
        #[arg(long, default_value_t = 60)]
        down: u64,
    },
    /// R5: malformed objects added one by one (bad PEM, wrong key, huge, invalid UTF-8,
    /// 10,000 paths...): each gets a diagnostic, the rest keeps serving.
    Malformed,
    /// R3: two replicas behind one address restarted one after the other (SIGTERM, drain,
    /// start, ready).
    Restart {
        /// How long after SIGTERM the terminating replica leaves the Service's endpoints
        /// (the EndpointSlice controller and kube-proxy: typically 0.1-2 s).
        #[arg(long, default_value_t = 1000)]
        lag_ms: u64,
        /// Extra flags for both replicas.
        #[arg(long, allow_hyphen_values = true)]
        flags: Vec<String>,
    },
}

fn client_config(alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    // The benchmark measures the proxy, so the client skips chain checks (it still verifies
    // the handshake signature) and never resumes: every handshake is a full one.
    let mut cfg = (*wharf_dataplane::testing::inspecting_client_config(&[alpn])).clone();
    cfg.resumption = rustls::client::Resumption::disabled();
    Arc::new(cfg)
}

async fn connect(
    addr: SocketAddr,
    sni: &str,
    cfg: &Arc<rustls::ClientConfig>,
) -> Result<hyper::client::conn::http1::SendRequest<Empty<Bytes>>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let tls =
        tokio_rustls::TlsConnector::from(Arc::clone(cfg)).connect(ServerName::try_from(sni.to_owned())?, tcp).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn get(sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>, host: &str, path: &str) -> Result<()> {
    let req = http::Request::get(path).header("host", host).body(Empty::new())?;
    sender.ready().await?;
    let resp = sender.send_request(req).await?;
    let ok = resp.status().is_success();
    resp.into_body().collect().await?;
    anyhow::ensure!(ok, "non-2xx response");
    Ok(())
}

fn scenario_of(s: Scenario) -> reliability::Scenario {
    match s {
        Scenario::Changes { count } => reliability::Scenario::Changes { count },
        Scenario::Rotation { seconds } => reliability::Scenario::Rotation { seconds },
        Scenario::Malformed => reliability::Scenario::Malformed,
        Scenario::ApiServer { down } => reliability::Scenario::ApiServer { down: Duration::from_secs(down) },
        Scenario::Restart { lag_ms, flags } => {
            reliability::Scenario::Restart { lag: Duration::from_millis(lag_ms), flags }
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Handshakes { addr, sni, sni_file, path, concurrency, seconds } => {
            let names: Arc<Vec<String>> = Arc::new(match sni_file {
                Some(f) => std::fs::read_to_string(&f)
                    .with_context(|| format!("{}", f.display()))?
                    .lines()
                    .map(str::to_owned)
                    .filter(|l| !l.is_empty())
                    .collect(),
                None => vec![sni],
            });
            let cfg = client_config(b"http/1.1");
            let deadline = Instant::now() + Duration::from_secs_f64(seconds);
            let mut tasks = Vec::new();
            for _ in 0..concurrency {
                let (cfg, names, path) = (Arc::clone(&cfg), Arc::clone(&names), path.clone());
                tasks.push(tokio::spawn(async move {
                    let (mut ok, mut failed) = (0u64, 0u64);
                    while Instant::now() < deadline {
                        let name = &names[fastrand::usize(..names.len())];
                        let r = async {
                            let mut s = connect(addr, name, &cfg).await?;
                            get(&mut s, name, &path).await
                        }
                        .await;
                        match r {
                            Ok(()) => ok += 1,
                            Err(_) => failed += 1,
                        }
                    }
                    (ok, failed)
                }));
            }
            let (mut ok, mut failed) = (0, 0);
            for t in tasks {
                let (o, f) = t.await?;
                ok += o;
                failed += f;
            }
            println!("handshakes_per_sec={:.0} ok={ok} failed={failed}", ok as f64 / seconds);
        }
        Cmd::Ingresses { count, certs, services, from, backend, prefix, out, names } => {
            use std::fmt::Write as _;
            let mut y = String::new();
            let mut list = String::new();
            let service = |y: &mut String, name: &str| {
                let _ = write!(y, "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: bench}}\nspec: {{ports: [{{name: http, port: 80}}]}}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}-1, namespace: bench, labels: {{kubernetes.io/service-name: {name}}}}}\naddressType: IPv4\nports: [{{name: http, port: {}}}]\nendpoints: [{{addresses: [\"{}\"]}}]\n", backend.port(), backend.ip());
            };
            if from == 0 {
                y.push_str("apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: wharf}\nspec: {controller: wharf.dev/ingress-controller}\n");
                service(&mut y, "backend");
            }
            for i in from..count {
                let host = format!("{prefix}{i}.bench.local");
                let _ = writeln!(list, "{host}");
                let tls = if certs {
                    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
                    let cert = rcgen::CertificateParams::new(vec![host.clone()])?.self_signed(&key)?;
                    let indent = |s: String| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
                    let _ = write!(y, "---\napiVersion: v1\nkind: Secret\nmetadata: {{name: tls-{i}, namespace: bench}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}", indent(cert.pem()), indent(key.serialize_pem()));
                    format!("  tls: [{{hosts: [{host}], secretName: tls-{i}}}]\n")
                } else {
                    String::new()
                };
                let svc = if services { format!("svc-{i}") } else { "backend".to_owned() };
                if services {
                    service(&mut y, &svc);
                }
                let _ = write!(y, "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: ing-{i}, namespace: bench}}\nspec:\n  ingressClassName: wharf\n{tls}  rules: [{{host: {host}, http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: {svc}, port: {{number: 80}}}}}}}}]}}}}]\n");
            }
            std::fs::write(&out, y)?;
            if let Some(n) = names {
                std::fs::write(n, list)?;
            }
        }
        Cmd::Reliability { scenario, wharf, work, keepalive, rate, fresh } => {
            reliability::run(scenario_of(scenario), &wharf, &work, keepalive, rate, fresh).await?;
        }
        Cmd::Rebuild { file, rounds, change } => rebuild::run(file, rounds, change)?,
        Cmd::Idle { addr, sni, path, connections, h2, pid, concurrency, settle } => {
            let cfg = client_config(if h2 { b"h2" } else { b"http/1.1" });
            let target = idle::Target { addr, sni, path, h2, cfg };
            idle::run(target, connections, concurrency, pid, Duration::from_secs_f64(settle)).await?;
        }
        Cmd::Live { api, cert, key, path, template, prefix, proxy, count, pause_ms } => {
            let target = live::Target { api, cert, key, path, template, prefix, proxy };
            let times = live::run(&target, count, Duration::from_millis(pause_ms)).await?;
            println!("{}", live::summary(&times));
        }
        Cmd::Rate { addr, sni, path, rate, connections, seconds } => {
            let cfg = client_config(b"http/1.1");
            let start = Instant::now() + Duration::from_millis(200);
            let per_conn = Duration::from_secs_f64(connections as f64 / rate);
            let total = (rate * seconds) as usize / connections;
            let mut tasks = Vec::new();
            for i in 0..connections {
                let (cfg, sni, path) = (Arc::clone(&cfg), sni.clone(), path.clone());
                tasks.push(tokio::spawn(async move {
                    let mut lat = Vec::with_capacity(total);
                    let mut errors = 0u64;
                    let Ok(mut s) = connect(addr, &sni, &cfg).await else { return (lat, total as u64) };
                    // Stagger connections across one interval.
                    let offset = per_conn.mul_f64(i as f64 / connections as f64);
                    for n in 0..total {
                        let due = start + offset + per_conn * n as u32;
                        tokio::time::sleep_until(due.into()).await;
                        if get(&mut s, &sni, &path).await.is_err() {
                            errors += 1;
                            match connect(addr, &sni, &cfg).await {
                                Ok(new) => s = new,
                                Err(_) => continue,
                            }
                        }
                        lat.push(due.elapsed().as_micros() as u64);
                    }
                    (lat, errors)
                }));
            }
            let mut all = Vec::new();
            let mut errors = 0;
            for t in tasks {
                let (l, e) = t.await?;
                all.extend(l);
                errors += e;
            }
            all.sort_unstable();
            let pct = |p: f64| {
                all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1))).copied().unwrap_or(0) as f64
                    / 1000.0
            };
            println!(
                "rate={rate:.0} achieved={:.0} p50_ms={:.3} p90_ms={:.3} p99_ms={:.3} p999_ms={:.3} max_ms={:.3} errors={errors}",
                all.len() as f64 / seconds,
                pct(0.5),
                pct(0.9),
                pct(0.99),
                pct(0.999),
                all.last().copied().unwrap_or(0) as f64 / 1000.0
            );
        }
    }
    Ok(())
}
