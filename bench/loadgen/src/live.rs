//! `live`: how long an object written to the API server takes to be served. Each write is
//! a POST of a new object with a host of its own, timed from just before the request is
//! sent until the proxy first answers 200 for that host. Both connections (to the API
//! server and to the proxy) are opened once, before the first write, so neither a client's
//! start-up nor a handshake is in the figure.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

#[derive(Debug)]
pub struct Target {
    /// The API server, as `https://IP:PORT`.
    pub api: String,
    /// The client certificate and key the API server knows (PEM files).
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    /// The collection the objects are POSTed to.
    pub path: String,
    /// The object's JSON, with `{name}` and `{host}` in place of its name and host.
    pub template: String,
    /// Objects are named `<prefix>-<k>` and served at `<prefix>-<k>.bench.local`.
    pub prefix: String,
    /// The proxy's plain HTTP listener.
    pub proxy: SocketAddr,
}

/// The `rank`-th smallest of `sorted` for percentile `p` (nearest rank: the ceil(p n)-th,
/// at least the first).
pub fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn api_addr(api: &str) -> Result<(SocketAddr, String)> {
    let rest = api.strip_prefix("https://").ok_or_else(|| anyhow!("--api must be https://IP:PORT, not {api}"))?;
    let authority = rest.trim_end_matches('/');
    let addr: SocketAddr = authority.parse().with_context(|| format!("--api must be https://IP:PORT, not {api}"))?;
    Ok((addr, authority.to_owned()))
}

async fn api_connection(t: &Target) -> Result<(SendRequest<Full<Bytes>>, String)> {
    let (addr, authority) = api_addr(&t.api)?;
    let leaf = wharf_dataplane::testing::Leaf {
        chain_pem: std::fs::read_to_string(&t.cert).with_context(|| format!("{}", t.cert.display()))?,
        key_pem: std::fs::read_to_string(&t.key).with_context(|| format!("{}", t.key.display()))?,
    };
    // The client is checked by the API server; the benchmark does not check the server.
    let cfg = wharf_dataplane::testing::inspecting_client_config_as(&[b"http/1.1"], Some(&leaf));
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let tls = tokio_rustls::TlsConnector::from(cfg).connect(ServerName::from(addr.ip()), tcp).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(conn);
    Ok((sender, authority))
}

async fn proxy_connection(addr: SocketAddr) -> Result<SendRequest<Empty<Bytes>>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// The status the proxy answers for `host`, over `sender` while it stays open.
async fn status_of(sender: &mut SendRequest<Empty<Bytes>>, host: &str) -> Result<u16> {
    sender.ready().await?;
    let req = http::Request::get("/").header("host", host).body(Empty::new())?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    resp.into_body().collect().await?;
    Ok(status)
}

/// Writes `count` objects, one every `pause` after the previous went live; returns for each
/// the milliseconds until served and until the API server answered.
pub async fn run(t: &Target, count: usize, pause: Duration) -> Result<Vec<(f64, f64)>> {
    let (mut api, authority) = api_connection(t).await?;
    let mut proxy = proxy_connection(t.proxy).await?;
    let mut times = Vec::with_capacity(count);
    for k in 1..=count {
        let name = format!("{}-{k}", t.prefix);
        let host = format!("{name}.bench.local");
        let body = t.template.replace("{name}", &name).replace("{host}", &host);
        let req = http::Request::post(&t.path)
            .header("host", &authority)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let t0 = Instant::now();
        api.ready().await?;
        let resp = api.send_request(req).await?;
        let answered = t0.elapsed();
        let status = resp.status();
        let text = resp.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            bail!("POST {} of {name}: {status}: {}", t.path, String::from_utf8_lossy(&text));
        }
        loop {
            match status_of(&mut proxy, &host).await {
                Ok(200) => break,
                Ok(_) => {}
                // The proxy closed the connection: open another and ask again.
                Err(_) => proxy = proxy_connection(t.proxy).await?,
            }
        }
        times.push((t0.elapsed().as_secs_f64() * 1000.0, answered.as_secs_f64() * 1000.0));
        tokio::time::sleep(pause).await;
    }
    Ok(times)
}

/// `p50 / p99` of the served times, then of the API server's answers, in milliseconds.
pub fn summary(times: &[(f64, f64)]) -> String {
    let mut served: Vec<f64> = times.iter().map(|t| t.0).collect();
    let mut answered: Vec<f64> = times.iter().map(|t| t.1).collect();
    served.sort_by(f64::total_cmp);
    answered.sort_by(f64::total_cmp);
    format!(
        "served_p50_ms={:.0} served_p99_ms={:.0} api_p50_ms={:.0} api_p99_ms={:.0}",
        nearest_rank(&served, 0.50),
        nearest_rank(&served, 0.99),
        nearest_rank(&answered, 0.50),
        nearest_rank(&answered, 0.99)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_takes_the_ceil_of_p_n_th_smallest() {
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&hundred, 0.50), 50.0);
        assert_eq!(nearest_rank(&hundred, 0.99), 99.0);
        let twenty: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(nearest_rank(&twenty, 0.50), 10.0);
        assert_eq!(nearest_rank(&twenty, 0.99), 20.0, "ceil(19.8) = 20");
        assert_eq!(nearest_rank(&[7.0], 0.0), 7.0, "at least the first");
        assert!(nearest_rank(&[], 0.5).is_nan());
    }

    #[test]
    fn the_api_server_is_an_https_ip_and_port() {
        let (addr, authority) = api_addr("https://127.0.0.1:6443").unwrap();
        assert_eq!((addr.port(), authority.as_str()), (6443, "127.0.0.1:6443"));
        assert!(api_addr("http://127.0.0.1:6443").is_err());
        assert!(api_addr("https://localhost:6443").is_err());
    }

    #[test]
    fn the_summary_gives_both_percentiles_of_both_times() {
        let times: Vec<(f64, f64)> = (1..=20).map(|i| (f64::from(i) * 2.0, f64::from(i))).collect();
        assert_eq!(summary(&times), "served_p50_ms=20 served_p99_ms=40 api_p50_ms=10 api_p99_ms=20");
    }
}
