//! The users of an Ingress's basic authentication, read from the Secret its annotations
//! name (an htpasswd file in key `auth`, or an auth map: each key a user).

use crate::hashing::{HashMap, HashSet};
use crate::translate::Reason;
use std::sync::Arc;

use crate::stored::Ingress;
use wharf_model::{
    Auth, BasicAuth, ClientAuthHost, ClientCa, ClientCertCheck, ExternalAuth, Host, ObjectRef, PasswordHash,
};

use wharf_gateway_api::referencegrants::ReferenceGrant;

use super::annotations::{ClientTlsSetting, ExternalSetting};
use super::Translator;
use crate::translate::backend::ServicePortRef;
use crate::translate::grants::{permitted, RefFrom, RefTo};
use crate::translate::tls::Secrets;
use crate::translate::Diagnostic;
use crate::well_known::CA_CRT;

/// The hosts of the rules of `ingresses`, lower-case.
pub fn rule_hosts(ingresses: &[&Ingress]) -> HashSet<String> {
    ingresses
        .iter()
        .filter_map(|i| i.spec.as_ref())
        .flat_map(|s| s.rules.iter().flatten())
        .filter_map(|r| r.host.as_deref())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// Reason of the diagnostic on an Ingress whose `auth-url` names another namespace's
/// Service or host.
pub const AUTH_URL_NOT_PERMITTED: Reason = Reason::AuthUrlNotPermitted;

impl Translator<'_> {
    /// Where the check of `e` goes: the Service its URL names (`NAME.NAMESPACE.svc`, with
    /// the cluster domain or not), else this gateway's routes for its host (`$host`, or a
    /// host among `served`). A fixed host that is neither refuses every request, and so
    /// does a Service of another namespace that no ReferenceGrant of `grants` shares with
    /// `src`'s, or a host another namespace owns.
    pub(super) fn external_auth(
        &mut self,
        src: &ObjectRef,
        e: &ExternalSetting,
        served: &HashSet<String>,
        grants: &crate::kinds::Objects<ReferenceGrant>,
    ) -> Auth {
        let service = e.host.as_deref().and_then(|h| {
            let domain = format!(".svc.{}", self.opts.cluster_domain);
            let rest = h.strip_suffix(&domain).or_else(|| h.strip_suffix(".svc"))?;
            rest.split_once('.').filter(|(name, ns)| !name.is_empty() && !ns.is_empty() && !ns.contains('.'))
        });
        let cluster = match (service, &e.host) {
            (Some((name, ns)), _)
                if !permitted(
                    grants,
                    RefFrom { group: "networking.k8s.io", kind: "Ingress", namespace: &src.namespace },
                    RefTo { group: "", kind: "Service", namespace: ns, name },
                ) =>
            {
                let why = format!(
                    "auth-url names Service {ns}/{name}, of another namespace; a ReferenceGrant in namespace {ns} \
                     from Ingresses of namespace {} to that Service shares it",
                    src.namespace
                );
                self.diag(src, AUTH_URL_NOT_PERMITTED, format!("{why}; requests are answered 503"));
                return Auth::Unavailable(why);
            }
            (Some((name, ns)), _) => {
                let port = ServicePortRef::Number(i32::from(e.port));
                let clusters = &mut self.snapshot.clusters;
                let id = self.backends.cluster_for(ns, name, &port, false, src, &mut self.diags, clusters);
                let id = id.unwrap_or_else(|| crate::translate::backend::cluster_id(ns, name, &port));
                Some(if e.tls { self.unverified_tls(id, ns, name) } else { id })
            }
            (None, Some(host)) if !served.contains(host) => {
                let why = format!(
                    "auth-url host {host} is neither a Service of the cluster (NAME.NAMESPACE.svc) nor a host of \
                     an Ingress this gateway serves"
                );
                self.diag(src, Reason::AuthUrlNotServed, format!("{why}; requests are answered 503"));
                return Auth::Unavailable(why);
            }
            (None, Some(host)) => {
                let owner = Host::parse(host).map(|h| self.claims.may_serve(&h, &src.namespace, &self.opts.ownership));
                if let Ok(Err(refusal)) = owner {
                    let why = format!("auth-url {}", refusal.message(&format!("host {host}")));
                    self.diag(src, AUTH_URL_NOT_PERMITTED, format!("{why}; requests are answered 503"));
                    return Auth::Unavailable(why);
                }
                None
            }
            (None, None) => None,
        };
        Auth::External(ExternalAuth {
            url: e.url.clone(),
            cluster,
            method: e.method.clone(),
            signin: e.signin.clone(),
            signin_redirect_param: e.signin_redirect_param.clone(),
            response_headers: e.response_headers.clone(),
            request_redirect: e.request_redirect.clone(),
            always_set_cookie: e.always_set_cookie,
            cache: e.cache.clone(),
        })
    }
}

impl Translator<'_> {
    /// What the routes of `ing` ask of client certificates, `setting` resolved: its hosts
    /// then ask for certificates chaining to the Secret's CA. `Err` (every request refused)
    /// when the CA cannot be read, or a host already asks for another CA.
    pub(super) fn client_tls(
        &mut self,
        secrets: &Secrets<'_>,
        ing: &Ingress,
        setting: &ClientTlsSetting,
    ) -> Result<ClientCertCheck, String> {
        let src = ing.object_ref();
        let (ns, name) = &setting.secret;
        let refuse = |t: &mut Self, reason: Reason, why: String| {
            t.diag(&src, reason, format!("{why}; requests are answered 503 until it is fixed"));
            Err(why)
        };
        let Some(secret) = secrets.get(ns, name) else {
            return refuse(self, Reason::AuthTlsSecretInvalid, format!("auth-tls-secret {ns}/{name} does not exist"));
        };
        let Some(pem) = secret.get(CA_CRT) else {
            let why = format!("auth-tls-secret {ns}/{name} has no key {CA_CRT:?} (the CA certificates)");
            return refuse(self, Reason::AuthTlsSecretInvalid, why);
        };
        let certificates = match wharf_model::parse_ca_bundle(pem) {
            Ok(c) => c,
            Err(e) => return refuse(self, Reason::AuthTlsSecretInvalid, format!("auth-tls-secret {ns}/{name}: {e}")),
        };
        let ca = ClientCa { source: format!("{ns}/{name}"), certificates, verify_depth: setting.verify_depth };
        let hosts: Vec<Host> = rule_hosts(&[ing]).iter().filter_map(|h| Host::parse(h).ok()).collect();
        for host in hosts {
            match self.snapshot.client_auth.iter().find(|c| c.host == host) {
                Some(other) if other.ca != ca => {
                    let why = format!(
                        "host {host} already asks for client certificates of {} at verify depth {} (an older \
                         Ingress); one CA and depth per host",
                        other.ca.source, other.ca.verify_depth
                    );
                    return refuse(self, Reason::ClientAuthConflict, why);
                }
                Some(_) => {}
                None => self.snapshot.client_auth.push(ClientAuthHost { host, ca: ca.clone() }),
            }
        }
        Ok(setting.check.clone())
    }
}

/// The key of an htpasswd file in an `auth-file` Secret.
pub const HTPASSWD_KEY: &str = "auth";

/// The users of each Secret an Ingress's basic authentication names, read once per
/// translation however many Ingresses name it.
#[derive(Debug, Default)]
pub struct Users {
    parsed: HashMap<(String, String, bool), Parsed>,
}

/// A Secret, read: its users and the problems of its other entries, or why it gives none.
type Parsed = Result<(Arc<[(String, PasswordHash)]>, Vec<String>), Refusal>;

/// Why a Secret gives no users, and until when.
#[derive(Debug, Clone)]
struct Refusal {
    why: String,
    until: &'static str,
}

impl Users {
    /// The basic authentication of the Ingress `src`: `realm`, and the users of the Secret
    /// `ns/name` (an auth map when `map`, else the htpasswd file in its `auth` key) from
    /// `secrets`. What is wrong with the Secret goes to `diags`, for each Ingress naming
    /// it; without a readable Secret every request is refused.
    pub fn resolve(
        &mut self,
        secrets: &Secrets<'_>,
        src: &ObjectRef,
        realm: &str,
        (ns, name): (&str, &str),
        map: bool,
        diags: &mut Vec<Diagnostic>,
    ) -> Auth {
        // Read once per translation, but looked up by every part that names it.
        secrets.reads.read(|| crate::changes::Read::Secret((ns.to_owned(), name.to_owned())));
        let parsed =
            self.parsed.entry((ns.to_owned(), name.to_owned(), map)).or_insert_with(|| read(secrets, ns, name, map));
        let mut report = |message: String| {
            diags.push(Diagnostic { object: src.clone(), reason: Reason::AuthSecretInvalid, message });
        };
        match parsed {
            Err(r) => {
                report(format!("{}; requests are answered 503 until it {}", r.why, r.until));
                Auth::Unavailable(r.why.clone())
            }
            // One Event per Secret: an Event recorder shows the first note of a reason only.
            Ok((users, problems)) => {
                match (problems.is_empty(), users.is_empty()) {
                    (true, true) => {
                        report(format!("auth-secret {ns}/{name} lists no users; every request is answered 401"))
                    }
                    (true, false) => {}
                    (false, false) => report(problems.join("; ")),
                    (false, true) => {
                        report(format!("{}; no user can sign in, every request is answered 401", problems.join("; ")))
                    }
                }
                Auth::Basic(BasicAuth { realm: realm.to_owned(), users: Arc::clone(users) })
            }
        }
    }
}

/// The users of Secret `ns/name`, and the problems of the entries that give none.
fn read(secrets: &Secrets<'_>, ns: &str, name: &str, map: bool) -> Parsed {
    let Some(secret) = secrets.get(ns, name) else {
        return Err(Refusal { why: format!("auth-secret {ns}/{name} does not exist"), until: "does" });
    };
    let (users, errors) = if map {
        let entries: Vec<(&str, String)> =
            secret.data().map(|(k, v)| (k, String::from_utf8_lossy(v).into_owned())).collect();
        wharf_model::parse_auth_map(entries.iter().map(|(k, v)| (*k, v.as_str())))
    } else {
        let Some(file) = secret.get(HTPASSWD_KEY) else {
            let why = format!(
                "auth-secret {ns}/{name} has no key {HTPASSWD_KEY:?} (the htpasswd file; for a Secret whose keys are \
                 the users, set auth-secret-type: auth-map)"
            );
            return Err(Refusal { why, until: "has" });
        };
        wharf_model::parse_htpasswd(&String::from_utf8_lossy(file))
    };
    let problems = errors
        .into_iter()
        .map(|e| {
            let user = e.user.map(|u| format!(" (user {u})")).unwrap_or_default();
            format!("auth-secret {ns}/{name}, {}{user}: {}; that entry cannot sign in", e.at, e.problem)
        })
        .collect();
    Ok((users.into(), problems))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Secret;

    fn secret(name: &str, data: &[(&str, &str)]) -> Secret {
        let data: serde_json::Map<String, serde_json::Value> =
            data.iter().map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v))).collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "web"}, "type": "Opaque", "stringData": data,
        }))
        .map(|mut s: Secret| {
            crate::kinds::Kind::as_written(&mut s);
            s
        })
        .unwrap_or_default()
    }

    fn resolve(secrets: &[Secret], (name, map): (&str, bool)) -> (Auth, Vec<String>) {
        let mut diags = Vec::new();
        let stored: Vec<crate::stored::Secret> = secrets.iter().cloned().map(Into::into).collect();
        let index = Secrets::new(crate::kinds::ByKey::of(&stored), None, 0);
        let src = ObjectRef::new("Ingress", "web", "app");
        let auth = Users::default().resolve(&index, &src, "staff", ("web", name), map, &mut diags);
        (auth, diags.into_iter().map(|d| format!("{}: {}", d.reason, d.message)).collect())
    }

    fn users(auth: &Auth) -> Vec<(&str, &'static str)> {
        match auth {
            Auth::Basic(b) => b.users.iter().map(|(u, h)| (u.as_str(), h.scheme())).collect(),
            Auth::External(_) | Auth::Unavailable(_) => Vec::new(),
        }
    }

    #[test]
    fn an_htpasswd_secret_gives_its_users_and_reports_each_bad_line() {
        let s = secret("users", &[("auth", "alice:{PLAIN}a\nbob:$apr1$aBlCDgVn$lrQ0SRClIT9Den5NwehZ4.\ncarol:xyz\n")]);
        let (auth, diags) = resolve(&[s], ("users", false));
        assert_eq!(users(&auth), [("alice", "PLAIN"), ("bob", "apr1")]);
        assert!(matches!(&auth, Auth::Basic(b) if b.realm == "staff"));
        assert_eq!(diags.len(), 1, "{diags:?}");
        assert!(
            diags[0].starts_with("AuthSecretInvalid: auth-secret web/users, line 3 (user carol): its hash"),
            "{diags:?}"
        );
    }

    #[test]
    fn a_bcrypt_entry_costlier_than_12_cannot_sign_in_and_says_how_to_fix_it() {
        let costly = "$2y$31$2yEnaPyh3g.hu2XKLvyMwOnwHzDcZTOjvoK3eqjGgobt0M.HhHvBW";
        let s = secret("users", &[("auth", &format!("alice:{{PLAIN}}a\nmallory:{costly}\n"))]);
        let (auth, diags) = resolve(&[s], ("users", false));
        assert_eq!(users(&auth), [("alice", "PLAIN")], "the other users still sign in");
        assert_eq!(
            diags,
            ["AuthSecretInvalid: auth-secret web/users, line 2 (user mallory): its bcrypt cost is 31, above the 12 \
              Wharf checks (each step doubles the work every sign-in pays); hash it again with htpasswd -B -C 10; \
              that entry cannot sign in"]
        );
        // Only bad entries: one diagnostic says it all (an Event shows one note per reason).
        let s = secret("users", &[("auth", &format!("carol:xyz\nmallory:{costly}\n"))]);
        let (auth, diags) = resolve(&[s], ("users", false));
        assert!(users(&auth).is_empty());
        assert_eq!(diags.len(), 1, "{diags:?}");
        assert!(diags[0].contains("line 1 (user carol)") && diags[0].contains("line 2 (user mallory)"), "{diags:?}");
        assert!(diags[0].ends_with("that entry cannot sign in; no user can sign in, every request is answered 401"));
    }

    #[test]
    fn an_auth_map_takes_each_key_as_a_user() {
        let s = secret("map", &[("dev", "{PLAIN}d"), ("ops", "{SHA}L55TUjtiq8FBorTWAZ0jy6g129A=")]);
        let (auth, diags) = resolve(std::slice::from_ref(&s), ("map", true));
        assert_eq!((users(&auth), diags.len()), (vec![("dev", "PLAIN"), ("ops", "SHA")], 0));
        // Read as a file, the same Secret has no `auth` key.
        let (auth, diags) = resolve(&[s], ("map", false));
        assert!(matches!(&auth, Auth::Unavailable(w) if w.contains("no key \"auth\"")), "{auth:?}");
        assert!(diags[0].contains("auth-secret-type: auth-map") && diags[0].ends_with("until it has"), "{diags:?}");
    }

    #[test]
    fn a_missing_secret_refuses_every_request_and_an_empty_one_admits_no_one() {
        let (auth, diags) = resolve(&[secret("other", &[("auth", "a:{PLAIN}a")])], ("users", false));
        assert_eq!(auth, Auth::Unavailable("auth-secret web/users does not exist".into()));
        assert_eq!(
            diags,
            ["AuthSecretInvalid: auth-secret web/users does not exist; requests are answered 503 until it does"]
        );
        let (auth, diags) = resolve(&[secret("users", &[("auth", "# nobody\n")])], ("users", false));
        assert_eq!(auth, Auth::Basic(BasicAuth { realm: "staff".into(), users: Vec::new().into() }));
        assert_eq!(diags, ["AuthSecretInvalid: auth-secret web/users lists no users; every request is answered 401"]);
    }

    #[test]
    fn a_secret_named_by_several_ingresses_is_read_once_and_reported_to_each() {
        let s = secret("users", &[("auth", "alice:{PLAIN}a\ncarol:xyz\n")]);
        let s = crate::stored::Secret::from(s);
        let index = Secrets::new(crate::kinds::ByKey::of(std::slice::from_ref(&s)), None, 0);
        let mut users = Users::default();
        let mut diags = Vec::new();
        let (a, b) = (ObjectRef::new("Ingress", "web", "a"), ObjectRef::new("Ingress", "web", "b"));
        let first = users.resolve(&index, &a, "one", ("web", "users"), false, &mut diags);
        let second = users.resolve(&index, &b, "two", ("web", "users"), false, &mut diags);
        match (&first, &second) {
            (Auth::Basic(x), Auth::Basic(y)) => {
                assert!(Arc::ptr_eq(&x.users, &y.users), "parsed once");
                assert_eq!((x.realm.as_str(), y.realm.as_str()), ("one", "two"));
            }
            other => panic!("{other:?}"),
        }
        let named: Vec<&str> = diags.iter().map(|d| d.object.name.as_str()).collect();
        assert_eq!(named, ["a", "b"], "each Ingress hears of the bad line");
        // Read as an auth map, the same Secret is another reading.
        let map = users.resolve(&index, &a, "one", ("web", "users"), true, &mut diags);
        assert!(matches!(&map, Auth::Basic(m) if m.users.is_empty()), "{map:?}");
    }
}
