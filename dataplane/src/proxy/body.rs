//! A response body that hands its HTTP/1.1 connection back to the pool when it ends, and
//! a request body cut off past a size limit.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;

use super::upstream::{EndpointState, InFlight};

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

pin_project_lite::pin_project! {
    /// The client's request body on its way to the backend; past `limit` bytes it fails,
    /// and the request is answered 413.
    pub struct RequestBody {
        #[pin]
        inner: Incoming,
        remaining: u64,
        tripped: Option<Arc<AtomicBool>>,
    }
}

/// Why a request body stopped.
#[derive(Debug, thiserror::Error)]
pub enum RequestBodyError {
    /// Reading from the client failed.
    #[error(transparent)]
    Client(#[from] hyper::Error),
    /// The body went past the route's limit.
    #[error("the request body is larger than the limit")]
    TooLarge,
}

impl RequestBody {
    /// No limit.
    pub fn unlimited(inner: Incoming) -> Self {
        RequestBody { inner, remaining: u64::MAX, tripped: None }
    }

    /// At most `limit` bytes; `tripped` is set when the limit was passed.
    pub fn limited(inner: Incoming, limit: u64, tripped: Arc<AtomicBool>) -> Self {
        RequestBody { inner, remaining: limit, tripped: Some(tripped) }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = RequestBodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        let this = self.project();
        match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let n = data.len() as u64;
                    if n > *this.remaining {
                        if let Some(t) = this.tripped {
                            t.store(true, Ordering::Relaxed);
                        }
                        return Poll::Ready(Some(Err(RequestBodyError::TooLarge)));
                    }
                    *this.remaining -= n;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
