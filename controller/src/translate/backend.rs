//! Service backends: Service port resolution and EndpointSlice endpoints.

use crate::kinds::ByKey;
use crate::translate::Reason;
use std::collections::BTreeMap;

use crate::hashing::HashMap;
use std::fmt;
use std::net::SocketAddr;

use crate::stored::{Service, ServicePort};
use crate::stored::{Slice, SliceEndpoint};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use wharf_model::{AppProtocol, Cluster, Endpoint, Hbone, Identity, ObjectRef};

use super::{Diagnostic, World};
use crate::changes::Read;
use crate::well_known::{USE_WAYPOINT, USE_WAYPOINT_NAMESPACE};

/// A Service port, by number or by name, as an Ingress backend names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ServicePortRef {
    /// `port.number`
    Number(i32),
    /// `port.name`
    Name(String),
}

impl fmt::Display for ServicePortRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServicePortRef::Number(n) => write!(f, "{n}"),
            ServicePortRef::Name(n) => f.write_str(n),
        }
    }
}

impl std::str::FromStr for ServicePortRef {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.parse::<i32>() {
            Ok(n) => ServicePortRef::Number(n),
            Err(_) => ServicePortRef::Name(s.to_owned()),
        })
    }
}

/// The id of the cluster for a Service port: `namespace/name:port`.
pub fn cluster_id(ns: &str, name: &str, port: &ServicePortRef) -> String {
    format!("{ns}/{name}:{port}")
}

const H2C: &str = "kubernetes.io/h2c";

const DATAPLANE_MODE: &str = "istio.io/dataplane-mode";
/// ztunnel's inbound HBONE port.
pub const HBONE_PORT: u16 = 15008;

/// Lookup tables over the Services, EndpointSlices, Pods and Namespaces of a [`World`].
pub(super) struct Backends<'a> {
    services: ByKey<'a, Service>,
    /// The first EndpointSlice of each Service (most have one: no list to allocate) ...
    slices: HashMap<(&'a str, &'a str), &'a Slice>,
    /// ... and its others.
    more_slices: HashMap<(&'a str, &'a str), Vec<&'a Slice>>,
    pods: ByKey<'a, Pod>,
    namespaces: ByKey<'a, Namespace>,
    trust_domain: &'a str,
    cluster_domain: &'a str,
    /// BackendTLSPolicies, for Gateway API backends.
    pub(super) tls_policies: super::backend_tls::Policies,
    /// The Services, Pods and Namespaces looked up.
    pub(super) reads: super::reads::Recorder,
}

fn label<'a>(meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref().and_then(|l| l.get(key)).map(String::as_str)
}

impl<'a> Backends<'a> {
    pub(super) fn new(world: &'a World, trust_domain: &'a str, cluster_domain: &'a str, few: bool) -> Self {
        let mut slices = HashMap::with_capacity_and_hasher(world.endpoint_slices.len(), Default::default());
        let mut more_slices: HashMap<_, Vec<_>> = HashMap::default();
        for slice in &world.endpoint_slices {
            if let Some(svc) = slice.service.as_deref() {
                let key = (&*slice.namespace, svc);
                match slices.entry(key) {
                    std::collections::hash_map::Entry::Vacant(first) => {
                        first.insert(slice);
                    }
                    std::collections::hash_map::Entry::Occupied(_) => more_slices.entry(key).or_default().push(slice),
                }
            }
        }
        let tls_policies = super::backend_tls::Policies::new(world);
        Backends {
            services: ByKey::new(&world.services, few),
            slices,
            more_slices,
            pods: ByKey::new(&world.pods, few),
            namespaces: ByKey::new(&world.namespaces, few),
            trust_domain,
            cluster_domain,
            tls_policies,
            reads: Default::default(),
        }
    }

    /// Service `ns/name`.
    fn service(&self, ns: &str, name: &str) -> Option<&'a Service> {
        self.reads.read(|| Read::Service((ns.to_owned(), name.to_owned())));
        self.services.get(ns, name)
    }

    /// The EndpointSlices of Service `ns/name`.
    fn slices_of<'s>(&'s self, ns: &'s str, name: &'s str) -> impl Iterator<Item = &'a Slice> + 's {
        self.reads.read(|| Read::Service((ns.to_owned(), name.to_owned())));
        let first = self.slices.get(&(ns, name)).copied();
        first.into_iter().chain(self.more_slices.get(&(ns, name)).into_iter().flatten().copied())
    }

    /// Pod `ns/name`.
    fn pod(&self, ns: &str, name: &str) -> Option<&'a Pod> {
        self.reads.read(|| Read::Pod((ns.to_owned(), name.to_owned())));
        self.pods.get(ns, name)
    }

    /// Namespace `name`.
    fn namespace(&self, name: &str) -> Option<&'a Namespace> {
        self.reads.read(|| Read::Namespace(name.to_owned()));
        self.namespaces.get("", name)
    }

    /// Namespace `name` is in the ambient mesh.
    fn ambient(&self, name: &str) -> bool {
        self.namespace(name).is_some_and(|n| label(&n.metadata, DATAPLANE_MODE) == Some("ambient"))
    }

    /// How to reach a slice endpoint: through HBONE when its pod is in the ambient mesh
    /// (its namespace or itself labelled `istio.io/dataplane-mode=ambient`, and the pod not
    /// opted out with `none`), directly otherwise.
    fn hbone(&self, ep: &SliceEndpoint, target: SocketAddr) -> Option<Hbone> {
        let (pod_ns, pod_name) = ep.pod.as_deref()?;
        let pod = self.pod(pod_ns, pod_name)?;
        let ns = pod.metadata.namespace.as_deref()?;
        let enrolled = match label(&pod.metadata, DATAPLANE_MODE) {
            Some("ambient") => true,
            Some("none") => false,
            _ => self.ambient(ns),
        };
        if !enrolled {
            return None;
        }
        let sa = pod.spec.as_ref().and_then(|s| s.service_account_name.as_deref()).unwrap_or("default");
        Some(Hbone {
            dial: SocketAddr::new(target.ip(), HBONE_PORT),
            identity: Identity::new(self.trust_domain, ns, sa),
            authority: target.to_string(),
        })
    }

    /// Resolves `ns/name:port` into a cluster (added to `clusters` once) and returns its id.
    /// The name of port `number` of Service `ns/name`, if it has one.
    pub(super) fn port_name(&self, ns: &str, name: &str, number: i32) -> Option<&'a str> {
        let svc = self.service(ns, name)?;
        svc.ports.iter().find(|p| p.port == number)?.name.as_deref()
    }

    /// The first port of Service `ns/name`, if it exists and has one.
    pub(super) fn first_port(&self, ns: &str, name: &str) -> Option<i32> {
        let svc = self.service(ns, name)?;
        Some(svc.ports.first()?.port)
    }

    /// `None`, with a diagnostic on `src`, when the Service or its port does not exist.
    pub(super) fn cluster(
        &self,
        ns: &str,
        name: &str,
        port: &ServicePortRef,
        src: &ObjectRef,
        diags: &mut Vec<Diagnostic>,
        clusters: &mut imbl::OrdMap<String, Cluster>,
    ) -> Option<String> {
        self.cluster_for(ns, name, port, false, src, diags, clusters)
    }

    /// [`Backends::cluster`], spoken to over HTTP/2 (h2c) whatever the port's
    /// `appProtocol` says when `h2` (gRPC). Such a cluster has an id of its own.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn cluster_for(
        &self,
        ns: &str,
        name: &str,
        port: &ServicePortRef,
        h2: bool,
        src: &ObjectRef,
        diags: &mut Vec<Diagnostic>,
        clusters: &mut imbl::OrdMap<String, Cluster>,
    ) -> Option<String> {
        let Some(svc) = self.service(ns, name) else {
            diags.push(Diagnostic {
                object: src.clone(),
                reason: Reason::ServiceNotFound,
                message: format!("backend Service {ns}/{name} does not exist; requests for it get 503 until it does"),
            });
            return None;
        };
        let ports = &svc.ports;
        let Some(sp) = ports.iter().find(|p| match port {
            ServicePortRef::Number(n) => p.port == *n,
            ServicePortRef::Name(n) => p.name.as_deref() == Some(n.as_str()),
        }) else {
            let have: Vec<String> = ports.iter().map(describe_port).collect();
            diags.push(Diagnostic {
                object: src.clone(),
                reason: Reason::ServicePortNotFound,
                message: format!(
                    "Service {ns}/{name} has no port {port} (it has: {}); requests for it get 503",
                    have.join(", ")
                ),
            });
            return None;
        };
        if svc.external_name {
            diags.push(Diagnostic {
                object: src.clone(),
                reason: Reason::UnsupportedBackend,
                message: format!("Service {ns}/{name} is of type ExternalName, which is not supported yet"),
            });
            return None;
        }
        let mut id = cluster_id(ns, name, &ServicePortRef::Number(sp.port));
        let h2c = h2 || sp.app_protocol.as_deref() == Some(H2C);
        if h2 {
            id.push_str("/h2c");
        }
        if !clusters.contains_key(&id) {
            let mut refused = Vec::new();
            let cluster = Cluster {
                protocol: if h2c { AppProtocol::H2c } else { AppProtocol::Http1 },
                endpoints: match self.waypoint(svc, ns) {
                    Some(waypoint) => self.through_waypoint(svc, ns, name, sp, waypoint, &mut refused),
                    None => self.endpoints(ns, name, sp, &mut refused),
                },
                tls: None,
            };
            if !refused.is_empty() {
                refused.sort();
                refused.dedup();
                diags.push(Diagnostic {
                    object: src.clone(),
                    reason: ENDPOINT_REFUSED,
                    message: format!("Service {ns}/{name}: endpoints not dialed: {}", refused.join("; ")),
                });
            }
            clusters.insert(id.clone(), cluster);
        }
        Some(id)
    }

    /// The waypoint Service a Service uses: its own `istio.io/use-waypoint` label, else its
    /// namespace's (`istio.io/use-waypoint-namespace` moves the lookup to another namespace).
    fn waypoint(&self, svc: &'a Service, ns: &'a str) -> Option<&'a Service> {
        let namespace = self.namespace(ns);
        let from = |key: &str| svc.labels.get(key).or_else(|| namespace.and_then(|n| label(&n.metadata, key)));
        let name = from(USE_WAYPOINT).filter(|w| *w != "none")?;
        let wns = from(USE_WAYPOINT_NAMESPACE).unwrap_or(ns);
        self.service(wns, name)
    }

    /// Endpoints that reach `svc` through its waypoint: HBONE tunnels to the waypoint's pods
    /// with the Service's own address as the CONNECT authority.
    fn through_waypoint(
        &self,
        svc: &Service,
        ns: &str,
        name: &str,
        sp: &ServicePort,
        waypoint: &Service,
        refused: &mut Vec<String>,
    ) -> Vec<Endpoint> {
        let (wns, wname) = (&*waypoint.namespace, &*waypoint.name);
        let cluster_ip = svc.cluster_ip;
        let authority = match cluster_ip {
            Some(ip) => SocketAddr::new(ip, sp.port as u16).to_string(),
            None => format!("{name}.{ns}.svc.{}:{}", self.cluster_domain, sp.port),
        };
        let mut out = Vec::new();
        for slice in self.slices_of(wns, wname) {
            for ep in &slice.endpoints {
                if !ep.ready.unwrap_or(true) || !admitted(ep, &slice.namespace, refused) {
                    continue;
                }
                for &ip in &ep.addresses {
                    if !dialable(ip, refused) {
                        continue;
                    }
                    let dial = SocketAddr::new(ip, HBONE_PORT);
                    let sa = ep
                        .pod
                        .as_deref()
                        .and_then(|(ns, name)| self.pod(ns, name))
                        .and_then(|p| p.spec.as_ref()?.service_account_name.as_deref())
                        .unwrap_or(wname);
                    out.push(Endpoint {
                        addr: cluster_ip.map_or(dial, |ip| SocketAddr::new(ip, sp.port as u16)),
                        hbone: Some(Hbone {
                            dial,
                            identity: Identity::new(self.trust_domain, wns, sa),
                            authority: authority.clone(),
                        }),
                    });
                }
            }
        }
        out.sort_by_key(|e| e.hbone.as_ref().map(|h| h.dial));
        out.dedup();
        out
    }

    /// Ready endpoints of the Service port; if none are ready, those still serving while
    /// terminating (so a rollout's last pods keep answering).
    /// Endpoints that belong to another namespace, or whose address no workload can have,
    /// are not dialed: `refused` says which and why.
    fn endpoints(&self, ns: &str, name: &str, sp: &ServicePort, refused: &mut Vec<String>) -> Vec<Endpoint> {
        let mut ready = EndpointSet::default();
        let mut terminating = EndpointSet::default();
        let want_name = sp.name.as_deref().unwrap_or("");
        for slice in self.slices_of(ns, name) {
            if slice.fqdn {
                continue;
            }
            let Some(port) = slice
                .ports
                .iter()
                .find(|p| p.name.as_deref().unwrap_or("") == want_name)
                .and_then(|p| p.port)
                .and_then(|p| u16::try_from(p).ok())
            else {
                continue;
            };
            for ep in &slice.endpoints {
                if !admitted(ep, &slice.namespace, refused) {
                    continue;
                }
                let is_ready = ep.ready.unwrap_or(true);
                let serving = ep.serving.unwrap_or(is_ready);
                let is_terminating = ep.terminating.unwrap_or(false);
                for &ip in &ep.addresses {
                    if !dialable(ip, refused) {
                        continue;
                    }
                    let sa = SocketAddr::new(ip, port);
                    let endpoint = Endpoint { addr: sa, hbone: self.hbone(ep, sa) };
                    if is_ready {
                        ready.insert(endpoint);
                    } else if serving && is_terminating {
                        terminating.insert(endpoint);
                    }
                }
            }
        }
        let chosen = if ready.is_empty() { terminating } else { ready };
        chosen.into_iter().collect()
    }
}

/// Reason of the diagnostic on an object whose Service lists endpoints Wharf does not dial.
pub const ENDPOINT_REFUSED: Reason = Reason::EndpointRefused;

/// Whether `ep`, of an EndpointSlice in `namespace`, may be dialed: its `targetRef`, if
/// any, names a Pod of that namespace (else it would borrow another namespace's pod, and
/// its mesh identity).
fn admitted(ep: &SliceEndpoint, namespace: &str, refused: &mut Vec<String>) -> bool {
    match ep.pod.as_deref() {
        Some((pod_ns, pod)) if **pod_ns != *namespace => {
            let at = ep.addresses.first().map(ToString::to_string).unwrap_or_default();
            refused.push(format!("{at} names Pod {pod_ns}/{pod}, of another namespace"));
            false
        }
        _ => true,
    }
}

/// Whether `ip` may be dialed: a workload's address, or loopback (the gateway's own
/// network namespace, where the dialer refuses the gateway's own ports; the API server
/// admits it in EndpointSlices, and local backends use it). Never link-local (where cloud
/// metadata answers), multicast, broadcast or unspecified.
fn dialable(ip: std::net::IpAddr, refused: &mut Vec<String>) -> bool {
    let ok = ip.to_canonical().is_loopback() || wharf_model::is_workload_address(ip);
    if !ok {
        refused.push(format!("{ip} is link-local, multicast or unspecified: no workload has it"));
    }
    ok
}

fn describe_port(p: &ServicePort) -> String {
    match &p.name {
        Some(n) => format!("{} ({n})", p.port),
        None => p.port.to_string(),
    }
}

/// Endpoints in address order, each address once.
#[derive(Default)]
struct EndpointSet(BTreeMap<SocketAddr, Endpoint>);

impl EndpointSet {
    fn insert(&mut self, e: Endpoint) {
        self.0.entry(e.addr).or_insert(e);
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn into_iter(self) -> impl Iterator<Item = Endpoint> {
        self.0.into_values()
    }
}
