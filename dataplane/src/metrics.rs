//! Prometheus metrics of the data plane. Label values come from enums; per-route handles are
//! made when a snapshot is compiled and look their labels up once, on the route's first
//! request.

use std::sync::{Arc, OnceLock};

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::reasons::{Rejected, UpstreamError};

/// Which certificate a TLS handshake got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SniMatch {
    /// An exact TLS host.
    Exact,
    /// A wildcard TLS host.
    Wildcard,
    /// No TLS host matched (or no SNI): the default certificate.
    Default,
}

/// The listeners, as metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// Plain HTTP.
    Http,
    /// HTTPS (TLS terminated).
    Https,
    /// TLS passthrough.
    Passthrough,
    /// Plain TCP.
    Tcp,
    /// HBONE inbound.
    Hbone,
}

/// An ACME challenge type the data plane answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcmeChallenge {
    /// HTTP-01, on the HTTP listeners.
    Http01,
    /// TLS-ALPN-01, on the HTTPS listeners.
    TlsAlpn01,
}

impl AcmeChallenge {
    const ALL: [AcmeChallenge; 2] = [AcmeChallenge::Http01, AcmeChallenge::TlsAlpn01];

    /// Stable label value.
    pub fn label(self) -> &'static str {
        match self {
            AcmeChallenge::Http01 => "http-01",
            AcmeChallenge::TlsAlpn01 => "tls-alpn-01",
        }
    }
}

impl Listener {
    /// Stable label value.
    pub fn label(self) -> &'static str {
        match self {
            Listener::Http => "http",
            Listener::Https => "https",
            Listener::Passthrough => "passthrough",
            Listener::Tcp => "tcp",
            Listener::Hbone => "hbone",
        }
    }
}

/// All data-plane metrics, registered once.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    duration: HistogramVec,
    handshakes: [IntCounter; 2],
    mirrored: [IntCounter; 2],
    sni_match: [IntCounter; 3],
    active: IntGaugeVec,
    upstream_errors: [IntCounter; 10],
    /// Live snapshot version.
    pub config_version: IntGauge,
    /// Snapshots applied.
    pub config_applies: IntCounter,
    /// Snapshots rejected.
    pub config_rejects: IntCounter,
    /// Passthrough connections closed because no route matched their SNI.
    pub passthrough_unknown_sni: IntCounter,
    rate_limited: IntCounter,
    upstream_retries: IntCounter,
    bytes: IntCounterVec,
    hbone_tunnels: IntCounterVec,
    /// Open HBONE tunnels (both directions).
    pub hbone_active: IntGauge,
    /// Pooled HBONE client connections.
    pub hbone_pooled: IntGauge,
    hbone_bytes: IntCounterVec,
    mesh_cert_requests: IntCounterVec,
    rejected: IntCounterVec,
    refused: IntCounterVec,
    /// Resident memory of the process.
    pub memory_resident: IntGauge,
    /// Memory in use, which admission by memory compares with the watermark.
    pub memory_in_use: IntGauge,
    /// The memory watermark in bytes (0: off).
    pub memory_watermark: IntGauge,
    /// Expiry of the gateway's mesh certificate, Unix seconds (0: none loaded).
    pub mesh_cert_expiry: IntGauge,
    acme_answers: [IntCounter; 2],
    acme_orders: IntCounterVec,
    acme_expiry: IntGaugeVec,
}

/// Per-route handles. The series of a route are made on its first request, so a config
/// of many routes costs no metric memory (and `/metrics` no lines) for routes without
/// traffic.
#[derive(Debug, Clone)]
pub struct RouteMetrics(Arc<RouteSeries>);

#[derive(Debug)]
struct RouteSeries {
    route: String,
    requests: IntCounterVec,
    duration: HistogramVec,
    /// Made on the first request: most routes of a large config see none for long.
    made: OnceLock<Box<MadeSeries>>,
}

#[derive(Debug)]
struct MadeSeries {
    /// By status class, each made on its first request.
    by_class: [OnceLock<IntCounter>; 5],
    latency: Histogram,
}

impl RouteMetrics {
    /// The route label: `namespace/name` of the object that defined the route.
    pub fn route(&self) -> &str {
        &self.0.route
    }

    /// Counts one finished request.
    pub fn observe(&self, status: u16, seconds: f64) {
        let s = &*self.0;
        let class = usize::from((status / 100).clamp(1, 5)) - 1;
        let code = ["1xx", "2xx", "3xx", "4xx", "5xx"][class];
        let made = s.made.get_or_init(|| {
            let latency = s.duration.with_label_values(&[s.route.as_str()]);
            Box::new(MadeSeries { by_class: Default::default(), latency })
        });
        made.by_class[class].get_or_init(|| s.requests.with_label_values(&[s.route.as_str(), code])).inc();
        made.latency.observe(seconds);
    }
}

/// Makes metrics, each registered as it is made (none can be left out of the registry).
struct Registering<'r>(&'r Registry);

impl Registering<'_> {
    fn register<C: prometheus::core::Collector + Clone + 'static>(&self, c: C) -> prometheus::Result<C> {
        self.0.register(Box::new(c.clone()))?;
        Ok(c)
    }

    fn counter(&self, name: &str, help: &str) -> prometheus::Result<IntCounter> {
        self.register(IntCounter::new(name, help)?)
    }

    fn gauge(&self, name: &str, help: &str) -> prometheus::Result<IntGauge> {
        self.register(IntGauge::new(name, help)?)
    }

    fn counters(&self, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<IntCounterVec> {
        self.register(IntCounterVec::new(Opts::new(name, help), labels)?)
    }

    fn gauges(&self, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<IntGaugeVec> {
        self.register(IntGaugeVec::new(Opts::new(name, help), labels)?)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Metrics {
        match Self::registered(Registry::new()) {
            Ok(m) => m,
            // Only reachable with a malformed metric definition below, which tests catch.
            Err(e) => panic!("metric definitions are invalid: {e}"),
        }
    }

    /// Every metric, each registered in `registry` as it is made.
    fn registered(registry: Registry) -> prometheus::Result<Metrics> {
        let r = Registering(&registry);
        let handshakes =
            r.counters("wharf_tls_handshakes_total", "TLS handshakes by listener and result", &["listener", "result"])?;
        let mirrored = r.counters(
            "wharf_mirrored_requests_total",
            "Mirrored copies of requests by result (ok: answered)",
            &["result"],
        )?;
        let sni = r.counters(
            "wharf_tls_certificate_selections_total",
            "Certificates chosen by SNI, by match kind (exact, wildcard, default)",
            &["match"],
        )?;
        let upstream = r.counters("wharf_upstream_errors_total", "Upstream failures by reason", &["reason"])?;
        let acme_answers = r.counters(
            "wharf_acme_challenges_answered_total",
            "ACME validation requests answered, by challenge type (http-01, tls-alpn-01)",
            &["type"],
        )?;
        let rejected = r.counters(
            "wharf_requests_rejected_total",
            "Requests the gateway refused itself (400, 413, 414, 421, 431), by reason",
            &["reason"],
        )?;
        for reason in Rejected::ALL {
            rejected.with_label_values(&[reason.reason()]);
        }
        Ok(Metrics {
            requests: r.counters(
                "wharf_http_requests_total",
                "HTTP requests by route (namespace/name of the Ingress) and status class",
                &["route", "code"],
            )?,
            duration: r.register(HistogramVec::new(
                HistogramOpts::new("wharf_http_request_duration_seconds", "Time to response headers, by route")
                    .buckets(vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
                &["route"],
            )?)?,
            handshakes: ["ok", "error"].map(|result| handshakes.with_label_values(&["https", result])),
            mirrored: ["ok", "error"].map(|result| mirrored.with_label_values(&[result])),
            sni_match: ["exact", "wildcard", "default"].map(|k| sni.with_label_values(&[k])),
            active: r.gauges("wharf_active_connections", "Open downstream connections by listener", &["listener"])?,
            upstream_errors: UpstreamError::ALL.map(|e| upstream.with_label_values(&[e.reason()])),
            config_version: r.gauge("wharf_config_version", "Version of the live config snapshot (0: none yet)")?,
            config_applies: r.counter("wharf_config_applies_total", "Config snapshots applied")?,
            rate_limited: r.counter(
                "wharf_rate_limited_requests_total",
                "Requests answered 503 because their client was over a route's limit (limit-rps, limit-rpm, limit-connections)",
            )?,
            upstream_retries: r.counter(
                "wharf_upstream_retries_total",
                "Requests sent again to another endpoint after the first failed as the route's proxy-next-upstream asks",
            )?,
            config_rejects: r.counter("wharf_config_rejects_total", "Config snapshots rejected (the previous one kept serving)")?,
            passthrough_unknown_sni: r.counter(
                "wharf_passthrough_unknown_sni_total",
                "Passthrough connections closed for an SNI no route matches",
            )?,
            bytes: r.counters(
                "wharf_proxied_bytes_total",
                "Bytes relayed by the TCP and passthrough listeners, by direction",
                &["listener", "direction"],
            )?,
            hbone_tunnels: r.counters(
                "wharf_hbone_tunnels_total",
                "HBONE tunnels by direction (outbound, inbound) and result (ok or the failure reason)",
                &["direction", "result"],
            )?,
            hbone_active: r.gauge("wharf_hbone_active_tunnels", "Open HBONE tunnels")?,
            hbone_pooled: r.gauge("wharf_hbone_pooled_connections", "Pooled HBONE client connections")?,
            hbone_bytes: r.counters(
                "wharf_hbone_bytes_total",
                "Bytes through HBONE tunnels, by tunnel direction (outbound, inbound) and byte direction (upstream, downstream)",
                &["tunnel", "direction"],
            )?,
            mesh_cert_requests: r.counters(
                "wharf_mesh_certificate_requests_total",
                "Certificate requests to the Istio CA by result (ok or the failure reason)",
                &["result"],
            )?,
            refused: r.counters(
                "wharf_connections_refused_total",
                "Connections closed at accept, by listener and reason (max_connections: the listener was full; memory: memory in use was above --memory-watermark; proxy_protocol: no valid PROXY protocol header in time)",
                &["listener", "reason"],
            )?,
            memory_resident: r.gauge("wharf_memory_resident_bytes", "Resident memory of the process, sampled every 100 ms")?,
            memory_in_use: r.gauge(
                "wharf_memory_in_use_bytes",
                "Memory in use (allocated and not freed), sampled every 100 ms; compared with --memory-watermark",
            )?,
            memory_watermark: r.gauge(
                "wharf_memory_watermark_bytes",
                "Resident memory at which new connections are refused (--memory-watermark; 0: off)",
            )?,
            rejected,
            mesh_cert_expiry: r.gauge(
                "wharf_mesh_certificate_expiry_timestamp_seconds",
                "Expiry of the gateway's mesh certificate, Unix seconds (0: no mesh identity loaded)",
            )?,
            acme_answers: AcmeChallenge::ALL.map(|c| acme_answers.with_label_values(&[c.label()])),
            acme_orders: r.counters(
                "wharf_acme_orders_total",
                "ACME orders by result (issued, or why they failed: refused, rate_limited, unreachable, invalid, publish, not_managed, store, settings)",
                &["result"],
            )?,
            acme_expiry: r.gauges(
                "wharf_acme_certificate_expiry_seconds",
                "Expiry of each certificate Wharf obtains from ACME, Unix seconds, by Secret (namespace/name)",
                &["secret"],
            )?,
            registry,
        })
    }

    /// Handles for one route label.
    pub fn route(&self, route: &str) -> RouteMetrics {
        RouteMetrics(Arc::new(RouteSeries {
            route: route.to_owned(),
            requests: self.requests.clone(),
            duration: self.duration.clone(),
            made: OnceLock::new(),
        }))
    }

    /// Counts an upstream failure.
    pub fn upstream_error(&self, e: UpstreamError) {
        let i = UpstreamError::ALL.iter().position(|x| *x == e).unwrap_or(0);
        self.upstream_errors[i].inc();
    }

    /// Counts a mirrored request: answered, or not.
    pub fn mirror(&self, ok: bool) {
        self.mirrored[usize::from(!ok)].inc();
    }

    /// Counts a certificate selection.
    pub fn sni_match(&self, m: SniMatch) {
        self.sni_match[m as usize].inc();
    }

    /// Counts a TLS handshake Wharf terminates: on an HTTPS listener, or for a TLS route in
    /// mode Terminate (both under the `https` label).
    pub fn handshake(&self, ok: bool) {
        self.handshakes[usize::from(!ok)].inc();
    }

    /// The active-connection gauge of a listener.
    pub fn active(&self, listener: Listener) -> IntGauge {
        self.active.with_label_values(&[listener.label()])
    }

    /// Byte counters of a listener (to the upstream, to the client).
    pub fn bytes(&self, listener: Listener) -> (IntCounter, IntCounter) {
        (
            self.bytes.with_label_values(&[listener.label(), "upstream"]),
            self.bytes.with_label_values(&[listener.label(), "downstream"]),
        )
    }

    /// Counts an HBONE tunnel attempt.
    pub fn hbone_tunnel(&self, direction: &str, result: &str) {
        self.hbone_tunnels.with_label_values(&[direction, result]).inc();
    }

    /// Adds the bytes a closed tunnel carried (`tunnel`: outbound or inbound).
    pub fn hbone_bytes(&self, tunnel: &str, to_upstream: u64, to_client: u64) {
        self.hbone_bytes.with_label_values(&[tunnel, "upstream"]).inc_by(to_upstream);
        self.hbone_bytes.with_label_values(&[tunnel, "downstream"]).inc_by(to_client);
    }

    /// Counts a connection closed at accept: `reason` is `max_connections` or `memory`.
    pub fn connection_refused(&self, listener: Listener, reason: &str) {
        self.refused.with_label_values(&[listener.label(), reason]).inc();
    }

    /// Open connections of a listener.
    pub fn open_connections(&self, listener: Listener) -> i64 {
        self.active.with_label_values(&[listener.label()]).get()
    }

    /// Counts a request sent again to another endpoint (`proxy-next-upstream`).
    pub fn upstream_retry(&self) {
        self.upstream_retries.inc();
    }

    /// Counts a request refused for its client's rate or concurrency.
    pub fn rate_limited(&self) {
        self.rate_limited.inc();
    }

    /// Counts a request refused before routing.
    pub fn rejected(&self, why: Rejected) {
        self.rejected.with_label_values(&[why.reason()]).inc();
    }

    /// Counts an ACME validation request answered.
    pub fn acme_answered(&self, challenge: AcmeChallenge) {
        self.acme_answers[challenge as usize].inc();
    }

    /// Counts an ACME order by result.
    pub fn acme_order(&self, result: &str) {
        self.acme_orders.with_label_values(&[result]).inc();
    }

    /// Sets the expiry (Unix seconds) of each certificate from ACME, by Secret; the
    /// Secrets no longer managed leave the metric.
    pub fn acme_expiries(&self, expiries: &std::collections::BTreeMap<String, i64>) {
        self.acme_expiry.reset();
        for (secret, at) in expiries {
            self.acme_expiry.with_label_values(&[secret]).set(*at);
        }
    }

    /// Counts a certificate request to the Istio CA (`result`: ok or the failure reason).
    pub fn mesh_certificate_request(&self, result: &str) {
        self.mesh_cert_requests.with_label_values(&[result]).inc();
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_has_series_once_it_had_requests() {
        let m = Metrics::new();
        let (idle, busy) = (m.route("web/idle"), m.route("web/busy"));
        let text = || m.render();
        assert!(!text().contains("web/"), "no series before any request");

        busy.observe(204, 0.003);
        busy.clone().observe(503, 0.2);
        busy.observe(200, 0.003);
        let t = text();
        assert!(t.contains("wharf_http_requests_total{code=\"2xx\",route=\"web/busy\"} 2\n"), "{t}");
        assert!(t.contains("wharf_http_requests_total{code=\"5xx\",route=\"web/busy\"} 1\n"), "{t}");
        assert!(t.contains("wharf_http_request_duration_seconds_bucket{route=\"web/busy\",le=\"0.005\"} 2\n"), "{t}");
        assert!(t.contains("wharf_http_request_duration_seconds_count{route=\"web/busy\"} 3\n"), "{t}");
        assert!(!t.contains("code=\"4xx\"") && !t.contains("web/idle"), "{t}");
        // The handles of a later config for the same route count on.
        m.route("web/busy").observe(200, 0.003);
        assert!(text().contains("wharf_http_requests_total{code=\"2xx\",route=\"web/busy\"} 3\n"));
        idle.observe(404, 0.001);
        assert!(text().contains("wharf_http_requests_total{code=\"4xx\",route=\"web/idle\"} 1\n"));
    }
}
