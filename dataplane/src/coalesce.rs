//! Write coalescing for multiplexed connections.
//!
//! An HTTP/2 connection flushes whenever one of its streams has produced a frame. Under load
//! many streams' responses become ready within one turn of the event loop, and flushing each
//! on its own costs a TLS record and a `writev` per response. [`Coalesce`] buffers the
//! writes and, on the first flush, yields once to the scheduler: the other tasks that are
//! already runnable (upstream connections delivering more responses) run first, and their
//! frames leave in the same record and system call. When nothing else is runnable the task
//! is polled again straight away, so an idle connection pays one extra poll, not a delay.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Above this many buffered bytes, writes go out without waiting for a flush.
const LIMIT: usize = 64 * 1024;
/// A drained buffer larger than this is released, so idle connections hold little memory.
const KEEP: usize = 16 * 1024;

/// An I/O object whose writes are gathered until a flush, and whose flushes first yield
/// once to other runnable tasks. Reads pass through.
#[derive(Debug)]
pub struct Coalesce<T> {
    inner: T,
    buf: Vec<u8>,
    written: usize,
    yielded: bool,
}

impl<T> Coalesce<T> {
    /// Wraps `inner`.
    pub fn new(inner: T) -> Self {
        Coalesce { inner, buf: Vec::new(), written: 0, yielded: false }
    }

    fn pending(&self) -> usize {
        self.buf.len() - self.written
    }
}

impl<T: AsyncWrite + Unpin> Coalesce<T> {
    /// Writes out everything buffered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.buf.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.written = 0;
        if self.buf.capacity() > KEEP {
            self.buf = Vec::new();
        } else {
            self.buf.clear();
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesce<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesce<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.pending() + data.len() > LIMIT {
            ready!(this.poll_drain(cx))?;
            if data.len() >= LIMIT {
                return Pin::new(&mut this.inner).poll_write(cx, data);
            }
        }
        this.buf.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if this.pending() + total > LIMIT {
            ready!(this.poll_drain(cx))?;
            if total >= LIMIT {
                return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
            }
        }
        for b in bufs {
            this.buf.extend_from_slice(b);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.pending() > 0 && !this.yielded {
            this.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        ready!(this.poll_drain(cx))?;
        this.yielded = false;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn writes_leave_only_on_flush_and_in_order() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let mut w = Coalesce::new(a);
        w.write_all(b"hello ").await.unwrap();
        w.write_all(b"world").await.unwrap();
        let mut probe = [0u8; 1];
        let early = tokio::time::timeout(std::time::Duration::from_millis(50), b.read(&mut probe)).await;
        assert!(early.is_err(), "nothing may reach the peer before a flush");
        w.flush().await.unwrap();
        let mut got = [0u8; 11];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello world");
    }

    #[tokio::test]
    async fn large_writes_pass_through_and_keep_their_order() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let mut w = Coalesce::new(a);
        w.write_all(b"head").await.unwrap();
        let big = vec![7u8; LIMIT + 10];
        w.write_all(&big).await.unwrap();
        w.write_all(b"tail").await.unwrap();
        w.shutdown().await.unwrap();
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert_eq!(got.len(), 4 + big.len() + 4);
        assert_eq!(&got[..4], b"head");
        assert!(got[4..4 + big.len()].iter().all(|&x| x == 7));
        assert_eq!(&got[got.len() - 4..], b"tail");
    }

    #[tokio::test]
    async fn a_full_peer_applies_backpressure() {
        let (a, mut b) = tokio::io::duplex(1024);
        let mut w = Coalesce::new(a);
        let writer = tokio::spawn(async move {
            for _ in 0..200 {
                w.write_all(&[1u8; 1000]).await.unwrap();
                w.flush().await.unwrap();
            }
        });
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        while got.len() < 200_000 {
            let n = b.read(&mut chunk).await.unwrap();
            assert!(n > 0);
            got.extend_from_slice(&chunk[..n]);
        }
        writer.await.unwrap();
        assert_eq!(got.len(), 200_000);
    }
}
