//! Graceful shutdown: one signal, every connection holds a watch; the signal's owner
//! waits until all watches are dropped or a deadline passes.

use std::time::Duration;

use tokio::sync::watch;

/// Held by whoever shuts the gateway down.
#[derive(Debug)]
pub struct Signal(watch::Sender<bool>);

/// Held by every listener and connection; dropping it means "done".
#[derive(Debug, Clone)]
pub struct Watch(watch::Receiver<bool>);

/// A new signal and its first watch.
pub fn channel() -> (Signal, Watch) {
    let (tx, rx) = watch::channel(false);
    (Signal(tx), Watch(rx))
}

impl Signal {
    /// Tells everyone to drain and waits up to `deadline` for them. True when all finished.
    pub async fn drain(self, deadline: Duration) -> bool {
        let _ = self.0.send(true);
        tokio::time::timeout(deadline, self.0.closed()).await.is_ok()
    }
}

impl Watch {
    /// Resolves once draining has started.
    pub async fn signaled(&mut self) {
        let _ = self.0.wait_for(|draining| *draining).await;
    }
}

/// Serves an HTTP connection until it ends; once draining starts, or the connection is
/// older than `max_age`, asks it to finish its in-flight requests (HTTP/1.1: close after
/// the current one; HTTP/2: GOAWAY) and waits. Returns how the connection ended.
pub async fn serve_connection<C>(
    conn: C,
    mut drain: Watch,
    max_age: Option<Duration>,
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
    let ended = tokio::select! {
        ended = conn.as_mut() => ended,
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
