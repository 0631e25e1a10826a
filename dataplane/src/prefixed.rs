//! A stream with bytes put back in front.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// An accepted connection: what was read of it before it was served (a PROXY protocol
/// header's trailing bytes) comes first.
pub type Inbound = Prefixed<TcpStream>;

/// A stream that first yields bytes already read from it (a ClientHello read to route by
/// SNI, a client's bytes read with its PROXY protocol header), so what follows can start
/// over from them.
#[derive(Debug)]
pub struct Prefixed<S> {
    head: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    /// `inner`, its first bytes `head`.
    pub fn new(head: Vec<u8>, inner: S) -> Self {
        Prefixed { head, at: 0, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.at < this.head.len() {
            let n = buf.remaining().min(this.head.len() - this.at);
            buf.put_slice(&this.head[this.at..this.at + n]);
            this.at += n;
            if this.at == this.head.len() {
                this.head = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
