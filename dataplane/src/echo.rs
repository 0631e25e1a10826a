//! `wharf echo`: a small HTTP backend that answers with a JSON description of the request
//! and its own name. Used by the quickstart, tests and benchmarks.
//!
//! Query parameters shape the answer: `status=NNN`, `delay_ms=N`, `size=N` (pad the body to
//! N bytes). So do request headers, for a client that does not choose the URL (as when
//! the echo stands in for an authentication service): `x-echo-status: NNN`, and each
//! `x-echo-header: Name: value` adds that header to the answer. The request body is read to its end before the answer (which reports its
//! length as `body_bytes`), as an application would. A request with `Upgrade` gets `101`
//! and then every byte echoed back.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

/// Serves echo responses on `listener` forever, over HTTP/1.1 and h2c.
pub async fn serve(listener: TcpListener, name: String) {
    let name: Arc<str> = Arc::from(name);
    loop {
        let Ok((stream, remote)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let name = Arc::clone(&name);
        tokio::spawn(async move {
            let svc = service_fn(move |req| respond(Arc::clone(&name), remote, req));
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn query<'a>(uri: &'a http::Uri, key: &str) -> Option<&'a str> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then_some(v)
    })
}

async fn respond(
    name: Arc<str>,
    remote: SocketAddr,
    mut req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if let Some(ms) = query(req.uri(), "delay_ms").and_then(|v| v.parse::<u64>().ok()) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if req.headers().contains_key(header::UPGRADE) {
        let upgrade = req.headers()[header::UPGRADE].clone();
        let on = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            if let Ok(up) = on.await {
                let (mut r, mut w) = tokio::io::split(TokioIo::new(up));
                let _ = tokio::io::copy(&mut r, &mut w).await;
            }
        });
        let mut resp = Response::new(Full::new(Bytes::new()));
        *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        resp.headers_mut().insert(header::UPGRADE, upgrade);
        resp.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("upgrade"));
        return Ok(resp);
    }
    let (req, mut incoming) = req.into_parts();
    let mut body_bytes = 0u64;
    while let Some(Ok(frame)) = incoming.frame().await {
        body_bytes += frame.data_ref().map_or(0, |d| d.len() as u64);
    }
    let headers: serde_json::Map<String, serde_json::Value> = req
        .headers
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), serde_json::Value::from(String::from_utf8_lossy(v.as_bytes()))))
        .collect();
    let host = req
        .uri
        .authority()
        .map(|a| a.to_string())
        .or_else(|| req.headers.get(header::HOST).and_then(|h| h.to_str().ok()).map(str::to_owned));
    let mut body = serde_json::json!({
        "name": &*name,
        "method": req.method.as_str(),
        "path": req.uri.path(),
        "query": req.uri.query(),
        "host": host,
        "proto": format!("{:?}", req.version),
        "remote": remote.to_string(),
        "headers": headers,
        "body_bytes": body_bytes,
    })
    .to_string();
    if let Some(size) = query(&req.uri, "size").and_then(|v| v.parse::<usize>().ok()) {
        // Pad inside a JSON string so the body stays valid JSON.
        if size > body.len() + 12 {
            body.pop();
            let pad = size - body.len() - 10;
            body.push_str(",\"pad\":\"");
            body.extend(std::iter::repeat_n('x', pad));
            body.push_str("\"}");
        }
    }
    let status = query(&req.uri, "status")
        .or_else(|| req.headers.get("x-echo-status").and_then(|v| v.to_str().ok()))
        .and_then(|v| v.trim().parse::<u16>().ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    for asked in req.headers.get_all("x-echo-header").iter().filter_map(|v| v.to_str().ok()) {
        let Some((name, value)) = asked.split_once(':') else { continue };
        if let (Ok(n), Ok(v)) =
            (header::HeaderName::from_bytes(name.trim().as_bytes()), header::HeaderValue::from_str(value.trim()))
        {
            resp.headers_mut().append(n, v);
        }
    }
    if let Ok(v) = header::HeaderValue::from_str(&name) {
        resp.headers_mut().insert("x-echo-name", v);
    }
    Ok(resp)
}
