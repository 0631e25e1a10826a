//! Which Ingresses are ours.

use crate::hashing::HashSet;

use crate::stored::Ingress;
use k8s_openapi::api::networking::v1::IngressClass;

use super::Options;

const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";
const LEGACY_CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

/// The IngressClasses whose controller is ours.
pub(super) struct Classes<'a> {
    ours: HashSet<&'a str>,
    default_is_ours: bool,
    legacy_name: &'a str,
}

impl<'a> Classes<'a> {
    pub(super) fn new(classes: impl IntoIterator<Item = &'a IngressClass>, opts: &'a Options) -> Self {
        let mut ours = HashSet::default();
        let mut default_is_ours = false;
        for class in classes {
            let controller = class.spec.as_ref().and_then(|s| s.controller.as_deref());
            if controller != Some(opts.controller_name.as_str()) {
                continue;
            }
            let Some(name) = class.metadata.name.as_deref() else {
                continue;
            };
            ours.insert(name);
            let is_default = class
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
                .is_some_and(|v| v == "true");
            default_is_ours |= is_default;
        }
        Classes { ours, default_is_ours, legacy_name: &opts.ingress_class }
    }

    /// `spec.ingressClassName` naming one of our classes; else the legacy annotation naming
    /// our class; else, with neither set, a default IngressClass of ours.
    pub(super) fn is_ours(&self, ing: &Ingress) -> bool {
        if let Some(name) = ing.spec.as_ref().and_then(|s| s.ingress_class_name.as_deref()) {
            return self.ours.contains(name);
        }
        let legacy = ing.metadata.annotations.as_ref().and_then(|a| a.get(LEGACY_CLASS_ANNOTATION));
        match legacy {
            Some(v) => v == self.legacy_name,
            None => self.default_is_ours,
        }
    }
}
