//! TLS sections: Secrets to validated certificates, hosts to certificates.

use crate::hashing::HashMap;
use crate::translate::Reason;

use crate::stored::Secret;
use crate::well_known::{TLS_CRT, TLS_KEY};
use wharf_model::tls::CertError;

use super::Diagnostic;
use wharf_model::{Certificate, ObjectRef, Snapshot};

/// The Secrets of a [`super::World`], validated on first use.
pub(super) struct Secrets<'a> {
    by_name: crate::kinds::ByKey<'a, Secret>,
    previous: Option<&'a Snapshot>,
    now: i64,
    checked: std::cell::RefCell<HashMap<String, Result<Certificate, CertError>>>,
    /// The Secrets looked up.
    pub(super) reads: super::reads::Recorder,
}

impl<'a> Secrets<'a> {
    pub(super) fn new(by_name: crate::kinds::ByKey<'a, Secret>, previous: Option<&'a Snapshot>, now: i64) -> Self {
        Secrets { by_name, previous, now, checked: Default::default(), reads: Default::default() }
    }

    /// Secret `ns/name`, of any type.
    pub(super) fn get(&self, ns: &str, name: &str) -> Option<&'a Secret> {
        self.reads.read(|| crate::changes::Read::Secret((ns.to_owned(), name.to_owned())));
        self.by_name.get(ns, name)
    }

    /// Adds the certificate of Secret `ns/name` to the snapshot and returns its id. When the
    /// Secret is bad, reports why on `src` and falls back to the certificate the previous
    /// snapshot served from it, if any.
    pub(super) fn certificate(
        &self,
        ns: &str,
        name: &str,
        src: &ObjectRef,
        diags: &mut Vec<Diagnostic>,
        snapshot: &mut Snapshot,
    ) -> Option<String> {
        let id = format!("{ns}/{name}");
        let Some(secret) = self.get(ns, name) else {
            diags.push(Diagnostic {
                object: src.clone(),
                reason: Reason::SecretNotFound,
                message: format!("TLS Secret {id} does not exist; its hosts get the default certificate until it does"),
            });
            return None;
        };
        let mut checked = self.checked.borrow_mut();
        if !checked.contains_key(&id) {
            let result = self.validate(&id, secret);
            checked.insert(id.clone(), result);
        }
        match checked.get(&id)? {
            Ok(cert) => {
                if !snapshot.certificates.contains_key(&id) {
                    snapshot.certificates.insert(id.clone(), cert.clone());
                }
                Some(id)
            }
            Err(err) => {
                let last_good = self.previous.and_then(|p| p.certificates.get(&id));
                let fallback = match last_good {
                    Some(_) => "the last good certificate from this Secret keeps serving",
                    None => "its hosts get the default certificate",
                };
                diags.push(Diagnostic {
                    object: src.clone(),
                    reason: Reason::from(err),
                    message: format!("TLS Secret {id}: {err}; {fallback}"),
                });
                let cert = last_good?.clone();
                snapshot.certificates.insert(id.clone(), cert);
                Some(id)
            }
        }
    }

    /// The certificate of Secret `id`, if it has not expired: parsed when it was stored,
    /// or (read from a file) parsed now.
    fn validate(&self, id: &str, secret: &Secret) -> Result<Certificate, CertError> {
        let cert = match (&secret.certificate, secret.get(TLS_CRT), secret.get(TLS_KEY)) {
            (Some(parsed), _, _) => parsed.clone()?,
            (None, Some(crt), Some(key)) => match self.previous.and_then(|p| p.certificates.get(id)) {
                // Unchanged Secret: reuse the earlier validation, only the clock moved.
                Some(prev) if prev.sha256 == Certificate::digest(crt, key) => prev.clone(),
                _ => Certificate::from_pem(crt, key, i64::MIN)?,
            },
            (None, crt, _) => {
                let key = if crt.is_none() { TLS_CRT } else { TLS_KEY };
                return Err(CertError::NotTls { key, secret_type: secret.type_.to_string() });
            }
        };
        if cert.not_after < self.now {
            return Err(CertError::Expired { not_after: cert.not_after });
        }
        Ok(cert)
    }
}
