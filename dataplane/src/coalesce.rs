//! Write coalescing for multiplexed connections.
//!
//! An HTTP/2 connection flushes whenever one of its streams has produced a frame. Under load
//! many streams' responses become ready within a few turns of the event loop, and flushing
//! each on its own costs a TLS record and a `writev` per response. [`Coalesce`] buffers the
//! writes and, on a flush, yields to the scheduler so that the other runnable tasks
//! (upstream connections delivering responses, the streams they wake) run first and their
//! frames leave in the same record and system call. It keeps yielding only while the
//! buffer grows between turns, at most [`MAX_YIELDS`] times and until a TLS record's worth
//! of data is waiting. When nothing else is runnable the task is polled again straight away,
//! so an idle connection pays one extra poll, not a delay.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Above this many buffered bytes, writes go out without waiting for a flush.
const LIMIT: usize = 64 * 1024;
/// A drained buffer larger than this is released, so idle connections hold little memory.
const KEEP: usize = 16 * 1024;
/// A full TLS record's worth of plaintext: no reason to wait for more.
const RECORD: usize = 16 * 1024;
/// Most yields one flush takes while other tasks keep adding to the buffer.
const MAX_YIELDS: u8 = 16;

/// An I/O object whose writes are gathered until a flush, and whose flushes first yield to
/// other runnable tasks while those keep adding to the buffer. Reads pass through.
#[derive(Debug)]
pub struct Coalesce<T> {
    inner: T,
    buf: Vec<u8>,
    written: usize,
    /// Yields taken for the current flush.
    yields: u8,
    /// Bytes pending when the last yield was taken.
    mark: usize,
}

impl<T> Coalesce<T> {
    /// Wraps `inner`.
    pub fn new(inner: T) -> Self {
        Coalesce { inner, buf: Vec::new(), written: 0, yields: 0, mark: 0 }
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
        let pending = this.pending();
        if pending > 0 && pending < RECORD && this.yields < MAX_YIELDS && (this.yields == 0 || pending > this.mark) {
            this.yields += 1;
            this.mark = pending;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        ready!(this.poll_drain(cx))?;
        this.yields = 0;
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

    /// Records each write that reaches it.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl AsyncWrite for Writes {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
            self.0.push(data.to_vec());
            Poll::Ready(Ok(data.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// The shape of an HTTP/2 connection task: frames queued by other tasks are written, then
    /// flushed. Producers become ready over several scheduler turns, as responses do when an
    /// upstream task wakes a stream task, which wakes the connection.
    async fn frames_from_staggered_producers(producers: usize, frame: usize) -> Vec<Vec<u8>> {
        use std::cell::RefCell;
        use std::rc::Rc;
        let queue: Rc<RefCell<(Vec<u8>, Option<std::task::Waker>)>> = Rc::default();
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async move {
                let mut w = Coalesce::new(Writes::default());
                for i in 0..producers {
                    let queue = queue.clone();
                    tokio::task::spawn_local(async move {
                        for _ in 0..i {
                            tokio::task::yield_now().await;
                        }
                        let mut q = queue.borrow_mut();
                        q.0.extend(std::iter::repeat_n(b'a' + i as u8, frame));
                        if let Some(waker) = q.1.take() {
                            waker.wake();
                        }
                    });
                }
                let mut sent = 0;
                std::future::poll_fn(|cx| loop {
                    let frames = std::mem::take(&mut queue.borrow_mut().0);
                    if !frames.is_empty() {
                        sent += frames.len() / frame;
                        let _ = Pin::new(&mut w).poll_write(cx, &frames)?;
                    }
                    queue.borrow_mut().1 = Some(cx.waker().clone());
                    ready!(Pin::new(&mut w).poll_flush(cx))?;
                    if sent == producers {
                        return Poll::Ready(io::Result::Ok(()));
                    }
                    if queue.borrow().0.is_empty() {
                        return Poll::Pending;
                    }
                })
                .await
                .unwrap();
                w.inner.0
            })
            .await
    }

    #[tokio::test]
    async fn a_flush_waits_while_other_tasks_keep_adding_frames() {
        let writes = frames_from_staggered_producers(6, 1).await;
        assert_eq!(writes, vec![b"abcdef".to_vec()], "six frames ready over six turns, one write");
    }

    #[tokio::test]
    async fn a_flush_stops_waiting_after_max_yields() {
        let producers = MAX_YIELDS as usize + 4;
        let writes = frames_from_staggered_producers(producers, 1).await;
        assert!(writes.len() > 1, "producers beyond the yield budget go in a later write");
        assert_eq!(writes.concat().len(), producers);
        assert!(writes[0].len() <= MAX_YIELDS as usize + 1);
    }

    #[tokio::test]
    async fn a_flush_stops_waiting_once_a_record_is_full() {
        let writes = frames_from_staggered_producers(4, 10 * 1024).await;
        let sizes: Vec<usize> = writes.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![20 * 1024, 20 * 1024], "two 10 KiB frames fill a record");
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
