//! Shared pieces of the data-plane tests: a gateway on loopback, echo backends, and real
//! TLS/HTTP clients.
#![allow(dead_code, unused_imports)]

use std::collections::BTreeMap;
use std::net::SocketAddr;

use tokio::net::TcpListener;
use wharf_dataplane::drain::{self, Signal};
pub use wharf_dataplane::testing::{eventually, http_get, http_request, http_request_with_body, https_get, Seen};
use wharf_dataplane::{Bound, Gateway, ListenerAddrs, Options, Timeouts};
use wharf_model::{AppProtocol, Cluster, Endpoint, Host, ObjectRef, PathMatch, Route, Snapshot, VirtualHost};

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
    start_with_options(Options { timeouts, https_redirect_port: 8443, access_log: false, ..Options::default() }).await
}

pub async fn start_with_options(opts: Options) -> Running {
    let gw = Gateway::new(opts).unwrap();
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
    Running {
        http: bound.http_addr().unwrap(),
        https: bound.https_addr().unwrap(),
        passthrough: bound.passthrough_addr().unwrap(),
        tcp: bound.tcp_addrs()[0],
        admin: bound.admin_addr().unwrap(),
        gw: gw.clone(),
        drain: Some(signal),
        done: tokio::spawn(bound.serve(gw, watch)),
    }
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
    Cluster { protocol: AppProtocol::Http1, endpoints: addrs.iter().map(|a| Endpoint::direct(*a)).collect(), tls: None }
}

pub fn route(path: PathMatch, cluster: &str, redirect: bool) -> Route {
    Route { https_redirect: redirect, ..Route::forward(path, cluster, src(cluster)) }
}

/// A snapshot with one virtual host per (host, routes) and the given clusters.
pub fn snapshot(hosts: Vec<(Host, Vec<Route>)>, clusters: Vec<(&str, Cluster)>) -> Snapshot {
    Snapshot {
        virtual_hosts: hosts.into_iter().map(|(host, routes)| VirtualHost { host, routes }.into()).collect(),
        clusters: clusters.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        ..Default::default()
    }
}

pub fn host(h: &str) -> Host {
    Host::parse(h).unwrap()
}

/// GET on the admin port.
pub async fn admin_get(r: &Running, path: &str) -> Seen {
    http_get(r.admin, "admin", path).await.unwrap()
}

/// A TCP server echoing every byte until the client half-closes, then closing.
pub async fn tcp_echo() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    addr
}
