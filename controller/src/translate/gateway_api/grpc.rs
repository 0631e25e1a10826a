//! The rules of GRPCRoutes: service and method matches to HTTP/2 routes.

use wharf_gateway_api::grpcroutes::GrpcRoute;
use wharf_model::{HeaderMatch, PathMatch, RouteMatch};

use super::http_route;
use crate::translate::Refused;

use super::*;

/// A GRPCRoute's rules as [`Rules`]: a method match is a path (`/service/method` exact,
/// `/service/` prefix); backends are spoken to over HTTP/2.
pub(super) fn grpc_rules(route: &GrpcRoute, mut set: RuleSet<'_, '_>) -> Rules {
    for (ri, rule) in route.spec.rules.iter().flatten().enumerate() {
        let Some(matches) = set.ok(grpc_matches(rule.matches.as_deref().unwrap_or_default())) else { continue };
        let refs = rule.backend_refs.iter().flatten().map(|b| (backend_ref!(b), weight(b.weight)));
        let mut weighted = set.resolve(refs);
        let mut filtered = rule.backend_refs.iter().flatten().zip(weighted.iter_mut());
        let edited = filtered.try_for_each(|(b, w)| {
            let filters: Vec<wharf_gateway_api::httproutes::HttpRouteRulesBackendRefsFilters> =
                as_http_filters(b.filters.as_ref(), ri)?;
            http_route::backend_filters(&filters, w)
        });
        if set.ok(edited).is_none() {
            continue;
        }
        let filters: Option<Vec<wharf_gateway_api::httproutes::HttpRouteRulesFilters>> =
            set.ok(as_http_filters(rule.filters.as_ref(), ri));
        let Some(filters) = filters else { continue };
        let mirrors = set.mirrors(&filters);
        for f in set.actions(ri, matches, &filters, &weighted) {
            f.mirrors.clone_from(&mirrors);
        }
    }
    set.finish()
}

/// GRPCRoute matches as route matches (none: every request).
pub(super) fn grpc_matches(
    matches: &[wharf_gateway_api::grpcroutes::GrpcRouteRulesMatches],
) -> Result<Vec<RouteMatch>, Refused> {
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

/// A GRPCRoute rule's `filters` (absent: none) as HTTPRoute's, whose JSON form they share
/// for every filter both kinds have. One that does not convert refuses the rule: it is
/// never served without its filters.
fn as_http_filters<A: serde::Serialize, B: serde::de::DeserializeOwned>(
    filters: Option<&Vec<A>>,
    rule: usize,
) -> Result<Vec<B>, Refused> {
    let Some(filters) = filters else { return Ok(Vec::new()) };
    serde_json::to_value(filters).and_then(serde_json::from_value).map_err(|e| {
        Refused::new("UnsupportedValue", format!("spec.rules[{rule}].filters: {e}; the rule is not served"))
    })
}
