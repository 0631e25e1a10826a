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
        let Ok((stream, peer)) = accepted else { continue };
        let s = Arc::clone(&shared);
        tokio::spawn(async move {
            let local = peer.ip().is_loopback();
            let svc = service_fn(move |req| {
                let s = Arc::clone(&s);
                async move { Ok::<_, std::convert::Infallible>(respond(&s, &req, local)) }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

/// True when a listener holds `--max-connections` connections.
fn full(shared: &Shared) -> bool {
    use crate::metrics::Listener;
    let max = shared.opts.limits.max_connections as i64;
    max > 0
        && [Listener::Http, Listener::Https, Listener::Passthrough, Listener::Tcp, Listener::Hbone]
            .into_iter()
            .any(|l| shared.metrics.open_connections(l) >= max)
}

/// Ready once a config is applied and, when a mesh identity is configured, once it has a
/// certificate: a replica that cannot open tunnels must not take traffic for ambient
/// backends. `mesh_loaded` is None when no mesh identity is configured. A replica whose
/// listener is full, or whose memory is above the watermark, or that is shutting down,
/// says so, so that load balancers send new clients elsewhere.
fn readiness(
    version: u64,
    mesh_loaded: Option<bool>,
    full: bool,
    over_memory: bool,
    closing: bool,
) -> Result<(), &'static str> {
    if closing {
        return Err("shutting down");
    }
    if version == 0 {
        return Err("no config applied yet");
    }
    if mesh_loaded == Some(false) {
        return Err("no mesh identity yet (waiting for the Istio CA or the mesh certificate files; see the log)");
    }
    if full {
        return Err("a listener is at --max-connections");
    }
    if over_memory {
        return Err("memory in use is above --memory-watermark (see wharf_memory_in_use_bytes)");
    }
    Ok(())
}

/// `local`: the client connected over loopback (in Kubernetes: from inside the pod, e.g.
/// `kubectl port-forward` or `kubectl exec`). Only such clients see `/debug/*`, which
/// lists every host, route, backend address and certificate name.
fn respond(shared: &Shared, req: &Request<Incoming>, local: bool) -> Response<Full<Bytes>> {
    let cfg = shared.config.load();
    let mesh = shared.opts.mesh.as_ref().map(|m| m.load());
    let (status, ctype, body) = match req.uri().path() {
        "/healthz/ready" => {
            match readiness(
                cfg.version,
                mesh.as_ref().map(Option::is_some),
                full(shared),
                shared.memory.over(),
                shared.is_closing(),
            ) {
                Ok(()) => (StatusCode::OK, "text/plain", format!("ready: config version {}\n", cfg.version)),
                Err(why) => (StatusCode::SERVICE_UNAVAILABLE, "text/plain", format!("not ready: {why}\n")),
            }
        }
        "/healthz/live" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        "/metrics" => {
            if let Some(m) = &mesh {
                shared.metrics.mesh_cert_expiry.set(m.as_ref().map_or(0, |c| c.not_after));
            }
            (StatusCode::OK, "text/plain; version=0.0.4", shared.metrics.render())
        }
        p if p.starts_with("/debug/") && !local => (
            StatusCode::FORBIDDEN,
            "text/plain",
            "/debug/* is served only to clients on localhost (use kubectl port-forward)\n".to_owned(),
        ),
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

#[cfg(test)]
mod tests {
    use super::readiness;

    #[test]
    fn ready_needs_a_config_and_a_configured_mesh_identity() {
        assert_eq!(readiness(0, None, false, false, false), Err("no config applied yet"));
        assert_eq!(readiness(0, Some(true), false, false, false), Err("no config applied yet"));
        assert!(readiness(1, Some(false), false, false, false).unwrap_err().contains("no mesh identity"));
        assert_eq!(readiness(1, Some(true), false, false, false), Ok(()));
        assert_eq!(readiness(1, None, false, false, false), Ok(()));
        assert!(readiness(1, None, true, false, false).unwrap_err().contains("max-connections"));
        assert!(readiness(1, None, false, true, false).unwrap_err().contains("memory-watermark"));
        assert_eq!(readiness(1, Some(true), false, false, true), Err("shutting down"));
    }
}
