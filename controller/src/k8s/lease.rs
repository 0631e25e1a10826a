//! Leader election with a coordination.k8s.io Lease. Every replica serves traffic; only
//! the leader writes status and Events.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::sync::watch;

/// Leader election settings.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (its pod name).
    pub identity: String,
    /// How long a lease is valid without renewal.
    pub duration: Duration,
    /// A leader that has not renewed for this long stops acting as leader.
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    pub retry: Duration,
}

/// What this replica last saw of the Lease, to judge expiry by its own clock.
#[derive(Debug, Default)]
struct Observed {
    record: Option<(String, Option<Timestamp>)>,
    at: Option<Instant>,
}

/// What to do with a Lease that exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// We hold it: renew.
    Renew,
    /// Free, or its holder stopped renewing: take it.
    TakeOver,
    /// Another replica holds it and renewed recently.
    Wait,
}

/// `holder` is the Lease's holder (empty: released); `unchanged_for` is how long this
/// replica has seen the same holder and renew time (None: never looked before), judged by
/// its own clock rather than the holder's timestamps; `their_duration` the Lease's
/// duration.
fn decide(holder: &str, me: &str, unchanged_for: Option<Duration>, their_duration: Duration) -> Decision {
    if holder == me {
        Decision::Renew
    } else if holder.is_empty() || unchanged_for.is_none_or(|d| d > their_duration) {
        Decision::TakeOver
    } else {
        Decision::Wait
    }
}

/// Runs the election forever, publishing `true` while this replica leads.
pub async fn run(client: Client, cfg: LeaseConfig, leader: watch::Sender<bool>) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut observed = Observed::default();
    let mut last_renewal: Option<Instant> = None;
    loop {
        match try_acquire_or_renew(&api, &cfg, &mut observed).await {
            Ok(true) => {
                last_renewal = Some(Instant::now());
                if leader.send_if_modified(|l| !std::mem::replace(l, true)) {
                    tracing::info!(lease = %cfg.name, identity = %cfg.identity, "became the leader: writing status and Events");
                }
            }
            Ok(false) => {
                if leader.send_if_modified(|l| std::mem::replace(l, false)) {
                    tracing::warn!(lease = %cfg.name, "lost the lease to another replica; no longer writing status");
                }
            }
            Err(e) => {
                let stale = last_renewal.is_none_or(|t| t.elapsed() > cfg.renew_deadline);
                if stale && leader.send_if_modified(|l| std::mem::replace(l, false)) {
                    tracing::warn!(lease = %cfg.name, error = %e, "could not renew the lease in time; no longer writing status");
                } else {
                    tracing::debug!(lease = %cfg.name, error = %e, "lease update failed; will retry");
                }
            }
        }
        tokio::time::sleep(cfg.retry).await;
    }
}

/// Gives the lease up (on shutdown) so another replica takes over at once.
pub async fn release(client: Client, cfg: &LeaseConfig) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let Ok(Some(mut lease)) = api.get_opt(&cfg.name).await else {
        return;
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    if spec.holder_identity.as_deref() != Some(cfg.identity.as_str()) {
        return;
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    if api.replace(&cfg.name, &PostParams::default(), &lease).await.is_ok() {
        tracing::info!(lease = %cfg.name, "released the lease");
    }
}

async fn try_acquire_or_renew(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    observed: &mut Observed,
) -> Result<bool, kube::Error> {
    let now = MicroTime(Timestamp::now());
    let secs = i32::try_from(cfg.duration.as_secs()).unwrap_or(i32::MAX).max(1);
    let Some(mut lease) = api.get_opt(&cfg.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(cfg.name.clone()),
                namespace: Some(cfg.namespace.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(cfg.identity.clone()),
                lease_duration_seconds: Some(secs),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let record = (holder.clone(), spec.renew_time.as_ref().map(|t| t.0));
    if observed.record.as_ref() != Some(&record) {
        observed.record = Some(record);
        observed.at = Some(Instant::now());
    }
    let their_duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(secs).max(1) as u64);
    let held_by_me = match decide(&holder, &cfg.identity, observed.at.map(|at| at.elapsed()), their_duration) {
        Decision::Wait => return Ok(false),
        Decision::Renew => true,
        Decision::TakeOver => false,
    };
    if !held_by_me {
        spec.acquire_time = Some(now.clone());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        spec.holder_identity = Some(cfg.identity.clone());
    }
    spec.renew_time = Some(now);
    spec.lease_duration_seconds = Some(secs);
    // resourceVersion from the get makes this a compare-and-swap.
    match api.replace(&cfg.name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::{decide, Decision};
    use std::time::Duration;

    const D: Duration = Duration::from_secs(15);

    #[test]
    fn renew_own_take_free_or_expired_wait_for_a_live_holder() {
        let s = Duration::from_secs;
        assert_eq!(decide("me", "me", Some(s(100)), D), Decision::Renew, "ours, however old");
        assert_eq!(decide("", "me", Some(s(0)), D), Decision::TakeOver, "released");
        assert_eq!(decide("other", "me", Some(s(14)), D), Decision::Wait);
        assert_eq!(decide("other", "me", Some(s(15)), D), Decision::Wait, "expiry is strictly after the duration");
        assert_eq!(decide("other", "me", Some(s(16)), D), Decision::TakeOver);
        assert_eq!(decide("other", "me", None, D), Decision::TakeOver, "first look at a lease nobody renews");
    }
}
