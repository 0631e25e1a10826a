//! Client address filters: which source addresses a route serves.

use std::fmt;
use std::net::IpAddr;

use serde::{Serialize, Serializer};

/// An IPv4 or IPv6 network: an address and a prefix length. Bits past the prefix are
/// cleared, so `10.1.2.3/8` is `10.0.0.0/8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpNet {
    addr: IpAddr,
    len: u8,
}

/// Why an address or network was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an IP address or a network like 10.0.0.0/8 or 2001:db8::/32")]
pub struct IpNetError(pub String);

impl IpNet {
    /// Parses `10.0.0.0/8`, `2001:db8::/32`, or a single address (a /32 or /128).
    pub fn parse(s: &str) -> Result<IpNet, IpNetError> {
        let err = || IpNetError(s.to_owned());
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => {
                let addr: IpAddr = a.parse().map_err(|_| err())?;
                // Digits only (`u8::from_str` would also take a leading `+`), without
                // leading zeros (as Go's ParseCIDR, which ingress-nginx uses).
                if l.is_empty() || (l.len() > 1 && l.starts_with('0')) || !l.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err());
                }
                let len: u8 = l.parse().map_err(|_| err())?;
                (addr, len)
            }
            None => {
                let addr: IpAddr = s.parse().map_err(|_| err())?;
                (addr, max_len(addr))
            }
        };
        if len > max_len(addr) {
            return Err(err());
        }
        Ok(IpNet { addr: mask(addr, len), len })
    }

    /// True when `ip` is in this network. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`,
    /// as a dual-stack socket reports IPv4 clients) counts as its IPv4 address.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => mask(ip, self.len) == self.addr,
            _ => false,
        }
    }
}

/// Whether `ip` can be a workload's address: not loopback, unspecified, link-local
/// (169.254.0.0/16, where cloud metadata services answer, and fe80::/10), multicast or
/// broadcast. An IPv4-mapped IPv6 address counts as its IPv4 address.
pub fn is_workload_address(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(a) => {
            !(a.is_loopback() || a.is_unspecified() || a.is_link_local() || a.is_multicast() || a.is_broadcast())
        }
        IpAddr::V6(a) => !(a.is_loopback() || a.is_unspecified() || a.is_unicast_link_local() || a.is_multicast()),
    }
}

fn max_len(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4((bits & m).into())
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let m = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6((bits & m).into())
        }
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl Serialize for IpNet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Which client addresses a route serves; the others are answered 403. A denied
/// network wins over an allowed one; with an allow list, only its networks are served
/// (an empty allow list serves no one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ClientFilter {
    /// When set, only these networks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<IpNet>>,
    /// Never these networks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<IpNet>,
}

impl ClientFilter {
    /// True when a client at `ip` is served.
    pub fn admits(&self, ip: IpAddr) -> bool {
        !self.deny.iter().any(|n| n.contains(ip))
            && self.allow.as_ref().is_none_or(|allow| allow.iter().any(|n| n.contains(ip)))
    }
}

/// Per-client limits of a route (ingress-nginx `limit-rps`, `limit-rpm`,
/// `limit-connections`). Routes with the same `zone` share the counts of each client.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct RateLimit {
    /// Routes with equal zones (and limits) count together: the Ingress, as
    /// `namespace/name`.
    pub zone: String,
    /// Requests per second, with a burst of `burst` more at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_second: Option<u32>,
    /// Requests per minute, with a burst of `burst_per_minute` more at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_minute: Option<u32>,
    /// Extra requests per second allowed at once.
    pub burst: u32,
    /// Extra requests per minute allowed at once.
    pub burst_per_minute: u32,
    /// Requests in progress at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections: Option<u32>,
    /// Clients in these networks are not limited.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exempt: Vec<IpNet>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    fn net(s: &str) -> IpNet {
        IpNet::parse(s).unwrap_or(IpNet { addr: ip("255.255.255.255"), len: 32 })
    }

    #[test]
    fn workload_addresses_are_unicast_and_off_the_host() {
        for good in ["10.1.2.3", "198.18.0.2", "8.8.8.8", "fd00::7", "2001:db8::1", "::ffff:10.0.0.1", "169.253.1.1"] {
            assert!(is_workload_address(ip(good)), "{good}");
        }
        for bad in [
            "127.0.0.1",
            "127.9.9.9",
            "0.0.0.0",
            "169.254.169.254",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(!is_workload_address(ip(bad)), "{bad}");
        }
    }

    #[test]
    fn networks_parse_masked_and_single_addresses_are_hosts() {
        let cases = [
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("10.1.2.3/8", "10.0.0.0/8"),
            ("192.168.1.7", "192.168.1.7/32"),
            ("0.0.0.0/0", "0.0.0.0/0"),
            ("2001:db8::1/32", "2001:db8::/32"),
            ("::1", "::1/128"),
            ("::/0", "::/0"),
            ("172.16.0.0/12", "172.16.0.0/12"),
            ("2001:db8::/128", "2001:db8::/128"),
            ("10.0.0.0/0", "0.0.0.0/0"),
        ];
        for (given, want) in cases {
            assert_eq!(IpNet::parse(given).map(|n| n.to_string()), Ok(want.to_owned()), "{given}");
        }
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0.0/08",
            "10.0.0.0/8/8",
            "host",
            " 10.0.0.1",
        ] {
            assert_eq!(IpNet::parse(bad), Err(IpNetError(bad.to_owned())), "{bad}");
        }
    }

    #[test]
    fn networks_contain_their_addresses_and_mapped_ipv4() {
        let n = net("10.1.0.0/16");
        assert!(n.contains(ip("10.1.0.0")) && n.contains(ip("10.1.255.255")));
        assert!(!n.contains(ip("10.2.0.0")) && !n.contains(ip("10.0.255.255")));
        assert!(n.contains(ip("::ffff:10.1.2.3")), "IPv4-mapped IPv6 counts as IPv4");
        assert!(!n.contains(ip("::a01:203")), "IPv4-compatible IPv6 is IPv6");
        assert!(net("0.0.0.0/0").contains(ip("203.0.113.9")));
        assert!(!net("0.0.0.0/0").contains(ip("2001:db8::1")));
        assert!(net("2001:db8::/32").contains(ip("2001:db8:ffff::1")));
        assert!(!net("2001:db8::/32").contains(ip("2001:db9::1")));
        assert!(net("192.0.2.7").contains(ip("192.0.2.7")) && !net("192.0.2.7").contains(ip("192.0.2.6")));
        assert!(net("::/0").contains(ip("::1")));
    }

    #[test]
    fn deny_wins_and_an_allow_list_serves_only_its_networks() {
        let open = ClientFilter::default();
        assert!(open.admits(ip("198.51.100.1")));
        let f = ClientFilter { allow: Some(vec![net("10.0.0.0/8")]), deny: vec![net("10.9.0.0/16")] };
        assert!(f.admits(ip("10.1.1.1")));
        assert!(!f.admits(ip("10.9.1.1")), "deny wins");
        assert!(!f.admits(ip("11.0.0.1")), "outside the allow list");
        let deny_only = ClientFilter { allow: None, deny: vec![net("203.0.113.0/24")] };
        assert!(deny_only.admits(ip("198.51.100.1")) && !deny_only.admits(ip("203.0.113.5")));
        let nobody = ClientFilter { allow: Some(Vec::new()), deny: Vec::new() };
        assert!(!nobody.admits(ip("10.0.0.1")) && !nobody.admits(ip("::1")));
    }
}
