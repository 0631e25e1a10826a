//! A response body that hands its HTTP/1.1 connection back to the pool when it ends, and
//! a request body cut off past a size limit.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use tokio::sync::mpsc;

use super::{EndpointState, InFlight};

pin_project_lite::pin_project! {
    /// The backend's body, plus the connection and load slot it holds.
    pub struct PooledBody {
        #[pin]
        inner: Incoming,
        pool: Option<(Arc<EndpointState>, SendRequest<RequestBody>)>,
        in_flight: Option<InFlight>,
    }

    impl PinnedDrop for PooledBody {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // An empty body may never be polled; its connection is still reusable.
            if this.inner.is_end_stream() {
                if let Some((ep, sender)) = this.pool.take() {
                    ep.checkin(sender);
                }
            }
        }
    }
}

impl PooledBody {
    /// A body whose connection returns to `ep`'s pool at end of stream.
    pub fn pooled(
        inner: Incoming,
        ep: Arc<EndpointState>,
        sender: SendRequest<RequestBody>,
        in_flight: InFlight,
    ) -> Self {
        PooledBody { inner, pool: Some((ep, sender)), in_flight: Some(in_flight) }
    }

    /// A body on a connection that is not pooled here (HTTP/2 is shared anyway).
    pub fn plain(inner: Incoming, in_flight: InFlight) -> Self {
        PooledBody { inner, pool: None, in_flight: Some(in_flight) }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if let Poll::Ready(None) = polled {
            if let Some((ep, sender)) = this.pool.take() {
                ep.checkin(sender);
            }
            this.in_flight.take();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The client's request body on its way to the backend; past `limit` bytes it fails, and
/// the request is answered 413. Its data can be teed to mirrors as it streams; a mirror's
/// request carries such a copy.
#[derive(Debug)]
pub struct RequestBody {
    source: Source,
    remaining: u64,
    tripped: Option<Arc<AtomicBool>>,
    tee: Vec<Tap>,
    progress: Option<Arc<SendProgress>>,
}

/// How far sending a request body has come, for its timeouts: when a part of it was
/// last handed to the backend's connection and not yet taken (the backend is slow), and
/// when it ended (the response's wait starts).
#[derive(Debug)]
pub struct SendProgress {
    start: Instant,
    /// Milliseconds after `start` the connection last asked for more of the body.
    asked: AtomicU64,
    /// Milliseconds after `start` a part was handed over and is not yet taken; `NONE`
    /// while the connection wants more.
    handed: AtomicU64,
    /// Milliseconds after `start` the body ended; `NONE` before.
    ended: AtomicU64,
}

const NONE: u64 = u64::MAX;

/// What a request waits on, and until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// The backend to take a part of the body, since this instant.
    Backend(Instant),
    /// The client to send more of the body, since this instant.
    Client(Instant),
    /// The response, since the body ended at this instant.
    Response(Instant),
}

impl SendProgress {
    fn new() -> SendProgress {
        SendProgress {
            start: Instant::now(),
            asked: AtomicU64::new(0),
            handed: AtomicU64::new(NONE),
            ended: AtomicU64::new(NONE),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    /// Records `value` in `which`. Nobody is woken: the request's timer looks again
    /// when its own deadline comes (see `proxy::timed`), so progress costs no wakeup.
    fn set(&self, which: &AtomicU64, value: u64) {
        which.store(value, Ordering::Release);
    }

    /// What the request waits on now.
    pub fn waiting(&self) -> Waiting {
        let at = |ms: u64| self.start + Duration::from_millis(ms);
        match (self.ended.load(Ordering::Acquire), self.handed.load(Ordering::Acquire)) {
            (NONE, NONE) => Waiting::Client(at(self.asked.load(Ordering::Acquire))),
            (NONE, handed) => Waiting::Backend(at(handed)),
            (ended, _) => Waiting::Response(at(ended)),
        }
    }
}

/// The sending end of a mirror's copy of a body: data goes through a small channel, and
/// a mirror that falls behind is cut off (`broken`) rather than slowing the request.
#[derive(Debug)]
struct Tap {
    tx: mpsc::Sender<Bytes>,
    broken: Arc<AtomicBool>,
}

#[derive(Debug)]
enum Source {
    Client(Incoming),
    Copy { rx: mpsc::Receiver<Bytes>, broken: Arc<AtomicBool>, hint: SizeHint },
}

/// Data frames a mirror may be behind the request by before it is cut off.
const MIRROR_BACKLOG: usize = 16;

/// Why a request body stopped.
#[derive(Debug, thiserror::Error)]
pub enum RequestBodyError {
    /// Reading from the client failed.
    #[error(transparent)]
    Client(#[from] hyper::Error),
    /// The body went past the route's limit.
    #[error("the request body is larger than the limit")]
    TooLarge,
    /// A mirror's copy: the mirror fell behind the request, or the request's body failed.
    #[error("the mirrored request's body was cut off")]
    MirrorCutOff,
}

impl RequestBody {
    /// No limit.
    pub fn unlimited(inner: Incoming) -> Self {
        RequestBody {
            source: Source::Client(inner),
            remaining: u64::MAX,
            tripped: None,
            tee: Vec::new(),
            progress: None,
        }
    }

    /// No body: an authentication check's request.
    pub fn empty() -> Self {
        let (_, rx) = mpsc::channel(1);
        let source = Source::Copy { rx, broken: Arc::new(AtomicBool::new(false)), hint: SizeHint::with_exact(0) };
        RequestBody { source, remaining: u64::MAX, tripped: None, tee: Vec::new(), progress: None }
    }

    /// At most `limit` bytes; `tripped` is set when the limit was passed.
    pub fn limited(inner: Incoming, limit: u64, tripped: Arc<AtomicBool>) -> Self {
        RequestBody {
            source: Source::Client(inner),
            remaining: limit,
            tripped: Some(tripped),
            tee: Vec::new(),
            progress: None,
        }
    }

    /// A copy of this body for a mirror's request: it gets every data frame this body
    /// yields from now on, and ends with it (or fails, if the mirror fell behind or the
    /// client's body failed).
    pub fn copy(&mut self) -> RequestBody {
        let (tx, rx) = mpsc::channel(MIRROR_BACKLOG);
        let broken = Arc::new(AtomicBool::new(false));
        self.tee.push(Tap { tx, broken: Arc::clone(&broken) });
        let source = Source::Copy { rx, broken, hint: self.size_hint() };
        RequestBody { source, remaining: u64::MAX, tripped: None, tee: Vec::new(), progress: None }
    }

    /// Keeps track of how far sending this body has come (see [`SendProgress`]).
    pub fn watch(&mut self) -> Arc<SendProgress> {
        let p = Arc::new(SendProgress::new());
        self.progress = Some(Arc::clone(&p));
        p
    }

    fn cut_off_copies(&mut self) {
        for c in self.tee.drain(..) {
            c.broken.store(true, Ordering::Relaxed);
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = RequestBodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        let this = self.get_mut();
        // Asked for more: what was handed over before has been taken.
        if let Some(p) = &this.progress {
            p.set(&p.asked, p.now_ms());
            p.set(&p.handed, NONE);
        }
        let polled = match &mut this.source {
            Source::Client(inner) => Pin::new(inner).poll_frame(cx).map_err(RequestBodyError::from),
            Source::Copy { rx, broken, .. } => match rx.poll_recv(cx) {
                Poll::Ready(Some(data)) => Poll::Ready(Some(Ok(Frame::data(data)))),
                Poll::Ready(None) if broken.load(Ordering::Relaxed) => {
                    Poll::Ready(Some(Err(RequestBodyError::MirrorCutOff)))
                }
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
        };
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let n = data.len() as u64;
                    if n > this.remaining {
                        if let Some(t) = &this.tripped {
                            t.store(true, Ordering::Relaxed);
                        }
                        this.cut_off_copies();
                        return Poll::Ready(Some(Err(RequestBodyError::TooLarge)));
                    }
                    this.remaining -= n;
                    if let Some(p) = &this.progress {
                        let now = p.now_ms();
                        p.set(&p.handed, now);
                        // The last part: a connection that knows the length asks no more.
                        if this.source.is_end_stream() {
                            p.set(&p.ended, now);
                        }
                    }
                    this.tee.retain(|c| match c.tx.try_send(data.clone()) {
                        Ok(()) => true,
                        Err(_) => {
                            c.broken.store(true, Ordering::Relaxed);
                            false
                        }
                    });
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.cut_off_copies();
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                // The copies end where this body ends.
                this.tee.clear();
                if let Some(p) = &this.progress {
                    p.set(&p.ended, p.now_ms());
                }
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.source.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match &self.source {
            Source::Client(inner) => inner.size_hint(),
            Source::Copy { hint, .. } => *hint,
        }
    }
}

impl Source {
    fn is_end_stream(&self) -> bool {
        match self {
            Source::Client(inner) => inner.is_end_stream(),
            Source::Copy { hint, .. } => hint.exact() == Some(0),
        }
    }
}

/// A response body that keeps `guard` until it ends (or is dropped).
pub struct Guarded<B, G> {
    inner: B,
    _guard: G,
}

impl<B, G> Guarded<B, G> {
    /// `inner`, holding `guard`.
    pub fn new(inner: B, guard: G) -> Self {
        Guarded { inner, _guard: guard }
    }
}

impl<B: Body + Unpin, G: Unpin> Body for Guarded<B, G> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
