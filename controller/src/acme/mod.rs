//! ACME: certificates ordered by the leader for the TLS Secrets Ingresses and Gateway
//! listeners ask for, stored in those Secrets, renewed before they expire. The challenges
//! are published through a [`Store`] so that every replica answers them (see
//! [`crate::translate::acme`]).

pub mod client;
pub mod dir;
pub mod plan;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use wharf_model::{AcmeChallenges, Certificate};

pub use plan::{Answer, ChallengeKind, Issuer};

use crate::translate::acme::{Current, Demand};

/// Where accounts, challenges and certificates are kept: Secrets, or a directory.
pub trait Store: Send + Sync + 'static {
    /// The stored account credentials of `issuer` (JSON).
    fn account(&self, issuer: &str) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;
    /// Stores the account credentials of `issuer`.
    fn save_account(&self, issuer: &str, json: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Publishes the answers of the order for `demand`.
    fn publish(&self, demand: &Demand, answers: &[Answer]) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Withdraws them.
    fn withdraw(&self, demand: &Demand) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Withdraws every published answer (of orders an earlier leader left unfinished);
    /// returns how many sets it withdrew.
    fn withdraw_all(&self) -> impl Future<Output = Result<usize, StoreError>> + Send;
    /// Stores an issued chain and key in the demand's Secret; refuses a Secret Wharf does
    /// not manage.
    fn save_certificate(
        &self,
        demand: &Demand,
        chain_pem: &str,
        key_pem: &str,
    ) -> impl Future<Output = Result<(), SaveError>> + Send;
}

/// Why a [`Store`] could not read or write.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The API server refused the request or could not be reached.
    #[error("{object}: {source}")]
    Api {
        /// The object read or written (`Secret namespace/name`, or what was listed).
        object: String,
        /// What the API client said.
        #[source]
        source: kube::Error,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    File {
        /// The file.
        path: std::path::PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// A Secret could not be written as a manifest.
    #[error("{object}: {source}")]
    Manifest {
        /// The Secret.
        object: String,
        /// What the YAML writer said.
        #[source]
        source: serde_yaml::Error,
    },
}

impl StoreError {
    /// Short stable reason (log field).
    pub fn reason(&self) -> &'static str {
        match self {
            StoreError::Api { .. } => "api",
            StoreError::File { .. } => "file",
            StoreError::Manifest { .. } => "manifest",
        }
    }
}

/// Why a certificate was not stored.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// The Secret exists and is not Wharf's.
    #[error("Secret {0} exists and is not managed by Wharf (no {label} label); it is left alone: delete it, or name another secretName", label = crate::well_known::ACME_MANAGED_LABEL)]
    NotManaged(String),
    /// The write failed.
    #[error(transparent)]
    Failed(#[from] StoreError),
}

/// What users are told about orders: Events on the Ingresses and Gateways, log lines.
pub trait Report: Send + Sync + 'static {
    /// Tells the demand's Ingresses and Gateways: `warning` or normal, a reason, a message.
    fn report(&self, demand: &Demand, warning: bool, reason: &'static str, message: String);
    /// Counts an order by result (`issued` or a failure reason).
    fn order(&self, result: &str);
    /// The expiry of each managed certificate (Unix seconds), by Secret id.
    fn expiries(&self, expiries: &BTreeMap<String, i64>);
}

/// Where order results and certificate expiries are counted.
pub trait AcmeMetrics: Send + Sync + 'static {
    /// Counts an order by result (`issued` or a failure reason).
    fn order(&self, result: &str);
    /// Sets the expiry of each managed certificate (Unix seconds), by Secret id.
    fn expiries(&self, expiries: &BTreeMap<String, i64>);
}

/// Log lines for what standalone mode has no Events for.
#[derive(Debug)]
pub struct LogReport<M>(pub M);

impl<M: AcmeMetrics> Report for LogReport<M> {
    fn report(&self, demand: &Demand, warning: bool, reason: &'static str, message: String) {
        match warning {
            true => tracing::warn!(secret = %demand.id(), reason, "{message}"),
            false => tracing::info!(secret = %demand.id(), reason, "{message}"),
        }
    }

    fn order(&self, result: &str) {
        self.0.order(result);
    }

    fn expiries(&self, expiries: &BTreeMap<String, i64>) {
        self.0.expiries(expiries);
    }
}

/// The ACME settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The issuers by name.
    pub issuers: Vec<Issuer>,
    /// How long after the challenges are served here the validation is asked for, so that
    /// the other replicas serve them too.
    pub propagation: Duration,
}

/// The leader's ordering loop.
pub struct Manager<S, R> {
    settings: Settings,
    store: Arc<S>,
    report: Arc<R>,
    accounts: HashMap<String, instant_acme::Account>,
    /// Failed orders: (failures in a row, next attempt) by Secret id.
    failing: HashMap<String, (u32, i64)>,
    /// Certificates stored that translations may not show yet, by Secret id.
    fresh: HashMap<String, Current>,
    /// Renewal windows the directories suggested (ARI), by Secret id.
    windows: HashMap<String, Window>,
    /// The challenges this replica serves.
    served: watch::Receiver<Arc<AcmeChallenges>>,
}

impl<S, R> std::fmt::Debug for Manager<S, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager").field("issuers", &self.settings.issuers.len()).finish_non_exhaustive()
    }
}

impl<S: Store, R: Report> Manager<S, R> {
    /// A manager ordering through `settings`' issuers.
    pub fn new(settings: Settings, store: S, report: R, served: watch::Receiver<Arc<AcmeChallenges>>) -> Self {
        Manager {
            settings,
            store: Arc::new(store),
            report: Arc::new(report),
            accounts: HashMap::new(),
            failing: HashMap::new(),
            fresh: HashMap::new(),
            windows: HashMap::new(),
            served,
        }
    }

    /// Orders what the translations ask for while `leader` is true, one order at a time,
    /// each when it is due.
    pub async fn run(
        mut self,
        mut translations: watch::Receiver<Option<Arc<crate::Translation>>>,
        mut leader: watch::Receiver<bool>,
    ) {
        let mut leading = false;
        loop {
            if !*leader.borrow_and_update() {
                leading = false;
                if leader.changed().await.is_err() {
                    return;
                }
                continue;
            }
            if !leading {
                leading = true;
                self.withdraw_leftovers().await;
            }
            let Some(translation) = translations.borrow_and_update().clone() else {
                if translations.changed().await.is_err() {
                    return;
                }
                continue;
            };
            let current = self.current(&translation);
            self.report
                .expiries(&current.iter().filter_map(|d| Some((d.id(), d.current.as_ref()?.not_after))).collect());
            let now = crate::unix_now();
            // The renewal window of each certificate, asked for once and again when the
            // directory says (ARI).
            if let Some((demand, issuer, ari_id)) = self.unknown_window(&current, now) {
                tokio::select! {
                    w = self.window(&demand, &issuer, ari_id) => { self.windows.insert(demand.id(), w); }
                    _ = leader.wait_for(|l| !*l) => {}
                }
                continue;
            }
            match self.next_due(&current) {
                Some((due, demand, issuer)) if due <= now => {
                    let (demand, issuer) = (demand.clone(), issuer.clone());
                    // Losing the lease stops the order where it is.
                    tokio::select! {
                        _ = self.issue(&demand, &issuer) => {}
                        _ = leader.wait_for(|l| !*l) => {
                            tracing::info!(secret = %demand.id(), "no longer the leader; the new leader orders");
                        }
                    }
                }
                next => {
                    let wait = next.map(|(due, ..)| Duration::from_secs((due - now).max(1) as u64));
                    tokio::select! {
                        r = translations.changed() => if r.is_err() { return },
                        r = leader.changed() => if r.is_err() { return },
                        _ = async { tokio::time::sleep(wait.unwrap_or(Duration::MAX)).await }, if wait.is_some() => {}
                    }
                }
            }
        }
    }

    /// Withdraws the challenge answers an earlier leader that stopped mid-order left
    /// published: the orders that are still wanted are made again from the start.
    async fn withdraw_leftovers(&self) {
        match self.store.withdraw_all().await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(count = n, "withdrew the ACME challenges of orders an earlier leader left unfinished")
            }
            Err(e) => {
                tracing::warn!(reason = e.reason(), error = %e, "cannot withdraw the ACME challenges an earlier leader left; they stay answered until a new order for the same Secret replaces them")
            }
        }
    }

    /// What `translation` asks for, where a certificate stored here and not yet in a
    /// translation counts as there.
    fn current(&mut self, translation: &crate::Translation) -> Vec<Demand> {
        translation
            .acme
            .iter()
            .map(|d| {
                let mut d = d.clone();
                let id = d.id();
                match (self.fresh.get(&id), &d.current) {
                    (Some(f), Some(c)) if c.not_after >= f.not_after => {
                        self.fresh.remove(&id);
                    }
                    (Some(f), _) => d.current = Some(f.clone()),
                    (None, _) => {}
                }
                d
            })
            .collect()
    }

    /// A demand whose renewal window (ARI) is not known, or due to be asked again, at
    /// `now`: its issuer and ARI id.
    fn unknown_window(&self, current: &[Demand], now: i64) -> Option<(Demand, Issuer, String)> {
        current.iter().find_map(|d| {
            let ari_id = d.current.as_ref()?.ari_id.clone()?;
            let issuer = self.settings.issuers.iter().find(|i| i.name == d.issuer)?;
            let known = self.windows.get(&d.id()).is_some_and(|w| w.ari_id == ari_id && w.refetch > now);
            (!known).then(|| (d.clone(), issuer.clone(), ari_id))
        })
    }

    /// The demand due soonest (a failing one when it is retried), with when and its issuer.
    fn next_due<'d>(&'d self, current: &'d [Demand]) -> Option<(i64, &'d Demand, &'d Issuer)> {
        current
            .iter()
            .filter_map(|d| {
                let issuer = self.settings.issuers.iter().find(|i| i.name == d.issuer)?;
                let due = match self.failing.get(&d.id()) {
                    Some((_, at)) => *at,
                    None => d.due(issuer, self.window_of(d)),
                };
                Some((due, d, issuer))
            })
            .min_by_key(|(due, ..)| *due)
    }

    async fn issue(&mut self, demand: &Demand, issuer: &Issuer) {
        let id = demand.id();
        let why = match &demand.current {
            None => "the Secret does not exist".to_owned(),
            Some(c) if c.dns_names != demand.names => "the hosts changed".to_owned(),
            Some(c) if c.issuer != demand.issuer => format!("the issuer changed from {}", c.issuer),
            Some(c) => format!("it expires at {}", c.not_after),
        };
        self.report.report(
            demand,
            false,
            "Issuing",
            format!(
                "ordering a certificate for {} from ACME issuer {} into Secret {id}: {why}",
                demand.names.join(", "),
                issuer.name
            ),
        );
        match self.order(demand, issuer).await {
            Ok(()) => {
                self.failing.remove(&id);
                self.report.order("issued");
                self.report.report(
                    demand,
                    false,
                    "Issued",
                    format!(
                        "Secret {id} holds a certificate for {} from ACME issuer {}",
                        demand.names.join(", "),
                        issuer.name
                    ),
                );
            }
            Err(e) => {
                let (failures, _) = self.failing.get(&id).copied().unwrap_or_default();
                // A rate limit lasts: not before an hour (instant-acme keeps the directory's
                // Retry-After to itself).
                let at_least = (e.reason() == "rate_limited").then_some(RATE_LIMITED_WAIT);
                let delay = plan::retry_delay(failures + 1, at_least);
                self.failing.insert(id.clone(), (failures + 1, crate::unix_now() + delay));
                self.report.order(e.reason());
                let serving = match &demand.current {
                    Some(_) => "the current certificate keeps serving",
                    None => "its hosts get the default certificate",
                };
                self.report.report(demand, true, "Failed", format!("ordering a certificate for Secret {id} from ACME issuer {} failed: {e}; {serving}; next attempt in {delay}s", issuer.name));
            }
        }
    }

    /// The time chosen in the current certificate's renewal window, when the directory
    /// suggested one.
    fn window_of(&self, d: &Demand) -> Option<i64> {
        let ari_id = d.current.as_ref()?.ari_id.as_ref()?;
        self.windows.get(&d.id()).filter(|w| &w.ari_id == ari_id).and_then(|w| w.at)
    }

    /// Asks the directory for the renewal window of `demand`'s certificate.
    async fn window(&mut self, demand: &Demand, issuer: &Issuer, ari_id: String) -> Window {
        let now = crate::unix_now();
        let account = match self.account(issuer).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(issuer = %issuer.name, error = %e, "no renewal window: the ACME account is not usable");
                return Window { ari_id, at: None, refetch: now + 3600 };
            }
        };
        let seed = plan::seed(&demand.secret.0, &demand.secret.1);
        match client::renewal_window(&account, &ari_id).await {
            Ok(Some((start, end, retry))) => {
                let at = plan::window_time(start, end, seed);
                tracing::info!(secret = %demand.id(), start, end, at, "the ACME directory suggests a renewal window");
                Window { ari_id, at: Some(at), refetch: now + retry.clamp(60, 86_400) }
            }
            // The directory has no ARI: renewals go by the lifetime.
            Ok(None) => Window { ari_id, at: None, refetch: i64::MAX },
            Err(e) => {
                tracing::warn!(secret = %demand.id(), error = %e, "cannot read the renewal window; renewing by the lifetime");
                Window { ari_id, at: None, refetch: now + 3600 }
            }
        }
    }

    /// The issuer's account: cached, stored, or created (and stored).
    async fn account(&mut self, issuer: &Issuer) -> Result<instant_acme::Account, Failure> {
        if let Some(a) = self.accounts.get(&issuer.name) {
            return Ok(a.clone());
        }
        let stored = self.store.account(&issuer.name).await.map_err(Failure::Store)?;
        let (account, created) = client::account(issuer, stored.as_deref()).await?;
        if let Some(json) = created {
            self.store.save_account(&issuer.name, &json).await.map_err(Failure::Store)?;
        }
        self.accounts.insert(issuer.name.clone(), account.clone());
        Ok(account)
    }

    async fn order(&mut self, demand: &Demand, issuer: &Issuer) -> Result<(), Failure> {
        let account = self.account(issuer).await?;
        // A renewal names the certificate it replaces, where the directory has ARI.
        let replaces = demand.replaces().filter(|_| self.window_of(demand).is_some());
        let publisher = Publisher {
            store: Arc::clone(&self.store),
            demand: demand.clone(),
            served: self.served.clone(),
            propagation: self.settings.propagation,
        };
        let issued = client::order(&account, issuer, &demand.names, replaces, &publisher).await?;
        self.store.save_certificate(demand, &issued.chain_pem, &issued.key_pem).await.map_err(Failure::Save)?;
        if let Some(current) = Current::of(&issuer.name, issued.chain_pem.as_bytes()) {
            self.fresh.insert(demand.id(), current);
        }
        Ok(())
    }
}

/// A renewal window the directory suggested.
#[derive(Debug, Clone)]
struct Window {
    /// The certificate it is for.
    ari_id: String,
    /// The time chosen in it (Unix seconds); `None`: renew by the lifetime.
    at: Option<i64>,
    /// When to ask again.
    refetch: i64,
}

/// Why an order did not end in a stored certificate.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Order(#[from] client::OrderError),
    #[error("the ACME account cannot be stored: {0}")]
    Store(#[source] StoreError),
    #[error(transparent)]
    Save(SaveError),
}

impl Failure {
    fn reason(&self) -> &'static str {
        match self {
            Failure::Order(e) => e.reason(),
            Failure::Store(_) => "store",
            Failure::Save(SaveError::NotManaged(_)) => "not_managed",
            Failure::Save(SaveError::Failed(_)) => "store",
        }
    }
}

/// Publishes an order's answers through the store and waits until this replica serves
/// them, then for the propagation delay.
struct Publisher<S> {
    store: Arc<S>,
    demand: Demand,
    served: watch::Receiver<Arc<AcmeChallenges>>,
    propagation: Duration,
}

impl<S: Store> client::Publish for Publisher<S> {
    async fn publish(&self, answers: Vec<Answer>) -> Result<(), client::PublishError> {
        self.store.publish(&self.demand, &answers).await?;
        let mut served = self.served.clone();
        let all_served = |c: &Arc<AcmeChallenges>| {
            answers.iter().all(|a| match a {
                Answer::Http01 { token, key_authorization } => c.http01.get(token) == Some(key_authorization),
                Answer::TlsAlpn01 { name, certificate_pem, key_pem } => c.tls_alpn01.get(name).is_some_and(|cert| {
                    cert.sha256 == Certificate::digest(certificate_pem.as_bytes(), key_pem.as_bytes())
                }),
            })
        };
        match tokio::time::timeout(SERVED_TIMEOUT, served.wait_for(all_served)).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return Err(client::PublishError::Stopped),
            Err(_) => return Err(client::PublishError::NotServed(SERVED_TIMEOUT)),
        }
        tokio::time::sleep(self.propagation).await;
        Ok(())
    }

    async fn withdraw(&self) {
        if let Err(e) = self.store.withdraw(&self.demand).await {
            tracing::warn!(secret = %self.demand.id(), reason = e.reason(), error = %e, "the ACME challenges cannot be withdrawn");
        }
    }
}

/// How long an order refused for a rate limit waits at least, in seconds.
const RATE_LIMITED_WAIT: i64 = 3600;

/// How long published challenges may take to be served here.
const SERVED_TIMEOUT: Duration = Duration::from_secs(60);
