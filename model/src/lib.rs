//! The config snapshot Wharf's data plane serves: the one vocabulary shared by the
//! controller (which builds snapshots from Kubernetes objects) and the data plane
//! (which compiles and serves them). No I/O, no Kubernetes types.

mod auth;
mod client_auth;
mod cors;
mod host;
mod hosts;
pub mod identity;
mod net;
mod path;
mod pattern;
mod route;
mod snapshot;
pub mod tls;

pub use auth::{
    decode_base64, parse_auth_map, parse_htpasswd, Auth, AuthCache, BasicAuth, EntryError, ExternalAuth, HashError,
    Md5Magic, PasswordHash, Template, Var, MAX_BCRYPT_COST,
};
pub use client_auth::{
    parse_ca_bundle, percent_escape, CaError, CertRefusal, ClientAuthHost, ClientCa, ClientCertCheck, PeerCertificate,
    VerifyClient,
};
pub use cors::Cors;
pub use host::{is_dns_name, Host, HostError};
pub use hosts::{Change, Hosted, Hosts};
pub use identity::Identity;
pub use net::{is_workload_address, ClientFilter, IpNet, IpNetError, RateLimit};
pub use path::{PathMatch, PathMatchError};
pub use pattern::{Pattern, PatternError};
pub use route::{
    Action, CookieAffinity, Fallback, Forward, HeaderEdits, HeaderMatch, LazyEdits, Mirror, PathRewrite, QueryMatch,
    Redirect, Respond, Retry, RouteMatch, UrlRewrite, WeightedBackend,
};
pub use snapshot::{
    parse_size, AcmeChallenges, AppProtocol, Certificate, Cluster, Endpoint, GatewayPort, Hbone, ObjectRef,
    PortProtocol, Route, Snapshot, SniRoute, SubjectAltName, TcpRoute, TlsHost, UpstreamTls, VirtualHost,
};
