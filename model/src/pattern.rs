//! Regular expressions of Gateway API `RegularExpression` matches. A pattern matches a
//! whole value (a path, a header or query value), in time linear in the value (Rust's
//! `regex`, which has no backtracking), and its compiled size is bounded, so a route can
//! cost neither a request nor a config build more than a little.

use std::hash::{Hash, Hasher};

use serde::{Serialize, Serializer};

/// Compiled size bound of one pattern (the regex crate's own default is 10 MiB).
const SIZE_LIMIT: usize = 1 << 20;

/// A compiled pattern that must match a whole value.
#[derive(Debug, Clone)]
pub struct Pattern {
    source: String,
    regex: regex::Regex,
}

/// Why a pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("regular expression {pattern:?}: {reason}")]
pub struct PatternError {
    /// The pattern as given.
    pub pattern: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Pattern {
    /// `source` anchored at both ends.
    pub fn full(source: &str) -> Result<Pattern, PatternError> {
        let regex = regex::RegexBuilder::new(&format!("^(?:{source})$"))
            .size_limit(SIZE_LIMIT)
            .dfa_size_limit(SIZE_LIMIT)
            .build()
            .map_err(|e| PatternError { pattern: source.to_owned(), reason: e.to_string() })?;
        Ok(Pattern { source: source.to_owned(), regex })
    }

    /// True when the whole of `value` matches.
    pub fn is_match(&self, value: &str) -> bool {
        self.regex.is_match(value)
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.source == other.source
    }
}

impl Eq for Pattern {}

impl Hash for Pattern {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.source.hash(state);
    }
}

impl Serialize for Pattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_matches_whole_values_only() {
        let p = Pattern::full("/api/v[0-9]+").unwrap();
        assert!(p.is_match("/api/v1") && p.is_match("/api/v22"));
        assert!(!p.is_match("/api/v1/users"), "anchored at the end");
        assert!(!p.is_match("/x/api/v1"), "anchored at the start");
        let alt = Pattern::full("a|b").unwrap();
        assert!(alt.is_match("a") && alt.is_match("b") && !alt.is_match("ab"), "alternatives are grouped");
        assert_eq!(p.as_str(), "/api/v[0-9]+");
        assert_eq!(p, Pattern::full("/api/v[0-9]+").unwrap());
        assert_ne!(p, alt);
        let hash = |p: &Pattern| {
            use std::hash::{DefaultHasher, Hash, Hasher};
            let mut h = DefaultHasher::new();
            p.hash(&mut h);
            h.finish()
        };
        assert_eq!(hash(&p), hash(&Pattern::full("/api/v[0-9]+").unwrap()));
        assert_ne!(hash(&p), hash(&alt), "hashed by source");
    }

    #[test]
    fn bad_and_huge_patterns_are_refused() {
        let e = Pattern::full("(unclosed").unwrap_err();
        assert_eq!(e.pattern, "(unclosed");
        assert!(!e.reason.is_empty());
        assert!(Pattern::full("(a{1000}){1000}").is_err(), "over the size limit");
        assert!(Pattern::full("a{100}").is_ok());
    }
}
