//! The mesh certificate from an Istio-CA-compatible gRPC endpoint. istiod cannot run
//! here, so the test plays the CA: real TLS, real HTTP/2, the gRPC framing and protobuf
//! messages of `istio.v1.auth.IstioCertificateService/CreateCertificate`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use wharf_dataplane::hbone::istio_ca::{wire, CaError, IstioCa};
use wharf_dataplane::hbone::{HboneClient, MeshIdentity};
use wharf_dataplane::testing::{eventually, TempDir, TestCa};
use wharf_dataplane::{drain, Gateway, ListenerAddrs, Metrics, Options};
use wharf_model::identity::uri_sans;
use wharf_model::{Hbone, Identity};

const TOKEN: &str = "projected-token-for-istio-ca";

type Body = StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

fn grpc(status: &str, message: Option<Vec<u8>>) -> hyper::Response<Body> {
    let mut frames = Vec::new();
    if let Some(m) = message {
        let mut data = vec![0u8];
        data.extend_from_slice(&(m.len() as u32).to_be_bytes());
        data.extend_from_slice(&m);
        frames.push(Ok(Frame::data(Bytes::from(data))));
    }
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", status.parse().unwrap());
    frames.push(Ok(Frame::trailers(trailers)));
    let mut r = hyper::Response::new(StreamBody::new(futures_util::stream::iter(frames)));
    r.headers_mut().insert("content-type", "application/grpc".parse().unwrap());
    r
}

/// What the fake CA signs with, and what it saw.
#[derive(Default)]
struct Fake {
    /// The CA signing CSRs now.
    signer: Mutex<Option<Arc<TestCa>>>,
    /// Sign for this URI SAN instead of the CSR's.
    issue_as: Mutex<Option<String>>,
    /// (path, URI SANs of the CSR, requested TTL) of each authorized request.
    seen: Mutex<Vec<(String, Vec<String>, u64)>>,
}

impl Fake {
    fn new(ca: &Arc<TestCa>) -> Arc<Fake> {
        let f = Fake::default();
        *f.signer.lock().unwrap() = Some(Arc::clone(ca));
        Arc::new(f)
    }

    fn answer(&self, path: String, token_ok: bool, mut body: Bytes) -> hyper::Response<Body> {
        if !token_ok {
            return grpc("16", None);
        }
        let Some(ca) = self.signer.lock().unwrap().clone() else { return grpc("14", None) };
        let _flag = body.get_u8();
        let len = body.get_u32() as usize;
        let Ok((csr, ttl)) = wire::request(&body[..len]) else { return grpc("3", None) };
        self.seen.lock().unwrap().push((path, TestCa::csr_uris(&csr), ttl));
        let leaf = match self.issue_as.lock().unwrap().clone() {
            Some(uri) => ca.sign_csr_as(&csr, &uri),
            None => ca.sign_csr(&csr),
        };
        match leaf {
            Ok(leaf) => grpc("0", Some(wire::response(&[leaf, ca.root_pem.clone()]))),
            Err(_) => grpc("3", None),
        }
    }
}

/// A CA on localhost serving TLS with a certificate of `ca`, answering as `fake` says;
/// returns its port.
async fn fake_istiod(ca: &TestCa, fake: Arc<Fake>) -> u16 {
    let serving = ca.leaf(&["localhost"]);
    let ck = wharf_model::tls::load(serving.chain_pem.as_bytes(), serving.key_pem.as_bytes(), 0).unwrap().certified_key;
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(ck)));
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let (acceptor, fake) = (acceptor.clone(), Arc::clone(&fake));
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else { return };
                let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                    let fake = Arc::clone(&fake);
                    async move {
                        let path = req.uri().path().to_owned();
                        let token_ok = req.headers().get("authorization").and_then(|v| v.to_str().ok())
                            == Some(&format!("Bearer {TOKEN}"));
                        let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        Ok::<_, Infallible>(fake.answer(path, token_ok, body))
                    }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    port
}

/// The token and root files, in a directory removed when the first value drops.
fn files(ca: &TestCa, token: &str) -> (TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = TempDir::new("istio-ca").unwrap();
    std::fs::write(dir.join("token"), token).unwrap();
    std::fs::write(dir.join("root.pem"), &ca.root_pem).unwrap();
    let (t, r) = (dir.join("token"), dir.join("root.pem"));
    (dir, t, r)
}

fn request(port: u16, token: std::path::PathBuf, roots: std::path::PathBuf) -> IstioCa {
    IstioCa {
        address: format!("https://localhost:{port}").parse().unwrap(),
        token,
        roots,
        identity: Identity::new("cluster.local", "wharf", "gateway"),
        ttl: Duration::from_secs(3600),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_from_the_ca_works_for_hbone() {
    let ca = Arc::new(TestCa::new("mesh root"));
    let fake = Fake::new(&ca);
    let port = fake_istiod(&ca, Arc::clone(&fake)).await;
    let (_dir, token, roots) = files(&ca, TOKEN);
    let certs = request(port, token, roots).issue("cluster.local").await.unwrap();
    assert_eq!(certs.identity.to_string(), "spiffe://cluster.local/ns/wharf/sa/gateway");
    // The request on the wire: Istio's method path, a CSR for our identity, our TTL.
    let seen = fake.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [(
            "/istio.v1.auth.IstioCertificateService/CreateCertificate".to_owned(),
            vec!["spiffe://cluster.local/ns/wharf/sa/gateway".to_owned()],
            3600
        )]
    );

    // The issued identity opens a tunnel to a peer of the same mesh.
    let peer = Arc::new(MeshIdentity::new("cluster.local"));
    peer.set(ca.mesh_certs("spiffe://cluster.local/ns/app/sa/backend", "cluster.local"));
    // The peer stands in for a ztunnel whose pods listen on loopback.
    let loopback = vec![wharf_model::IpNet::parse("127.0.0.1").unwrap()];
    let hbone =
        wharf_dataplane::hbone::inbound::InboundOptions { allowed_destinations: loopback, ..Default::default() };
    let gw = Gateway::new(Options { mesh: Some(peer), access_log: false, hbone, ..Options::default() }).unwrap();
    let bound = gw
        .bind(&ListenerAddrs { hbone: Some(SocketAddr::from(([127, 0, 0, 1], 0))), ..Default::default() })
        .await
        .unwrap();
    let hbone = bound.hbone_addr().unwrap();
    let (signal, watch) = drain::channel();
    tokio::spawn(bound.serve(gw, watch));
    let backend = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = backend.local_addr().unwrap();
    let mine = Arc::new(MeshIdentity::new("cluster.local"));
    mine.set(certs);
    let client = HboneClient::new(mine, Duration::from_secs(5), Metrics::new());
    let hb = Hbone {
        dial: hbone,
        identity: Identity::new("cluster.local", "app", "backend"),
        authority: target.to_string(),
    };
    let _tunnel = client.open(&hb, None).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(5), backend.accept()).await.is_ok(),
        "the tunnel reached the backend"
    );
    drop(signal);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_token_is_a_clear_error() {
    let ca = Arc::new(TestCa::new("mesh root"));
    let port = fake_istiod(&ca, Fake::new(&ca)).await;
    let (_dir, token, roots) = files(&ca, "not-the-token");
    let err = request(port, token, roots).issue("cluster.local").await.unwrap_err();
    assert!(matches!(err, CaError::Refused { ref status, .. } if status == "16"), "{err}");
    assert!(err.to_string().contains("istio-ca"), "{err}");
    // Nobody listening: unreachable, named.
    let (_dir, token, roots) = files(&ca, TOKEN);
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
    let err = request(dead, token, roots).issue("cluster.local").await.unwrap_err();
    assert!(matches!(err, CaError::Unreachable { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_supplies_the_identity_and_follows_a_root_rotation() {
    let (old, new) = (Arc::new(TestCa::new("old mesh root")), Arc::new(TestCa::new("new mesh root")));
    let fake = Fake::new(&old);
    let port = fake_istiod(&old, Arc::clone(&fake)).await;
    let (_dir, token, roots) = files(&old, TOKEN);
    let identity = Arc::new(MeshIdentity::new("cluster.local"));
    let metrics = Metrics::new();
    tokio::spawn(request(port, token, roots.clone()).run(Arc::clone(&identity), metrics.clone()));
    let loaded = |ca: &Arc<TestCa>| {
        let (id, ca) = (Arc::clone(&identity), Arc::clone(ca));
        eventually(Duration::from_secs(10), move || {
            let ok = issued_by(&id, &ca);
            async move { ok }
        })
    };
    assert!(loaded(&old).await, "no certificate");
    let certs = identity.load().unwrap();
    assert_eq!(uri_sans(certs.key.cert[0].as_ref()), ["spiffe://cluster.local/ns/wharf/sa/gateway"]);
    assert_eq!(certs.roots.len(), 1);
    assert!(
        metrics.render().contains("wharf_mesh_certificate_requests_total{result=\"ok\"} 1"),
        "{}",
        metrics.render()
    );

    // The CA moves to a new root; the root ConfigMap carries both while workloads move.
    *fake.signer.lock().unwrap() = Some(Arc::clone(&new));
    std::fs::write(&roots, format!("{}{}", old.root_pem, new.root_pem)).unwrap();
    assert!(loaded(&new).await, "no new certificate after the roots changed");
    assert_eq!(identity.load().unwrap().roots.len(), 2, "both roots trusted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_identity_or_from_an_untrusted_ca_is_refused() {
    let ca = Arc::new(TestCa::new("mesh root"));
    let fake = Fake::new(&ca);
    let port = fake_istiod(&ca, Arc::clone(&fake)).await;
    let (_dir, token, roots) = files(&ca, TOKEN);

    // The CA answers with a certificate for another service account.
    *fake.issue_as.lock().unwrap() = Some("spiffe://cluster.local/ns/wharf/sa/someone-else".into());
    let err = request(port, token.clone(), roots.clone()).issue("cluster.local").await.unwrap_err();
    assert_eq!(err.reason(), "invalid_certificate", "{err}");
    assert!(err.to_string().contains("sa/someone-else"), "{err}");

    // The CA signs with a root the mesh roots do not hold.
    *fake.issue_as.lock().unwrap() = None;
    *fake.signer.lock().unwrap() = Some(Arc::new(TestCa::new("rogue root")));
    let err = request(port, token, roots).issue("cluster.local").await.unwrap_err();
    assert_eq!(err.reason(), "invalid_certificate", "{err}");
    assert!(err.to_string().contains("does not chain to the mesh roots"), "{err}");
}

/// True when the chain a mesh identity presents was issued by `ca` (the fake CA sends
/// its root after the leaf, and the identity only loads chains that verify).
fn issued_by(identity: &MeshIdentity, ca: &TestCa) -> bool {
    use rustls::pki_types::pem::PemObject;
    let root = rustls::pki_types::CertificateDer::from_pem_slice(ca.root_pem.as_bytes()).unwrap();
    identity.load().is_some_and(|c| c.key.cert.get(1) == Some(&root))
}
