//! `ssl-passthrough`: an Ingress's hosts relayed by SNI, TLS unopened.

use crate::stored::ingress::Ingress;
use crate::translate::Reason;
use wharf_model::{Host, ObjectRef, SniRoute};

use super::*;

impl Translator<'_> {
    pub(super) fn passthrough(&mut self, ing: &Ingress, src: &ObjectRef, routes: &mut RouteTable) {
        let Some(spec) = &ing.spec else { return };
        for rule in spec.rules.iter().flatten() {
            let host = match rule.host.as_deref().map(Host::parse) {
                Some(Ok(h)) => h,
                Some(Err(e)) => {
                    self.diag(src, Reason::InvalidHost, format!("passthrough rule skipped: {e}"));
                    continue;
                }
                None => {
                    self.diag(
                        src,
                        Reason::InvalidHost,
                        "passthrough rules need a host: the SNI is the only thing to route on".into(),
                    );
                    continue;
                }
            };
            if !self.owns(src, &host, "passthrough host") {
                continue;
            }
            let Some(path) = rule.http.as_ref().and_then(|h| h.paths.first()) else {
                self.diag(
                    src,
                    Reason::UnsupportedBackend,
                    format!("passthrough host {host} has no path with a backend"),
                );
                continue;
            };
            let Some(cluster) = self.backend(src, &path.backend, annotations::BackendProtocol::Http, None) else {
                continue;
            };
            if let Some(winner) = routes.passthrough.get(&host) {
                let msg = format!(
                    "passthrough host {host} is already served by {}, which is older; this rule is ignored",
                    winner.source
                );
                self.diag(src, Reason::HostPathConflict, msg);
                continue;
            }
            routes.passthrough.insert(host.clone(), SniRoute::passthrough(host, &cluster, src.clone()));
        }
    }
}
