//! ACME against the API server: accounts and challenges in Secrets of the controller's
//! namespace, certificates in the TLS Secrets of the Ingresses and Gateway listeners, Events
//! on those Ingresses and Gateways.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client};
use wharf_gateway_api::gateways::Gateway;

use crate::acme::plan::{self, Answer};
use crate::acme::{AcmeMetrics, Report, SaveError, Store, StoreError};
use crate::translate::acme::Demand;

/// The field manager of Wharf's Secret writes.
const MANAGER: &str = "wharf";

/// The data key of an account Secret.
const CREDENTIALS_KEY: &str = "credentials.json";

/// Secrets in the API server.
#[derive(Clone)]
pub struct SecretStore {
    client: Client,
    /// The controller's namespace: accounts and challenges.
    namespace: String,
    /// The leader-election Lease: the value of the challenge Secrets' label.
    lease: String,
}

impl std::fmt::Debug for SecretStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretStore").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}

impl SecretStore {
    /// A store keeping accounts and challenges in `namespace`, for the leaders of Lease
    /// `lease`.
    pub fn new(client: Client, namespace: String, lease: String) -> Self {
        SecretStore { client, namespace, lease }
    }

    fn own(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The error of a request for Secret `name` of the controller's namespace.
    fn api<'a>(&'a self, name: &'a str) -> impl FnOnce(kube::Error) -> StoreError + 'a {
        move |source| StoreError::Api { object: format!("Secret {}/{name}", self.namespace), source }
    }
}

/// The name of the account Secret of `issuer`.
pub fn account_secret_name(issuer: &str) -> String {
    format!("wharf-acme-account-{issuer}")
}

/// The name of the challenge Secret of the order for Secret `namespace/name`.
pub fn challenge_secret_name(namespace: &str, name: &str) -> String {
    format!("wharf-acme-challenge-{:016x}", plan::seed(namespace, name))
}

async fn apply(api: &Api<Secret>, secret: &Secret) -> Result<(), kube::Error> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(secret)).await.map(drop)
}

impl Store for SecretStore {
    async fn account(&self, issuer: &str) -> Result<Option<String>, StoreError> {
        let name = account_secret_name(issuer);
        let secret = self.own().get_opt(&name).await.map_err(self.api(&name))?;
        Ok(secret
            .and_then(|s| s.data)
            .and_then(|mut d| d.remove(CREDENTIALS_KEY))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned()))
    }

    async fn save_account(&self, issuer: &str, json: &str) -> Result<(), StoreError> {
        let mut s = Secret::default();
        s.metadata.name = Some(account_secret_name(issuer));
        s.metadata.namespace = Some(self.namespace.clone());
        s.metadata.labels = Some([("app.kubernetes.io/managed-by".to_owned(), "wharf".to_owned())].into());
        s.type_ = Some("Opaque".into());
        s.string_data = Some([(CREDENTIALS_KEY.to_owned(), json.to_owned())].into());
        apply(&self.own(), &s).await.map_err(self.api(&account_secret_name(issuer)))
    }

    async fn publish(&self, demand: &Demand, answers: &[Answer]) -> Result<(), StoreError> {
        let name = challenge_secret_name(&demand.secret.0, &demand.secret.1);
        let s = plan::challenge_secret(&self.namespace, &name, &self.lease, answers);
        apply(&self.own(), &s).await.map_err(self.api(&name))
    }

    async fn withdraw(&self, demand: &Demand) -> Result<(), StoreError> {
        let name = challenge_secret_name(&demand.secret.0, &demand.secret.1);
        match self.own().delete(&name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(self.api(&name)(e)),
        }
    }

    async fn withdraw_all(&self) -> Result<usize, StoreError> {
        let selector = format!("{}={}", crate::well_known::ACME_CHALLENGE_LABEL, self.lease);
        let list = self.own().list(&ListParams::default().labels(&selector)).await.map_err(|source| {
            StoreError::Api { object: format!("Secrets of {} labelled {selector}", self.namespace), source }
        })?;
        let mut n = 0;
        for s in list.items {
            let name = s.metadata.name.unwrap_or_default();
            match self.own().delete(&name, &DeleteParams::default()).await {
                Ok(_) => n += 1,
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(self.api(&name)(e)),
            }
        }
        Ok(n)
    }

    async fn save_certificate(&self, demand: &Demand, chain_pem: &str, key_pem: &str) -> Result<(), SaveError> {
        let (namespace, name) = &demand.secret;
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let fail = |source| SaveError::Failed(StoreError::Api { object: format!("Secret {namespace}/{name}"), source });
        if let Some(existing) = api.get_opt(name).await.map_err(fail)? {
            if !plan::is_managed(&existing) {
                return Err(SaveError::NotManaged(demand.id()));
            }
        }
        let s = plan::certificate_secret(namespace, name, &demand.issuer, chain_pem, key_pem);
        apply(&api, &s).await.map_err(fail)
    }
}

/// The uid of object `name` of `api`, found by a list (the controller may list and watch
/// Gateways, not get them).
async fn uid_of<K>(api: Api<K>, name: &str) -> Option<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let found = api.list(&ListParams::default().fields(&format!("metadata.name={name}"))).await.ok()?;
    found.items.into_iter().next()?.meta().uid.clone()
}

/// Events on the Ingresses and Gateways of a demand, and metrics through callbacks.
pub struct EventReport<M> {
    client: Client,
    recorder: Recorder,
    metrics: M,
}

impl<M> std::fmt::Debug for EventReport<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventReport").finish_non_exhaustive()
    }
}

impl<M: AcmeMetrics> EventReport<M> {
    /// Events as `reporter`.
    pub fn new(client: Client, reporter: Reporter, metrics: M) -> Self {
        EventReport { recorder: Recorder::new(client.clone(), reporter), client, metrics }
    }
}

impl<M: AcmeMetrics> Report for EventReport<M> {
    fn report(&self, demand: &Demand, warning: bool, reason: &'static str, message: String) {
        match warning {
            true => tracing::warn!(secret = %demand.id(), reason, "{message}"),
            false => tracing::info!(secret = %demand.id(), reason, "{message}"),
        }
        let (client, recorder) = (self.client.clone(), self.recorder.clone());
        let sources = demand.sources.clone();
        tokio::spawn(async move {
            for src in sources {
                let (uid, api_version) = match &*src.kind {
                    "Gateway" => {
                        let api: Api<Gateway> = Api::namespaced(client.clone(), &src.namespace);
                        (uid_of(api, &src.name).await, "gateway.networking.k8s.io/v1")
                    }
                    _ => {
                        let api: Api<Ingress> = Api::namespaced(client.clone(), &src.namespace);
                        (uid_of(api, &src.name).await, "networking.k8s.io/v1")
                    }
                };
                let Some(uid) = uid else { continue };
                let reference = ObjectReference {
                    api_version: Some(api_version.into()),
                    kind: Some(src.kind.to_string()),
                    namespace: Some(src.namespace.clone()),
                    name: Some(src.name.clone()),
                    uid: Some(uid),
                    ..Default::default()
                };
                let event = Event {
                    type_: if warning { EventType::Warning } else { EventType::Normal },
                    reason: reason.into(),
                    note: Some(message.chars().take(1000).collect()),
                    action: "Certificate".into(),
                    secondary: None,
                };
                if let Err(e) = recorder.publish(&event, &reference).await {
                    tracing::warn!(object = %src, error = %e, "cannot publish Event");
                }
            }
        });
    }

    fn order(&self, result: &str) {
        self.metrics.order(result);
    }

    fn expiries(&self, expiries: &BTreeMap<String, i64>) {
        self.metrics.expiries(expiries);
    }
}
