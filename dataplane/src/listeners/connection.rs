//! One accepted connection: the TLS handshake, then HTTP/1.1 or HTTP/2.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::coalesce::Coalesce;
use crate::drain::Watch;
use crate::prefixed::Inbound;
use crate::proxy::{self, ConnInfo};
use crate::Shared;

/// Concurrent streams per client HTTP/2 connection.
const H2_MAX_STREAMS: u32 = 250;
/// hyper's smallest HTTP/1.1 read buffer.
const MIN_HEAD_BYTES: usize = 8192;
/// PING interval on quiet client HTTP/2 connections.
const H2_KEEPALIVE: Duration = Duration::from_secs(30);
/// An HTTPS connection: the TLS handshake, then HTTP/2 or HTTP/1.1 as ALPN says.
///
/// An idle connection costs what its task holds, so the pieces are sized with care: the
/// handshake's state is boxed and freed once done, and what serves the connection
/// afterwards is built by plain functions that move the TLS stream straight into a boxed
/// connection (an async function keeps every argument for its whole life).
pub(super) async fn serve_https(shared: Arc<Shared>, stream: Inbound, info: ConnInfo, drain: Watch) {
    let Some((tls, info)) = tls_handshake(&shared, stream, info).await else { return };
    serve_tls(shared, tls, info, drain).await;
}

/// The TLS handshake of an HTTPS connection, within `--handshake-timeout`; `info` gains
/// the SNI and the client certificate.
async fn tls_handshake(
    shared: &Shared,
    stream: Inbound,
    mut info: ConnInfo,
) -> Option<(tokio_rustls::server::TlsStream<Inbound>, ConnInfo)> {
    let choice = {
        let cfg = shared.config.load();
        cfg.tables(info.gateway_port).map(|t| TlsChoice {
            tls: Arc::clone(&t.tls),
            by_hello: cfg.chooses_by_hello(t).then(|| shared.config.load_full()),
        })
    };
    let tables = choice?;
    let port = info.gateway_port;
    let handshake = Box::pin(async move {
        match tables.by_hello {
            // Hosts that ask for client certificates have configs of their own, and so do
            // ACME TLS-ALPN-01 validations: read the ClientHello, then take its config.
            Some(cfg) => {
                let acceptor = tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream);
                let start = acceptor.await?;
                let hello = start.client_hello();
                let chosen = cfg.tls_for_hello(port, hello.server_name(), hello.alpn().into_iter().flatten());
                start.into_stream(chosen.unwrap_or(tables.tls)).await
            }
            None => tokio_rustls::TlsAcceptor::from(tables.tls).accept(stream).await,
        }
    });
    let tls = match tokio::time::timeout(shared.opts.timeouts.handshake, handshake).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            shared.metrics.handshake(false);
            tracing::debug!(client = %info.client, error = %e, "TLS handshake failed");
            return None;
        }
        Err(_) => {
            shared.metrics.handshake(false);
            tracing::debug!(client = %info.client, "TLS handshake timed out");
            return None;
        }
    };
    shared.metrics.handshake(true);
    let conn = tls.get_ref().1;
    info.sni = conn.server_name().map(Arc::from);
    info.client_cert = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|c| wharf_model::PeerCertificate::new(c))
        .map(Arc::new);
    Some((tls, info))
}

/// What serves a connection once its TLS handshake is done, boxed: the task that awaits it
/// keeps only the pointer.
fn serve_tls(
    shared: Arc<Shared>,
    mut tls: tokio_rustls::server::TlsStream<Inbound>,
    info: ConnInfo,
    drain: Watch,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    let alpn = tls.get_ref().1.alpn_protocol();
    if alpn == Some(crate::acme::ACME_TLS_ALPN) {
        // A TLS-ALPN-01 validation: the handshake was the answer (RFC 8737 §3).
        shared.metrics.acme_answered(crate::metrics::AcmeChallenge::TlsAlpn01);
        tracing::info!(client = %info.client, sni = ?info.sni, "answered an ACME TLS-ALPN-01 validation");
        return Box::pin(async move {
            let _ = tokio::io::AsyncWriteExt::shutdown(&mut tls).await;
        });
    }
    // HTTP/2 over TLS is negotiated by ALPN (RFC 9113 §3.3); without it, HTTP/1.1.
    if alpn == Some(b"h2") {
        Box::pin(serve_h2(shared, tls, info, drain))
    } else {
        Box::pin(serve_h1(shared, tls, info, drain))
    }
}

/// The HTTPS config of a port, and the whole config when some of its hosts ask for client
/// certificates or an ACME TLS-ALPN-01 challenge is answered (then each ClientHello picks
/// its config).
struct TlsChoice {
    tls: Arc<rustls::ServerConfig>,
    by_hello: Option<Arc<crate::config::CompiledConfig>>,
}

/// A cleartext connection: HTTP/1.1, or HTTP/2 with prior knowledge (h2c), told apart by
/// the first bytes.
pub(super) fn serve_http<I>(shared: Arc<Shared>, io: I, info: ConnInfo, drain: Watch) -> impl Future<Output = ()> + Send
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = &shared.opts.limits;
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(shared.opts.timeouts.client_idle)
        .keep_alive(true)
        .max_buf_size(limits.max_header_bytes.max(MIN_HEAD_BYTES))
        .max_headers(limits.max_headers);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_header_list_size(header_list_size(limits))
        .keep_alive_interval(Some(H2_KEEPALIVE));
    // HTTP/1.1 times idle connections with its header read timeout; h2c needs this.
    let activity = crate::drain::Activity::new();
    let svc = http_service(&shared, info, &drain, Some(&activity));
    let conn = Box::pin(builder.serve_connection_with_upgrades(TokioIo::new(io), svc).into_owned());
    let max_age = limits.max_connection_age;
    let idle = Some((shared.opts.timeouts.client_idle, activity));
    async move {
        let ended = crate::drain::serve_connection(conn, drain, max_age, false, idle).await;
        count_head_too_large(&shared, ended);
    }
}

/// HTTP/1.1 over TLS.
fn serve_h1<I>(shared: Arc<Shared>, io: I, info: ConnInfo, drain: Watch) -> impl Future<Output = ()> + Send
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = &shared.opts.limits;
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(shared.opts.timeouts.client_idle)
        .keep_alive(true)
        .max_buf_size(limits.max_header_bytes.max(MIN_HEAD_BYTES))
        .max_headers(limits.max_headers);
    let svc = http_service(&shared, info, &drain, None);
    let conn = Box::pin(builder.serve_connection(TokioIo::new(io), svc).with_upgrades());
    let max_age = limits.max_connection_age;
    async move {
        let ended = crate::drain::serve_connection(conn, drain, max_age, false, None).await;
        count_head_too_large(&shared, ended);
    }
}

/// Gives each response header value a buffer of its own. A value read from a backend is a
/// slice of that connection's read buffer (8 KiB or more), and HTTP/2's header compression
/// keeps the values it indexes for the life of the connection: on an idle connection those
/// slices would pin the whole buffer.
fn detach_header_values(headers: &mut http::HeaderMap) {
    for value in headers.values_mut() {
        if let Ok(mut own) = http::HeaderValue::from_bytes(value.as_bytes()) {
            own.set_sensitive(value.is_sensitive());
            *value = own;
        }
    }
}

/// What one request of an HTTP/1.1 (or sniffed cleartext) connection turns into.
type Answer =
    std::pin::Pin<Box<dyn Future<Output = Result<http::Response<proxy::Body>, std::convert::Infallible>> + Send>>;

/// The service of an HTTP/1.1 (or sniffed cleartext) connection. Its future is boxed:
/// hyper keeps a slot the size of the service's future for as long as the connection
/// lives, idle or not, while a boxed one is freed with its response.
/// With `activity`, each request counts as in flight there until its response is ready.
fn http_service(
    shared: &Arc<Shared>,
    info: ConnInfo,
    drain: &Watch,
    activity: Option<&Arc<crate::drain::Activity>>,
) -> impl hyper::service::Service<
    http::Request<hyper::body::Incoming>,
    Response = http::Response<proxy::Body>,
    Error = std::convert::Infallible,
    Future = Answer,
> + Clone {
    let s = Arc::clone(shared);
    let closing = drain.clone();
    let activity = activity.cloned();
    service_fn(move |req: http::Request<hyper::body::Incoming>| -> Answer {
        let http1 = req.version() < http::Version::HTTP_2;
        let busy = activity.as_ref().map(crate::drain::Activity::begin);
        let answer = proxy::handle(Arc::clone(&s), info.clone(), req);
        let closing = closing.clone();
        Box::pin(async move {
            let mut resp = answer.await?;
            drop(busy);
            // While closing, each HTTP/1.1 response asks its client to reconnect (through
            // the Service, to a replica that stays); an upgrade keeps its connection.
            if http1 && closing.is_closing() && resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
                resp.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
            }
            Ok(resp)
        })
    })
}

/// hyper refuses an oversized HTTP/1.1 request head itself (431) and ends the connection
/// with this error; count it with the other refusals.
fn count_head_too_large(shared: &Shared, ended: Result<(), Box<dyn std::error::Error + Send + Sync>>) {
    if let Err(e) = ended {
        if e.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_parse_too_large) {
            shared.metrics.rejected(crate::reasons::Rejected::HeaderTooLarge);
        }
    }
}

fn header_list_size(limits: &crate::Limits) -> u32 {
    u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX)
}

/// HTTP/2 negotiated by ALPN: no protocol sniffing, and the responses of many streams
/// share TLS records and system calls (see [`Coalesce`]).
fn serve_h2<I>(shared: Arc<Shared>, io: I, info: ConnInfo, drain: Watch) -> impl Future<Output = ()> + Send
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_header_list_size(header_list_size(&shared.opts.limits))
        .keep_alive_interval(Some(H2_KEEPALIVE));
    let s = Arc::clone(&shared);
    let activity = crate::drain::Activity::new();
    let counted = Arc::clone(&activity);
    let svc = service_fn(move |req| {
        let busy = counted.begin();
        let answer = proxy::handle(Arc::clone(&s), info.clone(), req);
        async move {
            let mut resp = answer.await?;
            drop(busy);
            detach_header_values(resp.headers_mut());
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    let conn = Box::pin(builder.serve_connection(TokioIo::new(Coalesce::new(io)), svc));
    let max_age = shared.opts.limits.max_connection_age;
    let idle = Some((shared.opts.timeouts.client_idle, activity));
    async move {
        let _ = crate::drain::serve_connection(conn, drain, max_age, true, idle).await;
    }
}

#[cfg(test)]
mod tests {
    use super::detach_header_values;

    #[test]
    fn response_header_values_stop_sharing_the_backends_read_buffer() {
        // What hyper hands over: values that are slices of the connection's read buffer.
        let read_buffer = bytes::Bytes::from(vec![b'x'; 8192]);
        let range = read_buffer.as_ptr() as usize..read_buffer.as_ptr() as usize + read_buffer.len();
        let mut headers = http::HeaderMap::new();
        let mut token = http::HeaderValue::from_maybe_shared(read_buffer.slice(0..10)).unwrap();
        token.set_sensitive(true);
        headers.insert("server", http::HeaderValue::from_maybe_shared(read_buffer.slice(10..20)).unwrap());
        headers.append("set-cookie", token);
        detach_header_values(&mut headers);
        for value in headers.values() {
            assert!(!range.contains(&(value.as_bytes().as_ptr() as usize)), "still a slice of the read buffer");
            assert_eq!(value.as_bytes(), b"xxxxxxxxxx");
        }
        assert!(headers["set-cookie"].is_sensitive());
        assert!(!headers["server"].is_sensitive());
    }
}
