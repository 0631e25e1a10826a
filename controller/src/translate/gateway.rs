//! Gateway API: the GatewayClasses of our controller, their Gateways and the HTTPRoutes
//! attached to them, as Gateway ports in the snapshot, and the status each object should
//! show. Pure, like the Ingress translation; `k8s::gateway_status` writes the status.
//!
//! Each Gateway is served on its own address (see [`AddressPool`]), so that a route
//! attached to one Gateway is never served through another, even when both listen on the
//! same port.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::hashing::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use wharf_gateway_api::backendtlspolicies::{
    BackendTlsPolicyStatusAncestors, BackendTlsPolicyStatusAncestorsAncestorRef,
};
use wharf_gateway_api::gatewayclasses::{GatewayClassStatus, GatewayClassStatusSupportedFeatures};
use wharf_gateway_api::gateways::{
    Gateway, GatewayListeners, GatewayListenersAllowedRoutesNamespacesFrom as FromNamespaces,
    GatewayListenersAllowedRoutesNamespacesSelector as Selector, GatewayListenersTlsMode, GatewayStatus,
    GatewayStatusAddresses, GatewayStatusListeners, GatewayStatusListenersSupportedKinds,
};
use wharf_gateway_api::grpcroutes::GrpcRoute;
use wharf_gateway_api::httproutes::{
    HttpRoute, HttpRouteParentRefs, HttpRouteStatusParents, HttpRouteStatusParentsParentRef,
};
use wharf_gateway_api::tcproutes::TcpRoute;
use wharf_gateway_api::tlsroutes::TlsRoute;
use wharf_model::{
    GatewayPort, HeaderMatch, Host, ObjectRef, PathMatch, PortProtocol, Route, RouteMatch, Snapshot, TlsHost,
    VirtualHost, WeightedBackend,
};

use super::backend::{Backends, ServicePortRef};
use super::grants::{permitted, RefFrom, RefTo, GATEWAY_GROUP};
use super::http_route::{self, Refused};
use super::tls::Secrets;
use super::{acme::Demands, AcmeOptions, Diagnostic};
use crate::World;

/// The listener option (`tls.options`) that asks for a certificate from ACME (`"true"`) or
/// opts out (`"false"`), like the Ingress annotation of the same name.
pub const ACME_OPTION: &str = "wharf.dev/acme";

/// The listener option that names the ACME issuer.
pub const ACME_ISSUER_OPTION: &str = "wharf.dev/acme-issuer";

/// Where listeners' requests for ACME certificates go.
pub(super) struct AcmeAsks<'a> {
    pub opts: &'a AcmeOptions,
    pub demands: &'a mut Demands,
    pub diags: &'a mut Vec<Diagnostic>,
}

/// The addresses Gateways are bound to: an IPv4 range the process may bind any address
/// of (a routed range on the node, or loopback). Each Gateway keeps the address it was
/// given (read back from its status) for as long as it exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressPool {
    first: u32,
    size: u32,
}

impl AddressPool {
    /// Parses `a.b.c.d/len` (len 8 to 30). The network address itself is not handed out.
    pub fn parse(cidr: &str) -> Result<AddressPool, String> {
        let (ip, len) = cidr.split_once('/').ok_or_else(|| format!("{cidr:?} is not a CIDR (a.b.c.d/len)"))?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| format!("{cidr:?}: {ip:?} is not an IPv4 address"))?;
        let len: u32 =
            len.parse().ok().filter(|l| (8..=30).contains(l)).ok_or_else(|| {
                format!("{cidr:?}: the prefix length must be 8 to 30 (a range of at least 4 addresses)")
            })?;
        let mask = u32::MAX << (32 - len);
        Ok(AddressPool { first: (u32::from(ip) & mask) + 1, size: (1u32 << (32 - len)) - 1 })
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => u32::from(v4).wrapping_sub(self.first) < self.size,
            IpAddr::V6(_) => false,
        }
    }

    fn nth(&self, n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(self.first + n % self.size))
    }
}

/// The status Gateway API objects of our controller should show.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Statuses {
    /// GatewayClasses by name, with the generation their conditions observed.
    pub gateway_classes: Vec<(String, GatewayClassStatus)>,
    /// Gateways.
    pub gateways: Vec<(ObjectRef, GatewayStatus)>,
    /// HTTPRoutes: the `status.parents` entries that are ours (other controllers' entries
    /// are left as they are).
    pub http_routes: Vec<(ObjectRef, Vec<HttpRouteStatusParents>)>,
    /// GRPCRoutes, as for HTTPRoutes (the entries have the same form).
    pub grpc_routes: Vec<(ObjectRef, Vec<HttpRouteStatusParents>)>,
    /// TLSRoutes, as for HTTPRoutes.
    pub tls_routes: Vec<(ObjectRef, Vec<HttpRouteStatusParents>)>,
    /// TCPRoutes, as for HTTPRoutes.
    pub tcp_routes: Vec<(ObjectRef, Vec<HttpRouteStatusParents>)>,
    /// BackendTLSPolicies: an entry of ours in `status.ancestors` for each of our Gateways
    /// whose routes use a Service the policy targets.
    pub backend_tls_policies: Vec<(ObjectRef, Vec<BackendTlsPolicyStatusAncestors>)>,
    /// The edge Gateway, when it exists and is ours: its `status.addresses` are the
    /// addresses Wharf publishes for Ingresses, filled in when status is written.
    pub edge_gateway: Option<ObjectRef>,
}

/// Settings of the Gateway API translation.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// `spec.controllerName` of the GatewayClasses that are ours.
    pub controller_name: String,
    /// Where Gateways are bound; `None`: Gateways are accepted but not programmed.
    pub addresses: Option<AddressPool>,
    /// The Gateway served on Wharf's own listeners.
    pub edge: Option<EdgeGateway>,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        GatewayOptions { controller_name: "wharf.dev/gateway-controller".into(), addresses: None, edge: None }
    }
}

/// The Gateway served on Wharf's own listeners (`--edge-gateway`), at the address of
/// Wharf's Service rather than an address of the Gateway range: its HTTP, HTTPS and TLS
/// passthrough listeners are served on the edge sockets, ahead of the Ingress routes, and
/// its TCP listeners on sockets of their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeGateway {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The listener ports it may use, and where each is served.
    pub sockets: Vec<EdgeSocket>,
}

/// Where a listener port of the edge Gateway is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdgeSocket {
    /// The listener port (a port of Wharf's Service).
    pub port: u16,
    /// The socket: Wharf's HTTP, HTTPS or passthrough listener, or a TCP socket.
    pub bind: SocketAddr,
    /// What the socket speaks; the listener must use the same.
    pub protocol: PortProtocol,
}

impl EdgeGateway {
    fn is(&self, g: &Gateway) -> bool {
        g.metadata.namespace.as_deref() == Some(self.namespace.as_str())
            && g.metadata.name.as_deref() == Some(self.name.as_str())
    }

    /// Why listener `l` (of protocol `protocol`) cannot be served on the edge.
    fn refuse(&self, l: &GatewayListeners, protocol: PortProtocol) -> Option<(&'static str, String)> {
        let name = |p: PortProtocol| match p {
            PortProtocol::Http => "HTTP",
            PortProtocol::Https => "HTTPS",
            PortProtocol::Passthrough => "TLS (tls.mode Passthrough)",
            PortProtocol::Tcp => "TCP",
        };
        match self.sockets.iter().find(|s| i32::from(s.port) == l.port) {
            None => {
                let ports: Vec<String> = self.sockets.iter().map(|s| s.port.to_string()).collect();
                Some((
                    "PortUnavailable",
                    format!(
                        "port {} is not a port of this Gateway: it is served on Wharf's own listeners, the ports of its Service ({}); use one of those, or another Gateway",
                        l.port,
                        ports.join(", ")
                    ),
                ))
            }
            Some(s) if s.protocol != protocol => Some((
                "UnsupportedProtocol",
                format!(
                    "port {} of this Gateway is Wharf's {} listener; use protocol {}",
                    l.port,
                    name(s.protocol),
                    name(s.protocol)
                ),
            )),
            Some(_) => None,
        }
    }
}

/// Where a Gateway is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// On an address of the Gateway range.
    Address(IpAddr),
    /// On Wharf's own listeners.
    Edge,
}

const HTTP_ROUTE: &str = "HTTPRoute";
const GRPC_ROUTE: &str = "GRPCRoute";
const TLS_ROUTE: &str = "TLSRoute";
const TCP_ROUTE: &str = "TCPRoute";

/// The Gateway API features Wharf implements, as `GatewayClass.status.supportedFeatures`
/// shows them (sorted): exactly those whose conformance tests pass (e2e/conformance.sh,
/// which reads this list back from the GatewayClass).
pub const SUPPORTED_FEATURES: &[&str] = &[
    "BackendTLSPolicy",
    "BackendTLSPolicySANValidation",
    "GRPCRoute",
    "Gateway",
    "GatewayAddressEmpty",
    "GatewayHTTPListenerIsolation",
    "GatewayPort8080",
    "HTTPRoute",
    "HTTPRoute303RedirectStatusCode",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteBackendProtocolH2C",
    "HTTPRouteBackendProtocolWebSocket",
    "HTTPRouteBackendRequestHeaderModification",
    "HTTPRouteBackendTimeout",
    "HTTPRouteHostRewrite",
    "HTTPRouteMethodMatching",
    "HTTPRouteNamedRouteRule",
    "HTTPRouteParentRefPort",
    "HTTPRoutePathRedirect",
    "HTTPRoutePathRewrite",
    "HTTPRoutePortRedirect",
    "HTTPRouteQueryParamMatching",
    "HTTPRouteRequestMirror",
    "HTTPRouteRequestMultipleMirrors",
    "HTTPRouteRequestPercentageMirror",
    "HTTPRouteRequestTimeout",
    "HTTPRouteResponseHeaderModification",
    "HTTPRouteSchemeRedirect",
    "ReferenceGrant",
    "TCPRoute",
    "TLSRoute",
    "TLSRouteModeMixed",
    "TLSRouteModeTerminate",
];

fn condition(
    kind: &str,
    ok: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    Condition {
        type_: kind.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        observed_generation: generation,
        last_transition_time: now.clone(),
    }
}

/// Oldest first: creationTimestamp, then namespace/name, as Gateway API specifies.
fn age_key<K: kube::Resource>(o: &K) -> (Option<k8s_openapi::jiff::Timestamp>, String, String) {
    let m = o.meta();
    (
        m.creation_timestamp.as_ref().map(|t| t.0),
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

fn object_ref<K: kube::Resource<DynamicType = ()>>(o: &K) -> ObjectRef {
    let m = o.meta();
    ObjectRef::new(&K::kind(&()), m.namespace.as_deref().unwrap_or(""), m.name.as_deref().unwrap_or(""))
}

/// One listener of a Gateway, as evaluated.
struct Listener<'a> {
    spec: &'a GatewayListeners,
    /// The port's protocol; `None` for a protocol (or TLS mode) Wharf does not serve.
    protocol: Option<PortProtocol>,
    /// Why the listener is not accepted (`UnsupportedProtocol`, `UnsupportedValue`).
    unsupported: Option<(&'static str, String)>,
    host: Host,
    conflict: Option<&'static str>,
    /// TLS is terminated here: an HTTPS listener, or a TLS listener in mode Terminate.
    terminates: bool,
    /// Certificates (snapshot ids) of a listener that terminates TLS, and why any ref is
    /// unresolved.
    certificates: Vec<String>,
    bad_ref: Option<(&'static str, String)>,
    kinds: Vec<GatewayStatusListenersSupportedKinds>,
    bad_kinds: Option<String>,
    attached: i32,
}

impl Listener<'_> {
    /// Routes may attach (and count in `attachedRoutes`), even while the listener cannot
    /// be served for want of a certificate.
    fn attachable(&self) -> bool {
        self.protocol.is_some() && self.conflict.is_none()
    }

    /// Routes may attach and traffic is served (for the route kinds that are valid).
    fn ready(&self) -> bool {
        self.attachable() && !self.kinds.is_empty() && (!self.terminates || !self.certificates.is_empty())
    }
}

struct Gw<'a> {
    obj: &'a Gateway,
    oref: ObjectRef,
    address: Result<Place, (&'static str, String)>,
    listeners: Vec<Listener<'a>>,
}

/// Everything HTTPRoutes attach to, per Gateway port: (host, sort key, route) entries by
/// listener index.
type Attached = HashMap<(usize, usize), Vec<(Host, RouteKey, Route)>>;

/// Sort key of a route entry within a host: Gateway API precedence.
type RouteKey = (std::cmp::Reverse<bool>, std::cmp::Reverse<usize>, Vec<u8>, usize, usize, usize);

/// Translates the Gateway API objects of `world` into `snapshot.gateway_ports` (with the
/// clusters and certificates they use) and the status to write.
pub(super) fn translate(
    world: &World,
    opts: &GatewayOptions,
    backends: &Backends<'_>,
    secrets: &Secrets<'_>,
    snapshot: &mut Snapshot,
    now: &Time,
    acme: &mut AcmeAsks<'_>,
) -> Statuses {
    let mut out = Statuses::default();
    let classes: HashSet<&str> = world
        .gateway_classes
        .iter()
        .filter(|c| c.spec.controller_name == opts.controller_name)
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    for c in world.gateway_classes.iter().filter(|c| c.spec.controller_name == opts.controller_name) {
        let generation = c.metadata.generation;
        let accepted = match &c.spec.parameters_ref {
            None => condition("Accepted", true, "Accepted", "Wharf serves Gateways of this class", generation, now),
            Some(p) => condition(
                "Accepted",
                false,
                "InvalidParameters",
                format!(
                    "parametersRef {}/{} {}: Wharf takes no parameters; remove parametersRef",
                    p.group, p.kind, p.name
                ),
                generation,
                now,
            ),
        };
        let features =
            SUPPORTED_FEATURES.iter().map(|f| GatewayClassStatusSupportedFeatures { name: (*f).to_owned() }).collect();
        let status = GatewayClassStatus { conditions: Some(vec![accepted]), supported_features: Some(features) };
        out.gateway_classes.push((c.metadata.name.clone().unwrap_or_default(), status));
    }

    let mut gateways: Vec<&Gateway> =
        world.gateways.iter().filter(|g| classes.contains(g.spec.gateway_class_name.as_str())).collect();
    gateways.sort_by_key(|g| age_key(*g));
    let edge = |g: &Gateway| opts.edge.as_ref().filter(|e| e.is(g));
    let pooled: Vec<&Gateway> = gateways.iter().copied().filter(|g| edge(g).is_none()).collect();
    let mut addresses = assign_addresses(&pooled, opts.addresses).into_iter();
    let mut gws: Vec<Gw<'_>> = gateways
        .iter()
        .map(|g| {
            let address = match edge(g) {
                Some(_) => Ok(Place::Edge),
                None => addresses
                    .next()
                    .unwrap_or_else(|| Err(("AddressNotAssigned", "no address".into())))
                    .map(Place::Address),
            };
            Gw {
                obj: g,
                oref: object_ref(*g),
                address,
                listeners: listeners(g, world, secrets, snapshot, edge(g), acme),
            }
        })
        .collect();
    out.edge_gateway = gws.iter().find(|g| g.address == Ok(Place::Edge)).map(|g| g.oref.clone());

    let mut attached: Attached = HashMap::default();
    let mut http: Vec<&HttpRoute> = world.http_routes.iter().collect();
    http.sort_by_key(|r| age_key(*r));
    let mut grpc: Vec<&GrpcRoute> = world.grpc_routes.iter().collect();
    grpc.sort_by_key(|r| age_key(*r));
    let mut tls: Vec<&TlsRoute> = world.tls_routes.iter().collect();
    tls.sort_by_key(|r| age_key(*r));
    let mut tcp: Vec<&TcpRoute> = world.tcp_routes.iter().collect();
    tcp.sort_by_key(|r| age_key(*r));
    let views = http
        .iter()
        .map(|r| RouteView::http(r, world, backends))
        .chain(grpc.iter().map(|r| RouteView::grpc(r, world, backends)))
        .chain(tls.iter().map(|r| RouteView::tls(r, world, backends)))
        .chain(tcp.iter().map(|r| RouteView::tcp(r, world, backends)));
    for (age, view) in views.enumerate() {
        let parents = attach_route(&view, age, &mut gws, world, snapshot, &mut attached, opts, now);
        if !parents.is_empty() {
            let list = match view.kind {
                GRPC_ROUTE => &mut out.grpc_routes,
                TLS_ROUTE => &mut out.tls_routes,
                TCP_ROUTE => &mut out.tcp_routes,
                _ => &mut out.http_routes,
            };
            list.push((view.oref.clone(), parents));
        }
    }

    for (gi, gw) in gws.iter().enumerate() {
        let bind = |port: u16| match gw.address {
            Ok(Place::Address(ip)) => Some((SocketAddr::new(ip, port), false)),
            Ok(Place::Edge) => opts
                .edge
                .iter()
                .flat_map(|e| &e.sockets)
                .find(|s| s.port == port)
                .map(|s| (s.bind, s.protocol != PortProtocol::Tcp)),
            Err(_) => None,
        };
        snapshot.gateway_ports.extend(ports(gi, gw, bind, &mut attached));
        out.gateways.push((gw.oref.clone(), gateway_status(gw, now)));
    }
    out.backend_tls_policies = policy_statuses(world, &out, backends, &opts.controller_name, now);
    out
}

/// Each BackendTLSPolicy's entries: one per Gateway of ours that accepted an HTTPRoute or
/// GRPCRoute using a Service the policy targets.
fn policy_statuses(
    world: &World,
    out: &Statuses,
    backends: &Backends<'_>,
    controller: &str,
    now: &Time,
) -> Vec<(ObjectRef, Vec<BackendTlsPolicyStatusAncestors>)> {
    if backends.tls_policies.states.is_empty() {
        return Vec::new();
    }
    // A parentRef without namespace is in the route's.
    let accepted_by = |parents: &[HttpRouteStatusParents], route_ns: &str| -> Vec<(String, String)> {
        parents
            .iter()
            .filter(|p| p.conditions.iter().any(|c| c.type_ == "Accepted" && c.status == "True"))
            .map(|p| (p.parent_ref.namespace.clone().unwrap_or_else(|| route_ns.to_owned()), p.parent_ref.name.clone()))
            .collect()
    };
    // (Service namespace, name) -> the Gateways whose accepted routes use it.
    let mut used: HashMap<(String, String), std::collections::BTreeSet<(String, String)>> = HashMap::default();
    let mut note = |route_ns: &str,
                    refs: &mut dyn Iterator<Item = (Option<&str>, Option<&str>, &str, Option<&str>)>,
                    gws: &[(String, String)]| {
        for (group, kind, name, namespace) in refs {
            if group.unwrap_or("").is_empty() && kind.unwrap_or("Service") == "Service" {
                let key = (namespace.unwrap_or(route_ns).to_owned(), name.to_owned());
                used.entry(key).or_default().extend(gws.iter().cloned());
            }
        }
    };
    // Each route's status entries by namespace and name (one lookup per route).
    type ByRoute<'s> = HashMap<(&'s str, &'s str), &'s [HttpRouteStatusParents]>;
    fn by_route(list: &[(ObjectRef, Vec<HttpRouteStatusParents>)]) -> ByRoute<'_> {
        list.iter().map(|(o, p)| ((o.namespace.as_str(), o.name.as_str()), p.as_slice())).collect()
    }
    let (http_parents, grpc_parents) = (by_route(&out.http_routes), by_route(&out.grpc_routes));
    let parents_of =
        |by: &ByRoute<'_>, ns: &str, name: &str| by.get(&(ns, name)).map(|p| accepted_by(p, ns)).unwrap_or_default();
    // HTTPRoutes and GRPCRoutes: the same fields under other type names.
    macro_rules! note_routes {
        ($routes:expr, $statuses:expr) => {
            for r in $routes {
                let (ns, name) =
                    (r.metadata.namespace.as_deref().unwrap_or(""), r.metadata.name.as_deref().unwrap_or(""));
                let gws = parents_of($statuses, ns, name);
                let mut refs = r
                    .spec
                    .rules
                    .iter()
                    .flatten()
                    .flat_map(|rule| rule.backend_refs.iter().flatten())
                    .map(|b| (b.group.as_deref(), b.kind.as_deref(), b.name.as_str(), b.namespace.as_deref()));
                note(ns, &mut refs, &gws);
            }
        };
    }
    note_routes!(&world.http_routes, &http_parents);
    note_routes!(&world.grpc_routes, &grpc_parents);
    backends
        .tls_policies
        .states
        .iter()
        .filter_map(|state| {
            let gws: std::collections::BTreeSet<&(String, String)> =
                state.services.iter().filter_map(|s| used.get(s)).flatten().collect();
            let conditions = state.conditions(now);
            let ancestors: Vec<BackendTlsPolicyStatusAncestors> = gws
                .into_iter()
                .map(|(gns, gname)| BackendTlsPolicyStatusAncestors {
                    ancestor_ref: BackendTlsPolicyStatusAncestorsAncestorRef {
                        group: Some(GATEWAY_GROUP.to_owned()),
                        kind: Some("Gateway".to_owned()),
                        name: gname.clone(),
                        namespace: Some(gns.clone()),
                        ..Default::default()
                    },
                    conditions: conditions.clone(),
                    controller_name: controller.to_owned(),
                })
                .collect();
            (!ancestors.is_empty()).then(|| (state.oref.clone(), ancestors))
        })
        .collect()
}

/// Addresses for the Gateways, oldest first: the one `spec.addresses` asks for, else the
/// one its status shows, else one picked by a hash of its name; each taken once.
fn assign_addresses(gateways: &[&Gateway], pool: Option<AddressPool>) -> Vec<Result<IpAddr, (&'static str, String)>> {
    let Some(pool) = pool else {
        return gateways
            .iter()
            .map(|_| {
                Err((
                    "AddressNotAssigned",
                    "this Wharf has no address range for Gateways (--gateway-addresses); the Gateway is not served"
                        .into(),
                ))
            })
            .collect();
    };
    let mut taken = HashSet::default();
    gateways
        .iter()
        .map(|g| {
            let requested: Vec<&str> = g
                .spec
                .addresses
                .iter()
                .flatten()
                .filter(|a| a.r#type.as_deref().unwrap_or("IPAddress") == "IPAddress")
                .filter_map(|a| a.value.as_deref())
                .collect();
            if let Some(want) = requested.first() {
                return match want.parse::<IpAddr>() {
                    Ok(ip) if pool.contains(ip) && taken.insert(ip) => Ok(ip),
                    Ok(ip) if pool.contains(ip) => {
                        Err(("AddressNotUsable", format!("address {ip} is taken by an older Gateway")))
                    }
                    _ => Err((
                        "AddressNotUsable",
                        format!("address {want:?} is not in this Wharf's Gateway address range"),
                    )),
                };
            }
            let shown = g.status.as_ref().and_then(|s| s.addresses.as_ref()).and_then(|a| a.first());
            if let Some(ip) = shown.and_then(|a| a.value.parse::<IpAddr>().ok()).filter(|ip| pool.contains(*ip)) {
                if taken.insert(ip) {
                    return Ok(ip);
                }
            }
            let key = format!(
                "{}/{}",
                g.metadata.namespace.as_deref().unwrap_or(""),
                g.metadata.name.as_deref().unwrap_or("")
            );
            let start = fnv(&key);
            (0..pool.size.min(65_536))
                .map(|i| pool.nth(start.wrapping_add(i)))
                .find(|ip| taken.insert(*ip))
                .ok_or(("AddressNotAssigned", "every address of the Gateway address range is taken".into()))
        })
        .collect()
}

/// FNV-1a, for a stable starting point in the address range.
fn fnv(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

fn listeners<'a>(
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
            let (protocol, unsupported) = match (l.protocol.as_str(), &tls_mode) {
                ("HTTP", _) => (Some(PortProtocol::Http), None),
                ("HTTPS", _) => (Some(PortProtocol::Https), None),
                ("TLS", _) => (Some(PortProtocol::Passthrough), None),
                ("TCP", _) => (Some(PortProtocol::Tcp), None),
                (other, _) => (
                    None,
                    Some((
                        "UnsupportedProtocol",
                        format!("protocol {other} is not supported yet (HTTP, HTTPS, TLS and TCP are)"),
                    )),
                ),
            };
            let (protocol, unsupported) = match (edge, protocol) {
                (Some(e), Some(p)) => match e.refuse(l, p) {
                    Some(why) => (None, Some(why)),
                    None => (protocol, unsupported),
                },
                _ => (protocol, unsupported),
            };
            let host = match l.hostname.as_deref() {
                None | Some("") => Host::Any,
                Some(h) => Host::parse_gateway(h).unwrap_or(Host::Any),
            };
            let supported: &[&str] = match protocol {
                Some(PortProtocol::Passthrough) => &[TLS_ROUTE],
                Some(PortProtocol::Tcp) => &[TCP_ROUTE],
                Some(_) => &[HTTP_ROUTE, GRPC_ROUTE],
                None => &[],
            };
            let (kinds, bad_kinds) = match l.allowed_routes.as_ref().and_then(|a| a.kinds.as_ref()) {
                None => (supported.iter().map(|k| kind(k)).collect(), None),
                Some(asked) => {
                    let ok: Vec<_> = asked
                        .iter()
                        .filter(|k| {
                            k.group.as_deref().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP
                                && supported.contains(&k.kind.as_str())
                        })
                        .map(|k| kind(&k.kind))
                        .collect();
                    let bad: Vec<String> = asked
                        .iter()
                        .filter(|k| {
                            !ok.iter().any(|o| o.kind == k.kind)
                                || k.group.as_deref().unwrap_or(GATEWAY_GROUP) != GATEWAY_GROUP
                        })
                        .map(|k| format!("{}/{}", k.group.as_deref().unwrap_or(GATEWAY_GROUP), k.kind))
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
            };
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

    // Listeners sharing a port must share its protocol and differ in hostname. TLS
    // listeners of both modes share a port: the SNI decides whether a connection is
    // passed through or terminated.
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
    out
}

fn kind(k: &str) -> GatewayStatusListenersSupportedKinds {
    GatewayStatusListenersSupportedKinds { group: Some(GATEWAY_GROUP.into()), kind: k.into() }
}

/// Resolves the certificateRefs of a listener that terminates TLS into snapshot
/// certificates, and adds what it asks of ACME.
fn certificates(
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
        l.bad_ref = Some((
            "InvalidCertificateRef",
            "an HTTPS listener terminates TLS; use a TLS listener for passthrough".into(),
        ));
        return;
    }
    let refs = tls.and_then(|t| t.certificate_refs.as_deref()).unwrap_or_default();
    if refs.is_empty() {
        l.bad_ref = Some((
            "InvalidCertificateRef",
            format!("a {} listener that terminates TLS needs tls.certificateRefs", l.spec.protocol),
        ));
    }
    for r in refs {
        let group = r.group.as_deref().unwrap_or("");
        let kind = r.kind.as_deref().unwrap_or("Secret");
        let rns = r.namespace.as_deref().unwrap_or(ns);
        let fail = |reason, message: String| Some((reason, message));
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
fn ask_acme(l: &Listener<'_>, gref: &ObjectRef, secret: (&str, &str), secrets: &Secrets<'_>, acme: &mut AcmeAsks<'_>) {
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
            diag("InvalidListenerOption", why);
            None
        }
    };
    let issuer = match option(ACME_ISSUER_OPTION) {
        Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') => {
            Some(v)
        }
        Some(other) => {
            let why = format!("listener {listener}: tls option {ACME_ISSUER_OPTION} {other:?} is not the name of an ACME issuer; the default issuer is used");
            diag("InvalidListenerOption", why);
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
                diag("AcmeNoHost", why);
            }
            Vec::new()
        }
    };
    acme.demands.add(acme.opts, gref, (asked, issuer), secrets, (secret.0, Some(secret.1)), &hosts, acme.diags);
}

fn namespace_allowed(l: &GatewayListeners, gateway_ns: &str, route_ns: &str, world: &World) -> bool {
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
fn selects(s: &Selector, labels: &BTreeMap<String, String>) -> bool {
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

/// The parents a route names that are Gateways of ours: attaches it to their listeners,
/// builds its routes, and returns the status entry of each.
#[allow(clippy::too_many_arguments)]
fn attach_route(
    route: &RouteView<'_>,
    age: usize,
    gws: &mut [Gw<'_>],
    world: &World,
    snapshot: &mut Snapshot,
    attached: &mut Attached,
    opts: &GatewayOptions,
    now: &Time,
) -> Vec<HttpRouteStatusParents> {
    let ns = route.meta.namespace.as_deref().unwrap_or("default");
    let rref = &route.oref;
    let generation = route.meta.generation;
    let hostnames = &route.hostnames;
    let mut statuses = Vec::new();
    let mut built: Option<Rules> = None;
    for parent in &route.parent_refs {
        if parent.group.as_deref().unwrap_or(GATEWAY_GROUP) != GATEWAY_GROUP
            || parent.kind.as_deref().unwrap_or("Gateway") != "Gateway"
        {
            continue;
        }
        let pns = parent.namespace.as_deref().unwrap_or(ns);
        let Some(gi) = gws.iter().position(|g| g.oref.namespace == pns && g.oref.name == parent.name) else {
            continue;
        };
        let (rules, refused, unresolved) = built.get_or_insert_with(|| (route.rules)(snapshot)).clone();
        let gw_ns = gws[gi].oref.namespace.clone();
        let mut accepted: Result<(), (&'static str, String)> = Ok(());
        let named: Vec<usize> = (0..gws[gi].listeners.len())
            .filter(|&li| {
                let l = gws[gi].listeners[li].spec;
                parent.section_name.as_deref().is_none_or(|s| s == l.name) && parent.port.is_none_or(|p| p == l.port)
            })
            .collect();
        if named.is_empty() {
            accepted = Err(("NoMatchingParent", "the Gateway has no listener with this sectionName and port".into()));
        }
        let ready: Vec<usize> = named.iter().copied().filter(|&li| gws[gi].listeners[li].attachable()).collect();
        let allowed: Vec<usize> = ready
            .iter()
            .copied()
            .filter(|&li| {
                let l = &gws[gi].listeners[li];
                namespace_allowed(l.spec, &gw_ns, ns, world) && l.kinds.iter().any(|k| k.kind == route.kind)
            })
            .collect();
        if accepted.is_ok() && allowed.is_empty() {
            accepted = Err((
                "NotAllowedByListeners",
                format!(
                    "no listener of Gateway {gw_ns}/{} that this parentRef names allows {}s from namespace {ns}",
                    parent.name, route.kind
                ),
            ));
        }
        let mut any_host = false;
        for &li in &allowed {
            let l = &gws[gi].listeners[li];
            let listener_host = l.spec.hostname.as_deref();
            let names = http_route::hostnames(listener_host, hostnames);
            if names.is_empty() {
                continue;
            }
            any_host = true;
            gws[gi].listeners[li].attached += 1;
            let entries = attached.entry((gi, li)).or_default();
            for name in &names {
                let Ok(host) = http_route::host(name) else { continue };
                for (rule, m_idx, m, action) in &rules {
                    let key: RouteKey = (
                        std::cmp::Reverse(matches!(host, Host::Exact(_))),
                        std::cmp::Reverse(name.len()),
                        precedence_bytes(m),
                        age,
                        *rule,
                        *m_idx,
                    );
                    let route = Route {
                        matches: m.clone(),
                        action: action.clone(),
                        source: rref.clone(),
                        https_redirect: false,
                        max_body_bytes: None,
                        clients: None,
                        cors: None,
                        rate_limit: None,
                        auth: None,
                        client_cert: None,
                    };
                    entries.push((host.clone(), key, route));
                }
            }
        }
        if accepted.is_ok() && !allowed.is_empty() && !any_host {
            accepted = Err((
                "NoMatchingListenerHostname",
                "no hostname of this route matches a hostname of the listeners it may attach to".into(),
            ));
        }
        let mut conditions = Vec::new();
        match (&accepted, &refused) {
            (Err((reason, msg)), _) => {
                conditions.push(condition("Accepted", false, reason, msg.clone(), generation, now))
            }
            (Ok(()), Some(r)) if rules.is_empty() => {
                conditions.push(condition("Accepted", false, r.reason, r.message.clone(), generation, now))
            }
            (Ok(()), Some(r)) => {
                conditions.push(condition("Accepted", true, "Accepted", "attached to the Gateway", generation, now));
                conditions.push(condition(
                    "PartiallyInvalid",
                    true,
                    r.reason,
                    format!("a rule was dropped: {}", r.message),
                    generation,
                    now,
                ));
            }
            (Ok(()), None) => {
                conditions.push(condition("Accepted", true, "Accepted", "attached to the Gateway", generation, now))
            }
        }
        conditions.push(match &unresolved {
            Some((reason, msg)) => condition("ResolvedRefs", false, reason, msg.clone(), generation, now),
            None => condition("ResolvedRefs", true, "ResolvedRefs", "every backendRef resolved", generation, now),
        });
        statuses.push(HttpRouteStatusParents {
            conditions,
            controller_name: opts.controller_name.clone(),
            parent_ref: parent_ref(parent),
        });
    }
    statuses
}

/// A route of any kind as attaching it needs it: the parts every kind shares (parentRefs
/// in HTTPRoute's form), and its rules built on first use.
struct RouteView<'a> {
    kind: &'static str,
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    oref: ObjectRef,
    parent_refs: Vec<HttpRouteParentRefs>,
    hostnames: Vec<String>,
    rules: Box<dyn Fn(&mut Snapshot) -> Rules + 'a>,
}

impl<'a> RouteView<'a> {
    /// The view of `route`, whose rules `rules` builds given its namespace and reference.
    fn new<K: kube::Resource<DynamicType = ()>>(
        kind: &'static str,
        route: &'a K,
        parent_refs: Vec<HttpRouteParentRefs>,
        hostnames: Vec<String>,
        rules: impl Fn(&str, &ObjectRef, &mut Snapshot) -> Rules + 'a,
    ) -> RouteView<'a> {
        let meta = route.meta();
        let ns = meta.namespace.clone().unwrap_or_else(|| "default".into());
        let oref = object_ref(route);
        let rref = oref.clone();
        RouteView { kind, meta, oref, parent_refs, hostnames, rules: Box::new(move |s| rules(&ns, &rref, s)) }
    }

    fn http(route: &'a HttpRoute, world: &'a World, backends: &'a Backends<'a>) -> RouteView<'a> {
        let (parents, hostnames) = (route.spec.parent_refs.clone(), route.spec.hostnames.clone());
        RouteView::new(
            HTTP_ROUTE,
            route,
            parents.unwrap_or_default(),
            hostnames.unwrap_or_default(),
            move |ns, r, s| rules(route, ns, r, world, backends, s),
        )
    }

    // The other kinds' parentRefs are the same fields under other type names: converted
    // through their JSON form.

    fn grpc(route: &'a GrpcRoute, world: &'a World, backends: &'a Backends<'a>) -> RouteView<'a> {
        let (parents, hostnames) = (same_shape(&route.spec.parent_refs), route.spec.hostnames.clone());
        RouteView::new(
            GRPC_ROUTE,
            route,
            parents.unwrap_or_default(),
            hostnames.unwrap_or_default(),
            move |ns, r, s| grpc_rules(route, ns, r, world, backends, s),
        )
    }

    fn tls(route: &'a TlsRoute, world: &'a World, backends: &'a Backends<'a>) -> RouteView<'a> {
        let (parents, hostnames) = (same_shape(&route.spec.parent_refs), route.spec.hostnames.clone());
        RouteView::new(TLS_ROUTE, route, parents.unwrap_or_default(), hostnames, move |ns, r, s| {
            tls_rules(route, ns, r, world, backends, s)
        })
    }

    fn tcp(route: &'a TcpRoute, world: &'a World, backends: &'a Backends<'a>) -> RouteView<'a> {
        let parents = same_shape(&route.spec.parent_refs);
        RouteView::new(TCP_ROUTE, route, parents.unwrap_or_default(), Vec::new(), move |ns, r, s| {
            tcp_rules(route, ns, r, world, backends, s)
        })
    }
}

/// A TCPRoute's rule (the API allows one): every connection to one of its backends,
/// chosen by weight.
fn tcp_rules(
    route: &TcpRoute,
    ns: &str,
    rref: &ObjectRef,
    world: &World,
    backends: &Backends<'_>,
    snapshot: &mut Snapshot,
) -> Rules {
    let mut out = Vec::new();
    let mut unresolved = None;
    for (ri, rule) in route.spec.rules.iter().enumerate() {
        let refs =
            rule.backend_refs.iter().map(|b| (backend_ref!(b), u32::try_from(b.weight.unwrap_or(1)).unwrap_or(0)));
        out.push(relay(ri, resolve(refs, TCP_ROUTE, ns, rref, world, backends, snapshot, &mut unresolved)));
    }
    (out, None, unresolved)
}

/// Rule `ri` of a TLS or TCP route: every connection relayed to one of `backends`.
fn relay(ri: usize, backends: Vec<WeightedBackend>) -> (usize, usize, RouteMatch, wharf_model::Action) {
    let action = wharf_model::Action::Forward(wharf_model::Forward {
        backends,
        request_headers: Default::default(),
        response_headers: Default::default(),
        rewrite: None,
        timeout_ms: None,
        connect_timeout_ms: None,
        send_timeout_ms: None,
        mirrors: Vec::new(),
        affinity: None,
        fallback: None,
    });
    (ri, 0, RouteMatch::path(PathMatch::Prefix("/".into())), action)
}

/// A TLSRoute's rules: each a forward of every connection (its SNI matched by the
/// hostnames) to its weighted backends. A connection carries no more than its SNI to
/// match on, so a route with several rules is refused.
fn tls_rules(
    route: &TlsRoute,
    ns: &str,
    rref: &ObjectRef,
    world: &World,
    backends: &Backends<'_>,
    snapshot: &mut Snapshot,
) -> Rules {
    let mut out = Vec::new();
    let mut refused = None;
    let mut unresolved = None;
    for (ri, rule) in route.spec.rules.iter().enumerate() {
        if ri > 0 {
            refused.get_or_insert(Refused {
                reason: "UnsupportedValue",
                message: "a TLSRoute is served with one rule: its connections have nothing but the SNI to match on"
                    .into(),
            });
            continue;
        }
        let refs =
            rule.backend_refs.iter().map(|b| (backend_ref!(b), u32::try_from(b.weight.unwrap_or(1)).unwrap_or(0)));
        out.push(relay(ri, resolve(refs, TLS_ROUTE, ns, rref, world, backends, snapshot, &mut unresolved)));
    }
    (out, refused, unresolved)
}

/// A value of one generated type as another whose JSON form is the same (the GRPCRoute
/// and HTTPRoute types repeat each other's parts under different names).
pub(crate) fn same_shape<A: serde::Serialize, B: serde::de::DeserializeOwned>(a: &A) -> Option<B> {
    serde_json::to_value(a).ok().and_then(|v| serde_json::from_value(v).ok())
}

/// A GRPCRoute's rules as [`Rules`]: a method match is a path (`/service/method` exact,
/// `/service/` prefix); backends are spoken to over HTTP/2.
fn grpc_rules(
    route: &GrpcRoute,
    ns: &str,
    rref: &ObjectRef,
    world: &World,
    backends: &Backends<'_>,
    snapshot: &mut Snapshot,
) -> Rules {
    let mut out = Vec::new();
    let mut refused = None;
    let mut unresolved = None;
    for (ri, rule) in route.spec.rules.iter().flatten().enumerate() {
        let matches = match grpc_matches(rule.matches.as_deref().unwrap_or_default()) {
            Ok(m) => m,
            Err(r) => {
                refused.get_or_insert(r);
                continue;
            }
        };
        let refs = rule
            .backend_refs
            .iter()
            .flatten()
            .map(|b| (backend_ref!(b), u32::try_from(b.weight.unwrap_or(1)).unwrap_or(0)));
        let mut weighted = resolve(refs, GRPC_ROUTE, ns, rref, world, backends, snapshot, &mut unresolved);
        let mut filtered = rule.backend_refs.iter().flatten().zip(weighted.iter_mut());
        if let Err(r) = filtered.try_for_each(|(b, w)| {
            let filters: Vec<wharf_gateway_api::httproutes::HttpRouteRulesBackendRefsFilters> =
                b.filters.as_ref().and_then(same_shape).unwrap_or_default();
            http_route::backend_filters(&filters, w)
        }) {
            refused.get_or_insert(r);
            continue;
        }
        let filters: Vec<wharf_gateway_api::httproutes::HttpRouteRulesFilters> =
            rule.filters.as_ref().and_then(same_shape).unwrap_or_default();
        let mirrors = mirrors(&filters, GRPC_ROUTE, ns, rref, world, backends, snapshot, &mut unresolved);
        let first = out.len();
        actions(ri, matches, &filters, &weighted, &mut out, &mut refused);
        for (_, _, _, action) in out.iter_mut().skip(first) {
            if let wharf_model::Action::Forward(f) = action {
                f.mirrors.clone_from(&mirrors);
            }
        }
    }
    (out, refused, unresolved)
}

/// GRPCRoute matches as route matches (none: every request).
fn grpc_matches(matches: &[wharf_gateway_api::grpcroutes::GrpcRouteRulesMatches]) -> Result<Vec<RouteMatch>, Refused> {
    use wharf_gateway_api::grpcroutes::{
        GrpcRouteRulesMatchesHeadersType as HeaderType, GrpcRouteRulesMatchesMethodType as MethodType,
    };
    let unsupported = |message: String| Refused { reason: "UnsupportedValue", message };
    if matches.is_empty() {
        return Ok(vec![RouteMatch::path(PathMatch::Prefix("/".into()))]);
    }
    matches
        .iter()
        .map(|m| {
            let path = match &m.method {
                None => PathMatch::prefix("/"),
                Some(method) => {
                    if method.r#type == Some(MethodType::RegularExpression) {
                        return Err(unsupported("RegularExpression method matches are not supported".into()));
                    }
                    let service = method.service.as_deref().filter(|s| !s.is_empty());
                    match (service, method.method.as_deref().filter(|s| !s.is_empty())) {
                        (Some(service), Some(name)) => PathMatch::exact(&format!("/{service}/{name}")),
                        (Some(service), None) => PathMatch::prefix(&format!("/{service}/")),
                        (None, Some(_)) => {
                            return Err(unsupported("a method match without a service is not supported yet".into()))
                        }
                        (None, None) => PathMatch::prefix("/"),
                    }
                }
            }
            .map_err(|e| unsupported(format!("method match: {e}")))?;
            let mut headers: Vec<HeaderMatch> = Vec::new();
            for h in m.headers.iter().flatten() {
                let name = h.name.to_ascii_lowercase();
                if !headers.iter().any(|x| x.name == name) {
                    headers.push(match h.r#type {
                        Some(HeaderType::RegularExpression) => HeaderMatch::regex(
                            &name,
                            wharf_model::Pattern::full(&h.value).map_err(|e| unsupported(e.to_string()))?,
                        ),
                        _ => HeaderMatch::exact(&name, &h.value),
                    });
                }
            }
            Ok(RouteMatch { path, method: None, headers, query: Vec::new() })
        })
        .collect()
}

/// An ordering of [`wharf_model::RouteMatch::precedence_key`] as bytes, so keys of
/// several parts compare as one.
fn precedence_bytes(m: &wharf_model::RouteMatch) -> Vec<u8> {
    let exact = matches!(m.path, wharf_model::PathMatch::Exact(_));
    let inv = |n: usize| u32::MAX - u32::try_from(n).unwrap_or(u32::MAX);
    let mut k = vec![u8::from(!exact)];
    k.extend(inv(m.path.path().len()).to_be_bytes());
    k.push(u8::from(m.method.is_none()));
    k.extend(inv(m.headers.len()).to_be_bytes());
    k.extend(inv(m.query.len()).to_be_bytes());
    k
}

fn parent_ref(p: &HttpRouteParentRefs) -> HttpRouteStatusParentsParentRef {
    HttpRouteStatusParentsParentRef {
        group: p.group.clone(),
        kind: p.kind.clone(),
        name: p.name.clone(),
        namespace: p.namespace.clone(),
        port: p.port,
        section_name: p.section_name.clone(),
    }
}

type Rules = (
    Vec<(usize, usize, wharf_model::RouteMatch, wharf_model::Action)>,
    Option<Refused>,
    Option<(&'static str, String)>,
);

/// A route's rules as (rule index, match index, match, action); the first refused rule's
/// reason; the first unresolved backendRef's reason.
fn rules(
    route: &HttpRoute,
    ns: &str,
    rref: &ObjectRef,
    world: &World,
    backends: &Backends<'_>,
    snapshot: &mut Snapshot,
) -> Rules {
    let mut out = Vec::new();
    let mut refused = None;
    let mut unresolved = None;
    for (ri, rule) in route.spec.rules.iter().flatten().enumerate() {
        let matches = match http_route::route_matches(rule.matches.as_deref().unwrap_or_default()) {
            Ok(m) => m,
            Err(r) => {
                refused.get_or_insert(r);
                continue;
            }
        };
        let timeouts = rule.timeouts.as_ref();
        let timeout = match http_route::timeout_ms(
            timeouts.and_then(|t| t.request.as_deref()),
            timeouts.and_then(|t| t.backend_request.as_deref()),
        ) {
            Ok(t) => t,
            Err(r) => {
                refused.get_or_insert(r);
                continue;
            }
        };
        let refs = rule
            .backend_refs
            .iter()
            .flatten()
            .map(|b| (backend_ref!(b), u32::try_from(b.weight.unwrap_or(1)).unwrap_or(0)));
        let mut weighted = resolve(refs, HTTP_ROUTE, ns, rref, world, backends, snapshot, &mut unresolved);
        let mut filtered = rule.backend_refs.iter().flatten().zip(weighted.iter_mut());
        if let Err(r) =
            filtered.try_for_each(|(b, w)| http_route::backend_filters(b.filters.as_deref().unwrap_or_default(), w))
        {
            refused.get_or_insert(r);
            continue;
        }
        let filters = rule.filters.as_deref().unwrap_or_default();
        let mirrors = mirrors(filters, HTTP_ROUTE, ns, rref, world, backends, snapshot, &mut unresolved);
        let first = out.len();
        actions(ri, matches, filters, &weighted, &mut out, &mut refused);
        for (_, _, _, action) in out.iter_mut().skip(first) {
            if let wharf_model::Action::Forward(f) = action {
                f.timeout_ms = timeout;
                f.mirrors.clone_from(&mirrors);
            }
        }
    }
    (out, refused, unresolved)
}

/// A rule's action for each of its matches, into `out`; a filter that cannot be served
/// drops the rule (the first reason goes to `refused`).
fn actions(
    ri: usize,
    matches: Vec<RouteMatch>,
    filters: &[wharf_gateway_api::httproutes::HttpRouteRulesFilters],
    weighted: &[WeightedBackend],
    out: &mut Vec<(usize, usize, RouteMatch, wharf_model::Action)>,
    refused: &mut Option<Refused>,
) {
    for (mi, m) in matches.into_iter().enumerate() {
        match http_route::action(filters, weighted.to_vec(), &m.path) {
            Ok(action) => out.push((ri, mi, m, action)),
            Err(r) => {
                refused.get_or_insert(r);
                return;
            }
        }
    }
}

/// A rule's RequestMirror filters as mirrors to their resolved backends; one whose
/// backend does not resolve is left out, and the first such reason goes to `unresolved`.
#[allow(clippy::too_many_arguments)]
fn mirrors(
    filters: &[wharf_gateway_api::httproutes::HttpRouteRulesFilters],
    route_kind: &str,
    ns: &str,
    rref: &ObjectRef,
    world: &World,
    backends: &Backends<'_>,
    snapshot: &mut Snapshot,
    unresolved: &mut Option<(&'static str, String)>,
) -> Vec<wharf_model::Mirror> {
    let mut out = Vec::new();
    let mirror_filters =
        filters.iter().filter(|f| f.r#type == wharf_gateway_api::httproutes::HttpRouteRulesFiltersType::RequestMirror);
    for m in mirror_filters.filter_map(|f| f.request_mirror.as_ref()) {
        let fraction = m.fraction.as_ref().map(|f| (f.numerator, f.denominator));
        let per_million = http_route::mirror_share(m.percent, fraction);
        match backend(backend_ref!(m.backend_ref), route_kind, ns, rref, world, backends, snapshot) {
            Ok(Some(cluster)) => out.push(wharf_model::Mirror { cluster, per_million }),
            Ok(None) => {}
            Err(why) => {
                unresolved.get_or_insert(why);
            }
        }
    }
    out
}

/// A backendRef of any route kind as a [`BackendRef`].
macro_rules! backend_ref {
    ($b:expr) => {
        BackendRef {
            group: $b.group.as_deref(),
            kind: $b.kind.as_deref(),
            name: &$b.name,
            namespace: $b.namespace.as_deref(),
            port: $b.port,
        }
    };
}
use backend_ref;

/// A rule's backendRefs with their weights, resolved: one that does not resolve keeps
/// its weight and answers 500 (the first such reason goes to `unresolved`); a rule
/// without any answers 500 too.
#[allow(clippy::too_many_arguments)]
fn resolve<'r>(
    refs: impl Iterator<Item = (BackendRef<'r>, u32)>,
    route_kind: &str,
    ns: &str,
    rref: &ObjectRef,
    world: &World,
    backends: &Backends<'_>,
    snapshot: &mut Snapshot,
    unresolved: &mut Option<(&'static str, String)>,
) -> Vec<WeightedBackend> {
    let mut weighted = Vec::new();
    for (r, weight) in refs {
        match backend(r, route_kind, ns, rref, world, backends, snapshot) {
            Ok(Some(cluster)) => weighted.push(WeightedBackend::new(&cluster, weight)),
            // Its BackendTLSPolicy cannot be used (the policy says why): 500, never plain text.
            Ok(None) => weighted.push(WeightedBackend::invalid(weight)),
            Err(why) => {
                unresolved.get_or_insert(why);
                weighted.push(WeightedBackend::invalid(weight));
            }
        }
    }
    if weighted.is_empty() {
        weighted.push(WeightedBackend::invalid(1));
    }
    weighted
}

/// A backendRef's fields, whatever the route kind.
struct BackendRef<'r> {
    group: Option<&'r str>,
    kind: Option<&'r str>,
    name: &'r str,
    namespace: Option<&'r str>,
    port: Option<i32>,
}

/// Resolves one backendRef of a route of `route_kind` into a cluster id. GRPCRoute
/// backends are always spoken to over HTTP/2. An HTTPRoute's or GRPCRoute's backend
/// targeted by a BackendTLSPolicy is spoken to over TLS (a cluster of its own), or, when
/// the policy cannot be used, not at all (`Ok(None)`).
fn backend(
    b: BackendRef<'_>,
    route_kind: &str,
    ns: &str,
    rref: &ObjectRef,
    world: &World,
    backends: &Backends<'_>,
    snapshot: &mut Snapshot,
) -> Result<Option<String>, (&'static str, String)> {
    let (group, kind, name) = (b.group.unwrap_or(""), b.kind.unwrap_or("Service"), b.name);
    if !group.is_empty() || kind != "Service" {
        return Err(("InvalidKind", format!("backendRef {group}/{kind} {name}: only Services are supported")));
    }
    let bns = b.namespace.unwrap_or(ns);
    let from = RefFrom { group: GATEWAY_GROUP, kind: route_kind, namespace: ns };
    if !permitted(&world.reference_grants, from, RefTo { group: "", kind: "Service", namespace: bns, name }) {
        return Err((
            "RefNotPermitted",
            format!("backendRef Service {bns}/{name}: no ReferenceGrant in {bns} lets {route_kind}s of {ns} use it"),
        ));
    }
    let Some(port) = b.port else {
        return Err(("BackendNotFound", format!("backendRef Service {bns}/{name} needs a port")));
    };
    let mut diags = Vec::new();
    let port = ServicePortRef::Number(port);
    let h2 = route_kind == GRPC_ROUTE;
    let id = backends.cluster_for(bns, name, &port, h2, rref, &mut diags, &mut snapshot.clusters).ok_or_else(|| {
        let why = diags.first().map(|d| d.message.clone()).unwrap_or_else(|| format!("Service {bns}/{name} not found"));
        ("BackendNotFound", why)
    })?;
    if route_kind != HTTP_ROUTE && route_kind != GRPC_ROUTE {
        return Ok(Some(id));
    }
    let port_name = b.port.and_then(|p| backends.port_name(bns, name, p));
    match backends.tls_policies.lookup(bns, name, port_name) {
        None => Ok(Some(id)),
        Some(Err(())) => Ok(None),
        Some(Ok(tls)) => {
            let tls_id = format!("{id}/tls");
            if !snapshot.clusters.contains_key(&tls_id) {
                if let Some(plain) = snapshot.clusters.get(&id) {
                    let cluster = wharf_model::Cluster { tls: Some(tls.clone()), ..plain.clone() };
                    snapshot.clusters.insert(tls_id.clone(), cluster);
                }
            }
            Ok(Some(tls_id))
        }
    }
}

/// The ports of one Gateway: its ready listeners grouped by port, with their routes.
fn ports(
    gi: usize,
    gw: &Gw<'_>,
    bind: impl Fn(u16) -> Option<(SocketAddr, bool)>,
    attached: &mut Attached,
) -> Vec<GatewayPort> {
    let mut by_port: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (li, l) in gw.listeners.iter().enumerate() {
        if let (true, Ok(port)) = (l.ready(), u16::try_from(l.spec.port)) {
            by_port.entry(port).or_default().push(li);
        }
    }
    by_port
        .into_iter()
        .filter_map(|(port, idx)| {
            let protocol = gw.listeners[idx[0]].protocol?;
            let (bind, edge) = bind(port)?;
            let mut tls_hosts = Vec::new();
            let mut hosts: BTreeMap<Host, Vec<(RouteKey, Route)>> = BTreeMap::new();
            // The hosts whose TLS is terminated here, on a TLS port.
            let mut terminated: HashSet<Host> = HashSet::default();
            for &li in &idx {
                let l = &gw.listeners[li];
                if let Some(cert) = l.certificates.first() {
                    tls_hosts.push(TlsHost { host: l.host.clone(), certificate: cert.clone() });
                }
                // Every listener hostname has a host of its own, even without routes: a
                // request for it never falls through to a less specific listener's routes.
                hosts.entry(l.host.clone()).or_default();
                if l.terminates {
                    terminated.insert(l.host.clone());
                }
                let entries = attached.remove(&(gi, li)).unwrap_or_default();
                let route_hosts: HashSet<Host> = entries.iter().map(|(h, _, _)| h.clone()).collect();
                // The entries by route hostname, so that finding those covering a host does
                // not test every entry: exact names are looked up, and only the (few)
                // wildcard ones are tested.
                let mut exact: HashMap<&Host, Vec<usize>> = HashMap::default();
                let mut wildcards: Vec<usize> = Vec::new();
                for (i, (rh, _, _)) in entries.iter().enumerate() {
                    match rh {
                        Host::Exact(_) => exact.entry(rh).or_default().push(i),
                        _ => wildcards.push(i),
                    }
                }
                for h in route_hosts {
                    if more_specific_listener(&h, li, &idx, gw) {
                        continue;
                    }
                    if l.terminates {
                        terminated.insert(h.clone());
                    }
                    // The host takes every route of this listener whose hostname covers it
                    // (an exact name covers only itself), in the order they were attached.
                    let mut covering: Vec<usize> =
                        wildcards.iter().copied().filter(|&i| entries[i].0.covers(&h)).collect();
                    if matches!(h, Host::Exact(_)) {
                        covering.extend(exact.get(&h).into_iter().flatten().copied());
                    }
                    covering.sort_unstable();
                    let routes = hosts.entry(h.clone()).or_default();
                    routes.reserve_exact(covering.len());
                    for i in covering {
                        let (_, key, r) = &entries[i];
                        routes.push((key.clone(), r.clone()));
                    }
                }
            }
            let virtual_hosts: Vec<VirtualHost> = hosts
                .into_iter()
                .map(|(host, mut routes)| {
                    routes.sort_by(|a, b| a.0.cmp(&b.0));
                    routes.dedup_by(|a, b| a.0 == b.0);
                    // Collected in place, the routes would keep the larger allocation.
                    let mut routes: Vec<Route> = routes.into_iter().map(|(_, r)| r).collect();
                    routes.shrink_to_fit();
                    VirtualHost { host, routes }
                })
                .collect();
            if protocol == PortProtocol::Passthrough {
                // Each SNI goes to the backends of the first (oldest) route that names it,
                // passed through or, under a listener in mode Terminate, decrypted first; a
                // connection given to a backend that did not resolve is closed.
                let passthrough = virtual_hosts
                    .into_iter()
                    .filter_map(|vh| {
                        let first = vh.routes.into_iter().next()?;
                        let wharf_model::Action::Forward(f) = first.action else { return None };
                        let terminate = terminated.contains(&vh.host);
                        Some(wharf_model::SniRoute {
                            host: vh.host,
                            backends: f.backends,
                            terminate,
                            source: first.source,
                        })
                    })
                    .collect();
                return Some(GatewayPort {
                    gateway: gw.oref.clone(),
                    bind,
                    edge,
                    protocol,
                    tls_hosts,
                    virtual_hosts: Vec::new(),
                    passthrough,
                    tcp: Vec::new(),
                });
            }
            if protocol == PortProtocol::Tcp {
                // Every connection goes to the backends of the oldest route attached.
                let tcp = virtual_hosts
                    .into_iter()
                    .flat_map(|vh| vh.routes)
                    .find_map(|r| match r.action {
                        wharf_model::Action::Forward(f) => Some(f.backends),
                        _ => None,
                    })
                    .unwrap_or_default();
                return Some(GatewayPort {
                    gateway: gw.oref.clone(),
                    bind,
                    edge,
                    protocol,
                    tls_hosts: Vec::new(),
                    virtual_hosts: Vec::new(),
                    passthrough: Vec::new(),
                    tcp,
                });
            }
            Some(GatewayPort {
                gateway: gw.oref.clone(),
                bind,
                edge,
                protocol,
                tls_hosts,
                virtual_hosts: virtual_hosts.into_iter().map(Arc::new).collect(),
                passthrough: Vec::new(),
                tcp: Vec::new(),
            })
        })
        .collect()
}

/// True when another listener on the port has a hostname more specific than listener
/// `li`'s that covers `h`: requests for `h` belong to that listener.
fn more_specific_listener(h: &Host, li: usize, idx: &[usize], gw: &Gw<'_>) -> bool {
    let mine = &gw.listeners[li].host;
    idx.iter().filter(|&&o| o != li).any(|&o| {
        let other = &gw.listeners[o].host;
        other.covers(h) && mine.covers(other) && other != mine
    })
}

fn gateway_status(gw: &Gw<'_>, now: &Time) -> GatewayStatus {
    let generation = gw.obj.metadata.generation;
    let cond =
        |kind: &str, ok: bool, reason: &str, message: String| condition(kind, ok, reason, message, generation, now);
    let listeners: Vec<GatewayStatusListeners> = gw
        .listeners
        .iter()
        .map(|l| {
            let mut c = Vec::new();
            c.push(match (l.conflict, &l.unsupported) {
                (Some("ProtocolConflict"), _) => cond(
                    "Accepted",
                    false,
                    "ProtocolConflict",
                    format!("listeners on port {} use different protocols (or TLS modes)", l.spec.port),
                ),
                (_, Some((reason, msg))) => cond("Accepted", false, reason, msg.clone()),
                _ => cond("Accepted", true, "Accepted", "listener accepted".into()),
            });
            c.push(match l.conflict {
                Some(reason) => cond(
                    "Conflicted",
                    true,
                    reason,
                    format!("another listener on port {} conflicts with this one ({reason})", l.spec.port),
                ),
                None => cond("Conflicted", false, "NoConflicts", "no conflicts".into()),
            });
            c.push(match (&l.bad_kinds, &l.bad_ref) {
                (Some(msg), _) => cond("ResolvedRefs", false, "InvalidRouteKinds", msg.clone()),
                (None, Some((reason, msg))) => cond("ResolvedRefs", false, reason, msg.clone()),
                (None, None) => cond("ResolvedRefs", true, "ResolvedRefs", "every reference resolved".into()),
            });
            c.push(match (l.ready(), &gw.address) {
                (true, Ok(_)) => cond("Programmed", true, "Programmed", "listener is served".into()),
                (true, Err((_, msg))) => cond("Programmed", false, "Pending", msg.clone()),
                (false, _) => {
                    cond("Programmed", false, "Invalid", "listener is not served; see its other conditions".into())
                }
            });
            GatewayStatusListeners {
                attached_routes: l.attached,
                conditions: c,
                name: l.spec.name.clone(),
                supported_kinds: Some(l.kinds.clone()),
            }
        })
        .collect();
    let valid = gw.listeners.iter().filter(|l| l.ready()).count();
    let accepted = if valid == gw.listeners.len() {
        cond("Accepted", true, "Accepted", "Gateway accepted".into())
    } else if valid > 0 {
        cond(
            "Accepted",
            true,
            "ListenersNotValid",
            format!(
                "{} of {} listeners are not valid; see their conditions",
                gw.listeners.len() - valid,
                gw.listeners.len()
            ),
        )
    } else {
        cond("Accepted", false, "ListenersNotValid", "no listener is valid; see their conditions".into())
    };
    let programmed = match &gw.address {
        Ok(Place::Address(ip)) if valid > 0 => cond("Programmed", true, "Programmed", format!("served on {ip}")),
        Ok(Place::Edge) if valid > 0 => cond(
            "Programmed",
            true,
            "Programmed",
            "served on Wharf's own listeners, at the address of its Service".into(),
        ),
        Ok(_) => cond("Programmed", false, "Invalid", "no listener is valid".into()),
        Err((reason, msg)) => cond("Programmed", false, reason, msg.clone()),
    };
    GatewayStatus {
        addresses: match gw.address {
            Ok(Place::Address(ip)) => {
                Some(vec![GatewayStatusAddresses { r#type: Some("IPAddress".into()), value: ip.to_string() }])
            }
            _ => None,
        },
        attached_listener_sets: None,
        conditions: Some(vec![accepted, programmed]),
        listeners: Some(listeners),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_ranges_skip_the_network_address_and_wrap() {
        // 10.0.0.6/30 is 10.0.0.4 to 10.0.0.7.
        let p = AddressPool::parse("10.0.0.6/30").unwrap_or(AddressPool { first: 0, size: 1 });
        let ip = |s: &str| s.parse::<IpAddr>().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        assert!(!p.contains(ip("10.0.0.4")) && !p.contains(ip("10.0.0.8")) && !p.contains(ip("::1")));
        assert!(p.contains(ip("10.0.0.5")) && p.contains(ip("10.0.0.7")));
        let nth: Vec<IpAddr> = (0..4).map(|n| p.nth(n)).collect();
        assert_eq!(nth, [ip("10.0.0.5"), ip("10.0.0.6"), ip("10.0.0.7"), ip("10.0.0.5")]);
        let big = AddressPool::parse("127.1.0.0/16").unwrap_or(p);
        assert_eq!(
            (big.nth(0), big.nth(65_534), big.nth(65_535)),
            (ip("127.1.0.1"), ip("127.1.255.255"), ip("127.1.0.1"))
        );
        assert!(big.contains(ip("127.1.255.255")) && !big.contains(ip("127.2.0.0")));
    }

    #[test]
    fn the_address_hash_is_fnv_1a() {
        assert_eq!(fnv(""), 0x811c_9dc5);
        assert_eq!(fnv("a"), 0xe40c_292c);
        assert_eq!(fnv("foobar"), 0xbf9c_f968);
    }
}
