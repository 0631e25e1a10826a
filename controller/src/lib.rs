//! Wharf's controller side: Kubernetes objects in, config snapshots and diagnostics out.
//!
//! [`translate`] is pure: it takes a [`World`] of objects and returns a
//! [`wharf_model::Snapshot`] plus the problems users must hear about. The standalone
//! loader ([`files`]) and the API-server watches both feed it.

pub mod files;
pub mod translate;

pub use translate::{
    translate, Diagnostic, Options, ServicePortRef, TcpService, Translation, World,
};
