//! What every route of an Ingress gets from its annotations: a fixed redirect, or the
//! HTTPS upgrade, client checks, CORS, limits, affinity, timeouts and the default backend
//! that answers its errors.

use wharf_model::{Action, ObjectRef, PathMatch, Redirect, Route, UrlRewrite};

use super::annotations::Settings;
use super::Access;
use crate::stored::ingress::IngressBackend;

/// The annotations of one Ingress, applied to each of its routes.
pub(super) struct Shape<'s> {
    pub(super) settings: &'s Settings,
    pub(super) access: &'s Access,
    /// The cluster of the `default-backend` annotation's Service.
    pub(super) fallback: Option<String>,
    pub(super) src: &'s ObjectRef,
}

impl Shape<'_> {
    /// `route`, a route of the Ingress to `backend`, as the annotations shape it.
    pub(super) fn route(&self, route: Route, backend: &IngressBackend) -> Route {
        let settings = self.settings;
        let Some(r) = &settings.redirect else {
            let route = Route {
                https_redirect: settings.ssl_redirect || settings.force_ssl_redirect,
                max_body_bytes: settings.max_body_bytes,
                clients: settings.clients.clone(),
                cors: settings.cors.clone(),
                rate_limit: settings.rate_limit.clone(),
                auth: self.access.auth.clone().map(Box::new),
                client_cert: self.access.client_cert.clone().map(Box::new),
                ..route
            };
            return self.with_fallback(self.forwarding(route), backend);
        };
        // A fixed redirect answers before the HTTPS redirect and the address checks, as
        // in ingress-nginx (its `return` runs first).
        let redirect = Redirect {
            scheme: None,
            host: None,
            port: None,
            path: None,
            status: r.status,
            location: Some(r.url.clone()),
            port_as_sent: false,
            relative: r.relative,
        };
        self.with_fallback(Route { action: Action::Redirect(redirect), ..route }, backend)
    }

    /// The settings of a forwarding route: cookie affinity, timeouts, the upstream host
    /// and the forwarded prefix.
    fn forwarding(&self, mut route: Route) -> Route {
        let settings = self.settings;
        let Action::Forward(f) = &mut route.action else { return route };
        f.affinity = settings.affinity.as_ref().map(|a| {
            Box::new(wharf_model::CookieAffinity {
                name: a.name.clone(),
                // As ingress-nginx: the location's path, unless set (a regex is no cookie
                // path).
                path: a.path.clone().unwrap_or_else(|| match &route.matches.path {
                    PathMatch::Exact(p) | PathMatch::Prefix(p) => p.clone(),
                    PathMatch::Regex(_) => "/".to_owned(),
                }),
                max_age: a.max_age,
                expires: a.expires,
                domain: a.domain.clone(),
                same_site: a.same_site.clone(),
                secure: a.secure,
            })
        });
        f.timeout_ms = settings.read_timeout_ms;
        f.connect_timeout_ms = settings.connect_timeout_ms;
        f.send_timeout_ms = settings.send_timeout_ms;
        f.retry.clone_from(&settings.retry);
        if let Some(host) = &settings.upstream_vhost {
            f.rewrite = Some(Box::new(UrlRewrite { host: Some(host.clone()), path: None }));
        }
        if let Some(prefix) = &settings.forwarded_prefix {
            f.request_headers.set.push(("x-forwarded-prefix".into(), prefix.clone()));
        }
        route
    }

    /// The default backend answering the errors of a route to `backend`.
    fn with_fallback(&self, mut route: Route, backend: &IngressBackend) -> Route {
        if let (Some(cluster), Some(svc), Action::Forward(f)) = (&self.fallback, &backend.service, &mut route.action) {
            let port = svc.port.as_ref().map(|p| match (p.number, &p.name) {
                (Some(n), _) => n.to_string(),
                (None, name) => name.as_deref().unwrap_or_default().to_owned(),
            });
            f.fallback = Some(Box::new(wharf_model::Fallback {
                cluster: cluster.clone(),
                error_codes: self.settings.custom_http_errors.clone(),
                namespace: self.src.namespace.clone(),
                ingress: self.src.name.clone(),
                service: svc.name.to_string(),
                service_port: port.unwrap_or_default(),
            }));
        }
        route
    }
}
