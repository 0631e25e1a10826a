//! Kubernetes objects to the snapshot the data plane serves, as a pure function: the
//! entry point and what translation is given and gives back. Below it, the lookups every
//! part shares (Secrets, backends, grants, host owners); the Ingress and Gateway API
//! translators; the edge Gateway weighed with the Ingresses; the assembly of a whole
//! snapshot; and incremental translation, which drives them all.

pub mod acme;
mod assemble;
pub(crate) mod backend;
mod backend_tls;
mod class;
pub mod edge;
pub mod gateway_api;
pub mod grants;
pub mod incremental;
pub mod ingress;
mod lookups;
pub mod owners;
mod reads;
pub mod reason;
mod tls;

use std::sync::Arc;

use wharf_model::{ObjectRef, Snapshot};

use crate::World;
pub use backend::ServicePortRef;
use ingress::annotations;
pub use reason::Reason;

/// A Service whose traffic a plain TCP port forwards to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpService {
    /// Gateway port, e.g. 31400.
    pub listen_port: u16,
    /// Namespace of the Service.
    pub namespace: String,
    /// Service name.
    pub service: String,
    /// Service port (number or name).
    pub port: ServicePortRef,
}

/// Settings that shape translation.
#[derive(Debug, Clone)]
pub struct Options {
    /// `spec.controller` of IngressClasses that are ours.
    pub controller_name: String,
    /// Value of the legacy `kubernetes.io/ingress.class` annotation that selects us.
    pub ingress_class: String,
    /// `namespace/name` of the Secret served when no TLS host matches.
    pub default_certificate: Option<(String, String)>,
    /// Plain TCP ports and their Services.
    pub tcp_services: Vec<TcpService>,
    /// Serve Istio AUTO_PASSTHROUGH SNI names (`outbound_.<port>_.<subset>_.<fqdn>`) for
    /// every Service on the passthrough port.
    pub auto_passthrough: bool,
    /// Cluster DNS domain for Service FQDNs.
    pub cluster_domain: String,
    /// Mesh trust domain, for the SPIFFE identities of ambient endpoints.
    pub trust_domain: String,
    /// The current time, Unix seconds (for certificate expiry and condition times).
    pub now: i64,
    /// Gateway API settings.
    pub gateway: gateway_api::GatewayOptions,
    /// How Ingress annotations are read.
    pub annotations: annotations::AnnotationOptions,
    /// ACME settings.
    pub acme: AcmeOptions,
    /// Who owns which host: the operator's assignments, and whether Ingresses of several
    /// namespaces may share one.
    pub ownership: owners::Ownership,
}

/// ACME settings of translation.
#[derive(Debug, Clone, Default)]
pub struct AcmeOptions {
    /// The namespace whose Secrets labelled [`ACME_CHALLENGE_LABEL`](crate::well_known::ACME_CHALLENGE_LABEL) hold the ACME
    /// challenges every replica answers (the controller's own); `None`: none are read.
    pub challenge_namespace: Option<String>,
    /// The names of the ACME issuers; none: Wharf orders no certificate.
    pub issuers: Vec<String>,
    /// The issuer of Ingresses that name none (else the first).
    pub default_issuer: Option<String>,
    /// The namespaces whose Secrets certificates may be ordered into; empty: any.
    pub namespaces: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            controller_name: "wharf.dev/ingress-controller".into(),
            ingress_class: "wharf".into(),
            default_certificate: None,
            tcp_services: Vec::new(),
            auto_passthrough: false,
            cluster_domain: "cluster.local".into(),
            trust_domain: "cluster.local".into(),
            now: 0,
            gateway: gateway_api::GatewayOptions::default(),
            annotations: annotations::AnnotationOptions::default(),
            acme: AcmeOptions::default(),
            ownership: owners::Ownership::default(),
        }
    }
}

/// Something a user should be told about an object: becomes an Event and a log line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Diagnostic {
    /// The object at fault (or affected).
    pub object: ObjectRef,
    /// Why it was told (the Event's reason).
    pub reason: Reason,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// Why an object, or a part of it, is not accepted: the reason of the status condition
/// that turns False (a Gateway API condition reason, e.g. `UnsupportedValue`) and a message
/// naming the field and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The condition reason.
    pub reason: &'static str,
    /// What and why, naming the field.
    pub message: String,
}

impl Refused {
    /// A refusal for `reason`, told as `message`.
    pub fn new(reason: &'static str, message: String) -> Refused {
        Refused { reason, message }
    }
}

/// The result of [`translate`].
#[derive(Debug, Clone, Default)]
pub struct Translation {
    /// The snapshot to serve (shared with the data plane once applied).
    pub snapshot: Arc<Snapshot>,
    /// Problems found, in a stable order.
    pub diagnostics: Vec<Diagnostic>,
    /// The Ingresses of our class (their status is ours to write).
    pub ingresses: imbl::OrdSet<ObjectRef>,
    /// The status Gateway API objects of our controller should show.
    pub gateway_status: gateway_api::Statuses,
    /// The certificates to obtain from ACME.
    pub acme: Vec<acme::Demand>,
}

/// Builds a snapshot from the objects in `world`.
///
/// `previous` is the snapshot currently served: when a Secret turns bad, the certificate
/// it held there keeps serving.
pub fn translate(world: &World, opts: &Options, previous: Option<&Snapshot>) -> Translation {
    incremental::Incremental::whole().translate(world, opts, previous, &crate::changes::Changes::everything())
}

#[cfg(test)]
mod gateway_tests;
#[cfg(test)]
mod owners_tests;
#[cfg(test)]
mod tests;
