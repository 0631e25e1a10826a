//! Graceful shutdown in two steps: first *closing* (the replica reports not ready and keeps
//! serving, but asks every client to go: HTTP/1.1 responses carry `Connection: close`,
//! HTTP/2 connections get GOAWAY), so that clients move to other replicas while the
//! Service's endpoints catch up; then *draining* (listeners stop accepting, in-flight work
//! finishes). Every connection holds a watch; the signal's owner waits until all watches
//! are dropped or a deadline passes.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// How busy a connection is: its requests in flight, and when the last one ended.
#[derive(Debug)]
pub struct Activity {
    born: Instant,
    in_flight: AtomicU32,
    /// Milliseconds from `born` to the end of the last request; `u64::MAX`: none yet.
    last_end: AtomicU64,
}

/// A request in flight on its connection, until dropped.
#[derive(Debug)]
pub struct Busy(Arc<Activity>);

impl Activity {
    /// A connection that has asked nothing yet.
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity { born: Instant::now(), in_flight: AtomicU32::new(0), last_end: AtomicU64::new(u64::MAX) })
    }

    /// Counts a request in flight until the guard is dropped.
    pub fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Busy(Arc::clone(self))
    }

    /// How long the connection has had no request in flight (since it was made, or the
    /// last one ended), and whether it ever had one; `None` while one is in flight.
    fn idle(&self) -> Option<(Duration, bool)> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let age = self.born.elapsed();
        match self.last_end.load(Ordering::Acquire) {
            u64::MAX => Some((age, false)),
            end => Some((age.saturating_sub(Duration::from_millis(end)), true)),
        }
    }

    /// Resolves once the connection has had no request in flight for `limit`: true when
    /// it had one before.
    async fn idle_for(&self, limit: Duration) -> bool {
        loop {
            match self.idle() {
                Some((idle, asked)) if idle >= limit => return asked,
                Some((idle, _)) => tokio::time::sleep(limit - idle).await,
                None => tokio::time::sleep(limit).await,
            }
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let a = &self.0;
        let end = u64::try_from(a.born.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        a.last_end.store(end, Ordering::Release);
        a.in_flight.fetch_sub(1, Ordering::Release);
    }
}

/// How long a connection that never sent a request may take to end once asked to (a
/// client stalled in the HTTP/2 preface never reads the GOAWAY).
const UNUSED_GRACE: Duration = Duration::from_secs(1);

/// Serves an HTTP connection until it ends; once draining starts, or the connection is
/// older than `max_age`, or (with `goaway_on_close`, for HTTP/2) once closing starts, or
/// `idle` says it has had no request in flight for its limit, asks it to finish its
/// in-flight requests (HTTP/1.1: close after the current one; HTTP/2: GOAWAY) and waits;
/// an idle connection that never sent a request is dropped after [`UNUSED_GRACE`].
/// Returns how the connection ended. The connection comes boxed, so that this future
/// holds a pointer to it rather than a copy beside its argument.
pub async fn serve_connection<C, E>(
    mut conn: Pin<Box<C>>,
    mut drain: Watch,
    max_age: Option<Duration>,
    goaway_on_close: bool,
    idle: Option<(Duration, Arc<Activity>)>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    C: Graceful + Future<Output = Result<(), E>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let aged = async {
        match max_age {
            Some(age) => tokio::time::sleep(age).await,
            None => std::future::pending().await,
        }
    };
    let idled = async {
        match &idle {
            Some((limit, activity)) => activity.idle_for(*limit).await,
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
        asked = idled => {
            conn.as_mut().graceful_shutdown();
            match asked {
                true => conn.await,
                false => tokio::time::timeout(UNUSED_GRACE, conn).await.unwrap_or(Ok(())),
            }
        }
    };
    ended.map_err(Into::into)
}

/// A served connection that can be asked to finish what it is doing and end.
pub trait Graceful {
    /// HTTP/1.1: close after the current response; HTTP/2: GOAWAY.
    fn graceful_shutdown(self: Pin<&mut Self>);
}

impl<I, S, B> Graceful for hyper::server::conn::http1::UpgradeableConnection<I, S>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        hyper::server::conn::http1::UpgradeableConnection::graceful_shutdown(self);
    }
}

impl<I, S, B, E> Graceful for hyper::server::conn::http2::Connection<I, S, E>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + 'static,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        hyper::server::conn::http2::Connection::graceful_shutdown(self);
    }
}

impl<I, S, B, E> Graceful for hyper_util::server::conn::auto::UpgradeableConnection<'_, I, S, E>
where
    S: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::Future: 'static,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        hyper_util::server::conn::auto::UpgradeableConnection::graceful_shutdown(self);
    }
}
