//! The pure part of ACME: issuer settings, when a certificate is ordered or renewed, how
//! long a failed order waits, and the Secrets certificates and challenges are kept in.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;

use crate::translate::acme::Demand;
use crate::well_known::ACME_MANAGED_LABEL;

impl Demand {
    /// `namespace/name` of its Secret.
    pub fn id(&self) -> String {
        format!("{}/{}", self.secret.0, self.secret.1)
    }

    /// When to order (Unix seconds): at once when the Secret holds no certificate of
    /// Wharf's, or one for other names or from another issuer; else at the time chosen in
    /// the renewal window the directory suggested (`window`), or at its renewal time.
    pub fn due(&self, issuer: &Issuer, window: Option<i64>) -> i64 {
        match &self.current {
            Some(c) if c.dns_names == self.names && c.issuer == self.issuer => window.unwrap_or_else(|| {
                let before = issuer.renew_before.map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
                renewal_time(c.not_before, c.not_after, before, seed(&self.secret.0, &self.secret.1))
            }),
            _ => i64::MIN,
        }
    }

    /// The certificate a renewal replaces (ARI `replaces`): the current one, when the order
    /// is a renewal (same names, same issuer).
    pub fn replaces(&self) -> Option<&str> {
        self.current
            .as_ref()
            .filter(|c| c.dns_names == self.names && c.issuer == self.issuer)
            .and_then(|c| c.ari_id.as_deref())
    }
}

/// The challenge type an issuer validates with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeKind {
    /// HTTP-01: `GET http://NAME/.well-known/acme-challenge/TOKEN` on port 80.
    Http01,
    /// TLS-ALPN-01: a TLS handshake with ALPN `acme-tls/1` on port 443.
    TlsAlpn01,
}

/// An ACME issuer (`--acme-issuer`).
#[derive(Debug, Clone, PartialEq)]
pub struct Issuer {
    /// How Ingresses and listeners name it (`wharf.dev/acme-issuer`).
    pub name: String,
    /// The directory URL.
    pub directory: String,
    /// Contact addresses (`mailto:` URLs).
    pub contact: Vec<String>,
    /// The challenge type.
    pub challenge: ChallengeKind,
    /// The certificate profile to ask for (draft-aaron-acme-profiles), if any.
    pub profile: Option<String>,
    /// PEM roots the directory's TLS certificate must chain to, instead of the system's.
    pub ca_file: Option<PathBuf>,
    /// External Account Binding: the key id and the file holding the base64url HMAC key.
    pub eab: Option<(String, PathBuf)>,
    /// Renew this long before expiry, instead of at two thirds of the lifetime (when the
    /// directory offers no renewal window).
    pub renew_before: Option<std::time::Duration>,
}

impl std::str::FromStr for Issuer {
    type Err = String;

    /// `name=NAME,directory=URL[,email=ADDRESS]...[,challenge=http-01|tls-alpn-01]
    /// [,profile=P][,ca-file=PATH][,eab-kid=KID,eab-hmac-file=PATH][,renew-before=DURATION]`.
    fn from_str(s: &str) -> Result<Issuer, String> {
        let mut fields: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item.split_once('=').ok_or_else(|| format!("{item:?} is not KEY=VALUE"))?;
            fields.entry(k.trim()).or_default().push(v.trim());
        }
        let mut one = |k: &str| -> Result<Option<String>, String> {
            match fields.remove(k).as_deref() {
                None => Ok(None),
                Some([v]) if !v.is_empty() => Ok(Some((*v).to_owned())),
                Some([_]) => Err(format!("{k} is empty")),
                Some(_) => Err(format!("{k} is given more than once")),
            }
        };
        let name = one("name")?.ok_or("name is missing")?;
        if !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') || name.len() > 63 {
            return Err(format!("name {name:?} must be lower-case letters, digits and '-', at most 63"));
        }
        let directory = one("directory")?.ok_or("directory is missing")?;
        if !directory.starts_with("https://") {
            return Err(format!("directory {directory:?} must be an https:// URL"));
        }
        let challenge = match one("challenge")?.as_deref() {
            None | Some("http-01") => ChallengeKind::Http01,
            Some("tls-alpn-01") => ChallengeKind::TlsAlpn01,
            Some(other) => return Err(format!("challenge {other:?} is not http-01 or tls-alpn-01")),
        };
        let profile = one("profile")?;
        let ca_file = one("ca-file")?.map(PathBuf::from);
        let eab = match (one("eab-kid")?, one("eab-hmac-file")?) {
            (Some(kid), Some(file)) => Some((kid, PathBuf::from(file))),
            (None, None) => None,
            _ => return Err("eab-kid and eab-hmac-file go together".into()),
        };
        let renew_before = match one("renew-before")? {
            Some(d) => Some(
                crate::duration::parse(&d, &crate::duration::ACME)
                    .ok_or_else(|| format!("renew-before {d:?} is not a duration like 720h"))?,
            ),
            None => None,
        };
        let contact = fields
            .remove("email")
            .unwrap_or_default()
            .into_iter()
            .map(|e| match e.contains('@') && !e.contains([':', ' ', ',']) {
                true => Ok(format!("mailto:{e}")),
                false => Err(format!("email {e:?} is not an address")),
            })
            .collect::<Result<_, _>>()?;
        if let Some(k) = fields.keys().next() {
            return Err(format!("unknown key {k:?}"));
        }
        Ok(Issuer { name, directory, contact, challenge, profile, ca_file, eab, renew_before })
    }
}

/// When a certificate valid from `not_before` to `not_after` (Unix seconds) is renewed:
/// `renew_before` ahead of expiry, else at two thirds of its lifetime; then earlier by up to
/// a twentieth of the lifetime, by `seed` (so that many certificates issued together are
/// not renewed together, and a new leader picks the same time). Never before issuance.
pub fn renewal_time(not_before: i64, not_after: i64, renew_before: Option<i64>, seed: u64) -> i64 {
    let lifetime = (not_after - not_before).max(0);
    let due = match renew_before {
        Some(b) => not_after - b,
        None => not_before + lifetime * 2 / 3,
    };
    let jitter = match lifetime / 20 {
        0 => 0,
        span => (seed % span as u64) as i64,
    };
    (due - jitter).max(not_before)
}

/// A time in the renewal window `[start, end)` the directory suggested (ARI, RFC 9773),
/// chosen by `seed`.
pub fn window_time(start: i64, end: i64, seed: u64) -> i64 {
    match end - start {
        span if span > 0 => start + (seed % span as u64) as i64,
        _ => start,
    }
}

/// How long to wait after the `failures`-th failed order in a row: a minute, doubling, at
/// most a day; the directory's `Retry-After` when it asks for longer.
pub fn retry_delay(failures: u32, retry_after: Option<i64>) -> i64 {
    const MIN: i64 = 60;
    const MAX: i64 = 86_400;
    let backoff = MIN.saturating_mul(1i64 << failures.saturating_sub(1).min(20)).min(MAX);
    retry_after.map_or(backoff, |r| r.max(backoff))
}

/// What is stored of an account: its credentials and the directory they belong to.
pub fn stored_account(directory: &str, credentials: serde_json::Value) -> String {
    serde_json::json!({"directory": directory, "credentials": credentials}).to_string()
}

/// The credentials (JSON) in what [`stored_account`] stored, when they belong to
/// `directory`; else why not (an issuer whose directory changed gets a new account).
pub fn stored_credentials(stored: &str, directory: &str) -> Result<String, String> {
    let v: serde_json::Value =
        serde_json::from_str(stored).map_err(|e| format!("the stored account is unreadable: {e}"))?;
    match (v.get("directory").and_then(|d| d.as_str()), v.get("credentials")) {
        (Some(d), Some(c)) if d == directory => Ok(c.to_string()),
        (Some(d), Some(_)) => Err(format!("the stored account belongs to directory {d}")),
        _ => Err("the stored account is unreadable".into()),
    }
}

/// A stable seed from a Secret's namespace and name (FNV-1a).
pub fn seed(namespace: &str, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in namespace.bytes().chain([b'/']).chain(name.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// True when Wharf manages `secret` (it carries [`ACME_MANAGED_LABEL`]).
pub fn is_managed(secret: &Secret) -> bool {
    secret.metadata.labels.as_ref().is_some_and(|l| l.contains_key(ACME_MANAGED_LABEL))
}

/// The TLS Secret `namespace/name` holding an issued chain and key, managed by Wharf for
/// `issuer`.
pub fn certificate_secret(namespace: &str, name: &str, issuer: &str, chain_pem: &str, key_pem: &str) -> Secret {
    let mut s = Secret::default();
    s.metadata.namespace = Some(namespace.to_owned());
    s.metadata.name = Some(name.to_owned());
    s.metadata.labels = Some(
        [
            (ACME_MANAGED_LABEL.to_owned(), issuer.to_owned()),
            ("app.kubernetes.io/managed-by".to_owned(), "wharf".to_owned()),
        ]
        .into(),
    );
    s.type_ = Some("kubernetes.io/tls".to_owned());
    s.data = Some(
        [
            (crate::well_known::TLS_CRT.to_owned(), ByteString(chain_pem.as_bytes().to_vec())),
            (crate::well_known::TLS_KEY.to_owned(), ByteString(key_pem.as_bytes().to_vec())),
        ]
        .into(),
    );
    s
}

/// One challenge answer to publish.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// HTTP-01: token and key authorization.
    Http01 { token: String, key_authorization: String },
    /// TLS-ALPN-01: the name, the challenge certificate and its key (PEM).
    TlsAlpn01 { name: String, certificate_pem: String, key_pem: String },
}

/// The Secret `namespace/name` publishing `answers` to every replica (see
/// [`crate::translate::acme`]), labelled with `owner`: the leader-election Lease whose
/// leaders order (replicas answer every challenge Secret of the namespace, but a new leader
/// withdraws only those of its own Lease).
pub fn challenge_secret(namespace: &str, name: &str, owner: &str, answers: &[Answer]) -> Secret {
    use crate::translate::acme::{HTTP01_KEY, TLS_ALPN01_KEY};
    use crate::well_known::ACME_CHALLENGE_LABEL;
    let mut data = BTreeMap::new();
    for a in answers {
        match a {
            Answer::Http01 { token, key_authorization } => {
                data.insert(format!("{HTTP01_KEY}{token}"), ByteString(key_authorization.as_bytes().to_vec()));
            }
            Answer::TlsAlpn01 { name, certificate_pem, key_pem } => {
                data.insert(format!("{TLS_ALPN01_KEY}{name}.crt"), ByteString(certificate_pem.as_bytes().to_vec()));
                data.insert(format!("{TLS_ALPN01_KEY}{name}.key"), ByteString(key_pem.as_bytes().to_vec()));
            }
        }
    }
    let mut s = Secret::default();
    s.metadata.namespace = Some(namespace.to_owned());
    s.metadata.name = Some(name.to_owned());
    s.metadata.labels = Some(
        [
            (ACME_CHALLENGE_LABEL.to_owned(), owner.to_owned()),
            ("app.kubernetes.io/managed-by".to_owned(), "wharf".to_owned()),
        ]
        .into(),
    );
    s.type_ = Some("Opaque".to_owned());
    s.data = Some(data);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::acme::{ari_id, Current};

    #[test]
    fn issuers_parse_from_their_flag() {
        let i: Issuer = "name=le, directory=https://acme.example/dir,email=ops@example.com,email=sec@example.com,\
             challenge=tls-alpn-01,profile=shortlived,ca-file=/roots.pem,eab-kid=kid-1,eab-hmac-file=/hmac,renew-before=30d"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            i,
            Issuer {
                name: "le".into(),
                directory: "https://acme.example/dir".into(),
                contact: vec!["mailto:ops@example.com".into(), "mailto:sec@example.com".into()],
                challenge: ChallengeKind::TlsAlpn01,
                profile: Some("shortlived".into()),
                ca_file: Some("/roots.pem".into()),
                eab: Some(("kid-1".into(), "/hmac".into())),
                renew_before: Some(std::time::Duration::from_secs(30 * 86_400)),
            }
        );
        for name in ["le-2", &"a".repeat(63)] {
            let i: Result<Issuer, _> = format!("name={name},directory=https://a/d").parse();
            assert_eq!(i.map(|i| i.name), Ok(name.to_owned()));
        }
        let long = format!("name={},directory=https://a/d", "a".repeat(64));
        assert!(long.parse::<Issuer>().is_err_and(|e| e.contains("at most 63")));
        let plain: Issuer = "name=staging,directory=https://a/d".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (plain.challenge, plain.contact.len(), plain.eab, plain.renew_before),
            (ChallengeKind::Http01, 0, None, None)
        );
        for (bad, why) in [
            ("directory=https://a/d", "name is missing"),
            ("name=a", "directory is missing"),
            ("name=A,directory=https://a/d", "must be lower-case"),
            ("name=a,directory=http://a/d", "must be an https:// URL"),
            ("name=a,name=b,directory=https://a/d", "more than once"),
            ("name=,directory=https://a/d", "name is empty"),
            ("name=a,directory=https://a/d,challenge=dns-01", "not http-01 or tls-alpn-01"),
            ("name=a,directory=https://a/d,eab-kid=k", "go together"),
            ("name=a,directory=https://a/d,eab-hmac-file=/f", "go together"),
            ("name=a,directory=https://a/d,renew-before=soon", "not a duration"),
            ("name=a,directory=https://a/d,email=nobody", "not an address"),
            ("name=a,directory=https://a/d,email=a@b:c", "not an address"),
            ("name=a,directory=https://a/d,color=blue", "unknown key \"color\""),
            ("name=a,directory=https://a/d,oops", "is not KEY=VALUE"),
        ] {
            let err = bad.parse::<Issuer>().err().unwrap_or_default();
            assert!(err.contains(why), "{bad}: {err}");
        }
        assert_eq!(
            format!("{:?}", "name=a,directory=https://a/d,renew-before=90s".parse::<Issuer>().map(|i| i.renew_before)),
            "Ok(Some(90s))"
        );
    }

    #[test]
    fn renewal_comes_at_two_thirds_of_the_lifetime_or_before_expiry_moved_earlier_by_the_seed() {
        // 90 days: two thirds is day 60; the jitter is below 4.5 days.
        let (start, end) = (1_000_000, 1_000_000 + 90 * 86_400);
        assert_eq!(renewal_time(start, end, None, 0), start + 60 * 86_400);
        assert_eq!(renewal_time(start, end, None, 3600), start + 60 * 86_400 - 3600);
        let span = (90 * 86_400 / 20) as u64;
        assert_eq!(renewal_time(start, end, None, span), start + 60 * 86_400);
        assert_eq!(renewal_time(start, end, None, span - 1), start + 60 * 86_400 - (span as i64 - 1));
        assert_eq!(renewal_time(start, end, Some(30 * 86_400), 0), end - 30 * 86_400);
        assert_eq!(renewal_time(start, end, Some(10 * 86_400), 7), end - 10 * 86_400 - 7);
        // Never before issuance, whatever renew-before says.
        assert_eq!(renewal_time(start, end, Some(100 * 86_400), 0), start);
        // A certificate of a minute: no jitter below a second.
        assert_eq!(renewal_time(0, 19, None, 12345), 12);
        assert_eq!(renewal_time(0, 60, None, 5), 40 - 2);
        assert_eq!(renewal_time(10, 5, None, 5), 10);
    }

    #[test]
    fn a_renewal_window_gives_a_time_inside_it() {
        assert_eq!(window_time(100, 200, 0), 100);
        assert_eq!(window_time(100, 200, 99), 199);
        assert_eq!(window_time(100, 200, 100), 100);
        assert_eq!(window_time(100, 200, 250), 150);
        assert_eq!(window_time(100, 100, 7), 100);
        assert_eq!(window_time(100, 50, 7), 100);
    }

    #[test]
    fn failed_orders_wait_a_minute_doubling_to_a_day_or_what_the_directory_asks() {
        let delays: Vec<i64> = (1..=12).map(|n| retry_delay(n, None)).collect();
        assert_eq!(delays, [60, 120, 240, 480, 960, 1920, 3840, 7680, 15_360, 30_720, 61_440, 86_400]);
        assert_eq!(retry_delay(0, None), 60);
        assert_eq!(retry_delay(u32::MAX, None), 86_400);
        assert_eq!(retry_delay(1, Some(3600)), 3600);
        assert_eq!(retry_delay(3, Some(10)), 240);
    }

    #[test]
    fn a_demand_is_due_at_once_unless_its_certificate_is_for_its_names_from_its_issuer() {
        let issuer: Issuer = "name=le,directory=https://a/d".parse().unwrap_or_else(|e| panic!("{e}"));
        let current = Current {
            issuer: "le".into(),
            dns_names: vec!["a.example.com".into(), "b.example.com".into()],
            not_before: 0,
            not_after: 90 * 86_400,
            ari_id: Some("aki.serial".into()),
        };
        let mut d = Demand {
            secret: ("web".into(), "shop-tls".into()),
            names: current.dns_names.clone(),
            issuer: "le".into(),
            sources: vec![],
            current: Some(current.clone()),
        };
        assert_eq!(d.id(), "web/shop-tls");
        let renewal = renewal_time(0, 90 * 86_400, None, seed("web", "shop-tls"));
        assert_eq!(d.due(&issuer, None), renewal);
        assert!(renewal > 55 * 86_400 && renewal <= 60 * 86_400, "{renewal}");
        assert_eq!(d.due(&issuer, Some(1234)), 1234);
        assert_eq!(d.replaces(), Some("aki.serial"));
        let soon = Issuer { renew_before: Some(std::time::Duration::from_secs(86_400)), ..issuer.clone() };
        assert_eq!(d.due(&soon, None), renewal_time(0, 90 * 86_400, Some(86_400), seed("web", "shop-tls")));
        d.names.push("c.example.com".into());
        assert_eq!((d.due(&issuer, Some(1234)), d.replaces()), (i64::MIN, None));
        d.names = current.dns_names.clone();
        d.issuer = "staging".into();
        assert_eq!((d.due(&issuer, Some(1234)), d.replaces()), (i64::MIN, None));
        d.issuer = "le".into();
        d.current = None;
        assert_eq!((d.due(&issuer, Some(1234)), d.replaces()), (i64::MIN, None));
    }

    #[test]
    fn a_stored_chain_gives_its_names_validity_and_renewal_identifier() {
        let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap_or_else(|e| panic!("{e}"));
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap_or_else(|e| panic!("{e}"));
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap_or_else(|e| panic!("{e}"));
        let names = vec!["b.example.com".to_owned(), "a.example.com".to_owned(), "b.example.com".to_owned()];
        let mut params = rcgen::CertificateParams::new(names).unwrap_or_else(|e| panic!("{e}"));
        params.serial_number = Some(rcgen::SerialNumber::from(vec![1, 2, 3]));
        params.use_authority_key_identifier_extension = true;
        let leaf = params.signed_by(&key, &issuer).unwrap_or_else(|e| panic!("{e}"));
        let chain = format!("{}{}", leaf.pem(), ca.pem());

        let c = Current::of("le", chain.as_bytes()).unwrap_or_else(|| panic!("parses"));
        assert_eq!(
            (c.issuer.as_str(), c.dns_names.clone()),
            ("le", vec!["a.example.com".to_owned(), "b.example.com".to_owned()])
        );
        assert!(c.not_after > c.not_before && c.not_before > 0, "{c:?}");
        let id = c.ari_id.clone().unwrap_or_default();
        let (aki, serial) = id.split_once('.').unwrap_or_default();
        assert_eq!(serial, "AQID", "{id}");
        assert!(aki.len() > 20 && !aki.contains(['=', '+', '/']), "{id}");
        assert_eq!(ari_id(chain.as_bytes()), c.ari_id);

        // A self-signed certificate has no Authority Key Identifier: no renewal identifier.
        assert_eq!(ari_id(ca.pem().as_bytes()), None);
        assert_eq!(Current::of("le", ca.pem().as_bytes()).map(|c| c.ari_id), Some(None));
        assert_eq!(Current::of("le", b"not PEM"), None);
    }

    #[test]
    fn a_stored_account_is_used_only_with_its_directory() {
        let creds = serde_json::json!({"id": "https://a/acct/1", "key_pkcs8": "x"});
        let stored = stored_account("https://a/dir", creds.clone());
        assert_eq!(
            stored_credentials(&stored, "https://a/dir").map(|c| serde_json::from_str::<serde_json::Value>(&c).ok()),
            Ok(Some(creds))
        );
        let moved = stored_credentials(&stored, "https://b/dir").err().unwrap_or_default();
        assert!(moved.contains("belongs to directory https://a/dir"), "{moved}");
        for bad in ["", "{}", r#"{"directory": "https://a/dir"}"#, r#"{"credentials": {}}"#] {
            let why = stored_credentials(bad, "https://a/dir").err().unwrap_or_default();
            assert!(why.contains("unreadable"), "{bad}: {why}");
        }
    }

    #[test]
    fn seeds_are_stable_and_differ_by_secret() {
        assert_eq!(seed("web", "shop-tls"), seed("web", "shop-tls"));
        assert_ne!(seed("web", "shop-tls"), seed("web", "shop-tl"));
        assert_ne!(seed("we", "bshop-tls"), seed("web", "shop-tls"));
        assert_eq!(seed("", ""), (0xcbf2_9ce4_8422_2325u64 ^ u64::from(b'/')).wrapping_mul(0x0100_0000_01b3));
    }

    #[test]
    fn managed_secrets_carry_the_issuer_label_and_the_chain() {
        let s = certificate_secret("web", "shop-tls", "le", "CHAIN", "KEY");
        assert!(is_managed(&s));
        assert_eq!(s.type_.as_deref(), Some("kubernetes.io/tls"));
        assert_eq!(s.metadata.labels.as_ref().and_then(|l| l.get(ACME_MANAGED_LABEL)).map(String::as_str), Some("le"));
        let data = s.data.unwrap_or_default();
        assert_eq!((data["tls.crt"].0.as_slice(), data["tls.key"].0.as_slice()), (&b"CHAIN"[..], &b"KEY"[..]));
        assert!(!is_managed(&Secret::default()));
        let mut other = Secret::default();
        other.metadata.labels = Some([("app".to_owned(), "x".to_owned())].into());
        assert!(!is_managed(&other));
    }

    #[test]
    fn a_challenge_secret_is_read_back_as_the_challenges_it_publishes() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap_or_else(|e| panic!("{e}"));
        let params = rcgen::CertificateParams::new(vec!["a.example.com".to_owned()]).unwrap_or_else(|e| panic!("{e}"));
        let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
        let answers = [
            Answer::Http01 { token: "tok".into(), key_authorization: "tok.thumb".into() },
            Answer::TlsAlpn01 {
                name: "a.example.com".into(),
                certificate_pem: cert.pem(),
                key_pem: key.serialize_pem(),
            },
        ];
        let s = challenge_secret("wharf", "wharf-acme-1", "wharf-leader", &answers);
        let labels = s.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get(crate::well_known::ACME_CHALLENGE_LABEL).map(String::as_str), Some("wharf-leader"));
        let mut diags = Vec::new();
        let got = crate::translate::acme::challenges(&[s.into()], "wharf", &mut diags);
        assert!(diags.is_empty(), "{diags:?}");
        assert_eq!(got.http01.get("tok").map(String::as_str), Some("tok.thumb"));
        assert_eq!(
            got.tls_alpn01.get("a.example.com").map(|c| c.sha256),
            Some(wharf_model::Certificate::digest(cert.pem().as_bytes(), key.serialize_pem().as_bytes()))
        );
    }
}
