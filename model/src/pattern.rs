//! Regular expressions of Gateway API `RegularExpression` matches and of ingress-nginx
//! regex paths. A Gateway API pattern matches a whole value (a path, a header or query
//! value); an ingress-nginx one (`location ~* "^..."`) matches the start of a path, case
//! insensitively. Either runs in time linear in the value (Rust's `regex`, which has no
//! backtracking), and its compiled size is bounded, so a route can cost neither a request
//! nor a config build more than a little.

use std::hash::{Hash, Hasher};

use serde::{Serialize, Serializer};

/// Compiled size bound of one pattern (the regex crate's own default is 10 MiB).
const SIZE_LIMIT: usize = 1 << 20;

/// A compiled pattern.
#[derive(Debug, Clone)]
pub struct Pattern {
    source: String,
    /// ingress-nginx style: anchored at the start only, case-insensitive.
    leading: bool,
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
        Pattern::build(source, &format!("^(?:{source})$"), false)
    }

    /// `source` anchored at the start only and case-insensitive, as ingress-nginx makes a
    /// regex path (`~* "^source"`): `/foo` matches `/FOOBAR`.
    pub fn leading(source: &str) -> Result<Pattern, PatternError> {
        Pattern::build(source, &format!("(?i)^(?:{source})"), true)
    }

    fn build(source: &str, anchored: &str, leading: bool) -> Result<Pattern, PatternError> {
        let regex = regex::RegexBuilder::new(anchored)
            .size_limit(SIZE_LIMIT)
            .dfa_size_limit(SIZE_LIMIT)
            .build()
            .map_err(|e| PatternError { pattern: source.to_owned(), reason: e.to_string() })?;
        Ok(Pattern { source: source.to_owned(), leading, regex })
    }

    /// True when `value` matches (the whole of it, unless the pattern is leading).
    pub fn is_match(&self, value: &str) -> bool {
        self.regex.is_match(value)
    }

    /// The number of capture groups, `$1` to `$N`.
    pub fn groups(&self) -> usize {
        self.regex.captures_len() - 1
    }

    /// `template` with `$N` (one digit) or `${N}` replaced by capture group N of the match in
    /// `value` (`$0`: the whole match), an unmatched group by nothing; `None` when
    /// `value` does not match.
    pub fn expand(&self, value: &str, template: &str) -> Option<String> {
        let caps = self.regex.captures(value)?;
        let mut out = String::with_capacity(template.len() + value.len());
        let mut rest = template;
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let (digits, tail) = match after.strip_prefix('{').and_then(|a| a.split_once('}')) {
                Some((inside, tail)) if is_group(inside) => (inside, tail),
                _ => {
                    // One digit, as nginx reads `$12` (`$1`, then `2`).
                    let n = usize::from(after.bytes().next().is_some_and(|b| b.is_ascii_digit()));
                    (&after[..n], &after[n..])
                }
            };
            match digits.parse::<usize>() {
                Ok(i) => out.push_str(caps.get(i).map_or("", |m| m.as_str())),
                // A `$` not followed by a group number stays as it is.
                Err(_) => out.push('$'),
            }
            rest = tail;
        }
        out.push_str(rest);
        Some(out)
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

/// A group reference's inside: one or more digits.
fn is_group(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.source == other.source && self.leading == other.leading
    }
}

impl Eq for Pattern {}

impl Hash for Pattern {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.source.hash(state);
        self.leading.hash(state);
    }
}

impl Serialize for Pattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.leading {
            s.collect_str(&format_args!("~* ^{}", self.source))
        } else {
            s.serialize_str(&self.source)
        }
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
    fn a_leading_pattern_matches_the_start_case_insensitively() {
        let p = Pattern::leading("/foo").unwrap();
        assert!(p.is_match("/foo") && p.is_match("/FOOBAR") && p.is_match("/foo/x"));
        assert!(!p.is_match("/x/foo"), "anchored at the start");
        let alt = Pattern::leading("/a|/b").unwrap();
        assert!(alt.is_match("/b/c") && !alt.is_match("/c/b"), "alternatives are grouped under the anchor");
        assert_ne!(p, Pattern::full("/foo").unwrap(), "the same source, another pattern");
        assert_eq!(serde_json::to_string(&p).unwrap(), "\"~* ^/foo\"");
        assert_eq!(serde_json::to_string(&Pattern::full("/foo").unwrap()).unwrap(), "\"/foo\"");
    }

    #[test]
    fn expansion_fills_numbered_groups() {
        let p = Pattern::leading("/something(/|$)(.*)").unwrap();
        assert_eq!(p.groups(), 2);
        let cases = [
            ("/something", "/$2", "/"),
            ("/something/", "/$2", "/"),
            ("/something/new", "/$2", "/new"),
            ("/SOMETHING/a/b", "/x/${2}y", "/x/a/by"),
            ("/something/a", "$0|$1|$9|$", "/something/a|/||$"),
            ("/something/a", "/$x/${1", "/$x/${1"),
            ("/something/a", "/$20", "/a0"),
            ("/something/a", "/${x}/${}", "/${x}/${}"),
        ];
        for (value, template, want) in cases {
            assert_eq!(p.expand(value, template).as_deref(), Some(want), "{value} with {template}");
        }
        assert_eq!(p.expand("/other", "/$1"), None);
        assert_eq!(Pattern::full("/a(b)?").unwrap().expand("/a", "[$1]").as_deref(), Some("[]"));
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
