//! An open HBONE tunnel: one HTTP/2 CONNECT stream, held as h2's send and receive halves.
//!
//! Received DATA frames are h2's own buffers; [`Tunnel::relay`] writes them to the client
//! socket as they are, and hands what it reads from the client to h2 as whole buffers, so a
//! relayed byte is copied once each way (socket to buffer, buffer to socket) besides TLS.
//! The [`AsyncRead`]/[`AsyncWrite`] side is for users that need a byte stream (HTTP to a
//! mesh endpoint, TLS to a backend inside the tunnel).

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use h2::{Reason, RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::pool::Slot;
use crate::relay::RELAY_BUFFER;

/// An open tunnel: bytes to and from the target. Shutting down the write side sends
/// END_STREAM (a half-close); dropping the tunnel before that resets the stream.
#[derive(Debug)]
pub struct Tunnel {
    send: SendStream<Bytes>,
    recv: RecvStream,
    /// Received bytes not yet read.
    pending: Bytes,
    /// END_STREAM has been sent.
    ended: bool,
    slot: Slot,
}

/// What the client sends into the tunnel.
#[derive(Default)]
struct Up {
    buf: BytesMut,
    eof: bool,
    /// A buffer went to h2 since this direction last gave way.
    sent: bool,
    done: bool,
}

/// What the tunnel sends to the client.
#[derive(Default)]
struct Down {
    chunk: Bytes,
    unflushed: bool,
    done: bool,
}

impl Tunnel {
    pub(super) fn new(send: SendStream<Bytes>, recv: RecvStream, slot: Slot) -> Tunnel {
        Tunnel { send, recv, pending: Bytes::new(), ended: false, slot }
    }

    /// Relays between `client` and the tunnel until both directions have ended: the
    /// client's EOF becomes END_STREAM, the peer's END_STREAM shuts down the client's write
    /// side. Returns the bytes sent into the tunnel and the bytes sent to the client.
    pub async fn relay<A>(&mut self, client: &mut A) -> io::Result<(u64, u64)>
    where
        A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    {
        let (sent, received) = (self.slot.sent, self.slot.received);
        let mut up = Up::default();
        let mut down = Down { chunk: std::mem::take(&mut self.pending), ..Down::default() };
        poll_fn(|cx| {
            if !up.done {
                match self.poll_up(cx, client, &mut up) {
                    Poll::Ready(Ok(())) => up.done = true,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => {}
                }
            }
            if !down.done {
                match self.poll_down(cx, client, &mut down) {
                    Poll::Ready(Ok(())) => down.done = true,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => {}
                }
            }
            if up.done && down.done {
                Poll::Ready(Ok(()))
            } else {
                Poll::Pending
            }
        })
        .await?;
        Ok((self.slot.sent - sent, self.slot.received - received))
    }

    /// Client to tunnel: reads into a buffer and hands its filled part to h2 as is.
    fn poll_up<A>(&mut self, cx: &mut Context<'_>, client: &mut A, up: &mut Up) -> Poll<io::Result<()>>
    where
        A: AsyncRead + Unpin + ?Sized,
    {
        loop {
            if up.buf.is_empty() {
                if up.eof {
                    self.end()?;
                    return Poll::Ready(Ok(()));
                }
                if std::mem::take(&mut up.sent) {
                    // Give way once per buffer sent, so the connection task writes it out
                    // before this reads the next (with one worker thread, it could not).
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                up.buf.reserve(RELAY_BUFFER);
                if ready!(tokio_util::io::poll_read_buf(Pin::new(&mut *client), cx, &mut up.buf))? == 0 {
                    up.eof = true;
                    continue;
                }
            }
            let room = ready!(self.poll_room(cx, up.buf.len()))?;
            let chunk = up.buf.split_to(room.min(up.buf.len())).freeze();
            let n = chunk.len() as u64;
            self.send.send_data(chunk, false).map_err(h2_to_io)?;
            self.slot.sent += n;
            up.sent = true;
        }
    }

    /// Tunnel to client: writes each received DATA frame's buffer to the client, and
    /// flushes when no more has arrived.
    fn poll_down<A>(&mut self, cx: &mut Context<'_>, client: &mut A, down: &mut Down) -> Poll<io::Result<()>>
    where
        A: AsyncWrite + Unpin + ?Sized,
    {
        loop {
            while !down.chunk.is_empty() {
                let n = ready!(Pin::new(&mut *client).poll_write(cx, &down.chunk))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                down.chunk.advance(n);
                self.consumed(n);
                down.unflushed = true;
            }
            match self.recv.poll_data(cx) {
                Poll::Ready(Some(Ok(data))) => down.chunk = data,
                Poll::Ready(Some(Err(e))) if !is_orderly(&e) => return Poll::Ready(Err(h2_to_io(e))),
                Poll::Ready(_) => {
                    ready!(Pin::new(&mut *client).poll_shutdown(cx))?;
                    return Poll::Ready(Ok(()));
                }
                Poll::Pending => {
                    if down.unflushed {
                        ready!(Pin::new(&mut *client).poll_flush(cx))?;
                        down.unflushed = false;
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    /// Waits until h2 takes at least one byte of `want`: within the peer's window and the
    /// connection's send buffer limit.
    fn poll_room(&mut self, cx: &mut Context<'_>, want: usize) -> Poll<io::Result<usize>> {
        self.send.reserve_capacity(want);
        loop {
            let room = self.send.capacity();
            if room > 0 {
                return Poll::Ready(Ok(room));
            }
            match ready!(self.send.poll_capacity(cx)) {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Poll::Ready(Err(h2_to_io(e))),
                None => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            }
        }
    }

    /// `n` received bytes went on: the peer may send that many more.
    fn consumed(&mut self, n: usize) {
        self.slot.received += n as u64;
        // Fails only when the stream is already gone, which the next poll reports.
        let _ = self.recv.flow_control().release_capacity(n);
    }

    /// Sends END_STREAM, once.
    fn end(&mut self) -> io::Result<()> {
        if !self.ended {
            self.send.send_data(Bytes::new(), true).map_err(h2_to_io)?;
            self.ended = true;
        }
        Ok(())
    }
}

impl AsyncRead for Tunnel {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        while this.pending.is_empty() {
            match ready!(this.recv.poll_data(cx)) {
                Some(Ok(data)) => this.pending = data,
                Some(Err(e)) if !is_orderly(&e) => return Poll::Ready(Err(h2_to_io(e))),
                _ => return Poll::Ready(Ok(())),
            }
        }
        let n = this.pending.len().min(buf.remaining());
        buf.put_slice(&this.pending[..n]);
        this.pending.advance(n);
        this.consumed(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Tunnel {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let this = self.get_mut();
        let room = ready!(this.poll_room(cx, buf.len()))?;
        let n = room.min(buf.len());
        this.send.send_data(Bytes::copy_from_slice(&buf[..n]), false).map_err(h2_to_io)?;
        this.slot.sent += n as u64;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The connection task writes what h2 holds.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.get_mut().end())
    }
}

/// A reset that ends a stream without fault (the peer is done, or cancelled).
fn is_orderly(e: &h2::Error) -> bool {
    matches!(e.reason(), Some(Reason::NO_ERROR | Reason::CANCEL))
}

fn h2_to_io(e: h2::Error) -> io::Error {
    if e.is_io() {
        e.into_io().unwrap_or_else(|| io::ErrorKind::BrokenPipe.into())
    } else {
        io::Error::other(e)
    }
}
