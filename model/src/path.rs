//! Path matching as networking.k8s.io/v1 defines it.

use serde::Serialize;

use crate::Pattern;

/// How a rule's path is matched against a request path (query excluded).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "type", content = "value")]
pub enum PathMatch {
    /// The request path equals this path, case-sensitively.
    Exact(String),
    /// Element-wise prefix: `/foo` matches `/foo` and `/foo/bar` but not `/foobar`.
    /// Stored without trailing slashes (except `/` itself).
    Prefix(String),
    /// The whole request path matches this pattern (Gateway API `RegularExpression`).
    Regex(Box<Pattern>),
}

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathMatchError {
    /// Ingress paths must be absolute.
    #[error("path {0:?} must start with '/'")]
    NotAbsolute(String),
}

impl PathMatch {
    /// An `Exact` match for `path`.
    pub fn exact(path: &str) -> Result<PathMatch, PathMatchError> {
        check_absolute(path)?;
        Ok(PathMatch::Exact(path.to_owned()))
    }

    /// A `Prefix` match for `path`; trailing slashes are ignored, as Kubernetes specifies.
    pub fn prefix(path: &str) -> Result<PathMatch, PathMatchError> {
        check_absolute(path)?;
        let trimmed = path.trim_end_matches('/');
        Ok(PathMatch::Prefix(if trimmed.is_empty() { "/".to_owned() } else { trimmed.to_owned() }))
    }

    /// True when the request path (without query) matches.
    pub fn matches(&self, path: &str) -> bool {
        match self {
            PathMatch::Exact(p) => p == path,
            PathMatch::Prefix(p) => {
                if p == "/" {
                    return true;
                }
                match path.strip_prefix(p.as_str()) {
                    Some(rest) => rest.is_empty() || rest.starts_with('/'),
                    None => false,
                }
            }
            PathMatch::Regex(r) => r.is_match(path),
        }
    }

    /// The matched path string (a pattern's source).
    pub fn path(&self) -> &str {
        match self {
            PathMatch::Exact(p) | PathMatch::Prefix(p) => p,
            PathMatch::Regex(r) => r.as_str(),
        }
    }
}

fn check_absolute(path: &str) -> Result<(), PathMatchError> {
    if path.starts_with('/') {
        Ok(())
    } else {
        Err(PathMatchError::NotAbsolute(path.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(p: &str) -> PathMatch {
        PathMatch::prefix(p).unwrap_or(PathMatch::Exact(String::new()))
    }

    // The examples table of https://kubernetes.io/docs/concepts/services-networking/ingress/#examples
    #[test]
    fn kubernetes_documented_examples() {
        let cases: &[(PathMatch, &str, bool)] = &[
            (prefix("/"), "/anything", true),
            (PathMatch::Exact("/foo".into()), "/foo", true),
            (PathMatch::Exact("/foo".into()), "/bar", false),
            (PathMatch::Exact("/foo".into()), "/foo/", false),
            (PathMatch::Exact("/foo/".into()), "/foo", false),
            (prefix("/foo"), "/foo", true),
            (prefix("/foo"), "/foo/", true),
            (prefix("/foo/"), "/foo", true),
            (prefix("/foo/"), "/foo/", true),
            (prefix("/aaa/bb"), "/aaa/bbb", false),
            (prefix("/aaa/bbb"), "/aaa/bbb", true),
            (prefix("/aaa/bbb/"), "/aaa/bbb", true),
            (prefix("/aaa/bbb"), "/aaa/bbb/", true),
            (prefix("/aaa/bbb"), "/aaa/bbb/ccc", true),
            (prefix("/aaa/bbb"), "/aaa/bbbxyz", false),
        ];
        for (m, path, want) in cases {
            assert_eq!(m.matches(path), *want, "{m:?} vs {path}");
        }
    }

    #[test]
    fn a_regular_expression_matches_the_whole_path() {
        let m = PathMatch::Regex(Box::new(Pattern::full("/items/[0-9]+").unwrap_or_else(|e| panic!("{e}"))));
        assert!(m.matches("/items/42"));
        assert!(!m.matches("/items/42/x") && !m.matches("/items/") && !m.matches("/x/items/1"));
        assert_eq!(m.path(), "/items/[0-9]+");
    }

    #[test]
    fn relative_paths_are_refused() {
        assert!(PathMatch::prefix("foo").is_err());
        assert!(PathMatch::exact("").is_err());
    }
}
