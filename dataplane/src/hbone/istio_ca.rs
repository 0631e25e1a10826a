//! The gateway's mesh certificate from the Istio CA: a CSR over gRPC
//! (`istio.v1.auth.IstioCertificateService/CreateCertificate`) authenticated with a
//! projected service-account token, renewed before expiry. The two messages involved are
//! small enough to encode by hand, which keeps protobuf and gRPC stacks out of the build.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use wharf_model::tls::unix_seconds;
use wharf_model::Identity;

use super::certs::{MeshCertError, MeshCerts, MeshIdentity};
use crate::metrics::Metrics;

const PATH: &str = "/istio.v1.auth.IstioCertificateService/CreateCertificate";

/// Where and how to ask the Istio CA.
#[derive(Debug, Clone)]
pub struct IstioCa {
    /// CA address, e.g. `https://istiod.istio-system.svc:15012`.
    pub address: Uri,
    /// Projected service-account token (audience `istio-ca`), read on every request.
    pub token: PathBuf,
    /// Mesh root certificates (PEM): verify istiod, and trust peers.
    pub roots: PathBuf,
    /// The identity to ask for.
    pub identity: Identity,
    /// Requested lifetime.
    pub ttl: Duration,
}

/// Why a certificate could not be obtained.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// A local file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The CA could not be reached.
    #[error("cannot reach the Istio CA at {address}: {message}")]
    Unreachable {
        /// The address.
        address: String,
        /// What failed.
        message: String,
    },
    /// The CA answered with an error.
    #[error("the Istio CA refused the CSR: grpc-status {status}: {message} (is the token's audience istio-ca, and may this service account get {identity}?)")]
    Refused {
        /// gRPC status code.
        status: String,
        /// gRPC message.
        message: String,
        /// The identity asked for.
        identity: String,
    },
    /// The answer was not a certificate chain.
    #[error("the Istio CA sent an unusable answer: {0}")]
    BadAnswer(String),
    /// Making the key or CSR failed.
    #[error("cannot make a key and CSR: {0}")]
    Csr(String),
    /// The issued certificate does not validate.
    #[error("{0}")]
    Cert(#[from] MeshCertError),
}

impl CaError {
    /// Short stable reason for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            CaError::Read { .. } => "read_failed",
            CaError::Unreachable { .. } => "unreachable",
            CaError::Refused { .. } => "refused",
            CaError::BadAnswer(_) => "bad_answer",
            CaError::Csr(_) => "csr_failed",
            CaError::Cert(_) => "invalid_certificate",
        }
    }
}

/// How long after `now`, when it was issued, a certificate valid until `not_after` is
/// renewed: after half of its remaining lifetime plus `jitter` (0..1) times a tenth of it,
/// so that replicas started together do not all ask at once (Istio's agents renew at half
/// the lifetime too). Counted from issuance, not from `notBefore`, which CAs backdate.
pub fn renew_after(now: i64, not_after: i64, jitter: f64) -> Duration {
    let left = (not_after - now).max(0) as f64;
    Duration::from_secs_f64(left * (0.5 + 0.1 * jitter.clamp(0.0, 1.0))).max(Duration::from_secs(1))
}

/// The wait before retry `attempt` (0-based) after a failure: 1 s doubling up to 60 s,
/// scaled by `jitter` (0..1) into its upper half.
pub fn backoff(attempt: u32, jitter: f64) -> Duration {
    let base = Duration::from_secs(1u64 << attempt.min(6)).min(Duration::from_secs(60));
    base.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// Size and modification time of a file (following symlinks, as Kubernetes ConfigMap
/// volumes swap them).
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    std::fs::metadata(path).ok().and_then(|m| Some((m.modified().ok()?, m.len())))
}

impl IstioCa {
    /// Asks for a certificate once and validates it: it must carry exactly the configured
    /// identity and chain to the mesh roots.
    pub async fn issue(&self, trust_domain: &str) -> Result<MeshCerts, CaError> {
        let read = |p: &PathBuf| std::fs::read(p).map_err(|source| CaError::Read { path: p.clone(), source });
        let token = String::from_utf8_lossy(&read(&self.token)?).trim().to_owned();
        let roots_pem = read(&self.roots)?;
        let key =
            rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| CaError::Csr(e.to_string()))?;
        let mut params =
            rcgen::CertificateParams::new(Vec::<String>::new()).map_err(|e| CaError::Csr(e.to_string()))?;
        let uri =
            rcgen::string::Ia5String::try_from(self.identity.to_string()).map_err(|e| CaError::Csr(e.to_string()))?;
        params.subject_alt_names = vec![rcgen::SanType::URI(uri)];
        let csr = params
            .serialize_request(&key)
            .map_err(|e| CaError::Csr(e.to_string()))?
            .pem()
            .map_err(|e| CaError::Csr(e.to_string()))?;

        let mut msg = BytesMut::new();
        put_string(&mut msg, 1, &csr);
        put_varint_field(&mut msg, 3, self.ttl.as_secs());
        let chain = self.call(&token, &roots_pem, msg.freeze()).await?;
        if chain.is_empty() {
            return Err(CaError::BadAnswer("empty certificate chain".into()));
        }
        let certs = MeshCerts::from_pem(
            chain.concat().as_bytes(),
            key.serialize_pem().as_bytes(),
            &roots_pem,
            trust_domain,
            unix_seconds(SystemTime::now()),
        )?;
        Ok(certs.expect_identity(&self.identity)?)
    }

    async fn call(&self, token: &str, roots_pem: &[u8], msg: Bytes) -> Result<Vec<String>, CaError> {
        let address = self.address.to_string();
        let unreachable = |message: String| CaError::Unreachable { address: address.clone(), message };
        let host = self.address.host().ok_or_else(|| unreachable("no host in the address".into()))?.to_owned();
        let port = self.address.port_u16().unwrap_or(15012);
        let mut roots = rustls::RootCertStore::empty();
        for der in rustls::pki_types::CertificateDer::pem_slice_iter(roots_pem).flatten() {
            let _ = roots.add(der);
        }
        let mut cfg =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| unreachable(e.to_string()))?
                .with_root_certificates(roots)
                .with_no_client_auth();
        cfg.alpn_protocols = vec![b"h2".to_vec()];
        let tcp = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect((host.as_str(), port)))
            .await
            .map_err(|_| unreachable("connect timed out".into()))?
            .map_err(|e| unreachable(e.to_string()))?;
        let name = ServerName::try_from(host.clone()).map_err(|e| unreachable(e.to_string()))?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(name, tcp)
            .await
            .map_err(|e| unreachable(format!("TLS: {e}")))?;
        let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        tokio::spawn(conn);
        let mut frame = BytesMut::with_capacity(5 + msg.len());
        frame.put_u8(0);
        frame.put_u32(msg.len() as u32);
        frame.put_slice(&msg);
        let req = Request::post(format!("https://{host}:{port}{PATH}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("authorization", format!("Bearer {token}"))
            .body(Full::new(frame.freeze()))
            .map_err(|e| unreachable(e.to_string()))?;
        let resp = tokio::time::timeout(Duration::from_secs(30), sender.send_request(req))
            .await
            .map_err(|_| unreachable("no answer in 30s".into()))?
            .map_err(|e| unreachable(e.to_string()))?;
        let grpc_status = |h: &http::HeaderMap| h.get("grpc-status").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let grpc_message =
            |h: &http::HeaderMap| h.get("grpc-message").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        let (parts, body) = resp.into_parts();
        if let Some(s) = grpc_status(&parts.headers).filter(|s| s != "0") {
            return Err(CaError::Refused {
                status: s,
                message: grpc_message(&parts.headers),
                identity: self.identity.to_string(),
            });
        }
        let collected = body.collect().await.map_err(|e| unreachable(e.to_string()))?;
        if let Some(t) = collected.trailers() {
            if let Some(s) = grpc_status(t).filter(|s| s != "0") {
                return Err(CaError::Refused {
                    status: s,
                    message: grpc_message(t),
                    identity: self.identity.to_string(),
                });
            }
        }
        let mut data = collected.to_bytes();
        if data.len() < 5 {
            return Err(CaError::BadAnswer(format!("HTTP {} with {} body bytes", parts.status, data.len())));
        }
        let _compressed = data.get_u8();
        let len = data.get_u32() as usize;
        if data.len() < len {
            return Err(CaError::BadAnswer("truncated gRPC message".into()));
        }
        decode_chain(&data[..len]).map_err(CaError::BadAnswer)
    }

    /// Keeps `identity` supplied: a certificate now, a new one after half of its lifetime
    /// (jittered), retries with backoff on failure (the current certificate keeps serving
    /// until it expires), and at once when the roots file changes (the mesh roots rotated).
    pub async fn run(self, identity: Arc<MeshIdentity>, metrics: Metrics) {
        let mut roots_seen = stamp(&self.roots);
        let mut attempt = 0u32;
        let mut next = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = changed(&self.roots, &mut roots_seen) => {
                    tracing::info!(roots = %self.roots.display(), "mesh roots changed; asking the Istio CA for a new certificate");
                    self.apply_roots(&identity);
                }
            }
            match self.issue(&identity.trust_domain).await {
                Ok(certs) => {
                    metrics.mesh_certificate_request("ok");
                    let wait = renew_after(unix_seconds(SystemTime::now()), certs.not_after, fastrand::f64());
                    identity.set(certs);
                    tracing::info!(renew_in = ?wait, "mesh certificate from the Istio CA");
                    attempt = 0;
                    next = tokio::time::Instant::now() + wait;
                }
                Err(e) => {
                    metrics.mesh_certificate_request(e.reason());
                    let wait = backoff(attempt, fastrand::f64());
                    attempt = attempt.saturating_add(1);
                    match identity.load() {
                        Some(c) => tracing::error!(
                            error = %e, reason = e.reason(), retry_in = ?wait, not_after = c.not_after,
                            "mesh certificate not renewed; the current one keeps serving"
                        ),
                        None => tracing::error!(
                            error = %e, reason = e.reason(), retry_in = ?wait,
                            "no mesh certificate yet: ambient backends cannot be reached and /healthz/ready fails"
                        ),
                    }
                    next = tokio::time::Instant::now() + wait;
                }
            }
        }
    }

    /// Puts new roots under the current certificate, so that peers of the new root are
    /// trusted even before the CA answers.
    fn apply_roots(&self, identity: &MeshIdentity) {
        let (Some(current), Ok(roots)) = (identity.load(), std::fs::read(&self.roots)) else { return };
        match current.with_roots(&roots, unix_seconds(SystemTime::now())) {
            Ok(certs) => identity.set(certs),
            Err(e) => tracing::warn!(error = %e, "the current mesh certificate does not fit the new roots"),
        }
    }
}

/// Resolves when the file's stamp differs from `seen` (checked every second).
async fn changed(path: &Path, seen: &mut Option<(SystemTime, u64)>) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = stamp(path);
        if now != *seen {
            *seen = now;
            return;
        }
    }
}

fn put_varint(buf: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

fn put_varint_field(buf: &mut BytesMut, field: u64, v: u64) {
    put_varint(buf, field << 3);
    put_varint(buf, v);
}

fn put_string(buf: &mut BytesMut, field: u64, s: &str) {
    put_varint(buf, (field << 3) | 2);
    put_varint(buf, s.len() as u64);
    buf.put_slice(s.as_bytes());
}

fn get_varint(buf: &mut &[u8]) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let Some((&b, rest)) = buf.split_first() else { return Err("truncated varint".into()) };
        *buf = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err("varint too long".into())
}

/// `IstioCertificateResponse { repeated string cert_chain = 1; }`
fn decode_chain(mut buf: &[u8]) -> Result<Vec<String>, String> {
    let mut chain = Vec::new();
    while !buf.is_empty() {
        let tag = get_varint(&mut buf)?;
        match tag & 7 {
            0 => {
                get_varint(&mut buf)?;
            }
            2 => {
                let len = usize::try_from(get_varint(&mut buf)?).map_err(|e| e.to_string())?;
                if buf.len() < len {
                    return Err("truncated field".into());
                }
                let (value, rest) = buf.split_at(len);
                buf = rest;
                if tag >> 3 == 1 {
                    chain.push(
                        String::from_utf8(value.to_vec()).map_err(|_| "certificate is not UTF-8 PEM".to_owned())?,
                    );
                }
            }
            1 => buf = buf.get(8..).ok_or("truncated fixed64")?,
            5 => buf = buf.get(4..).ok_or("truncated fixed32")?,
            w => return Err(format!("unknown wire type {w}")),
        }
    }
    Ok(chain)
}

/// Encoding helpers for tests that play the CA.
#[cfg(any(test, feature = "testing"))]
pub mod wire {
    use bytes::BytesMut;

    /// Encodes `IstioCertificateResponse`.
    pub fn response(chain: &[String]) -> Vec<u8> {
        let mut b = BytesMut::new();
        for c in chain {
            super::put_string(&mut b, 1, c);
        }
        b.to_vec()
    }

    /// Decodes `IstioCertificateRequest`: (csr, validity seconds).
    pub fn request(mut buf: &[u8]) -> Result<(String, u64), String> {
        let (mut csr, mut ttl) = (String::new(), 0);
        while !buf.is_empty() {
            let tag = super::get_varint(&mut buf)?;
            match (tag >> 3, tag & 7) {
                (_, 0) => {
                    let v = super::get_varint(&mut buf)?;
                    if tag >> 3 == 3 {
                        ttl = v;
                    }
                }
                (field, 2) => {
                    let len = super::get_varint(&mut buf)? as usize;
                    let (value, rest) = buf.split_at(len.min(buf.len()));
                    buf = rest;
                    if field == 1 {
                        csr = String::from_utf8_lossy(value).into_owned();
                    }
                }
                (_, w) => return Err(format!("unexpected wire type {w}")),
            }
        }
        Ok((csr, ttl))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_after_half_the_lifetime_within_a_tenth_of_jitter() {
        let s = Duration::from_secs;
        assert_eq!(renew_after(1_000, 87_400, 0.0), s(43_200));
        assert_eq!(renew_after(1_000, 87_400, 1.0), s(43_200 + 8_640));
        assert_eq!(renew_after(1_000, 87_400, 7.0), s(43_200 + 8_640), "jitter is clamped");
        assert_eq!(renew_after(1_000, 1_020, 0.0), s(10));
        assert_eq!(renew_after(500, 400, 0.5), s(1), "an expired certificate is renewed after a second");
    }

    #[test]
    fn backoff_doubles_to_a_minute() {
        let full: Vec<u64> = (0..9).map(|a| backoff(a, 1.0).as_secs()).collect();
        assert_eq!(full, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(backoff(3, 0.0), Duration::from_secs(4), "jitter keeps at least half");
        assert_eq!(backoff(u32::MAX, 1.0), Duration::from_secs(60));
    }

    #[test]
    fn reasons_are_stable() {
        let cases = [
            (CaError::Read { path: "t".into(), source: std::io::ErrorKind::NotFound.into() }, "read_failed"),
            (CaError::Unreachable { address: "a".into(), message: "m".into() }, "unreachable"),
            (CaError::Refused { status: "16".into(), message: "m".into(), identity: "i".into() }, "refused"),
            (CaError::BadAnswer("b".into()), "bad_answer"),
            (CaError::Csr("c".into()), "csr_failed"),
            (CaError::Cert(MeshCertError::NoRoots), "invalid_certificate"),
        ];
        for (e, r) in cases {
            assert_eq!(e.reason(), r, "{e}");
        }
    }

    /// The bytes istio/api's `security/v1alpha1/ca.proto` defines:
    /// `IstioCertificateRequest { string csr = 1; int64 validity_duration = 3; }` and
    /// `IstioCertificateResponse { repeated string cert_chain = 1; }`.
    #[test]
    fn wire_format_matches_istio_ca_proto() {
        let mut req = BytesMut::new();
        put_string(&mut req, 1, "csr");
        put_varint_field(&mut req, 3, 86_400);
        assert_eq!(&req[..], [0x0a, 0x03, b'c', b's', b'r', 0x18, 0x80, 0xa3, 0x05]);
        // Two chain entries, and an unknown field (a later proto version) skipped.
        let resp = [0x0a, 0x01, b'A', 0x10, 0x07, 0x0a, 0x02, b'B', b'C'];
        assert_eq!(decode_chain(&resp), Ok(vec!["A".to_owned(), "BC".to_owned()]));
    }

    #[test]
    fn varints_and_chains_round_trip() {
        let chain = vec!["-----BEGIN CERTIFICATE-----\nA\n".to_owned(), "x".repeat(300)];
        assert_eq!(decode_chain(&wire::response(&chain)), Ok(chain));
        let mut b = BytesMut::new();
        put_string(&mut b, 1, "csr");
        put_varint_field(&mut b, 3, 86_400);
        assert_eq!(wire::request(&b), Ok(("csr".to_owned(), 86_400)));
        assert!(decode_chain(&[0x0a, 0x05, b'a']).is_err(), "truncated field");
        assert!(decode_chain(&[0xff; 11]).is_err(), "endless varint");
    }
}
