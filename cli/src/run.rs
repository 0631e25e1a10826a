//! `wharf run` (standalone: YAML files in, gateway out) and `wharf echo`.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::SystemTime;

use anyhow::Context;
use wharf_controller::{files, translate, Options as TranslateOptions, Translation};
use wharf_dataplane::{drain, Gateway, ListenerAddrs, Options, Timeouts};
use wharf_model::Snapshot;

use crate::args::{EchoArgs, RunArgs};

/// Serves the objects in `args.files` until SIGTERM/SIGINT, reloading on change.
pub async fn standalone(args: RunArgs) -> anyhow::Result<()> {
    let l = &args.listen;
    let addr = |port: u16| (port != 0).then(|| SocketAddr::new(l.listen_address, port));
    let opts = Options {
        timeouts: Timeouts {
            connect: args.proxy.connect_timeout,
            request: args.proxy.request_timeout,
            upstream_idle: args.proxy.upstream_idle_timeout,
            client_idle: args.proxy.client_idle_timeout,
            ..Timeouts::default()
        },
        https_redirect_port: l.https_redirect_port.unwrap_or(l.https_port),
        access_log: args.proxy.access_log,
    };
    let gateway = Gateway::new(opts).context("cannot start the data plane")?;
    let addrs = ListenerAddrs {
        http: addr(l.http_port),
        https: addr(l.https_port),
        passthrough: addr(l.passthrough_port),
        admin: addr(l.admin_port),
        tcp: l
            .tcp_services
            .iter()
            .map(|t| {
                (
                    SocketAddr::new(l.listen_address, t.listen_port),
                    t.listen_port,
                )
            })
            .collect(),
        ..Default::default()
    };
    let bound = gateway.bind(&addrs).await?;
    tracing::info!(
        http = ?bound.http_addr(), https = ?bound.https_addr(), passthrough = ?bound.passthrough_addr(),
        tcp = ?bound.tcp_addrs(), admin = ?bound.admin_addr(), "listening"
    );
    let (signal, watch) = drain::channel();
    let serving = tokio::spawn(bound.serve(gateway.clone(), watch));

    let translate_opts = TranslateOptions {
        controller_name: args.translate.controller_name.clone(),
        ingress_class: args.translate.ingress_class.clone(),
        default_certificate: args.translate.default_ssl_certificate.clone(),
        tcp_services: l.tcp_services.clone(),
        auto_passthrough: args.translate.auto_passthrough,
        cluster_domain: args.translate.cluster_domain.clone(),
        now: 0,
    };
    let mut reloader = Reloader {
        files: args.files.clone(),
        opts: translate_opts,
        gateway: gateway.clone(),
        last: None,
        reported: BTreeSet::new(),
    };
    let mut fingerprint = files::fingerprint(&args.files);
    reloader.reload();

    let mut tick = tokio::time::interval(args.watch_interval);
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let now = files::fingerprint(&args.files);
                if now != fingerprint {
                    fingerprint = now;
                    reloader.reload();
                }
            }
            sig = &mut shutdown => {
                tracing::info!(signal = sig, deadline = ?args.proxy.drain_timeout, "draining");
                break;
            }
        }
    }
    if signal.drain(args.proxy.drain_timeout).await {
        tracing::info!("drained; bye");
    } else {
        tracing::warn!("drain deadline passed with connections still open; closing them");
    }
    serving.abort();
    Ok(())
}

struct Reloader {
    files: Vec<PathBuf>,
    opts: TranslateOptions,
    gateway: Gateway,
    last: Option<Snapshot>,
    reported: BTreeSet<String>,
}

impl Reloader {
    /// Loads, translates and applies the files; on any error the live config stays.
    fn reload(&mut self) {
        let loaded = match files::load(&self.files) {
            Ok(l) => l,
            Err(errors) => {
                for e in &errors {
                    tracing::error!(error = %e, "cannot read config; fix the file; the last good config keeps serving");
                }
                return;
            }
        };
        for ignored in &loaded.ignored {
            tracing::debug!(object = %ignored, "ignored: not a kind Wharf reads");
        }
        self.opts.now = unix_now();
        let Translation {
            snapshot,
            diagnostics,
            ingresses,
        } = translate(&loaded.world, &self.opts, self.last.as_ref());
        // Tell each problem once, not on every reload.
        let mut now_reported = BTreeSet::new();
        for d in &diagnostics {
            let key = format!("{} {} {}", d.object, d.reason, d.message);
            if !self.reported.contains(&key) {
                tracing::warn!(object = %d.object, reason = d.reason, "{}", d.message);
            }
            now_reported.insert(key);
        }
        self.reported = now_reported;
        if self.last.as_ref() == Some(&snapshot) {
            tracing::debug!("files changed but the config did not");
            return;
        }
        match self.gateway.apply(snapshot.clone()) {
            Ok(version) => {
                tracing::info!(
                    version,
                    ingresses = ingresses.len(),
                    hosts = snapshot.virtual_hosts.len(),
                    certificates = snapshot.certificates.len(),
                    "config applied"
                );
                self.last = Some(snapshot);
            }
            Err(e) => {
                tracing::error!(error = %e, "config rejected; the last good config keeps serving")
            }
        }
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Resolves with the name of the signal that asked us to stop.
async fn shutdown_signal() -> &'static str {
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

/// Runs the echo backend.
pub async fn echo(args: EchoArgs) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(listen = %args.listen, name = %args.name, "echo backend listening");
    tokio::select! {
        _ = wharf_dataplane::echo::serve(listener, args.name) => {}
        _ = shutdown_signal() => {}
    }
    Ok(())
}
