//! One order against an ACME directory (instant-acme): the account, the challenges
//! published and withdrawn around their validation, the CSR, the chain.

use std::future::Future;
use std::time::Duration;

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, CertificateIdentifier, ChallengeType, ExternalAccountKey,
    Identifier, NewAccount, NewOrder, OrderStatus, RetryPolicy,
};

use super::plan::{Answer, ChallengeKind, Issuer};

/// Why an order failed.
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    /// The directory answered with a problem document (RFC 7807).
    #[error("the ACME server refused: {detail}")]
    Problem {
        /// Its `type`, e.g. `urn:ietf:params:acme:error:rateLimited`.
        kind: String,
        /// Its `detail`, with those of its subproblems.
        detail: String,
    },
    /// The directory could not be reached, or answered nonsense.
    #[error("the ACME server cannot be reached: {0}")]
    Unreachable(String),
    /// An authorization or the order ended invalid (a challenge failed validation).
    #[error("validation failed: {0}")]
    Invalid(String),
    /// The challenges could not be published to the replicas.
    #[error("the challenges cannot be published: {0}")]
    Publish(#[source] PublishError),
    /// Local settings are unusable (EAB key file, CA file).
    #[error("{0}")]
    Settings(String),
}

impl OrderError {
    /// Short stable reason (metric label).
    pub fn reason(&self) -> &'static str {
        match self {
            OrderError::Problem { kind, .. } if kind.ends_with(":rateLimited") => "rate_limited",
            OrderError::Problem { .. } => "refused",
            OrderError::Unreachable(_) => "unreachable",
            OrderError::Invalid(_) => "invalid",
            OrderError::Publish(_) => "publish",
            OrderError::Settings(_) => "settings",
        }
    }
}

impl From<instant_acme::Error> for OrderError {
    fn from(e: instant_acme::Error) -> Self {
        match e {
            instant_acme::Error::Api(p) => {
                let mut detail = p.detail.clone().unwrap_or_else(|| p.to_string());
                for s in &p.subproblems {
                    if let Some(d) = &s.detail {
                        detail.push_str("; ");
                        detail.push_str(d);
                    }
                }
                OrderError::Problem { kind: p.r#type.clone().unwrap_or_default(), detail }
            }
            other => OrderError::Unreachable(other.to_string()),
        }
    }
}

/// Whether a problem of this `type` would refuse a plain order as well as one naming the
/// certificate it replaces (a rate limit).
fn refuses_any_order(kind: Option<&str>) -> bool {
    kind.is_some_and(|t| t.ends_with(":rateLimited"))
}

/// An account builder trusting the issuer's `ca-file` root, else the system's roots.
fn builder(issuer: &Issuer) -> Result<instant_acme::AccountBuilder, OrderError> {
    match &issuer.ca_file {
        Some(path) => Account::builder_with_root(path)
            .map_err(|e| OrderError::Settings(format!("ca-file {}: {e}", path.display()))),
        None => Account::builder().map_err(|e| OrderError::Settings(e.to_string())),
    }
}

/// The External Account Binding key of the issuer, read from its `eab-hmac-file`.
fn eab_key(issuer: &Issuer) -> Result<Option<ExternalAccountKey>, OrderError> {
    let Some((kid, file)) = &issuer.eab else { return Ok(None) };
    let text = std::fs::read_to_string(file)
        .map_err(|e| OrderError::Settings(format!("eab-hmac-file {}: {e}", file.display())))?;
    let raw = decode_base64url(text.trim())
        .ok_or_else(|| OrderError::Settings(format!("eab-hmac-file {}: not base64url", file.display())))?;
    Ok(Some(ExternalAccountKey::new(kid.clone(), &raw)))
}

/// Checks that the files the issuer names (`ca-file`, `eab-hmac-file`) can be used, so
/// that a wrong path or content stops the start instead of the first order.
pub fn check_files(issuer: &Issuer) -> Result<(), String> {
    builder(issuer).map_err(|e| e.to_string())?;
    eab_key(issuer).map(drop).map_err(|e| e.to_string())
}

/// The issuer's account: from `stored` credentials, else a new one (returned to be stored).
pub async fn account(issuer: &Issuer, stored: Option<&str>) -> Result<(Account, Option<String>), OrderError> {
    let builder = builder(issuer)?;
    match stored.map(|s| super::plan::stored_credentials(s, &issuer.directory)) {
        Some(Ok(json)) => match serde_json::from_str::<AccountCredentials>(&json) {
            Ok(creds) => return Ok((builder.from_credentials(creds).await?, None)),
            Err(e) => {
                tracing::warn!(issuer = %issuer.name, error = %e, "the stored ACME account is unreadable; creating a new one")
            }
        },
        Some(Err(why)) => tracing::info!(issuer = %issuer.name, "{why}; creating a new ACME account"),
        None => {}
    }
    let eab = eab_key(issuer)?;
    let contact: Vec<&str> = issuer.contact.iter().map(String::as_str).collect();
    let new = NewAccount { contact: &contact, terms_of_service_agreed: true, only_return_existing: false };
    let (account, creds) = builder.create(&new, issuer.directory.clone(), eab.as_ref()).await?;
    let json = serde_json::to_value(&creds).map_err(|e| OrderError::Settings(e.to_string()))?;
    Ok((account, Some(super::plan::stored_account(&issuer.directory, json))))
}

/// Why challenges were not published.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The store refused them.
    #[error(transparent)]
    Store(#[from] super::StoreError),
    /// The data plane of this replica stopped.
    #[error("the data plane stopped")]
    Stopped,
    /// This replica did not serve them in time.
    #[error("not served within {0:?} of publishing")]
    NotServed(std::time::Duration),
}

/// What publishing challenges needs: put the answers where every replica serves them and
/// return once they do; withdraw them after validation.
pub trait Publish {
    /// Publishes `answers` and resolves once every replica answers them.
    fn publish(&self, answers: Vec<Answer>) -> impl Future<Output = Result<(), PublishError>> + Send;
    /// Withdraws what was published.
    fn withdraw(&self) -> impl Future<Output = ()> + Send;
}

/// An issued certificate.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The chain, leaf first (PEM).
    pub chain_pem: String,
    /// Its private key (PKCS#8 PEM).
    pub key_pem: String,
}

/// Orders a certificate for `names` with `issuer`'s challenge and profile, answering the
/// challenges through `publish`.
pub async fn order<P: Publish + Sync>(
    account: &Account,
    issuer: &Issuer,
    names: &[String],
    replaces: Option<&str>,
    publish: &P,
) -> Result<Issued, OrderError> {
    let identifiers: Vec<Identifier> = names.iter().map(|n| Identifier::Dns(n.clone())).collect();
    let plain = || {
        let new = NewOrder::new(&identifiers);
        match &issuer.profile {
            Some(p) => new.profile(p),
            None => new,
        }
    };
    let quoted = replaces.map(|r| format!("\"{r}\""));
    let replaced = quoted.as_deref().and_then(|q| serde_json::from_str::<CertificateIdentifier<'_>>(q).ok());
    let mut order = match replaced {
        Some(id) => match account.new_order(&plain().replaces(id)).await {
            // Naming the replaced certificate is a courtesy to the server (ARI), not a
            // condition of the renewal: when the server refuses it (replaced already by an
            // order a former leader made, issued to another account, unknown to it), a
            // plain order. A rate limit would refuse the plain order as well.
            Err(instant_acme::Error::Api(p)) if !refuses_any_order(p.r#type.as_deref()) => {
                tracing::info!(issuer = %issuer.name, problem = %p, "the ACME server refused the renewal naming the certificate it replaces; ordering without naming it");
                account.new_order(&plain()).await?
            }
            other => other?,
        },
        None => account.new_order(&plain()).await?,
    };
    let kind = match issuer.challenge {
        ChallengeKind::Http01 => ChallengeType::Http01,
        ChallengeKind::TlsAlpn01 => ChallengeType::TlsAlpn01,
    };

    // The answers of every pending authorization, published together.
    let mut answers = Vec::new();
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz?;
        match authz.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => return Err(OrderError::Invalid(format!("authorization for {} is {other:?}", authz.identifier()))),
        }
        let name = authz.identifier().to_string();
        let challenge = authz
            .challenge(kind.clone())
            .ok_or_else(|| OrderError::Invalid(format!("the server offers no {kind:?} challenge for {name}")))?;
        let key_authorization = challenge.key_authorization();
        answers.push(match issuer.challenge {
            ChallengeKind::Http01 => Answer::Http01 {
                token: challenge.token.clone(),
                key_authorization: key_authorization.as_str().to_owned(),
            },
            ChallengeKind::TlsAlpn01 => {
                let (certificate_pem, key_pem) = alpn_certificate(&name, key_authorization.digest().as_ref())?;
                Answer::TlsAlpn01 { name, certificate_pem, key_pem }
            }
        });
    }
    let validated = async {
        if !answers.is_empty() {
            publish.publish(answers).await.map_err(OrderError::Publish)?;
            let mut authorizations = order.authorizations();
            while let Some(authz) = authorizations.next().await {
                let mut authz = authz?;
                if authz.status != AuthorizationStatus::Pending {
                    continue;
                }
                if let Some(mut challenge) = authz.challenge(kind.clone()) {
                    challenge.set_ready().await?;
                }
            }
        }
        let retries = RetryPolicy::new().timeout(VALIDATION_TIMEOUT);
        let status = order.poll_ready(&retries).await?;
        Ok::<_, OrderError>(status)
    }
    .await;
    publish.withdraw().await;
    match validated? {
        OrderStatus::Ready => {}
        other => return Err(OrderError::Invalid(invalid_detail(&mut order, other).await)),
    }
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| OrderError::Settings(format!("key generation: {e}")))?;
    let mut params = rcgen::CertificateParams::new(names.to_vec())
        .map_err(|e| OrderError::Settings(format!("certificate request: {e}")))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params.serialize_request(&key).map_err(|e| OrderError::Settings(format!("certificate request: {e}")))?;
    order.finalize_csr(csr.der()).await?;
    let chain_pem = order.poll_certificate(&RetryPolicy::new().timeout(VALIDATION_TIMEOUT)).await?;
    Ok(Issued { chain_pem, key_pem: key.serialize_pem() })
}

/// How long validation and issuance may take.
const VALIDATION_TIMEOUT: Duration = Duration::from_secs(120);

/// What went wrong with an order that did not become ready: the problems of its
/// authorizations' challenges.
async fn invalid_detail(order: &mut instant_acme::Order, status: OrderStatus) -> String {
    let mut problems = Vec::new();
    let mut authorizations = order.authorizations();
    while let Some(Ok(authz)) = authorizations.next().await {
        for c in &authz.challenges {
            if let Some(e) = &c.error {
                problems.push(format!("{}: {}", authz.identifier(), e.detail.as_deref().unwrap_or("failed")));
            }
        }
    }
    match problems.is_empty() {
        true => format!("the order is {status:?}"),
        false => problems.join("; "),
    }
}

/// The TLS-ALPN-01 challenge certificate of `name` (RFC 8737 §3) and its key.
fn alpn_certificate(name: &str, digest: &[u8]) -> Result<(String, String), OrderError> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| OrderError::Settings(format!("key generation: {e}")))?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()])
        .map_err(|e| OrderError::Settings(format!("challenge certificate: {e}")))?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key).map_err(|e| OrderError::Settings(format!("challenge certificate: {e}")))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Base64url, with or without padding (how ACME servers hand out EAB keys).
fn decode_base64url(s: &str) -> Option<Vec<u8>> {
    let mut std: String = s
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    while std.len() % 4 != 0 {
        std.push('=');
    }
    wharf_model::decode_base64(&std)
}

/// The renewal window the directory suggests for the certificate `ari_id` (RFC 9773):
/// start, end (Unix seconds) and how many seconds until asking again; `None` when the
/// directory has no ARI.
pub async fn renewal_window(account: &Account, ari_id: &str) -> Result<Option<(i64, i64, i64)>, OrderError> {
    let quoted = format!("\"{ari_id}\"");
    let id: CertificateIdentifier<'_> =
        serde_json::from_str(&quoted).map_err(|e| OrderError::Settings(format!("ARI identifier {ari_id}: {e}")))?;
    let asked = tokio::time::timeout(Duration::from_secs(30), account.renewal_info(&id))
        .await
        .map_err(|_| OrderError::Unreachable("no answer in 30 s".into()))?;
    match asked {
        Ok((info, retry)) => {
            let w = info.suggested_window;
            let retry = i64::try_from(retry.as_secs()).unwrap_or(i64::MAX);
            Ok(Some((w.start.unix_timestamp(), w.end.unix_timestamp(), retry)))
        }
        Err(instant_acme::Error::Unsupported(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_rate_limit_keeps_a_renewal_from_ordering_without_naming_what_it_replaces() {
        assert!(refuses_any_order(Some("urn:ietf:params:acme:error:rateLimited")));
        for kind in [
            Some("urn:ietf:params:acme:error:alreadyReplaced"),
            Some("urn:ietf:params:acme:error:unauthorized"),
            Some("urn:ietf:params:acme:error:serverInternal"),
            Some("urn:ietf:params:acme:error:malformed"),
            None,
        ] {
            assert!(!refuses_any_order(kind), "{kind:?}");
        }
    }
}
