//! The users of an Ingress's basic authentication, read from the Secret its annotations
//! name (an htpasswd file in key `auth`, or an auth map: each key a user).

use std::collections::HashSet;

use k8s_openapi::api::networking::v1::Ingress;
use wharf_model::{Auth, BasicAuth, ExternalAuth, ObjectRef};

use super::annotations::{AuthSetting, ExternalSetting};
use super::backend::ServicePortRef;
use super::tls::Secrets;
use super::{Diagnostic, Translator};

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

impl Translator<'_> {
    /// Where the check of `e` goes: the Service its URL names (`NAME.NAMESPACE.svc`, with
    /// the cluster domain or not), else this gateway's routes for its host (`$host`, or a
    /// host among `served`). A fixed host that is neither refuses every request.
    pub(super) fn external_auth(&mut self, src: &ObjectRef, e: &ExternalSetting, served: &HashSet<String>) -> Auth {
        let service = e.host.as_deref().and_then(|h| {
            let domain = format!(".svc.{}", self.opts.cluster_domain);
            let rest = h.strip_suffix(&domain).or_else(|| h.strip_suffix(".svc"))?;
            rest.split_once('.').filter(|(name, ns)| !name.is_empty() && !ns.is_empty() && !ns.contains('.'))
        });
        let cluster = match (service, &e.host) {
            (Some((name, ns)), _) => {
                let port = ServicePortRef::Number(i32::from(e.port));
                let clusters = &mut self.snapshot.clusters;
                let id = self.backends.cluster_for(ns, name, &port, false, src, &mut self.diags, clusters);
                let id = id.unwrap_or_else(|| super::backend::cluster_id(ns, name, &port));
                Some(if e.tls { self.unverified_tls(id, ns, name) } else { id })
            }
            (None, Some(host)) if !served.contains(host) => {
                let why = format!(
                    "auth-url host {host} is neither a Service of the cluster (NAME.NAMESPACE.svc) nor a host of \
                     an Ingress this gateway serves"
                );
                self.diag(src, "AuthURLNotServed", format!("{why}; requests are answered 503"));
                return Auth::Unavailable(why);
            }
            (None, _) => None,
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
        })
    }
}

/// The key of an htpasswd file in an `auth-file` Secret.
pub const HTPASSWD_KEY: &str = "auth";

/// What `setting` asks of the routes of the Ingress `src`, its Secret read from
/// `secrets`; what is wrong goes to `diags`. Authentication that cannot be set up refuses
/// every request.
pub fn resolve(secrets: &Secrets<'_>, src: &ObjectRef, setting: &AuthSetting, diags: &mut Vec<Diagnostic>) -> Auth {
    let (realm, (ns, name), map) = match setting {
        AuthSetting::Unavailable(why) => return Auth::Unavailable(why.clone()),
        // Resolved by the translator, which knows the Services.
        AuthSetting::External(_) => return Auth::Unavailable("external authentication was not resolved".into()),
        AuthSetting::Basic { realm, secret, map } => (realm, secret, *map),
    };
    let mut report = |message: String| {
        diags.push(Diagnostic { object: src.clone(), reason: "AuthSecretInvalid", message });
    };
    let Some(secret) = secrets.get(ns, name) else {
        let why = format!("auth-secret {ns}/{name} does not exist");
        report(format!("{why}; requests are answered 503 until it does"));
        return Auth::Unavailable(why);
    };
    let data = secret.data.as_ref();
    let (users, errors) = if map {
        let entries: Vec<(&str, String)> =
            data.into_iter().flatten().map(|(k, v)| (k.as_str(), String::from_utf8_lossy(&v.0).into_owned())).collect();
        wharf_model::parse_auth_map(entries.iter().map(|(k, v)| (*k, v.as_str())))
    } else {
        let Some(file) = data.and_then(|d| d.get(HTPASSWD_KEY)) else {
            let why = format!(
                "auth-secret {ns}/{name} has no key {HTPASSWD_KEY:?} (the htpasswd file; for a Secret whose keys are \
                 the users, set auth-secret-type: auth-map)"
            );
            report(format!("{why}; requests are answered 503 until it has"));
            return Auth::Unavailable(why);
        };
        wharf_model::parse_htpasswd(&String::from_utf8_lossy(&file.0))
    };
    for e in errors {
        let user = e.user.map(|u| format!(" (user {u})")).unwrap_or_default();
        report(format!("auth-secret {ns}/{name}, {}{user}: {}; that entry cannot sign in", e.at, e.problem));
    }
    if users.is_empty() {
        report(format!("auth-secret {ns}/{name} lists no users; every request is answered 401"));
    }
    Auth::Basic(BasicAuth { realm: realm.clone(), users: users.into() })
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

    fn basic(name: &str, map: bool) -> AuthSetting {
        AuthSetting::Basic { realm: "staff".into(), secret: ("web".into(), name.into()), map }
    }

    fn resolve(secrets: &[Secret], setting: &AuthSetting) -> (Auth, Vec<String>) {
        let mut diags = Vec::new();
        let index = Secrets::new(secrets, None, 0);
        let auth = super::resolve(&index, &ObjectRef::new("Ingress", "web", "app"), setting, &mut diags);
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
        let (auth, diags) = resolve(&[s], &basic("users", false));
        assert_eq!(users(&auth), [("alice", "PLAIN"), ("bob", "apr1")]);
        assert!(matches!(&auth, Auth::Basic(b) if b.realm == "staff"));
        assert_eq!(diags.len(), 1, "{diags:?}");
        assert!(
            diags[0].starts_with("AuthSecretInvalid: auth-secret web/users, line 3 (user carol): its hash"),
            "{diags:?}"
        );
    }

    #[test]
    fn an_auth_map_takes_each_key_as_a_user() {
        let s = secret("map", &[("dev", "{PLAIN}d"), ("ops", "{SHA}L55TUjtiq8FBorTWAZ0jy6g129A=")]);
        let (auth, diags) = resolve(std::slice::from_ref(&s), &basic("map", true));
        assert_eq!((users(&auth), diags.len()), (vec![("dev", "PLAIN"), ("ops", "SHA")], 0));
        // Read as a file, the same Secret has no `auth` key.
        let (auth, diags) = resolve(&[s], &basic("map", false));
        assert!(matches!(&auth, Auth::Unavailable(w) if w.contains("no key \"auth\"")), "{auth:?}");
        assert!(diags[0].contains("auth-secret-type: auth-map") && diags[0].ends_with("until it has"), "{diags:?}");
    }

    #[test]
    fn a_missing_secret_refuses_every_request_and_an_empty_one_admits_no_one() {
        let (auth, diags) = resolve(&[secret("other", &[("auth", "a:{PLAIN}a")])], &basic("users", false));
        assert_eq!(auth, Auth::Unavailable("auth-secret web/users does not exist".into()));
        assert_eq!(
            diags,
            ["AuthSecretInvalid: auth-secret web/users does not exist; requests are answered 503 until it does"]
        );
        let (auth, diags) = resolve(&[secret("users", &[("auth", "# nobody\n")])], &basic("users", false));
        assert_eq!(auth, Auth::Basic(BasicAuth { realm: "staff".into(), users: Vec::new().into() }));
        assert_eq!(diags, ["AuthSecretInvalid: auth-secret web/users lists no users; every request is answered 401"]);
    }

    #[test]
    fn what_cannot_be_enforced_stays_refused() {
        let (auth, diags) = resolve(&[], &AuthSetting::Unavailable("auth-url is not supported".into()));
        assert_eq!((auth, diags.len()), (Auth::Unavailable("auth-url is not supported".into()), 0));
    }
}
