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

/// What one attempt writes.
#[derive(Debug, Clone, PartialEq)]
enum Write {
    /// No Lease yet: create one held by us.
    Create(Lease),
    /// Renew ours or take the Lease over (a compare-and-swap on its resourceVersion).
    Replace(Lease),
    /// Another replica holds it: write nothing.
    Nothing,
}

/// Decides the write of one attempt from the Lease as read (`None`: there is none), at
/// `now` by the wall clock (written into the Lease) and `clock` by this replica's
/// monotonic clock (which judges expiry).
fn next_write(
    existing: Option<Lease>,
    cfg: &LeaseConfig,
    observed: &mut Observed,
    now: Timestamp,
    clock: Instant,
) -> Write {
    let now = MicroTime(now);
    let secs = i32::try_from(cfg.duration.as_secs()).unwrap_or(i32::MAX).max(1);
    let Some(mut lease) = existing else {
        return Write::Create(Lease {
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
        });
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let record = (holder.clone(), spec.renew_time.as_ref().map(|t| t.0));
    if observed.record.as_ref() != Some(&record) {
        observed.record = Some(record);
        observed.at = Some(clock);
    }
    let their_duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(secs).max(1) as u64);
    let unchanged_for = observed.at.map(|at| clock.saturating_duration_since(at));
    match decide(&holder, &cfg.identity, unchanged_for, their_duration) {
        Decision::Wait => return Write::Nothing,
        Decision::Renew => {}
        Decision::TakeOver => {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            spec.holder_identity = Some(cfg.identity.clone());
        }
    }
    spec.renew_time = Some(now);
    spec.lease_duration_seconds = Some(secs);
    Write::Replace(lease)
}

/// A write that lost a race (409: someone else created or changed the Lease first) means
/// another replica leads; any other error is for the caller.
fn acquired(result: Result<(), kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether this replica leads after an attempt (`None`: unchanged). A failed attempt
/// keeps the lead until `renew_deadline` has passed since the last renewal.
fn leads_after(
    attempt: Result<bool, ()>,
    last_renewal: Option<Instant>,
    now: Instant,
    renew_deadline: Duration,
) -> Option<bool> {
    match attempt {
        Ok(held) => Some(held),
        Err(()) => {
            let stale = last_renewal.is_none_or(|t| now.saturating_duration_since(t) > renew_deadline);
            stale.then_some(false)
        }
    }
}

/// Runs the election forever, publishing `true` while this replica leads.
pub async fn run(client: Client, cfg: LeaseConfig, leader: watch::Sender<bool>) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut observed = Observed::default();
    let mut last_renewal: Option<Instant> = None;
    loop {
        let attempt = try_acquire_or_renew(&api, &cfg, &mut observed).await;
        let now = Instant::now();
        if let Ok(true) = attempt {
            last_renewal = Some(now);
        }
        let leads = leads_after(attempt.as_ref().copied().map_err(drop), last_renewal, now, cfg.renew_deadline);
        let changed = leads.is_some_and(|leads| leader.send_if_modified(|l| std::mem::replace(l, leads) != leads));
        match (&attempt, changed) {
            (Ok(true), true) => {
                tracing::info!(lease = %cfg.name, identity = %cfg.identity, "became the leader: writing status and Events")
            }
            (Ok(false), true) => {
                tracing::warn!(lease = %cfg.name, "lost the lease to another replica; no longer writing status")
            }
            (Err(e), true) => {
                tracing::warn!(lease = %cfg.name, error = %e, "could not renew the lease in time; no longer writing status")
            }
            (Err(e), false) => tracing::debug!(lease = %cfg.name, error = %e, "lease update failed; will retry"),
            (Ok(_), false) => {}
        }
        tokio::time::sleep(cfg.retry).await;
    }
}

/// The Lease given up by `identity`, or `None` when it is not theirs to give.
fn released(mut lease: Lease, identity: &str) -> Option<Lease> {
    let spec = lease.spec.get_or_insert_with(Default::default);
    if spec.holder_identity.as_deref() != Some(identity) {
        return None;
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    Some(lease)
}

/// Gives the lease up (on shutdown) so another replica takes over at once.
pub async fn release(client: Client, cfg: &LeaseConfig) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let Ok(Some(lease)) = api.get_opt(&cfg.name).await else {
        return;
    };
    let Some(lease) = released(lease, &cfg.identity) else {
        return;
    };
    if api.replace(&cfg.name, &PostParams::default(), &lease).await.is_ok() {
        tracing::info!(lease = %cfg.name, "released the lease");
    }
}

async fn try_acquire_or_renew(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    observed: &mut Observed,
) -> Result<bool, kube::Error> {
    let existing = api.get_opt(&cfg.name).await?;
    let pp = PostParams::default();
    let result = match next_write(existing, cfg, observed, Timestamp::now(), Instant::now()) {
        Write::Nothing => return Ok(false),
        Write::Create(lease) => api.create(&pp, &lease).await.map(drop),
        // resourceVersion from the get makes this a compare-and-swap.
        Write::Replace(lease) => api.replace(&cfg.name, &pp, &lease).await.map(drop),
    };
    acquired(result)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn cfg() -> LeaseConfig {
        LeaseConfig {
            namespace: "wharf".into(),
            name: "wharf-leader".into(),
            identity: "me".into(),
            duration: D,
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap_or_default()
    }

    fn held(holder: Option<&str>, renewed: i64, duration: Option<i32>, transitions: Option<i32>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("wharf-leader".into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: duration,
                acquire_time: Some(MicroTime(at(-100))),
                renew_time: Some(MicroTime(at(renewed))),
                lease_transitions: transitions,
                ..Default::default()
            }),
        }
    }

    fn spec(w: &Write) -> &LeaseSpec {
        match w {
            Write::Create(l) | Write::Replace(l) => l.spec.as_ref().unwrap_or_else(|| panic!("no spec: {w:?}")),
            Write::Nothing => panic!("nothing written"),
        }
    }

    #[test]
    fn a_missing_lease_is_created_held_by_us() {
        let w = next_write(None, &cfg(), &mut Observed::default(), at(0), Instant::now());
        let Write::Create(lease) = &w else { panic!("{w:?}") };
        assert_eq!(lease.metadata.name.as_deref(), Some("wharf-leader"));
        assert_eq!(lease.metadata.namespace.as_deref(), Some("wharf"));
        let s = spec(&w);
        assert_eq!(s.holder_identity.as_deref(), Some("me"));
        assert_eq!(s.lease_duration_seconds, Some(15));
        assert_eq!(s.acquire_time, Some(MicroTime(at(0))));
        assert_eq!(s.renew_time, Some(MicroTime(at(0))));
        assert_eq!(s.lease_transitions, Some(0));
    }

    #[test]
    fn ours_is_renewed_keeping_its_acquire_time_and_transitions() {
        let w = next_write(
            Some(held(Some("me"), -5, Some(15), Some(3))),
            &cfg(),
            &mut Observed::default(),
            at(0),
            Instant::now(),
        );
        let Write::Replace(lease) = &w else { panic!("{w:?}") };
        assert_eq!(lease.metadata.resource_version.as_deref(), Some("7"), "the write is a compare-and-swap");
        let s = spec(&w);
        assert_eq!(s.holder_identity.as_deref(), Some("me"));
        assert_eq!(s.renew_time, Some(MicroTime(at(0))));
        assert_eq!(s.acquire_time, Some(MicroTime(at(-100))));
        assert_eq!(s.lease_transitions, Some(3));
    }

    #[test]
    fn a_live_holder_is_left_alone_until_it_stops_renewing_for_its_duration() {
        let (cfg, t0) = (cfg(), Instant::now());
        let mut seen = Observed::default();
        let other = |renewed| Some(held(Some("other"), renewed, Some(20), Some(3)));
        assert_eq!(next_write(other(0), &cfg, &mut seen, at(0), t0), Write::Nothing);
        // It renews at t0+15: the clock of expiry starts again from there.
        assert_eq!(next_write(other(15), &cfg, &mut seen, at(15), t0 + Duration::from_secs(15)), Write::Nothing);
        assert_eq!(
            next_write(other(15), &cfg, &mut seen, at(35), t0 + Duration::from_secs(35)),
            Write::Nothing,
            "its own 20 s, not our 15 s"
        );
        let w = next_write(other(15), &cfg, &mut seen, at(36), t0 + Duration::from_secs(36));
        let s = spec(&w);
        assert!(matches!(w, Write::Replace(_)), "{w:?}");
        assert_eq!(s.holder_identity.as_deref(), Some("me"));
        assert_eq!(s.acquire_time, Some(MicroTime(at(36))));
        assert_eq!(s.renew_time, Some(MicroTime(at(36))));
        assert_eq!(s.lease_transitions, Some(4));
        assert_eq!(s.lease_duration_seconds, Some(15), "our duration from now on");
    }

    #[test]
    fn a_released_lease_is_taken_at_once_and_a_lease_without_fields_uses_ours() {
        let w = next_write(Some(held(None, 0, None, None)), &cfg(), &mut Observed::default(), at(1), Instant::now());
        let s = spec(&w);
        assert_eq!(s.holder_identity.as_deref(), Some("me"));
        assert_eq!(s.lease_transitions, Some(1));
        let mut seen = Observed::default();
        let t0 = Instant::now();
        let other = || Some(held(Some("other"), 0, None, None));
        assert_eq!(next_write(other(), &cfg(), &mut seen, at(0), t0), Write::Nothing);
        assert_eq!(next_write(other(), &cfg(), &mut seen, at(15), t0 + D), Write::Nothing);
        assert!(matches!(
            next_write(other(), &cfg(), &mut seen, at(16), t0 + D + Duration::from_secs(1)),
            Write::Replace(_)
        ));
    }

    #[test]
    fn a_lost_race_means_another_replica_leads() {
        assert!(matches!(acquired(Ok(())), Ok(true)));
        assert!(matches!(acquired(Err(crate::k8s::api_error(409))), Ok(false)));
        assert!(acquired(Err(crate::k8s::api_error(500))).is_err());
        assert!(acquired(Err(crate::k8s::api_error(404))).is_err());
    }

    #[test]
    fn the_lead_survives_failed_renewals_until_the_renew_deadline() {
        let (t0, deadline) = (Instant::now(), Duration::from_secs(10));
        let s = Duration::from_secs;
        assert_eq!(leads_after(Ok(true), Some(t0), t0, deadline), Some(true));
        assert_eq!(leads_after(Ok(false), Some(t0), t0, deadline), Some(false));
        assert_eq!(leads_after(Err(()), Some(t0), t0 + s(9), deadline), None);
        assert_eq!(leads_after(Err(()), Some(t0), t0 + s(10), deadline), None, "strictly after the deadline");
        assert_eq!(leads_after(Err(()), Some(t0), t0 + s(11), deadline), Some(false));
        assert_eq!(leads_after(Err(()), None, t0, deadline), Some(false), "never renewed");
    }

    #[test]
    fn only_the_holder_releases_and_the_lease_then_expires_in_a_second() {
        let r = released(held(Some("me"), 0, Some(15), Some(2)), "me");
        let s = r.as_ref().and_then(|l| l.spec.as_ref());
        assert_eq!(s.and_then(|s| s.holder_identity.as_deref()), None);
        assert_eq!(s.and_then(|s| s.lease_duration_seconds), Some(1));
        assert!(r.is_some());
        assert_eq!(released(held(Some("other"), 0, Some(15), Some(2)), "me"), None);
        assert_eq!(released(held(None, 0, Some(15), Some(2)), "me"), None);
    }
}
