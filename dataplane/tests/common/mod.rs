//! Shared pieces of the data-plane tests: a gateway on loopback, echo backends, and real
//! TLS/HTTP clients.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use wharf_dataplane::drain::{self, Signal};
use wharf_dataplane::{Bound, Gateway, ListenerAddrs, Options, Timeouts};
use wharf_model::{
    AppProtocol, Cluster, Endpoint, Host, ObjectRef, PathMatch, Route, Snapshot, VirtualHost,
};

pub struct Running {
    pub gw: Gateway,
    pub http: SocketAddr,
    pub https: SocketAddr,
    pub passthrough: SocketAddr,
    pub tcp: SocketAddr,
    pub admin: SocketAddr,
    pub drain: Option<Signal>,
    pub done: tokio::task::JoinHandle<()>,
}

pub fn loopback() -> Option<SocketAddr> {
    Some(SocketAddr::from(([127, 0, 0, 1], 0)))
}

pub async fn start_with(timeouts: Timeouts) -> Running {
    let gw = Gateway::new(Options {
        timeouts,
        https_redirect_port: 8443,
        access_log: false,
    })
    .unwrap();
    let addrs = ListenerAddrs {
        http: loopback(),
        https: loopback(),
        passthrough: loopback(),
        tcp: vec![(SocketAddr::from(([127, 0, 0, 1], 0)), 31400)],
        admin: loopback(),
        ..Default::default()
    };
    let bound: Bound = gw.bind(&addrs).await.unwrap();
    let (signal, watch) = drain::channel();
    let r = Running {
        http: bound.http_addr().unwrap(),
        https: bound.https_addr().unwrap(),
        passthrough: bound.passthrough_addr().unwrap(),
        tcp: bound.tcp_addrs()[0],
        admin: bound.admin_addr().unwrap(),
        gw: gw.clone(),
        drain: Some(signal),
        done: tokio::spawn(bound.serve(gw, watch)),
    };
    r
}

pub async fn start() -> Running {
    start_with(Timeouts::default()).await
}

/// An echo backend answering with its name.
pub async fn echo(name: &str) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(wharf_dataplane::echo::serve(l, name.to_owned()));
    addr
}

/// An address nothing listens on.
pub async fn dead_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    drop(l);
    a
}

pub fn src(name: &str) -> ObjectRef {
    ObjectRef::new("Ingress", "test", name)
}

pub fn cluster(addrs: &[SocketAddr]) -> Cluster {
    Cluster {
        protocol: AppProtocol::Http1,
        endpoints: addrs.iter().map(|a| Endpoint { addr: *a }).collect(),
    }
}

pub fn route(path: PathMatch, cluster: &str, redirect: bool) -> Route {
    Route {
        path,
        cluster: cluster.into(),
        source: src(cluster),
        https_redirect: redirect,
    }
}

/// A snapshot with one virtual host per (host, routes) and the given clusters.
pub fn snapshot(hosts: Vec<(Host, Vec<Route>)>, clusters: Vec<(&str, Cluster)>) -> Snapshot {
    Snapshot {
        virtual_hosts: hosts
            .into_iter()
            .map(|(host, routes)| VirtualHost { host, routes })
            .collect(),
        clusters: clusters
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect::<BTreeMap<_, _>>(),
        ..Default::default()
    }
}

pub fn host(h: &str) -> Host {
    Host::parse(h).unwrap()
}

/// What a client saw.
#[derive(Debug)]
pub struct Seen {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
    pub peer_cert: Option<CertificateDer<'static>>,
    pub alpn: Option<Vec<u8>>,
}

impl Seen {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
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
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = match sni {
        Some(s) => ServerName::try_from(s.to_owned()).map_err(|e| e.to_string())?,
        None => ServerName::IpAddress(addr.ip().into()),
    };
    let tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (_, conn) = tls.get_ref();
    let peer_cert = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.clone().into_owned());
    let alpn = conn.alpn_protocol().map(|a| a.to_vec());
    let mut seen = request(
        TokioIo::new(tls),
        alpn.as_deref() == Some(b"h2"),
        host,
        path,
        "https",
    )
    .await?;
    seen.peer_cert = peer_cert;
    seen.alpn = alpn;
    Ok(seen)
}

/// Plain HTTP/1.1 GET.
pub async fn http_get(addr: SocketAddr, host: &str, path: &str) -> Result<Seen, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    request(TokioIo::new(tcp), false, host, path, "http").await
}

async fn request<I>(io: I, h2: bool, host: &str, path: &str, scheme: &str) -> Result<Seen, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let resp = if h2 {
        let (mut s, c) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(c);
        let req = http::Request::get(format!("{scheme}://{host}{path}"))
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        s.send_request(req).await.map_err(|e| e.to_string())?
    } else {
        let (mut s, c) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(c);
        let req = http::Request::get(path)
            .header("host", host)
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        s.send_request(req).await.map_err(|e| e.to_string())?
    };
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

/// Polls `f` until it returns true or `within` passes.
pub async fn eventually<F, Fut>(within: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if f().await {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// GET on the admin port.
pub async fn admin_get(r: &Running, path: &str) -> Seen {
    http_get(r.admin, "admin", path).await.unwrap()
}
