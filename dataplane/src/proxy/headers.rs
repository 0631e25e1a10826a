//! Header rewriting between client and backend.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Headers that describe one hop, never forwarded (RFC 9110 §7.6.1).
const HOP_BY_HOP: [HeaderName; 7] = [
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
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    let upgrade = headers.get(header::UPGRADE).cloned();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    headers.remove(header::UPGRADE);
    if keep_upgrade {
        if let Some(u) = upgrade {
            headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            headers.insert(header::UPGRADE, u);
        }
    }
}

/// What the backend is told about the client.
#[derive(Debug)]
pub struct Forwarded<'a> {
    /// Client IP.
    pub client_ip: std::net::IpAddr,
    /// `http` or `https`.
    pub proto: &'static str,
    /// Host the client asked for (as sent, with port if any).
    pub host: &'a str,
    /// Gateway port the client connected to.
    pub port: u16,
}

/// Sets X-Forwarded-For (appended), X-Forwarded-Proto/-Host/-Port, X-Real-IP and
/// X-Request-Id (kept when the client sent a sane one). Returns the request id.
pub fn set_forwarded(headers: &mut HeaderMap, f: &Forwarded<'_>) -> HeaderValue {
    let ip = f.client_ip.to_string();
    let xff = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(prev) if !prev.trim().is_empty() => format!("{prev}, {ip}"),
        _ => ip.clone(),
    };
    let put = |h: &mut HeaderMap, name: &'static str, v: &str| {
        if let Ok(v) = HeaderValue::from_str(v) {
            h.insert(HeaderName::from_static(name), v);
        }
    };
    put(headers, "x-forwarded-for", &xff);
    put(headers, "x-real-ip", &ip);
    put(headers, "x-forwarded-proto", f.proto);
    put(headers, "x-forwarded-host", f.host);
    put(headers, "x-forwarded-port", &f.port.to_string());
    let id = match headers.get("x-request-id") {
        Some(v) if v.len() <= 128 && !v.is_empty() => v.clone(),
        _ => {
            let v =
                HeaderValue::from_str(&format!("{:032x}", fastrand::u128(..))).unwrap_or(HeaderValue::from_static("0"));
            headers.insert(HeaderName::from_static("x-request-id"), v.clone());
            v
        }
    };
    id
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
        let f = Forwarded { client_ip: "10.1.1.1".parse().unwrap(), proto: "https", host: "a.com", port: 443 };
        let id = set_forwarded(&mut h, &f);
        assert_eq!(id, "abc");
        assert_eq!(h["x-forwarded-for"], "1.2.3.4, 10.1.1.1");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "a.com");
        assert_eq!(h["x-forwarded-port"], "443");
        let mut fresh = HeaderMap::new();
        let id = set_forwarded(&mut fresh, &f);
        assert_eq!(id.len(), 32);
    }
}
