//! Byte relays for the TCP and passthrough listeners.

use tokio::io::{AsyncRead, AsyncWrite};

use crate::metrics::{Listener, Metrics};
use crate::upstream::Dialed;

/// Copies both ways until both sides have closed (half-close is honoured). Returns bytes
/// sent upstream (plus `already_sent`) and bytes sent back.
pub async fn relay<A>(
    metrics: &Metrics,
    listener: Listener,
    down: &mut A,
    up: &mut Dialed,
    already_sent: u64,
) -> (u64, u64)
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let copied = match up {
        Dialed::Tcp(s) => copy(down, s).await,
        Dialed::Tunnel(t) => t.relay(down).await,
    };
    let (to_up, to_down) = copied.unwrap_or((0, 0));
    let (up_c, down_c) = metrics.bytes(listener);
    up_c.inc_by(to_up + already_sent);
    down_c.inc_by(to_down);
    (to_up + already_sent, to_down)
}

/// Relay buffer per direction. tokio's default (8 KiB) halves TCP throughput compared
/// with 64 KiB on loopback (bench/RESULTS.md, M6).
pub const RELAY_BUFFER: usize = 64 * 1024;

/// `copy_bidirectional` with [`RELAY_BUFFER`]-sized buffers.
pub async fn copy<A, B>(a: &mut A, b: &mut B) -> std::io::Result<(u64, u64)>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    tokio::io::copy_bidirectional_with_sizes(a, b, RELAY_BUFFER, RELAY_BUFFER).await
}
