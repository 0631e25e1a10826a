//! `proxy-next-upstream`: a request that fails on one endpoint is tried on another, for
//! the conditions the route names, within its tries, and only when it can be sent again
//! (no body; a method that may be repeated, unless `non_idempotent`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wharf_dataplane::testing::read_request_head;
use wharf_model::{Action, PathMatch, Retry};

/// What a failing endpoint does with each request, once it has read its head.
#[derive(Clone, Copy)]
enum Fails {
    /// Answers with this status.
    Status(u16),
    /// Closes the connection without an answer.
    Reset,
    /// Never answers.
    Hang,
}

/// An endpoint that fails every request as `how`; counts the requests it read.
async fn failing(how: Fails) -> (SocketAddr, Arc<AtomicUsize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                if read_request_head(&mut s).await.is_none() {
                    return;
                }
                count.fetch_add(1, Ordering::SeqCst);
                match how {
                    Fails::Status(code) => {
                        let head =
                            format!("HTTP/1.1 {code} Failed\r\ncontent-length: 6\r\nconnection: close\r\n\r\nfailed");
                        let _ = s.write_all(head.as_bytes()).await;
                    }
                    Fails::Reset => {}
                    Fails::Hang => {
                        let _ = s.read(&mut [0u8; 1]).await;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// `a.test/` forwarding to the endpoints `addrs`, with `retry` and a response timeout of
/// 300 ms.
async fn serve(r: &Running, addrs: &[SocketAddr], retry: Option<Retry>) {
    let mut route = route(PathMatch::prefix("/").unwrap(), "app", false);
    if let Action::Forward(f) = &mut route.action {
        f.retry = retry.map(Box::new);
        f.timeout_ms = Some(300);
    }
    r.gw.apply(snapshot(vec![(host("a.test"), vec![route])], vec![("app", cluster(addrs))])).unwrap();
}

fn retry(statuses: &[u16], on_error: bool) -> Retry {
    Retry {
        on_error,
        on_timeout: false,
        statuses: statuses.to_vec(),
        non_idempotent: false,
        tries: 0,
        timeout_ms: None,
    }
}

/// The statuses of `n` requests.
async fn statuses(r: &Running, method: &str, body: Option<&[u8]>, n: usize) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        let seen = match body {
            Some(b) => http_request_with_body(r.http, method, "a.test", "/", &[], b).await,
            None => http_request(r.http, method, "a.test", "/", &[]).await,
        };
        out.push(seen.unwrap().status);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_status_is_tried_on_another_endpoint_and_counted() {
    let r = start().await;
    let (bad, hits) = failing(Fails::Status(502)).await;
    let ok = echo("ok").await;
    serve(&r, &[bad, ok], Some(retry(&[502], false))).await;
    // Half the requests go to the failing endpoint first (nothing ejects it: it answers).
    assert_eq!(statuses(&r, "GET", None, 24).await, vec![200; 24], "every GET is answered by the other");
    let retried = hits.load(Ordering::SeqCst);
    assert!(retried > 0, "the failing endpoint was never tried");
    let m = admin_get(&r, "/metrics").await.body;
    assert!(m.lines().any(|l| l == format!("wharf_upstream_retries_total {retried}")), "{m}");
    // POST may not be repeated, and a body is never sent twice: the failure stands.
    assert!(statuses(&r, "POST", None, 24).await.contains(&502), "a POST was tried again");
    assert!(statuses(&r, "PUT", Some(b"data"), 24).await.contains(&502), "a body was sent again");
    // With non_idempotent, a POST without a body is tried again.
    serve(&r, &[bad, ok], Some(Retry { non_idempotent: true, ..retry(&[502], false) })).await;
    assert_eq!(statuses(&r, "POST", None, 16).await, vec![200; 16]);
    // Another status is the backend's answer.
    serve(&r, &[bad, ok], Some(retry(&[503], true))).await;
    assert!(statuses(&r, "GET", None, 24).await.contains(&502));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_policy_or_beyond_its_tries_the_first_answer_stands() {
    let r = start().await;
    let (bad, _) = failing(Fails::Status(502)).await;
    let ok = echo("ok").await;
    serve(&r, &[bad, ok], None).await;
    let got = statuses(&r, "GET", None, 24).await;
    assert!(got.contains(&502) && got.contains(&200), "{got:?}");
    // One try in all (`off`): no second endpoint, even for a reset connection.
    let (reset, _) = failing(Fails::Reset).await;
    serve(&r, &[reset, ok], Some(Retry { tries: 1, ..retry(&[502], true) })).await;
    let got = statuses(&r, "GET", None, 24).await;
    assert!(got.contains(&502) && got.contains(&200), "{got:?}");
    // When every endpoint fails, the last answer is the client's.
    let (other_bad, _) = failing(Fails::Status(502)).await;
    serve(&r, &[bad, other_bad], Some(retry(&[502], false))).await;
    assert_eq!(statuses(&r, "GET", None, 4).await, vec![502; 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_fails_after_the_request_was_sent_is_tried_again_on_error() {
    let r = start().await;
    let (reset, hits) = failing(Fails::Reset).await;
    let ok = echo("ok").await;
    serve(&r, &[reset, ok], Some(retry(&[], true))).await;
    assert_eq!(statuses(&r, "GET", None, 24).await, vec![200; 24]);
    assert!(hits.load(Ordering::SeqCst) > 0, "the resetting endpoint was never tried");
    // Without `error`, the failure is the client's.
    serve(&r, &[reset, ok], Some(retry(&[502], false))).await;
    assert!(statuses(&r, "GET", None, 24).await.contains(&502));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_that_times_out_is_tried_again_on_timeout_within_the_time_allowed() {
    let r = start().await;
    let (hang, hits) = failing(Fails::Hang).await;
    let ok = echo("ok").await;
    serve(&r, &[hang, ok], Some(Retry { on_timeout: true, ..retry(&[], false) })).await;
    assert_eq!(statuses(&r, "GET", None, 12).await, vec![200; 12]);
    assert!(hits.load(Ordering::SeqCst) > 0, "the silent endpoint was never tried");
    // Without `timeout`, the gateway's 504 stands.
    serve(&r, &[hang, ok], Some(retry(&[502], true))).await;
    assert!(statuses(&r, "GET", None, 12).await.contains(&504));
    // No time left for another attempt once the first has used the budget.
    serve(&r, &[hang, ok], Some(Retry { on_timeout: true, timeout_ms: Some(100), ..retry(&[], false) })).await;
    assert!(statuses(&r, "GET", None, 12).await.contains(&504));
}
