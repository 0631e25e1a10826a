//! Gateway API HTTPRoute pieces as routes: hostnames against a listener's, a rule's matches
//! and filters as [`RouteMatch`]es and an [`Action`]. Pure; the caller resolves backends
//! and writes status from the [`Refused`] reasons.
//!
//! Objects read from the API server carry the CRD defaults; objects from files may not,
//! so every default the CRDs declare is applied here too.

use crate::translate::Refused;
use wharf_gateway_api::httproutes::{
    HttpRouteRulesBackendRefsFilters, HttpRouteRulesBackendRefsFiltersType as BackendFilterType, HttpRouteRulesFilters,
    HttpRouteRulesFiltersRequestRedirectPathType as RedirectPathType,
    HttpRouteRulesFiltersRequestRedirectScheme as Scheme, HttpRouteRulesFiltersType as FilterType,
    HttpRouteRulesFiltersUrlRewritePathType as RewritePathType, HttpRouteRulesMatches,
    HttpRouteRulesMatchesHeadersType as HeaderType, HttpRouteRulesMatchesMethod as Method,
    HttpRouteRulesMatchesPathType as PathType, HttpRouteRulesMatchesQueryParamsType as QueryType,
};
use wharf_model::{
    Action, Forward, HeaderEdits, HeaderMatch, Host, PathMatch, PathRewrite, QueryMatch, Redirect, RouteMatch,
    UrlRewrite, WeightedBackend,
};

fn unsupported(message: String) -> Refused {
    Refused { reason: "UnsupportedValue", message }
}

/// The hostnames a route serves on a listener: the intersection of the listener's
/// hostname (any when `None`) with the route's hostnames (any when empty). Gateway API
/// wildcards cover one or more labels. Empty when they do not intersect (the route then
/// does not attach: `NoMatchingListenerHostname`).
pub fn hostnames(listener: Option<&str>, route: &[String]) -> Vec<String> {
    let Some(listener) = listener.filter(|l| !l.is_empty()) else {
        return if route.is_empty() { vec![String::new()] } else { route.to_vec() };
    };
    if route.is_empty() {
        return vec![listener.to_owned()];
    }
    let mut out: Vec<String> = Vec::new();
    for r in route {
        let keep = if covers(listener, r) {
            Some(r.as_str())
        } else if covers(r, listener) {
            Some(listener)
        } else {
            None
        };
        if let Some(k) = keep.filter(|k| !out.iter().any(|o| o == k)) {
            out.push(k.to_owned());
        }
    }
    out
}

/// True when every name `inner` matches, `outer` matches too: equal names, or `outer` a
/// wildcard whose suffix ends `inner` after at least one more label.
fn covers(outer: &str, inner: &str) -> bool {
    if outer.eq_ignore_ascii_case(inner) {
        return true;
    }
    let Some(suffix) = outer.strip_prefix('*') else {
        return false;
    };
    let inner = inner.strip_prefix('*').unwrap_or(inner);
    let head = inner.len().saturating_sub(suffix.len());
    head > 0 && inner.get(head..).is_some_and(|tail| tail.eq_ignore_ascii_case(suffix))
}

/// A route hostname as a router host (empty: any host).
pub fn host(name: &str) -> Result<Host, Refused> {
    if name.is_empty() {
        return Ok(Host::Any);
    }
    Host::parse_gateway(name).map_err(|e| unsupported(format!("hostname {name:?}: {e}")))
}

/// The matches of a rule; with none, everything (`PathPrefix /`).
pub fn route_matches(matches: &[HttpRouteRulesMatches]) -> Result<Vec<RouteMatch>, Refused> {
    if matches.is_empty() {
        return Ok(vec![RouteMatch::path(PathMatch::Prefix("/".into()))]);
    }
    matches.iter().map(route_match).collect()
}

fn route_match(m: &HttpRouteRulesMatches) -> Result<RouteMatch, Refused> {
    let (kind, value) = match &m.path {
        Some(p) => (p.r#type.clone().unwrap_or(PathType::PathPrefix), p.value.as_deref().unwrap_or("/")),
        None => (PathType::PathPrefix, "/"),
    };
    let path = match kind {
        PathType::Exact => PathMatch::exact(value),
        PathType::PathPrefix => PathMatch::prefix(value),
        PathType::RegularExpression => Ok(PathMatch::Regex(Box::new(pattern(value)?))),
    }
    .map_err(|e| unsupported(format!("path match: {e}")))?;

    // Repeated names: only the first counts (header names compare case-insensitively).
    let mut headers: Vec<HeaderMatch> = Vec::new();
    for h in m.headers.iter().flatten() {
        let name = h.name.to_ascii_lowercase();
        if !headers.iter().any(|x| x.name == name) {
            headers.push(match h.r#type {
                Some(HeaderType::RegularExpression) => HeaderMatch::regex(&name, pattern(&h.value)?),
                _ => HeaderMatch::exact(&name, &h.value),
            });
        }
    }
    let mut query: Vec<QueryMatch> = Vec::new();
    for q in m.query_params.iter().flatten() {
        if !query.iter().any(|x| x.name == q.name) {
            query.push(match q.r#type {
                Some(QueryType::RegularExpression) => QueryMatch::regex(&q.name, pattern(&q.value)?),
                _ => QueryMatch::exact(&q.name, &q.value),
            });
        }
    }
    Ok(RouteMatch { path, method: m.method.as_ref().map(|x| method(x).to_owned()), headers, query })
}

fn method(m: &Method) -> &'static str {
    match m {
        Method::Get => "GET",
        Method::Head => "HEAD",
        Method::Post => "POST",
        Method::Put => "PUT",
        Method::Delete => "DELETE",
        Method::Connect => "CONNECT",
        Method::Options => "OPTIONS",
        Method::Trace => "TRACE",
        Method::Patch => "PATCH",
    }
}

/// Adds a header modifier's lists to `HeaderEdits`: the request and response modifiers
/// are distinct generated types of one shape.
macro_rules! modify {
    ($edits:expr, $m:expr) => {{
        let pairs = |v: Option<Vec<(String, String)>>| v.unwrap_or_default();
        edits(
            &mut $edits,
            pairs($m.set.as_ref().map(|s| s.iter().map(|h| (h.name.clone(), h.value.clone())).collect())),
            pairs($m.add.as_ref().map(|s| s.iter().map(|h| (h.name.clone(), h.value.clone())).collect())),
            $m.remove.clone().unwrap_or_default(),
        )
    }};
}

/// A rule's action: a redirect when it has a RequestRedirect filter, else a forward to
/// `backends` with the header and URL filters applied. `matched` is the rule's match the
/// action serves (a prefix replacement needs a `PathPrefix` match).
pub fn action(
    filters: &[HttpRouteRulesFilters],
    backends: Vec<WeightedBackend>,
    matched: &PathMatch,
) -> Result<Action, Refused> {
    let mut fwd = Forward::to(backends);
    let mut redirect = None;
    for f in filters {
        match f.r#type {
            FilterType::RequestHeaderModifier => {
                let m = f.request_header_modifier.as_ref().ok_or_else(|| missing("requestHeaderModifier"))?;
                modify!(fwd.request_headers, m);
            }
            FilterType::ResponseHeaderModifier => {
                let m = f.response_header_modifier.as_ref().ok_or_else(|| missing("responseHeaderModifier"))?;
                modify!(fwd.response_headers, m);
            }
            FilterType::RequestRedirect => {
                let r = f.request_redirect.as_ref().ok_or_else(|| missing("requestRedirect"))?;
                let path = r
                    .path
                    .as_ref()
                    .map(|p| {
                        let prefix = p.r#type == RedirectPathType::ReplacePrefixMatch;
                        path_rewrite(p.replace_full_path.as_deref(), p.replace_prefix_match.as_deref(), prefix, matched)
                    })
                    .transpose()?;
                let port = match r.port {
                    None => None,
                    Some(p) => Some(
                        u16::try_from(p)
                            .ok()
                            .filter(|p| *p > 0)
                            .ok_or_else(|| unsupported(format!("requestRedirect.port {p} is not a port number")))?,
                    ),
                };
                let status = match r.status_code.unwrap_or(302) {
                    s @ (301 | 302 | 303 | 307 | 308) => s as u16,
                    s => {
                        return Err(unsupported(format!(
                            "requestRedirect.statusCode {s} is not 301, 302, 303, 307 or 308"
                        )))
                    }
                };
                redirect = Some(Redirect {
                    scheme: r.scheme.as_ref().map(|s| match s {
                        Scheme::Http => "http".to_owned(),
                        Scheme::Https => "https".to_owned(),
                    }),
                    host: r.hostname.clone(),
                    port,
                    path,
                    status,
                    location: None,
                    port_as_sent: false,
                    relative: false,
                });
            }
            FilterType::UrlRewrite => {
                let u = f.url_rewrite.as_ref().ok_or_else(|| missing("urlRewrite"))?;
                let path = u
                    .path
                    .as_ref()
                    .map(|p| {
                        let prefix = p.r#type == RewritePathType::ReplacePrefixMatch;
                        path_rewrite(p.replace_full_path.as_deref(), p.replace_prefix_match.as_deref(), prefix, matched)
                    })
                    .transpose()?;
                fwd.rewrite = Some(Box::new(UrlRewrite { host: u.hostname.clone(), path }));
            }
            // It names a backend: the caller resolves it (see `mirror_share`).
            FilterType::RequestMirror => {}
            FilterType::ExtensionRef => {
                return Err(unsupported(
                    "ExtensionRef filters are not supported: Wharf defines no extension kinds".into(),
                ))
            }
            FilterType::Cors => return Err(unsupported("the CORS filter is not supported".into())),
        }
    }
    Ok(match redirect {
        Some(r) => Action::Redirect(r),
        None => Action::Forward(fwd),
    })
}

/// Applies the filters of one backendRef to its backend: header changes for the requests
/// it gets (after the rule's) and its responses (before the rule's). Other filters are
/// refused: a redirect or rewrite decides the request before a backend is chosen.
pub fn backend_filters(
    filters: &[HttpRouteRulesBackendRefsFilters],
    into: &mut WeightedBackend,
) -> Result<(), Refused> {
    for f in filters {
        match f.r#type {
            BackendFilterType::RequestHeaderModifier => {
                let m = f.request_header_modifier.as_ref().ok_or_else(|| missing("requestHeaderModifier"))?;
                modify!(into.request_headers, m);
            }
            BackendFilterType::ResponseHeaderModifier => {
                let m = f.response_header_modifier.as_ref().ok_or_else(|| missing("responseHeaderModifier"))?;
                modify!(into.response_headers, m);
            }
            ref other => {
                let name = serde_json::to_value(other).ok().and_then(|v| v.as_str().map(str::to_owned));
                return Err(unsupported(format!(
                    "the {} filter is not supported on a backendRef (RequestHeaderModifier and ResponseHeaderModifier are); put it on the rule",
                    name.unwrap_or_default()
                )));
            }
        }
    }
    Ok(())
}

/// The share of requests a RequestMirror filter copies, in millionths: `percent`, or
/// `fraction` (denominator 100 unless given), else all. Out-of-range values are clamped
/// (the CRD refuses them).
pub fn mirror_share(percent: Option<i32>, fraction: Option<(i32, Option<i32>)>) -> u32 {
    let share = match (percent, fraction) {
        (Some(p), _) => i64::from(p) * 10_000,
        (None, Some((n, d))) => match d.unwrap_or(100) {
            d if d <= 0 => 0,
            d => i64::from(n) * 1_000_000 / i64::from(d),
        },
        (None, None) => 1_000_000,
    };
    u32::try_from(share.clamp(0, 1_000_000)).unwrap_or(0)
}

/// A rule's `timeouts` as the time a backend may take to answer, in milliseconds (there
/// are no retries, so one attempt is the whole request): the shorter of `request` and
/// `backendRequest`; `Some(0)` when the ones given are `0s` (no limit); `None` when
/// neither is given (the gateway's default).
pub fn timeout_ms(request: Option<&str>, backend_request: Option<&str>) -> Result<Option<u64>, Refused> {
    let parse = |field: &str, v: Option<&str>| {
        v.map(|s| {
            crate::duration::parse(s, &crate::duration::GATEWAY_API)
                .and_then(|d| u64::try_from(d.as_millis()).ok())
                .ok_or_else(|| unsupported(format!("timeouts.{field} {s:?} is not a duration like 500ms or 1h30m")))
        })
        .transpose()
    };
    let given = [parse("request", request)?, parse("backendRequest", backend_request)?];
    let limited = given.iter().flatten().copied().filter(|ms| *ms > 0).min();
    Ok(limited.or_else(|| given.iter().flatten().next().copied()))
}

/// A `RegularExpression` value, compiled; one that does not compile (or is too large) is
/// refused with the reason.
fn pattern(source: &str) -> Result<wharf_model::Pattern, Refused> {
    wharf_model::Pattern::full(source).map_err(|e| unsupported(e.to_string()))
}

fn missing(field: &str) -> Refused {
    unsupported(format!("a filter of this type needs its {field} field"))
}

fn path_rewrite(
    full: Option<&str>,
    prefix: Option<&str>,
    is_prefix: bool,
    matched: &PathMatch,
) -> Result<PathRewrite, Refused> {
    if is_prefix {
        if !matches!(matched, PathMatch::Prefix(_)) {
            return Err(unsupported("ReplacePrefixMatch needs a PathPrefix match".into()));
        }
        Ok(PathRewrite::Prefix(prefix.unwrap_or("/").to_owned()))
    } else {
        Ok(PathRewrite::Full(full.unwrap_or("/").to_owned()))
    }
}

/// Adds a header modifier's entries; names lower-case. A name set twice keeps the first.
fn edits(into: &mut HeaderEdits, set: Vec<(String, String)>, add: Vec<(String, String)>, remove: Vec<String>) {
    for (n, v) in set {
        let n = n.to_ascii_lowercase();
        if !into.set.iter().any(|(x, _)| *x == n) {
            into.set.push((n, v));
        }
    }
    into.add.extend(add.into_iter().map(|(n, v)| (n.to_ascii_lowercase(), v)));
    into.remove.extend(remove.into_iter().map(|n| n.to_ascii_lowercase()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn matches_of(v: serde_json::Value) -> Vec<HttpRouteRulesMatches> {
        serde_json::from_value(v).unwrap()
    }

    fn filters_of(v: serde_json::Value) -> Vec<HttpRouteRulesFilters> {
        serde_json::from_value(v).unwrap()
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    // The hostname table of the Gateway API spec (HTTPRoute.spec.hostnames and
    // Listener.hostname), plus no-intersection cases.
    #[test]
    fn hostnames_intersect_as_gateway_api_specifies() {
        let cases: &[(Option<&str>, &[&str], &[&str])] = &[
            (None, &[], &[""]),
            (None, &["a.example.com"], &["a.example.com"]),
            (Some(""), &["a.example.com"], &["a.example.com"]),
            (Some("a.example.com"), &[], &["a.example.com"]),
            (Some("a.example.com"), &["A.example.com"], &["A.example.com"]),
            (Some("a.example.com"), &["b.example.com"], &[]),
            (
                Some("*.example.com"),
                &["a.example.com", "a.b.example.com", "example.com"],
                &["a.example.com", "a.b.example.com"],
            ),
            (Some("a.example.com"), &["*.example.com"], &["a.example.com"]),
            (Some("a.b.example.com"), &["*.example.com"], &["a.b.example.com"]),
            (Some("example.com"), &["*.example.com"], &[]),
            (Some("*.example.com"), &["*.foo.example.com"], &["*.foo.example.com"]),
            (Some("*.foo.example.com"), &["*.example.com"], &["*.foo.example.com"]),
            (Some("*.example.com"), &["*.example.com", "*.example.com"], &["*.example.com"]),
            (Some("*.example.com"), &["*.other.com", "x.example.net"], &[]),
            (Some("*.example.com"), &["xexample.com", ".example.com", "é.example.com"], &["é.example.com"]),
            (Some("*.example.com"), &["*.example.co"], &[]),
        ];
        for (listener, route, want) in cases {
            assert_eq!(hostnames(*listener, &names(route)), names(want), "{listener:?} x {route:?}");
        }
    }

    #[test]
    fn matches_default_to_every_path_and_keep_the_first_of_repeated_names() {
        let all = route_matches(&[]).unwrap();
        assert_eq!(all, [RouteMatch::path(PathMatch::Prefix("/".into()))]);
        let empty_match = route_matches(&matches_of(json!([{}]))).unwrap();
        assert_eq!(empty_match, all, "a match without a path is PathPrefix /");

        let m = route_matches(&matches_of(json!([{
            "path": {"type": "Exact", "value": "/x"},
            "method": "PATCH",
            "headers": [
                {"name": "X-Env", "value": "a"},
                {"name": "x-env", "value": "b"},
                {"name": "X-Other", "type": "Exact", "value": "c"},
            ],
            "queryParams": [
                {"name": "v", "value": "1"},
                {"name": "v", "value": "2"},
                {"name": "V", "value": "3"},
            ],
        }, {"path": {"value": "/api/"}}])))
        .unwrap();
        assert_eq!(m[0].path, PathMatch::Exact("/x".into()));
        assert_eq!(m[0].method.as_deref(), Some("PATCH"));
        let h: Vec<(&str, &str)> = m[0].headers.iter().map(|h| (h.name.as_str(), h.value.as_str())).collect();
        assert_eq!(h, [("x-env", "a"), ("x-other", "c")]);
        let q: Vec<(&str, &str)> = m[0].query.iter().map(|q| (q.name.as_str(), q.value.as_str())).collect();
        assert_eq!(q, [("v", "1"), ("V", "3")], "query names are case-sensitive");
        assert_eq!(m[1], RouteMatch::path(PathMatch::Prefix("/api".into())), "the type defaults to PathPrefix");
    }

    #[test]
    fn every_method_keeps_its_name() {
        for name in ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"] {
            let m = route_matches(&matches_of(json!([{"method": name}]))).unwrap();
            assert_eq!(m[0].method.as_deref(), Some(name));
        }
    }

    #[test]
    fn bad_regular_expressions_and_relative_paths_are_refused_with_unsupported_value() {
        for bad in [
            json!([{"path": {"type": "RegularExpression", "value": "/(.*"}}]),
            json!([{"headers": [{"name": "a", "type": "RegularExpression", "value": "["}]}]),
            json!([{"queryParams": [{"name": "a", "type": "RegularExpression", "value": "a{2,1}"}]}]),
            json!([{"path": {"type": "Exact", "value": "x"}}]),
        ] {
            let err = route_matches(&matches_of(bad.clone())).unwrap_err();
            assert_eq!(err.reason, "UnsupportedValue", "{bad}");
        }
        let err = route_matches(&matches_of(json!([{"path": {"type": "RegularExpression", "value": "/(x"}}])));
        assert!(err.unwrap_err().message.contains("\"/(x\""), "the pattern is named");
    }

    #[test]
    fn regular_expressions_match_whole_paths_header_and_query_values() {
        let m = route_matches(&matches_of(json!([{
            "path": {"type": "RegularExpression", "value": "/v[0-9]+/.*"},
            "headers": [{"name": "X-Env", "type": "RegularExpression", "value": "canary|beta"}],
            "queryParams": [{"name": "id", "type": "RegularExpression", "value": "[0-9]{3}"}],
        }])))
        .unwrap();
        let m = &m[0];
        assert!(m.path.matches("/v2/items") && !m.path.matches("/x/v2/items"));
        assert_eq!(m.headers[0].name, "x-env");
        assert!(m.headers[0].takes(b"beta") && !m.headers[0].takes(b"canary-2"));
        assert!(m.query[0].takes("123") && !m.query[0].takes("1234"));
        let exact = route_matches(&matches_of(json!([{"headers": [{"name": "a", "value": "x.*"}]}]))).unwrap();
        assert!(exact[0].headers[0].takes(b"x.*") && !exact[0].headers[0].takes(b"xyz"), "Exact stays exact");
    }

    fn backends() -> Vec<WeightedBackend> {
        vec![WeightedBackend::new("ns/svc:80", 1)]
    }

    fn prefix(p: &str) -> PathMatch {
        PathMatch::prefix(p).unwrap()
    }

    #[test]
    fn header_modifiers_lower_case_names_and_keep_the_first_set() {
        let f = filters_of(json!([
            {"type": "RequestHeaderModifier", "requestHeaderModifier": {
                "set": [{"name": "X-A", "value": "1"}, {"name": "x-a", "value": "2"}],
                "add": [{"name": "X-B", "value": "3"}],
                "remove": ["X-C"],
            }},
            {"type": "ResponseHeaderModifier", "responseHeaderModifier": {"add": [{"name": "X-R", "value": "4"}]}},
        ]));
        let Action::Forward(fwd) = action(&f, backends(), &prefix("/")).unwrap() else { panic!("not a forward") };
        assert_eq!(fwd.backends, backends());
        assert_eq!(fwd.request_headers.set, [("x-a".to_owned(), "1".to_owned())]);
        assert_eq!(fwd.request_headers.add, [("x-b".to_owned(), "3".to_owned())]);
        assert_eq!(fwd.request_headers.remove, ["x-c"]);
        assert_eq!(fwd.response_headers.add, [("x-r".to_owned(), "4".to_owned())]);
        assert!(fwd.response_headers.set.is_empty() && fwd.rewrite.is_none());
    }

    #[test]
    fn redirects_default_to_302_and_take_scheme_host_port_and_path() {
        let f = filters_of(json!([{"type": "RequestRedirect", "requestRedirect": {}}]));
        let want = Redirect {
            scheme: None,
            host: None,
            port: None,
            path: None,
            status: 302,
            location: None,
            port_as_sent: false,
            relative: false,
        };
        assert_eq!(action(&f, backends(), &prefix("/")).unwrap(), Action::Redirect(want));

        let f = filters_of(json!([{"type": "RequestRedirect", "requestRedirect": {
            "scheme": "https", "hostname": "b.example", "port": 8443, "statusCode": 301,
            "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/new"},
        }}]));
        let want = Redirect {
            scheme: Some("https".into()),
            host: Some("b.example".into()),
            port: Some(8443),
            path: Some(PathRewrite::Prefix("/new".into())),
            status: 301,
            location: None,
            port_as_sent: false,
            relative: false,
        };
        assert_eq!(action(&f, backends(), &prefix("/old")).unwrap(), Action::Redirect(want));
        let f = filters_of(json!([{"type": "RequestRedirect", "requestRedirect": {
            "scheme": "http", "path": {"type": "ReplaceFullPath", "replaceFullPath": "/all"}}}]));
        let Action::Redirect(r) = action(&f, backends(), &prefix("/")).unwrap() else { panic!("not a redirect") };
        assert_eq!((r.scheme.as_deref(), r.path), (Some("http"), Some(PathRewrite::Full("/all".into()))));

        for s in [301, 302, 303, 307, 308] {
            let f = filters_of(json!([{"type": "RequestRedirect", "requestRedirect": {"statusCode": s}}]));
            assert!(matches!(action(&f, backends(), &prefix("/")), Ok(Action::Redirect(r)) if r.status == s as u16));
        }
    }

    #[test]
    fn url_rewrites_change_host_and_path_of_a_forward() {
        let f = filters_of(json!([{"type": "URLRewrite", "urlRewrite": {
            "hostname": "internal.example", "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v2"}}}]));
        let Action::Forward(fwd) = action(&f, backends(), &prefix("/v1")).unwrap() else { panic!("not a forward") };
        assert_eq!(
            fwd.rewrite.as_deref(),
            Some(&UrlRewrite { host: Some("internal.example".into()), path: Some(PathRewrite::Prefix("/v2".into())) })
        );
        let f = filters_of(json!([{"type": "URLRewrite", "urlRewrite": {
            "path": {"type": "ReplaceFullPath", "replaceFullPath": "/one"}}}]));
        let Action::Forward(fwd) = action(&f, backends(), &PathMatch::Exact("/x".into())).unwrap() else {
            panic!("not a forward")
        };
        assert_eq!(
            fwd.rewrite.as_deref(),
            Some(&UrlRewrite { host: None, path: Some(PathRewrite::Full("/one".into())) })
        );
    }

    #[test]
    fn filters_wharf_does_not_serve_or_that_cannot_apply_are_refused() {
        for bad in [
            json!([{"type": "ExtensionRef", "extensionRef": {"group": "x.io", "kind": "K", "name": "n"}}]),
            json!([{"type": "CORS", "cors": {}}]),
            json!([{"type": "RequestHeaderModifier"}]),
            json!([{"type": "ResponseHeaderModifier"}]),
            json!([{"type": "RequestRedirect"}]),
            json!([{"type": "URLRewrite"}]),
            json!([{"type": "RequestRedirect", "requestRedirect": {"port": 0}}]),
            json!([{"type": "RequestRedirect", "requestRedirect": {"port": 70000}}]),
            json!([{"type": "RequestRedirect", "requestRedirect": {"statusCode": 300}}]),
            json!([{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/a"}}}]),
            json!([{"type": "RequestRedirect", "requestRedirect": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/a"}}}]),
        ] {
            let got = action(&filters_of(bad.clone()), backends(), &PathMatch::Exact("/x".into()));
            assert_eq!(got.map_err(|e| e.reason), Err("UnsupportedValue"), "{bad}");
        }
    }

    #[test]
    fn a_backend_ref_takes_header_filters_and_refuses_the_others() {
        let of = |v: serde_json::Value| -> Vec<HttpRouteRulesBackendRefsFilters> { serde_json::from_value(v).unwrap() };
        let mut b = WeightedBackend::new("c", 1);
        let ok = of(json!([
            {"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "Backend", "value": "v1"}], "remove": ["X-A"]}},
            {"type": "ResponseHeaderModifier", "responseHeaderModifier": {"add": [{"name": "X-R", "value": "1"}]}},
        ]));
        assert_eq!(backend_filters(&ok, &mut b), Ok(()));
        assert_eq!(b.request_headers.set, [("backend".to_owned(), "v1".to_owned())]);
        assert_eq!(b.request_headers.remove, ["x-a"]);
        assert_eq!(b.response_headers.add, [("x-r".to_owned(), "1".to_owned())]);
        assert!(b.response_headers.set.is_empty() && b.request_headers.add.is_empty());
        for bad in [
            json!([{"type": "URLRewrite", "urlRewrite": {"hostname": "x"}}]),
            json!([{"type": "RequestRedirect", "requestRedirect": {"statusCode": 301}}]),
            json!([{"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "m", "port": 80}}}]),
            json!([{"type": "RequestHeaderModifier"}]),
        ] {
            let got = backend_filters(&of(bad.clone()), &mut WeightedBackend::new("c", 1));
            assert_eq!(got.as_ref().map_err(|e| e.reason), Err("UnsupportedValue"), "{bad}");
        }
        let why = backend_filters(&of(json!([{"type": "URLRewrite", "urlRewrite": {}}])), &mut b).unwrap_err().message;
        assert!(why.contains("URLRewrite filter is not supported on a backendRef"), "{why}");
    }

    #[test]
    fn mirror_shares_come_from_percent_or_fraction() {
        assert_eq!(mirror_share(None, None), 1_000_000);
        assert_eq!(mirror_share(Some(25), None), 250_000);
        assert_eq!(mirror_share(Some(25), Some((1, Some(2)))), 250_000, "percent wins");
        assert_eq!(mirror_share(None, Some((1, Some(3)))), 333_333);
        assert_eq!(mirror_share(None, Some((42, None))), 420_000, "denominator 100 by default");
        assert_eq!(mirror_share(Some(100), None), 1_000_000);
        assert_eq!(mirror_share(Some(0), None), 0);
        assert_eq!(mirror_share(Some(150), None), 1_000_000);
        assert_eq!(mirror_share(Some(-1), None), 0);
        assert_eq!(mirror_share(None, Some((1, Some(0)))), 0);
        assert_eq!(mirror_share(None, Some((5, Some(2)))), 1_000_000);
    }

    #[test]
    fn timeouts_follow_the_gateway_api_format() {
        assert_eq!(timeout_ms(None, None), Ok(None), "the gateway's default");
        assert_eq!(timeout_ms(Some("500ms"), None), Ok(Some(500)));
        assert_eq!(timeout_ms(None, Some("2s")), Ok(Some(2_000)));
        assert_eq!(timeout_ms(Some("10s"), Some("2s")), Ok(Some(2_000)), "the shorter");
        assert_eq!(timeout_ms(Some("2s"), Some("10s")), Ok(Some(2_000)));
        assert_eq!(timeout_ms(Some("0s"), None), Ok(Some(0)), "no limit");
        assert_eq!(timeout_ms(None, Some("0s")), Ok(Some(0)));
        assert_eq!(timeout_ms(Some("0s"), Some("3s")), Ok(Some(3_000)), "a limit beats none");
        assert_eq!(timeout_ms(Some("10s"), Some("0s")), Ok(Some(10_000)));
        let bad = timeout_ms(Some("1d"), None).unwrap_err();
        assert_eq!(bad.reason, "UnsupportedValue");
        assert!(bad.message.contains("timeouts.request \"1d\""), "{}", bad.message);
        assert!(timeout_ms(None, Some("x")).unwrap_err().message.contains("timeouts.backendRequest"));
    }

    #[test]
    fn route_hostnames_become_router_hosts() {
        assert_eq!(host(""), Ok(Host::Any));
        assert_eq!(host("a.example.com"), Ok(Host::Exact("a.example.com".into())));
        assert_eq!(host("*.example.com"), Ok(Host::Suffix(".example.com".into())));
        assert_eq!(host("bad host").map_err(|e| e.reason), Err("UnsupportedValue"));
    }
}
