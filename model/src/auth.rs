//! Who may use a route: HTTP basic authentication against htpasswd entries (ingress-nginx
//! `auth-type: basic`), or no one while the route's authentication cannot be set up.

use std::fmt;
use std::sync::Arc;

use serde::{Serialize, Serializer};

/// How a route authenticates its clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Auth {
    /// HTTP basic authentication: 401 with a `WWW-Authenticate` challenge unless the
    /// request's `Authorization` names a user and password of the list.
    Basic(BasicAuth),
    /// External authentication: a check request decides.
    External(ExternalAuth),
    /// The authentication the route asks for cannot be enforced (a missing Secret, an
    /// unsupported scheme): every request is answered 503 rather than served unchecked.
    Unavailable(String),
}

/// Basic authentication: the realm the challenge names and who may pass.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct BasicAuth {
    /// The realm of the `WWW-Authenticate: Basic realm="…"` challenge.
    pub realm: String,
    /// The users and their password hashes (never serialized: a config dump shows how
    /// many there are).
    #[serde(serialize_with = "count")]
    pub users: Arc<[(String, PasswordHash)]>,
}

fn count<S: Serializer>(users: &Arc<[(String, PasswordHash)]>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(users.len() as u64)
}

/// External authentication (ingress-nginx `auth-url`): each request is first sent,
/// without its body, to a check. A 2xx answer lets it through; 401 and 403 are the
/// client's answer (a 401 redirects to the sign-in page when there is one); any other
/// answer, or none, is 500.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExternalAuth {
    /// The check's URL (`http` or `https`), its variables filled per request.
    pub url: Template,
    /// The cluster the check goes to when the URL names a Service; otherwise it is routed
    /// like a request to the URL's host through this gateway's own routes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The check's method; `GET` when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Where a 401 redirects to (`auth-signin`), its variables filled per request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signin: Option<Template>,
    /// The query parameter of the sign-in URL that carries the original URL.
    pub signin_redirect_param: String,
    /// Headers of a passing answer copied onto the request (lower-case); one the answer
    /// lacks is removed from it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub response_headers: Vec<String>,
    /// The check's `X-Auth-Request-Redirect`; the request's URI when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_redirect: Option<String>,
    /// The answer's cookies go to the client whatever its status (else only with a 2xx or
    /// 3xx response).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub always_set_cookie: bool,
    /// `auth-cache-key`, `auth-cache-duration`: answers kept and reused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<Box<AuthCache>>,
}

/// Answers of a check kept for a while, per route and per key (ingress-nginx
/// `auth-cache-key`, `auth-cache-duration`): a request whose key has a kept answer gets
/// that answer's decision without a check. Answers that set cookies are not kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuthCache {
    /// The key, filled per request (a template of [`Template::parse_key`]'s variables).
    pub key: Template,
    /// The answer statuses kept.
    pub statuses: Vec<u16>,
    /// For how long, in seconds.
    pub ttl_s: u64,
}

impl ExternalAuth {
    /// A check at `url` (through `cluster`, when it names a Service) with ingress-nginx's
    /// defaults: `GET`, no sign-in page, `rd`, no headers copied, cookies only with a 2xx
    /// or 3xx response.
    pub fn new(url: Template, cluster: Option<String>) -> ExternalAuth {
        ExternalAuth {
            url,
            cluster,
            method: None,
            signin: None,
            signin_redirect_param: "rd".to_owned(),
            response_headers: Vec::new(),
            request_redirect: None,
            always_set_cookie: false,
            cache: None,
        }
    }
}

/// A string with nginx variables (`$host`, `$scheme`, `$request_uri`,
/// `$escaped_request_uri`, `$uri`, `$args`), filled per request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    source: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Var(Var),
}

/// A variable of a [`Template`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Var {
    /// `$host`: the request's host, without a port.
    Host,
    /// `$scheme`: `http` or `https`.
    Scheme,
    /// `$request_uri`: the path and query, as sent.
    RequestUri,
    /// `$escaped_request_uri`: the same, percent-encoded for a query parameter.
    EscapedRequestUri,
    /// `$uri`: the path.
    Uri,
    /// `$args`: the query.
    Args,
    /// `$remote_user`: the user name of the request's Basic credentials (cache keys only).
    RemoteUser,
    /// `$http_NAME`: the request header `NAME` (`_` for `-`; cache keys only).
    Header(Box<str>),
    /// `$cookie_NAME`: the request's cookie `NAME` (cache keys only).
    Cookie(Box<str>),
}

impl Var {
    const ALL: [(&'static str, Var); 6] = [
        ("escaped_request_uri", Var::EscapedRequestUri),
        ("request_uri", Var::RequestUri),
        ("scheme", Var::Scheme),
        ("host", Var::Host),
        ("args", Var::Args),
        ("uri", Var::Uri),
    ];
}

impl Serialize for Template {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.source)
    }
}

impl Template {
    /// Reads `source`; an unknown variable is an error naming it.
    pub fn parse(source: &str) -> Result<Template, String> {
        Template::parse_with(source, false)
    }

    /// Reads a cache key: [`Template::parse`]'s variables, and what the client sends
    /// (`$remote_user`, `$http_NAME`, `$cookie_NAME`). Those may not steer a URL, so no
    /// other template takes them.
    pub fn parse_key(source: &str) -> Result<Template, String> {
        Template::parse_with(source, true)
    }

    fn parse_with(source: &str, client_vars: bool) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut rest = source;
        while let Some(at) = rest.find('$') {
            text.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let braced = after.strip_prefix('{');
            let name_src = braced.unwrap_or(after);
            let len = name_src.bytes().take_while(|b| b.is_ascii_alphanumeric() || *b == b'_').count();
            let name = &name_src[..len];
            let fixed = Var::ALL.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
            let from_client = || match name {
                "remote_user" => Some(Var::RemoteUser),
                _ => match (name.strip_prefix("http_"), name.strip_prefix("cookie_")) {
                    (Some(h), _) if !h.is_empty() => Some(Var::Header(h.replace('_', "-").into())),
                    (_, Some(c)) if !c.is_empty() => Some(Var::Cookie(c.into())),
                    _ => None,
                },
            };
            let Some(var) = fixed.or_else(|| client_vars.then(from_client).flatten()) else {
                let also = if client_vars { ", remote_user, http_NAME, cookie_NAME" } else { "" };
                return Err(format!(
                    "${name} is not a variable Wharf fills here (host, scheme, request_uri, escaped_request_uri, uri, args{also})"
                ));
            };
            let consumed = match braced {
                Some(b) if b[len..].starts_with('}') => len + 2,
                Some(_) => return Err(format!("${{{name} is not closed")),
                None => len,
            };
            if !text.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut text)));
            }
            parts.push(Part::Var(var));
            rest = &after[consumed..];
        }
        text.push_str(rest);
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        Ok(Template { source: source.to_owned(), parts })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// True when it has no variables.
    pub fn is_fixed(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Text(_)))
    }

    /// The template with each variable's value from `value`.
    pub fn fill(&self, value: impl Fn(&Var) -> String) -> String {
        let mut out = String::with_capacity(self.source.len() + 32);
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Var(v) => out.push_str(&value(v)),
            }
        }
        out
    }
}

/// A password hash, in one of the forms nginx's `auth_basic` reads.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum PasswordHash {
    /// bcrypt (`$2y$`, `$2b$`, `$2a$`; `htpasswd -B`): the whole hash.
    Bcrypt(String),
    /// MD5-crypt: Apache's `$apr1$` (`htpasswd -m`, its default) or glibc's `$1$`
    /// (`openssl passwd -1`).
    Md5Crypt {
        /// `$apr1$` or `$1$`.
        magic: Md5Magic,
        /// The salt, up to 8 characters.
        salt: String,
        /// The 22-character digest, in crypt's base64 alphabet.
        digest: String,
    },
    /// `{SHA}`: SHA-1 of the password (`htpasswd -s`).
    Sha1([u8; 20]),
    /// `{SSHA}`: SHA-1 of the password and the salt, then the salt.
    SaltedSha1 {
        /// SHA-1 of password + salt.
        digest: [u8; 20],
        /// The salt.
        salt: Vec<u8>,
    },
    /// `{PLAIN}`: the password itself.
    Plain(String),
}

// Hashes stay out of logs and debug output.
impl fmt::Debug for PasswordHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.scheme())
    }
}

/// The two MD5-crypt variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Md5Magic {
    /// `$apr1$`.
    Apr1,
    /// `$1$`.
    Glibc,
}

impl Md5Magic {
    /// The prefix, as hashed.
    pub fn as_str(self) -> &'static str {
        match self {
            Md5Magic::Apr1 => "$apr1$",
            Md5Magic::Glibc => "$1$",
        }
    }
}

impl PasswordHash {
    /// The scheme's name, as htpasswd's documentation calls it.
    pub fn scheme(&self) -> &'static str {
        match self {
            PasswordHash::Bcrypt(_) => "bcrypt",
            PasswordHash::Md5Crypt { magic: Md5Magic::Apr1, .. } => "apr1",
            PasswordHash::Md5Crypt { magic: Md5Magic::Glibc, .. } => "md5-crypt",
            PasswordHash::Sha1(_) => "SHA",
            PasswordHash::SaltedSha1 { .. } => "SSHA",
            PasswordHash::Plain(_) => "PLAIN",
        }
    }

    /// Reads a hash as htpasswd writes it.
    pub fn parse(s: &str) -> Result<PasswordHash, HashError> {
        if let Some(rest) = s.strip_prefix("{PLAIN}") {
            return Ok(PasswordHash::Plain(rest.to_owned()));
        }
        if let Some(rest) = s.strip_prefix("{SHA}") {
            let raw = decode_base64(rest).ok_or(HashError::Malformed("{SHA}"))?;
            return raw.try_into().map(PasswordHash::Sha1).map_err(|_| HashError::Malformed("{SHA}"));
        }
        if let Some(rest) = s.strip_prefix("{SSHA}") {
            let raw = decode_base64(rest).filter(|r| r.len() > 20).ok_or(HashError::Malformed("{SSHA}"))?;
            let (digest, salt) = raw.split_at(20);
            let digest = digest.try_into().map_err(|_| HashError::Malformed("{SSHA}"))?;
            return Ok(PasswordHash::SaltedSha1 { digest, salt: salt.to_vec() });
        }
        for magic in [Md5Magic::Apr1, Md5Magic::Glibc] {
            if let Some(rest) = s.strip_prefix(magic.as_str()) {
                let malformed = HashError::Malformed(magic.as_str());
                let (salt, digest) = rest.split_once('$').ok_or(malformed.clone())?;
                let crypt64 = |v: &str| v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/');
                if salt.len() > 8 || !crypt64(salt) || digest.len() != 22 || !crypt64(digest) {
                    return Err(malformed);
                }
                return Ok(PasswordHash::Md5Crypt { magic, salt: salt.to_owned(), digest: digest.to_owned() });
            }
        }
        if let Some(rest) = ["$2y$", "$2b$", "$2a$"].iter().find_map(|p| s.strip_prefix(p)) {
            // COST$ then 22 characters of salt and 31 of hash.
            let cost = rest.get(..2).and_then(|c| c.parse::<u32>().ok()).filter(|c| (4..=31).contains(c));
            let ok = rest.len() == 56
                && rest.as_bytes()[2] == b'$'
                && rest[3..].bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/');
            return match cost {
                Some(c) if ok && c > MAX_BCRYPT_COST => Err(HashError::TooCostly(c)),
                Some(_) if ok => Ok(PasswordHash::Bcrypt(s.to_owned())),
                _ => Err(HashError::Malformed("bcrypt")),
            };
        }
        Err(HashError::Unsupported)
    }
}

/// The highest bcrypt cost checked. Each step doubles the work, which every sign-in
/// pays on the gateway's cores (cost 12: about a quarter of a second of one core; 31:
/// days): a tenant's costlier hash would stall every tenant's checks.
pub const MAX_BCRYPT_COST: u32 = 12;

/// Why a password hash cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashError {
    /// bcrypt costlier than [`MAX_BCRYPT_COST`].
    #[error("its bcrypt cost is {0}, above the {MAX_BCRYPT_COST} Wharf checks (each step doubles the work every sign-in pays); hash it again with htpasswd -B -C 10")]
    TooCostly(u32),
    /// A known scheme, written wrongly.
    #[error("its {0} hash is malformed")]
    Malformed(&'static str),
    /// Not a scheme Wharf checks (DES crypt, SHA-256/512-crypt).
    #[error("its hash is not in a form Wharf checks (bcrypt, $apr1$, $1$, {{SHA}}, {{SSHA}} or {{PLAIN}}); create it with htpasswd -B")]
    Unsupported,
}

/// Standard base64, padded (as htpasswd and `Authorization: Basic` write it).
pub fn decode_base64(s: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let s = s.as_bytes();
    if s.is_empty() || s.len() % 4 != 0 {
        return None;
    }
    let pad = s.iter().rev().take_while(|&&c| c == b'=').count();
    if pad > 2 {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for chunk in s.chunks(4) {
        let mut n = 0u32;
        let mut real = 0;
        for &c in chunk {
            n <<= 6;
            if c != b'=' {
                n |= value(c)?;
                real += 1;
            }
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..real - 1]);
    }
    // '=' only at the very end.
    (s[..s.len() - pad].iter().all(|&c| c != b'=')).then_some(out)
}

/// One entry that could not be read, by line (1-based) and user when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryError {
    /// The line, or the key of an auth map.
    pub at: String,
    /// The user, when the line names one.
    pub user: Option<String>,
    /// What is wrong.
    pub problem: String,
}

/// The users of an htpasswd file (`user:hash`, optionally `:comment`; `#` lines and blank
/// lines skipped, as nginx does), and the entries that could not be read. A user listed
/// twice keeps the first entry, as nginx's line-by-line search does.
pub fn parse_htpasswd(text: &str) -> (Vec<(String, PasswordHash)>, Vec<EntryError>) {
    let mut users: Vec<(String, PasswordHash)> = Vec::new();
    let mut errors = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let at = format!("line {}", i + 1);
        let Some((user, rest)) = line.split_once(':') else {
            errors.push(EntryError { at, user: None, problem: "is not user:hash".into() });
            continue;
        };
        let hash = rest.split(':').next().unwrap_or(rest);
        push_user(&mut users, &mut errors, at, user, hash);
    }
    (users, errors)
}

/// The users of an auth map (ingress-nginx `auth-secret-type: auth-map`): each key a user,
/// its value the hash.
pub fn parse_auth_map<'a>(
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> (Vec<(String, PasswordHash)>, Vec<EntryError>) {
    let mut users = Vec::new();
    let mut errors = Vec::new();
    for (user, hash) in entries {
        push_user(&mut users, &mut errors, format!("key {user}"), user, hash.trim());
    }
    (users, errors)
}

fn push_user(
    users: &mut Vec<(String, PasswordHash)>,
    errors: &mut Vec<EntryError>,
    at: String,
    user: &str,
    hash: &str,
) {
    if user.is_empty() || user.contains(':') || user.chars().any(char::is_control) {
        errors.push(EntryError { at, user: None, problem: "has no valid user name".into() });
        return;
    }
    match PasswordHash::parse(hash) {
        Ok(h) if !users.iter().any(|(u, _)| u == user) => users.push((user.to_owned(), h)),
        Ok(_) => {}
        Err(e) => errors.push(EntryError { at, user: Some(user.to_owned()), problem: e.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_htpasswd_scheme_is_read_into_its_parts() {
        let apr1 = PasswordHash::parse("$apr1$r31.Ak2S$40M9RlHXMSUpOUAmQUiWO/");
        assert_eq!(
            apr1,
            Ok(PasswordHash::Md5Crypt {
                magic: Md5Magic::Apr1,
                salt: "r31.Ak2S".into(),
                digest: "40M9RlHXMSUpOUAmQUiWO/".into()
            })
        );
        let glibc = PasswordHash::parse("$1$saltsalt$NuzA7WTAelpl95xgBGWN60");
        assert!(matches!(glibc, Ok(PasswordHash::Md5Crypt { magic: Md5Magic::Glibc, .. })));
        let sha = PasswordHash::parse("{SHA}L55TUjtiq8FBorTWAZ0jy6g129A=");
        let expect = [
            0x2f, 0x9e, 0x53, 0x52, 0x3b, 0x62, 0xab, 0xc1, 0x41, 0xa2, 0xb4, 0xd6, 0x01, 0x9d, 0x23, 0xcb, 0xa8, 0x35,
            0xdb, 0xd0,
        ];
        assert_eq!(sha, Ok(PasswordHash::Sha1(expect)));
        let ssha = PasswordHash::parse("{SSHA}Ki+Q9Ri8Nn2QN1jUbcaqfsgK/pJOYUNs");
        assert!(matches!(&ssha, Ok(PasswordHash::SaltedSha1 { salt, .. }) if salt == b"NaCl"), "{ssha:?}");
        assert_eq!(PasswordHash::parse("{PLAIN}pw:x"), Ok(PasswordHash::Plain("pw:x".into())));
        let bcrypt = "$2y$05$2yEnaPyh3g.hu2XKLvyMwOnwHzDcZTOjvoK3eqjGgobt0M.HhHvBW";
        assert_eq!(PasswordHash::parse(bcrypt), Ok(PasswordHash::Bcrypt(bcrypt.into())));
        for prefix in ["$2b$", "$2a$"] {
            let other = bcrypt.replacen("$2y$", prefix, 1);
            assert_eq!(PasswordHash::parse(&other), Ok(PasswordHash::Bcrypt(other.clone())));
        }
        // Costs up to 12 are checked; costlier ones are refused by name, not as malformed.
        let cost = |c: &str| PasswordHash::parse(&bcrypt.replacen("$05$", &format!("${c}$"), 1));
        assert!(matches!(cost("04"), Ok(PasswordHash::Bcrypt(_))));
        assert!(matches!(cost("12"), Ok(PasswordHash::Bcrypt(_))));
        assert_eq!(cost("13"), Err(HashError::TooCostly(13)));
        assert_eq!(cost("31"), Err(HashError::TooCostly(31)));
        assert_eq!(cost("32"), Err(HashError::Malformed("bcrypt")));
        assert_eq!(cost("03"), Err(HashError::Malformed("bcrypt")));
        let short = "$2y$31$2yEnaPyh3g.hu2XKLvyMwOnwHzDcZTOjvoK3eqjGgobt0M.HhHv";
        assert_eq!(PasswordHash::parse(short), Err(HashError::Malformed("bcrypt")), "a malformed one is malformed");
        let m = HashError::TooCostly(31).to_string();
        assert!(m.contains("cost is 31") && m.contains("htpasswd -B -C 10"), "{m}");
    }

    #[test]
    fn malformed_and_unknown_hashes_are_told_apart() {
        let bcrypt = "$2y$05$2yEnaPyh3g.hu2XKLvyMwOnwHzDcZTOjvoK3eqjGgobt0M.HhHvBW";
        let bad: Vec<(String, &str)> = vec![
            ("{SHA}L55TUjtiq8FBorTWAZ0jy6g129A".into(), "{SHA}"),
            ("{SHA}L55TUjtiq8FBorTWAZ0jy6g129AA".into(), "{SHA}"),
            ("{SHA}YWJj".into(), "{SHA}"),
            ("{SSHA}L55TUjtiq8FBorTWAZ0jy6g129A=".into(), "{SSHA}"),
            ("$apr1$r31.Ak2S40M9RlHXMSUpOUAmQUiWO/".into(), "$apr1$"),
            ("$apr1$r31.Ak2S9$40M9RlHXMSUpOUAmQUiWO/".into(), "$apr1$"),
            ("$apr1$r31.Ak2S$40M9RlHXMSUpOUAmQUiWO".into(), "$apr1$"),
            ("$apr1$r31_Ak2S$40M9RlHXMSUpOUAmQUiWO/".into(), "$apr1$"),
            ("$apr1$r31.Ak2S$40M9RlHXMSUpOUAmQUiW-/".into(), "$apr1$"),
            ("$1$saltsalt$NuzA7WTAelpl95xgBGWN6".into(), "$1$"),
            (bcrypt[..59].to_owned(), "bcrypt"),
            (bcrypt.replacen("$05$", "$03$", 1), "bcrypt"),
            (bcrypt.replacen("$05$", "$32$", 1), "bcrypt"),
            (bcrypt.replacen("$05$", "$5$$", 1), "bcrypt"),
            (bcrypt.replacen("$05$", "$05.", 1), "bcrypt"),
            (bcrypt.replacen("2yEn", "2y-n", 1), "bcrypt"),
        ];
        for (bad, scheme) in &bad {
            assert_eq!(PasswordHash::parse(bad), Err(HashError::Malformed(scheme)), "{bad}");
        }
        for unknown in ["abJnggxhB/yWI", "$5$rounds=5000$x$y", "$6$salt$hash", "", "secret"] {
            assert_eq!(PasswordHash::parse(unknown), Err(HashError::Unsupported), "{unknown}");
        }
    }

    #[test]
    fn decode_base64_is_strict() {
        assert_eq!(decode_base64("YWJj"), Some(b"abc".to_vec()));
        assert_eq!(decode_base64("YWI="), Some(b"ab".to_vec()));
        assert_eq!(decode_base64("YQ=="), Some(b"a".to_vec()));
        assert_eq!(decode_base64("+/+/"), Some(vec![0xfb, 0xff, 0xbf]));
        for bad in ["", "YWJ", "Y===", "YQ=a", "Y=Ja", "YW J", "YWJj\n"] {
            assert_eq!(decode_base64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_htpasswd_file_yields_its_users_and_names_each_bad_line() {
        let text = "# admins\n\nalice:{PLAIN}a\r\nbob:$apr1$r31.Ak2S$40M9RlHXMSUpOUAmQUiWO/:Bob B\n\
                    alice:{PLAIN}second\nnocolon\ncarol:abJnggxhB/yWI\n:{PLAIN}x\n";
        let (users, errors) = parse_htpasswd(text);
        let names: Vec<&str> = users.iter().map(|(u, _)| u.as_str()).collect();
        assert_eq!(names, ["alice", "bob"]);
        assert_eq!(users[0].1, PasswordHash::Plain("a".into()));
        assert_eq!(users[1].1.scheme(), "apr1");
        let got: Vec<(&str, Option<&str>)> = errors.iter().map(|e| (e.at.as_str(), e.user.as_deref())).collect();
        assert_eq!(got, [("line 6", None), ("line 7", Some("carol")), ("line 8", None)]);
        assert!(errors[1].problem.contains("htpasswd -B"), "{}", errors[1].problem);
    }

    #[test]
    fn an_auth_map_takes_keys_as_users() {
        let (users, errors) = parse_auth_map([("dev", " {PLAIN}d\n"), ("ops", "x"), ("a:b", "{PLAIN}c")]);
        assert_eq!(users, [("dev".to_owned(), PasswordHash::Plain("d".into()))]);
        let got: Vec<(&str, Option<&str>)> = errors.iter().map(|e| (e.at.as_str(), e.user.as_deref())).collect();
        assert_eq!(got, [("key ops", Some("ops")), ("key a:b", None)]);
    }

    #[test]
    fn templates_fill_nginx_variables_and_refuse_others() {
        let t = Template::parse("https://$host/oauth2/start?rd=$escaped_request_uri&s=${scheme}x").unwrap();
        assert_eq!(t.as_str(), "https://$host/oauth2/start?rd=$escaped_request_uri&s=${scheme}x");
        assert!(!t.is_fixed());
        let filled = t.fill(|v| match v {
            Var::Host => "a.example".into(),
            Var::EscapedRequestUri => "%2Fp%3Fq".into(),
            Var::Scheme => "https".into(),
            other => format!("<{other:?}>"),
        });
        assert_eq!(filled, "https://a.example/oauth2/start?rd=%2Fp%3Fq&s=httpsx");
        let each = Template::parse("$request_uri|$uri|$args|$host").unwrap().fill(|v| format!("{v:?}"));
        assert_eq!(each, "RequestUri|Uri|Args|Host");
        let fixed = Template::parse("http://auth.sso.svc/check").unwrap();
        assert!(fixed.is_fixed());
        assert_eq!(fixed.fill(|_| "x".into()), "http://auth.sso.svc/check");
        assert!(Template::parse("").unwrap().is_fixed());
        for bad in ["http://$remote_addr/", "x$", "${host", "$hostname"] {
            assert!(Template::parse(bad).is_err(), "{bad}");
        }
        let dump = serde_json::to_string(&fixed).unwrap_or_default();
        assert_eq!(dump, r#""http://auth.sso.svc/check""#);
        // What the client sends fills cache keys, never a URL.
        let key = Template::parse_key("$remote_user|$http_x_api_key|$cookie__oauth2_proxy|$host").unwrap();
        assert_eq!(key.fill(|v| format!("{v:?}")), r#"RemoteUser|Header("x-api-key")|Cookie("_oauth2_proxy")|Host"#);
        for client in ["http://$http_host/", "$cookie_a", "$remote_user"] {
            assert!(Template::parse(client).is_err(), "{client}");
        }
        for bad in ["$http_", "$cookie_", "$remote_addr"] {
            assert!(Template::parse_key(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_config_dump_shows_the_realm_and_how_many_users_never_a_hash() {
        let auth = Auth::Basic(BasicAuth {
            realm: "staff".into(),
            users: vec![("alice".to_owned(), PasswordHash::Plain("hunter2".into()))].into(),
        });
        let dump = serde_json::to_string(&auth).unwrap_or_default();
        assert_eq!(dump, r#"{"basic":{"realm":"staff","users":1}}"#);
        let debug = format!("{auth:?}");
        assert!(debug.contains("users: [(\"alice\", PLAIN)]") && !debug.contains("hunter2"), "{debug}");
    }
}
