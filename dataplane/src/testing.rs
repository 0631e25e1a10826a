//! Helpers for tests: a test CA issuing real certificates, and client configs trusting it.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::CertificateDer;

/// A certificate authority for tests.
#[derive(Debug)]
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA's certificate, PEM; for an [`TestCa::intermediate`], followed by its
    /// issuer's chain.
    pub root_pem: String,
    root_der: CertificateDer<'static>,
}

/// A leaf certificate and its key, PEM.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// Leaf then the CA.
    pub chain_pem: String,
    /// PKCS#8 private key.
    pub key_pem: String,
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new("Wharf Test CA")
    }
}

impl TestCa {
    /// A new CA with an ECDSA P-256 key.
    ///
    /// # Panics
    /// If rcgen cannot make a certificate (a broken build, not a test condition).
    #[allow(clippy::expect_used)]
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let cert = params.self_signed(&key).expect("CA cert");
        TestCa { root_pem: cert.pem(), root_der: cert.der().clone(), issuer: Issuer::new(params, key) }
    }

    /// A CA that this one signs: its leaves' chains are leaf, this intermediate, then this
    /// CA's chain.
    ///
    /// # Panics
    /// If rcgen cannot make a certificate.
    #[allow(clippy::expect_used)]
    pub fn intermediate(&self, name: &str) -> TestCa {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("intermediate key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("intermediate params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let cert = params.signed_by(&key, &self.issuer).expect("intermediate cert");
        TestCa {
            root_pem: format!("{}{}", cert.pem(), self.root_pem),
            root_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate for `names` (the first is also the CN).
    ///
    /// # Panics
    /// If rcgen cannot make a certificate.
    #[allow(clippy::expect_used)]
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("leaf key");
        let mut params =
            CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).expect("leaf params");
        if let Some(cn) = names.first() {
            params.distinguished_name.push(DnType::CommonName, *cn);
        }
        let cert = params.signed_by(&key, &self.issuer).expect("leaf cert");
        Leaf { chain_pem: format!("{}{}", cert.pem(), self.root_pem), key_pem: key.serialize_pem() }
    }

    /// A mesh workload certificate: URI SAN `spiffe_id` only, server and client usage.
    ///
    /// # Panics
    /// If rcgen cannot make a certificate.
    #[allow(clippy::expect_used)]
    pub fn workload(&self, spiffe_id: &str) -> Leaf {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("workload key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("workload params");
        params.subject_alt_names =
            vec![rcgen::SanType::URI(rcgen::string::Ia5String::try_from(spiffe_id).expect("ASCII URI"))];
        params.extended_key_usages =
            vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth, rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.issuer).expect("workload cert");
        Leaf { chain_pem: format!("{}{}", cert.pem(), self.root_pem), key_pem: key.serialize_pem() }
    }

    /// The gateway-side mesh identity for `spiffe_id`, trusting this CA as the mesh root.
    ///
    /// # Panics
    /// If the certificate does not validate.
    #[allow(clippy::expect_used)]
    pub fn mesh_certs(&self, spiffe_id: &str, trust_domain: &str) -> crate::hbone::MeshCerts {
        let leaf = self.workload(spiffe_id);
        crate::hbone::MeshCerts::from_pem(
            leaf.chain_pem.as_bytes(),
            leaf.key_pem.as_bytes(),
            self.root_pem.as_bytes(),
            trust_domain,
            wharf_model::tls::unix_seconds(std::time::SystemTime::now()),
        )
        .expect("valid mesh certificate")
    }

    /// Signs a PEM CSR as a mesh CA would: the CSR's subject alternative names, server and
    /// client usage. Returns the leaf PEM.
    ///
    /// # Errors
    /// If the CSR does not parse.
    pub fn sign_csr(&self, csr_pem: &str) -> Result<String, String> {
        let mut csr = rcgen::CertificateSigningRequestParams::from_pem(csr_pem).map_err(|e| e.to_string())?;
        csr.params.extended_key_usages =
            vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth, rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        Ok(csr.signed_by(&self.issuer).map_err(|e| e.to_string())?.pem())
    }

    /// Signs a PEM CSR's key for `uri` instead of the names it asks for (a CA that
    /// answers with another identity).
    ///
    /// # Errors
    /// If the CSR does not parse or `uri` is not ASCII.
    pub fn sign_csr_as(&self, csr_pem: &str, uri: &str) -> Result<String, String> {
        let mut csr = rcgen::CertificateSigningRequestParams::from_pem(csr_pem).map_err(|e| e.to_string())?;
        csr.params.subject_alt_names =
            vec![rcgen::SanType::URI(rcgen::string::Ia5String::try_from(uri).map_err(|e| e.to_string())?)];
        csr.params.extended_key_usages =
            vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth, rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        Ok(csr.signed_by(&self.issuer).map_err(|e| e.to_string())?.pem())
    }

    /// The URI SANs a PEM CSR asks for.
    pub fn csr_uris(csr_pem: &str) -> Vec<String> {
        rcgen::CertificateSigningRequestParams::from_pem(csr_pem)
            .map(|c| {
                c.params
                    .subject_alt_names
                    .iter()
                    .filter_map(|s| match s {
                        rcgen::SanType::URI(u) => Some(u.as_str().to_owned()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A rustls client config trusting this CA, offering `alpn`.
    ///
    /// # Panics
    /// If the CA certificate is refused by rustls.
    #[allow(clippy::expect_used)]
    pub fn client_config(&self, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.root_der.clone()).expect("root");
        let mut cfg =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
        cfg.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
        Arc::new(cfg)
    }
}

impl Leaf {
    /// The snapshot form of this certificate, validated.
    ///
    /// # Panics
    /// If the certificate does not validate.
    #[allow(clippy::expect_used)]
    pub fn certificate(&self) -> wharf_model::Certificate {
        wharf_model::Certificate::from_pem(self.chain_pem.as_bytes(), self.key_pem.as_bytes(), 0).expect("valid leaf")
    }
}

/// A client config that accepts any server certificate, so a test can look at which
/// certificate it was given (SNI selection, fallback certificate).
///
/// # Panics
/// If rustls refuses the protocol versions (a broken build).
#[allow(clippy::expect_used)]
pub fn inspecting_client_config(alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    inspecting_client_config_as(alpn, None)
}

/// [`inspecting_client_config`] presenting `client` as its client certificate.
///
/// # Panics
/// If the certificate or key does not parse.
#[allow(clippy::expect_used)]
pub fn inspecting_client_config_as(alpn: &[&[u8]], client: Option<&Leaf>) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)));
    let mut cfg = match client {
        None => builder.with_no_client_auth(),
        Some(leaf) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(leaf.chain_pem.as_bytes())
                .collect::<Result<_, _>>()
                .expect("client chain");
            let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).expect("client key");
            builder.with_client_auth_cert(chain, key).expect("client certificate")
        }
    };
    cfg.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    Arc::new(cfg)
}

/// A TLS 1.2 client that trusts any server certificate and resumes by session ID only (no
/// tickets), so that only the server's session cache can resume its sessions.
///
/// # Panics
/// If rustls refuses TLS 1.2 with its default provider.
#[allow(clippy::expect_used)]
pub fn tls12_session_id_client_config(alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS12])
        .expect("TLS 1.2")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
        .with_no_client_auth();
    cfg.resumption =
        rustls::client::Resumption::default().tls12_resumption(rustls::client::Tls12Resumption::SessionIdOnly);
    cfg.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    Arc::new(cfg)
}

#[derive(Debug)]
struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

impl Leaf {
    /// The leaf certificate, DER (what a client receives first).
    ///
    /// # Panics
    /// If the PEM does not parse.
    #[allow(clippy::expect_used)]
    pub fn leaf_der(&self) -> CertificateDer<'static> {
        use rustls::pki_types::pem::PemObject;
        CertificateDer::pem_slice_iter(self.chain_pem.as_bytes()).next().expect("a certificate").expect("valid PEM")
    }
}

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// What a client saw.
#[derive(Debug)]
pub struct Seen {
    /// Status code.
    pub status: u16,
    /// Response headers.
    pub headers: http::HeaderMap,
    /// Body, lossily decoded.
    pub body: String,
    /// The server's leaf certificate (TLS only).
    pub peer_cert: Option<CertificateDer<'static>>,
    /// Negotiated ALPN (TLS only).
    pub alpn: Option<Vec<u8>>,
}

impl Seen {
    /// The body as JSON (Null if it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
    /// The `name` an echo backend put in its answer.
    pub fn echo_name(&self) -> String {
        self.json()["name"].as_str().unwrap_or("").to_owned()
    }
}

/// TLS to `addr` with `sni` (None: no SNI, an IP name), then one GET.
pub async fn https_get(
    addr: SocketAddr,
    sni: Option<&str>,
    cfg: Arc<rustls::ClientConfig>,
    host: &str,
    path: &str,
) -> Result<Seen, String> {
    https_get_after(b"", addr, sni, cfg, host, path).await
}

/// [`https_get`] on a connection whose first bytes are `preamble` (a PROXY protocol
/// header, as a load balancer sends it).
pub async fn https_get_after(
    preamble: &[u8],
    addr: SocketAddr,
    sni: Option<&str>,
    cfg: Arc<rustls::ClientConfig>,
    host: &str,
    path: &str,
) -> Result<Seen, String> {
    let mut tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    tcp.write_all(preamble).await.map_err(|e| e.to_string())?;
    let name = match sni {
        Some(s) => ServerName::try_from(s.to_owned()).map_err(|e| e.to_string())?,
        None => ServerName::IpAddress(addr.ip().into()),
    };
    let tls = tokio_rustls::TlsConnector::from(cfg).connect(name, tcp).await.map_err(|e| e.to_string())?;
    let (_, conn) = tls.get_ref();
    let peer_cert = conn.peer_certificates().and_then(|c| c.first()).map(|c| c.clone().into_owned());
    let alpn = conn.alpn_protocol().map(|a| a.to_vec());
    let mut seen = request(TokioIo::new(tls), alpn.as_deref() == Some(b"h2"), host, path, "https").await?;
    seen.peer_cert = peer_cert;
    seen.alpn = alpn;
    Ok(seen)
}

/// Plain HTTP/1.1 GET with extra `headers` on a connection from the local address `from`
/// whose first bytes are `preamble` (a PROXY protocol header), given up after 10 s.
pub async fn http_get_after(
    from: std::net::IpAddr,
    preamble: &[u8],
    addr: SocketAddr,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Seen, String> {
    let get = async {
        let socket = match from {
            std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        }
        .map_err(|e| e.to_string())?;
        socket.bind(SocketAddr::new(from, 0)).map_err(|e| format!("bind {from}: {e}"))?;
        let mut tcp = socket.connect(addr).await.map_err(|e| e.to_string())?;
        tcp.write_all(preamble).await.map_err(|e| e.to_string())?;
        let (mut s, c) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.map_err(|e| e.to_string())?;
        tokio::spawn(c);
        let mut req = http::Request::builder().uri(path).header("host", host);
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        let req = req.body(Empty::<Bytes>::new()).map_err(|e| e.to_string())?;
        seen(s.send_request(req).await.map_err(|e| e.to_string())?).await
    };
    tokio::time::timeout(Duration::from_secs(10), get)
        .await
        .map_err(|_| format!("GET {path} from {from} to {addr}: no answer in 10s"))?
}

/// Plain HTTP/1.1 GET, given up after 10 s (a hung server fails the call, not the suite).
pub async fn http_get(addr: SocketAddr, host: &str, path: &str) -> Result<Seen, String> {
    let get = async {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        request(TokioIo::new(tcp), false, host, path, "http").await
    };
    tokio::time::timeout(Duration::from_secs(10), get)
        .await
        .map_err(|_| format!("GET {path} from {addr}: no answer in 10s"))?
}

/// Plain HTTP/1.1 GET from the local address `from` (any of 127.0.0.0/8 reaches a
/// loopback listener), given up after 10 s.
pub async fn http_get_from(from: std::net::IpAddr, addr: SocketAddr, host: &str, path: &str) -> Result<Seen, String> {
    http_get_after(from, b"", addr, host, path, &[]).await
}

/// Plain HTTP/1.1 request with `method` and extra `headers`, given up after 10 s.
pub async fn http_request(
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Seen, String> {
    send_http1(addr, method, host, path, headers, Empty::<Bytes>::new()).await
}

/// [`http_request`] with a body.
pub async fn http_request_with_body(
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Seen, String> {
    send_http1(addr, method, host, path, headers, http_body_util::Full::new(Bytes::copy_from_slice(body))).await
}

/// [`http_request`] with a body sent in the parts `parts` yields, as they come (chunked).
pub async fn http_request_streaming(
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    parts: tokio::sync::mpsc::Receiver<Bytes>,
) -> Result<Seen, String> {
    send_http1(addr, method, host, path, &[], Streamed(parts)).await
}

/// A request body of the parts a channel yields.
struct Streamed(tokio::sync::mpsc::Receiver<Bytes>);

impl http_body::Body for Streamed {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|part| part.map(|b| Ok(http_body::Frame::data(b))))
    }
}

async fn send_http1<B>(
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: B,
) -> Result<Seen, String>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let send = async {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let (mut s, c) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.map_err(|e| e.to_string())?;
        tokio::spawn(c);
        let mut req = http::Request::builder().method(method).uri(path).header("host", host);
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        let req = req.body(body).map_err(|e| e.to_string())?;
        seen(s.send_request(req).await.map_err(|e| e.to_string())?).await
    };
    tokio::time::timeout(Duration::from_secs(10), send)
        .await
        .map_err(|_| format!("{method} {path} from {addr}: no answer in 10s"))?
}

async fn request<I>(io: I, h2: bool, host: &str, path: &str, scheme: &str) -> Result<Seen, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let resp = if h2 {
        let (mut s, c) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await.map_err(|e| e.to_string())?;
        tokio::spawn(c);
        let req = http::Request::get(format!("{scheme}://{host}{path}"))
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        s.send_request(req).await.map_err(|e| e.to_string())?
    } else {
        let (mut s, c) = hyper::client::conn::http1::handshake(io).await.map_err(|e| e.to_string())?;
        tokio::spawn(c);
        let req =
            http::Request::get(path).header("host", host).body(Empty::<Bytes>::new()).map_err(|e| e.to_string())?;
        s.send_request(req).await.map_err(|e| e.to_string())?
    };
    seen(resp).await
}

async fn seen(resp: http::Response<hyper::body::Incoming>) -> Result<Seen, String> {
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok(Seen {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
        peer_cert: None,
        alpn: None,
    })
}

/// Polls `f` until it returns true or `within` passes. An attempt still running at the
/// deadline counts as false, so one hung attempt cannot hang the caller.
pub async fn eventually<F, Fut>(within: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if tokio::time::timeout_at(deadline, f()).await == Ok(true) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads a request's head (up to its blank line, at most 16 KiB) from `s`; `None` when
/// the peer closes first or the head is longer.
pub async fn read_request_head(s: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 16 * 1024];
    let mut n = 0;
    while !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
        if n == buf.len() {
            return None;
        }
        match s.read(&mut buf[n..]).await {
            Ok(0) | Err(_) => return None,
            Ok(k) => n += k,
        }
    }
    buf.truncate(n);
    Some(buf)
}

/// A backend on `listener` that answers every request with `200 held`, but holds
/// requests for `/hold` until `release` fires, telling `arrived` once it has one: a
/// request known to be in flight at the backend.
pub fn holding_backend(
    listener: tokio::net::TcpListener,
) -> (tokio::sync::mpsc::Receiver<()>, tokio::sync::oneshot::Sender<()>) {
    use tokio::io::AsyncWriteExt;
    let (arrived_tx, arrived) = tokio::sync::mpsc::channel(1);
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let released = Arc::new(tokio::sync::Mutex::new(Some(released)));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let (arrived_tx, released) = (arrived_tx.clone(), Arc::clone(&released));
            tokio::spawn(async move {
                let Some(head) = read_request_head(&mut s).await else { return };
                if head.starts_with(b"GET /hold") {
                    let _ = arrived_tx.send(()).await;
                    let waiting = released.lock().await.take();
                    if let Some(r) = waiting {
                        let _ = r.await;
                    }
                }
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\nheld").await;
            });
        }
    });
    (arrived, release)
}

/// A fresh directory under the system temp dir, removed with everything in it when
/// dropped.
#[derive(Debug)]
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    /// Creates `wharf-<name>-<pid>-<n>`, unique within the process.
    pub fn new(name: &str) -> std::io::Result<TempDir> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("wharf-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
}

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for TempDir {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loopback port free now, below the kernel's ephemeral range (32768–60999 by default),
/// where every outgoing connection takes its local port: a port found free here stays free
/// until the process it is meant for binds it (one the kernel hands out for `:0` can be
/// taken by a client connection first). Never the same port twice in one process; the
/// process id spreads processes over the range.
pub fn free_port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    loop {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = 20_000 + (std::process::id().wrapping_mul(7_919).wrapping_add(n) % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}
