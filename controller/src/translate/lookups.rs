//! What every part's translation reads besides its own objects, looked up once per
//! translation.

use wharf_model::Snapshot;

use super::backend::Backends;
use super::{owners, tls, Options};
use crate::World;

/// What translation reads besides the Ingresses, looked up once per translation.
pub(super) struct Lookups<'a> {
    pub(super) opts: &'a Options,
    pub(super) secrets: tls::Secrets<'a>,
    pub(super) backends: Backends<'a>,
    /// The snapshot served now: who serves a host there keeps it.
    pub(super) previous: Option<&'a Snapshot>,
    /// Which references to other namespaces are shared.
    pub(super) grants: &'a crate::kinds::Objects<wharf_gateway_api::referencegrants::ReferenceGrant>,
    /// Who served each host, as the leader recorded it.
    pub(super) record: owners::Record,
}

impl<'a> Lookups<'a> {
    /// `few`: few lookups will be made; objects in key order are then searched where they
    /// are instead of through maps built first (which pay off over many lookups: a search
    /// touches about twice as many objects as the log of their number).
    pub(super) fn new(world: &'a World, opts: &'a Options, previous: Option<&'a Snapshot>, few: bool) -> Self {
        Lookups {
            opts,
            secrets: tls::Secrets::new(crate::kinds::ByKey::new(&world.secrets, few), previous, opts.now),
            backends: Backends::new(world, &opts.trust_domain, &opts.cluster_domain, few),
            previous,
            grants: &world.reference_grants,
            record: record(world, &opts.ownership),
        }
    }
}

/// The record of who served each host, from the ConfigMap the options name.
pub(super) fn record(world: &World, rules: &owners::Ownership) -> owners::Record {
    let Some((ns, name)) = rules.record.as_ref() else { return owners::Record::default() };
    let map = crate::kinds::ByKey::new(&world.config_maps, true).get(ns, name);
    let text = map.and_then(|m| m.data.as_ref()?.get(crate::well_known::HOST_OWNERS_KEY));
    text.map(|t| owners::Record::parse(t)).unwrap_or_default()
}
