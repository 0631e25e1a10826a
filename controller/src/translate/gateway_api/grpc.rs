//! The rules of GRPCRoutes: service and method matches to HTTP/2 routes.

use wharf_gateway_api::grpcroutes::GrpcRoute;
use wharf_model::{HeaderMatch, ObjectRef, PathMatch, RouteMatch, Snapshot};

use super::http_route;
use crate::translate::backend::Backends;
use crate::translate::Refused;
use crate::World;

use super::*;

/// A GRPCRoute's rules as [`Rules`]: a method match is a path (`/service/method` exact,
/// `/service/` prefix); backends are spoken to over HTTP/2.
pub(super) fn grpc_rules(
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
                as_http_filters(b.filters.as_ref(), ri)?;
            http_route::backend_filters(&filters, w)
        }) {
            refused.get_or_insert(r);
            continue;
        }
        let filters: Vec<wharf_gateway_api::httproutes::HttpRouteRulesFilters> =
            match as_http_filters(rule.filters.as_ref(), ri) {
                Ok(f) => f,
                Err(r) => {
                    refused.get_or_insert(r);
                    continue;
                }
            };
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
