//! Reading one annotation's value: the name under either prefix, the generic value kinds
//! (booleans, sizes, seconds, counts, networks) and the report of what is unknown or refused.

use wharf_model::IpNet;

use super::*;

impl<'a> Reader<'a> {
    /// The `wharf.dev/` value of `name`, else the ingress-nginx one (when read): the
    /// full key and the value.
    pub(super) fn get(&self, name: &str) -> Option<(&'a str, &'a str)> {
        let [wharf, nginx] = self.by_name.get(name)?;
        wharf.or(nginx.filter(|_| self.opts.nginx_names))
    }

    pub(super) fn invalid(&mut self, key: &str, message: String) {
        self.findings.push((key.to_owned(), Finding::Invalid(format!("annotation {key}: {message}"))));
    }

    /// `name`'s value, trimmed, when `valid` takes it; otherwise reported as `{value:?}
    /// {explain}` and treated as absent.
    pub(super) fn text(&mut self, name: &str, valid: impl Fn(&str) -> bool, explain: &str) -> Option<String> {
        let (key, value) = self.get(name)?;
        let v = value.trim();
        if valid(v) {
            Some(v.to_owned())
        } else {
            self.invalid(key, format!("{v:?} {explain}"));
            None
        }
    }

    /// Reports every annotation under our prefixes that is not implemented, and the
    /// snippets; true when the Ingress must not be served.
    pub(super) fn unknown_and_refused(&mut self) -> bool {
        let mut skip = false;
        let ann = self.ann;
        for key in ann.keys() {
            let (prefix, name) = match (key.strip_prefix(WHARF_PREFIX), key.strip_prefix(NGINX_PREFIX)) {
                (Some(name), _) => (WHARF_PREFIX, name),
                (None, Some(name)) => (NGINX_PREFIX, name),
                (None, None) => continue,
            };
            if name.ends_with("-snippet") {
                let (verdict, how) = match self.opts.snippets {
                    SnippetPolicy::SkipIngress => {
                        skip = true;
                        (
                            "the Ingress is not served",
                            "Remove it (docs/migrating-from-ingress-nginx.md lists the annotations that replace \
                             common snippets), or start Wharf with --snippet-annotations=ignore to serve such \
                             Ingresses without their snippets",
                        )
                    }
                    SnippetPolicy::Ignore => (
                        "the Ingress is served without it (--snippet-annotations=ignore)",
                        "Check that nothing the snippet did (access control, headers) is needed",
                    ),
                };
                let message = format!(
                    "annotation {key} injects raw proxy configuration, which Wharf never runs: {verdict}. {how}."
                );
                self.findings.push((key.clone(), Finding::Refused(message)));
            } else if UNENFORCED_ACCESS_CONTROL.contains(&name) && self.unenforced(name) {
                let message = format!(
                    "annotation {key} asks for access control Wharf does not support yet; so that the Ingress \
                     is not served unprotected, its requests are answered 503 \
                     (docs/migrating-from-ingress-nginx.md lists every annotation and its status)"
                );
                self.findings.push((key.clone(), Finding::NotSupported(message)));
            } else if !(IMPLEMENTED.contains(&name) || prefix == WHARF_PREFIX && WHARF_ONLY.contains(&name)) {
                let message = if prefix == WHARF_PREFIX {
                    format!("annotation {key} is not one Wharf knows (a misspelling?); it is ignored")
                } else {
                    format!(
                        "annotation {key} is not supported by Wharf; the Ingress is served without it \
                         (docs/migrating-from-ingress-nginx.md lists every annotation and its status)"
                    )
                };
                self.findings.push((key.clone(), Finding::NotSupported(message)));
            } else if prefix == NGINX_PREFIX && !self.opts.nginx_names {
                let message = format!(
                    "annotation {key} is ignored: this controller reads only wharf.dev/ annotations \
                     (--nginx-annotations=false); use {WHARF_PREFIX}{name}"
                );
                self.findings.push((key.clone(), Finding::NotSupported(message)));
            }
        }
        skip
    }

    /// True when `name` (one of [`UNENFORCED_ACCESS_CONTROL`]) asks for its protection.
    pub(super) fn unenforced(&self, name: &str) -> bool {
        self.get(name).is_some_and(|(_, v)| v.trim() != "false")
    }

    /// A boolean; an invalid value is reported and treated as absent.
    pub(super) fn bool(&mut self, name: &str) -> Option<bool> {
        let (key, value) = self.get(name)?;
        match value.trim() {
            "true" => Some(true),
            "false" => Some(false),
            other => {
                self.invalid(key, format!("{other:?} is not \"true\" or \"false\"; it is ignored"));
                None
            }
        }
    }

    /// A size; an invalid value is reported and treated as absent.
    pub(super) fn size(&mut self, name: &str) -> Option<u64> {
        let (key, value) = self.get(name)?;
        let size = wharf_model::parse_size(value);
        if size.is_none() {
            self.invalid(key, format!("{value:?} is not a size like 8m, 512k or 0 (unlimited); it is ignored"));
        }
        size
    }

    /// A whole number of seconds (ingress-nginx's form), as milliseconds; an invalid value
    /// is reported and treated as absent.
    pub(super) fn seconds(&mut self, name: &str) -> Option<u64> {
        let (key, value) = self.get(name)?;
        match value.trim().parse::<u64>() {
            Ok(s @ 1..=86_400) => Some(s * 1000),
            _ => {
                self.invalid(
                    key,
                    format!("{value:?} is not a number of seconds from 1 to 86400; the gateway's default is used"),
                );
                None
            }
        }
    }

    /// A whole number from 1 to `max`; an invalid value is reported and treated as absent.
    pub(super) fn count(&mut self, name: &str, max: u32) -> Option<u32> {
        let (key, value) = self.get(name)?;
        match value.trim().parse::<u32>() {
            Ok(n) if (1..=max).contains(&n) => Some(n),
            _ => {
                self.invalid(key, format!("{value:?} is not a whole number from 1 to {max}; no such limit applies"));
                None
            }
        }
    }

    /// A comma-separated list of networks; `None` when any entry is invalid (reported).
    pub(super) fn networks(&mut self, key: &str, value: &str) -> Option<Vec<IpNet>> {
        let mut nets = Vec::new();
        for item in value.split(',').map(str::trim) {
            match IpNet::parse(item) {
                Ok(n) => nets.push(n),
                Err(e) => {
                    self.invalid(
                        key,
                        format!("{e}: every client is refused (403) on this Ingress's paths until it is fixed"),
                    );
                    return None;
                }
            }
        }
        Some(nets)
    }
}

/// A cookie name Wharf accepts: letters, digits, `-`, `_` and `.`.
pub(super) fn is_cookie_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}
