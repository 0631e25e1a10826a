//! An Ingress's `spec.tls`: hosts to the certificates of its own namespace's Secrets; the
//! oldest Ingress wins a host.

use crate::translate::Reason;
use std::collections::BTreeMap;

use crate::translate::tls::Secrets;
use wharf_model::tls;
use wharf_model::{Host, ObjectRef, TlsHost};

use super::Translator;

/// TLS hosts claimed so far; the oldest Ingress wins a host.
#[derive(Default)]
pub(super) struct TlsHosts {
    pub(super) hosts: BTreeMap<Host, (String, ObjectRef)>,
}

impl TlsHosts {
    pub(super) fn add(
        &mut self,
        t: &mut Translator<'_>,
        src: &ObjectRef,
        secrets: &Secrets<'_>,
        secret_name: Option<&str>,
        hosts: &[&str],
    ) {
        let Some(secret_name) = secret_name.filter(|s| !s.is_empty()) else {
            t.diag(
                src,
                Reason::SecretNotFound,
                format!(
                    "spec.tls entry for {} has no secretName; those hosts get the default certificate",
                    hosts.join(", ")
                ),
            );
            return;
        };
        if secret_name.contains('/') {
            t.diag(src, Reason::SecretInOtherNamespace, format!("spec.tls secretName {secret_name:?} points into another namespace; an Ingress may only use Secrets of its own namespace ({}); copy the Secret there", src.namespace));
            return;
        }
        let Some(id) = secrets.certificate(&src.namespace, secret_name, src, &mut t.diags, &mut t.snapshot) else {
            return;
        };
        let dns_names = t.snapshot.certificates.get(&id).map(|c| c.dns_names.clone()).unwrap_or_default();
        for raw in hosts {
            let host = match Host::parse(raw) {
                Ok(h) => h,
                Err(e) => {
                    t.diag(src, Reason::InvalidHost, format!("spec.tls host skipped: {e}"));
                    continue;
                }
            };
            if let Some((winner_cert, winner)) = self.hosts.get(&host) {
                if winner_cert != &id {
                    t.diag(src, Reason::TlsHostConflict, format!("TLS host {host} is already served with Secret {winner_cert} by {winner}, which is older; Secret {id} is not used for it"));
                }
                continue;
            }
            if !tls::covers(&dns_names, &host.to_string()) {
                t.diag(src, Reason::CertificateHostMismatch, format!("the certificate in Secret {id} does not cover host {host} (it covers: {}); clients will reject it", dns_names.join(", ")));
            }
            self.hosts.insert(host, (id.clone(), src.clone()));
        }
    }

    pub(super) fn into_hosts(self) -> Vec<TlsHost> {
        self.hosts.into_iter().map(|(host, (certificate, _))| TlsHost { host, certificate }).collect()
    }
}
