//! Copying bytes both ways between two streams, with the buffer size the TCP,
//! passthrough, HBONE and upgrade relays share.

use tokio::io::{AsyncRead, AsyncWrite};

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
