//! Request-path normalisation, before routing and forwarding: what a route matches is
//! exactly what its backend receives. RFC 3986 §6.2.2: percent-encoded unreserved
//! characters are decoded, other escapes upper-cased, dot segments removed (§5.2.4);
//! optionally runs of slashes are merged. Escaped slashes (`%2F`, `%5C`) are kept, refused
//! or decoded as configured; kept ones may not hide a dot segment (`..%2F`), since a
//! backend that decodes them before resolving dot segments would escape the route.

use std::borrow::Cow;
use std::str::FromStr;

use crate::reasons::PathError;

/// What happens to `%2F` and `%5C` in a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EscapedSlashes {
    /// Forwarded as sent (upper-cased); a request where one hides a dot segment
    /// (`/a/..%2Fb`) is refused. Envoy's and Istio's default, with that check added.
    #[default]
    Keep,
    /// Every request with one is refused with 400.
    Reject,
    /// Decoded to `/` (both), then normalised like any slash: `/a/..%2Fb` is `/b`.
    Decode,
}

impl FromStr for EscapedSlashes {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "keep" => Ok(EscapedSlashes::Keep),
            "reject" => Ok(EscapedSlashes::Reject),
            "decode" => Ok(EscapedSlashes::Decode),
            _ => Err(format!("{s:?} is not one of keep, reject, decode")),
        }
    }
}

/// How paths are normalised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathOptions {
    /// Escaped slashes.
    pub escaped_slashes: EscapedSlashes,
    /// Merge runs of `/` into one (nginx's `merge_slashes`; off in Envoy).
    pub merge_slashes: bool,
}

/// The normalised form of `path` (the path of the request target, without the query).
/// Borrows when nothing changes, as for almost every request.
pub fn normalize_path(path: &str, opts: PathOptions) -> Result<Cow<'_, str>, PathError> {
    if !path.starts_with('/') || !needs_work(path.as_bytes(), opts.merge_slashes) {
        return Ok(Cow::Borrowed(path));
    }
    let decoded = decode(path, opts.escaped_slashes)?;
    let segments: Vec<&str> = decoded[1..].split('/').collect();
    if opts.escaped_slashes == EscapedSlashes::Keep {
        let hides_dot = |seg: &str| seg.split("%2F").flat_map(|s| s.split("%5C")).any(|p| p == "." || p == "..");
        if segments.iter().any(|s| (s.contains("%2F") || s.contains("%5C")) && hides_dot(s)) {
            return Err(PathError::HiddenDotSegment);
        }
    }
    let mut out: Vec<&str> = Vec::with_capacity(segments.len());
    let n = segments.len();
    for (i, seg) in segments.into_iter().enumerate() {
        let last = i + 1 == n;
        match seg {
            "." => {}
            ".." => {
                out.pop();
            }
            "" if opts.merge_slashes && !last => continue,
            s => {
                out.push(s);
                continue;
            }
        }
        // A final dot segment leaves a directory: "/a/b/.." is "/a/".
        if last {
            out.push("");
        }
    }
    let mut result = String::with_capacity(decoded.len());
    result.push('/');
    result.push_str(&out.join("/"));
    Ok(Cow::Owned(result))
}

/// True when the path has an escape, a dot segment, or (when merging) a double slash.
fn needs_work(p: &[u8], merge_slashes: bool) -> bool {
    p.iter().enumerate().any(|(i, &b)| match b {
        b'%' => true,
        b'.' => {
            let starts = p.get(i.wrapping_sub(1)) == Some(&b'/');
            let rest = &p[i + 1..];
            starts && (rest.is_empty() || rest[0] == b'/' || (rest[0] == b'.' && (rest.len() == 1 || rest[1] == b'/')))
        }
        b'/' => merge_slashes && p.get(i + 1) == Some(&b'/'),
        _ => false,
    })
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decodes escaped unreserved characters, upper-cases the other escapes, and treats
/// escaped slashes as configured.
fn decode(path: &str, slashes: EscapedSlashes) -> Result<String, PathError> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b != b'%' {
            out.push(b);
            i += 1;
            continue;
        }
        let (Some(hi), Some(lo)) = (bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex))
        else {
            return Err(PathError::BadEscape);
        };
        let v = hi << 4 | lo;
        match v {
            0 => return Err(PathError::Nul),
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(v),
            b'/' | b'\\' => match slashes {
                EscapedSlashes::Reject => return Err(PathError::EscapedSlash),
                EscapedSlashes::Decode => out.push(b'/'),
                EscapedSlashes::Keep => out.extend_from_slice(&[b'%', HEX[usize::from(hi)], HEX[usize::from(lo)]]),
            },
            _ => out.extend_from_slice(&[b'%', HEX[usize::from(hi)], HEX[usize::from(lo)]]),
        }
        i += 3;
    }
    // Only ASCII was added, and everything else was copied from a &str.
    String::from_utf8(out).map_err(|_| PathError::BadEscape)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(p: &str) -> Result<String, PathError> {
        normalize_path(p, PathOptions::default()).map(Cow::into_owned)
    }

    fn with(p: &str, escaped_slashes: EscapedSlashes, merge_slashes: bool) -> Result<String, PathError> {
        normalize_path(p, PathOptions { escaped_slashes, merge_slashes }).map(Cow::into_owned)
    }

    #[test]
    fn ordinary_paths_are_borrowed_unchanged() {
        for p in ["/", "/a", "/a/b/", "/a.b/c..d/.e/f.", "/...", "/a//b", "*", ""] {
            assert!(matches!(normalize_path(p, PathOptions::default()), Ok(Cow::Borrowed(q)) if q == p), "{p}");
        }
        // Merging slashes: only a double slash makes a copy.
        let merging = PathOptions { merge_slashes: true, ..PathOptions::default() };
        for p in ["/", "/a", "/a/b/", "/a.b/c..d/.e/f."] {
            assert!(matches!(normalize_path(p, merging), Ok(Cow::Borrowed(q)) if q == p), "{p}");
        }
        assert!(matches!(normalize_path("/a//b", merging), Ok(Cow::Owned(q)) if q == "/a/b"));
    }

    #[test]
    fn dot_segments_are_removed_as_rfc_3986_says() {
        let cases = [
            ("/public/../internal", "/internal"),
            ("/public/./x", "/public/x"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/..", "/"),
            ("/../../x", "/x"),
            ("/a/../", "/"),
            ("/public//../internal", "/public/internal"),
            ("/.", "/"),
        ];
        for (p, want) in cases {
            assert_eq!(norm(p).as_deref(), Ok(want), "{p}");
        }
    }

    #[test]
    fn escaped_unreserved_characters_are_decoded_and_others_upper_cased() {
        assert_eq!(norm("/public/%2e%2e/internal").as_deref(), Ok("/internal"));
        assert_eq!(norm("/public/%2E%2E/internal").as_deref(), Ok("/internal"));
        assert_eq!(norm("/%41%7e%5f").as_deref(), Ok("/A~_"));
        assert_eq!(norm("/a%20b%3f").as_deref(), Ok("/a%20b%3F"));
        assert_eq!(norm("/caf%c3%a9").as_deref(), Ok("/caf%C3%A9"));
    }

    #[test]
    fn malformed_escapes_and_nul_are_refused() {
        assert_eq!(norm("/a%"), Err(PathError::BadEscape));
        assert_eq!(norm("/a%2"), Err(PathError::BadEscape));
        assert_eq!(norm("/a%zz"), Err(PathError::BadEscape));
        assert_eq!(norm("/a%00b"), Err(PathError::Nul));
    }

    #[test]
    fn escaped_slashes_keep_reject_or_decode() {
        use EscapedSlashes::*;
        assert_eq!(with("/g%2fp/x", Keep, false).as_deref(), Ok("/g%2Fp/x"));
        assert_eq!(with("/public/..%2finternal", Keep, false), Err(PathError::HiddenDotSegment));
        assert_eq!(with("/public/.%5c..%5cinternal", Keep, false), Err(PathError::HiddenDotSegment));
        assert_eq!(with("/a/x%2F..", Keep, false), Err(PathError::HiddenDotSegment));
        assert_eq!(with("/a/x..%2Fy", Keep, false).as_deref(), Ok("/a/x..%2Fy"), "not a dot segment");
        assert_eq!(with("/g%2fp", Reject, false), Err(PathError::EscapedSlash));
        assert_eq!(with("/g%5Cp", Reject, false), Err(PathError::EscapedSlash));
        assert_eq!(with("/public/..%2finternal", Decode, false).as_deref(), Ok("/internal"));
        assert_eq!(with("/a%5cb", Decode, false).as_deref(), Ok("/a/b"));
    }

    #[test]
    fn slashes_merge_only_when_asked() {
        assert_eq!(with("/a//b", EscapedSlashes::Keep, true).as_deref(), Ok("/a/b"));
        assert_eq!(with("//a///b//", EscapedSlashes::Keep, true).as_deref(), Ok("/a/b/"));
        assert_eq!(with("/public//../internal", EscapedSlashes::Keep, true).as_deref(), Ok("/internal"));
        assert_eq!(norm("/a//b/./c").as_deref(), Ok("/a//b/c"));
    }

    /// Random paths over the characters that matter: whatever is accepted is a fixed
    /// point and has no dot segment left, in every mode.
    #[test]
    fn random_paths_normalise_to_a_fixed_point_without_dot_segments() {
        const ALPHABET: &[u8] = b"/./.%2e%2E%2f%2F%5c%5Ca0z~%%";
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..50_000 {
            let len = rng.usize(1..24);
            let mut p = String::from("/");
            for _ in 0..len {
                p.push(char::from(ALPHABET[rng.usize(..ALPHABET.len())]));
            }
            for escaped_slashes in [EscapedSlashes::Keep, EscapedSlashes::Reject, EscapedSlashes::Decode] {
                for merge_slashes in [false, true] {
                    let opts = PathOptions { escaped_slashes, merge_slashes };
                    if let Ok(once) = normalize_path(&p, opts) {
                        assert_eq!(normalize_path(&once, opts).as_deref(), Ok(&*once), "{p} ({opts:?})");
                        assert!(!once.split('/').any(|s| s == "." || s == ".."), "{p} -> {once} ({opts:?})");
                        assert!(once.starts_with('/'), "{p} -> {once}");
                    }
                }
            }
        }
    }

    #[test]
    fn modes_parse() {
        assert_eq!("keep".parse(), Ok(EscapedSlashes::Keep));
        assert_eq!("reject".parse(), Ok(EscapedSlashes::Reject));
        assert_eq!("decode".parse(), Ok(EscapedSlashes::Decode));
        assert!("Keep".parse::<EscapedSlashes>().is_err());
    }
}
