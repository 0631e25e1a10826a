//! The whole snapshot from the Ingresses' parts and the rest of the world: the default
//! certificate, ACME challenges, TCP services, Istio's passthrough names, Gateway API, and
//! the edge Gateway's hosts weighed with the Ingresses'.

use std::sync::Arc;

use wharf_model::{Host, ObjectRef, Snapshot, SniRoute, TcpRoute};

use super::backend::Backends;
use super::lookups::Lookups;
use super::{acme, edge, gateway_api, Diagnostic, ServicePortRef, Translation};
use crate::hashing::HashSet;
use crate::World;

/// Adds to `snapshot`, which holds the Ingresses' part, what the rest of `world` and the
/// options make: the default certificate, ACME challenges, TCP services, Istio's
/// passthrough names and Gateway API.
pub(super) fn finish(
    world: &World,
    l: &Lookups<'_>,
    mut snapshot: Snapshot,
    mut diags: Vec<Diagnostic>,
    mut demands: acme::Demands,
    ingresses: imbl::OrdSet<ObjectRef>,
) -> Translation {
    let opts = l.opts;
    if let Some((ns, name)) = &opts.default_certificate {
        let source = ObjectRef::new("Secret", ns, name);
        if let Some(id) = l.secrets.certificate(ns, name, &source, &mut diags, &mut snapshot) {
            snapshot.default_certificate = Some(id);
        }
    }
    if let Some(namespace) = &opts.acme.challenge_namespace {
        snapshot.acme = acme::challenges(&world.secrets, namespace, &mut diags);
    }
    for tcp in &opts.tcp_services {
        let source = ObjectRef::new("Service", &tcp.namespace, &tcp.service);
        if let Some(cluster) =
            l.backends.cluster(&tcp.namespace, &tcp.service, &tcp.port, &source, &mut diags, &mut snapshot.clusters)
        {
            snapshot.tcp_routes.push(TcpRoute { port: tcp.listen_port, cluster });
        }
    }
    if opts.auto_passthrough {
        auto_passthrough(world, &l.backends, &opts.cluster_domain, &mut snapshot);
    }
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(opts.now).unwrap_or_default(),
    );
    let mut asks = gateway_api::AcmeAsks { opts: &opts.acme, demands: &mut demands, diags: &mut diags };
    let mut gateway_status =
        gateway_api::translate(world, &opts.gateway, &l.backends, &l.secrets, &mut snapshot, &now, &mut asks);
    let lost = edge::share(world, &opts.ownership, (&l.record, l.previous), &ingresses, &mut snapshot);
    edge::refuse_routes(&lost.diags, &snapshot, &mut gateway_status);
    for (host, ns) in &lost.hosts {
        // Neither the certificate of the namespace that lost the host nor its ACME order.
        let theirs = snapshot.tls_hosts.get(host).is_some_and(|h| h.certificate.split('/').next() == Some(ns));
        if theirs {
            snapshot.tls_hosts.remove(host);
        }
        if let Host::Exact(name) = host {
            demands.drop_name(ns, name);
        }
    }
    diags.extend(lost.diags);
    diags.extend(edge::overridden(&snapshot));

    diags.sort();
    diags.dedup();
    Translation {
        snapshot: Arc::new(snapshot),
        diagnostics: diags,
        ingresses,
        gateway_status,
        acme: demands.into_vec(),
    }
}

/// Istio's AUTO_PASSTHROUGH names (`outbound_.PORT_._.SERVICE.NAMESPACE.svc.DOMAIN`) for
/// every port of every Service with endpoints, relayed by SNI.
fn auto_passthrough(world: &World, backends: &Backends<'_>, cluster_domain: &str, snapshot: &mut Snapshot) {
    let mut seen = HashSet::default();
    for svc in &world.services {
        let (ns, name) = (&*svc.namespace, &*svc.name);
        let src = ObjectRef::new("Service", ns, name);
        for port in &svc.ports {
            let pref = ServicePortRef::Number(port.port);
            let mut ignored = Vec::new();
            let Some(cluster) = backends.cluster(ns, name, &pref, &src, &mut ignored, &mut snapshot.clusters) else {
                continue;
            };
            let sni = format!("outbound_.{}_._.{name}.{ns}.svc.{cluster_domain}", port.port);
            if seen.insert(sni.clone()) {
                snapshot.passthrough.push(SniRoute::passthrough(Host::Exact(sni), &cluster, src.clone()));
            }
        }
    }
}
