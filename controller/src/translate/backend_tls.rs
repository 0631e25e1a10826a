//! BackendTLSPolicy: which Service ports the gateway speaks TLS to, and how it checks
//! their certificates. Pure: the table Gateway API backends are resolved against, and
//! each policy's conditions (written per Gateway whose routes use a targeted Service).
//!
//! A policy targets Services, optionally one port of each (`sectionName`, the port's
//! name). For one Service port, a policy naming the port wins over one naming only the
//! Service; between policies naming the same target the oldest wins and the others are
//! `Conflicted`. A policy whose CA certificates all fail to resolve is not accepted, and
//! the requests for the backends it targets are answered 500, never sent in plain text.

use crate::hashing::HashMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use wharf_gateway_api::backendtlspolicies::{
    BackendTlsPolicy, BackendTlsPolicyValidationSubjectAltNamesType as SanType,
};
use wharf_model::{ObjectRef, SubjectAltName, UpstreamTls};

use super::Refused;
use crate::well_known::CA_CRT;
use crate::World;

/// `(namespace, service, port name)`; the port name `None` for the whole Service.
type Target = (String, String, Option<String>);

/// What a policy says about its targets: TLS settings, or refused (answered 500).
pub(super) type Verdict = Result<UpstreamTls, ()>;

/// A condition that holds (`Ok`), or its reason and message.
type Check = Result<(), Refused>;

/// One policy's conditions, before ancestors are known.
#[derive(Debug, Clone)]
pub(super) struct PolicyState {
    pub(super) oref: ObjectRef,
    pub(super) generation: Option<i64>,
    /// `(namespace, service)` of each Service it targets (held or not): its status goes
    /// to the Gateways whose routes use them.
    pub(super) services: Vec<(String, String)>,
    /// Accepted.
    pub(super) accepted: Check,
    /// ResolvedRefs.
    pub(super) resolved: Check,
}

impl PolicyState {
    /// The policy's `Accepted` and `ResolvedRefs` conditions.
    pub(super) fn conditions(&self, now: &Time) -> Vec<Condition> {
        let cond = |type_: &str, r: &Check, ok_reason: &str, ok_message: &str| {
            let (ok, reason, message) = match r {
                Ok(()) => (true, ok_reason, ok_message.to_owned()),
                Err(Refused { reason, message }) => (false, *reason, message.clone()),
            };
            Condition {
                type_: type_.to_owned(),
                status: if ok { "True" } else { "False" }.to_owned(),
                reason: reason.to_owned(),
                message,
                observed_generation: self.generation,
                last_transition_time: now.clone(),
            }
        };
        vec![
            cond("Accepted", &self.accepted, "Accepted", "TLS to the targeted Service ports is set up"),
            cond("ResolvedRefs", &self.resolved, "ResolvedRefs", "every CA certificate reference resolves"),
        ]
    }
}

/// The policies in force, by target, and every policy's state.
#[derive(Debug, Default)]
pub(super) struct Policies {
    /// The policy holding each target (its name) and what it says.
    targets: HashMap<Target, (String, Verdict)>,
    pub(super) states: Vec<PolicyState>,
}

impl Policies {
    /// Reads every BackendTLSPolicy of `world`, oldest first.
    pub(super) fn new(world: &World) -> Policies {
        let mut policies: Vec<&BackendTlsPolicy> = world.backend_tls_policies.iter().collect();
        policies.sort_by_key(|p| crate::kinds::age_of(*p));
        let mut out = Policies::default();
        for p in policies {
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            let name = p.metadata.name.clone().unwrap_or_default();
            let (verdict, resolved) = validation(p, &ns, world);
            let mut accepted = match &verdict {
                Ok(_) => Ok(()),
                Err(why) => Err(why.clone()),
            };
            let mut mine = Vec::new();
            let mut services = Vec::new();
            for t in &p.spec.target_refs {
                if !t.group.is_empty() || t.kind != "Service" {
                    accepted = accepted.and(Err(Refused::new(
                        "TargetNotFound",
                        format!("targetRef {}/{} {}: only Services can be targeted", t.group, t.kind, t.name),
                    )));
                    continue;
                }
                services.push((ns.clone(), t.name.clone()));
                let target = (ns.clone(), t.name.clone(), t.section_name.clone());
                if let Some((winner, _)) = out.targets.get(&target) {
                    accepted = accepted.and(Err(Refused::new(
                        "Conflicted",
                        format!(
                            "BackendTLSPolicy {ns}/{winner} is older and targets Service {}{} too; this policy is not used for it",
                            t.name,
                            t.section_name.as_deref().map(|s| format!(" port {s}")).unwrap_or_default()
                        ),
                    )));
                    continue;
                }
                mine.push(target);
            }
            for target in mine {
                out.targets.insert(target, (name.clone(), verdict.clone().map_err(|_| ())));
            }
            out.states.push(PolicyState {
                oref: ObjectRef::new("BackendTLSPolicy", &ns, &name),
                generation: p.metadata.generation,
                services,
                accepted,
                resolved,
            });
        }
        out
    }

    /// What applies to port `port` (its name, if it has one) of Service `ns/name`: the
    /// policy naming the port, else the one naming the Service; `None` for plain text.
    pub(super) fn lookup(&self, ns: &str, name: &str, port: Option<&str>) -> Option<&Verdict> {
        if self.targets.is_empty() {
            return None;
        }
        let key = |section: Option<&str>| (ns.to_owned(), name.to_owned(), section.map(str::to_owned));
        port.and_then(|p| self.targets.get(&key(Some(p)))).or_else(|| self.targets.get(&key(None))).map(|(_, v)| v)
    }
}

/// The TLS settings of `p`, or why it cannot be used (the `Accepted` reason), and its
/// `ResolvedRefs` condition.
fn validation(p: &BackendTlsPolicy, ns: &str, world: &World) -> (Result<UpstreamTls, Refused>, Check) {
    let v = &p.spec.validation;
    let mut resolved = Ok(());
    let mut pem = String::new();
    let refs = v.ca_certificate_refs.as_deref().unwrap_or_default();
    for r in refs {
        if !r.group.is_empty() || r.kind != "ConfigMap" {
            resolved = resolved.and(Err(Refused::new(
                "InvalidKind",
                format!("caCertificateRef {}/{} {}: only ConfigMaps are supported", r.group, r.kind, r.name),
            )));
            continue;
        }
        let cm = world
            .config_maps
            .iter()
            .find(|c| c.metadata.namespace.as_deref() == Some(ns) && c.metadata.name.as_deref() == Some(&r.name));
        let data = cm.and_then(|c| c.data.as_ref()).and_then(|d| d.get(CA_CRT));
        let why = match (cm, data) {
            (None, _) => Some(format!("ConfigMap {ns}/{} does not exist", r.name)),
            (Some(_), None) => Some(format!("ConfigMap {ns}/{} has no {CA_CRT}", r.name)),
            (Some(_), Some(text)) => match wharf_model::tls::trust_anchors(text.as_bytes()) {
                0 => Some(format!("ConfigMap {ns}/{}: {CA_CRT} holds no PEM certificate", r.name)),
                _ => {
                    pem.push_str(text);
                    if !text.ends_with('\n') {
                        pem.push('\n');
                    }
                    None
                }
            },
        };
        if let Some(why) = why {
            resolved = resolved.and(Err(Refused::new("InvalidCACertificateRef", format!("caCertificateRef {why}"))));
        }
    }
    let ca_pem = match (v.well_known_ca_certificates.as_deref(), refs.is_empty(), pem.is_empty()) {
        (Some("System"), true, _) => None,
        (Some(other), true, _) => {
            let why = format!("wellKnownCACertificates {other:?} is not supported (System is)");
            return (Err(Refused::new("Invalid", why)), resolved);
        }
        (_, false, false) => Some(Arc::<str>::from(pem)),
        (_, false, true) => {
            let why = "none of the caCertificateRefs holds a usable CA certificate; requests for the targeted backends get 500";
            return (Err(Refused::new("NoValidCACertificate", why.to_owned())), resolved);
        }
        (None, true, _) => {
            let why = "neither caCertificateRefs nor wellKnownCACertificates is set";
            return (Err(Refused::new("Invalid", why.to_owned())), resolved);
        }
    };
    let sans = v
        .subject_alt_names
        .iter()
        .flatten()
        .filter_map(|s| match s.r#type {
            SanType::Hostname => s.hostname.clone().map(SubjectAltName::Dns),
            SanType::Uri => s.uri.clone().map(SubjectAltName::Uri),
        })
        .collect();
    let tls = UpstreamTls {
        server_name: v.hostname.clone(),
        ca_pem,
        subject_alt_names: sans,
        unverified: false,
        no_sni: false,
        verify_depth: None,
    };
    (Ok(tls), resolved)
}
