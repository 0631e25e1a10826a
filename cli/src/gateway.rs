//! Starting and stopping the data plane, shared by `run` and `controller`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::task::JoinHandle;
use wharf_controller::translate::gateway_api::{EdgeGateway, EdgeSocket};
use wharf_controller::translate::ingress::annotations::{AnnotationOptions, SnippetPolicy};
use wharf_dataplane::drain::{self, Signal};
use wharf_dataplane::hbone::istio_ca::IstioCa;
use wharf_dataplane::hbone::{MeshFiles, MeshIdentity};
use wharf_dataplane::memory::{self, Watermark};
use wharf_dataplane::proxy::normalize::PathOptions;
use wharf_dataplane::{Gateway, Limits, ListenerAddrs, Options, Timeouts};
use wharf_model::{Identity, PortProtocol};

use crate::args::{EdgeSocketKind, GatewayArgs, MeshArgs, SnippetMode, DEFAULT_EDGE_PORTS};

/// A serving data plane.
pub struct Serving {
    /// The gateway, to apply snapshots to.
    pub gateway: Gateway,
    signal: Signal,
    task: JoinHandle<()>,
}

/// Binds every listener and starts serving an empty config.
pub async fn start(args: &GatewayArgs, default_redirect_port: u16) -> anyhow::Result<Serving> {
    let (l, proxy, mesh) = (&args.listen, &args.proxy, &args.mesh);
    if proxy.proxy_protocol && proxy.trusted_proxies.is_empty() {
        anyhow::bail!(
            "--proxy-protocol needs --trusted-proxy: name the load balancers whose PROXY header names the client \
             (chart: controller.trustedProxies); without them any peer could claim any address. To believe every \
             peer on purpose, write --trusted-proxy=0.0.0.0/0,::/0"
        );
    }
    let (mesh_identity, istio_ca) = match mesh_source(mesh, &args.translate.trust_domain)? {
        MeshSource::None => (None, None),
        MeshSource::Files(identity) => (Some(identity), None),
        MeshSource::IstioCa(identity, ca) => (Some(identity), Some(ca)),
    };
    let addr = |port: u16| (port != 0).then(|| SocketAddr::new(l.listen_address, port));
    let opts = Options {
        timeouts: Timeouts {
            connect: proxy.connect_timeout,
            request: proxy.request_timeout,
            upstream_idle: proxy.upstream_idle_timeout,
            client_idle: proxy.client_idle_timeout,
            ..Timeouts::default()
        },
        https_redirect_port: l.https_redirect_port.unwrap_or(default_redirect_port),
        access_log: proxy.access_log,
        mesh: mesh_identity,
        paths: PathOptions { escaped_slashes: proxy.escaped_slashes, merge_slashes: proxy.merge_slashes },
        limits: Limits {
            max_header_bytes: proxy.max_request_header_bytes as usize,
            max_headers: proxy.max_request_headers,
            max_url_bytes: proxy.max_url_bytes,
            max_body_bytes: proxy.max_request_body,
            max_connections: proxy.max_connections,
            max_connection_age: (!proxy.max_connection_age.is_zero()).then_some(proxy.max_connection_age),
            memory_watermark: memory_watermark(proxy.memory_watermark),
        },
        memory_in_use: crate::memory_in_use,
        proxy_protocol: proxy.proxy_protocol,
        trusted_proxies: proxy.trusted_proxies.clone(),
        hsts: proxy.hsts.clone(),
        underscores_in_headers: proxy.enable_underscores_in_headers,
        tls: wharf_dataplane::tls::TlsPolicy {
            tls13_only: proxy.tls_min_version == "1.3",
            cipher_suites: proxy.tls_ciphers.as_ref().map(|c| c.0.clone()),
        },
        hbone: wharf_dataplane::hbone::inbound::InboundOptions {
            allowed_destinations: mesh.hbone_allowed_destinations.clone(),
            allowed_peers: mesh.hbone_allowed_peers.clone(),
        },
    };
    let gateway = Gateway::new(opts).context("cannot start the data plane")?;
    if let (Some(ca), Some(identity)) = (istio_ca, &gateway.shared().opts.mesh) {
        tracing::info!(address = %ca.address, identity = %ca.identity, "asking the Istio CA for the mesh certificate");
        tokio::spawn(ca.run(Arc::clone(identity), gateway.metrics().clone()));
    }
    let addrs = ListenerAddrs {
        http: addr(l.http_port),
        https: addr(l.https_port),
        passthrough: addr(l.passthrough_port),
        admin: addr(l.admin_port),
        hbone: addr(mesh.hbone_port),
        tcp: l.tcp_services.iter().map(|t| (SocketAddr::new(l.listen_address, t.listen_port), t.listen_port)).collect(),
        ..Default::default()
    };
    let bound = gateway.bind(&addrs).await?;
    tracing::info!(
        http = ?bound.http_addr(), https = ?bound.https_addr(), passthrough = ?bound.passthrough_addr(),
        tcp = ?bound.tcp_addrs(), admin = ?bound.admin_addr(), "listening"
    );
    let (signal, watch) = drain::channel();
    let task = tokio::spawn(bound.serve(gateway.clone(), watch));
    Ok(Serving { gateway, signal, task })
}

/// Resolves `--memory-watermark` against the container's memory limit and says what it is.
fn memory_watermark(w: Watermark) -> Option<u64> {
    let limit = memory::cgroup_memory_limit();
    let resolved = w.resolve(limit);
    let mib = |b: Option<u64>| b.map(|b| b >> 20);
    match (resolved, w) {
        (Some(b), _) => tracing::info!(watermark_mib = b >> 20, limit_mib = ?mib(limit), "admission by memory: new connections are refused above the watermark"),
        (None, Watermark::OfLimit(_)) => tracing::info!("no memory limit in this cgroup: admission by memory is off (set --memory-watermark to a size to turn it on)"),
        (None, _) => tracing::info!("admission by memory is off (--memory-watermark 0)"),
    }
    resolved
}

impl Serving {
    /// Shuts down: reports not ready and asks clients to go for `delay` while still
    /// serving, then stops accepting and waits for in-flight work up to `deadline`.
    pub async fn shutdown(self, delay: Duration, deadline: Duration) {
        self.gateway.close();
        self.signal.close();
        if !delay.is_zero() {
            tracing::info!(?delay, "not ready; serving until the delay ends, then draining");
            tokio::time::sleep(delay).await;
        }
        self.drain(deadline).await;
    }

    /// Stops accepting, waits for in-flight work up to `deadline`.
    async fn drain(self, deadline: std::time::Duration) {
        if self.signal.drain(deadline).await {
            tracing::info!("drained; bye");
        } else {
            tracing::warn!("drain deadline passed with connections still open; closing them");
        }
        self.task.abort();
    }
}

/// Where the gateway's mesh identity comes from.
enum MeshSource {
    /// No mesh identity: ambient endpoints cannot be reached.
    None,
    /// PEM files, loaded now and reloaded when they change.
    Files(Arc<MeshIdentity>),
    /// The Istio CA; the identity is empty until the first certificate arrives.
    IstioCa(Arc<MeshIdentity>, Box<IstioCa>),
}

/// Loads the mesh identity from files (and keeps reloading it), or prepares the Istio CA
/// client, as configured.
fn mesh_source(mesh: &MeshArgs, trust_domain: &str) -> anyhow::Result<MeshSource> {
    if let Some(address) = &mesh.istio_ca_address {
        let Some(sa) = &mesh.mesh_service_account else {
            anyhow::bail!("--istio-ca-address needs --mesh-service-account (the gateway's ServiceAccount)");
        };
        let ca = IstioCa {
            address: address.clone(),
            token: mesh.istio_ca_token.clone(),
            roots: mesh.istio_ca_roots.clone(),
            identity: Identity::new(trust_domain, &mesh.mesh_namespace, sa),
            ttl: mesh.istio_ca_ttl,
        };
        return Ok(MeshSource::IstioCa(Arc::new(MeshIdentity::new(trust_domain)), Box::new(ca)));
    }
    let (Some(cert), Some(key), Some(roots)) = (&mesh.mesh_cert, &mesh.mesh_key, &mesh.mesh_roots) else {
        return Ok(MeshSource::None);
    };
    let files = MeshFiles { cert: cert.clone(), key: key.clone(), roots: roots.clone() };
    let identity = Arc::new(MeshIdentity::new(trust_domain));
    let certs = files.load(trust_domain).context("cannot load the mesh identity")?;
    identity.set(certs);
    tokio::spawn(files.watch(Arc::clone(&identity), Duration::from_secs(1)));
    Ok(MeshSource::Files(identity))
}

/// Translation options from flags.
pub fn translate_options(args: &GatewayArgs) -> anyhow::Result<wharf_controller::Options> {
    let (t, l) = (&args.translate, &args.listen);
    Ok(wharf_controller::Options {
        controller_name: t.controller_name.clone(),
        ingress_class: t.ingress_class.clone(),
        default_certificate: t.default_ssl_certificate.clone(),
        tcp_services: l.tcp_services.clone(),
        auto_passthrough: t.auto_passthrough,
        cluster_domain: t.cluster_domain.clone(),
        trust_domain: t.trust_domain.clone(),
        now: 0,
        gateway: wharf_controller::translate::gateway_api::GatewayOptions {
            controller_name: t.gateway_controller_name.clone(),
            addresses: t.gateway_addresses,
            edge: edge_gateway(args)?,
        },
        annotations: AnnotationOptions {
            nginx_names: t.nginx_annotations,
            snippets: match t.snippet_annotations {
                SnippetMode::SkipIngress => SnippetPolicy::SkipIngress,
                SnippetMode::Ignore => SnippetPolicy::Ignore,
            },
        },
        acme: wharf_controller::translate::AcmeOptions {
            challenge_namespace: None,
            issuers: args.acme.issuers.iter().map(|i| i.name.clone()).collect(),
            default_issuer: args.acme.default_issuer.clone(),
            namespaces: args.acme.namespaces.clone(),
        },
        ownership: wharf_controller::translate::owners::Ownership {
            assigned: t.host_owners.clone(),
            merge_across_namespaces: t.merge_hosts_across_namespaces,
            record: None,
        },
    })
}

/// The ACME settings, when issuers are configured.
pub fn acme_settings(args: &GatewayArgs) -> anyhow::Result<Option<wharf_controller::acme::Settings>> {
    let a = &args.acme;
    for (n, i) in a.issuers.iter().enumerate() {
        anyhow::ensure!(
            !a.issuers[..n].iter().any(|j| j.name == i.name),
            "--acme-issuer: the name {:?} is used twice",
            i.name
        );
    }
    for i in &a.issuers {
        wharf_controller::acme::client::check_files(i).map_err(|e| anyhow::anyhow!("--acme-issuer {}: {e}", i.name))?;
    }
    if let Some(d) = &a.default_issuer {
        anyhow::ensure!(
            a.issuers.iter().any(|i| &i.name == d),
            "--acme-default-issuer {d:?} is not the name of an --acme-issuer"
        );
    }
    Ok((!a.issuers.is_empty())
        .then(|| wharf_controller::acme::Settings { issuers: a.issuers.clone(), propagation: a.propagation_delay }))
}

/// ACME's metrics, in the data plane's registry.
#[derive(Debug, Clone)]
pub struct AcmeMetrics(pub wharf_dataplane::Metrics);

impl wharf_controller::acme::AcmeMetrics for AcmeMetrics {
    fn order(&self, result: &str) {
        self.0.acme_order(result);
    }

    fn expiries(&self, expiries: &std::collections::BTreeMap<String, i64>) {
        self.0.acme_expiries(expiries);
    }
}

/// The snapshot publisher of `serving`, also telling `served` which ACME challenges the
/// data plane answers.
pub fn publisher(
    serving: &Serving,
    served: tokio::sync::watch::Sender<Arc<wharf_model::AcmeChallenges>>,
) -> wharf_controller::publish::Publisher {
    let gw = serving.gateway.clone();
    wharf_controller::publish::Publisher::new(Box::new(move |s| {
        let challenges = s.acme.clone();
        let applied = gw
            .apply_shared(s)
            .map_err(|e| wharf_controller::publish::Refusal { reason: e.reason(), message: e.to_string() });
        release_free_memory();
        let version = applied?;
        served.send_if_modified(|c| {
            let changed = **c != challenges;
            if changed {
                *c = Arc::new(challenges);
            }
            changed
        });
        Ok(version)
    }))
}

/// Gives the system back what translating and compiling a config freed (the objects'
/// working copies, the previous config), instead of keeping the process resident at the
/// peak of the largest rebuild it ever did. Runs on the control thread after each swap.
fn release_free_memory() {
    let started = std::time::Instant::now();
    let released = wharf_sys::release_free_memory();
    tracing::debug!(released, ms = started.elapsed().as_secs_f64() * 1e3, "free memory given back to the system");
}

/// The edge Gateway from `--edge-gateway` and `--edge-port`.
fn edge_gateway(args: &GatewayArgs) -> anyhow::Result<Option<EdgeGateway>> {
    let (t, l) = (&args.translate, &args.listen);
    let Some((namespace, name)) = t.edge_gateway.clone() else {
        anyhow::ensure!(t.edge_ports.is_empty(), "--edge-port needs --edge-gateway");
        return Ok(None);
    };
    let ports = if t.edge_ports.is_empty() { &DEFAULT_EDGE_PORTS[..] } else { &t.edge_ports[..] };
    let mut sockets: Vec<EdgeSocket> = Vec::new();
    for e in ports {
        let (local, protocol, flag) = match e.socket {
            EdgeSocketKind::Http => (l.http_port, PortProtocol::Http, "--http-port"),
            EdgeSocketKind::Https => (l.https_port, PortProtocol::Https, "--https-port"),
            EdgeSocketKind::Tls => (l.passthrough_port, PortProtocol::Passthrough, "--passthrough-port"),
            EdgeSocketKind::Tcp(p) => (p, PortProtocol::Tcp, "--tcp-service"),
        };
        if protocol == PortProtocol::Tcp {
            if l.tcp_services.iter().any(|s| s.listen_port == local) {
                // The port forwards to its --tcp-service; the Gateway cannot use it.
                tracing::warn!(
                    port = e.port,
                    "--edge-port {}: port {local} is a --tcp-service port; the edge Gateway does not use it",
                    e.port
                );
                continue;
            }
        } else if local == 0 {
            // That listener is off: the Gateway cannot use the port.
            tracing::warn!(
                port = e.port,
                "--edge-port {}: {flag} is 0; the edge Gateway does not use the port",
                e.port
            );
            continue;
        }
        anyhow::ensure!(!sockets.iter().any(|s| s.port == e.port), "--edge-port {} is given twice", e.port);
        anyhow::ensure!(
            protocol == PortProtocol::Tcp || !sockets.iter().any(|s| s.protocol == protocol),
            "--edge-port {}: another edge port already uses that listener",
            e.port
        );
        let bind = SocketAddr::new(l.listen_address, local);
        anyhow::ensure!(!sockets.iter().any(|s| s.bind == bind), "--edge-port {}: {bind} is used twice", e.port);
        sockets.push(EdgeSocket { port: e.port, bind, protocol });
    }
    Ok(Some(EdgeGateway { namespace, name, sockets }))
}

/// Resolves with the name of the signal that asked us to stop.
pub async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut t), Ok(mut i)) => tokio::select! {
            _ = t.recv() => "SIGTERM",
            _ = i.recv() => "SIGINT",
        },
        _ => {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}
