//! The mesh certificate from an Istio-CA-compatible gRPC endpoint. istiod cannot run
//! here, so the test plays the CA: real TLS, real HTTP/2, the gRPC framing and protobuf
//! messages of `istio.v1.auth.IstioCertificateService/CreateCertificate`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use wharf_dataplane::hbone::istio_ca::{wire, CaError, IstioCa};
use wharf_dataplane::hbone::{HboneClient, MeshIdentity};
use wharf_dataplane::testing::TestCa;
use wharf_dataplane::{drain, Gateway, ListenerAddrs, Metrics, Options};
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

/// A CA on localhost signing CSRs with `ca`; returns its port.
async fn fake_istiod(ca: Arc<TestCa>) -> u16 {
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
        loop {
            let (s, _) = l.accept().await.unwrap();
            let (acceptor, ca) = (acceptor.clone(), Arc::clone(&ca));
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else { return };
                let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                    let ca = Arc::clone(&ca);
                    async move {
                        assert_eq!(req.uri().path(), "/istio.v1.auth.IstioCertificateService/CreateCertificate");
                        let authorized = req.headers().get("authorization").and_then(|v| v.to_str().ok())
                            == Some(&format!("Bearer {TOKEN}"));
                        let mut body = req.into_body().collect().await.unwrap().to_bytes();
                        if !authorized {
                            return Ok::<_, Infallible>(grpc("16", None));
                        }
                        let _flag = body.get_u8();
                        let len = body.get_u32() as usize;
                        let (csr, ttl) = wire::request(&body[..len]).unwrap();
                        assert_eq!(ttl, 3600);
                        assert_eq!(TestCa::csr_uris(&csr), ["spiffe://cluster.local/ns/wharf/sa/gateway"]);
                        let leaf = ca.sign_csr(&csr).unwrap();
                        Ok(grpc("0", Some(wire::response(&[leaf, ca.root_pem.clone()]))))
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

fn files(ca: &TestCa, token: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("wharf-istio-ca-{}-{}", std::process::id(), fastrand_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("token"), token).unwrap();
    std::fs::write(dir.join("root.pem"), &ca.root_pem).unwrap();
    (dir.join("token"), dir.join("root.pem"))
}

fn fastrand_suffix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
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
    let port = fake_istiod(Arc::clone(&ca)).await;
    let (token, roots) = files(&ca, TOKEN);
    let certs = request(port, token, roots).issue("cluster.local").await.unwrap();
    assert_eq!(certs.identity.to_string(), "spiffe://cluster.local/ns/wharf/sa/gateway");

    // The issued identity opens a tunnel to a peer of the same mesh.
    let peer = Arc::new(MeshIdentity::new("cluster.local"));
    peer.set(ca.mesh_certs("spiffe://cluster.local/ns/app/sa/backend", "cluster.local"));
    let gw = Gateway::new(Options { mesh: Some(peer), access_log: false, ..Options::default() }).unwrap();
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
    let port = fake_istiod(Arc::clone(&ca)).await;
    let (token, roots) = files(&ca, "not-the-token");
    let err = request(port, token, roots).issue("cluster.local").await.unwrap_err();
    assert!(matches!(err, CaError::Refused { ref status, .. } if status == "16"), "{err}");
    assert!(err.to_string().contains("istio-ca"), "{err}");
    // Nobody listening: unreachable, named.
    let (token, roots) = files(&ca, TOKEN);
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
    let err = request(dead, token, roots).issue("cluster.local").await.unwrap_err();
    assert!(matches!(err, CaError::Unreachable { .. }), "{err}");
}
