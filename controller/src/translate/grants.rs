//! ReferenceGrant: whether an object may refer to one in another namespace.

use wharf_gateway_api::referencegrants::ReferenceGrant;

/// The group of Gateway API kinds.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// The referring side: group (empty for the core group), kind and namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefFrom<'a> {
    /// API group.
    pub group: &'a str,
    /// Kind.
    pub kind: &'a str,
    /// Namespace.
    pub namespace: &'a str,
}

/// The referred-to object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefTo<'a> {
    /// API group (empty for Secrets and Services).
    pub group: &'a str,
    /// Kind.
    pub kind: &'a str,
    /// Namespace.
    pub namespace: &'a str,
    /// Name.
    pub name: &'a str,
}

/// True when `from` may refer to `to`: the same namespace, or a ReferenceGrant in `to`'s
/// namespace lists `from`'s group, kind and namespace and `to`'s group and kind, with no
/// name or `to`'s name.
pub fn permitted<'g>(grants: impl IntoIterator<Item = &'g ReferenceGrant>, from: RefFrom<'_>, to: RefTo<'_>) -> bool {
    if from.namespace == to.namespace {
        return true;
    }
    grants.into_iter().filter(|g| g.metadata.namespace.as_deref() == Some(to.namespace)).any(|g| {
        g.spec.from.iter().any(|f| f.group == from.group && f.kind == from.kind && f.namespace == from.namespace)
            && g.spec.to.iter().any(|t| {
                t.group == to.group
                    && t.kind == to.kind
                    && t.name.as_deref().is_none_or(|n| n.is_empty() || n == to.name)
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn grant(ns: &str, from: serde_json::Value, to: serde_json::Value) -> ReferenceGrant {
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ReferenceGrant",
            "metadata": {"name": "g", "namespace": ns},
            "spec": {"from": from, "to": to},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    const ROUTE: RefFrom<'static> = RefFrom { group: GATEWAY_GROUP, kind: "HTTPRoute", namespace: "apps" };

    fn svc(ns: &'static str, name: &'static str) -> RefTo<'static> {
        RefTo { group: "", kind: "Service", namespace: ns, name }
    }

    #[test]
    fn the_same_namespace_needs_no_grant() {
        assert!(permitted(&[], ROUTE, svc("apps", "web")));
        assert!(!permitted(&[], ROUTE, svc("backends", "web")));
    }

    #[test]
    fn a_grant_in_the_target_namespace_must_name_both_sides() {
        let from = json!([{"group": GATEWAY_GROUP, "kind": "HTTPRoute", "namespace": "apps"}]);
        let any_service = json!([{"group": "", "kind": "Service"}]);
        let only_web = json!([{"group": "", "kind": "Service", "name": "web"}]);
        let empty_name = json!([{"group": "", "kind": "Service", "name": ""}]);
        assert!(permitted(&[grant("backends", from.clone(), any_service.clone())], ROUTE, svc("backends", "web")));
        assert!(permitted(&[grant("backends", from.clone(), empty_name)], ROUTE, svc("backends", "db")));
        let g = [grant("backends", from.clone(), only_web)];
        assert!(permitted(&g, ROUTE, svc("backends", "web")));
        assert!(!permitted(&g, ROUTE, svc("backends", "db")), "another name");

        let refused = [
            grant("apps", from.clone(), any_service.clone()),
            grant(
                "backends",
                json!([{"group": GATEWAY_GROUP, "kind": "HTTPRoute", "namespace": "other"}]),
                any_service.clone(),
            ),
            grant(
                "backends",
                json!([{"group": GATEWAY_GROUP, "kind": "GRPCRoute", "namespace": "apps"}]),
                any_service.clone(),
            ),
            grant("backends", json!([{"group": "example.com", "kind": "HTTPRoute", "namespace": "apps"}]), any_service),
            grant("backends", from.clone(), json!([{"group": "", "kind": "Secret"}])),
            grant("backends", from, json!([{"group": "example.com", "kind": "Service"}])),
        ];
        for g in refused {
            assert!(!permitted(std::slice::from_ref(&g), ROUTE, svc("backends", "web")), "{:?}", g.spec);
        }
    }
}
