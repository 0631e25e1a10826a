//! The PROXY protocol, versions 1 (text) and 2 (binary), as HAProxy specifies it: a load
//! balancer that forwards TCP connections sends, before the client's first byte, the
//! address of the client it accepted the connection from.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::io::{AsyncRead, AsyncReadExt};

/// A version 1 header is at most this long, CRLF included.
pub const MAX_V1: usize = 107;
/// The longest version 2 header accepted (addresses and TLVs; load balancers send a few
/// dozen bytes).
pub const MAX_V2: usize = 16 + 4096;

const V1_PREFIX: &[u8] = b"PROXY ";
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// A header, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The client's address; `None` when the balancer sent none (`UNKNOWN`, `LOCAL`,
    /// a UNIX socket): the connection's own peer stands.
    pub source: Option<SocketAddr>,
    /// The header's length: the client's bytes start here.
    pub len: usize,
}

/// Why a connection's PROXY protocol header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// More bytes are needed.
    #[error("the header is incomplete")]
    Incomplete,
    /// The connection starts with something else.
    #[error("the connection does not start with a PROXY protocol header")]
    Missing,
    /// A version 1 header that does not parse.
    #[error("malformed PROXY protocol v1 header: {0}")]
    V1(&'static str),
    /// A version 2 header that does not parse.
    #[error("malformed PROXY protocol v2 header: {0}")]
    V2(&'static str),
    /// The peer closed before the header ended.
    #[error("the connection closed before its PROXY protocol header ended")]
    Closed,
    /// Reading failed.
    #[error("reading the PROXY protocol header failed: {0}")]
    Io(String),
}

/// Parses the header at the start of `buf`.
pub fn parse(buf: &[u8]) -> Result<Header, Error> {
    let starts = |prefix: &[u8]| buf.len().min(prefix.len()) == common(buf, prefix);
    if starts(V2_SIGNATURE) {
        v2(buf)
    } else if starts(V1_PREFIX) {
        v1(buf)
    } else {
        Err(Error::Missing)
    }
}

/// How many leading bytes `a` and `b` share.
fn common(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn v1(buf: &[u8]) -> Result<Header, Error> {
    let window = &buf[..buf.len().min(MAX_V1)];
    let Some(end) = window.windows(2).position(|w| w == b"\r\n") else {
        return match buf.len() < MAX_V1 {
            true if !window.contains(&b'\n') => Err(Error::Incomplete),
            _ => Err(Error::V1("no CRLF within 107 bytes")),
        };
    };
    let line = std::str::from_utf8(&window[V1_PREFIX.len().min(end)..end]).map_err(|_| Error::V1("not ASCII"))?;
    let mut fields = line.split(' ');
    let family = fields.next().unwrap_or_default();
    let len = end + 2;
    if family == "UNKNOWN" {
        return Ok(Header { source: None, len });
    }
    let rest: Vec<&str> = fields.collect();
    let [src, _dst, sport, dport] = rest[..] else {
        return Err(Error::V1("expected PROXY TCP4|TCP6 SRC DST SRCPORT DSTPORT"));
    };
    let ip: IpAddr = match family {
        "TCP4" => src.parse::<Ipv4Addr>().map(IpAddr::V4).map_err(|_| Error::V1("bad TCP4 source address"))?,
        "TCP6" => src.parse::<Ipv6Addr>().map(IpAddr::V6).map_err(|_| Error::V1("bad TCP6 source address"))?,
        _ => return Err(Error::V1("unknown protocol family")),
    };
    let port = v1_port(sport)?;
    v1_port(dport)?;
    Ok(Header { source: Some(SocketAddr::new(ip, port)), len })
}

/// A port of a version 1 header: decimal digits only.
fn v1_port(s: &str) -> Result<u16, Error> {
    match s.bytes().all(|b| b.is_ascii_digit()) {
        true => s.parse().map_err(|_| Error::V1("bad port")),
        false => Err(Error::V1("bad port")),
    }
}

fn v2(buf: &[u8]) -> Result<Header, Error> {
    let Some(&[ver_cmd, family, hi, lo]) = buf.get(12..16) else {
        return Err(Error::Incomplete);
    };
    if ver_cmd >> 4 != 2 {
        return Err(Error::V2("version is not 2"));
    }
    let len = 16 + usize::from(u16::from_be_bytes([hi, lo]));
    if len > MAX_V2 {
        return Err(Error::V2("longer than this gateway accepts"));
    }
    let body = buf.get(16..len).ok_or(Error::Incomplete)?;
    let source = match (ver_cmd & 0x0f, family >> 4) {
        // LOCAL: the balancer's own connection (a health check).
        (0, _) => None,
        (1, 1) => {
            let a: [u8; 12] = body.get(..12).and_then(|b| b.try_into().ok()).ok_or(Error::V2("short IPv4 block"))?;
            let ip = Ipv4Addr::new(a[0], a[1], a[2], a[3]);
            Some(SocketAddr::new(ip.into(), u16::from_be_bytes([a[8], a[9]])))
        }
        (1, 2) => {
            let a: [u8; 36] = body.get(..36).and_then(|b| b.try_into().ok()).ok_or(Error::V2("short IPv6 block"))?;
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&a[..16]);
            Some(SocketAddr::new(Ipv6Addr::from(ip).into(), u16::from_be_bytes([a[32], a[33]])))
        }
        // UNSPEC and UNIX: no address to use.
        (1, 0 | 3) => None,
        (1, _) => return Err(Error::V2("unknown address family")),
        _ => return Err(Error::V2("unknown command")),
    };
    Ok(Header { source, len })
}

/// Reads a header from `stream` into `buf` (which may then hold the client's first bytes
/// too, from `Header::len` on).
pub async fn read<S: AsyncRead + Unpin>(stream: &mut S, buf: &mut Vec<u8>) -> Result<Header, Error> {
    loop {
        match parse(buf) {
            Err(Error::Incomplete) => {}
            done => return done,
        }
        match stream.read_buf(buf).await {
            Ok(0) => return Err(Error::Closed),
            Ok(_) => {}
            Err(e) => return Err(Error::Io(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2_header(ver_cmd: u8, family: u8, body: &[u8]) -> Vec<u8> {
        let mut h = V2_SIGNATURE.to_vec();
        h.extend_from_slice(&[ver_cmd, family]);
        h.extend_from_slice(&(body.len() as u16).to_be_bytes());
        h.extend_from_slice(body);
        h
    }

    fn v4_block() -> Vec<u8> {
        let mut b = vec![203, 0, 113, 7, 127, 0, 0, 1];
        b.extend_from_slice(&51234u16.to_be_bytes());
        b.extend_from_slice(&443u16.to_be_bytes());
        b
    }

    #[test]
    fn version_1_gives_the_source_and_where_the_client_starts() {
        let cases: &[(&str, Option<&str>)] = &[
            ("PROXY TCP4 203.0.113.7 127.0.0.1 51234 443\r\nGET /", Some("203.0.113.7:51234")),
            ("PROXY TCP6 2001:db8::7 ::1 65535 8443\r\n", Some("[2001:db8::7]:65535")),
            ("PROXY UNKNOWN\r\n", None),
            ("PROXY UNKNOWN ffff:f::1 ffff:f::2 1 2\r\n", None),
        ];
        for (input, want) in cases {
            let h = parse(input.as_bytes());
            let end = input.find("\r\n").map(|i| i + 2);
            assert_eq!(h.map(|h| (h.source.map(|s| s.to_string()), Some(h.len))), Ok((want.map(str::to_owned), end)));
        }
    }

    #[test]
    fn version_1_refuses_what_is_not_exactly_the_format() {
        for bad in [
            "PROXY TCP4 203.0.113.7 127.0.0.1 51234\r\n",
            "PROXY TCP4 203.0.113.7 127.0.0.1 51234 443 9\r\n",
            "PROXY TCP4 2001:db8::7 127.0.0.1 1 2\r\n",
            "PROXY TCP6 203.0.113.7 ::1 1 2\r\n",
            "PROXY TCP4 203.0.113.7 127.0.0.1 +80 443\r\n",
            "PROXY TCP4 203.0.113.7 127.0.0.1 80 +443\r\n",
            "PROXY TCP4 203.0.113.7 127.0.0.1 65536 443\r\n",
            "PROXY TCP4 203.0.113.7  127.0.0.1 80 443\r\n",
            "PROXY UDP4 203.0.113.7 127.0.0.1 80 443\r\n",
            "PROXY TCP4 203.0.113.7 127.0.0.1 80 443\n",
            "PROXY TCP4 203.0.113.\u{e9} 127.0.0.1 80 443\r\n",
        ] {
            assert!(matches!(parse(bad.as_bytes()), Err(Error::V1(_))), "{bad:?}: {:?}", parse(bad.as_bytes()));
        }
        let long = format!("PROXY UNKNOWN {}\r\n", "x".repeat(MAX_V1));
        assert_eq!(parse(long.as_bytes()), Err(Error::V1("no CRLF within 107 bytes")));
        // The longest header there can be is accepted.
        let max = "PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
        assert_eq!(max.len(), MAX_V1);
        assert_eq!(parse(max.as_bytes()).map(|h| h.len), Ok(MAX_V1));
    }

    #[test]
    fn version_2_gives_the_source_of_a_proxied_connection() {
        let v4 = v2_header(0x21, 0x11, &v4_block());
        let mut with_tlv = v4_block();
        with_tlv.extend_from_slice(&[0x04, 0x00, 0x03, b'a', b'b', b'c']);
        let tlv = v2_header(0x21, 0x11, &with_tlv);
        let mut v6 = [0u8; 36];
        v6[..16].copy_from_slice(&"2001:db8::7".parse::<Ipv6Addr>().map(|a| a.octets()).unwrap_or_default());
        v6[32..34].copy_from_slice(&40000u16.to_be_bytes());
        let v6 = v2_header(0x21, 0x21, &v6);
        for (h, want) in [(&v4, "203.0.113.7:51234"), (&tlv, "203.0.113.7:51234"), (&v6, "[2001:db8::7]:40000")] {
            let mut input = h.clone();
            input.extend_from_slice(b"\x16\x03\x01");
            assert_eq!(parse(&input), Ok(Header { source: want.parse().ok(), len: h.len() }));
        }
    }

    #[test]
    fn version_2_without_a_client_address_leaves_the_peer() {
        for (ver_cmd, family) in [(0x20, 0x11), (0x20, 0x00), (0x21, 0x00), (0x21, 0x31)] {
            let h = v2_header(ver_cmd, family, &v4_block());
            assert_eq!(parse(&h), Ok(Header { source: None, len: h.len() }), "{ver_cmd:#x} {family:#x}");
        }
    }

    #[test]
    fn version_2_refuses_bad_versions_commands_families_and_lengths() {
        let cases = [
            (v2_header(0x11, 0x11, &v4_block()), "version is not 2"),
            (v2_header(0x22, 0x11, &v4_block()), "unknown command"),
            (v2_header(0x21, 0x41, &v4_block()), "unknown address family"),
            (v2_header(0x21, 0x11, &v4_block()[..11]), "short IPv4 block"),
            (v2_header(0x21, 0x21, &[0; 35]), "short IPv6 block"),
            (v2_header(0x21, 0x11, &vec![0; MAX_V2 - 15]), "longer than this gateway accepts"),
        ];
        for (h, why) in cases {
            assert_eq!(parse(&h), Err(Error::V2(why)));
        }
        assert_eq!(parse(&v2_header(0x21, 0x11, &vec![0; MAX_V2 - 16])).map(|h| h.len), Ok(MAX_V2));
    }

    #[test]
    fn every_prefix_of_a_header_asks_for_more() {
        let v1 = b"PROXY TCP4 203.0.113.7 127.0.0.1 51234 443\r\n".to_vec();
        for h in [v1, v2_header(0x21, 0x11, &v4_block())] {
            for n in 0..h.len() {
                assert_eq!(parse(&h[..n]), Err(Error::Incomplete), "{:?}", &h[..n]);
            }
        }
    }

    #[test]
    fn limits_are_nginx_s_and_4_kib_of_addresses_and_tlvs() {
        // 107 bytes without a CRLF: a v1 header can be no longer, so it is refused, not awaited.
        let long = [&b"PROXY "[..], &[b'x'; 101]].concat();
        assert!(matches!(parse(&long), Err(Error::V1(_))), "{:?}", parse(&long));
        assert_eq!(parse(&long[..106]), Err(Error::Incomplete));
        // Version 2: 4096 bytes after the 16-byte head are taken, 4097 are not.
        assert!(parse(&v2_header(0x21, 0x11, &vec![0; 4096])).is_ok());
        assert!(parse(&v2_header(0x21, 0x11, &vec![0; 4097])).is_err());
    }

    #[test]
    fn anything_else_is_no_header() {
        for other in [&b"GET / HTTP/1.1\r\n"[..], b"\x16\x03\x01\x02\x00", b"PROXY\r\n", b"\r\n\r\n\0\r\nQUIX"] {
            assert_eq!(parse(other), Err(Error::Missing), "{other:?}");
        }
    }

    #[tokio::test]
    async fn a_header_split_across_reads_is_read_whole_and_the_rest_kept() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let sender = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for part in [&b"PROXY TCP4 203.0.11"[..], b"3.7 127.0.0.1 5 443\r", b"\nGET"] {
                client.write_all(part).await?;
                client.flush().await?;
                tokio::task::yield_now().await;
            }
            Ok::<_, std::io::Error>(client)
        });
        let mut buf = Vec::new();
        let h = read(&mut server, &mut buf).await.unwrap_or(Header { source: None, len: 0 });
        assert_eq!(h.source, "203.0.113.7:5".parse().ok());
        let client = sender.await.ok().and_then(Result::ok);
        drop(client);
        let mut rest = buf[h.len..].to_vec();
        server.read_to_end(&mut rest).await.ok();
        assert_eq!(rest, b"GET");
        let (client, mut server) = tokio::io::duplex(64);
        drop(client);
        assert_eq!(read(&mut server, &mut Vec::new()).await, Err(Error::Closed));
    }
}
