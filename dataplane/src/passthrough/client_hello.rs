//! A pure parser for the SNI of a TLS ClientHello, fed the bytes read so far.

use std::borrow::Cow;

/// Why no SNI could be read (yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// More bytes are needed.
    #[error("incomplete ClientHello")]
    Incomplete,
    /// The bytes are not a TLS handshake.
    #[error("not a TLS ClientHello: {0}")]
    NotTls(&'static str),
}

/// Largest ClientHello accepted (post-quantum key shares make them a few KiB).
pub const MAX_CLIENT_HELLO: usize = 64 * 1024;

/// The server name a ClientHello asks for (lower-case): `Ok(None)` when it carries none.
pub fn parse_sni(buf: &[u8]) -> Result<Option<String>, ParseError> {
    let hello = handshake_message(buf)?;
    let Some((start, end)) = sni_range(&hello)? else {
        return Ok(None);
    };
    let name = &hello[start..end];
    if !name.iter().all(|b| b.is_ascii_graphic()) {
        return Err(ParseError::NotTls("server name is not printable ASCII"));
    }
    Ok(Some(name.iter().map(|b| char::from(b.to_ascii_lowercase())).collect()))
}

/// The handshake message (type, length, body), reassembled from records if needed.
fn handshake_message(buf: &[u8]) -> Result<Cow<'_, [u8]>, ParseError> {
    let mut pos = 0;
    let mut joined: Vec<u8> = Vec::new();
    loop {
        let header = buf.get(pos..pos + 5).ok_or(ParseError::Incomplete)?;
        if header[0] != 22 {
            return Err(ParseError::NotTls("record is not a handshake"));
        }
        if header[1] != 3 {
            return Err(ParseError::NotTls("unknown record version"));
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > 16384 + 2048 {
            return Err(ParseError::NotTls("bad record length"));
        }
        let fragment = buf.get(pos + 5..pos + 5 + len).ok_or(ParseError::Incomplete)?;
        let single = pos == 0;
        pos += 5 + len;
        if !single {
            joined.extend_from_slice(fragment);
        }
        let msg: &[u8] = if single { fragment } else { &joined };
        if msg.len() < 4 {
            if single {
                joined.extend_from_slice(fragment);
            }
            continue;
        }
        if msg[0] != 1 {
            return Err(ParseError::NotTls("handshake is not a ClientHello"));
        }
        let need = 4 + ((usize::from(msg[1]) << 16) | (usize::from(msg[2]) << 8) | usize::from(msg[3]));
        if need > MAX_CLIENT_HELLO {
            return Err(ParseError::NotTls("ClientHello too large"));
        }
        if msg.len() >= need {
            if single {
                return Ok(Cow::Borrowed(&fragment[..need]));
            }
            joined.truncate(need);
            return Ok(Cow::Owned(joined));
        }
        if single {
            joined.extend_from_slice(fragment);
        }
    }
}

/// Byte range of the host_name inside the handshake message, if any.
fn sni_range(msg: &[u8]) -> Result<Option<(usize, usize)>, ParseError> {
    let bad = ParseError::NotTls("malformed ClientHello");
    let mut r = Reader { buf: msg, pos: 4 };
    r.skip(2 + 32).ok_or(bad)?; // legacy_version, random
    let n = r.u8().ok_or(bad)?;
    r.skip(n.into()).ok_or(bad)?; // session id
    let n = r.u16().ok_or(bad)?;
    r.skip(n.into()).ok_or(bad)?; // cipher suites
    let n = r.u8().ok_or(bad)?;
    r.skip(n.into()).ok_or(bad)?; // compression methods
    if r.pos == msg.len() {
        return Ok(None); // no extensions
    }
    let ext_len = usize::from(r.u16().ok_or(bad)?);
    let end = r.pos + ext_len;
    if end > msg.len() {
        return Err(bad);
    }
    while r.pos + 4 <= end {
        let ty = r.u16().ok_or(bad)?;
        let len = usize::from(r.u16().ok_or(bad)?);
        if r.pos + len > end {
            return Err(bad);
        }
        if ty != 0 {
            r.pos += len;
            continue;
        }
        let list_end = r.pos + len;
        let list_len = usize::from(r.u16().ok_or(bad)?);
        if r.pos + list_len > list_end {
            return Err(bad);
        }
        while r.pos + 3 <= list_end {
            let name_type = r.u8().ok_or(bad)?;
            let name_len = usize::from(r.u16().ok_or(bad)?);
            let start = r.pos;
            if start + name_len > list_end {
                return Err(bad);
            }
            if name_type == 0 {
                if name_len == 0 {
                    return Err(bad);
                }
                return Ok(Some((start, start + name_len)));
            }
            r.pos += name_len;
        }
        return Ok(None);
    }
    Ok(None)
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn skip(&mut self, n: usize) -> Option<()> {
        (self.pos + n <= self.buf.len()).then(|| self.pos += n)
    }
    fn u8(&mut self) -> Option<u8> {
        let v = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(v)
    }
    fn u16(&mut self) -> Option<u16> {
        let b = self.buf.get(self.pos..self.pos + 2)?;
        self.pos += 2;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A real ClientHello from rustls for `name`.
    fn client_hello(name: &str) -> Vec<u8> {
        let roots = rustls::RootCertStore::empty();
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut conn = rustls::ClientConnection::new(Arc::new(cfg), name.to_owned().try_into().unwrap()).unwrap();
        let mut out = Vec::new();
        conn.write_tls(&mut out).unwrap();
        out
    }

    #[test]
    fn reads_sni_from_real_client_hello() {
        let hello = client_hello("db.example.com");
        assert_eq!(parse_sni(&hello), Ok(Some("db.example.com".to_owned())));
        for cut in [0, 3, 5, 40, hello.len() - 1] {
            assert_eq!(parse_sni(&hello[..cut]), Err(ParseError::Incomplete), "cut at {cut}");
        }
    }

    #[test]
    fn ip_address_client_sends_no_sni() {
        let hello = client_hello("127.0.0.1");
        assert_eq!(parse_sni(&hello), Ok(None));
    }

    #[test]
    fn client_hello_split_over_two_records() {
        let hello = client_hello("split.example.com");
        let body = &hello[5..];
        let (a, b) = body.split_at(body.len() - 10);
        let mut two = Vec::new();
        for part in [a, b] {
            two.extend_from_slice(&[22, 3, 1]);
            two.extend_from_slice(&(part.len() as u16).to_be_bytes());
            two.extend_from_slice(part);
        }
        assert_eq!(parse_sni(&two[..two.len() - 1]), Err(ParseError::Incomplete));
        assert_eq!(parse_sni(&two), Ok(Some("split.example.com".to_owned())));
    }

    #[test]
    fn rejects_plain_http_and_garbage() {
        assert!(matches!(parse_sni(b"GET / HTTP/1.1\r\n\r\n"), Err(ParseError::NotTls(_))));
        assert!(matches!(parse_sni(&[22, 3, 1, 0, 4, 2, 0, 0, 0]), Err(ParseError::NotTls(_))));
        assert!(matches!(parse_sni(&[22, 3, 1, 0, 6, 1, 0, 0, 2, 3, 3]), Err(ParseError::NotTls(_))));
    }

    /// A ClientHello body: version, random, no session id, one cipher suite, null
    /// compression, then `exts` (type, data), or no extensions block at all for `None`.
    fn body(exts: Option<&[(u16, Vec<u8>)]>) -> Vec<u8> {
        let mut b = vec![3, 3];
        b.extend([7u8; 32]);
        b.extend([0, 0, 2, 0x13, 0x01, 1, 0]);
        if let Some(exts) = exts {
            let mut e = Vec::new();
            for (ty, data) in exts {
                e.extend(ty.to_be_bytes());
                e.extend((data.len() as u16).to_be_bytes());
                e.extend(data);
            }
            b.extend((e.len() as u16).to_be_bytes());
            b.extend(e);
        }
        b
    }

    /// The handshake message (type 1, 24-bit length) around `body`.
    fn handshake(body: &[u8]) -> Vec<u8> {
        let mut m = vec![1];
        m.extend(&(body.len() as u32).to_be_bytes()[1..]);
        m.extend(body);
        m
    }

    /// Handshake records carrying `msg`, cut at `cuts`.
    fn records(msg: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut from = 0;
        for to in cuts.iter().copied().chain([msg.len()]) {
            out.extend([22, 3, 1]);
            out.extend(((to - from) as u16).to_be_bytes());
            out.extend(&msg[from..to]);
            from = to;
        }
        out
    }

    /// A server_name extension with these (name type, name) entries.
    fn sni(entries: &[(u8, &[u8])]) -> Vec<u8> {
        let mut list = Vec::new();
        for (ty, name) in entries {
            list.push(*ty);
            list.extend((name.len() as u16).to_be_bytes());
            list.extend(*name);
        }
        let mut e = (list.len() as u16).to_be_bytes().to_vec();
        e.extend(list);
        e
    }

    fn parse(exts: Option<&[(u16, Vec<u8>)]>) -> Result<Option<String>, ParseError> {
        parse_sni(&records(&handshake(&body(exts)), &[]))
    }

    #[test]
    fn server_names_among_other_extensions_and_entries() {
        let name = |n: &str| Ok(Some(n.to_owned()));
        assert_eq!(parse(Some(&[(0, sni(&[(0, b"A.Example.com")]))])), name("a.example.com"));
        assert_eq!(parse(Some(&[(10, vec![0, 2, 0, 29]), (0, sni(&[(0, b"b.example.com")]))])), name("b.example.com"));
        assert_eq!(parse(Some(&[(0, sni(&[(1, b"xyz"), (0, b"c.example.com")]))])), name("c.example.com"));
        assert_eq!(parse(None), Ok(None), "no extensions block");
        assert_eq!(parse(Some(&[])), Ok(None), "an empty extensions block");
        assert_eq!(parse(Some(&[(10, vec![0, 2, 0, 29])])), Ok(None), "no server_name extension");
        assert_eq!(parse(Some(&[(0, sni(&[]))])), Ok(None), "an empty name list");
        assert_eq!(parse(Some(&[(0, sni(&[(1, b"xyz")]))])), Ok(None), "no host_name entry");
    }

    #[test]
    fn lengths_that_overrun_their_container_are_malformed() {
        let bad = Err(ParseError::NotTls("malformed ClientHello"));
        assert_eq!(parse(Some(&[(0, sni(&[(0, b"")]))])), bad, "an empty host name");
        // The name list says one byte more than the extension holds.
        let mut list = sni(&[(0, b"a.example.com")]);
        list[1] += 1;
        assert_eq!(parse(Some(&[(0, list)])), bad);
        // The name says one byte more than the list holds.
        let mut name = sni(&[(0, b"a.example.com")]);
        name[4] += 1;
        assert_eq!(parse(Some(&[(0, name)])), bad);
        // An extension says one byte more than the extensions block holds.
        let mut b = body(Some(&[(10, vec![0, 2, 0, 29])]));
        let at = b.len() - 5;
        b[at] += 1;
        assert_eq!(parse_sni(&records(&handshake(&b), &[])), bad);
        // The extensions block says one byte more than the message holds.
        let mut b = body(Some(&[(0, sni(&[(0, b"a.example.com")]))]));
        let at = b.len() - (13 + 2 + 1 + 2 + 2 + 2) - 1; // the low byte of the block's length
        b[at] += 1;
        assert_eq!(parse_sni(&records(&handshake(&b), &[])), bad);
        // Cut inside the fixed fields.
        for keep in [10, 34, 35, 36, 38, 39] {
            assert_eq!(parse_sni(&records(&handshake(&body(None)[..keep]), &[])), bad, "cut at {keep}");
        }
    }

    #[test]
    fn handshakes_over_several_records_and_record_limits() {
        let msg = handshake(&body(Some(&[(0, sni(&[(0, b"split.example.com")]))])));
        let want = Ok(Some("split.example.com".to_owned()));
        for cuts in [&[1][..], &[3], &[4], &[2, 3, 50]] {
            assert_eq!(parse_sni(&records(&msg, cuts)), want, "cut at {cuts:?}");
            let all = records(&msg, cuts);
            assert_eq!(
                parse_sni(&all[..all.len() - 1]),
                Err(ParseError::Incomplete),
                "cut at {cuts:?}, one byte short"
            );
        }
        // What follows the ClientHello (in its record or the next) is not read.
        let mut more = records(&msg, &[]);
        more.extend([23, 3, 3, 0, 1, 0]);
        assert_eq!(parse_sni(&more), want);
        let mut joined = msg.clone();
        joined.extend([0xff; 3]);
        let two = records(&joined, &[10]);
        assert_eq!(parse_sni(&two), want);
        // A later record of another type.
        let mut mixed = records(&msg[..10], &[]);
        mixed.extend([23, 3, 3, 0, 1, 0]);
        assert_eq!(parse_sni(&mixed), Err(ParseError::NotTls("record is not a handshake")));

        let header = |len: u16| {
            let mut h = vec![22, 3, 1];
            h.extend(len.to_be_bytes());
            h
        };
        assert_eq!(parse_sni(&header(0)), Err(ParseError::NotTls("bad record length")));
        assert_eq!(parse_sni(&header(16384 + 2048)), Err(ParseError::Incomplete), "the largest record allowed");
        assert_eq!(parse_sni(&header(16384 + 2049)), Err(ParseError::NotTls("bad record length")));
        assert_eq!(parse_sni(&[22, 2, 1, 0, 5]), Err(ParseError::NotTls("unknown record version")));
    }

    #[test]
    fn client_hellos_up_to_64_kib_are_waited_for() {
        let claim = |len: usize| {
            let mut m = vec![1];
            m.extend(&(len as u32).to_be_bytes()[1..]);
            m.extend([3, 3]);
            records(&m, &[])
        };
        assert_eq!(parse_sni(&claim(MAX_CLIENT_HELLO - 4)), Err(ParseError::Incomplete));
        assert_eq!(parse_sni(&claim(MAX_CLIENT_HELLO - 3)), Err(ParseError::NotTls("ClientHello too large")));
        // Every byte of the 24-bit length counts.
        for len in [1 << 16, 1 << 20, (1 << 24) - 1] {
            assert_eq!(parse_sni(&claim(len)), Err(ParseError::NotTls("ClientHello too large")), "{len}");
        }
        assert_eq!(MAX_CLIENT_HELLO, 65536);
    }

    /// A stable stand-in for the fuzz target: seeded mutations of real ClientHellos must
    /// never panic, and whatever name comes out is printable lower-case ASCII.
    #[test]
    fn mutation_smoke() {
        let mut rng = fastrand::Rng::with_seed(0x5ec7_0de5);
        let seeds = [
            client_hello("a.example.com"),
            client_hello("outbound_.80_._.x.y.svc.cluster.local"),
            client_hello("127.0.0.1"),
        ];
        for i in 0..20_000 {
            let mut buf = seeds[i % seeds.len()].clone();
            for _ in 0..rng.usize(1..8) {
                match rng.u8(..4) {
                    0 => {
                        let at = rng.usize(..buf.len());
                        buf[at] = rng.u8(..);
                    }
                    1 => buf.truncate(rng.usize(..=buf.len())),
                    2 => {
                        let at = rng.usize(..=buf.len());
                        buf.insert(at, rng.u8(..));
                    }
                    _ => {
                        let at = rng.usize(..buf.len().max(1));
                        buf.splice(at..at, std::iter::repeat_n(0xff, rng.usize(..64)));
                    }
                }
                if buf.is_empty() {
                    break;
                }
            }
            if let Ok(Some(name)) = parse_sni(&buf) {
                assert!(name.bytes().all(|b| b.is_ascii_graphic() && !b.is_ascii_uppercase()), "{name:?}");
            }
        }
    }
}
