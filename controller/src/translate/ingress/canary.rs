//! Canary Ingresses: their backends joined to the routes of the Ingress they shadow.

use crate::stored::ingress::Ingress;
use crate::translate::Reason;
use wharf_model::{Action, HeaderMatch, Route, RouteMatch, WeightedBackend};

use super::*;

impl Translator<'_> {
    /// A canary Ingress: each of its paths takes requests from the route of another
    /// Ingress with the same host and path, by header, then cookie, then weight, as
    /// ingress-nginx does. That route's settings apply to the canary's requests too.
    pub(super) fn canary(&mut self, ing: &Ingress, canary: &annotations::Canary, routes: &mut RouteTable) {
        let src = ing.object_ref();
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
                    self.diag(&src, Reason::CanaryWithoutMain, msg);
                    continue;
                };
                if let Some(first) = routes.canaried.insert(key.clone(), src.clone()) {
                    routes.canaried.insert(key, first.clone());
                    let msg = format!(
                        "canary path {shown} of host {host} is ignored: {first} is already its canary (one canary \
                         per path)"
                    );
                    self.diag(&src, Reason::CanaryConflict, msg);
                    continue;
                }
                let (protocol, verified) = routes.protocols.get(&main).cloned().unwrap_or_default();
                if routes.forced.contains(&main) {
                    routes.forced.insert(src.clone());
                }
                let Some(cluster) = self.backend(&src, &p.backend, protocol, verified.as_ref()) else { continue };
                let Some(list) = routes.by_host.get_mut(&host) else { continue };
                let base = list[index].clone();
                // `legacy`: the canary's answers set no affinity cookie.
                let canary_backend = |weight: u32| WeightedBackend {
                    no_affinity: canary.legacy_affinity,
                    ..WeightedBackend::new(&cluster, weight)
                };
                let with = |header: HeaderMatch, to_canary: bool| -> Route {
                    let mut r = base.clone();
                    r.matches.headers.push(header);
                    if to_canary {
                        if let Action::Forward(f) = &mut r.action {
                            f.backends = vec![canary_backend(1)];
                        }
                        r.source = src.clone();
                    }
                    r
                };
                if let Some(name) = &canary.header {
                    match (&canary.header_value, &canary.header_pattern) {
                        (Some(value), _) => list.push(with(HeaderMatch::exact(name, value), true)),
                        (None, Some(pattern)) => list.push(with(HeaderMatch::regex(name, pattern.clone()), true)),
                        (None, None) if canary.header_pattern_broken => {
                            if let Ok(any) = wharf_model::Pattern::full(".*") {
                                list.push(with(HeaderMatch::regex(name, any), false));
                            }
                        }
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
                                reason: Reason::InvalidAnnotation,
                                message: format!("canary-by-cookie: {e}"),
                            }),
                        }
                    }
                }
                if let Action::Forward(f) = &mut list[index].action {
                    if canary.weight > 0 {
                        let main_share = canary.weight_total - canary.weight;
                        for b in &mut f.backends {
                            b.weight *= main_share;
                        }
                        f.backends.push(canary_backend(canary.weight));
                    } else if f.affinity.is_some()
                        && !canary.legacy_affinity
                        && (canary.header.is_some() || canary.cookie.is_some())
                    {
                        // No share by weight, but a client the canary answered (by header
                        // or cookie) stays on it while its affinity cookie lasts. A canary
                        // no request can reach stays out of reach.
                        f.backends.push(WeightedBackend::new(&cluster, 0));
                    }
                }
            }
        }
    }
}
