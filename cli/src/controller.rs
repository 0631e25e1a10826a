//! `wharf controller`: watches a Kubernetes API server and serves what it finds.

use std::time::Duration;

use anyhow::Context;
use kube::runtime::events::Reporter;
use wharf_controller::acme::Manager;
use wharf_controller::k8s::acme::{EventReport, SecretStore};
use wharf_controller::k8s::{self, lease::LeaseConfig, status::Publish};

use crate::args::ControllerArgs;
use crate::control::{Control, Stop};
use crate::gateway::{self, shutdown_signal};

/// Runs controller and data plane until SIGTERM/SIGINT: the data plane on this runtime, the
/// controller on the control thread.
pub async fn run(args: ControllerArgs) -> anyhow::Result<()> {
    let mut translate = gateway::translate_options(&args.gateway)?;
    let acme = gateway::acme_settings(&args.gateway)?;
    // The replicas answer the ACME challenges the leader publishes in their namespace.
    translate.acme.challenge_namespace = Some(args.election_namespace.clone());
    let record = format!("{}{}", args.election_id, wharf_controller::well_known::HOST_OWNERS_SUFFIX);
    translate.ownership.record = Some((args.election_namespace.clone(), record));
    let serving = gateway::start(&args.gateway, 443).await?;
    let identity = args.pod_name.clone().unwrap_or_else(hostname);
    let publish = if !args.publish_addresses.is_empty() {
        Publish::Addresses(args.publish_addresses.clone())
    } else if let Some(svc) = &args.publish_service {
        Publish::Service(svc.clone())
    } else {
        Publish::Nothing
    };
    let lease = LeaseConfig {
        namespace: args.election_namespace.clone(),
        name: args.election_id.clone(),
        identity: identity.clone(),
        duration: args.lease_duration,
        renew_deadline: args.lease_renew_deadline,
        retry: args.lease_retry,
    };
    let cfg = k8s::Config {
        translate,
        publish,
        lease,
        quiet: Duration::from_millis(10),
        debounce: Duration::from_millis(50),
        resync: args.resync_interval,
    };
    let (served_tx, served) = tokio::sync::watch::channel(Default::default());
    let plane = ControlPlane {
        kubeconfig: args.kubeconfig.clone(),
        cfg,
        publisher: gateway::publisher(&serving, served_tx),
        acme: acme.map(|settings| (settings, served, gateway::AcmeMetrics(serving.gateway.metrics().clone()))),
    };
    let mut control = Control::spawn(move |stop| plane.run(stop))?;
    let sig = tokio::select! {
        sig = shutdown_signal() => sig,
        e = control.failed() => return Err(e),
    };
    tracing::info!(signal = sig, deadline = ?args.gateway.proxy.drain_timeout, "draining");
    let delay = args.gateway.proxy.shutdown_delay.unwrap_or(CONTROLLER_SHUTDOWN_DELAY);
    let (stopped, ()) = tokio::join!(control.stop(), serving.shutdown(delay, args.gateway.proxy.drain_timeout));
    stopped
}

/// What runs on the control thread: the API client, its watches, translation and
/// publishing, leader election, status, ACME.
struct ControlPlane {
    kubeconfig: Option<std::path::PathBuf>,
    cfg: k8s::Config,
    publisher: wharf_controller::publish::Publisher,
    acme: Option<(
        wharf_controller::acme::Settings,
        tokio::sync::watch::Receiver<std::sync::Arc<wharf_model::AcmeChallenges>>,
        gateway::AcmeMetrics,
    )>,
}

impl ControlPlane {
    async fn run(self, stop: Stop) -> anyhow::Result<()> {
        let client = client_from(self.kubeconfig.as_deref()).await?;
        let lease = self.cfg.lease.clone();
        tracing::info!(identity = %lease.identity, "starting controller");
        let handles = k8s::start(client.clone(), self.cfg, self.publisher);
        if let Some((settings, served, metrics)) = self.acme {
            let store = SecretStore::new(client.clone(), lease.namespace.clone(), lease.name.clone());
            let reporter = Reporter { controller: "wharf".into(), instance: Some(lease.identity.clone()) };
            let report = EventReport::new(client.clone(), reporter, metrics);
            tracing::info!(issuers = settings.issuers.len(), "ordering certificates from ACME while leader");
            let manager = Manager::new(settings, store, report, served);
            tokio::spawn(manager.run(handles.translations.clone(), handles.leader.clone()));
        }
        let _ = stop.await;
        // Handing the Lease over early only speeds up the next leader; with the API server
        // slow or unreachable it must not hold up the drain (the Lease then expires).
        let leader = *handles.leader.borrow();
        if leader && tokio::time::timeout(RELEASE_TIMEOUT, k8s::lease::release(client, &lease)).await.is_err() {
            tracing::warn!(lease = %lease.name, "the API server did not answer; the lease expires by itself");
        }
        Ok(())
    }
}

/// In Kubernetes a terminating pod leaves its Service's endpoints only after the
/// EndpointSlice controller and every node's kube-proxy have caught up (typically under a
/// second or two); until then it keeps getting new connections, which it serves.
const CONTROLLER_SHUTDOWN_DELAY: std::time::Duration = std::time::Duration::from_secs(5);

/// How long shutdown tries to release the Lease.
const RELEASE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// A client from `kubeconfig`, else the in-cluster config, `KUBECONFIG` or ~/.kube/config.
pub async fn client_from(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .with_context(|| format!("kubeconfig {} is not usable", path.display()))?
        }
        None => kube::Config::infer().await.context(
            "no Kubernetes config found: not in a cluster, no KUBECONFIG, no ~/.kube/config; pass --kubeconfig",
        )?,
    };
    kube::Client::try_from(config).context("cannot create the Kubernetes client")
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| format!("wharf-{}", std::process::id()))
}
