//! Request mirroring: a copy of a request, its body teed from the original as it streams,
//! sent to another upstream in the background. The mirror's answer is read and dropped;
//! the client only ever waits for, and gets, the forward's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::Request;
use http_body_util::BodyExt;

use crate::metrics::Metrics;
use crate::upstream::body::RequestBody;
use crate::upstream::{Conn, Dialer, Upstream};

/// Starts a copy of `req` (as it will be sent, before its URI takes an upstream's form)
/// for each mirror whose share takes it.
pub(super) fn start(
    mirrors: &[(Arc<Upstream>, u32)],
    req: &mut Request<RequestBody>,
    dialer: &Dialer,
    metrics: &Metrics,
    client: SocketAddr,
    timeouts: (Duration, Option<Duration>),
) {
    for (upstream, per_million) in mirrors {
        if *per_million < 1_000_000 && fastrand::u32(..1_000_000) >= *per_million {
            continue;
        }
        let body = req.body_mut().copy();
        let copy = super::forward::copy_head_with(req, body);
        let (upstream, dialer, metrics) = (Arc::clone(upstream), dialer.clone(), metrics.clone());
        tokio::spawn(async move {
            let result = send(&upstream, copy, &dialer, client, timeouts).await;
            metrics.mirror(result.is_ok());
            if let Err(why) = result {
                tracing::debug!(cluster = %upstream.id, error = why, "mirrored request failed");
            }
        });
    }
}

/// Sends the copy to one endpoint of `upstream` and reads the answer to its end.
async fn send(
    upstream: &Upstream,
    mut req: Request<RequestBody>,
    dialer: &Dialer,
    client: SocketAddr,
    (idle, limit): (Duration, Option<Duration>),
) -> Result<(), &'static str> {
    let i = upstream.pick(&[]).ok_or("no endpoints")?;
    let ep = &upstream.endpoints[i];
    let _in_flight = ep.start();
    let conn = ep.conn(dialer, client, idle).await.map_err(|e| e.reason())?;
    let host = req.headers().get(http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("").to_owned();
    super::set_upstream_uri(&mut req, upstream.protocol, &host);
    let exchange = async {
        match conn {
            Conn::H1(mut s) => {
                let resp = s.send_request(req).await.map_err(|_| "request failed")?;
                resp.into_body().collect().await.map_err(|_| "response body failed")?;
                ep.checkin(s);
            }
            Conn::H2(mut s) => {
                let resp = s.send_request(req).await.map_err(|_| "request failed")?;
                resp.into_body().collect().await.map_err(|_| "response body failed")?;
            }
        }
        Ok(())
    };
    match limit {
        Some(d) => tokio::time::timeout(d, exchange).await.map_err(|_| "timed out")?,
        None => exchange.await,
    }
}
