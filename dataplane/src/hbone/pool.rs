//! The HBONE client's pooled HTTP/2 connections and the stream slots tunnels hold on
//! them: a slot given back (dropped) frees its stream and records what it carried.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use super::MAX_STREAMS_PER_CONNECTION;
use crate::metrics::Metrics;

#[derive(Debug)]
pub(super) struct Pooled {
    pub(super) sender: h2::client::SendRequest<Bytes>,
    /// Set when the connection has ended.
    pub(super) closed: Arc<AtomicBool>,
    pub(super) streams: AtomicUsize,
    pub(super) last_used_ms: AtomicU64,
}

impl Pooled {
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(super) fn try_reserve(&self) -> bool {
        !self.is_closed()
            && self
                .streams
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < MAX_STREAMS_PER_CONNECTION).then_some(n + 1)
                })
                .is_ok()
    }
}

/// A stream slot on a pooled connection, and what the tunnel carried.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) conn: Arc<Pooled>,
    pub(super) metrics: Metrics,
    pub(super) sent: u64,
    pub(super) received: u64,
    pub(super) span: tracing::Span,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.conn.streams.fetch_sub(1, Ordering::AcqRel);
        self.conn.last_used_ms.store(now_ms(), Ordering::Relaxed);
        self.metrics.hbone_active.dec();
        self.metrics.hbone_bytes("outbound", self.sent, self.received);
        self.span.in_scope(|| tracing::debug!(sent = self.sent, received = self.received, "HBONE tunnel closed"));
    }
}

/// Milliseconds since the first call: the clock of idle connections.
pub(super) fn now_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_millis() as u64
}
