//! `wharf run` (standalone: YAML files in, gateway out) and `wharf echo`.

use std::path::PathBuf;

use anyhow::Context;
use wharf_controller::publish::{Published, Publisher};
use wharf_controller::{files, translate, Options as TranslateOptions};

use crate::args::{EchoArgs, RunArgs};
use crate::gateway::{self, shutdown_signal};

/// Serves the objects in `args.files` until SIGTERM/SIGINT, reloading on change.
pub async fn standalone(args: RunArgs) -> anyhow::Result<()> {
    let opts = gateway::translate_options(&args.gateway)?;
    let serving = gateway::start(&args.gateway, args.gateway.listen.https_port).await?;
    let gw = serving.gateway.clone();
    let mut reloader = Reloader {
        files: args.files.clone(),
        opts,
        publisher: Publisher::new(Box::new(move |s| gw.apply(s).map_err(|e| e.to_string()))),
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
                tracing::info!(signal = sig, deadline = ?args.gateway.proxy.drain_timeout, "draining");
                break;
            }
        }
    }
    let delay = args.gateway.proxy.shutdown_delay.unwrap_or_default();
    serving.shutdown(delay, args.gateway.proxy.drain_timeout).await;
    Ok(())
}

struct Reloader {
    files: Vec<PathBuf>,
    opts: TranslateOptions,
    publisher: Publisher,
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
        self.opts.now = wharf_controller::unix_now();
        let t = translate(&loaded.world, &self.opts, self.publisher.served());
        if self.publisher.publish(&t) == Published::Unchanged {
            tracing::debug!("files changed but the config did not");
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
