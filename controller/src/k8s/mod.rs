//! The controller against a Kubernetes API server: watches feed one owner task that keeps
//! the [`index::Index`], translates on change and publishes the result; a lease-gated task
//! writes Ingress status and Events.

pub mod acme;
pub mod gateway_status;
pub mod index;
pub mod lease;
pub mod status;

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use kube::runtime::events::Reporter;
use kube::runtime::watcher;
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::changes::Changes;
use crate::changes::Key;
use crate::kinds::Change;
use crate::kinds::Kind;
use crate::publish::{Published, Publisher};
use crate::translate::incremental::Incremental;
use crate::{Options, Translation};
use index::{Changed, Index};
use lease::LeaseConfig;
use status::{Plan, Publish};

/// Controller settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Translation settings.
    pub translate: Options,
    /// Where Ingress status addresses come from.
    pub publish: Publish,
    /// Leader election.
    pub lease: LeaseConfig,
    /// How long without a change ends a burst of changes (then they are translated).
    pub quiet: Duration,
    /// How long a burst of changes is gathered at most before translating.
    pub debounce: Duration,
    /// Re-translate this often even without changes (certificate expiry).
    pub resync: Duration,
}

/// What the controller publishes.
#[derive(Debug, Clone)]
pub struct Handles {
    /// True while this replica holds the lease.
    pub leader: watch::Receiver<bool>,
    /// The latest translation (`None` until every kind has listed).
    pub translations: watch::Receiver<Option<Arc<Translation>>>,
}

/// Starts watches, the owner task (which applies snapshots through `publisher`), leader
/// election and the status writer.
pub fn start(client: Client, cfg: Config, publisher: Publisher) -> Handles {
    let (tx, rx) = mpsc::channel(1024);
    spawn_watches(&client, &tx);
    drop(tx);

    let (translations_tx, translations) = watch::channel(None);
    let (plans_tx, plans) = watch::channel(Arc::new(Plan::default()));
    let (leader_tx, leader) = watch::channel(false);
    tokio::spawn(lease::run(client.clone(), cfg.lease.clone(), leader_tx));
    let reporter = Reporter { controller: "wharf".into(), instance: Some(cfg.lease.identity.clone()) };
    tokio::spawn(status::write(client, reporter, plans, leader.clone()));
    tokio::spawn(own(rx, cfg, publisher, translations_tx, plans_tx));
    Handles { leader, translations }
}

pub(crate) fn spawn_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    tx: mpsc::Sender<Change>,
    wrap: fn(watcher::Event<K>) -> Change,
) where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    tokio::spawn(async move {
        use kube::runtime::utils::Backoff;
        // Backoff is applied here rather than by `StreamExt::backoff`, so that a kind the
        // API server does not serve is asked about less often than a failing one.
        let mut stream = watcher(api, config).boxed();
        let mut backoff = RetryBackoff::default();
        let mut failing = false;
        let mut absent = false;
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    backoff.reset();
                    if failing {
                        tracing::info!(kind = %kind, "watch restored");
                        failing = false;
                    }
                    if absent {
                        tracing::info!(kind = %kind, "the API server serves this kind now; reading it");
                        absent = false;
                    }
                    if tx.send(wrap(event)).await.is_err() {
                        return;
                    }
                }
                Err(e) if not_served(&e) => {
                    // Its CRD is not installed (or was removed): there are none, which is
                    // a complete answer, so the other kinds are not held back waiting.
                    if !absent {
                        tracing::info!(kind = %kind, "the API server does not serve this kind (its CRD is not installed); there are none until it is");
                        absent = true;
                        failing = false;
                        for event in [watcher::Event::Init, watcher::Event::InitDone] {
                            if tx.send(wrap(event)).await.is_err() {
                                return;
                            }
                        }
                    }
                    tokio::time::sleep(NOT_SERVED_RECHECK).await;
                }
                Err(e) => {
                    // The last good config keeps serving while the watch retries.
                    if !failing {
                        tracing::warn!(kind = %kind, error = %e, "watch failed; serving the last good config while retrying");
                    }
                    failing = true;
                    tokio::time::sleep(backoff.next().unwrap_or(RetryBackoff::MAX)).await;
                }
            }
        }
    });
}

/// How often a kind the API server does not serve is asked for again: installing its
/// CRD takes effect within this.
const NOT_SERVED_RECHECK: Duration = Duration::from_secs(10);

/// True when listing failed because the API server does not serve the resource at all
/// (404 on the list), as for a custom resource whose CRD is not installed.
fn not_served(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 404)
}

/// How a failed watch retries: from 250 ms, doubling, to at most 1 s, each delay cut by a
/// random 0-50 % so that replicas do not retry in step. client-go (and kube-rs's default)
/// go up to 30 s, which after an API server outage of a minute can leave changes unseen
/// for up to 30 s after it returns; with 1 s they are live within about a second. The
/// price: a replica sends each failing watch at most about one request a second.
#[derive(Debug, Clone)]
struct RetryBackoff {
    next: Duration,
}

impl RetryBackoff {
    const MIN: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(1);
}

impl Default for RetryBackoff {
    fn default() -> Self {
        RetryBackoff { next: Self::MIN }
    }
}

impl Iterator for RetryBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let full = self.next;
        self.next = (full * 2).min(Self::MAX);
        Some(full.mul_f64(1.0 - fastrand::f64() / 2.0))
    }
}

impl kube::runtime::utils::Backoff for RetryBackoff {
    fn reset(&mut self) {
        self.next = Self::MIN;
    }
}

/// When to act on changes: once none has come for `quiet`, at most `max` after the first
/// change of a burst, and no sooner after the last translation ended than that translation
/// took, so that translating takes at most half of the control thread however fast
/// changes come. A lone change is translated `quiet` after it arrives.
#[derive(Debug)]
struct Pace {
    quiet: Duration,
    max: Duration,
    first: Option<Instant>,
    last: Option<Instant>,
    earliest: Option<Instant>,
}

impl Pace {
    fn new(quiet: Duration, max: Duration) -> Pace {
        Pace { quiet, max, first: None, last: None, earliest: None }
    }

    /// A change arrived at `now`.
    fn changed(&mut self, now: Instant) {
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// When the changes so far are due; `None` when there are none.
    fn due(&self) -> Option<Instant> {
        let due = (self.last? + self.quiet).min(self.first? + self.max);
        Some(self.earliest.map_or(due, |e| due.max(e)))
    }

    /// The changes were acted on from `started` to `ended`.
    fn done(&mut self, started: Instant, ended: Instant) {
        self.first = None;
        self.last = None;
        self.earliest = Some(ended + (ended - started));
    }
}

/// The owner task: applies watch events, translates (or only plans status writes, when
/// only statuses changed) once the changes are due, publishes.
async fn own(
    mut rx: mpsc::Receiver<Change>,
    mut cfg: Config,
    mut publisher: Publisher,
    translations: watch::Sender<Option<Arc<Translation>>>,
    plans: watch::Sender<Arc<Plan>>,
) {
    let mut index = Index::default();
    let mut pending = Changed::Nothing;
    // What changed since the last translation, and the parts it kept.
    let mut changes = Changes::everything();
    let mut parts = Incremental::default();
    let mut pace = Pace::new(cfg.quiet, cfg.debounce);
    let mut resync = tokio::time::interval(cfg.resync);
    resync.tick().await;
    loop {
        let due = pace.due();
        tokio::select! {
            change = rx.recv() => {
                let Some(change) = change else { return };
                let touched = index.changes(&change);
                let changed = index.apply(change);
                if changed == Changed::Objects {
                    changes.extend(touched);
                }
                if changed != Changed::Nothing {
                    pending = pending.max(changed);
                    pace.changed(Instant::now());
                }
            }
            _ = async { tokio::time::sleep_until(due.unwrap_or_else(Instant::now)).await }, if due.is_some() && index.synced() => {
                let started = Instant::now();
                match std::mem::replace(&mut pending, Changed::Nothing) {
                    Changed::Objects => {
                        let changes = std::mem::take(&mut changes);
                        rebuild(&index, &mut cfg, &mut parts, &changes, &mut publisher, &translations, &plans);
                    }
                    Changed::Status => {
                        if let Some(t) = translations.borrow().as_deref() {
                            replan(&index, &cfg, t, &plans);
                        }
                    }
                    Changed::Nothing => {}
                }
                pace.done(started, Instant::now());
            }
            _ = resync.tick() => {
                tracing::debug!(every = ?cfg.resync, "periodic re-translation");
                pending = Changed::Objects;
                changes = Changes::everything();
                pace.changed(Instant::now());
            }
        }
    }
}

fn rebuild(
    index: &Index,
    cfg: &mut Config,
    parts: &mut Incremental,
    changes: &Changes,
    publisher: &mut Publisher,
    translations: &watch::Sender<Option<Arc<Translation>>>,
    plans: &watch::Sender<Arc<Plan>>,
) {
    let started = std::time::Instant::now();
    cfg.translate.now = crate::unix_now();
    let t = parts.translate(&index.world(), &cfg.translate, publisher.served(), changes);
    let translated = started.elapsed();
    let published = publisher.publish(&t);
    // The ACME demands can change with an unchanged snapshot (an issuer named).
    let demands_changed = translations.borrow().as_ref().is_none_or(|p| p.acme != t.acme);
    let changed = published != Published::Unchanged || demands_changed;
    if changed {
        tracing::debug!(
            elapsed = ?started.elapsed(),
            ?translated,
            ingresses = t.ingresses.len(),
            parts = parts.parts(),
            translated_ingresses = parts.translated(),
            "translated"
        );
    }
    // The newest translation is kept either way (status planning reads its diagnostics);
    // receivers hear of it only when what they act on changed.
    translations.send_if_modified(|last| {
        *last = Some(Arc::new(t));
        changed
    });
    if let Some(t) = translations.borrow().as_deref() {
        replan(index, cfg, t, plans);
    }
}

/// Plans the status writes and Events that make the objects in `index` show `t`.
fn replan(index: &Index, cfg: &Config, t: &Translation, plans: &watch::Sender<Arc<Plan>>) {
    let started = std::time::Instant::now();
    let ours: BTreeSet<Key> = t.ingresses.iter().map(|r| (r.namespace.clone(), r.name.clone())).collect();
    let addrs = status::addresses(&cfg.publish, index);
    let left = status::left(index, &cfg.translate.controller_name, &ours, &addrs);
    let mut plan = status::plan(index, &ours, &left, &addrs, &t.diagnostics);
    plan.gateway = gateway_status::plan(index, &t.gateway_status, &cfg.translate.gateway.controller_name, &addrs);
    if let Some(at) = cfg.translate.ownership.record.as_ref() {
        plan.record = status::record(index, at, &t.snapshot);
    }
    plans.send_if_modified(|p| {
        if **p == plan {
            return false;
        }
        *p = Arc::new(plan);
        true
    });
    tracing::debug!(elapsed = ?started.elapsed(), "status planned");
}

/// A failed API request with this HTTP status, as kube returns it.
#[cfg(test)]
fn api_error(code: u16) -> kube::Error {
    kube::Error::Api(kube::core::Status::failure("injected", "Test").with_code(code).boxed())
}

#[cfg(test)]
mod backoff_tests {
    use super::RetryBackoff;
    use kube::runtime::utils::Backoff;
    use std::time::Duration;

    #[test]
    fn watch_retries_double_from_a_quarter_second_to_at_most_one_and_reset() {
        let ms = |d: Duration| d.as_millis();
        for _ in 0..100 {
            let delays: Vec<u128> = RetryBackoff::default().take(6).map(ms).collect();
            let ceilings = [250, 500, 1000, 1000, 1000, 1000];
            for (d, c) in delays.iter().zip(ceilings) {
                assert!(*d <= c && *d >= c / 2, "{delays:?}");
            }
        }
        let mut b = RetryBackoff::default();
        b.by_ref().take(5).for_each(drop);
        b.reset();
        assert!(ms(b.next().unwrap()) <= 250);
    }

    #[test]
    fn only_a_404_on_the_list_means_the_kind_is_not_served() {
        use super::{api_error, not_served};
        use kube::runtime::watcher::Error;
        assert!(not_served(&Error::InitialListFailed(api_error(404))));
        assert!(!not_served(&Error::InitialListFailed(api_error(403))));
        assert!(!not_served(&Error::InitialListFailed(api_error(500))));
        assert!(!not_served(&Error::WatchStartFailed(api_error(404))));
        assert!(!not_served(&Error::NoResourceVersion));
    }
}

#[cfg(test)]
mod owner_tests {
    use super::*;
    use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
    use kube::runtime::watcher::Event;
    use serde_json::json;
    use tokio::time::Instant;

    const QUIET: Duration = Duration::from_millis(10);
    const DEBOUNCE: Duration = Duration::from_millis(50);
    const RESYNC: Duration = Duration::from_secs(600);

    fn cfg() -> Config {
        Config {
            translate: Options::default(),
            publish: Publish::Addresses(vec!["192.0.2.1".into()]),
            lease: LeaseConfig {
                namespace: "wharf".into(),
                name: "wharf".into(),
                identity: "me".into(),
                duration: Duration::from_secs(15),
                renew_deadline: Duration::from_secs(10),
                retry: Duration::from_secs(2),
            },
            quiet: QUIET,
            debounce: DEBOUNCE,
            resync: RESYNC,
        }
    }

    fn ingress(name: &str) -> Ingress {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "web"},
            "spec": {"ingressClassName": "wharf", "rules": [{"host": format!("{name}.example.com"), "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "app", "port": {"number": 80}}}},
            ]}}]},
        }))
        .unwrap_or_default()
    }

    fn class() -> IngressClass {
        serde_json::from_value(
            json!({"metadata": {"name": "wharf"}, "spec": {"controller": "wharf.dev/ingress-controller"}}),
        )
        .unwrap_or_default()
    }

    /// The initial lists of every kind but Namespaces: our class and one Ingress.
    fn all_but_namespaces() -> Vec<Change> {
        let mut all = vec![
            Change::IngressClass(Event::Init),
            Change::IngressClass(Event::InitApply(class())),
            Change::Ingress(Event::Init),
            Change::Ingress(Event::InitApply(ingress("a"))),
        ];
        all.extend(Change::init_done_all().into_iter().filter(|c| !matches!(c, Change::Namespace(_))));
        all
    }

    fn names(t: &watch::Receiver<Option<Arc<Translation>>>) -> Vec<String> {
        t.borrow().iter().flat_map(|t| t.ingresses.iter().map(|r| r.name.clone())).collect()
    }

    /// True when `f` completes with `Ok` within a minute of (paused) time.
    async fn within<E>(f: impl std::future::Future<Output = Result<(), E>>) -> bool {
        matches!(tokio::time::timeout(Duration::from_secs(60), f).await, Ok(Ok(())))
    }

    #[tokio::test(start_paused = true)]
    async fn translates_once_every_kind_has_listed_then_after_a_quiet_period_and_publishes_only_changes() {
        let (tx, rx) = mpsc::channel(64);
        let (translations_tx, mut translations) = watch::channel(None);
        let (plans_tx, mut plans) = watch::channel(Arc::new(Plan::default()));
        tokio::spawn(own(rx, cfg(), Publisher::new(Box::new(|_| Ok(1))), translations_tx, plans_tx));
        let send = |c| tx.send(c);
        for c in all_but_namespaces() {
            assert!(send(c).await.is_ok());
        }
        tokio::time::sleep(RESYNC * 2).await;
        assert!(translations.borrow().is_none(), "translated before Namespaces listed");

        assert!(send(Change::Namespace(Event::InitDone)).await.is_ok());
        assert!(within(translations.changed()).await, "no translation after every kind listed");
        assert_eq!(names(&translations), ["a"]);
        assert!(within(plans.changed()).await, "no status plan");
        let status: Vec<(Key, Vec<String>)> = plans
            .borrow_and_update()
            .status
            .iter()
            .map(|(k, a)| (k.clone(), a.iter().filter_map(|a| a.ip.clone()).collect()))
            .collect();
        assert_eq!(status, [(("web".into(), "a".into()), vec!["192.0.2.1".to_owned()])]);

        // A resync and an unchanged object translate again but publish nothing new.
        translations.borrow_and_update();
        assert!(send(Change::Ingress(Event::Apply(ingress("a")))).await.is_ok());
        tokio::time::sleep(RESYNC + DEBOUNCE).await;
        assert!(!translations.has_changed().unwrap_or(true), "an unchanged translation was published again");
        assert!(!plans.has_changed().unwrap_or(true), "an unchanged plan was published again");

        // A lone change is published once no other has come for the quiet period.
        let sent = Instant::now();
        assert!(send(Change::Ingress(Event::Apply(ingress("b")))).await.is_ok());
        assert!(within(translations.changed()).await, "the change was not translated");
        assert_eq!(sent.elapsed(), QUIET, "a lone change waits only for the quiet period");
        assert_eq!(names(&translations), ["a", "b"]);
        translations.borrow_and_update();

        // A burst that keeps coming is translated at most DEBOUNCE after it began.
        let sent = Instant::now();
        let mut first = None;
        for n in 0..16 {
            assert!(send(Change::Ingress(Event::Apply(ingress(&format!("burst-{n:02}"))))).await.is_ok());
            tokio::time::sleep(QUIET / 2).await;
            if first.is_none() && translations.has_changed().unwrap_or(false) {
                first = Some(sent.elapsed());
                translations.borrow_and_update();
            }
        }
        let first = first.unwrap_or_default();
        assert!(first >= DEBOUNCE && first <= DEBOUNCE + QUIET / 2, "first translation of the burst at {first:?}");
        assert!(within(translations.changed()).await, "the rest of the burst was not translated");
        assert_eq!(names(&translations).len(), 2 + 16);
    }

    fn with_status(mut i: Ingress, ip: &str, version: &str) -> Ingress {
        i.metadata.resource_version = Some(version.into());
        i.status = serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": ip}]}})).ok();
        i
    }

    #[tokio::test(start_paused = true)]
    async fn a_status_change_is_planned_for_but_not_translated() {
        let (tx, rx) = mpsc::channel(64);
        let (translations_tx, mut translations) = watch::channel(None);
        let (plans_tx, mut plans) = watch::channel(Arc::new(Plan::default()));
        let translated = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = Arc::clone(&translated);
        let cfg = Config { resync: Duration::from_secs(3600), ..cfg() };
        let publisher =
            Publisher::new(Box::new(move |_| Ok(count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) as u64 + 1)));
        tokio::spawn(own(rx, cfg, publisher, translations_tx, plans_tx));
        for c in all_but_namespaces().into_iter().chain([Change::Namespace(Event::InitDone)]) {
            assert!(tx.send(c).await.is_ok());
        }
        assert!(within(translations.changed()).await, "no first translation");
        assert!(within(plans.changed()).await, "no first plan");
        let planned = |p: &watch::Receiver<Arc<Plan>>| p.borrow().status.keys().cloned().collect::<Vec<Key>>();
        assert_eq!(planned(&plans), [("web".to_owned(), "a".to_owned())]);

        // Every translation leaves a new value in the channel, told to receivers or not
        // (held here, so that its address is not reused).
        let first = translations.borrow().clone();

        // The status we would write comes back: nothing left to write, nothing translated.
        let a = ingress("a");
        assert!(tx.send(Change::Ingress(Event::Apply(with_status(a.clone(), "192.0.2.1", "2")))).await.is_ok());
        assert!(within(plans.changed()).await, "the status change was not planned for");
        assert_eq!(planned(&plans), Vec::<Key>::new());
        // Someone else's status: planned to be written back.
        assert!(tx.send(Change::Ingress(Event::Apply(with_status(a.clone(), "198.51.100.9", "3")))).await.is_ok());
        assert!(within(plans.changed()).await, "the status change was not planned for");
        assert_eq!(planned(&plans), [("web".to_owned(), "a".to_owned())]);
        tokio::time::sleep(RESYNC).await;
        assert!(!translations.has_changed().unwrap_or(true));
        let now = translations.borrow().clone();
        assert!(matches!((&now, &first), (Some(n), Some(f)) if Arc::ptr_eq(n, f)), "a status change was translated");
        assert_eq!(translated.load(std::sync::atomic::Ordering::SeqCst), 1, "a status change applied a snapshot");

        // A change of what translation reads still is.
        let mut changed = with_status(a, "198.51.100.9", "4");
        changed.spec = ingress("z").spec;
        assert!(tx.send(Change::Ingress(Event::Apply(changed))).await.is_ok());
        tokio::time::sleep(DEBOUNCE).await;
        assert_eq!(translated.load(std::sync::atomic::Ordering::SeqCst), 2, "a new host was not translated");
    }

    #[test]
    fn pace_waits_for_quiet_at_most_max_and_half_the_thread() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut pace = Pace::new(QUIET, DEBOUNCE);
        assert_eq!(pace.due(), None, "nothing changed");
        pace.changed(ms(0));
        assert_eq!(pace.due(), Some(ms(10)));
        pace.changed(ms(8));
        assert_eq!(pace.due(), Some(ms(18)), "each change restarts the quiet period");
        pace.changed(ms(45));
        assert_eq!(pace.due(), Some(ms(50)), "but a burst waits at most DEBOUNCE from its first change");
        // A translation from 50 to 350 ms: the next one starts no sooner than 650 ms.
        pace.done(ms(50), ms(350));
        assert_eq!(pace.due(), None);
        pace.changed(ms(400));
        assert_eq!(pace.due(), Some(ms(650)));
        pace.changed(ms(700));
        pace.done(ms(700), ms(701));
        pace.changed(ms(800));
        assert_eq!(pace.due(), Some(ms(810)), "a fast translation holds nothing back");
    }
}
/// Declares `spawn_watches` for the kinds of [`with_kinds`](crate::kinds::with_kinds).
macro_rules! watches {
    ($( $(#[doc = $doc:literal])* $field:ident: $ty:ty => $variant:ident; )*) => {
    /// Starts one watch per kind, sending its events to `tx`.
    fn spawn_watches(client: &kube::Client, tx: &tokio::sync::mpsc::Sender<Change>) {
        $(
            spawn_watch::<$ty>(
                kube::Api::all(client.clone()),
                <$ty as Kind>::watch_config(),
                tx.clone(),
                Change::$variant,
            );
        )*
    }
    };
}
crate::kinds::with_kinds!(watches);
