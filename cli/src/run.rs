//! `wharf run` (standalone: YAML files in, gateway out) and `wharf echo`.

use std::path::PathBuf;

use anyhow::Context;
use wharf_controller::acme::dir::DirStore;
use wharf_controller::acme::{LogReport, Manager};
use wharf_controller::publish::{Published, Publisher};
use wharf_controller::{files, translate, Options as TranslateOptions};

use crate::args::{EchoArgs, RunArgs};
use crate::control::{Control, Stop};
use crate::gateway::{self, shutdown_signal};

/// Serves the objects in `args.files` until SIGTERM/SIGINT, reloading on change.
pub async fn standalone(args: RunArgs) -> anyhow::Result<()> {
    let mut opts = gateway::translate_options(&args.gateway)?;
    let acme = gateway::acme_settings(&args.gateway)?;
    let mut files = args.files.clone();
    let store = match (&acme, &args.acme_dir) {
        (None, _) => None,
        (Some(_), None) => anyhow::bail!("--acme-issuer needs --acme-dir: where the certificates are kept"),
        (Some(_), Some(dir)) => {
            let store =
                DirStore::new(dir.clone()).with_context(|| format!("cannot use --acme-dir {}", dir.display()))?;
            files.push(store.secrets_dir());
            opts.acme.challenge_namespace = Some(wharf_controller::acme::dir::CHALLENGE_NAMESPACE.to_owned());
            Some(store)
        }
    };
    let serving = gateway::start(&args.gateway, args.gateway.listen.https_port).await?;
    let (served_tx, served) = tokio::sync::watch::channel(Default::default());
    let (translations_tx, translations) = tokio::sync::watch::channel(None);
    let reloader = Reloader {
        files: files.clone(),
        opts,
        publisher: gateway::publisher(&serving, served_tx),
        translations: translations_tx,
    };
    let acme = match (acme, store) {
        (Some(settings), Some(store)) => {
            let report = LogReport(gateway::AcmeMetrics(serving.gateway.metrics().clone()));
            Some(Manager::new(settings, store, report, served))
        }
        _ => None,
    };
    let interval = args.watch_interval;
    let mut control = Control::spawn(move |stop| async move {
        // Standalone, this process is the only one: always the leader.
        let (_leader, always) = tokio::sync::watch::channel(true);
        if let Some(manager) = acme {
            tokio::spawn(manager.run(translations, always));
        }
        reloader.watch(interval, stop).await;
        Ok(())
    })?;
    let sig = tokio::select! {
        sig = shutdown_signal() => sig,
        e = control.failed() => return Err(e),
    };
    tracing::info!(signal = sig, deadline = ?args.gateway.proxy.drain_timeout, "draining");
    let delay = args.gateway.proxy.shutdown_delay.unwrap_or_default();
    let (stopped, ()) = tokio::join!(control.stop(), serving.shutdown(delay, args.gateway.proxy.drain_timeout));
    stopped
}

struct Reloader {
    files: Vec<PathBuf>,
    opts: TranslateOptions,
    publisher: Publisher,
    translations: tokio::sync::watch::Sender<Option<std::sync::Arc<wharf_controller::Translation>>>,
}

impl Reloader {
    /// Applies the files, then again whenever they change, until `stop`.
    async fn watch(mut self, interval: std::time::Duration, stop: Stop) {
        let mut fingerprint = files::fingerprint(&self.files);
        self.reload();
        let mut tick = tokio::time::interval(interval);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let now = files::fingerprint(&self.files);
                    if now != fingerprint {
                        fingerprint = now;
                        self.reload();
                    }
                }
                _ = &mut stop => return,
            }
        }
    }

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
        self.opts.now = wharf_controller::unix_now();
        let t = translate(&loaded.world, &self.opts, self.publisher.served());
        // The objects are not needed to serve: freed before the snapshot is compiled.
        drop(loaded);
        if self.publisher.publish(&t) == Published::Unchanged {
            tracing::debug!("files changed but the config did not");
        }
        self.translations.send_replace(Some(std::sync::Arc::new(t)));
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
