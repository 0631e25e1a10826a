//! Translations to the data plane, the same way for files and for the API server.

use std::sync::Arc;

use wharf_model::Snapshot;

use crate::{DiagnosticLog, Translation};

/// What [`Publisher::publish`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// The snapshot equals the one served: nothing to do.
    Unchanged,
    /// The data plane serves it now, as this config version.
    Applied(u64),
    /// The data plane refused it; the served snapshot stays.
    Refused(Refusal),
}

/// Why the data plane refused a snapshot: its error's stable reason and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// The data plane error's `reason()` (a log field and metric label).
    pub reason: &'static str,
    /// What was wrong.
    pub message: String,
}

/// The data plane's apply: the config version, or why the snapshot was refused.
pub type Apply = Box<dyn FnMut(Arc<Snapshot>) -> Result<u64, Refusal> + Send>;

/// Hands translations to the data plane. A snapshot equal to the served one is not applied
/// again; one the data plane refuses is logged and the served one keeps serving. The
/// served snapshot is what the next translation builds on (`translate`'s `previous`: the
/// last good certificates come from it), so a refused snapshot never becomes that base.
pub struct Publisher {
    apply: Apply,
    served: Option<Arc<Snapshot>>,
    log: DiagnosticLog,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").field("served", &self.served.is_some()).finish_non_exhaustive()
    }
}

impl Publisher {
    /// A publisher applying through `apply`.
    pub fn new(apply: Apply) -> Publisher {
        Publisher { apply, served: None, log: DiagnosticLog::default() }
    }

    /// The snapshot the data plane serves (the base of the next translation).
    pub fn served(&self) -> Option<&Snapshot> {
        self.served.as_deref()
    }

    /// Logs the translation's new diagnostics and applies its snapshot if it changed.
    pub fn publish(&mut self, t: &Translation) -> Published {
        self.log.report(&t.diagnostics);
        if self.served.as_ref() == Some(&t.snapshot) {
            return Published::Unchanged;
        }
        match (self.apply)(Arc::clone(&t.snapshot)) {
            Ok(version) => {
                tracing::info!(
                    version,
                    ingresses = t.ingresses.len(),
                    hosts = t.snapshot.virtual_hosts.len(),
                    certificates = t.snapshot.certificates.len(),
                    "config applied"
                );
                self.served = Some(Arc::clone(&t.snapshot));
                Published::Applied(version)
            }
            Err(e) => {
                tracing::error!(reason = e.reason, error = %e, "config rejected; the last good config keeps serving");
                Published::Refused(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use wharf_model::ObjectRef;

    fn translation(default_certificate: Option<&str>) -> Translation {
        Translation {
            snapshot: Arc::new(Snapshot {
                default_certificate: default_certificate.map(str::to_owned),
                ..Default::default()
            }),
            diagnostics: Vec::new(),
            ingresses: vec![ObjectRef::new("Ingress", "web", "a")].into(),
            ..Default::default()
        }
    }

    fn refused() -> Refusal {
        Refusal { reason: "missing_certificate", message: "refused".into() }
    }

    #[test]
    fn applies_changes_once_and_a_refused_snapshot_never_becomes_the_base() {
        let applied = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&applied);
        let mut p = Publisher::new(Box::new(move |s: Arc<Snapshot>| {
            let mut seen = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            seen.push(s.default_certificate.clone());
            match s.default_certificate.as_deref() {
                Some("bad") => Err(refused()),
                _ => Ok(seen.len() as u64),
            }
        }));
        assert_eq!(p.served(), None);
        assert_eq!(p.publish(&translation(None)), Published::Applied(1));
        assert_eq!(p.publish(&translation(None)), Published::Unchanged);
        assert_eq!(p.publish(&translation(Some("bad"))), Published::Refused(refused()));
        assert_eq!(p.served(), Some(&*translation(None).snapshot), "the refused one is not served");
        assert_eq!(p.publish(&translation(Some("bad"))), Published::Refused(refused()), "tried again");
        assert_eq!(p.publish(&translation(Some("good"))), Published::Applied(4));
        assert_eq!(p.served(), Some(&*translation(Some("good")).snapshot));
        let calls = applied.lock().map(|v| v.len()).unwrap_or_default();
        assert_eq!(calls, 4, "the unchanged one was not applied");
    }

    #[test]
    fn debug_output_says_whether_something_is_served() {
        let mut p = Publisher::new(Box::new(|_| Ok(1)));
        assert_eq!(format!("{p:?}"), "Publisher { served: false, .. }");
        p.publish(&translation(None));
        assert_eq!(format!("{p:?}"), "Publisher { served: true, .. }");
    }
}
