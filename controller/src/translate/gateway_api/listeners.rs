//! A Gateway's listeners: protocol, hostname, the routes they admit, and their
//! certificates (from Secrets or ACME).

use crate::translate::Reason;
use std::collections::BTreeMap;

use wharf_gateway_api::gateways::{
    Gateway, GatewayListeners, GatewayListenersAllowedRoutesKinds,
    GatewayListenersAllowedRoutesNamespacesFrom as FromNamespaces,
    GatewayListenersAllowedRoutesNamespacesSelector as Selector, GatewayListenersTlsMode,
    GatewayStatusListenersSupportedKinds,
};
use wharf_model::{Host, ObjectRef, PortProtocol, Snapshot};

use crate::translate::grants::{permitted, RefFrom, RefTo, GATEWAY_GROUP};
use crate::translate::tls::Secrets;
use crate::translate::Diagnostic;
use crate::World;

use super::*;
use crate::translate::Refused;

/// The listeners of `g`, each with what it serves and why it is not ready, if it is not.
pub(super) fn listeners<'a>(
    g: &'a Gateway,
    world: &World,
    secrets: &Secrets<'_>,
    snapshot: &mut Snapshot,
    edge: Option<&EdgeGateway>,
    acme: &mut AcmeAsks<'_>,
) -> Vec<Listener<'a>> {
    let ns = g.metadata.namespace.as_deref().unwrap_or("default");
    let gref = object_ref(g);
    let mut out: Vec<Listener<'a>> = g
        .spec
        .listeners
        .iter()
        .map(|l| {
            let tls_mode = l.tls.as_ref().and_then(|t| t.mode.clone()).unwrap_or(GatewayListenersTlsMode::Terminate);
            let (protocol, unsupported) = match (protocol(l), edge) {
                (Ok(p), Some(e)) => match e.refuse(l, p) {
                    Some(why) => (None, Some(why)),
                    None => (Some(p), None),
                },
                (Ok(p), None) => (Some(p), None),
                (Err(why), _) => (None, Some(why)),
            };
            let host = match l.hostname.as_deref() {
                None | Some("") => Host::Any,
                Some(h) => Host::parse_gateway(h).unwrap_or(Host::Any),
            };
            let (kinds, bad_kinds) = route_kinds(l, protocol);
            let terminates = match protocol {
                Some(PortProtocol::Https) => true,
                Some(PortProtocol::Passthrough) => tls_mode == GatewayListenersTlsMode::Terminate,
                _ => false,
            };
            let mut listener = Listener {
                spec: l,
                protocol,
                unsupported,
                host,
                conflict: None,
                terminates,
                certificates: Vec::new(),
                bad_ref: None,
                kinds,
                bad_kinds,
                attached: 0,
            };
            if terminates {
                certificates(&mut listener, ns, &gref, world, secrets, snapshot, acme);
            }
            listener
        })
        .collect();
    conflicts(&mut out);
    out
}

/// The port protocol of a listener's protocol, or why it is not supported.
fn protocol(l: &GatewayListeners) -> Result<PortProtocol, Refused> {
    match l.protocol.as_str() {
        "HTTP" => Ok(PortProtocol::Http),
        "HTTPS" => Ok(PortProtocol::Https),
        "TLS" => Ok(PortProtocol::Passthrough),
        "TCP" => Ok(PortProtocol::Tcp),
        other => Err(Refused::new(
            "UnsupportedProtocol",
            format!("protocol {other} is not supported yet (HTTP, HTTPS, TLS and TCP are)"),
        )),
    }
}

/// The route kinds a listener of `protocol` admits: those `allowedRoutes.kinds` asks for
/// that the protocol supports (all it supports when it asks for none), and a message
/// naming those asked for that it does not.
fn route_kinds(
    l: &GatewayListeners,
    protocol: Option<PortProtocol>,
) -> (Vec<GatewayStatusListenersSupportedKinds>, Option<String>) {
    let supported: &[&str] = match protocol {
        Some(PortProtocol::Passthrough) => &[TLS_ROUTE],
        Some(PortProtocol::Tcp) => &[TCP_ROUTE],
        Some(_) => &[HTTP_ROUTE, GRPC_ROUTE],
        None => &[],
    };
    let Some(asked) = l.allowed_routes.as_ref().and_then(|a| a.kinds.as_ref()) else {
        return (supported.iter().map(|k| kind(k)).collect(), None);
    };
    let group = |k: &GatewayListenersAllowedRoutesKinds| k.group.as_deref().unwrap_or(GATEWAY_GROUP).to_owned();
    let ok: Vec<_> = asked
        .iter()
        .filter(|k| group(k) == GATEWAY_GROUP && supported.contains(&k.kind.as_str()))
        .map(|k| kind(&k.kind))
        .collect();
    let bad: Vec<String> = asked
        .iter()
        .filter(|k| !ok.iter().any(|o| o.kind == k.kind) || group(k) != GATEWAY_GROUP)
        .map(|k| format!("{}/{}", group(k), k.kind))
        .collect();
    let bad = (!bad.is_empty()).then(|| {
        format!(
            "route kinds {} are not supported on a {} listener (supported: {})",
            bad.join(", "),
            l.protocol,
            supported.join(", ")
        )
    });
    (ok, bad)
}

/// Marks the listeners that conflict. Listeners sharing a port must share its protocol
/// and differ in hostname. TLS listeners of both modes share a port: the SNI decides
/// whether a connection is passed through or terminated.
fn conflicts(out: &mut [Listener<'_>]) {
    let mode = |l: &Listener<'_>| l.spec.protocol.clone();
    let mut by_port: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for (i, l) in out.iter().enumerate() {
        by_port.entry(l.spec.port).or_default().push(i);
    }
    for idx in by_port.values() {
        let first = mode(&out[idx[0]]);
        if idx.iter().any(|i| mode(&out[*i]) != first) {
            idx.iter().for_each(|i| out[*i].conflict = Some("ProtocolConflict"));
            continue;
        }
        for (n, i) in idx.iter().enumerate() {
            let dup = idx.iter().enumerate().any(|(m, j)| m != n && out[*j].host == out[*i].host);
            if dup {
                out[*i].conflict = Some("HostnameConflict");
            }
        }
    }
}

pub(super) fn kind(k: &str) -> GatewayStatusListenersSupportedKinds {
    GatewayStatusListenersSupportedKinds { group: Some(GATEWAY_GROUP.into()), kind: k.into() }
}

/// Resolves the certificateRefs of a listener that terminates TLS into snapshot
/// certificates, and adds what it asks of ACME.
pub(super) fn certificates(
    l: &mut Listener<'_>,
    ns: &str,
    gref: &ObjectRef,
    world: &World,
    secrets: &Secrets<'_>,
    snapshot: &mut Snapshot,
    acme: &mut AcmeAsks<'_>,
) {
    let tls = l.spec.tls.as_ref();
    if tls.and_then(|t| t.mode.as_ref()) == Some(&GatewayListenersTlsMode::Passthrough) {
        l.bad_ref = Some(Refused::new(
            "InvalidCertificateRef",
            "an HTTPS listener terminates TLS; use a TLS listener for passthrough".into(),
        ));
        return;
    }
    let refs = tls.and_then(|t| t.certificate_refs.as_deref()).unwrap_or_default();
    if refs.is_empty() {
        l.bad_ref = Some(Refused::new(
            "InvalidCertificateRef",
            format!("a {} listener that terminates TLS needs tls.certificateRefs", l.spec.protocol),
        ));
    }
    for r in refs {
        let group = r.group.as_deref().unwrap_or("");
        let kind = r.kind.as_deref().unwrap_or("Secret");
        let rns = r.namespace.as_deref().unwrap_or(ns);
        let fail = |reason, message: String| Some(Refused { reason, message });
        if !group.is_empty() || kind != "Secret" {
            l.bad_ref = l.bad_ref.take().or_else(|| {
                fail(
                    "InvalidCertificateRef",
                    format!("certificateRef {group}/{kind} {}: only core Secrets are supported", r.name),
                )
            });
            continue;
        }
        let from = RefFrom { group: GATEWAY_GROUP, kind: "Gateway", namespace: ns };
        let to = RefTo { group: "", kind: "Secret", namespace: rns, name: &r.name };
        if !permitted(&world.reference_grants, from, to) {
            l.bad_ref = l.bad_ref.take().or_else(|| {
                fail(
                    "RefNotPermitted",
                    format!(
                        "certificateRef Secret {rns}/{}: no ReferenceGrant in {rns} lets Gateways of {ns} use it",
                        r.name
                    ),
                )
            });
            continue;
        }
        ask_acme(l, gref, (rns, &r.name), secrets, acme);
        let mut diags = Vec::new();
        // A Secret gone bad keeps serving its last good certificate, if there is one; the
        // listener reports the problem either way.
        if let Some(id) = secrets.certificate(rns, &r.name, gref, &mut diags, snapshot) {
            l.certificates.push(id);
        }
        if let Some(d) = diags.first() {
            let message = format!("certificateRef Secret {rns}/{}: {}", r.name, d.message);
            l.bad_ref = l.bad_ref.take().or_else(|| fail("InvalidCertificateRef", message));
        }
    }
}

/// Adds what listener `l` of Gateway `gref` asks of ACME for its certificateRef `secret`:
/// as for an Ingress TLS entry, with the listener's `tls.options` in place of the
/// annotations and its hostname as the one name.
pub(super) fn ask_acme(
    l: &Listener<'_>,
    gref: &ObjectRef,
    secret: (&str, &str),
    secrets: &Secrets<'_>,
    acme: &mut AcmeAsks<'_>,
) {
    let options = l.spec.tls.as_ref().and_then(|t| t.options.as_ref());
    let option = |key: &str| options.and_then(|o| o.get(key)).map(|v| v.trim());
    let listener = &l.spec.name;
    let mut diag = |reason, message: String| {
        acme.diags.push(Diagnostic { object: gref.clone(), reason, message });
    };
    let asked = match option(ACME_OPTION) {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(other) => {
            let why = format!(
                "listener {listener}: tls option {ACME_OPTION} {other:?} is not \"true\" or \"false\"; it is ignored"
            );
            diag(Reason::InvalidListenerOption, why);
            None
        }
    };
    let issuer = match option(ACME_ISSUER_OPTION) {
        Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') => {
            Some(v)
        }
        Some(other) => {
            let why = format!("listener {listener}: tls option {ACME_ISSUER_OPTION} {other:?} is not the name of an ACME issuer; the default issuer is used");
            diag(Reason::InvalidListenerOption, why);
            None
        }
        None => None,
    };
    let wildcard;
    let hosts: Vec<&str> = match &l.host {
        Host::Exact(h) => vec![h],
        Host::Wildcard(s) | Host::Suffix(s) => {
            wildcard = format!("*{s}");
            vec![&wildcard]
        }
        Host::Any => {
            if asked == Some(true) && !acme.opts.issuers.is_empty() {
                let why = format!("listener {listener} asks for a certificate from ACME but has no hostname, so there is no name to order: set its hostname");
                diag(Reason::AcmeNoHost, why);
            }
            Vec::new()
        }
    };
    acme.demands.add(acme.opts, gref, (asked, issuer), secrets, (secret.0, Some(secret.1)), &hosts, acme.diags);
}

pub(super) fn namespace_allowed(l: &GatewayListeners, gateway_ns: &str, route_ns: &str, world: &World) -> bool {
    let ns = l.allowed_routes.as_ref().and_then(|a| a.namespaces.as_ref());
    match ns.and_then(|n| n.from.as_ref()).unwrap_or(&FromNamespaces::Same) {
        FromNamespaces::Same => gateway_ns == route_ns,
        FromNamespaces::All => true,
        FromNamespaces::Selector => {
            let labels = world
                .namespaces
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(route_ns))
                .and_then(|n| n.metadata.labels.clone())
                .unwrap_or_default();
            ns.and_then(|n| n.selector.as_ref()).is_some_and(|s| selects(s, &labels))
        }
    }
}

/// A label selector (matchLabels and matchExpressions) against `labels`.
pub(super) fn selects(s: &Selector, labels: &BTreeMap<String, String>) -> bool {
    let by_label = s.match_labels.iter().flatten().all(|(k, v)| labels.get(k) == Some(v));
    let by_expr = s.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            "DoesNotExist" => !labels.contains_key(&e.key),
            _ => false,
        }
    });
    by_label && by_expr
}
