//! Header rewriting between client and backend.

use std::net::{IpAddr, SocketAddr};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

const HOP_COUNT: usize = 7;
/// Headers that describe one hop, never forwarded (RFC 9110 §7.6.1).
static HOP_BY_HOP: [HeaderName; HOP_COUNT] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// True when the request asks to switch protocols (WebSocket and the like).
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE) && connection_has(headers, "upgrade")
}

fn connection_has(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Removes hop-by-hop headers, including those the Connection header names. With
/// `keep_upgrade`, the `Connection: upgrade` / `Upgrade` pair survives.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    // One pass over the names finds which are present; most messages carry none, and most
    // of the rest only `Connection: keep-alive`. Only present names are removed.
    let mut present = [false; HOP_COUNT];
    let mut has_upgrade = false;
    for k in headers.keys() {
        if k == header::UPGRADE {
            has_upgrade = true;
        } else if let Some(i) = HOP_BY_HOP.iter().position(|h| h == k) {
            present[i] = true;
        }
    }
    if !has_upgrade && !present.contains(&true) {
        return;
    }
    // Options named by Connection are hop-by-hop too. `keep-alive`, `close` and `upgrade`
    // name headers handled here already (or none), so the common case allocates nothing.
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !["keep-alive", "close", "upgrade"].iter().any(|s| t.eq_ignore_ascii_case(s)))
        .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
        .collect();
    let upgrade = if has_upgrade { headers.remove(header::UPGRADE) } else { None };
    for (name, _) in HOP_BY_HOP.iter().zip(present).filter(|(_, p)| *p) {
        headers.remove(name);
    }
    for name in &named {
        headers.remove(name);
    }
    if keep_upgrade {
        if let Some(u) = upgrade {
            headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            headers.insert(header::UPGRADE, u);
        }
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PORT: HeaderName = HeaderName::from_static("x-forwarded-port");
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

const X_ORIGINAL_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-original-forwarded-for");
const X_ORIGINAL_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-original-forwarded-host");
const X_FORWARDED_SCHEME: HeaderName = HeaderName::from_static("x-forwarded-scheme");
const X_SCHEME: HeaderName = HeaderName::from_static("x-scheme");

/// Headers only a proxy sets: a client that is not a trusted proxy never gets them to a
/// backend (frameworks route by `X-Original-URL` and `X-Rewrite-URL`, and read
/// `Forwarded` as the proxy's word). `Proxy` is never passed on (httpoxy: CGI turns it
/// into `HTTP_PROXY`).
static PROXY_ONLY: [HeaderName; 6] = [
    header::FORWARDED,
    HeaderName::from_static("x-original-url"),
    HeaderName::from_static("x-original-uri"),
    HeaderName::from_static("x-original-method"),
    HeaderName::from_static("x-rewrite-url"),
    X_ORIGINAL_FORWARDED_FOR,
];

/// Takes out of a client's request what it must not tell backends or checks:
/// - names with `_` unless `underscores` (CGI, WSGI and Rack read `ssl_client_verify` as
///   `ssl-client-verify`; nginx drops them unless `underscores_in_headers on`);
/// - the client-certificate headers, which only Wharf sets ([`set_client_cert`]);
/// - `Proxy`;
/// - unless it is a `trusted` proxy, [`PROXY_ONLY`]'s headers, and its `X-Forwarded-For`,
///   kept as `X-Original-Forwarded-For` (as ingress-nginx does): the backend's
///   `X-Forwarded-For` then names the client alone.
///
/// Whoever sent it, its `X-Forwarded-Host` is kept as `X-Original-Forwarded-Host` (as
/// ingress-nginx does): the backend's `X-Forwarded-Host` is Wharf's own.
pub fn from_client(headers: &mut HeaderMap, trusted: bool, underscores: bool) {
    let own = |k: &HeaderName| {
        CLIENT_CERT.contains(k)
            || k == "proxy"
            || (!trusted && PROXY_ONLY.contains(k))
            || (!underscores && k.as_str().contains('_'))
    };
    // Most requests carry none of these: one pass over the names, nothing allocated.
    if headers.keys().any(own) {
        let names: Vec<HeaderName> = headers.keys().filter(|k| own(k)).cloned().collect();
        for name in names {
            headers.remove(name);
        }
    }
    if !trusted {
        if let Some(xff) = joined(headers, &X_FORWARDED_FOR) {
            headers.remove(X_FORWARDED_FOR);
            if let Ok(v) = HeaderValue::from_bytes(&xff) {
                headers.insert(X_ORIGINAL_FORWARDED_FOR, v);
            }
        }
    }
    match joined(headers, &X_FORWARDED_HOST).and_then(|v| HeaderValue::from_bytes(&v).ok()) {
        Some(v) => headers.insert(X_ORIGINAL_FORWARDED_HOST, v),
        None => headers.remove(X_ORIGINAL_FORWARDED_HOST),
    };
}

/// The first entry of an `X-Forwarded-Host`, when it is an authority (`host[:port]`, no
/// user info, no path).
fn forwarded_host(headers: &HeaderMap) -> Option<HeaderValue> {
    let v = headers.get(&X_FORWARDED_HOST)?.as_bytes();
    let first = v.split(|b| *b == b',').next().unwrap_or(v).trim_ascii();
    let authority = http::uri::Authority::try_from(first).ok()?;
    // The host first (no user info), then nothing or a port.
    let host = authority.host();
    let rest = authority.as_str().strip_prefix(host).filter(|_| !host.is_empty())?;
    let port_ok = rest.is_empty() || rest.strip_prefix(':').is_some_and(|p| p.parse::<u16>().is_ok());
    port_ok.then(|| HeaderValue::from_bytes(first).ok()).flatten()
}

/// The values of `name` that are not blank, joined by `, ` (one header), or `None` when
/// there are none.
fn joined(headers: &HeaderMap, name: &HeaderName) -> Option<Vec<u8>> {
    let mut all = headers.get_all(name).iter().map(|v| v.as_bytes().trim_ascii()).filter(|v| !v.is_empty());
    let mut v = all.next()?.to_vec();
    for more in all {
        v.extend_from_slice(b", ");
        v.extend_from_slice(more);
    }
    Some(v)
}

/// `conn` from a trusted proxy, its client, scheme, port and host as that proxy's headers
/// say (`X-Forwarded-For`, `-Proto`, `-Port`, as nginx's realip module reads them, and
/// `-Host`, as ingress-nginx's `use-forwarded-headers` does): the client
/// is the last address of `X-Forwarded-For` that `trusts` does not (the first when it
/// trusts them all; the trusted one after an entry that is not an address). What no header
/// says stays the connection's; a scheme without a port takes the scheme's own.
pub fn forwarded_client(
    mut conn: super::ConnInfo,
    headers: &HeaderMap,
    trusts: impl Fn(IpAddr) -> bool,
) -> super::ConnInfo {
    let hop = conn.client.ip();
    let mut client = hop;
    let entries: Vec<&[u8]> =
        headers.get_all(&X_FORWARDED_FOR).iter().flat_map(|v| v.as_bytes().split(|b| *b == b',')).collect();
    for entry in entries.iter().rev() {
        let Some(ip) = address(entry.trim_ascii()) else { break };
        client = ip;
        if !trusts(ip) {
            break;
        }
    }
    if client != hop {
        conn.client = SocketAddr::new(client, 0);
    }
    let first = |name: &HeaderName| {
        let v = headers.get(name)?.as_bytes();
        Some(v.split(|b| *b == b',').next().unwrap_or(v).trim_ascii())
    };
    let scheme = match first(&X_FORWARDED_PROTO) {
        Some(p) if p.eq_ignore_ascii_case(b"https") => Some(super::Scheme::Https),
        Some(p) if p.eq_ignore_ascii_case(b"http") => Some(super::Scheme::Http),
        _ => None,
    };
    let port = first(&X_FORWARDED_PORT)
        .filter(|p| !p.is_empty() && p.iter().all(u8::is_ascii_digit))
        .and_then(|p| std::str::from_utf8(p).ok()?.parse::<u16>().ok());
    conn.proxy_port = match (scheme, port) {
        (_, Some(p)) => Some(p),
        (Some(s), None) if s != conn.scheme => Some(if s == super::Scheme::Https { 443 } else { 80 }),
        _ => None,
    };
    conn.scheme = scheme.unwrap_or(conn.scheme);
    conn.proxy_host = forwarded_host(headers);
    conn.forwarded_by = Some(hop);
    conn
}

/// An `X-Forwarded-For` entry: an address, or an address and port.
fn address(entry: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(entry).ok()?;
    s.parse::<IpAddr>().ok().or_else(|| s.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

/// What the backend is told about the client.
#[derive(Debug)]
pub struct Forwarded<'a> {
    /// Client IP.
    pub client_ip: std::net::IpAddr,
    /// The address appended to `X-Forwarded-For`: the peer that sent the request.
    pub hop: std::net::IpAddr,
    /// `http` or `https`.
    pub proto: &'static str,
    /// Host the client asked for (as sent, with port if any); `None` when it sent none.
    pub host: Option<&'a HeaderValue>,
    /// The port the client used: a trusted proxy's word, else the one its `Host` names,
    /// else its scheme's (80, 443). Not the listener's: behind a Service that maps 80 to
    /// 8080, the client used 80.
    pub port: u16,
}

/// Sets X-Forwarded-For (appended: [`from_client`] took an untrusted client's away),
/// X-Forwarded-Proto/-Scheme/-Host/-Port, X-Scheme, X-Real-IP and X-Request-Id (kept
/// when the client sent a sane one).
pub fn set_forwarded(headers: &mut HeaderMap, f: &Forwarded<'_>) {
    let ip = ip_value(f.client_ip);
    let hop = if f.hop == f.client_ip { ip.clone() } else { ip_value(f.hop) };
    let xff = match joined(headers, &X_FORWARDED_FOR) {
        None => hop,
        Some(mut v) => {
            v.extend_from_slice(b", ");
            v.extend_from_slice(hop.as_bytes());
            HeaderValue::from_bytes(&v).unwrap_or(hop)
        }
    };
    headers.insert(X_FORWARDED_FOR, xff);
    headers.insert(X_REAL_IP, ip);
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(f.proto));
    headers.insert(X_FORWARDED_SCHEME, HeaderValue::from_static(f.proto));
    headers.insert(X_SCHEME, HeaderValue::from_static(f.proto));
    match f.host {
        Some(h) => headers.insert(X_FORWARDED_HOST, h.clone()),
        None => headers.remove(X_FORWARDED_HOST),
    };
    let port = match f.port {
        80 => HeaderValue::from_static("80"),
        443 => HeaderValue::from_static("443"),
        p => HeaderValue::from(p),
    };
    headers.insert(X_FORWARDED_PORT, port);
    ensure_request_id(headers);
}

/// The request's `X-Request-Id`, set to a new one unless the client sent a sane one.
pub fn ensure_request_id(headers: &mut HeaderMap) -> HeaderValue {
    match headers.get(&X_REQUEST_ID) {
        Some(v) if v.len() <= 128 && !v.is_empty() => v.clone(),
        _ => {
            let id = request_id();
            headers.insert(X_REQUEST_ID, id.clone());
            id
        }
    }
}

const SSL_CLIENT_VERIFY: HeaderName = HeaderName::from_static("ssl-client-verify");
const SSL_CLIENT_SUBJECT_DN: HeaderName = HeaderName::from_static("ssl-client-subject-dn");
const SSL_CLIENT_ISSUER_DN: HeaderName = HeaderName::from_static("ssl-client-issuer-dn");
const SSL_CLIENT_CERT: HeaderName = HeaderName::from_static("ssl-client-cert");
/// The client-certificate headers: only Wharf sets them.
static CLIENT_CERT: [HeaderName; 4] = [SSL_CLIENT_VERIFY, SSL_CLIENT_SUBJECT_DN, SSL_CLIENT_ISSUER_DN, SSL_CLIENT_CERT];

/// The headers ingress-nginx gives the backend of a host that asks for client
/// certificates (`check`): `ssl-client-verify` (`SUCCESS` or `NONE`), the subject's and
/// issuer's DNs, and with `pass_certificate` the certificate. Whatever a client sent under
/// those names is removed, on every route.
pub fn set_client_cert(
    headers: &mut HeaderMap,
    check: Option<&wharf_model::ClientCertCheck>,
    cert: Option<&wharf_model::PeerCertificate>,
) {
    for name in &CLIENT_CERT {
        headers.remove(name);
    }
    let Some(check) = check else { return };
    let Some(cert) = cert else {
        headers.insert(SSL_CLIENT_VERIFY, HeaderValue::from_static("NONE"));
        return;
    };
    headers.insert(SSL_CLIENT_VERIFY, HeaderValue::from_static("SUCCESS"));
    let mut set = |name: HeaderName, value: &str| {
        if let Ok(v) = HeaderValue::from_bytes(value.as_bytes()) {
            headers.insert(name, v);
        }
    };
    set(SSL_CLIENT_SUBJECT_DN, &cert.subject);
    set(SSL_CLIENT_ISSUER_DN, &cert.issuer);
    if check.pass_certificate {
        set(SSL_CLIENT_CERT, &cert.escaped_pem);
    }
}

/// A `Strict-Transport-Security` value (RFC 6797 §6.1) from `--hsts`: `max-age=SECONDS`,
/// then `includeSubDomains` and `preload` if wanted, separated by `;` (names in any case,
/// empty directives allowed), written back in their usual form.
pub fn hsts(value: &str) -> Result<HeaderValue, String> {
    let (mut max_age, mut sub, mut preload) = (None, false, false);
    for part in value.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, arg) = part.split_once('=').map_or((part, None), |(n, a)| (n.trim(), Some(a.trim())));
        let seconds =
            arg.filter(|a| !a.is_empty() && a.bytes().all(|b| b.is_ascii_digit())).and_then(|a| a.parse().ok());
        match (name.to_ascii_lowercase().as_str(), arg, seconds) {
            ("max-age", Some(_), Some(s)) if max_age.is_none() => max_age = Some::<u64>(s),
            ("includesubdomains", None, _) if !sub => sub = true,
            ("preload", None, _) if !preload => preload = true,
            _ => {
                return Err(format!(
                    "{part:?}: expected max-age=SECONDS, then includeSubDomains and preload if wanted, each once, \
                     separated by ';'"
                ))
            }
        }
    }
    let Some(max_age) = max_age else {
        return Err("max-age=SECONDS is required".into());
    };
    let mut out = format!("max-age={max_age}");
    if sub {
        out.push_str("; includeSubDomains");
    }
    if preload {
        out.push_str("; preload");
    }
    HeaderValue::from_str(&out).map_err(|e| e.to_string())
}

/// `ip` as a header value.
fn ip_value(ip: IpAddr) -> HeaderValue {
    use std::io::Write;
    let mut buf = [0u8; 64];
    let mut w = &mut buf[..];
    let _ = write!(w, "{ip}");
    let n = 64 - w.len();
    HeaderValue::from_bytes(&buf[..n]).unwrap_or(HeaderValue::from_static("unknown"))
}

/// A random 128-bit id as 32 lower-case hex digits.
fn request_id() -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut n = fastrand::u128(..);
    let mut out = [0u8; 32];
    for b in out.iter_mut().rev() {
        *b = HEX[(n & 0xf) as usize];
        n >>= 4;
    }
    HeaderValue::from_bytes(&out).unwrap_or(HeaderValue::from_static("0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_hop_by_hop_and_connection_named() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive, x-secret"));
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h, false);
        assert_eq!(h.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["x-kept"]);

        // Upper-case tokens, several Connection headers, a named header that is absent.
        let mut h = HeaderMap::new();
        h.append(header::CONNECTION, HeaderValue::from_static("Keep-Alive"));
        h.append(header::CONNECTION, HeaderValue::from_static("X-Hop, x-absent"));
        h.insert("x-hop", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::UPGRADE, HeaderValue::from_static("h2c"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("3"));
        strip_hop_by_hop(&mut h, false);
        assert_eq!(h.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["content-length"]);

        let mut none = HeaderMap::new();
        none.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        strip_hop_by_hop(&mut none, true);
        assert_eq!(none.len(), 1);
    }

    #[test]
    fn keeps_upgrade_pair_when_asked() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert!(is_upgrade(&h));
        strip_hop_by_hop(&mut h, true);
        assert_eq!(h.get(header::UPGRADE).map(|v| v.as_bytes()), Some(&b"websocket"[..]));
        assert_eq!(h.get(header::CONNECTION).map(|v| v.as_bytes()), Some(&b"upgrade"[..]));
    }

    #[test]
    fn a_sane_request_id_is_kept_and_another_replaced() {
        let long = "x".repeat(128);
        for (sent, kept) in [(Some("abc"), true), (Some(long.as_str()), true), (Some(""), false), (None, false)] {
            let mut h = HeaderMap::new();
            if let Some(v) = sent {
                h.insert("x-request-id", HeaderValue::from_str(v).unwrap());
            }
            let id = ensure_request_id(&mut h);
            assert_eq!(h["x-request-id"], id);
            assert_eq!(Some(id.to_str().unwrap()) == sent, kept, "{sent:?}");
            assert!(kept || id.len() == 32, "{sent:?}");
        }
        let mut h = HeaderMap::new();
        h.insert("x-request-id", HeaderValue::from_str(&"y".repeat(129)).unwrap());
        assert_eq!(ensure_request_id(&mut h).len(), 32, "too long");
    }

    #[test]
    fn forwarded_headers_append_and_keep_request_id() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("1.2.3.4"));
        h.insert("x-request-id", HeaderValue::from_static("abc"));
        let host = HeaderValue::from_static("a.com");
        let f =
            Forwarded { client_ip: ip("10.1.1.1"), hop: ip("10.1.1.1"), proto: "https", host: Some(&host), port: 443 };
        set_forwarded(&mut h, &f);
        assert_eq!(h["x-request-id"], "abc");
        assert_eq!(h["x-real-ip"], "10.1.1.1");
        assert_eq!(h["x-forwarded-for"], "1.2.3.4, 10.1.1.1");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "a.com");
        assert_eq!(h["x-forwarded-port"], "443");
        let mut fresh = HeaderMap::new();
        fresh.insert("x-forwarded-host", HeaderValue::from_static("spoofed"));
        let v6 =
            Forwarded { client_ip: ip("2001:db8::1"), hop: ip("2001:db8::1"), proto: "http", host: None, port: 8080 };
        set_forwarded(&mut fresh, &v6);
        let id = fresh["x-request-id"].to_str().unwrap();
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(id, "0".repeat(32));
        assert_eq!(fresh["x-forwarded-for"], "2001:db8::1");
        assert_eq!(fresh["x-forwarded-port"], "8080");
        assert_eq!(fresh["x-forwarded-proto"], "http");
        assert!(fresh.get("x-forwarded-host").is_none(), "a client's own X-Forwarded-Host is not passed on");
    }

    #[test]
    fn a_client_cannot_pass_on_what_only_proxies_and_wharf_say() {
        let sent = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.append(*k, HeaderValue::from_static(v));
            }
            h
        };
        let names = |h: &HeaderMap| {
            let mut n: Vec<String> = h.iter().map(|(k, v)| format!("{k}: {}", v.to_str().unwrap())).collect();
            n.sort();
            n
        };
        let spoofed = [
            ("ssl_client_verify", "SUCCESS"),
            ("SSL-Client-Subject-DN", "CN=admin"),
            ("x_user", "admin"),
            ("proxy", "http://evil"),
            ("forwarded", "for=10.0.0.1;proto=https"),
            ("x-original-url", "/admin"),
            ("x-original-uri", "/admin"),
            ("x-original-method", "DELETE"),
            ("x-rewrite-url", "/admin"),
            ("x-original-forwarded-for", "10.9.9.9"),
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-for", " 5.6.7.8 "),
            ("accept", "*/*"),
        ];
        let mut h = sent(&spoofed);
        from_client(&mut h, false, false);
        assert_eq!(names(&h), ["accept: */*", "x-original-forwarded-for: 1.2.3.4, 5.6.7.8"]);
        let f = Forwarded { client_ip: ip("10.1.1.1"), hop: ip("10.1.1.1"), proto: "https", host: None, port: 443 };
        set_forwarded(&mut h, &f);
        assert_eq!(h["x-forwarded-for"], "10.1.1.1", "the client alone");
        assert_eq!(
            (&h["x-forwarded-scheme"], &h["x-scheme"]),
            (&HeaderValue::from_static("https"), &HeaderValue::from_static("https"))
        );
        // A trusted proxy's word on the request stays; a client certificate, `Proxy` and
        // underscores still do not pass.
        let mut h = sent(&spoofed);
        from_client(&mut h, true, false);
        let kept = names(&h);
        assert_eq!(
            kept,
            [
                "accept: */*",
                "forwarded: for=10.0.0.1;proto=https",
                "x-forwarded-for:  5.6.7.8 ",
                "x-forwarded-for: 1.2.3.4",
                "x-original-forwarded-for: 10.9.9.9",
                "x-original-method: DELETE",
                "x-original-uri: /admin",
                "x-original-url: /admin",
                "x-rewrite-url: /admin",
            ]
        );
        // Underscores where the operator allows them.
        let mut h = sent(&[("x_user", "a"), ("ssl_client_verify", "SUCCESS")]);
        from_client(&mut h, true, true);
        assert_eq!(names(&h), ["ssl_client_verify: SUCCESS", "x_user: a"]);
        // Nothing to take: nothing changes.
        let mut h = sent(&[("accept", "*/*")]);
        from_client(&mut h, false, false);
        assert_eq!(names(&h), ["accept: */*"]);
    }

    #[test]
    fn an_upgrade_needs_both_the_header_and_the_connection_token() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.append(*k, HeaderValue::from_static(v));
            }
            h
        };
        assert!(is_upgrade(&headers(&[("connection", "keep-alive, Upgrade"), ("upgrade", "websocket")])));
        assert!(!is_upgrade(&headers(&[("upgrade", "websocket")])), "Upgrade without Connection: upgrade");
        assert!(!is_upgrade(&headers(&[("connection", "upgrade")])), "Connection: upgrade without Upgrade");
        assert!(!is_upgrade(&headers(&[("connection", "keep-alive"), ("upgrade", "websocket")])));
        assert!(!is_upgrade(&headers(&[("connection", "upgraded"), ("upgrade", "websocket")])));

        // A lone Upgrade header (no other hop-by-hop header) is still removed.
        let mut lone = headers(&[("upgrade", "h2c"), ("content-type", "text/plain")]);
        strip_hop_by_hop(&mut lone, false);
        assert_eq!(lone.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["content-type"]);
    }

    #[test]
    fn an_empty_forwarded_for_is_replaced_not_appended_to_and_request_ids_are_random() {
        for empty in ["", "  "] {
            let mut h = HeaderMap::new();
            h.insert("x-forwarded-for", HeaderValue::from_static(empty));
            let f = Forwarded { client_ip: ip("10.1.1.1"), hop: ip("10.1.1.1"), proto: "http", host: None, port: 80 };
            set_forwarded(&mut h, &f);
            assert_eq!(h["x-forwarded-for"], "10.1.1.1", "{empty:?}");
            assert_eq!(h["x-forwarded-port"], "80");
        }
        // Every hex digit of the id is drawn: 32 random digits, not a counter or a shifted
        // few (the chance of 16 zeros among 32 random digits is about 10^-12).
        let ids: Vec<String> = (0..8).map(|_| request_id().to_str().unwrap_or_default().to_owned()).collect();
        for id in &ids {
            assert!(id.bytes().filter(|b| *b == b'0').count() < 16, "{id}");
        }
        assert!(ids.windows(2).all(|w| w[0][..16] != w[1][..16]), "{ids:?}");
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    fn from_proxy(pairs: &[(&'static str, &'static str)]) -> super::super::ConnInfo {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        let conn = super::super::ConnInfo {
            client: "10.0.0.2:4000".parse().unwrap_or(SocketAddr::new(ip("0.0.0.0"), 0)),
            scheme: super::super::Scheme::Http,
            port: 80,
            sni: None,
            gateway_port: None,
            forwarded_by: None,
            proxy_port: None,
            proxy_host: None,
            client_cert: None,
        };
        let trusted = ["10.0.0.0/8", "2001:db8:f::/48"].map(|n| wharf_model::IpNet::parse(n).ok());
        forwarded_client(conn, &h, |a| trusted.iter().flatten().any(|n| n.contains(a)))
    }

    #[test]
    fn a_trusted_proxy_names_the_client_by_the_last_untrusted_forwarded_for_address() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[], "10.0.0.2:4000"),
            (&[("x-forwarded-for", "203.0.113.7")], "203.0.113.7:0"),
            (&[("x-forwarded-for", "198.51.100.1, 203.0.113.7, 10.1.1.1")], "203.0.113.7:0"),
            (&[("x-forwarded-for", "198.51.100.1"), ("x-forwarded-for", "203.0.113.7,10.9.9.9")], "203.0.113.7:0"),
            (&[("x-forwarded-for", "10.3.3.3, 10.1.1.1")], "10.3.3.3:0"),
            (&[("x-forwarded-for", "[2001:db8::7]:1234, 2001:db8:f::1")], "[2001:db8::7]:0"),
            (&[("x-forwarded-for", "203.0.113.7:5555")], "203.0.113.7:0"),
            // An entry that is not an address ends the walk at the trusted one after it.
            (&[("x-forwarded-for", "203.0.113.7, unknown, 10.1.1.1")], "10.1.1.1:0"),
            (&[("x-forwarded-for", "203.0.113.7,,10.1.1.1")], "10.1.1.1:0"),
            (&[("x-forwarded-for", "nonsense")], "10.0.0.2:4000"),
        ];
        for (headers, want) in cases {
            let c = from_proxy(headers);
            assert_eq!(
                (c.client.to_string(), c.forwarded_by),
                ((*want).to_owned(), Some(ip("10.0.0.2"))),
                "{headers:?}"
            );
        }
    }

    #[test]
    fn a_trusted_proxy_names_the_scheme_and_port_the_client_used() {
        use super::super::Scheme::{self, Http, Https};
        type Case<'a> = (&'a [(&'a str, &'a str)], Scheme, u16);
        let cases: &[Case] = &[
            (&[], Http, 80),
            (&[("x-forwarded-proto", "https")], Https, 443),
            (&[("x-forwarded-proto", "HTTPS, http")], Https, 443),
            (&[("x-forwarded-proto", "https"), ("x-forwarded-port", "8443")], Https, 8443),
            (&[("x-forwarded-proto", "http")], Http, 80),
            (&[("x-forwarded-port", "8080")], Http, 8080),
            (&[("x-forwarded-proto", "wss"), ("x-forwarded-port", "+1")], Http, 80),
            (&[("x-forwarded-port", "65536")], Http, 80),
            (&[("x-forwarded-port", "")], Http, 80),
        ];
        for (headers, scheme, port) in cases {
            let c = from_proxy(headers);
            assert_eq!((c.scheme, c.arrival_port()), (*scheme, *port), "{headers:?}");
        }
        // From HTTPS, a proxy's "http" without a port means port 80.
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-proto", HeaderValue::from_static("http"));
        let mut conn = from_proxy(&[]);
        (conn.scheme, conn.port, conn.forwarded_by) = (Https, 443, None);
        let c = forwarded_client(conn.clone(), &h, |_| true);
        assert_eq!((c.scheme, c.arrival_port()), (Http, 80));
        // A scheme that is neither leaves the connection's.
        h.insert("x-forwarded-proto", HeaderValue::from_static("wss"));
        let c = forwarded_client(conn.clone(), &h, |_| true);
        assert_eq!((c.scheme, c.arrival_port()), (Https, 443));
        // The connection's own scheme without a port keeps the connection's port.
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        conn.port = 8443;
        let c = forwarded_client(conn, &h, |_| true);
        assert_eq!((c.scheme, c.arrival_port()), (Https, 8443));
    }

    #[test]
    fn a_trusted_proxy_names_the_host_by_the_first_authority_of_its_forwarded_host() {
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>);
        let cases: &[Case] = &[
            (&[], None),
            (&[("x-forwarded-host", "myhost")], Some("myhost")),
            (&[("x-forwarded-host", " myhost.com , another.host,example.net")], Some("myhost.com")),
            (&[("x-forwarded-host", "example.com:80")], Some("example.com:80")),
            (&[("x-forwarded-host", "[2001:db8::1]:8443")], Some("[2001:db8::1]:8443")),
            (&[("x-forwarded-host", "")], None),
            (&[("x-forwarded-host", ",b.example")], None),
            (&[("x-forwarded-host", "user@evil.example")], None),
            (&[("x-forwarded-host", "evil.example/path")], None),
            (&[("x-forwarded-host", ":80")], None),
            (&[("x-forwarded-host", "evil.example:abc")], None),
            (&[("x-forwarded-host", "evil.example:65536")], None),
            (&[("x-forwarded-host", "a.example:")], None),
        ];
        for (headers, want) in cases {
            let c = from_proxy(headers);
            assert_eq!(c.proxy_host.as_ref().and_then(|v| v.to_str().ok()), *want, "{headers:?}");
        }
    }

    #[test]
    fn a_clients_forwarded_host_reaches_the_backend_as_the_original_forwarded_host() {
        for trusted in [false, true] {
            let mut h = HeaderMap::new();
            h.append("x-forwarded-host", HeaderValue::from_static("a.example"));
            h.append("x-forwarded-host", HeaderValue::from_static(" b.example "));
            h.insert("x-original-forwarded-host", HeaderValue::from_static("forged"));
            from_client(&mut h, trusted, false);
            assert_eq!(h["x-original-forwarded-host"], "a.example, b.example", "trusted: {trusted}");
            let mut none = HeaderMap::new();
            none.insert("x-original-forwarded-host", HeaderValue::from_static("forged"));
            from_client(&mut none, trusted, false);
            assert!(none.get("x-original-forwarded-host").is_none(), "trusted: {trusted}");
        }
    }

    #[test]
    fn behind_a_trusted_proxy_forwarded_for_gets_the_proxy_and_real_ip_the_client() {
        let mut h = HeaderMap::new();
        h.append("x-forwarded-for", HeaderValue::from_static("198.51.100.1"));
        h.append("x-forwarded-for", HeaderValue::from_static(" 203.0.113.7 "));
        let f = Forwarded { client_ip: ip("203.0.113.7"), hop: ip("10.0.0.2"), proto: "https", host: None, port: 443 };
        set_forwarded(&mut h, &f);
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(h["x-forwarded-for"], "198.51.100.1, 203.0.113.7, 10.0.0.2");
        assert_eq!(h["x-real-ip"], "203.0.113.7");
    }

    #[test]
    fn an_hsts_setting_is_read_in_any_case_and_written_as_usual() {
        let cases = [
            ("max-age=31536000; includeSubDomains", "max-age=31536000; includeSubDomains"),
            ("max-age=0", "max-age=0"),
            (" MAX-AGE = 60 ;PRELOAD; includesubdomains ", "max-age=60; includeSubDomains; preload"),
            ("preload; max-age=1", "max-age=1; preload"),
            ("max-age=5;", "max-age=5"),
        ];
        for (input, want) in cases {
            assert_eq!(hsts(input).as_ref().map(|v| v.to_str().unwrap_or_default()), Ok(want), "{input:?}");
        }
        for bad in [
            "",
            "includeSubDomains",
            "max-age=",
            "max-age=-1",
            "max-age=+5",
            "max-age=1y",
            "max-age=99999999999999999999",
            "max-age=1; max-age=2",
            "max-age=1; preload; preload",
            "max-age=1; includeSubDomains; includeSubDomains",
            "max-age=1; preload=yes",
            "max-age=1; includeSubDomains=1",
            "max-age",
            "max-age=1; always",
            ";",
        ] {
            assert!(hsts(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_backend_hears_of_the_client_certificate_and_never_a_clients_word_for_it() {
        use wharf_model::{ClientCertCheck, PeerCertificate, VerifyClient};
        let spoofed = || {
            let mut h = HeaderMap::new();
            for n in ["ssl-client-verify", "ssl-client-subject-dn", "ssl-client-issuer-dn", "ssl-client-cert"] {
                h.insert(n, HeaderValue::from_static("spoofed"));
            }
            h
        };
        let shown = |h: &HeaderMap| -> Vec<String> {
            h.iter().map(|(k, v)| format!("{k}: {}", String::from_utf8_lossy(v.as_bytes()))).collect()
        };
        let cert = PeerCertificate {
            subject: "CN=caf\u{e9},O=Shop".into(),
            issuer: "CN=Shop CA".into(),
            escaped_pem: "-----BEGIN%20CERTIFICATE".into(),
        };
        let check = |pass| ClientCertCheck {
            verify: VerifyClient::Optional,
            pass_certificate: pass,
            error_page: None,
            match_subject: None,
        };

        let mut h = spoofed();
        set_client_cert(&mut h, None, Some(&cert));
        assert!(h.is_empty(), "a route without client certificates passes none on: {:?}", shown(&h));
        let mut h = spoofed();
        set_client_cert(&mut h, Some(&check(true)), None);
        assert_eq!(shown(&h), ["ssl-client-verify: NONE"]);
        let mut h = spoofed();
        set_client_cert(&mut h, Some(&check(false)), Some(&cert));
        let mut got = shown(&h);
        got.sort();
        assert_eq!(
            got,
            [
                "ssl-client-issuer-dn: CN=Shop CA",
                "ssl-client-subject-dn: CN=caf\u{e9},O=Shop",
                "ssl-client-verify: SUCCESS"
            ]
        );
        let mut h = spoofed();
        set_client_cert(&mut h, Some(&check(true)), Some(&cert));
        assert_eq!(h["ssl-client-cert"], "-----BEGIN%20CERTIFICATE");
    }
}
