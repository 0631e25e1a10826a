//! Gateway API: the GatewayClasses of our controller, their Gateways and the routes
//! attached to them (HTTP, GRPC, TLS, TCP), as Gateway ports in the snapshot, and the
//! status each object should show. Pure, like the Ingress translation; `k8s::gateway_status` writes the status.
//!
//! Each Gateway is served on its own address (see [`AddressPool`]), so that a route
//! attached to one Gateway is never served through another, even when both listen on the
//! same port.

mod addresses;
mod attach;
mod grpc;
pub mod http_route;
mod l4;
mod listeners;
mod ports;
mod rules;
mod status;

use crate::hashing::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use wharf_gateway_api::backendtlspolicies::BackendTlsPolicyStatusAncestors;
use wharf_gateway_api::gatewayclasses::{GatewayClass, GatewayClassStatus, GatewayClassStatusSupportedFeatures};
use wharf_gateway_api::gateways::{Gateway, GatewayListeners, GatewayStatus, GatewayStatusListenersSupportedKinds};
use wharf_gateway_api::grpcroutes::GrpcRoute;
use wharf_gateway_api::httproutes::{HttpRoute, HttpRouteStatusParents};
use wharf_gateway_api::tcproutes::TcpRoute;
use wharf_gateway_api::tlsroutes::TlsRoute;
use wharf_model::{Host, ObjectRef, PortProtocol, Route, Snapshot};

use crate::translate::backend::Backends;
use crate::translate::tls::Secrets;
use crate::translate::Refused;
use crate::translate::{acme::Demands, AcmeOptions, Diagnostic};
use crate::World;
// The steps, in order: addresses, listeners, attachment (with the rules of each route
// kind), ports, status; each step's file reaches the others' through this module.
use addresses::assign_addresses;
use attach::{attach_route, RouteView};
use grpc::grpc_rules;
use l4::{tcp_rules, tls_rules};
use listeners::{listeners, namespace_allowed};
use ports::ports;
use rules::{rules, weight, BackendRef, RuleSet, Rules};
use status::{gateway_status, policy_statuses};

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
    fn refuse(&self, l: &GatewayListeners, protocol: PortProtocol) -> Option<Refused> {
        let name = |p: PortProtocol| match p {
            PortProtocol::Http => "HTTP",
            PortProtocol::Https => "HTTPS",
            PortProtocol::Passthrough => "TLS (tls.mode Passthrough)",
            PortProtocol::Tcp => "TCP",
        };
        match self.sockets.iter().find(|s| i32::from(s.port) == l.port) {
            None => {
                let ports: Vec<String> = self.sockets.iter().map(|s| s.port.to_string()).collect();
                Some(Refused::new(
                    "PortUnavailable",
                    format!(
                        "port {} is not a port of this Gateway: it is served on Wharf's own listeners, the ports of its Service ({}); use one of those, or another Gateway",
                        l.port,
                        ports.join(", ")
                    ),
                ))
            }
            Some(s) if s.protocol != protocol => Some(Refused::new(
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
    unsupported: Option<Refused>,
    host: Host,
    conflict: Option<&'static str>,
    /// TLS is terminated here: an HTTPS listener, or a TLS listener in mode Terminate.
    terminates: bool,
    /// Certificates (snapshot ids) of a listener that terminates TLS, and why any ref is
    /// unresolved.
    certificates: Vec<String>,
    bad_ref: Option<Refused>,
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
    address: Result<Place, Refused>,
    listeners: Vec<Listener<'a>>,
}

/// Everything HTTPRoutes attach to, per Gateway port: (host, sort key, route) entries by
/// listener index.
type Attached = HashMap<(usize, usize), Vec<(Host, RouteKey, Route)>>;

/// Sort key of a route entry within a host: Gateway API precedence.
type RouteKey = (std::cmp::Reverse<bool>, std::cmp::Reverse<usize>, Vec<u8>, usize, usize, usize);

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

/// The status of a GatewayClass of ours: accepted unless it names parameters (Wharf
/// takes none), with the features Wharf supports.
fn class_status(c: &GatewayClass, now: &Time) -> GatewayClassStatus {
    let generation = c.metadata.generation;
    let accepted = match &c.spec.parameters_ref {
        None => condition("Accepted", true, "Accepted", "Wharf serves Gateways of this class", generation, now),
        Some(p) => condition(
            "Accepted",
            false,
            "InvalidParameters",
            format!("parametersRef {}/{} {}: Wharf takes no parameters; remove parametersRef", p.group, p.kind, p.name),
            generation,
            now,
        ),
    };
    let features =
        SUPPORTED_FEATURES.iter().map(|f| GatewayClassStatusSupportedFeatures { name: (*f).to_owned() }).collect();
    GatewayClassStatus { conditions: Some(vec![accepted]), supported_features: Some(features) }
}

/// Every route, of every kind, oldest first within its kind (HTTPRoutes, then GRPCRoutes,
/// TLSRoutes and TCPRoutes): the order in which they attach.
fn route_views<'a>(world: &'a World, backends: &'a Backends<'a>) -> Vec<RouteView<'a>> {
    fn oldest_first<'k, K: kube::Resource>(routes: impl Iterator<Item = &'k K>) -> Vec<&'k K> {
        let mut v: Vec<&K> = routes.collect();
        v.sort_by_key(|r| crate::kinds::age_of(*r));
        v
    }
    let http: Vec<&HttpRoute> = oldest_first(world.http_routes.iter());
    let grpc: Vec<&GrpcRoute> = oldest_first(world.grpc_routes.iter());
    let tls: Vec<&TlsRoute> = oldest_first(world.tls_routes.iter());
    let tcp: Vec<&TcpRoute> = oldest_first(world.tcp_routes.iter());
    http.into_iter()
        .map(|r| RouteView::http(r, world, backends))
        .chain(grpc.into_iter().map(|r| RouteView::grpc(r, world, backends)))
        .chain(tls.into_iter().map(|r| RouteView::tls(r, world, backends)))
        .chain(tcp.into_iter().map(|r| RouteView::tcp(r, world, backends)))
        .collect()
}

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
    let ours = || world.gateway_classes.iter().filter(|c| c.spec.controller_name == opts.controller_name);
    let classes: HashSet<&str> = ours().filter_map(|c| c.metadata.name.as_deref()).collect();
    for c in ours() {
        out.gateway_classes.push((c.metadata.name.clone().unwrap_or_default(), class_status(c, now)));
    }
    let mut gateways: Vec<&Gateway> =
        world.gateways.iter().filter(|g| classes.contains(g.spec.gateway_class_name.as_str())).collect();
    gateways.sort_by_key(|g| crate::kinds::age_of(*g));
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
                    .unwrap_or_else(|| Err(Refused::new("AddressNotAssigned", "no address".into())))
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
    for (age, view) in route_views(world, backends).into_iter().enumerate() {
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

/// A parent reference (`parentRefs` entry, or a status entry's `parentRef`) of one route
/// kind as the type `$to` of another: the generated GRPCRoute, TLSRoute and TCPRoute types
/// repeat the HTTPRoute's under other names. Field by field, so that a field one of them
/// lacks is a compile error, never a silent loss.
macro_rules! parent_ref {
    ($to:path, $p:expr) => {{
        let p = $p;
        $to {
            group: p.group.clone(),
            kind: p.kind.clone(),
            name: p.name.clone(),
            namespace: p.namespace.clone(),
            port: p.port,
            section_name: p.section_name.clone(),
        }
    }};
}
pub(crate) use parent_ref;

/// The status `parents` of a route of another kind as HTTPRoute's (see [`parent_ref`]).
macro_rules! status_parents {
    ($parents:expr) => {
        $parents
            .iter()
            .map(|s| wharf_gateway_api::httproutes::HttpRouteStatusParents {
                conditions: s.conditions.clone(),
                controller_name: s.controller_name.clone(),
                parent_ref: $crate::translate::gateway_api::parent_ref!(
                    wharf_gateway_api::httproutes::HttpRouteStatusParentsParentRef,
                    &s.parent_ref
                ),
            })
            .collect::<Vec<_>>()
    };
}
pub(crate) use status_parents;
