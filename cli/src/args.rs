//! Command-line arguments. Every flag also reads a `WHARF_*` environment variable.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use wharf_dataplane::memory::Watermark;
use wharf_dataplane::proxy::normalize::EscapedSlashes;

use crate::logging::LogFormat;

/// Wharf: a Kubernetes edge gateway. Many certificates on one IP by SNI, HTTP routing,
/// TLS passthrough, TCP.
#[derive(Debug, Parser)]
#[command(name = "wharf", version, about)]
pub struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "text", env = "WHARF_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve Kubernetes objects (Ingress, IngressClass, Secret, Service, EndpointSlice)
    /// read from YAML files, reloading them when they change. No cluster needed.
    Run(Box<RunArgs>),
    /// Run as an Ingress controller against a Kubernetes API server (in-cluster config,
    /// `--kubeconfig` or `KUBECONFIG`): watches, data plane, status, Events, leader election.
    Controller(Box<ControllerArgs>),
    /// A small HTTP backend that answers with a JSON description of each request.
    Echo(EchoArgs),
    /// Report what Wharf does with the Ingresses ingress-nginx serves (the same,
    /// differently, or not at all), from files or a cluster; or print them rewritten for
    /// Wharf's class (`--output yaml`).
    Migrate(MigrateArgs),
}

/// `wharf migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Files or directories of multi-document YAML to read instead of a cluster
    /// (repeatable; Services and Secrets among them are used too).
    #[arg(short = 'f', long = "file", value_delimiter = ',')]
    pub files: Vec<PathBuf>,
    /// Kubeconfig file for reading a cluster (default: in-cluster config, else
    /// `KUBECONFIG`, else ~/.kube/config).
    #[arg(long, env = "WHARF_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Only this namespace of the cluster (default: all).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// The class of the Ingresses to migrate (Ingresses without a class are included).
    #[arg(long, default_value = "nginx")]
    pub from_class: String,
    /// Wharf's class.
    #[arg(long, default_value = "wharf")]
    pub to_class: String,
    /// `report` (what Wharf will do, per Ingress and annotation) or `yaml` (the Ingresses
    /// with Wharf's class, ready for `kubectl apply -f -`).
    #[arg(short = 'o', long, value_enum, default_value = "report")]
    pub output: MigrateOutput,
    /// In the YAML, name the annotations Wharf implements `wharf.dev/NAME`.
    #[arg(long)]
    pub rename_annotations: bool,
    /// As the controller will run: read `nginx.ingress.kubernetes.io/` annotations.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub nginx_annotations: bool,
    /// As the controller will run: what a snippet does to its Ingress.
    #[arg(long, value_enum, default_value = "skip-ingress")]
    pub snippet_annotations: SnippetMode,
    /// ingress-nginx's ConfigMap (`NAMESPACE/NAME`, in the cluster or among the files):
    /// its global settings are reported, and `-o values` prints the chart values that keep
    /// them.
    #[arg(long, value_parser = parse_ns_name, default_value = wharf_controller::nginx_configmap::DEFAULT_CONFIGMAP)]
    pub configmap: (String, String),
}

/// `wharf migrate --output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MigrateOutput {
    /// What Wharf will do.
    Report,
    /// The Ingresses for Wharf.
    Yaml,
    /// Chart values that keep the global settings of ingress-nginx's ConfigMap.
    Values,
}

/// `wharf run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Files or directories of multi-document YAML (repeatable).
    #[arg(short = 'f', long = "file", required = true, env = "WHARF_FILES", value_delimiter = ',')]
    pub files: Vec<PathBuf>,
    /// How often the files are checked for changes.
    #[arg(long, default_value = "250ms", value_parser = parse_duration, env = "WHARF_WATCH_INTERVAL")]
    pub watch_interval: Duration,
    /// Where ACME accounts, certificates and challenges are kept (needed with
    /// `--acme-issuer`); the certificates are read from it like the files.
    #[arg(long, env = "WHARF_ACME_DIR")]
    pub acme_dir: Option<PathBuf>,
    /// Data-plane and translation settings.
    #[command(flatten)]
    pub gateway: GatewayArgs,
}

/// `wharf controller`.
#[derive(Debug, Args)]
pub struct ControllerArgs {
    /// Kubeconfig file (default: in-cluster config, else `KUBECONFIG`, else ~/.kube/config).
    #[arg(long, env = "WHARF_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// `NAMESPACE/NAME` of the gateway's Service; its LoadBalancer address is written into
    /// the status of every Ingress Wharf serves.
    #[arg(long, value_parser = parse_ns_name, env = "WHARF_PUBLISH_SERVICE")]
    pub publish_service: Option<(String, String)>,
    /// IP or hostname written into Ingress status instead (repeatable).
    #[arg(long = "publish-address", env = "WHARF_PUBLISH_ADDRESSES", value_delimiter = ',')]
    pub publish_addresses: Vec<String>,
    /// Namespace of the leader-election Lease.
    #[arg(long, default_value = "default", env = "POD_NAMESPACE")]
    pub election_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "wharf-leader", env = "WHARF_ELECTION_ID")]
    pub election_id: String,
    /// This replica's identity in the election (default: the host name).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// How long the Lease is valid without renewal.
    #[arg(long, default_value = "15s", value_parser = parse_duration, env = "WHARF_LEASE_DURATION")]
    pub lease_duration: Duration,
    /// A leader that could not renew for this long stops writing.
    #[arg(long, default_value = "10s", value_parser = parse_duration, env = "WHARF_LEASE_RENEW_DEADLINE")]
    pub lease_renew_deadline: Duration,
    /// How often the Lease is renewed or tried.
    #[arg(long, default_value = "2s", value_parser = parse_duration, env = "WHARF_LEASE_RETRY")]
    pub lease_retry: Duration,
    /// How often everything is translated again without a change (so that expiring
    /// certificates are noticed).
    #[arg(long, default_value = "5m", value_parser = parse_duration, env = "WHARF_RESYNC_INTERVAL")]
    pub resync_interval: Duration,
    /// Data-plane and translation settings.
    #[command(flatten)]
    pub gateway: GatewayArgs,
}

/// Settings shared by `run` and `controller`.
#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// Listener settings.
    #[command(flatten)]
    pub listen: ListenArgs,
    /// Translation settings.
    #[command(flatten)]
    pub translate: TranslateArgs,
    /// Proxy settings.
    #[command(flatten)]
    pub proxy: ProxyArgs,
    /// Mesh (HBONE) settings.
    #[command(flatten)]
    pub mesh: MeshArgs,
    /// ACME settings.
    #[command(flatten)]
    pub acme: AcmeArgs,
}

/// Certificates from ACME.
#[derive(Debug, Args)]
pub struct AcmeArgs {
    /// An ACME issuer (repeatable): `name=NAME,directory=URL[,email=ADDRESS]
    /// [,challenge=http-01|tls-alpn-01][,profile=PROFILE][,ca-file=PEM]
    /// [,eab-kid=KID,eab-hmac-file=FILE][,renew-before=DURATION]`. With one, a TLS
    /// Secret an Ingress names gets a certificate ordered into it when it does not exist
    /// or when the Ingress says `wharf.dev/acme: "true"` (docs/acme.md).
    #[arg(long = "acme-issuer", env = "WHARF_ACME_ISSUERS", value_delimiter = ';')]
    pub issuers: Vec<wharf_controller::acme::Issuer>,
    /// The issuer of Ingresses that name none with `wharf.dev/acme-issuer` (default: the
    /// first).
    #[arg(long = "acme-default-issuer", env = "WHARF_ACME_DEFAULT_ISSUER")]
    pub default_issuer: Option<String>,
    /// The namespaces (repeatable) whose Secrets certificates are ordered into, as the
    /// RBAC lets the controller write Secrets there only; a TLS entry of another namespace
    /// gets an `AcmeNamespaceNotAllowed` Event. Default: any namespace.
    #[arg(long = "acme-namespace", env = "WHARF_ACME_NAMESPACES", value_delimiter = ',', value_parser = parse_namespace)]
    pub namespaces: Vec<String>,
    /// How long after the challenges are served by this replica the validation is asked
    /// for, so that the other replicas serve them too.
    #[arg(long = "acme-propagation-delay", default_value = "2s", value_parser = parse_duration, env = "WHARF_ACME_PROPAGATION_DELAY")]
    pub propagation_delay: Duration,
}

/// Where the listeners bind.
#[derive(Debug, Args)]
pub struct ListenArgs {
    /// Address every listener binds to.
    #[arg(long, default_value = "0.0.0.0", env = "WHARF_LISTEN_ADDRESS")]
    pub listen_address: IpAddr,
    /// HTTP port (0 turns it off).
    #[arg(long, default_value_t = 8080, env = "WHARF_HTTP_PORT")]
    pub http_port: u16,
    /// HTTPS port (0 turns it off).
    #[arg(long, default_value_t = 8443, env = "WHARF_HTTPS_PORT")]
    pub https_port: u16,
    /// TLS passthrough port (0 turns it off).
    #[arg(long, default_value_t = 15443, env = "WHARF_PASSTHROUGH_PORT")]
    pub passthrough_port: u16,
    /// Admin port: /healthz/ready, /metrics, /debug/config (0 turns it off).
    #[arg(long, default_value_t = 15021, env = "WHARF_ADMIN_PORT")]
    pub admin_port: u16,
    /// Plain TCP forwarding, `PORT=NAMESPACE/SERVICE:SERVICEPORT` (repeatable), e.g.
    /// `31400=default/db:5432`.
    #[arg(long = "tcp-service", value_parser = parse_tcp_service, env = "WHARF_TCP_SERVICES", value_delimiter = ',')]
    pub tcp_services: Vec<wharf_controller::TcpService>,
    /// The HTTPS port clients see, used in HTTP-to-HTTPS redirects (default: --https-port
    /// for `run`, 443 for `controller`).
    #[arg(long, env = "WHARF_HTTPS_REDIRECT_PORT")]
    pub https_redirect_port: Option<u16>,
}

/// How objects become config.
#[derive(Debug, Args)]
pub struct TranslateArgs {
    /// Assigns hosts to a namespace: `HOST=NAMESPACE`, HOST an exact name or `*.domain`
    /// for every name under the domain (repeatable). Only that namespace's Ingresses and
    /// edge Gateway routes serve them; without an assignment a host belongs to the
    /// namespace of its oldest claim.
    #[arg(long = "host-owner", value_parser = wharf_controller::translate::owners::Assignment::parse, env = "WHARF_HOST_OWNERS", value_delimiter = ',')]
    pub host_owners: Vec<wharf_controller::translate::owners::Assignment>,
    /// Lets Ingresses of every namespace add paths to a host, as ingress-nginx merged them
    /// (off: a host's paths come from its owner's namespace only).
    #[arg(long, env = "WHARF_MERGE_HOSTS_ACROSS_NAMESPACES")]
    pub merge_hosts_across_namespaces: bool,
    /// `spec.controller` of the IngressClasses Wharf serves.
    #[arg(long, default_value = "wharf.dev/ingress-controller", env = "WHARF_CONTROLLER_NAME")]
    pub controller_name: String,
    /// Value of the legacy `kubernetes.io/ingress.class` annotation Wharf serves.
    #[arg(long, default_value = "wharf", env = "WHARF_INGRESS_CLASS")]
    pub ingress_class: String,
    /// `NAMESPACE/NAME` of a kubernetes.io/tls Secret served when no TLS host matches the
    /// SNI (default: a self-signed certificate made at start-up).
    #[arg(long, value_parser = parse_ns_name, env = "WHARF_DEFAULT_SSL_CERTIFICATE")]
    pub default_ssl_certificate: Option<(String, String)>,
    /// Route Istio AUTO_PASSTHROUGH SNI names (`outbound_.PORT_.SUBSET_.FQDN`) on the
    /// passthrough port to every Service.
    #[arg(long, env = "WHARF_AUTO_PASSTHROUGH")]
    pub auto_passthrough: bool,
    /// Cluster DNS domain.
    #[arg(long, default_value = "cluster.local", env = "WHARF_CLUSTER_DOMAIN")]
    pub cluster_domain: String,
    /// Mesh trust domain: ambient endpoints must present
    /// `spiffe://<trust domain>/ns/<namespace>/sa/<service account>`.
    #[arg(long, default_value = "cluster.local", env = "WHARF_TRUST_DOMAIN")]
    pub trust_domain: String,
    /// `spec.controllerName` of the GatewayClasses Wharf serves.
    #[arg(long, default_value = "wharf.dev/gateway-controller", env = "WHARF_GATEWAY_CONTROLLER_NAME")]
    pub gateway_controller_name: String,
    /// IPv4 range (`a.b.c.d/len`) Gateways are bound in, one address each (the process
    /// must be able to bind them: loopback, or a range routed to the node). Without it,
    /// Gateways are accepted but not served.
    #[arg(long, value_parser = parse_address_pool, env = "WHARF_GATEWAY_ADDRESSES")]
    pub gateway_addresses: Option<wharf_controller::translate::gateway_api::AddressPool>,
    /// `NAMESPACE/NAME` of the Gateway served on Wharf's own listeners (the edge ports,
    /// at the address of Wharf's Service) instead of on an address of its own; its routes
    /// are tried before the Ingress rules.
    #[arg(long, value_parser = parse_ns_name, env = "WHARF_EDGE_GATEWAY")]
    pub edge_gateway: Option<(String, String)>,
    /// Where a listener port of the edge Gateway is served, `PORT=SOCKET` (repeatable):
    /// SOCKET is `http`, `https` or `tls` (the --http-port, --https-port or
    /// --passthrough-port listener) or `tcp[:LOCALPORT]` (a TCP socket, on PORT unless
    /// given). Default: 80=http, 443=https, 15443=tls, 31400=tcp.
    #[arg(long = "edge-port", value_parser = parse_edge_port, env = "WHARF_EDGE_PORTS", value_delimiter = ',')]
    pub edge_ports: Vec<EdgePort>,
    /// Read ingress-nginx's `nginx.ingress.kubernetes.io/NAME` annotations as well as
    /// `wharf.dev/NAME` (which wins when both are set).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "WHARF_NGINX_ANNOTATIONS")]
    pub nginx_annotations: bool,
    /// What becomes of an Ingress with a snippet annotation (`*-snippet`: raw proxy
    /// configuration, never run): `skip-ingress` (not served) or `ignore` (served without
    /// the snippet). Either way the Ingress gets a `SnippetRefused` Event.
    #[arg(long, value_enum, default_value = "skip-ingress", env = "WHARF_SNIPPET_ANNOTATIONS")]
    pub snippet_annotations: SnippetMode,
}

/// `--snippet-annotations`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SnippetMode {
    /// The Ingress is not served.
    SkipIngress,
    /// The Ingress is served without the snippet.
    Ignore,
}

/// One `--edge-port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdgePort {
    /// The listener port.
    pub port: u16,
    /// The socket that serves it.
    pub socket: EdgeSocketKind,
}

/// The socket of an `--edge-port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeSocketKind {
    /// The HTTP listener.
    Http,
    /// The HTTPS listener.
    Https,
    /// The TLS passthrough listener.
    Tls,
    /// A TCP socket on this port.
    Tcp(u16),
}

/// The `--edge-port` list when none is given.
pub const DEFAULT_EDGE_PORTS: [EdgePort; 4] = [
    EdgePort { port: 80, socket: EdgeSocketKind::Http },
    EdgePort { port: 443, socket: EdgeSocketKind::Https },
    EdgePort { port: 15443, socket: EdgeSocketKind::Tls },
    EdgePort { port: 31400, socket: EdgeSocketKind::Tcp(31400) },
];

fn parse_edge_port(s: &str) -> Result<EdgePort, String> {
    let err = || format!("{s:?} is not PORT=SOCKET with SOCKET http, https, tls or tcp[:PORT] (e.g. 80=http)");
    let (port, socket) = s.split_once('=').ok_or_else(err)?;
    let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(err)?;
    let socket = match socket {
        "http" => EdgeSocketKind::Http,
        "https" => EdgeSocketKind::Https,
        "tls" => EdgeSocketKind::Tls,
        "tcp" => EdgeSocketKind::Tcp(port),
        other => {
            let local = other.strip_prefix("tcp:").ok_or_else(err)?;
            EdgeSocketKind::Tcp(local.parse().ok().filter(|p| *p > 0).ok_or_else(err)?)
        }
    };
    Ok(EdgePort { port, socket })
}

/// A namespace name.
fn parse_namespace(s: &str) -> Result<String, String> {
    match wharf_model::is_dns_name(s) && !s.contains('.') {
        true => Ok(s.to_owned()),
        false => Err(format!("{s:?} is not a namespace name")),
    }
}

fn parse_address_pool(s: &str) -> Result<wharf_controller::translate::gateway_api::AddressPool, String> {
    wharf_controller::translate::gateway_api::AddressPool::parse(s)
}

/// Proxy behaviour.
#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// Upstream connect timeout (then 502).
    #[arg(long, default_value = "5s", value_parser = parse_duration, env = "WHARF_CONNECT_TIMEOUT")]
    pub connect_timeout: Duration,
    /// Time to the upstream's response headers (then 504).
    #[arg(long, default_value = "60s", value_parser = parse_duration, env = "WHARF_REQUEST_TIMEOUT")]
    pub request_timeout: Duration,
    /// Idle time after which pooled upstream connections are not reused.
    #[arg(long, default_value = "60s", value_parser = parse_duration, env = "WHARF_UPSTREAM_IDLE_TIMEOUT")]
    pub upstream_idle_timeout: Duration,
    /// Client connections with no request in flight for this long are closed (HTTP/1.1,
    /// and HTTP/2 with GOAWAY, its open response bodies finishing), as are those that send
    /// no request head, or no HTTP/2 preface, in this time.
    #[arg(long, default_value = "60s", value_parser = parse_duration, env = "WHARF_CLIENT_IDLE_TIMEOUT")]
    pub client_idle_timeout: Duration,
    /// How long shutdown waits for in-flight requests and connections.
    #[arg(long, default_value = "30s", value_parser = parse_duration, env = "WHARF_DRAIN_TIMEOUT")]
    pub drain_timeout: Duration,
    /// After SIGTERM, how long to keep serving while reporting not ready and asking
    /// clients to reconnect elsewhere (HTTP/1.1 `Connection: close`, HTTP/2 GOAWAY) before
    /// the drain: the time a Service needs to stop sending new connections here. Default
    /// 5s for `controller`, 0s for `run`.
    #[arg(long, value_parser = parse_duration, env = "WHARF_SHUTDOWN_DELAY")]
    pub shutdown_delay: Option<Duration>,
    /// Log one line per request.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "WHARF_ACCESS_LOG")]
    pub access_log: bool,
    /// Escaped slashes (`%2F`, `%5C`) in request paths: `keep` (forwarded as sent; refused
    /// with 400 where one hides a `..` segment), `reject` (400), or `decode` (to `/`,
    /// then normalised).
    #[arg(long, default_value = "keep", value_parser = parse_escaped_slashes, env = "WHARF_ESCAPED_SLASHES")]
    pub escaped_slashes: EscapedSlashes,
    /// Merge runs of slashes in request paths (`//a///b` is `/a/b`) before matching and
    /// forwarding.
    #[arg(long, env = "WHARF_MERGE_SLASHES")]
    pub merge_slashes: bool,
    /// Largest request head (request line and headers) in bytes: 431 beyond; also the
    /// HTTP/2 header list size. At least 8192.
    #[arg(long, default_value_t = 65536, value_parser = clap::value_parser!(u32).range(8192..), env = "WHARF_MAX_REQUEST_HEADER_BYTES")]
    pub max_request_header_bytes: u32,
    /// Most headers in one HTTP/1.1 request: 431 beyond.
    #[arg(long, default_value_t = 100, env = "WHARF_MAX_REQUEST_HEADERS")]
    pub max_request_headers: usize,
    /// Longest request target (path and query) in bytes: 414 beyond.
    #[arg(long, default_value_t = 8192, env = "WHARF_MAX_URL_BYTES")]
    pub max_url_bytes: usize,
    /// Largest request body for routes without their own limit (`wharf.dev/proxy-body-size`),
    /// like `8m`, `512k` or bytes: 413 beyond. `0` is unlimited.
    #[arg(long, default_value = "0", value_parser = parse_size, env = "WHARF_MAX_REQUEST_BODY")]
    pub max_request_body: u64,
    /// Open connections per listener; beyond, new connections are closed at once and
    /// /healthz/ready fails. 0 is unlimited.
    #[arg(long, default_value_t = 0, env = "WHARF_MAX_CONNECTIONS")]
    pub max_connections: usize,
    /// Client connections older than this are asked to close (HTTP/1.1 after the current
    /// request, HTTP/2 with GOAWAY) so clients spread over new replicas; 0 never.
    #[arg(long, default_value = "0", value_parser = parse_duration, env = "WHARF_MAX_CONNECTION_AGE")]
    pub max_connection_age: Duration,
    /// Memory in use above which new connections are refused and /healthz/ready fails,
    /// so that a flood ends in refused connections rather than the OOM killer: a
    /// percentage of the container's memory limit (`80%`; off without a limit), a size
    /// (`400Mi`), or `0` (off).
    #[arg(long, default_value = "80%", value_parser = parse_watermark, env = "WHARF_MEMORY_WATERMARK")]
    pub memory_watermark: Watermark,
    /// Every connection to the HTTP, HTTPS and TLS passthrough listeners starts with a
    /// PROXY protocol header (v1 or v2, as a load balancer sends it); its source address
    /// is the client's when it comes from a --trusted-proxy (required with this flag).
    /// Connections without one are closed.
    #[arg(long, env = "WHARF_PROXY_PROTOCOL")]
    pub proxy_protocol: bool,
    /// Addresses and networks (`10.0.0.0/8`, repeatable) of the proxies in front of
    /// Wharf: from them, `X-Forwarded-For` (the last address not in this list is the
    /// client), `X-Forwarded-Proto` and `X-Forwarded-Port` are believed; with
    /// --proxy-protocol, only their headers' addresses are.
    #[arg(long = "trusted-proxy", value_parser = parse_ip_net, env = "WHARF_TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Vec<wharf_model::IpNet>,
    /// Pass request headers whose names contain `_` on to backends (ingress-nginx's
    /// `enable-underscores-in-headers`). By default they are dropped: CGI, WSGI and Rack
    /// read `ssl_client_verify` as the `ssl-client-verify` Wharf sets.
    #[arg(long, env = "WHARF_ENABLE_UNDERSCORES_IN_HEADERS")]
    pub enable_underscores_in_headers: bool,
    /// `Strict-Transport-Security` sent on every response to a request made over HTTPS,
    /// like `max-age=31536000; includeSubDomains` (ingress-nginx's default); none unless
    /// set.
    #[arg(long, value_parser = wharf_dataplane::proxy::headers::hsts, env = "WHARF_HSTS")]
    pub hsts: Option<http::HeaderValue>,
    /// The oldest TLS version clients of the HTTPS and TLS-terminating listeners may use:
    /// 1.2 or 1.3 (TLS 1.0 and 1.1 are never offered).
    #[arg(long, default_value = "1.2", value_parser = ["1.2", "1.3"], env = "WHARF_TLS_MIN_VERSION")]
    pub tls_min_version: String,
    /// The cipher suites those clients may use, comma- or colon-separated, by IANA name
    /// (`TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`) or OpenSSL's
    /// (`ECDHE-ECDSA-AES128-GCM-SHA256`); TLS 1.3 suites are all kept unless some are
    /// named. Default: every suite rustls has (AEAD only).
    #[arg(long, value_parser = parse_ciphers, env = "WHARF_TLS_CIPHERS")]
    pub tls_ciphers: Option<CipherSuites>,
}

/// The cipher suites `--tls-ciphers` names.
#[derive(Debug, Clone)]
pub struct CipherSuites(pub Vec<rustls::SupportedCipherSuite>);

fn parse_ciphers(s: &str) -> Result<CipherSuites, String> {
    wharf_dataplane::tls::cipher_suites(s).map(CipherSuites)
}

fn parse_ip_net(s: &str) -> Result<wharf_model::IpNet, String> {
    wharf_model::IpNet::parse(s.trim()).map_err(|e| e.to_string())
}

fn parse_size(s: &str) -> Result<u64, String> {
    wharf_model::parse_size(s).ok_or_else(|| format!("{s:?} is not a size like 8m, 512k or 1024 (0: unlimited)"))
}

fn parse_watermark(s: &str) -> Result<Watermark, String> {
    s.parse()
}

fn parse_escaped_slashes(s: &str) -> Result<EscapedSlashes, String> {
    s.parse()
}

/// The gateway's identity in the Istio ambient mesh.
#[derive(Debug, Args)]
pub struct MeshArgs {
    /// PEM certificate chain with the gateway's SPIFFE identity
    /// (`spiffe://<trust domain>/ns/<ns>/sa/<sa>`); reloaded when it changes.
    #[arg(long, env = "WHARF_MESH_CERT", requires_all = ["mesh_key", "mesh_roots"])]
    pub mesh_cert: Option<PathBuf>,
    /// PEM private key of `--mesh-cert`.
    #[arg(long, env = "WHARF_MESH_KEY", requires = "mesh_cert")]
    pub mesh_key: Option<PathBuf>,
    /// PEM mesh root certificates.
    #[arg(long, env = "WHARF_MESH_ROOTS", requires = "mesh_cert")]
    pub mesh_roots: Option<PathBuf>,
    /// Get the mesh certificate from the Istio CA at this address instead of files
    /// (e.g. `https://istiod.istio-system.svc:15012`), renewed at half its lifetime.
    #[arg(long, env = "WHARF_ISTIO_CA_ADDRESS", conflicts_with = "mesh_cert", requires = "mesh_service_account")]
    pub istio_ca_address: Option<http::Uri>,
    /// Projected service-account token (audience `istio-ca`) sent to the Istio CA.
    #[arg(long, default_value = "/var/run/secrets/tokens/istio-token", env = "WHARF_ISTIO_CA_TOKEN")]
    pub istio_ca_token: PathBuf,
    /// Mesh root certificates when using the Istio CA (the `istio-ca-root-cert` ConfigMap).
    #[arg(long, default_value = "/var/run/secrets/istio/root-cert.pem", env = "WHARF_ISTIO_CA_ROOTS")]
    pub istio_ca_roots: PathBuf,
    /// Lifetime to ask the Istio CA for.
    #[arg(long, default_value = "24h", value_parser = parse_duration, env = "WHARF_ISTIO_CA_TTL")]
    pub istio_ca_ttl: Duration,
    /// Namespace of the gateway's mesh identity (Istio CA).
    #[arg(long, default_value = "default", env = "POD_NAMESPACE")]
    pub mesh_namespace: String,
    /// Service account of the gateway's mesh identity (Istio CA).
    #[arg(long, env = "WHARF_MESH_SERVICE_ACCOUNT")]
    pub mesh_service_account: Option<String>,
    /// HBONE inbound port (east-west role; 0 turns it off). Needs a mesh identity.
    #[arg(long, default_value_t = 0, env = "WHARF_HBONE_PORT")]
    pub hbone_port: u16,
    /// Networks (`198.18.0.0/24`, repeatable) the HBONE inbound may forward to besides the
    /// gateway's own listeners and the endpoints its routes reach. Loopback, link-local and
    /// unspecified addresses are reached only when listed; the admin and HBONE ports of
    /// the gateway's own addresses never are.
    #[arg(long = "hbone-allow-destination", value_parser = parse_ip_net, env = "WHARF_HBONE_ALLOWED_DESTINATIONS", value_delimiter = ',')]
    pub hbone_allowed_destinations: Vec<wharf_model::IpNet>,
    /// The mesh identities that may open HBONE tunnels, as
    /// `spiffe://TRUST-DOMAIN/ns/NAMESPACE/sa/SERVICE-ACCOUNT` with `*` for any namespace
    /// or service account (repeatable); others get 401. Default: any identity of the trust
    /// domain.
    #[arg(long = "hbone-allow-peer", value_parser = wharf_dataplane::hbone::inbound::PeerPattern::parse, env = "WHARF_HBONE_ALLOWED_PEERS", value_delimiter = ',')]
    pub hbone_allowed_peers: Vec<wharf_dataplane::hbone::inbound::PeerPattern>,
}

/// `wharf echo`.
#[derive(Debug, Args)]
pub struct EchoArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9000", env = "WHARF_ECHO_LISTEN")]
    pub listen: std::net::SocketAddr,
    /// Name reported in every answer.
    #[arg(long, default_value = "echo", env = "WHARF_ECHO_NAME")]
    pub name: String,
}

/// A flag's duration: `500ms`, `5s`, `2m`, `1h`, `1.5s`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    wharf_controller::duration::parse(s, &wharf_controller::duration::FLAGS)
        .ok_or_else(|| format!("{s:?} is not a duration like 500ms, 5s or 2m (units: ms, s, m, h)"))
}

pub fn parse_ns_name(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() => Ok((ns.to_owned(), name.to_owned())),
        _ => Err(format!("{s:?} is not NAMESPACE/NAME")),
    }
}

fn parse_tcp_service(s: &str) -> Result<wharf_controller::TcpService, String> {
    let err = || format!("{s:?} is not PORT=NAMESPACE/SERVICE:SERVICEPORT (e.g. 31400=default/db:5432)");
    let (port, rest) = s.split_once('=').ok_or_else(err)?;
    let (ns_name, svc_port) = rest.rsplit_once(':').ok_or_else(err)?;
    let (namespace, service) = parse_ns_name(ns_name).map_err(|_| err())?;
    Ok(wharf_controller::TcpService {
        listen_port: port.parse().map_err(|_| err())?,
        namespace,
        service,
        port: svc_port.parse().map_err(|_| err())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("5 parsecs").is_err());
    }

    #[test]
    fn edge_ports() {
        let p = |s: &str| parse_edge_port(s).map(|e| (e.port, e.socket));
        assert_eq!(p("80=http"), Ok((80, EdgeSocketKind::Http)));
        assert_eq!(p("443=https"), Ok((443, EdgeSocketKind::Https)));
        assert_eq!(p("15443=tls"), Ok((15443, EdgeSocketKind::Tls)));
        assert_eq!(p("31400=tcp"), Ok((31400, EdgeSocketKind::Tcp(31400))));
        assert_eq!(p("5432=tcp:31400"), Ok((5432, EdgeSocketKind::Tcp(31400))));
        for bad in ["80", "80=udp", "0=http", "x=http", "80=tcp:0", "80=tcp:x"] {
            assert!(p(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tcp_services() {
        let t = parse_tcp_service("31400=default/db:5432").unwrap();
        assert_eq!((t.listen_port, t.namespace.as_str(), t.service.as_str()), (31400, "default", "db"));
        assert!(parse_tcp_service("31400=db:5432").is_err());
        assert!(parse_tcp_service("x=a/b:1").is_err());
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
