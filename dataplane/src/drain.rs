//! Graceful shutdown in two steps: first *closing* (the replica reports not ready and keeps
//! serving, but asks every client to go: HTTP/1.1 responses carry `Connection: close`,
//! HTTP/2 connections get GOAWAY), so that clients move to other replicas while the
//! Service's endpoints catch up; then *draining* (listeners stop accepting, in-flight work
//! finishes). Every connection holds a watch; the signal's owner waits until all watches
//! are dropped or a deadline passes.

use std::time::Duration;

use tokio::sync::watch;

/// Where shutdown is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Serving,
    Closing,
    Draining,
}

/// Held by whoever shuts the gateway down.
#[derive(Debug)]
pub struct Signal(watch::Sender<Phase>);

/// Held by every listener and connection; dropping it means "done".
#[derive(Debug, Clone)]
pub struct Watch(watch::Receiver<Phase>);

/// A new signal and its first watch.
pub fn channel() -> (Signal, Watch) {
    let (tx, rx) = watch::channel(Phase::Serving);
    (Signal(tx), Watch(rx))
}

impl Signal {
    /// Starts closing: not ready, still serving, clients asked to go.
    pub fn close(&self) {
        self.0.send_if_modified(|p| {
            let was = *p;
            *p = was.max(Phase::Closing);
            *p != was
        });
    }

    /// Tells everyone to drain and waits up to `deadline` for them. True when all finished.
    pub async fn drain(self, deadline: Duration) -> bool {
        self.start_draining();
        self.finished(deadline).await
    }

    /// Tells everyone to drain, without waiting.
    pub fn start_draining(&self) {
        let _ = self.0.send(Phase::Draining);
    }

    /// Waits up to `deadline` for every watch to be dropped. True when all were.
    pub async fn finished(self, deadline: Duration) -> bool {
        tokio::time::timeout(deadline, self.0.closed()).await.is_ok()
    }
}

impl Watch {
    /// Resolves once draining has started.
    pub async fn signaled(&mut self) {
        let _ = self.0.wait_for(|p| *p == Phase::Draining).await;
    }

    /// Resolves once closing (or draining) has started.
    pub async fn closing(&mut self) {
        let _ = self.0.wait_for(|p| *p >= Phase::Closing).await;
    }

    /// True once closing (or draining) has started.
    pub fn is_closing(&self) -> bool {
        *self.0.borrow() >= Phase::Closing
    }
}

/// Serves an HTTP connection until it ends; once draining starts, or the connection is
/// older than `max_age`, or (with `goaway_on_close`, for HTTP/2) once closing starts, asks
/// it to finish its in-flight requests (HTTP/1.1: close after the current one; HTTP/2:
/// GOAWAY) and waits. Returns how the connection ended.
pub async fn serve_connection<C>(
    conn: C,
    mut drain: Watch,
    max_age: Option<Duration>,
    goaway_on_close: bool,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    C: hyper_util::server::graceful::GracefulConnection,
    C::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tokio::pin!(conn);
    let aged = async {
        match max_age {
            Some(age) => tokio::time::sleep(age).await,
            None => std::future::pending().await,
        }
    };
    let mut closing = drain.clone();
    let closed = async {
        if goaway_on_close {
            closing.closing().await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let ended = tokio::select! {
        ended = conn.as_mut() => ended,
        _ = closed => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
        _ = drain.signaled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
        _ = aged => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    ended.map_err(Into::into)
}
