//! An Ingress backend to a cluster: the Service port, the protocol and how its
//! certificate is checked, and the fallbacks of error pages.

use crate::stored::ingress::IngressBackend;
use crate::translate::Reason;
use wharf_model::ObjectRef;

use super::*;
use crate::translate::ServicePortRef;

impl VerifiedTls {
    pub(super) fn new(ca_pem: Option<std::sync::Arc<str>>, p: &annotations::ProxySslSetting) -> VerifiedTls {
        VerifiedTls { ca_pem, name: p.name.clone(), sni: p.server_name, depth: p.verify_depth }
    }
}

/// How an Ingress's HTTPS or GRPCS backends' certificates are checked (`proxy-ssl-*`),
/// its Secret read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct VerifiedTls {
    /// The CA certificates (PEM); the system's roots when `None`.
    pub(super) ca_pem: Option<std::sync::Arc<str>>,
    /// The name the certificate must cover, if not `SERVICE.NAMESPACE.svc`.
    pub(super) name: Option<String>,
    /// It is sent as SNI.
    pub(super) sni: bool,
    /// The chain's depth.
    pub(super) depth: u8,
}

impl Translator<'_> {
    /// Resolves a backend to a cluster id, spoken to with `protocol`. Missing Services still
    /// yield a cluster id, so the route answers 503 instead of falling through to another
    /// rule.
    pub(super) fn backend(
        &mut self,
        src: &ObjectRef,
        backend: &IngressBackend,
        protocol: annotations::BackendProtocol,
        verified: Option<&VerifiedTls>,
    ) -> Option<String> {
        let Some(svc) = &backend.service else {
            self.diag(
                src,
                Reason::UnsupportedBackend,
                "resource backends are not supported; use a Service backend".into(),
            );
            return None;
        };
        let ns = src.namespace.clone();
        let port = match &svc.port {
            Some(p) => match (p.number, &p.name) {
                (Some(n), _) => ServicePortRef::Number(n),
                (None, Some(name)) => ServicePortRef::Name(name.to_string()),
                (None, None) => {
                    self.diag(
                        src,
                        Reason::ServicePortNotFound,
                        format!("backend Service {} has no port; set port.number or port.name", svc.name),
                    );
                    return None;
                }
            },
            None => {
                self.diag(
                    src,
                    Reason::ServicePortNotFound,
                    format!("backend Service {} has no port; set port.number or port.name", svc.name),
                );
                return None;
            }
        };
        let clusters = &mut self.snapshot.clusters;
        let Some(id) = self.backends.cluster_for(&ns, &svc.name, &port, protocol.h2(), src, &mut self.diags, clusters)
        else {
            return Some(crate::translate::backend::cluster_id(&ns, &svc.name, &port));
        };
        match (protocol.tls(), verified) {
            (false, _) => Some(id),
            (true, None) => Some(self.unverified_tls(id, &ns, &svc.name)),
            (true, Some(v)) => Some(self.checked_tls(id, &ns, &svc.name, v)),
        }
    }

    /// The `proxy-ssl-*` check of the Ingress `src`, its Secret's `ca.crt` read; `Err`
    /// (why, reported) when it cannot be.
    pub(super) fn verified_tls(
        &mut self,
        src: &ObjectRef,
        p: &annotations::ProxySslSetting,
        secrets: &tls::Secrets,
    ) -> Result<Option<VerifiedTls>, String> {
        let ca_pem = match &p.secret {
            None => None,
            Some((ns, name)) => {
                let pem = secrets.get(ns, name).and_then(|s| s.get(crate::well_known::CA_CRT));
                let why = match pem.map(|pem| wharf_model::parse_ca_bundle(pem).map(|_| pem)) {
                    Some(Ok(pem)) => match std::str::from_utf8(pem) {
                        Ok(text) => return Ok(Some(VerifiedTls::new(Some(text.into()), p))),
                        Err(_) => format!("proxy-ssl-secret {ns}/{name}: ca.crt is not text"),
                    },
                    Some(Err(e)) => format!("proxy-ssl-secret {ns}/{name}: {e}"),
                    None => format!("proxy-ssl-secret {ns}/{name} does not exist or has no key \"ca.crt\""),
                };
                self.diag(
                    src,
                    Reason::ProxySslSecretInvalid,
                    format!("{why}; requests are answered 503 until it is fixed"),
                );
                return Err(why);
            }
        };
        Ok(Some(VerifiedTls::new(ca_pem, p)))
    }

    /// The cluster `id` of Service `ns/name`, encrypted, its certificate checked as `v`
    /// says. Ingresses checking alike share it.
    pub(super) fn checked_tls(&mut self, id: String, ns: &str, name: &str, v: &VerifiedTls) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        v.hash(&mut h);
        let tls_id = format!("{id}/tls-{:016x}", h.finish());
        let clusters = &mut self.snapshot.clusters;
        if let (false, Some(plain)) = (clusters.contains_key(&tls_id), clusters.get(&id)) {
            let tls = wharf_model::UpstreamTls {
                server_name: v.name.clone().unwrap_or_else(|| format!("{name}.{ns}.svc")),
                ca_pem: v.ca_pem.clone(),
                subject_alt_names: Vec::new(),
                unverified: false,
                no_sni: !v.sni,
                verify_depth: Some(v.depth),
            };
            let cluster = wharf_model::Cluster { tls: Some(tls), ..plain.clone() };
            clusters.insert(tls_id.clone(), cluster);
        }
        tls_id
    }

    /// The cluster of `default-backend` Service `name` in the namespace of `src`: its first
    /// port, as ingress-nginx takes it, over HTTP.
    pub(super) fn fallback_cluster(&mut self, src: &ObjectRef, name: &str) -> Option<String> {
        let ns = src.namespace.clone();
        let Some(port) = self.backends.first_port(&ns, name) else {
            let msg = format!(
                "default-backend Service {ns}/{name} does not exist or has no port; the Ingress is served without \
                 it until it does"
            );
            self.diag(src, Reason::ServiceNotFound, msg);
            return None;
        };
        let clusters = &mut self.snapshot.clusters;
        self.backends.cluster_for(&ns, name, &ServicePortRef::Number(port), false, src, &mut self.diags, clusters)
    }

    /// The cluster `id` of Service `ns/name`, encrypted with the certificate not checked
    /// (ingress-nginx's HTTPS and GRPCS backends).
    pub(super) fn unverified_tls(&mut self, id: String, ns: &str, name: &str) -> String {
        let clusters = &mut self.snapshot.clusters;
        let tls_id = format!("{id}/tls-unverified");
        if let (false, Some(plain)) = (clusters.contains_key(&tls_id), clusters.get(&id)) {
            let tls = wharf_model::UpstreamTls {
                server_name: format!("{name}.{ns}.svc"),
                ca_pem: None,
                subject_alt_names: Vec::new(),
                unverified: true,
                no_sni: true,
                verify_depth: None,
            };
            let cluster = wharf_model::Cluster { tls: Some(tls), ..plain.clone() };
            clusters.insert(tls_id.clone(), cluster);
        }
        tls_id
    }
}
