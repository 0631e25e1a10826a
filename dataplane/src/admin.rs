//! The admin listener: readiness, Prometheus metrics, and the live config (keys redacted).

use std::sync::Arc;

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::drain::Watch;
use crate::Shared;

/// Serves admin requests until draining starts.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, mut drain: Watch) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = drain.signaled() => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let s = Arc::clone(&shared);
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let s = Arc::clone(&s);
                async move { Ok::<_, std::convert::Infallible>(respond(&s, &req)) }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

fn respond(shared: &Shared, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let cfg = shared.config.load();
    let (status, ctype, body) = match req.uri().path() {
        "/healthz/ready" if cfg.version > 0 => {
            (StatusCode::OK, "text/plain", format!("ready: config version {}\n", cfg.version))
        }
        "/healthz/ready" => {
            (StatusCode::SERVICE_UNAVAILABLE, "text/plain", "not ready: no config applied yet\n".to_owned())
        }
        "/healthz/live" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        "/metrics" => (StatusCode::OK, "text/plain; version=0.0.4", shared.metrics.render()),
        "/debug/config" => {
            let dump = serde_json::json!({ "version": cfg.version, "snapshot": &*cfg.snapshot });
            (StatusCode::OK, "application/json", serde_json::to_string_pretty(&dump).unwrap_or_default())
        }
        _ => (StatusCode::NOT_FOUND, "text/plain", "try /healthz/ready, /metrics or /debug/config\n".to_owned()),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = header::HeaderValue::from_str(ctype) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}
