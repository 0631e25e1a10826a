//! Authentication of a route's clients: HTTP basic authentication against htpasswd
//! entries (bcrypt, MD5-crypt, SHA-1, plain), or a refusal while the route's
//! authentication cannot be set up.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::digest;
use http::{header, HeaderMap, HeaderValue};
use md5::{Digest, Md5};
use tokio::sync::Semaphore;
use wharf_model::{Auth, BasicAuth, ExternalAuth, Md5Magic, PasswordHash};

use crate::upstream::forward::CompiledForward;

/// Credentials that passed are remembered (by a digest) so that a client's next requests
/// do not pay for bcrypt again; past this many the memory starts over.
const REMEMBERED: usize = 4096;

/// How a route checks its clients.
#[derive(Debug)]
pub enum CompiledAuth {
    /// Basic authentication.
    Basic(BasicChecker),
    /// External authentication.
    External(Box<ExternalChecker>),
    /// Nobody passes: 503, with why in the log.
    Unavailable(String),
}

impl CompiledAuth {
    /// Ready to check `auth`; `forward` makes the forward to a check's cluster.
    pub fn new(auth: &Auth, forward: impl FnOnce(&str) -> CompiledForward) -> CompiledAuth {
        match auth {
            Auth::Basic(b) => CompiledAuth::Basic(BasicChecker::new(&b.realm, &b.users, namespace_slots())),
            Auth::External(e) => CompiledAuth::External(Box::new(ExternalChecker {
                method: e
                    .method
                    .as_deref()
                    .and_then(|m| http::Method::from_bytes(m.as_bytes()).ok())
                    .unwrap_or_default(),
                response_headers: e
                    .response_headers
                    .iter()
                    .filter_map(|h| http::HeaderName::from_bytes(h.as_bytes()).ok())
                    .collect(),
                forward: e.cluster.as_deref().map(forward),
                auth: e.clone(),
            })),
            Auth::Unavailable(why) => CompiledAuth::Unavailable(why.clone()),
        }
    }
}

/// External authentication, ready to send checks.
#[derive(Debug)]
pub struct ExternalChecker {
    /// What the annotations asked for.
    pub auth: ExternalAuth,
    /// The check's method.
    pub method: http::Method,
    /// Headers of a passing answer copied onto the request.
    pub response_headers: Vec<http::HeaderName>,
    /// The check's way to the Service its URL names; `None`: routed by this gateway.
    pub forward: Option<CompiledForward>,
}

/// Answers of external checks kept for reuse (`auth-cache-key`), by key: each key names
/// its host and route, so routes never share answers. At most [`Answers::MAX`] are kept;
/// when full, the expired ones go, and a new answer is not kept while none has.
#[derive(Debug, Default)]
pub struct Answers {
    kept: std::sync::Mutex<std::collections::HashMap<String, Kept>>,
}

/// A kept answer: its status and headers, until a time.
#[derive(Debug, Clone)]
struct Kept {
    status: http::StatusCode,
    headers: http::HeaderMap,
    until: std::time::Instant,
}

impl Answers {
    /// How many answers are kept at most.
    pub const MAX: usize = 10_000;
    /// A longer key is not kept (what the client sends fills it).
    pub const MAX_KEY: usize = 8 * 1024;

    /// The answer kept for `key`, unless it has expired by `now`.
    pub fn get(&self, key: &str, now: std::time::Instant) -> Option<(http::StatusCode, http::HeaderMap)> {
        let kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.get(key).filter(|k| k.until > now).map(|k| (k.status, k.headers.clone()))
    }

    /// Keeps an answer for `key` from `now` for `ttl`.
    pub fn keep(
        &self,
        key: String,
        status: http::StatusCode,
        headers: &http::HeaderMap,
        ttl: std::time::Duration,
        now: std::time::Instant,
    ) {
        if key.len() > Answers::MAX_KEY {
            return;
        }
        let mut kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.len() >= Answers::MAX && !kept.contains_key(&key) {
            kept.retain(|_, k| k.until > now);
            if kept.len() >= Answers::MAX {
                return;
            }
        }
        kept.insert(key, Kept { status, headers: headers.clone(), until: now + ttl });
    }
}

/// `$escaped_request_uri`: every byte but the unreserved ones (RFC 3986) percent-encoded,
/// so the URI fits in one query parameter.
pub fn escape_query_value(s: &str) -> String {
    wharf_model::percent_escape(s)
}

/// The sign-in page's URL with `param` set to `original` (escaped), unless it already
/// has that parameter.
pub fn signin_location(signin: &str, param: &str, original: &str) -> String {
    let query = signin.split_once('?').map_or("", |(_, q)| q);
    if query.split('&').any(|kv| kv.split_once('=').map_or(kv, |(k, _)| k) == param) {
        return signin.to_owned();
    }
    let sep = if signin.contains('?') { '&' } else { '?' };
    format!("{signin}{sep}{param}={}", escape_query_value(original))
}

/// The basic-authentication checkers of the live configs, by namespace, realm and users:
/// routes of a namespace with the same ones (an Ingress's paths, or Ingresses sharing a
/// Secret) share one checker, and a new config keeps the credentials the last one
/// remembered. The checkers of a namespace share its bcrypt slots.
#[derive(Debug, Default)]
pub struct Checkers {
    live: Mutex<HashMap<(String, BasicAuth), Weak<CompiledAuth>>>,
    slots: Mutex<HashMap<String, Weak<Semaphore>>>,
}

impl Checkers {
    /// The checker for `auth` of a route of `namespace`: the one a live config already
    /// checks with, or a new one.
    pub fn get(&self, namespace: &str, auth: &BasicAuth) -> Arc<CompiledAuth> {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let key = (namespace.to_owned(), auth.clone());
        if let Some(c) = live.get(&key).and_then(Weak::upgrade) {
            return c;
        }
        live.retain(|_, w| w.strong_count() > 0);
        let slots = {
            let mut all = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            match all.get(namespace).and_then(Weak::upgrade) {
                Some(s) => s,
                None => {
                    all.retain(|_, w| w.strong_count() > 0);
                    let s = namespace_slots();
                    all.insert(namespace.to_owned(), Arc::downgrade(&s));
                    s
                }
            }
        };
        let c = Arc::new(CompiledAuth::Basic(BasicChecker::new(&auth.realm, &auth.users, slots)));
        live.insert(key, Arc::downgrade(&c));
        c
    }
}

/// Checks `Authorization: Basic` against a list of users.
pub struct BasicChecker {
    challenge: HeaderValue,
    users: HashMap<String, PasswordHash>,
    passed: Mutex<HashSet<[u8; 32]>>,
    /// The bcrypt slots of the route's namespace.
    slots: Arc<Semaphore>,
}

impl std::fmt::Debug for BasicChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BasicChecker").field("challenge", &self.challenge).field("users", &self.users.len()).finish()
    }
}

impl BasicChecker {
    /// A checker for `users`, challenging with `realm`, computing bcrypt in `slots` (its
    /// namespace's, from [`namespace_slots`]).
    pub fn new(realm: &str, users: &[(String, PasswordHash)], slots: Arc<Semaphore>) -> BasicChecker {
        BasicChecker {
            challenge: challenge(realm),
            users: users.iter().cloned().collect(),
            passed: Mutex::new(HashSet::new()),
            slots,
        }
    }

    /// The `WWW-Authenticate` value of the 401.
    pub fn challenge(&self) -> &HeaderValue {
        &self.challenge
    }

    /// True when `headers` carry the name and password of one of the users.
    pub async fn admits(&self, headers: &HeaderMap) -> bool {
        let Some((user, password)) = headers.get(header::AUTHORIZATION).and_then(|v| credentials(v.as_bytes())) else {
            return false;
        };
        let Some(hash) = self.users.get(&user) else { return false };
        let key = remembered_key(&user, &password);
        if self.passed.lock().is_ok_and(|p| p.contains(&key)) {
            return true;
        }
        let ok = match hash {
            // bcrypt costs milliseconds to hundreds of them, by design: off the event
            // loop, no more at once than there are cores, and no namespace more than half
            // of them, so that one tenant's sign-ins cannot hold up another's. A check
            // whose client leaves while it waits is dropped with its request; one that
            // has started keeps its slots until the hash is done (the permits go with it
            // into the blocking task), so clients that leave cannot pile up hashes.
            PasswordHash::Bcrypt(h) if bcrypt_cost(h).is_some_and(|c| c <= wharf_model::MAX_BCRYPT_COST) => {
                let Ok(mine) = Arc::clone(&self.slots).acquire_owned().await else { return false };
                let Ok(permit) = bcrypt_slots().acquire().await else { return false };
                let h = h.clone();
                tokio::task::spawn_blocking(move || {
                    let _slots = (mine, permit);
                    bcrypt::verify(&password, &h).unwrap_or(false)
                })
                .await
                .unwrap_or(false)
            }
            // Costlier than the translation admits: never computed.
            PasswordHash::Bcrypt(_) => false,
            other => verify(other, &password),
        };
        if ok {
            if let Ok(mut p) = self.passed.lock() {
                if p.len() >= REMEMBERED {
                    p.clear();
                }
                p.insert(key);
            }
        }
        ok
    }
}

/// How many bcrypt checks may run at once on `cores` cores: in all (one per core), and
/// for one namespace (half of them, at least one).
fn shares(cores: usize) -> (usize, usize) {
    (cores.max(1), (cores / 2).max(1))
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The bcrypt checks that may run at once, across namespaces.
fn bcrypt_slots() -> &'static Semaphore {
    static SLOTS: OnceLock<Semaphore> = OnceLock::new();
    SLOTS.get_or_init(|| Semaphore::new(shares(cores()).0))
}

/// New slots for one namespace's bcrypt checks.
pub fn namespace_slots() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(shares(cores()).1))
}

/// The cost of a bcrypt hash (`$2y$12$...`).
fn bcrypt_cost(hash: &str) -> Option<u32> {
    hash.get(4..6)?.parse().ok()
}

fn remembered_key(user: &str, password: &[u8]) -> [u8; 32] {
    let mut ctx = digest::Context::new(&digest::SHA256);
    ctx.update(user.as_bytes());
    ctx.update(&[0]);
    ctx.update(password);
    let mut key = [0u8; 32];
    key.copy_from_slice(ctx.finish().as_ref());
    key
}

/// `Basic realm="…"`, the realm's quotes and backslashes escaped (a realm that is no
/// header value is left empty).
fn challenge(realm: &str) -> HeaderValue {
    let escaped: String = realm
        .chars()
        .flat_map(|c| match c {
            '"' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    HeaderValue::from_str(&format!("Basic realm=\"{escaped}\""))
        .unwrap_or_else(|_| HeaderValue::from_static("Basic realm=\"\""))
}

/// The user and password of an `Authorization: Basic` value.
fn credentials(value: &[u8]) -> Option<(String, Vec<u8>)> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = wharf_model::decode_base64(token.trim())?;
    let colon = raw.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(raw[..colon].to_vec()).ok()?;
    Some((user, raw[colon + 1..].to_vec()))
}

/// Checks `password` against a hash other than bcrypt's.
fn verify(hash: &PasswordHash, password: &[u8]) -> bool {
    match hash {
        PasswordHash::Plain(p) => verify_slices_are_equal(p.as_bytes(), password).is_ok(),
        PasswordHash::Sha1(d) => {
            verify_slices_are_equal(digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, password).as_ref(), d).is_ok()
        }
        PasswordHash::SaltedSha1 { digest: d, salt } => {
            let mut ctx = digest::Context::new(&digest::SHA1_FOR_LEGACY_USE_ONLY);
            ctx.update(password);
            ctx.update(salt);
            verify_slices_are_equal(ctx.finish().as_ref(), d).is_ok()
        }
        PasswordHash::Md5Crypt { magic, salt, digest: d } => {
            verify_slices_are_equal(md5_crypt(password, salt.as_bytes(), *magic).as_bytes(), d.as_bytes()).is_ok()
        }
        // Computed in [`BasicChecker::admits`], off the event loop.
        PasswordHash::Bcrypt(_) => false,
    }
}

/// The 22-character digest of Poul-Henning Kamp's MD5-crypt (`$1$`, and Apache's `$apr1$`
/// which differs only in its magic).
fn md5_crypt(password: &[u8], salt: &[u8], magic: Md5Magic) -> String {
    let mut alt = Md5::new();
    alt.update(password);
    alt.update(salt);
    alt.update(password);
    let alt = alt.finalize();

    let mut ctx = Md5::new();
    ctx.update(password);
    ctx.update(magic.as_str().as_bytes());
    ctx.update(salt);
    for chunk in password.chunks(16) {
        ctx.update(&alt[..chunk.len()]);
    }
    let mut n = password.len();
    while n > 0 {
        if n & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&password[..1]);
        }
        n >>= 1;
    }
    let mut sum = ctx.finalize();
    for i in 0..1000 {
        let mut round = Md5::new();
        if i & 1 == 1 {
            round.update(password);
        } else {
            round.update(sum);
        }
        if i % 3 != 0 {
            round.update(salt);
        }
        if i % 7 != 0 {
            round.update(password);
        }
        if i & 1 == 1 {
            round.update(sum);
        } else {
            round.update(password);
        }
        sum = round.finalize();
    }

    const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = String::with_capacity(22);
    let mut put = |mut v: u32, n: usize| {
        for _ in 0..n {
            out.push(ITOA64[(v & 0x3f) as usize] as char);
            v >>= 6;
        }
    };
    for (a, b, c) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        put(u32::from(sum[a]) << 16 | u32::from(sum[b]) << 8 | u32::from(sum[c]), 4);
    }
    put(u32::from(sum[11]), 2);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(s: &str) -> PasswordHash {
        PasswordHash::parse(s).unwrap_or(PasswordHash::Plain(String::new()))
    }

    #[test]
    fn the_sign_in_page_gets_the_original_url_once() {
        assert_eq!(escape_query_value("/a b/?x=1&y=é~"), "%2Fa%20b%2F%3Fx%3D1%26y%3D%C3%A9~");
        let original = "https://app.example/?a=b&c=d";
        assert_eq!(
            signin_location("https://sso.example/start", "rd", original),
            "https://sso.example/start?rd=https%3A%2F%2Fapp.example%2F%3Fa%3Db%26c%3Dd"
        );
        assert_eq!(
            signin_location("https://sso.example/start?x=1", "orig", "http://a/"),
            "https://sso.example/start?x=1&orig=http%3A%2F%2Fa%2F"
        );
        // The page already carries the parameter (ingress-nginx: `?rd=$escaped_request_uri`).
        let given = "https://sso.example/start?rd=%2Fp";
        assert_eq!(signin_location(given, "rd", original), given);
        assert_eq!(
            signin_location("https://sso.example/start?x=1&rd", "rd", original),
            "https://sso.example/start?x=1&rd"
        );
        assert_eq!(
            signin_location("https://sso.example/start?ard=1", "rd", "/"),
            "https://sso.example/start?ard=1&rd=%2F"
        );
    }

    #[test]
    fn md5_crypt_matches_openssl_and_htpasswd() {
        // openssl passwd -apr1 / -1 and htpasswd -m, password "correct horse".
        assert_eq!(md5_crypt(b"correct horse", b"r31.Ak2S", Md5Magic::Apr1), "40M9RlHXMSUpOUAmQUiWO/");
        assert_eq!(md5_crypt(b"correct horse", b"aBlCDgVn", Md5Magic::Apr1), "lrQ0SRClIT9Den5NwehZ4.");
        assert_eq!(md5_crypt(b"correct horse", b"saltsalt", Md5Magic::Glibc), "NuzA7WTAelpl95xgBGWN60");
        // openssl passwd -apr1 -salt a ''
        assert_eq!(md5_crypt(b"", b"a", Md5Magic::Apr1), "lsAcX0kKaMIVmrCtUuk5b0");
    }

    #[test]
    fn every_scheme_takes_its_password_and_no_other() {
        // bcrypt: through the checker, in a_checker_admits_its_users_with_their_passwords...
        for h in [
            "$apr1$aBlCDgVn$lrQ0SRClIT9Den5NwehZ4.",
            "$1$saltsalt$NuzA7WTAelpl95xgBGWN60",
            "{SHA}L55TUjtiq8FBorTWAZ0jy6g129A=",
            "{SSHA}Ki+Q9Ri8Nn2QN1jUbcaqfsgK/pJOYUNs",
            "{PLAIN}correct horse",
        ] {
            let h = hash(h);
            assert!(verify(&h, b"correct horse"), "{h:?}");
            for wrong in [&b"correct horsE"[..], b"correct hors", b"correct horse ", b""] {
                assert!(!verify(&h, wrong), "{h:?} took {wrong:?}");
            }
        }
    }

    #[test]
    fn credentials_come_from_a_basic_authorization() {
        // alice:correct horse
        let v = b"Basic YWxpY2U6Y29ycmVjdCBob3JzZQ==";
        assert_eq!(credentials(v), Some(("alice".into(), b"correct horse".to_vec())));
        assert_eq!(credentials(b"basic  YWxpY2U6Y29ycmVjdCBob3JzZQ== "), credentials(v));
        // a:b:c keeps the colon in the password; an empty password is one.
        assert_eq!(credentials(b"Basic YTpiOmM="), Some(("a".into(), b"b:c".to_vec())));
        assert_eq!(credentials(b"Basic YTo="), Some(("a".into(), Vec::new())));
        for bad in [&b"Bearer YTpi"[..], b"Basic", b"Basic YWxpY2U=", b"Basic !!!!", b"BasicYTpi", b"Basic /w==Og=="] {
            assert_eq!(credentials(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn the_challenge_names_the_realm_escaped() {
        assert_eq!(challenge(""), "Basic realm=\"\"");
        assert_eq!(challenge("Staff only"), "Basic realm=\"Staff only\"");
        assert_eq!(challenge(r#"a"b\c"#), r#"Basic realm="a\"b\\c""#);
        assert_eq!(challenge("line\nbreak"), "Basic realm=\"\"");
    }

    fn basic(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(header::AUTHORIZATION, v);
        }
        h
    }

    #[tokio::test]
    async fn a_checker_admits_its_users_with_their_passwords_and_remembers_them() {
        let users = vec![
            ("alice".to_owned(), hash("$2y$05$2yEnaPyh3g.hu2XKLvyMwOnwHzDcZTOjvoK3eqjGgobt0M.HhHvBW")),
            ("bob".to_owned(), hash("{PLAIN}hunter2")),
        ];
        let c = BasicChecker::new("staff", &users, namespace_slots());
        assert_eq!(c.challenge(), "Basic realm=\"staff\"");
        assert!(c.admits(&basic("Basic YWxpY2U6Y29ycmVjdCBob3JzZQ==")).await, "alice");
        assert!(c.admits(&basic("Basic Ym9iOmh1bnRlcjI=")).await, "bob:hunter2");
        for no in ["Basic Ym9iOmh1bnRlcjM=", "Basic Y2Fyb2w6aHVudGVyMg==", "Basic YWxpY2U6aHVudGVyMg==", "Bearer x"] {
            assert!(!c.admits(&basic(no)).await, "{no}");
        }
        assert!(!c.admits(&HeaderMap::new()).await, "no Authorization");
        let remembered = c.passed.lock().map(|p| p.len()).unwrap_or(0);
        assert_eq!(remembered, 2, "only what passed is remembered");
        // What is remembered still has to be the right password for the right user.
        assert!(!c.admits(&basic("Basic Ym9iOmNvcnJlY3QgaG9yc2U=")).await, "bob with alice's password");
    }

    #[test]
    fn a_checker_shows_its_challenge_and_how_many_users_never_a_hash() {
        let c = BasicChecker::new("staff", &[("u".to_owned(), hash("{PLAIN}secret-pw"))], namespace_slots());
        let debug = format!("{c:?}");
        assert_eq!(debug, "BasicChecker { challenge: \"Basic realm=\\\"staff\\\"\", users: 1 }");
    }

    #[test]
    fn the_memory_of_passed_credentials_is_bounded() {
        let c = BasicChecker::new("", &[("u".to_owned(), hash("{PLAIN}p"))], namespace_slots());
        let rt = tokio::runtime::Builder::new_current_thread().build();
        let Ok(rt) = rt else { return };
        rt.block_on(async {
            if let Ok(mut p) = c.passed.lock() {
                for i in 0..REMEMBERED as u32 {
                    let mut k = [0u8; 32];
                    k[..4].copy_from_slice(&i.to_le_bytes());
                    p.insert(k);
                }
            }
            assert!(c.admits(&basic("Basic dTpw")).await);
            assert_eq!(c.passed.lock().map(|p| p.len()).unwrap_or(0), 1);
        });
    }

    #[test]
    fn routes_with_the_same_realm_and_users_share_a_checker_while_one_is_live() {
        let users = |p: &str| -> std::sync::Arc<[(String, PasswordHash)]> { vec![("u".to_owned(), hash(p))].into() };
        let auth = |realm: &str, p: &str| BasicAuth { realm: realm.into(), users: users(p) };
        let checkers = Checkers::default();
        let first = checkers.get("web", &auth("staff", "{PLAIN}p"));
        // Equal content, another allocation (the next translation's): the same checker.
        assert!(Arc::ptr_eq(&first, &checkers.get("web", &auth("staff", "{PLAIN}p"))));
        for other in [auth("ops", "{PLAIN}p"), auth("staff", "{PLAIN}q")] {
            assert!(!Arc::ptr_eq(&first, &checkers.get("web", &other)), "{other:?}");
        }
        let weak = Arc::downgrade(&first);
        drop(first);
        assert!(weak.upgrade().is_none(), "the registry does not keep a checker alive");
        let again = checkers.get("web", &auth("staff", "{PLAIN}p"));
        assert!(matches!(&*again, CompiledAuth::Basic(c) if c.challenge() == "Basic realm=\"staff\""));
        assert_eq!(checkers.live.lock().map(|l| l.len()).unwrap_or(0), 1, "dead entries are dropped");
        // Live ones stay when others are added.
        let _other = checkers.get("web", &auth("ops", "{PLAIN}p"));
        assert!(
            Arc::ptr_eq(&again, &checkers.get("web", &auth("staff", "{PLAIN}p"))),
            "a live checker stays registered"
        );
        assert_eq!(checkers.live.lock().map(|l| l.len()).unwrap_or(0), 2);
    }

    fn slots_of(c: &CompiledAuth) -> Option<&Arc<Semaphore>> {
        match c {
            CompiledAuth::Basic(b) => Some(&b.slots),
            _ => None,
        }
    }

    #[test]
    fn each_namespace_has_bcrypt_slots_of_its_own() {
        let auth = BasicAuth { realm: "r".into(), users: vec![("u".to_owned(), hash("{PLAIN}p"))].into() };
        let other = BasicAuth { realm: "other".into(), ..auth.clone() };
        let checkers = Checkers::default();
        let (a, b) = (checkers.get("a", &auth), checkers.get("b", &auth));
        assert!(!Arc::ptr_eq(&a, &b), "one checker per namespace, even for the same users");
        let sa = slots_of(&a).unwrap();
        assert!(!Arc::ptr_eq(sa, slots_of(&b).unwrap()));
        let a2 = checkers.get("a", &other);
        assert!(Arc::ptr_eq(sa, slots_of(&a2).unwrap()), "a namespace's checkers share its slots");
        assert_eq!(sa.available_permits(), shares(cores()).1);
        // Slots of a namespace that has no checker left go.
        drop(b);
        let _c = checkers.get("c", &auth);
        let kept: Vec<String> = checkers.slots.lock().map(|s| s.keys().cloned().collect()).unwrap_or_default();
        let mut kept = kept;
        kept.sort();
        assert_eq!(kept, ["a", "c"]);
        assert_eq!(shares(0), (1, 1));
        assert_eq!(shares(1), (1, 1));
        assert_eq!(shares(2), (2, 1));
        assert_eq!(shares(3), (3, 1));
        assert_eq!(shares(8), (8, 4));
    }

    #[tokio::test]
    async fn bcrypt_up_to_cost_12_is_checked_and_costlier_is_never_computed() {
        // u:pw, by htpasswd -B -C 12 and -C 13 (the latter made by hand: never computed).
        let twelve = "$2y$12$aHstTiRY3uUHY8XoBqW9n./yVvmWHYZM42k04yJlWHCzpm5xrSsle";
        let thirteen = twelve.replacen("$12$", "$13$", 1);
        let c = BasicChecker::new("r", &[("u".to_owned(), PasswordHash::Bcrypt(twelve.into()))], namespace_slots());
        assert!(c.admits(&basic("Basic dTpwdw==")).await, "cost 12");
        let c = BasicChecker::new("r", &[("u".to_owned(), PasswordHash::Bcrypt(thirteen))], namespace_slots());
        assert!(!c.admits(&basic("Basic dTpwdw==")).await, "cost 13");
        assert_eq!(bcrypt_cost("$2y$05$x"), Some(5));
        assert_eq!(bcrypt_cost("$2y$"), None);
        assert!(!verify(&PasswordHash::Bcrypt(twelve.into()), b"pw"), "never on the event loop");
    }

    #[tokio::test]
    async fn a_started_hash_keeps_its_namespace_slot_after_its_client_leaves() {
        let twelve = "$2y$12$aHstTiRY3uUHY8XoBqW9n./yVvmWHYZM42k04yJlWHCzpm5xrSsle";
        let slots = Arc::new(Semaphore::new(1));
        let c = Arc::new(BasicChecker::new(
            "r",
            &[("u".to_owned(), PasswordHash::Bcrypt(twelve.into()))],
            Arc::clone(&slots),
        ));
        let check = tokio::spawn({
            let c = Arc::clone(&c);
            async move { c.admits(&basic("Basic dTpwdw==")).await }
        });
        // One poll of the check takes both slots and starts the hash (this runtime has one
        // thread: the check runs only while this task waits).
        while slots.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        // The client leaves: its request, and the check with it, is dropped.
        check.abort();
        assert!(check.await.is_err_and(|e| e.is_cancelled()));
        assert_eq!(slots.available_permits(), 0, "the hash still runs, in the namespace's slot");
        let freed = tokio::time::timeout(std::time::Duration::from_secs(60), async {
            while slots.available_permits() == 0 {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        });
        assert!(freed.await.is_ok(), "and gives it back when done");
    }
}

#[cfg(test)]
mod answers_tests {
    use super::Answers;
    use http::{HeaderMap, StatusCode};
    use std::time::{Duration, Instant};

    #[test]
    fn answers_are_kept_until_they_expire_and_never_beyond_the_bound() {
        let a = Answers::default();
        let now = Instant::now();
        let ttl = Duration::from_secs(60);
        let mut h = HeaderMap::new();
        h.insert("x-user", http::HeaderValue::from_static("alice"));
        a.keep("k".into(), StatusCode::ACCEPTED, &h, ttl, now);
        let got = a.get("k", now + Duration::from_secs(59)).map(|(s, h)| (s, h["x-user"].clone()));
        assert_eq!(got, Some((StatusCode::ACCEPTED, http::HeaderValue::from_static("alice"))));
        assert!(a.get("k", now + ttl).is_none(), "expired at its time");
        assert!(a.get("other", now).is_none());
        a.keep("x".repeat(8193), StatusCode::OK, &h, ttl, now);
        assert!(a.get(&"x".repeat(8193), now).is_none(), "a key of more than 8 KiB is not kept");
        a.keep("x".repeat(8192), StatusCode::OK, &h, ttl, now);
        assert!(a.get(&"x".repeat(8192), now).is_some());
        for i in 0..Answers::MAX + 10 {
            a.keep(format!("n{i}"), StatusCode::OK, &h, ttl, now);
        }
        assert!(a.get(&format!("n{}", Answers::MAX), now).is_none(), "full: no more kept");
        a.keep("k".into(), StatusCode::UNAUTHORIZED, &h, ttl, now);
        assert_eq!(a.get("k", now).map(|(s, _)| s), Some(StatusCode::UNAUTHORIZED), "a kept key is replaced");
        // Once the old ones expire (at their time), new ones are kept again.
        let later = now + ttl;
        a.keep("new".into(), StatusCode::OK, &h, ttl, later);
        assert!(a.get("new", later).is_some());
    }
}
