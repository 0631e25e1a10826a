//! networking.k8s.io/v1 Ingress semantics: the Ingresses of one part, oldest first, to
//! their hosts, routes, certificates and passthrough names.

pub mod annotations;
pub(super) mod auth;
mod backends;
mod canary;
mod passthrough;
mod routes;
mod shape;
mod tls_hosts;

use crate::hashing::HashSet;
use crate::stored::ingress::{
    HttpPath as HTTPIngressPath, Ingress, IngressBackend, IngressRule, IngressSpec, IngressTls,
};
use crate::translate::Reason;
use std::sync::Arc;

use wharf_model::{
    Action, Certificate, ClientAuthHost, Cluster, Host, ObjectRef, PathMatch, PathRewrite, Route, RouteMatch, Snapshot,
    SniRoute, TlsHost, UrlRewrite, VirtualHost,
};

use super::backend::Backends;
use super::lookups::Lookups;
use super::{acme, owners, tls, Diagnostic, Options};
use backends::VerifiedTls;
use routes::{push_route, RouteTable};
use shape::Shape;

/// The translation of the Ingresses of one part, as [`part`] makes it.
#[derive(Debug, Clone, Default)]
pub(super) struct Part {
    pub(super) virtual_hosts: Vec<Arc<VirtualHost>>,
    pub(super) tls_hosts: Vec<TlsHost>,
    pub(super) default_backend: Option<Box<Route>>,
    pub(super) passthrough: Vec<SniRoute>,
    pub(super) client_auth: Vec<ClientAuthHost>,
    pub(super) certificates: Vec<(String, Certificate)>,
    pub(super) clusters: Vec<(String, Cluster)>,
    pub(super) diags: Vec<Diagnostic>,
    /// The Ingresses served (their status is ours to write).
    pub(super) served: Vec<ObjectRef>,
    pub(super) acme: Vec<acme::Demand>,
}

/// Translates the Ingresses of one part, oldest first, each with its settings; `diags`
/// holds what reading the settings found.
pub(super) fn part(
    l: &Lookups<'_>,
    users: &mut auth::Users,
    members: &[(&Ingress, annotations::Settings)],
    diags: Vec<Diagnostic>,
) -> Part {
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
    let mut tls_hosts = tls_hosts::TlsHosts::default();
    let mut routes = RouteTable::default();
    let ours: Vec<&Ingress> = members.iter().map(|(ing, _)| *ing).collect();
    let settings: Vec<&annotations::Settings> = members.iter().map(|(_, s)| s).collect();
    routes.regex_hosts = regex_hosts(&ours, &settings, &t.claims, &opts.ownership);
    // The hosts an external authentication check may be routed to, when any asks.
    let external = settings.iter().any(|s| matches!(s.auth.as_deref(), Some(annotations::AuthSetting::External(_))));
    let ours_hosts = if external { auth::rule_hosts(&ours) } else { HashSet::default() };
    let mut served = Vec::with_capacity(ours.len());
    for &(ing, ref settings) in members {
        let src = ing.object_ref();
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
    t.aliases(&mut routes);
    routes.add_www_redirects(&t.claims, &opts.ownership);
    let tls_hosts = tls_hosts.into_hosts();
    Part {
        virtual_hosts: routes.take_virtual_hosts(&tls_hosts),
        tls_hosts,
        default_backend: routes.default_backend.map(Box::new),
        passthrough: routes.passthrough.into_values().collect(),
        client_auth: t.snapshot.client_auth,
        certificates: tight(t.snapshot.certificates),
        clusters: tight(t.snapshot.clusters),
        diags: t.diags,
        served: served.iter().map(|(ing, _)| ing.object_ref()).collect(),
        acme: t.acme.into_vec(),
    }
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

/// The hosts whose paths are regular expressions: those of every served Ingress with
/// `use-regex` or `rewrite-target`, for all Ingresses on them (as in ingress-nginx), when
/// its namespace may serve the host: another namespace cannot turn a host's paths into
/// regular expressions.
fn regex_hosts(
    ours: &[&Ingress],
    settings: &[&annotations::Settings],
    claims: &owners::Claims,
    ownership: &owners::Ownership,
) -> HashSet<Host> {
    ours.iter()
        .zip(settings)
        .filter(|(_, s)| s.regex() && !s.skip)
        .flat_map(|(ing, _)| {
            let namespace = ing.metadata.namespace.as_deref().unwrap_or("default");
            let rules = ing.spec.iter().flat_map(|s| s.rules.iter().flatten());
            rules.filter_map(move |rule| {
                let host = match rule.host.as_deref() {
                    None | Some("") => Host::Any,
                    Some(h) => Host::parse(h).ok()?,
                };
                claims.may_serve(&host, namespace, ownership).is_ok().then_some(host)
            })
        })
        .collect()
}

/// A path of an Ingress on a regex host, as ingress-nginx matches it: `~* "^PATH"`
/// (case-insensitive, open at the end), whatever its pathType.
fn regex_path(raw: &str) -> Result<PathMatch, String> {
    if !raw.starts_with('/') {
        return Err(format!("path {raw:?} skipped: it must start with '/'"));
    }
    wharf_model::Pattern::leading(raw).map(|p| PathMatch::Regex(Box::new(p))).map_err(|e| format!("path skipped: {e}"))
}

/// The other name of `from-to-www-redirect`: `name` without `www.`, or with it.
pub(super) fn www_alias(name: &str) -> String {
    match name.strip_prefix("www.") {
        Some(bare) => bare.to_owned(),
        None => format!("www.{name}"),
    }
}

/// What every route of an Ingress asks of its clients.
struct Access {
    auth: Option<wharf_model::Auth>,
    client_cert: Option<wharf_model::ClientCertCheck>,
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
    fn diag(&mut self, object: &ObjectRef, reason: Reason, message: String) {
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
        tls_hosts: &mut tls_hosts::TlsHosts,
        routes: &mut RouteTable,
    ) -> bool {
        let src = ing.object_ref();
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
        let fallback = settings.default_backend.as_ref().and_then(|name| self.fallback_cluster(&src, name));
        let shape = Shape { settings, access: &access, fallback, src: &src };
        for entry in spec.tls.iter().flatten() {
            self.tls_entry(spec, entry, &src, settings, secrets, tls_hosts);
        }
        if let Some(backend) = &spec.default_backend {
            self.default_backend(backend, &shape, verified.as_ref(), routes);
        }
        routes.protocols.insert(src.clone(), (settings.backend_protocol, verified.clone()));
        if settings.force_ssl_redirect && settings.redirect.is_none() {
            routes.forced.insert(src.clone());
        }
        for rule in spec.rules.iter().flatten() {
            self.rule(rule, &shape, verified.as_ref(), routes);
        }
        true
    }

    /// The certificate (or ACME order) of one `spec.tls` entry, for the hosts it names that
    /// the Ingress's namespace may serve.
    fn tls_entry(
        &mut self,
        spec: &IngressSpec,
        entry: &IngressTls,
        src: &ObjectRef,
        settings: &annotations::Settings,
        secrets: &tls::Secrets,
        tls_hosts: &mut tls_hosts::TlsHosts,
    ) {
        let hosts: Vec<&str> = match &entry.hosts {
            Some(h) if !h.is_empty() => h.iter().map(|h| &**h).collect(),
            // No hosts: the entry covers every host of the Ingress's rules.
            _ => spec.rules.iter().flatten().filter_map(|r| r.host.as_deref()).collect(),
        };
        // Neither a certificate nor an ACME order for another namespace's host.
        let hosts: Vec<&str> =
            hosts.into_iter().filter(|h| Host::parse(h).map_or(true, |h| self.owns(src, &h, "TLS host"))).collect();
        if hosts.is_empty() {
            return;
        }
        let acme = (settings.acme, settings.acme_issuer.as_deref());
        let secret_name = entry.secret_name.as_deref();
        self.acme.add(&self.opts.acme, src, acme, secrets, (&src.namespace, secret_name), &hosts, &mut self.diags);
        tls_hosts.add(self, src, secrets, secret_name, &hosts);
    }

    /// `spec.defaultBackend`: the route of requests no rule takes, unless an older Ingress
    /// set one.
    fn default_backend(
        &mut self,
        backend: &IngressBackend,
        shape: &Shape<'_>,
        verified: Option<&VerifiedTls>,
        routes: &mut RouteTable,
    ) {
        let src = shape.src;
        let Some(cluster) = self.backend(src, backend, shape.settings.backend_protocol, verified) else { return };
        let route = shape.route(Route::forward(PathMatch::Prefix("/".into()), &cluster, src.clone()), backend);
        let route = Route { https_redirect: false, ..route };
        match &routes.default_backend {
            None => routes.default_backend = Some(route),
            Some(winner) => {
                let msg =
                    format!("spec.defaultBackend is ignored: {} is older and sets the default backend", winner.source);
                self.diag(src, Reason::DefaultBackendConflict, msg);
            }
        }
    }

    /// The routes of one rule, for a host the Ingress's namespace may serve; a path an
    /// older Ingress (or an earlier rule) claimed is told and left out.
    fn rule(&mut self, rule: &IngressRule, shape: &Shape<'_>, verified: Option<&VerifiedTls>, routes: &mut RouteTable) {
        let (src, settings) = (shape.src, shape.settings);
        let Some(host) = self.rule_host(src, rule) else { return };
        if !self.owns(src, &host, "host") {
            return;
        }
        for p in rule.http.iter().flat_map(|h| h.paths.iter()) {
            let Some(path) = self.path_match(src, routes.regex_hosts.contains(&host), p) else {
                continue;
            };
            let Some(cluster) = self.backend(src, &p.backend, settings.backend_protocol, verified) else {
                continue;
            };
            let key = (host.clone(), RouteMatch::path(path.clone()));
            if let Some(winner) = routes.claimed.get(&key) {
                let msg = if winner == src {
                    format!("host {host} path {} appears twice; the first rule wins", path.path())
                } else {
                    format!(
                        "host {host} path {} is already served by {winner}, which is older; this rule is ignored",
                        path.path()
                    )
                };
                self.diag(src, Reason::HostPathConflict, msg);
                continue;
            }
            routes.claimed.insert(key, src.clone());
            if let Some(app_root) = settings.app_root.as_ref().filter(|_| path.matches("/")) {
                self.app_root(&host, app_root, src, routes);
            }
            let mut route = shape.route(Route::forward(path, &cluster, src.clone()), &p.backend);
            if let (Some(target), Action::Forward(f), PathMatch::Regex(_)) =
                (&settings.rewrite_target, &mut route.action, &route.matches.path)
            {
                let rewrite = f.rewrite.get_or_insert_with(|| Box::new(UrlRewrite { host: None, path: None }));
                rewrite.path = Some(PathRewrite::Captures(target.clone()));
            }
            push_route(routes.by_host.entry(host.clone()).or_default(), route);
        }
        if let (true, Host::Exact(name)) = (settings.from_to_www, &host) {
            routes.www_redirects.push((www_alias(name), name.clone(), src.clone()));
        }
        if host != Host::Any {
            routes.aliases.extend(settings.server_aliases.iter().map(|a| (a.clone(), host.clone(), src.clone())));
        }
    }

    /// Serves each `server-alias` with every route of its host (all Ingresses', as nginx
    /// serves the alias from the host's `server`), unless an Ingress serves the alias
    /// itself or the alias belongs to another namespace; the first alias of a name wins.
    fn aliases(&mut self, routes: &mut RouteTable) {
        if routes.aliases.is_empty() {
            return;
        }
        let served: HashSet<Host> = routes.by_host.keys().cloned().collect();
        for (alias, host, src) in std::mem::take(&mut routes.aliases) {
            if served.contains(&alias) {
                let msg = format!("server-alias {alias} is ignored: an Ingress serves that host itself");
                self.diag(&src, Reason::HostPathConflict, msg);
                continue;
            }
            if !self.owns(&src, &alias, "server-alias") {
                continue;
            }
            let Some(host_routes) = routes.by_host.get(&host).cloned() else { continue };
            routes.by_host.entry(alias).or_insert(host_routes);
        }
    }

    /// The host of a rule (any host when it has none); `None`, reported, when invalid.
    fn rule_host(&mut self, src: &ObjectRef, rule: &IngressRule) -> Option<Host> {
        match rule.host.as_deref() {
            None | Some("") => Some(Host::Any),
            Some(h) => match Host::parse(h) {
                Ok(host) => Some(host),
                Err(e) => {
                    self.diag(src, Reason::InvalidHost, format!("rule skipped: {e}"));
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
            // Whatever the pathType, as ingress-nginx serves them (only its admission
            // webhook refuses regex syntax in Exact and Prefix paths).
            "Exact" | "Prefix" | "ImplementationSpecific" if regex => regex_path(raw),
            "Exact" => PathMatch::exact(raw).map_err(|e| format!("path skipped: {e}")),
            "Prefix" | "ImplementationSpecific" => PathMatch::prefix(raw).map_err(|e| format!("path skipped: {e}")),
            other => {
                let msg =
                    format!("path {raw:?} skipped: pathType {other:?} is not Exact, Prefix or ImplementationSpecific");
                self.diag(src, Reason::InvalidPathType, msg);
                return None;
            }
        };
        matched.map_err(|e| self.diag(src, Reason::InvalidPath, e)).ok()
    }
}
