//! ingress-nginx's `default-backend` and `custom-http-errors`: a route's default backend
//! takes its requests while its backends have no endpoints, and answers the listed
//! errors, the backend's and the gateway's own, told what failed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use wharf_model::{Action, Fallback, PathMatch, Route};

fn with_fallback(path: &str, cluster: &str, fallback: &str, codes: &[u16]) -> Route {
    let mut r = route(PathMatch::prefix(path).unwrap(), cluster, false);
    if let Action::Forward(f) = &mut r.action {
        f.fallback = Some(Box::new(Fallback {
            cluster: fallback.into(),
            error_codes: codes.to_vec(),
            namespace: "shop".into(),
            ingress: "web".into(),
            service: cluster.into(),
            service_port: "http".into(),
        }));
    }
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_backend_takes_requests_without_endpoints_and_answers_listed_errors() {
    let r = start().await;
    let dead = dead_addr().await;
    let s = snapshot(
        vec![(
            host("shop.test"),
            vec![
                with_fallback("/app", "app", "errors", &[404, 502, 503]),
                with_fallback("/empty", "empty", "errors", &[]),
                with_fallback("/dead", "dead", "errors", &[502]),
                with_fallback("/both-dead", "dead", "dead-errors", &[502]),
                with_fallback("/no-errors-page", "empty", "empty", &[503]),
            ],
        )],
        vec![
            ("app", cluster(&[echo("app").await])),
            ("errors", cluster(&[echo("errors").await])),
            ("empty", cluster(&[])),
            ("dead", cluster(&[dead])),
            ("dead-errors", cluster(&[dead])),
        ],
    );
    r.gw.apply(s).unwrap();
    let get = |path: &'static str, headers: &'static [(&'static str, &'static str)]| {
        http_request(r.http, "GET", "shop.test", path, headers)
    };

    // A listed status from the backend: the default backend answers, told what failed.
    const ASKED: &[(&str, &str)] = &[("accept", "application/json"), ("x-request-id", "req-1")];
    let seen = get("/app/item?status=404", ASKED).await.unwrap();
    assert_eq!((seen.status, seen.headers["x-echo-name"].to_str().unwrap()), (200, "errors"), "{}", seen.body);
    let told = seen.json();
    assert_eq!((&told["method"], &told["path"], &told["body_bytes"]), (&"GET".into(), &"/".into(), &0.into()));
    let h = &told["headers"];
    for (name, want) in [
        ("x-code", "404"),
        ("x-format", "application/json"),
        ("x-original-uri", "/app/item?status=404"),
        ("x-namespace", "shop"),
        ("x-ingress-name", "web"),
        ("x-service-name", "app"),
        ("x-service-port", "http"),
        ("x-request-id", "req-1"),
        ("host", "shop.test"),
    ] {
        assert_eq!(h[name], want, "{name}: {h}");
    }
    // Other statuses are the backend's.
    let seen = get("/app/item?status=500", &[]).await.unwrap();
    assert_eq!((seen.status, seen.headers["x-echo-name"].to_str().unwrap()), (500, "app"));
    let seen = get("/app/item", &[]).await.unwrap();
    assert_eq!((seen.status, seen.headers["x-echo-name"].to_str().unwrap()), (200, "app"));

    // No endpoints: the default backend takes the request itself, its path and query
    // kept, told why as ingress-nginx tells it (X-Code 503); headers the client sent in
    // those names are replaced.
    const CLIENT: &[(&str, &str)] = &[("x-code", "200"), ("x-service-name", "other"), ("x-format", "forged")];
    let seen = get("/empty/a?b=c", CLIENT).await.unwrap();
    assert_eq!(seen.status, 200);
    let told = seen.json();
    assert_eq!((&told["name"], &told["path"], &told["query"]), (&"errors".into(), &"/empty/a".into(), &"b=c".into()));
    let h = &told["headers"];
    for (name, want) in
        [("x-code", "503"), ("x-namespace", "shop"), ("x-ingress-name", "web"), ("x-service-name", "empty")]
    {
        assert_eq!(h[name], want, "{name}: {h}");
    }
    assert!(h.get("x-format").is_none() && h.get("x-original-uri").is_none(), "{h}");
    assert!(h["x-request-id"].as_str().is_some_and(|id| id.len() == 32), "a request id is made: {h}");

    // The gateway's own error (the backend refuses connections): answered the same way.
    let seen = get("/dead", &[]).await.unwrap();
    assert_eq!((seen.status, &seen.json()["headers"]["x-code"]), (200, &"502".into()));
    // A default backend that cannot answer either: the gateway's error stands.
    assert_eq!(get("/both-dead", &[]).await.unwrap().status, 502);
    assert_eq!(get("/no-errors-page", &[]).await.unwrap().status, 503);
}
