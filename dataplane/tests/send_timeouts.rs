//! Timing a request body on its way to the backend (ingress-nginx `proxy-send-timeout`):
//! a backend that stops taking the body is given up on, a client that uploads slowly is
//! not, and the wait for the response starts when the body has been sent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use wharf_dataplane::testing::{http_request_streaming, http_request_with_body};
use wharf_model::{Action, PathMatch, Route};

/// A backend that reads a request's headers and then nothing more, answering never.
async fn stalled_backend() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut s, _)) = l.accept().await {
            let mut buf = vec![0u8; 1024];
            let _ = s.read(&mut buf).await;
            held.push(s);
        }
    });
    addr
}

fn timed(path: &str, cluster: &str, timeout_ms: Option<u64>, send_timeout_ms: Option<u64>) -> Route {
    let mut r = route(PathMatch::prefix(path).unwrap(), cluster, false);
    if let Action::Forward(f) = &mut r.action {
        f.timeout_ms = timeout_ms;
        f.send_timeout_ms = send_timeout_ms;
    }
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_stops_taking_the_body_is_given_up_on_and_a_slow_upload_is_not() {
    let r = start().await;
    let s = snapshot(
        vec![(
            host("up.test"),
            vec![
                timed("/stalled", "stalled", None, Some(300)),
                timed("/slow-upload", "app", Some(400), None),
                timed("/slow-answer", "app", Some(400), None),
            ],
        )],
        vec![("stalled", cluster(&[stalled_backend().await])), ("app", cluster(&[echo("app").await]))],
    );
    r.gw.apply(s).unwrap();

    // Far more than the socket buffers hold: the backend must take it, and does not.
    let body = vec![b'x'; 32 << 20];
    let seen = http_request_with_body(r.http, "POST", "up.test", "/stalled", &[], &body).await.unwrap();
    assert_eq!((seen.status, seen.body.trim()), (504, "504 Gateway Timeout: send_timeout"));
    let m = admin_get(&r, "/metrics").await.body;
    assert!(m.contains("reason=\"send_timeout\"} 1"), "{m}");

    // An upload that takes longer than the route's 400 ms in all, in parts the backend
    // takes at once: the wait for the answer starts when it ends.
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        for _ in 0..5 {
            tx.send(Bytes::from_static(&[b'y'; 1000])).await.unwrap();
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    });
    let seen = http_request_streaming(r.http, "POST", "up.test", "/slow-upload", rx).await.unwrap();
    assert_eq!((seen.status, &seen.json()["body_bytes"]), (200, &5000.into()), "{}", seen.body);

    // The answer itself is still timed.
    let seen =
        http_request_with_body(r.http, "POST", "up.test", "/slow-answer?delay_ms=2000", &[], b"z").await.unwrap();
    assert_eq!((seen.status, seen.body.trim()), (504, "504 Gateway Timeout: request_timeout"));
}
