//! The addresses of Gateways: one of the pool's for each, kept by a hash of its name.

use crate::hashing::HashSet;
use std::net::{IpAddr, Ipv4Addr};

use wharf_gateway_api::gateways::Gateway;

use super::*;
use crate::translate::Refused;

impl AddressPool {
    /// Parses `a.b.c.d/len` (len 8 to 30). The network address itself is not handed out.
    pub fn parse(cidr: &str) -> Result<AddressPool, String> {
        let (ip, len) = cidr.split_once('/').ok_or_else(|| format!("{cidr:?} is not a CIDR (a.b.c.d/len)"))?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| format!("{cidr:?}: {ip:?} is not an IPv4 address"))?;
        let len: u32 =
            len.parse().ok().filter(|l| (8..=30).contains(l)).ok_or_else(|| {
                format!("{cidr:?}: the prefix length must be 8 to 30 (a range of at least 4 addresses)")
            })?;
        let mask = u32::MAX << (32 - len);
        Ok(AddressPool { first: (u32::from(ip) & mask) + 1, size: (1u32 << (32 - len)) - 1 })
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => u32::from(v4).wrapping_sub(self.first) < self.size,
            IpAddr::V6(_) => false,
        }
    }

    fn nth(&self, n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(self.first + n % self.size))
    }
}

/// Addresses for the Gateways, oldest first: the one `spec.addresses` asks for, else the
/// one its status shows, else one picked by a hash of its name; each taken once.
pub(super) fn assign_addresses(gateways: &[&Gateway], pool: Option<AddressPool>) -> Vec<Result<IpAddr, Refused>> {
    let Some(pool) = pool else {
        return gateways
            .iter()
            .map(|_| {
                Err(Refused::new(
                    "AddressNotAssigned",
                    "this Wharf has no address range for Gateways (--gateway-addresses); the Gateway is not served"
                        .into(),
                ))
            })
            .collect();
    };
    let mut taken = HashSet::default();
    gateways
        .iter()
        .map(|g| {
            let requested: Vec<&str> = g
                .spec
                .addresses
                .iter()
                .flatten()
                .filter(|a| a.r#type.as_deref().unwrap_or("IPAddress") == "IPAddress")
                .filter_map(|a| a.value.as_deref())
                .collect();
            if let Some(want) = requested.first() {
                return match want.parse::<IpAddr>() {
                    Ok(ip) if pool.contains(ip) && taken.insert(ip) => Ok(ip),
                    Ok(ip) if pool.contains(ip) => {
                        Err(Refused::new("AddressNotUsable", format!("address {ip} is taken by an older Gateway")))
                    }
                    _ => Err(Refused::new(
                        "AddressNotUsable",
                        format!("address {want:?} is not in this Wharf's Gateway address range"),
                    )),
                };
            }
            let shown = g.status.as_ref().and_then(|s| s.addresses.as_ref()).and_then(|a| a.first());
            if let Some(ip) = shown.and_then(|a| a.value.parse::<IpAddr>().ok()).filter(|ip| pool.contains(*ip)) {
                if taken.insert(ip) {
                    return Ok(ip);
                }
            }
            let key = format!(
                "{}/{}",
                g.metadata.namespace.as_deref().unwrap_or(""),
                g.metadata.name.as_deref().unwrap_or("")
            );
            let start = fnv(&key);
            (0..pool.size.min(65_536))
                .map(|i| pool.nth(start.wrapping_add(i)))
                .find(|ip| taken.insert(*ip))
                .ok_or(Refused::new("AddressNotAssigned", "every address of the Gateway address range is taken".into()))
        })
        .collect()
}

/// FNV-1a, for a stable starting point in the address range.
pub(super) fn fnv(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_ranges_skip_the_network_address_and_wrap() {
        // 10.0.0.6/30 is 10.0.0.4 to 10.0.0.7.
        let p = AddressPool::parse("10.0.0.6/30").unwrap_or(AddressPool { first: 0, size: 1 });
        let ip = |s: &str| s.parse::<IpAddr>().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        assert!(!p.contains(ip("10.0.0.4")) && !p.contains(ip("10.0.0.8")) && !p.contains(ip("::1")));
        assert!(p.contains(ip("10.0.0.5")) && p.contains(ip("10.0.0.7")));
        let nth: Vec<IpAddr> = (0..4).map(|n| p.nth(n)).collect();
        assert_eq!(nth, [ip("10.0.0.5"), ip("10.0.0.6"), ip("10.0.0.7"), ip("10.0.0.5")]);
        let big = AddressPool::parse("127.1.0.0/16").unwrap_or(p);
        assert_eq!(
            (big.nth(0), big.nth(65_534), big.nth(65_535)),
            (ip("127.1.0.1"), ip("127.1.255.255"), ip("127.1.0.1"))
        );
        assert!(big.contains(ip("127.1.255.255")) && !big.contains(ip("127.2.0.0")));
    }

    #[test]
    fn the_address_hash_is_fnv_1a() {
        assert_eq!(fnv(""), 0x811c_9dc5);
        assert_eq!(fnv("a"), 0xe40c_292c);
        assert_eq!(fnv("foobar"), 0xbf9c_f968);
    }
}
