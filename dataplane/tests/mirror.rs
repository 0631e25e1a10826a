//! Request mirroring: a copy of each request, body included, reaches the mirror while the
//! client gets the primary backend's answer; a mirror that fails or stalls changes nothing
//! for the client.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use wharf_model::{Action, Forward, Mirror, PathMatch, Route, RouteMatch, WeightedBackend};

/// A backend that reports each request it gets (method, path, a header, body) on `tx`
/// and answers 200 "mirror".
async fn recording_backend(tx: mpsc::UnboundedSender<(String, String, String, Bytes)>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            let tx = tx.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let tx = tx.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let tag = parts.headers.get("x-tag").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                        let _ = tx.send((parts.method.to_string(), parts.uri.to_string(), tag, body));
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"mirror"))))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    addr
}

fn mirrored(path: &str, primary: &str, mirrors: &[(&str, u32)]) -> Route {
    Route {
        matches: RouteMatch::path(PathMatch::prefix(path).unwrap()),
        action: Action::Forward(Forward {
            mirrors: mirrors.iter().map(|(c, p)| Mirror { cluster: (*c).into(), per_million: *p }).collect(),
            ..Forward::to(vec![WeightedBackend::new(primary, 1)])
        }),
        ..route(PathMatch::prefix(path).unwrap(), primary, false)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_of_each_request_reaches_the_mirror_and_its_answer_is_dropped() {
    let r = start().await;
    let (tx, mut seen) = mpsc::unbounded_channel();
    let (primary, mirror) = (echo("primary").await, recording_backend(tx).await);
    let mut routes = vec![
        mirrored("/all", "primary", &[("mirror", 1_000_000)]),
        mirrored("/none", "primary", &[("mirror", 0)]),
        mirrored("/dead", "primary", &[("dead", 1_000_000)]),
    ];
    routes.sort_by_key(|r| r.matches.precedence_key());
    let s = snapshot(
        vec![(host("a.test"), routes)],
        vec![("primary", cluster(&[primary])), ("mirror", cluster(&[mirror])), ("dead", cluster(&[dead_addr().await]))],
    );
    r.gw.apply(s).unwrap();

    // A POST with a body of several frames: the mirror gets all of it.
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = http::Request::post(format!("http://{}/all/x?q=1", r.http))
        .header("host", "a.test")
        .header("x-tag", "copy-me")
        .body(Full::new(Bytes::from(body.clone())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let got = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&got).contains("\"primary\""), "the client gets the primary's answer");
    let (method, uri, tag, mirrored_body) =
        tokio::time::timeout(Duration::from_secs(10), seen.recv()).await.expect("the mirror got a copy").unwrap();
    assert_eq!((method.as_str(), uri.as_str(), tag.as_str()), ("POST", "/all/x?q=1", "copy-me"));
    assert_eq!(mirrored_body.len(), body.len());
    assert!(mirrored_body == body, "the body, byte for byte");

    // A share of 0 takes nothing; a dead mirror changes nothing for the client.
    assert_eq!(http_get(r.http, "a.test", "/none").await.unwrap().status, 200);
    assert_eq!(http_get(r.http, "a.test", "/dead").await.unwrap().status, 200);
    let counted = |line: &'static str| {
        let r = &r;
        move || async move { admin_get(r, "/metrics").await.body.contains(line) }
    };
    let ok = counted("wharf_mirrored_requests_total{result=\"ok\"} 1");
    assert!(eventually(Duration::from_secs(10), ok).await, "the answered copy is counted");
    let failed = counted("wharf_mirrored_requests_total{result=\"error\"} 1");
    assert!(eventually(Duration::from_secs(10), failed).await, "the dead mirror's copy is counted as failed");
    assert!(seen.try_recv().is_err(), "nothing mirrored for /none");
}
