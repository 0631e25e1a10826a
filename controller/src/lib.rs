//! Wharf's controller side: Kubernetes objects in, config snapshots and diagnostics out.
//!
//! [`translate`] is pure: it takes a [`World`] of objects and returns a
//! [`wharf_model::Snapshot`] plus the problems users must hear about. The standalone
//! loader ([`files`]) and the API-server watches both feed it.

pub mod acme;
pub mod changes;
pub mod duration;
pub mod files;
mod hashing;
pub mod k8s;
pub mod kinds;
pub mod migrate;
pub mod nginx_configmap;
pub mod publish;
pub mod stored;
pub mod translate;
pub mod well_known;

pub use kinds::World;
pub use translate::{translate, Diagnostic, Options, ServicePortRef, TcpService, Translation};

/// Logs each diagnostic once per appearance (not on every rebuild).
#[derive(Debug, Default)]
pub struct DiagnosticLog {
    reported: std::collections::BTreeSet<Diagnostic>,
}

impl DiagnosticLog {
    /// Logs the diagnostics not logged last time, as warnings naming the object.
    pub fn report(&mut self, diagnostics: &[Diagnostic]) {
        for d in diagnostics {
            if !self.reported.contains(d) {
                tracing::warn!(object = %d.object, reason = d.reason.as_str(), "{}", d.message);
            }
        }
        self.reported = diagnostics.iter().cloned().collect();
    }
}

/// The controller's clock: now, in Unix seconds.
pub fn unix_now() -> i64 {
    wharf_model::tls::unix_seconds(std::time::SystemTime::now())
}
