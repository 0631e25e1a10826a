//! What the fuzz targets (`fuzz/`) check for each input, here so that the committed corpus
//! also runs on stable in CI (`dataplane/tests/fuzz_corpus.rs`). Each function panics when
//! a property does not hold.

use std::net::SocketAddr;

use http::Method;

use crate::hbone::inbound::{connect_target, Refused};
use crate::hbone::RESERVED_PORTS;
use crate::proxy::normalize::{normalize_path as normalize, EscapedSlashes, PathOptions};

/// The passthrough listener's ClientHello parser: raw bytes from the network. A name it
/// finds is a non-empty lowercase host name.
pub fn client_hello(data: &[u8]) {
    if let Ok(Some(name)) = crate::passthrough::client_hello::parse_sni(data) {
        assert!(!name.is_empty());
        assert!(name.bytes().all(|b| b.is_ascii_graphic() && !b.is_ascii_uppercase()), "{name:?}");
    }
}

/// Hosts and path prefixes from Ingress objects: what is accepted prints back to the same
/// host, and a prefix matches its own path.
pub fn host_path(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(h) = wharf_model::Host::parse(s) {
        assert_eq!(wharf_model::Host::parse(&h.to_string()).ok(), Some(h));
    }
    if let Ok(p) = wharf_model::PathMatch::prefix(s) {
        assert!(p.matches(p.path()));
    }
}

/// Request paths: in every mode, normalising twice changes nothing and no dot segment is
/// left.
pub fn normalize_path(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    for escaped_slashes in [EscapedSlashes::Keep, EscapedSlashes::Reject, EscapedSlashes::Decode] {
        for merge_slashes in [false, true] {
            let opts = PathOptions { escaped_slashes, merge_slashes };
            if let Ok(once) = normalize(s, opts) {
                assert_eq!(normalize(&once, opts).as_deref(), Ok(&*once));
                if once.starts_with('/') {
                    assert!(!once.split('/').any(|seg| seg == "." || seg == ".."), "{once}");
                }
            }
        }
    }
}

/// The HBONE inbound CONNECT target: the first byte picks the method, the rest is the
/// request target. An accepted target is a CONNECT to an `IP:port` in authority form,
/// outside ztunnel's ports, and reads back the same.
pub fn hbone_connect(data: &[u8]) {
    let Some((&m, rest)) = data.split_first() else { return };
    let method = [Method::CONNECT, Method::GET, Method::POST][usize::from(m % 3)].clone();
    let Ok(uri) = http::Uri::try_from(rest) else { return };
    match connect_target(&method, &uri) {
        Ok(addr) => {
            assert_eq!(method, Method::CONNECT);
            assert!(!RESERVED_PORTS.contains(&addr.port()), "{addr}");
            assert!(uri.scheme().is_none() && uri.path_and_query().is_none(), "{uri}");
            assert_eq!(uri.authority().map(|a| a.as_str().parse::<SocketAddr>().ok()), Some(Some(addr)));
            let again = http::Uri::try_from(addr.to_string()).map_err(|e| e.to_string());
            assert_eq!(again.map(|u| connect_target(&Method::CONNECT, &u)), Ok(Ok(addr)));
        }
        Err(Refused::NotConnect) => assert_ne!(method, Method::CONNECT),
        Err(Refused::ReservedPort) => assert_eq!(method, Method::CONNECT),
        Err(Refused::BadAuthority) => assert_eq!(method, Method::CONNECT),
        Err(other @ (Refused::PrivatePort | Refused::UnknownDestination | Refused::PeerDenied)) => {
            panic!("{other:?} is decided after the target is read")
        }
    }
}

/// A fuzz target's checks.
pub type Check = fn(&[u8]);

/// The fuzz targets by name, as in `fuzz/Cargo.toml`.
pub const TARGETS: [(&str, Check); 4] = [
    ("client_hello", client_hello),
    ("host_path", host_path),
    ("normalize_path", normalize_path),
    ("hbone_connect", hbone_connect),
];
