//! networking.k8s.io/v1 Ingress semantics, as a pure function.

pub mod acme;
pub mod annotations;
mod auth;
pub(crate) mod backend;
mod backend_tls;
mod class;
pub mod edge;
pub mod gateway;
pub mod grants;
pub mod http_route;
pub mod owners;
pub mod parts;
mod reads;
mod tls;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::stored::ingress::{HttpPath as HTTPIngressPath, Ingress, IngressBackend, IngressRule};
use wharf_model::{
    Action, HeaderMatch, Host, ObjectRef, PathMatch, PathRewrite, Redirect, Route, RouteMatch, Snapshot, SniRoute,
    TcpRoute, UrlRewrite, VirtualHost, WeightedBackend,
};

use crate::World;
use backend::Backends;
pub use backend::ServicePortRef;

use crate::hashing::{HashMap, HashSet};

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
    pub gateway: gateway::GatewayOptions,
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
            gateway: gateway::GatewayOptions::default(),
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
    /// Short stable CamelCase reason (Event reason, metric label).
    pub reason: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
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
    pub gateway_status: gateway::Statuses,
    /// The certificates to obtain from ACME.
    pub acme: Vec<acme::Demand>,
}

/// Builds a snapshot from the objects in `world`.
///
/// `previous` is the snapshot currently served: when a Secret turns bad, the certificate
/// it held there keeps serving.
pub fn translate(world: &World, opts: &Options, previous: Option<&Snapshot>) -> Translation {
    parts::Incremental::whole().translate(world, opts, previous, &crate::changes::Changes::everything())
}

/// What translation reads besides the Ingresses, looked up once per translation.
struct Lookups<'a> {
    opts: &'a Options,
    secrets: tls::Secrets<'a>,
    backends: Backends<'a>,
    /// The snapshot served now: who serves a host there keeps it.
    previous: Option<&'a Snapshot>,
    /// Which references to other namespaces are shared.
    grants: &'a crate::kinds::Objects<wharf_gateway_api::referencegrants::ReferenceGrant>,
    /// Who served each host, as the leader recorded it.
    record: owners::Record,
}

impl<'a> Lookups<'a> {
    /// `few`: few lookups will be made; objects in key order are then searched where they
    /// are instead of through maps built first (which pay off over many lookups: a search
    /// touches about twice as many objects as the log of their number).
    fn new(world: &'a World, opts: &'a Options, previous: Option<&'a Snapshot>, few: bool) -> Self {
        Lookups {
            opts,
            secrets: tls::Secrets::new(crate::kinds::ByKey::new(&world.secrets, few), previous, opts.now),
            backends: Backends::new(world, &opts.trust_domain, &opts.cluster_domain, few),
            previous,
            grants: &world.reference_grants,
            record: record(world, &opts.ownership),
        }
    }
}

/// Translates the Ingresses of one part, oldest first, each with its settings; `diags`
/// holds what reading the settings found.
fn ingress_part(
    l: &Lookups<'_>,
    users: &mut auth::Users,
    members: &[(&Ingress, annotations::Settings)],
    diags: Vec<Diagnostic>,
) -> parts::Part {
    let (opts, secrets) = (l.opts, &l.secrets);
    let claims = claims(members, &l.record, l.previous);
    let mut t = Translator {
        opts,
        diags,
        snapshot: Snapshot::default(),
        backends: &l.backends,
        acme: Default::default(),
        claims,
    };
    let mut tls_hosts = tls::TlsHosts::default();
    let mut routes = RouteTable::default();
    let ours: Vec<&Ingress> = members.iter().map(|(ing, _)| *ing).collect();
    let settings: Vec<&annotations::Settings> = members.iter().map(|(_, s)| s).collect();
    routes.regex_hosts = regex_hosts(&ours, &settings);
    // The hosts an external authentication check may be routed to, when any asks.
    let external = settings.iter().any(|s| matches!(s.auth.as_deref(), Some(annotations::AuthSetting::External(_))));
    let ours_hosts = if external { auth::rule_hosts(&ours) } else { HashSet::default() };
    let mut served = Vec::with_capacity(ours.len());
    for &(ing, ref settings) in members {
        let src = ingress_ref(ing);
        let mut auth = match settings.auth.as_deref() {
            _ if settings.skip || settings.canary.is_some() => None,
            None => None,
            Some(annotations::AuthSetting::External(e)) => Some(t.external_auth(&src, e, &ours_hosts, l.grants)),
            Some(annotations::AuthSetting::Basic { realm, secret: (ns, name), map }) => {
                Some(users.resolve(secrets, &src, realm, (ns, name), *map, &mut t.diags))
            }
            Some(annotations::AuthSetting::Unavailable(why)) => Some(wharf_model::Auth::Unavailable(why.clone())),
        };
        let client_cert = match &settings.client_tls {
            Some(c) if !settings.skip && settings.canary.is_none() => match t.client_tls(secrets, ing, c) {
                Ok(check) => Some(check),
                // Client certificates that cannot be checked refuse every request.
                Err(why) => {
                    auth = Some(wharf_model::Auth::Unavailable(why));
                    None
                }
            },
            _ => None,
        };
        let access = Access { auth, client_cert };
        if t.ingress(ing, settings, access, secrets, &mut tls_hosts, &mut routes) {
            served.push((ing, settings));
        }
    }
    for (ing, settings) in &served {
        if let Some(canary) = &settings.canary {
            t.canary(ing, canary, &mut routes);
        }
    }
    routes.add_www_redirects(&t.claims, &opts.ownership);
    let tls_hosts = tls_hosts.into_hosts();
    parts::Part {
        virtual_hosts: routes.take_virtual_hosts(&tls_hosts),
        tls_hosts,
        default_backend: routes.default_backend.map(Box::new),
        passthrough: routes.passthrough.into_values().collect(),
        client_auth: t.snapshot.client_auth,
        certificates: tight(t.snapshot.certificates),
        clusters: tight(t.snapshot.clusters),
        diags: t.diags,
        served: served.iter().map(|(ing, _)| ingress_ref(ing)).collect(),
        acme: t.acme.into_vec(),
    }
}

/// The record of who served each host, from the ConfigMap the options name.
fn record(world: &World, rules: &owners::Ownership) -> owners::Record {
    let Some((ns, name)) = rules.record.as_ref() else { return owners::Record::default() };
    let map = crate::kinds::ByKey::new(&world.config_maps, true).get(ns, name);
    let text = map.and_then(|m| m.data.as_ref()?.get(crate::well_known::HOST_OWNERS_KEY));
    text.map(|t| owners::Record::parse(t)).unwrap_or_default()
}

/// The hosts the Ingresses of a part claim (rule, TLS and passthrough hosts): first the
/// claims of the namespace that keeps a host ([`owners::keeper`]: the record's, else
/// the one serving it in `previous`), then the others, oldest Ingress first. Canaries
/// and Ingresses Wharf skips claim none.
fn claims(
    members: &[(&Ingress, annotations::Settings)],
    record: &owners::Record,
    previous: Option<&Snapshot>,
) -> owners::Claims {
    let mut all: Vec<(bool, usize, Host, &str)> = Vec::new();
    for (age, (ing, settings)) in members.iter().enumerate() {
        let Some(spec) = ing.spec.as_ref().filter(|_| !settings.skip && settings.canary.is_none()) else { continue };
        let ns = ing.metadata.namespace.as_deref().unwrap_or("default");
        let rule_hosts = spec.rules.iter().flatten().map(|r| r.host.as_deref().filter(|h| !h.is_empty()));
        let tls_hosts = spec.tls.iter().flatten().flat_map(|t| t.hosts.iter().flatten()).map(|h| Some(&**h));
        for raw in rule_hosts.chain(tls_hosts) {
            let host = match raw.map(Host::parse) {
                None => Host::Any,
                Some(Ok(host)) => host,
                Some(Err(_)) => continue,
            };
            let held = owners::keeper(record, previous, &host) == Some(ns);
            all.push((!held, age, host, ns));
        }
    }
    all.sort_by_key(|&(newcomer, age, _, _)| (newcomer, age));
    let mut claims = owners::Claims::default();
    for (rank, (_, _, host, ns)) in all.iter().enumerate() {
        claims.claim(host, rank, ns);
    }
    claims
}

/// The entries of `map`, in order, in a vector with no room to spare.
fn tight<V: Clone>(map: imbl::OrdMap<String, V>) -> Vec<(String, V)> {
    let mut entries: Vec<_> = map.into_iter().collect();
    entries.shrink_to_fit();
    entries
}

/// Adds to `snapshot`, which holds the Ingresses' part, what the rest of `world` and the
/// options make: the default certificate, ACME challenges, TCP services, Istio's
/// passthrough names and Gateway API.
fn finish(
    world: &World,
    l: &Lookups<'_>,
    snapshot: Snapshot,
    diags: Vec<Diagnostic>,
    acme: acme::Demands,
    ingresses: imbl::OrdSet<ObjectRef>,
) -> Translation {
    let opts = l.opts;
    let mut t = Translator { opts, diags, snapshot, backends: &l.backends, acme, claims: owners::Claims::default() };
    if let Some((ns, name)) = &opts.default_certificate {
        let source = ObjectRef::new("Secret", ns, name);
        if let Some(id) = l.secrets.certificate(ns, name, &source, &mut t.diags, &mut t.snapshot) {
            t.snapshot.default_certificate = Some(id);
        }
    }
    if let Some(namespace) = &opts.acme.challenge_namespace {
        t.snapshot.acme = acme::challenges(&world.secrets, namespace, &mut t.diags);
    }
    for tcp in &opts.tcp_services {
        let source = ObjectRef::new("Service", &tcp.namespace, &tcp.service);
        if let Some(cluster) =
            t.backends.cluster(&tcp.namespace, &tcp.service, &tcp.port, &source, &mut t.diags, &mut t.snapshot.clusters)
        {
            t.snapshot.tcp_routes.push(TcpRoute { port: tcp.listen_port, cluster });
        }
    }
    if opts.auto_passthrough {
        t.auto_passthrough(world);
    }
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(opts.now).unwrap_or_default(),
    );
    let mut acme = gateway::AcmeAsks { opts: &opts.acme, demands: &mut t.acme, diags: &mut t.diags };
    let mut gateway_status =
        gateway::translate(world, &opts.gateway, t.backends, &l.secrets, &mut t.snapshot, &now, &mut acme);
    let lost = edge::share(world, &opts.ownership, (&l.record, l.previous), &ingresses, &mut t.snapshot);
    edge::refuse_routes(&lost.diags, &t.snapshot, &mut gateway_status);
    for (host, ns) in &lost.hosts {
        // Neither the certificate of the namespace that lost the host nor its ACME order.
        let theirs = t.snapshot.tls_hosts.get(host).is_some_and(|h| h.certificate.split('/').next() == Some(ns));
        if theirs {
            t.snapshot.tls_hosts.remove(host);
        }
        if let Host::Exact(name) = host {
            t.acme.drop_name(ns, name);
        }
    }
    t.diags.extend(lost.diags);
    t.diags.extend(edge::overridden(&t.snapshot));

    t.diags.sort();
    t.diags.dedup();
    Translation {
        snapshot: Arc::new(t.snapshot),
        diagnostics: t.diags,
        ingresses,
        gateway_status,
        acme: t.acme.into_vec(),
    }
}

/// The hosts whose paths are regular expressions: those of every served Ingress with
/// `use-regex` or `rewrite-target`, for all Ingresses on them (as in ingress-nginx).
fn regex_hosts(ours: &[&Ingress], settings: &[&annotations::Settings]) -> HashSet<Host> {
    ours.iter()
        .zip(settings)
        .filter(|(_, s)| s.regex() && !s.skip)
        .flat_map(|(ing, _)| ing.spec.iter().flat_map(|s| s.rules.iter().flatten()))
        .filter_map(|rule| match rule.host.as_deref() {
            None | Some("") => Some(Host::Any),
            Some(h) => Host::parse(h).ok(),
        })
        .collect()
}

/// A path of an Ingress on a regex host, as ingress-nginx matches it: `~* "^PATH"`
/// (case-insensitive, open at the end), whatever its pathType, except that a path with
/// regex syntax needs `ImplementationSpecific`.
fn regex_path(raw: &str, path_type: &str) -> Result<PathMatch, String> {
    let plain = raw.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~/".contains(&b));
    if !plain && path_type != "ImplementationSpecific" {
        return Err(format!(
            "path {raw:?} skipped: a regular expression needs pathType ImplementationSpecific, not {path_type}"
        ));
    }
    if !raw.starts_with('/') {
        return Err(format!("path {raw:?} skipped: it must start with '/'"));
    }
    wharf_model::Pattern::leading(raw).map(|p| PathMatch::Regex(Box::new(p))).map_err(|e| format!("path skipped: {e}"))
}

/// Oldest first: creationTimestamp, then namespace/name, as Gateway API specifies.
fn age_key(ing: &Ingress) -> (Option<k8s_openapi::jiff::Timestamp>, &str, &str) {
    let m = &ing.metadata;
    (m.creation_timestamp.as_ref().map(|t| t.0), m.namespace.as_deref().unwrap_or(""), m.name.as_deref().unwrap_or(""))
}

/// The other name of `from-to-www-redirect`: `name` without `www.`, or with it.
fn www_alias(name: &str) -> String {
    match name.strip_prefix("www.") {
        Some(bare) => bare.to_owned(),
        None => format!("www.{name}"),
    }
}

pub(crate) fn ingress_ref(ing: &Ingress) -> ObjectRef {
    ObjectRef::new(
        "Ingress",
        ing.metadata.namespace.as_deref().unwrap_or("default"),
        ing.metadata.name.as_deref().unwrap_or(""),
    )
}

#[derive(Default)]
struct RouteTable {
    /// (host, path) -> route; the first claim (oldest Ingress) wins.
    by_host: BTreeMap<Host, Vec<Route>>,
    claimed: HashMap<(Host, RouteMatch), ObjectRef>,
    default_backend: Option<Route>,
    passthrough: BTreeMap<Host, SniRoute>,
    /// `from-to-www-redirect`: (from, to, source): requests for `from` are redirected to
    /// `to`, unless some Ingress serves `from` itself.
    www_redirects: Vec<(String, String, ObjectRef)>,
    /// Hosts whose paths are regular expressions (`use-regex`, `rewrite-target`).
    regex_hosts: HashSet<Host>,
    /// The backend protocol of each Ingress that is not a canary.
    protocols: HashMap<ObjectRef, (annotations::BackendProtocol, Option<VerifiedTls>)>,
    /// (host, path) -> the canary Ingress taking requests from its route.
    canaried: HashMap<(Host, RouteMatch), ObjectRef>,
    /// Ingresses with `force-ssl-redirect` (and their canaries).
    forced: HashSet<ObjectRef>,
}

impl RouteTable {
    /// Redirects the `from-to-www-redirect` aliases that no Ingress serves and no other
    /// namespace owns.
    fn add_www_redirects(&mut self, claims: &owners::Claims, rules: &owners::Ownership) {
        for (from, to, source) in std::mem::take(&mut self.www_redirects) {
            let host = Host::Exact(from);
            if self.by_host.contains_key(&host) || claims.may_serve(&host, &source.namespace, rules).is_err() {
                continue;
            }
            let redirect =
                Redirect { scheme: None, host: Some(to), port: None, path: None, status: 308, location: None };
            let route = Route {
                action: Action::Redirect(redirect),
                ..Route::forward(PathMatch::Prefix("/".into()), "", source)
            };
            self.by_host.insert(host, vec![route]);
        }
    }

    fn take_virtual_hosts(&mut self, tls_hosts: &[wharf_model::TlsHost]) -> Vec<Arc<VirtualHost>> {
        let by_host = std::mem::take(&mut self.by_host);
        let tls = TlsCovered::new(tls_hosts);
        by_host
            .into_iter()
            .map(|(host, mut routes)| {
                routes.sort_by_key(|r| r.matches.precedence_key());
                let has_tls = tls.covers(&host);
                for r in &mut routes {
                    // `https_redirect` holds "the Ingress allows it" until here; with
                    // `force-ssl-redirect` its Ingress redirects without TLS too.
                    r.https_redirect &= has_tls || self.forced.contains(&r.source);
                }
                // Most hosts have one route; the vector grew for four.
                routes.shrink_to_fit();
                Arc::new(VirtualHost { host, routes })
            })
            .collect()
    }
}

/// Adds `route` to a host's routes. Most hosts have one: the first gets room for one
/// (a vector grows for four, and 10,000 hosts would hold 17 MB of room for routes they
/// do not have while translating).
fn push_route(routes: &mut Vec<Route>, route: Route) {
    if routes.capacity() == 0 {
        routes.reserve_exact(1);
    }
    routes.push(route);
}

/// Which hosts have TLS: an exact name when a TLS host is that name or a wildcard matching
/// it, a wildcard when a TLS host is that same wildcard. The TLS hosts are indexed once, so
/// that each host costs a lookup and a test of the (few) wildcard TLS hosts.
struct TlsCovered<'a> {
    all: HashSet<&'a Host>,
    wildcards: Vec<&'a Host>,
}

impl<'a> TlsCovered<'a> {
    fn new(tls_hosts: &'a [wharf_model::TlsHost]) -> Self {
        let all: HashSet<&Host> = tls_hosts.iter().map(|t| &t.host).collect();
        let wildcards = all.iter().copied().filter(|h| !matches!(h, Host::Exact(_))).collect();
        TlsCovered { all, wildcards }
    }

    fn covers(&self, host: &Host) -> bool {
        match host {
            Host::Exact(name) => self.all.contains(host) || self.wildcards.iter().any(|t| t.matches(name)),
            Host::Wildcard(_) | Host::Suffix(_) => self.all.contains(host),
            Host::Any => false,
        }
    }
}

/// What every route of an Ingress asks of its clients.
struct Access {
    auth: Option<wharf_model::Auth>,
    client_cert: Option<wharf_model::ClientCertCheck>,
}

impl VerifiedTls {
    fn new(ca_pem: Option<std::sync::Arc<str>>, p: &annotations::ProxySslSetting) -> VerifiedTls {
        VerifiedTls { ca_pem, name: p.name.clone(), sni: p.server_name, depth: p.verify_depth }
    }
}

/// How an Ingress's HTTPS or GRPCS backends' certificates are checked (`proxy-ssl-*`),
/// its Secret read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct VerifiedTls {
    /// The CA certificates (PEM); the system's roots when `None`.
    ca_pem: Option<std::sync::Arc<str>>,
    /// The name the certificate must cover, if not `SERVICE.NAMESPACE.svc`.
    name: Option<String>,
    /// It is sent as SNI.
    sni: bool,
    /// The chain's depth.
    depth: u8,
}

struct Translator<'a> {
    opts: &'a Options,
    diags: Vec<Diagnostic>,
    snapshot: Snapshot,
    backends: &'a Backends<'a>,
    acme: acme::Demands,
    /// The first claim on each host of the Ingresses being translated.
    claims: owners::Claims,
}

impl<'a> Translator<'a> {
    fn diag(&mut self, object: &ObjectRef, reason: &'static str, message: String) {
        self.diags.push(Diagnostic { object: object.clone(), reason, message });
    }

    /// Whether the namespace of `src` may serve `host` (see [`owners`]); told on `src`
    /// when not, `what` naming the claim ("host", "TLS host", ...).
    fn owns(&mut self, src: &ObjectRef, host: &Host, what: &str) -> bool {
        match self.claims.may_serve(host, &src.namespace, &self.opts.ownership) {
            Ok(()) => true,
            Err(refusal) => {
                let shown = match host {
                    Host::Any => format!("{what} * (rules without host)"),
                    h => format!("{what} {h}"),
                };
                self.diag(src, owners::HOST_OWNED, refusal.message(&shown));
                false
            }
        }
    }

    /// Adds the Ingress's TLS hosts and routes; false when it is not served at all.
    fn ingress(
        &mut self,
        ing: &Ingress,
        settings: &annotations::Settings,
        access: Access,
        secrets: &tls::Secrets,
        tls_hosts: &mut tls::TlsHosts,
        routes: &mut RouteTable,
    ) -> bool {
        let src = ingress_ref(ing);
        if settings.skip {
            return false;
        }
        let Some(spec) = &ing.spec else { return true };
        if settings.canary.is_some() {
            // Its paths join those of the Ingresses it shadows once they are all known; its
            // TLS and default backend are theirs.
            return true;
        }
        if settings.ssl_passthrough {
            self.passthrough(ing, &src, routes);
            return true;
        }
        // Set only for HTTPS and GRPCS backends.
        let verified = match &settings.proxy_ssl {
            Some(p) => self.verified_tls(&src, p, secrets),
            None => Ok(None),
        };
        // A check that cannot be set up refuses every request.
        let (access, verified) = match verified {
            Ok(v) => (access, v),
            Err(why) => (Access { auth: Some(wharf_model::Auth::Unavailable(why)), ..access }, None),
        };
        // What every route of the Ingress gets.
        let shape = |route: Route| -> Route {
            match &settings.redirect {
                // A fixed redirect answers before the HTTPS redirect and the address
                // checks, as in ingress-nginx (its `return` runs first).
                Some(r) => Route {
                    action: Action::Redirect(Redirect {
                        scheme: None,
                        host: None,
                        port: None,
                        path: None,
                        status: r.status,
                        location: Some(r.url.clone()),
                    }),
                    ..route
                },
                None => {
                    let mut route = Route {
                        https_redirect: settings.ssl_redirect || settings.force_ssl_redirect,
                        max_body_bytes: settings.max_body_bytes,
                        clients: settings.clients.clone(),
                        cors: settings.cors.clone(),
                        rate_limit: settings.rate_limit.clone(),
                        auth: access.auth.clone().map(Box::new),
                        client_cert: access.client_cert.clone().map(Box::new),
                        ..route
                    };
                    if let Action::Forward(f) = &mut route.action {
                        f.affinity = settings.affinity.as_ref().map(|a| {
                            Box::new(wharf_model::CookieAffinity {
                                name: a.name.clone(),
                                // As ingress-nginx: the location's path, unless set (a regex is
                                // no cookie path).
                                path: a.path.clone().unwrap_or_else(|| match &route.matches.path {
                                    PathMatch::Exact(p) | PathMatch::Prefix(p) => p.clone(),
                                    PathMatch::Regex(_) => "/".to_owned(),
                                }),
                                max_age: a.max_age,
                                same_site: a.same_site.clone(),
                                secure: a.secure,
                            })
                        });
                        f.timeout_ms = settings.read_timeout_ms;
                        f.connect_timeout_ms = settings.connect_timeout_ms;
                        f.send_timeout_ms = settings.send_timeout_ms;
                        if let Some(host) = &settings.upstream_vhost {
                            f.rewrite = Some(Box::new(UrlRewrite { host: Some(host.clone()), path: None }));
                        }
                        if let Some(prefix) = &settings.forwarded_prefix {
                            f.request_headers.set.push(("x-forwarded-prefix".into(), prefix.clone()));
                        }
                    }
                    route
                }
            }
        };
        let fallback = settings.default_backend.as_ref().and_then(|name| self.fallback_cluster(&src, name));
        // The default backend, for a route to `backend`.
        let with_fallback = |mut route: Route, backend: &IngressBackend| -> Route {
            if let (Some(cluster), Some(svc), Action::Forward(f)) = (&fallback, &backend.service, &mut route.action) {
                let port = svc.port.as_ref().map(|p| match (p.number, &p.name) {
                    (Some(n), _) => n.to_string(),
                    (None, name) => name.as_deref().unwrap_or_default().to_owned(),
                });
                f.fallback = Some(Box::new(wharf_model::Fallback {
                    cluster: cluster.clone(),
                    error_codes: settings.custom_http_errors.clone(),
                    namespace: src.namespace.clone(),
                    ingress: src.name.clone(),
                    service: svc.name.to_string(),
                    service_port: port.unwrap_or_default(),
                }));
            }
            route
        };
        let protocol = settings.backend_protocol;
        for entry in spec.tls.iter().flatten() {
            let hosts: Vec<&str> = match &entry.hosts {
                Some(h) if !h.is_empty() => h.iter().map(|h| &**h).collect(),
                // No hosts: the entry covers every host of the Ingress's rules.
                _ => spec.rules.iter().flatten().filter_map(|r| r.host.as_deref()).collect(),
            };
            // Neither a certificate nor an ACME order for another namespace's host.
            let hosts: Vec<&str> = hosts
                .into_iter()
                .filter(|h| Host::parse(h).map_or(true, |h| self.owns(&src, &h, "TLS host")))
                .collect();
            if hosts.is_empty() {
                continue;
            }
            let acme = (settings.acme, settings.acme_issuer.as_deref());
            let secret_name = entry.secret_name.as_deref();
            self.acme.add(&self.opts.acme, &src, acme, secrets, (&src.namespace, secret_name), &hosts, &mut self.diags);
            tls_hosts.add(self, &src, secrets, secret_name, &hosts);
        }

        if let Some(backend) = &spec.default_backend {
            if let Some(cluster) = self.backend(&src, backend, protocol, verified.as_ref()) {
                let route = Route {
                    https_redirect: false,
                    ..with_fallback(
                        shape(Route::forward(PathMatch::Prefix("/".into()), &cluster, src.clone())),
                        backend,
                    )
                };
                match &routes.default_backend {
                    None => routes.default_backend = Some(route),
                    Some(winner) => {
                        let msg = format!(
                            "spec.defaultBackend is ignored: {} is older and sets the default backend",
                            winner.source
                        );
                        self.diag(&src, "DefaultBackendConflict", msg);
                    }
                }
            }
        }

        routes.protocols.insert(src.clone(), (protocol, verified.clone()));
        if settings.force_ssl_redirect && settings.redirect.is_none() {
            routes.forced.insert(src.clone());
        }
        for rule in spec.rules.iter().flatten() {
            let Some(host) = self.rule_host(&src, rule) else { continue };
            if !self.owns(&src, &host, "host") {
                continue;
            }
            for p in rule.http.iter().flat_map(|h| h.paths.iter()) {
                let Some(path) = self.path_match(&src, routes.regex_hosts.contains(&host), p) else {
                    continue;
                };
                let Some(cluster) = self.backend(&src, &p.backend, protocol, verified.as_ref()) else {
                    continue;
                };
                let key = (host.clone(), RouteMatch::path(path.clone()));
                if let Some(winner) = routes.claimed.get(&key) {
                    let msg = if winner == &src {
                        format!("host {host} path {} appears twice; the first rule wins", path.path())
                    } else {
                        format!(
                            "host {host} path {} is already served by {winner}, which is older; this rule is ignored",
                            path.path()
                        )
                    };
                    self.diag(&src, "HostPathConflict", msg);
                    continue;
                }
                routes.claimed.insert(key, src.clone());
                if let Some(app_root) = settings.app_root.as_ref().filter(|_| path.matches("/")) {
                    self.app_root(&host, app_root, &src, routes);
                }
                let mut route = with_fallback(shape(Route::forward(path, &cluster, src.clone())), &p.backend);
                if let (Some(target), Action::Forward(f), PathMatch::Regex(_)) =
                    (&settings.rewrite_target, &mut route.action, &route.matches.path)
                {
                    let rewrite = f.rewrite.get_or_insert_with(|| Box::new(UrlRewrite { host: None, path: None }));
                    rewrite.path = Some(PathRewrite::Captures(target.clone()));
                }
                push_route(routes.by_host.entry(host.clone()).or_default(), route);
            }
            if settings.from_to_www {
                if let Host::Exact(name) = &host {
                    let alias = www_alias(name);
                    routes.www_redirects.push((alias, name.clone(), src.clone()));
                }
            }
        }
        true
    }

    /// The host of a rule (any host when it has none); `None`, reported, when invalid.
    fn rule_host(&mut self, src: &ObjectRef, rule: &IngressRule) -> Option<Host> {
        match rule.host.as_deref() {
            None | Some("") => Some(Host::Any),
            Some(h) => match Host::parse(h) {
                Ok(host) => Some(host),
                Err(e) => {
                    self.diag(src, "InvalidHost", format!("rule skipped: {e}"));
                    None
                }
            },
        }
    }

    /// How a path of a rule matches (a regex on a `regex` host); `None`, reported, when
    /// invalid.
    fn path_match(&mut self, src: &ObjectRef, regex: bool, p: &HTTPIngressPath) -> Option<PathMatch> {
        let raw = p.path.as_deref().unwrap_or("/");
        let matched = match p.path_type.as_str() {
            "Exact" | "Prefix" | "ImplementationSpecific" if regex => regex_path(raw, p.path_type.as_str()),
            "Exact" => PathMatch::exact(raw).map_err(|e| format!("path skipped: {e}")),
            "Prefix" | "ImplementationSpecific" => PathMatch::prefix(raw).map_err(|e| format!("path skipped: {e}")),
            other => {
                let msg =
                    format!("path {raw:?} skipped: pathType {other:?} is not Exact, Prefix or ImplementationSpecific");
                self.diag(src, "InvalidPathType", msg);
                return None;
            }
        };
        matched.map_err(|e| self.diag(src, "InvalidPath", e)).ok()
    }

    /// A canary Ingress: each of its paths takes requests from the route of another
    /// Ingress with the same host and path, by header, then cookie, then weight, as
    /// ingress-nginx does. That route's settings apply to the canary's requests too.
    fn canary(&mut self, ing: &Ingress, canary: &annotations::Canary, routes: &mut RouteTable) {
        let src = ingress_ref(ing);
        let Some(spec) = &ing.spec else { return };
        for rule in spec.rules.iter().flatten() {
            let Some(host) = self.rule_host(&src, rule) else { continue };
            // A canary takes requests only from its own namespace's routes.
            if !self.owns(&src, &host, "canary host") {
                continue;
            }
            for p in rule.http.iter().flat_map(|h| h.paths.iter()) {
                let Some(path) = self.path_match(&src, routes.regex_hosts.contains(&host), p) else {
                    continue;
                };
                let key = (host.clone(), RouteMatch::path(path.clone()));
                let shown = path.path().to_owned();
                let main = routes.claimed.get(&key).cloned();
                let index =
                    main.as_ref().and_then(|main| {
                        routes.by_host.get(&host)?.iter().position(|r| {
                            r.matches == key.1 && &r.source == main && matches!(r.action, Action::Forward(_))
                        })
                    });
                let (Some(main), Some(index)) = (main, index) else {
                    let msg = format!(
                        "canary path {shown} of host {host} is ignored: no Ingress without the canary annotation \
                         forwards that host and path"
                    );
                    self.diag(&src, "CanaryWithoutMain", msg);
                    continue;
                };
                if let Some(first) = routes.canaried.insert(key.clone(), src.clone()) {
                    routes.canaried.insert(key, first.clone());
                    let msg = format!(
                        "canary path {shown} of host {host} is ignored: {first} is already its canary (one canary \
                         per path)"
                    );
                    self.diag(&src, "CanaryConflict", msg);
                    continue;
                }
                let (protocol, verified) = routes.protocols.get(&main).cloned().unwrap_or_default();
                if routes.forced.contains(&main) {
                    routes.forced.insert(src.clone());
                }
                let Some(cluster) = self.backend(&src, &p.backend, protocol, verified.as_ref()) else { continue };
                let Some(list) = routes.by_host.get_mut(&host) else { continue };
                let base = list[index].clone();
                let with = |header: HeaderMatch, to_canary: bool| -> Route {
                    let mut r = base.clone();
                    r.matches.headers.push(header);
                    if to_canary {
                        if let Action::Forward(f) = &mut r.action {
                            f.backends = vec![WeightedBackend::new(&cluster, 1)];
                        }
                        r.source = src.clone();
                    }
                    r
                };
                if let Some(name) = &canary.header {
                    match (&canary.header_value, &canary.header_pattern) {
                        (Some(value), _) => list.push(with(HeaderMatch::exact(name, value), true)),
                        (None, Some(pattern)) => list.push(with(HeaderMatch::regex(name, pattern.clone()), true)),
                        (None, None) => {
                            list.push(with(HeaderMatch::exact(name, "always"), true));
                            list.push(with(HeaderMatch::exact(name, "never"), false));
                        }
                    }
                }
                if let Some(name) = &canary.cookie {
                    for (value, to_canary) in [("always", true), ("never", false)] {
                        match HeaderMatch::cookie(name, value) {
                            Ok(m) => list.push(with(m, to_canary)),
                            Err(e) => self.diags.push(Diagnostic {
                                object: src.clone(),
                                reason: "InvalidAnnotation",
                                message: format!("canary-by-cookie: {e}"),
                            }),
                        }
                    }
                }
                if canary.weight > 0 {
                    if let Action::Forward(f) = &mut list[index].action {
                        let main_share = canary.weight_total - canary.weight;
                        for b in &mut f.backends {
                            b.weight *= main_share;
                        }
                        f.backends.push(WeightedBackend::new(&cluster, canary.weight));
                    }
                }
            }
        }
    }

    /// `app-root`: `/` itself is redirected (302) to `app_root` on `host`, ahead of the
    /// Ingress's own routes.
    fn app_root(&mut self, host: &Host, app_root: &str, src: &ObjectRef, routes: &mut RouteTable) {
        let exact = PathMatch::Exact("/".into());
        let key = (host.clone(), RouteMatch::path(exact.clone()));
        // Another Ingress's `/` (or this one's own Exact `/`) comes first.
        if routes.claimed.contains_key(&key) {
            return;
        }
        routes.claimed.insert(key, src.clone());
        let redirect = Redirect {
            scheme: None,
            host: None,
            port: None,
            path: Some(PathRewrite::Full(app_root.to_owned())),
            status: 302,
            location: None,
        };
        let route = Route { action: Action::Redirect(redirect), ..Route::forward(exact, "", src.clone()) };
        push_route(routes.by_host.entry(host.clone()).or_default(), route);
    }

    /// Resolves a backend to a cluster id, spoken to with `protocol`. Missing Services still
    /// yield a cluster id, so the route answers 503 instead of falling through to another
    /// rule.
    fn backend(
        &mut self,
        src: &ObjectRef,
        backend: &IngressBackend,
        protocol: annotations::BackendProtocol,
        verified: Option<&VerifiedTls>,
    ) -> Option<String> {
        let Some(svc) = &backend.service else {
            self.diag(src, "UnsupportedBackend", "resource backends are not supported; use a Service backend".into());
            return None;
        };
        let ns = src.namespace.clone();
        let port = match &svc.port {
            Some(p) => match (p.number, &p.name) {
                (Some(n), _) => ServicePortRef::Number(n),
                (None, Some(name)) => ServicePortRef::Name(name.to_string()),
                (None, None) => {
                    self.diag(
                        src,
                        "ServicePortNotFound",
                        format!("backend Service {} has no port; set port.number or port.name", svc.name),
                    );
                    return None;
                }
            },
            None => {
                self.diag(
                    src,
                    "ServicePortNotFound",
                    format!("backend Service {} has no port; set port.number or port.name", svc.name),
                );
                return None;
            }
        };
        let clusters = &mut self.snapshot.clusters;
        let Some(id) = self.backends.cluster_for(&ns, &svc.name, &port, protocol.h2(), src, &mut self.diags, clusters)
        else {
            return Some(backend::cluster_id(&ns, &svc.name, &port));
        };
        match (protocol.tls(), verified) {
            (false, _) => Some(id),
            (true, None) => Some(self.unverified_tls(id, &ns, &svc.name)),
            (true, Some(v)) => Some(self.checked_tls(id, &ns, &svc.name, v)),
        }
    }

    /// The `proxy-ssl-*` check of the Ingress `src`, its Secret's `ca.crt` read; `Err`
    /// (why, reported) when it cannot be.
    fn verified_tls(
        &mut self,
        src: &ObjectRef,
        p: &annotations::ProxySslSetting,
        secrets: &tls::Secrets,
    ) -> Result<Option<VerifiedTls>, String> {
        let ca_pem = match &p.secret {
            None => None,
            Some((ns, name)) => {
                let pem = secrets.get(ns, name).and_then(|s| s.get(auth::CA_KEY));
                let why = match pem.map(|pem| wharf_model::parse_ca_bundle(pem).map(|_| pem)) {
                    Some(Ok(pem)) => match std::str::from_utf8(pem) {
                        Ok(text) => return Ok(Some(VerifiedTls::new(Some(text.into()), p))),
                        Err(_) => format!("proxy-ssl-secret {ns}/{name}: ca.crt is not text"),
                    },
                    Some(Err(e)) => format!("proxy-ssl-secret {ns}/{name}: {e}"),
                    None => format!("proxy-ssl-secret {ns}/{name} does not exist or has no key \"ca.crt\""),
                };
                self.diag(src, "ProxySSLSecretInvalid", format!("{why}; requests are answered 503 until it is fixed"));
                return Err(why);
            }
        };
        Ok(Some(VerifiedTls::new(ca_pem, p)))
    }

    /// The cluster `id` of Service `ns/name`, encrypted, its certificate checked as `v`
    /// says. Ingresses checking alike share it.
    fn checked_tls(&mut self, id: String, ns: &str, name: &str, v: &VerifiedTls) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        v.hash(&mut h);
        let tls_id = format!("{id}/tls-{:016x}", h.finish());
        let clusters = &mut self.snapshot.clusters;
        if let (false, Some(plain)) = (clusters.contains_key(&tls_id), clusters.get(&id)) {
            let tls = wharf_model::UpstreamTls {
                server_name: v.name.clone().unwrap_or_else(|| format!("{name}.{ns}.svc")),
                ca_pem: v.ca_pem.clone(),
                subject_alt_names: Vec::new(),
                unverified: false,
                no_sni: !v.sni,
                verify_depth: Some(v.depth),
            };
            let cluster = wharf_model::Cluster { tls: Some(tls), ..plain.clone() };
            clusters.insert(tls_id.clone(), cluster);
        }
        tls_id
    }

    /// The cluster of `default-backend` Service `name` in the namespace of `src`: its first
    /// port, as ingress-nginx takes it, over HTTP.
    fn fallback_cluster(&mut self, src: &ObjectRef, name: &str) -> Option<String> {
        let ns = src.namespace.clone();
        let Some(port) = self.backends.first_port(&ns, name) else {
            let msg = format!(
                "default-backend Service {ns}/{name} does not exist or has no port; the Ingress is served without \
                 it until it does"
            );
            self.diag(src, "ServiceNotFound", msg);
            return None;
        };
        let clusters = &mut self.snapshot.clusters;
        self.backends.cluster_for(&ns, name, &ServicePortRef::Number(port), false, src, &mut self.diags, clusters)
    }

    /// The cluster `id` of Service `ns/name`, encrypted with the certificate not checked
    /// (ingress-nginx's HTTPS and GRPCS backends).
    fn unverified_tls(&mut self, id: String, ns: &str, name: &str) -> String {
        let clusters = &mut self.snapshot.clusters;
        let tls_id = format!("{id}/tls-unverified");
        if let (false, Some(plain)) = (clusters.contains_key(&tls_id), clusters.get(&id)) {
            let tls = wharf_model::UpstreamTls {
                server_name: format!("{name}.{ns}.svc"),
                ca_pem: None,
                subject_alt_names: Vec::new(),
                unverified: true,
                no_sni: true,
                verify_depth: None,
            };
            let cluster = wharf_model::Cluster { tls: Some(tls), ..plain.clone() };
            clusters.insert(tls_id.clone(), cluster);
        }
        tls_id
    }

    fn passthrough(&mut self, ing: &Ingress, src: &ObjectRef, routes: &mut RouteTable) {
        let Some(spec) = &ing.spec else { return };
        for rule in spec.rules.iter().flatten() {
            let host = match rule.host.as_deref().map(Host::parse) {
                Some(Ok(h)) => h,
                Some(Err(e)) => {
                    self.diag(src, "InvalidHost", format!("passthrough rule skipped: {e}"));
                    continue;
                }
                None => {
                    self.diag(
                        src,
                        "InvalidHost",
                        "passthrough rules need a host: the SNI is the only thing to route on".into(),
                    );
                    continue;
                }
            };
            if !self.owns(src, &host, "passthrough host") {
                continue;
            }
            let Some(path) = rule.http.as_ref().and_then(|h| h.paths.first()) else {
                self.diag(src, "UnsupportedBackend", format!("passthrough host {host} has no path with a backend"));
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
                self.diag(src, "HostPathConflict", msg);
                continue;
            }
            routes.passthrough.insert(host.clone(), SniRoute::passthrough(host, &cluster, src.clone()));
        }
    }

    fn auto_passthrough(&mut self, world: &World) {
        let mut seen = HashSet::default();
        for svc in &world.services {
            let (ns, name) = (&*svc.namespace, &*svc.name);
            let src = ObjectRef::new("Service", ns, name);
            for port in &svc.ports {
                let pref = ServicePortRef::Number(port.port);
                let mut ignored = Vec::new();
                let Some(cluster) =
                    self.backends.cluster(ns, name, &pref, &src, &mut ignored, &mut self.snapshot.clusters)
                else {
                    continue;
                };
                let sni = format!("outbound_.{}_._.{name}.{ns}.svc.{}", port.port, self.opts.cluster_domain);
                if seen.insert(sni.clone()) {
                    self.snapshot.passthrough.push(SniRoute::passthrough(Host::Exact(sni), &cluster, src.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod gateway_tests;
#[cfg(test)]
mod owners_tests;
#[cfg(test)]
mod parts_tests;
#[cfg(test)]
mod tests;
