//! Header rewriting between client and backend.

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

/// What the backend is told about the client.
#[derive(Debug)]
pub struct Forwarded<'a> {
    /// Client IP.
    pub client_ip: std::net::IpAddr,
    /// `http` or `https`.
    pub proto: &'static str,
    /// Host the client asked for (as sent, with port if any); `None` when it sent none.
    pub host: Option<&'a HeaderValue>,
    /// Gateway port the client connected to.
    pub port: u16,
}

/// Sets X-Forwarded-For (appended), X-Forwarded-Proto/-Host/-Port, X-Real-IP and
/// X-Request-Id (kept when the client sent a sane one).
pub fn set_forwarded(headers: &mut HeaderMap, f: &Forwarded<'_>) {
    use std::io::Write;
    let mut buf = [0u8; 64];
    let ip = {
        let mut w = &mut buf[..];
        let _ = write!(w, "{}", f.client_ip);
        let n = 64 - w.len();
        HeaderValue::from_bytes(&buf[..n]).unwrap_or(HeaderValue::from_static("unknown"))
    };
    let xff = match headers.get(&X_FORWARDED_FOR).map(|v| v.as_bytes()) {
        Some(prev) if !prev.trim_ascii().is_empty() => {
            let mut v = Vec::with_capacity(prev.len() + 2 + ip.len());
            v.extend_from_slice(prev);
            v.extend_from_slice(b", ");
            v.extend_from_slice(ip.as_bytes());
            HeaderValue::from_bytes(&v).unwrap_or_else(|_| ip.clone())
        }
        _ => ip.clone(),
    };
    headers.insert(X_FORWARDED_FOR, xff);
    headers.insert(X_REAL_IP, ip);
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(f.proto));
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
    if !matches!(headers.get(&X_REQUEST_ID), Some(v) if v.len() <= 128 && !v.is_empty()) {
        headers.insert(X_REQUEST_ID, request_id());
    }
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
    fn forwarded_headers_append_and_keep_request_id() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("1.2.3.4"));
        h.insert("x-request-id", HeaderValue::from_static("abc"));
        let host = HeaderValue::from_static("a.com");
        let f = Forwarded { client_ip: "10.1.1.1".parse().unwrap(), proto: "https", host: Some(&host), port: 443 };
        set_forwarded(&mut h, &f);
        assert_eq!(h["x-request-id"], "abc");
        assert_eq!(h["x-real-ip"], "10.1.1.1");
        assert_eq!(h["x-forwarded-for"], "1.2.3.4, 10.1.1.1");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "a.com");
        assert_eq!(h["x-forwarded-port"], "443");
        let mut fresh = HeaderMap::new();
        fresh.insert("x-forwarded-host", HeaderValue::from_static("spoofed"));
        let v6 = Forwarded { client_ip: "2001:db8::1".parse().unwrap(), proto: "http", host: None, port: 8080 };
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
            let f = Forwarded { client_ip: "10.1.1.1".parse().unwrap(), proto: "http", host: None, port: 80 };
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
}
