//! `wharf-loadgen idle`: the memory a proxy holds per idle client connection.
//!
//! Each connection makes a full TLS handshake, sends one GET and reads the whole response
//! (as a browser does before it goes quiet), then stays open with nothing in flight. The
//! proxy's VmRSS is read before the first connection and again once all of them are idle;
//! the growth divided by the connection count is the figure.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

/// Where and how to connect.
pub struct Target {
    pub addr: SocketAddr,
    pub sni: String,
    pub path: String,
    pub h2: bool,
    pub cfg: Arc<rustls::ClientConfig>,
}

/// An open, idle connection: its sender keeps it alive (the connection task runs until
/// the sender is dropped).
enum Held {
    H1(http1::SendRequest<Empty<Bytes>>),
    H2(http2::SendRequest<Empty<Bytes>>),
}

impl Held {
    /// False once the proxy has closed the connection.
    fn is_open(&self) -> bool {
        match self {
            Held::H1(s) => !s.is_closed(),
            Held::H2(s) => !s.is_closed(),
        }
    }
}

/// Opens `connections` connections, `concurrency` at a time, and prints the RSS growth of
/// process `pid` per connection.
pub async fn run(target: Target, connections: usize, concurrency: usize, pid: u32, settle: Duration) -> Result<()> {
    let before = rss_kib(pid)?;
    let target = Arc::new(target);
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (target, next) = (Arc::clone(&target), Arc::clone(&next));
        workers.push(tokio::spawn(async move {
            let (mut held, mut failed) = (Vec::new(), 0u64);
            while next.fetch_add(1, Ordering::Relaxed) < connections {
                match open(&target).await {
                    Ok(h) => held.push(h),
                    Err(_) => failed += 1,
                }
            }
            (held, failed)
        }));
    }
    let (mut held, mut failed) = (Vec::with_capacity(connections), 0);
    for w in workers {
        let (h, f) = w.await?;
        held.extend(h);
        failed += f;
    }
    tokio::time::sleep(settle).await;
    let after = rss_kib(pid)?;
    // A connection the proxy closed while idle holds nothing: it fails the measurement.
    failed += held.iter().filter(|h| !h.is_open()).count() as u64;
    let per = after.saturating_sub(before) as f64 / held.len().max(1) as f64;
    println!(
        "connections={} rss_before_kib={before} rss_after_kib={after} per_conn_kib={per:.1} failed={failed}",
        held.len()
    );
    drop(held);
    Ok(())
}

async fn open(t: &Target) -> Result<Held> {
    let tcp = TcpStream::connect(t.addr).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from(t.sni.clone())?;
    let tls = TokioIo::new(tokio_rustls::TlsConnector::from(Arc::clone(&t.cfg)).connect(name, tcp).await?);
    if t.h2 {
        let (mut sender, conn) = http2::handshake(TokioExecutor::new(), tls).await?;
        tokio::spawn(conn);
        // HTTP/2 takes :authority from the URI.
        let req = http::Request::get(format!("https://{}{}", t.sni, t.path)).body(Empty::new())?;
        sender.ready().await?;
        check(sender.send_request(req).await?).await?;
        Ok(Held::H2(sender))
    } else {
        let (mut sender, conn) = http1::handshake(tls).await?;
        tokio::spawn(conn);
        let req = http::Request::get(&t.path).header("host", &t.sni).body(Empty::new())?;
        sender.ready().await?;
        check(sender.send_request(req).await?).await?;
        Ok(Held::H1(sender))
    }
}

async fn check(resp: http::Response<hyper::body::Incoming>) -> Result<()> {
    let ok = resp.status().is_success();
    resp.into_body().collect().await?;
    anyhow::ensure!(ok, "non-2xx response");
    Ok(())
}

/// VmRSS of a process, in KiB.
fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).with_context(|| format!("process {pid}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no VmRSS for process {pid}"))
}
