//! Standalone mode's input: Kubernetes objects from multi-document YAML (or JSON) files.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::World;

/// A file or one of its documents could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The path could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A document is not valid YAML, or not a valid object of its kind.
    #[error("{path}: document {doc}{object}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based document index within the file.
        doc: usize,
        /// ` (Kind namespace/name)` when known.
        object: String,
        /// What is wrong.
        message: String,
    },
}

/// Objects read from files, plus the kinds that were skipped.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The objects Wharf reads.
    pub world: World,
    /// `Kind name` of documents of kinds Wharf does not read.
    pub ignored: Vec<String>,
    /// ConfigMaps (`wharf migrate` reads ingress-nginx's).
    pub config_maps: Vec<k8s_openapi::api::core::v1::ConfigMap>,
}

/// Reads every `.yaml`, `.yml` and `.json` file under `paths` (directories recursively, in
/// name order). All errors are collected; any error means the set must not be served.
pub fn load(paths: &[PathBuf]) -> Result<Loaded, Vec<FileError>> {
    let mut loaded = Loaded::default();
    let mut errors = Vec::new();
    for file in expand(paths, &mut errors) {
        match std::fs::read_to_string(&file) {
            Ok(text) => parse_into(&file, &text, &mut loaded, &mut errors),
            Err(source) => errors.push(FileError::Read { path: file, source }),
        }
    }
    if errors.is_empty() {
        Ok(loaded)
    } else {
        Err(errors)
    }
}

/// A cheap fingerprint of the files under `paths` (names, sizes, modification times), to
/// notice changes by polling.
pub fn fingerprint(paths: &[PathBuf]) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    let mut ignored = Vec::new();
    expand(paths, &mut ignored)
        .into_iter()
        .map(|p| {
            let meta = std::fs::metadata(&p).ok();
            let len = meta.as_ref().map_or(0, |m| m.len());
            let modified = meta.and_then(|m| m.modified().ok());
            (p, len, modified)
        })
        .collect()
}

fn expand(paths: &[PathBuf], errors: &mut Vec<FileError>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in paths {
        walk(p, true, &mut out, errors);
    }
    out
}

fn walk(path: &Path, explicit: bool, out: &mut Vec<PathBuf>, errors: &mut Vec<FileError>) {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(source) => {
            errors.push(FileError::Read { path: path.to_owned(), source });
            return;
        }
    };
    if meta.is_dir() {
        let mut entries = match std::fs::read_dir(path) {
            Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect::<Vec<_>>(),
            Err(source) => {
                errors.push(FileError::Read { path: path.to_owned(), source });
                return;
            }
        };
        entries.sort();
        for e in entries {
            let hidden = e.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.'));
            if !hidden {
                walk(&e, false, out, errors);
            }
        }
    } else if explicit || is_manifest(path) {
        out.push(path.to_owned());
    }
}

fn is_manifest(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml" | "json"))
}

/// Parses a multi-document manifest text into `loaded`.
pub fn parse_into(path: &Path, text: &str, loaded: &mut Loaded, errors: &mut Vec<FileError>) {
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let err =
            |object: String, message: String| FileError::Parse { path: path.to_owned(), doc: i + 1, object, message };
        let value = match serde_yaml::Value::deserialize(doc) {
            Ok(serde_yaml::Value::Null) => continue,
            Ok(v) => v,
            Err(e) => {
                errors.push(err(String::new(), e.to_string()));
                // A syntax error ends the stream: later documents cannot be trusted.
                break;
            }
        };
        if let Err(e) = add_object(value, loaded) {
            errors.push(err(e.0, e.1));
        }
    }
}

use serde::Deserialize;

fn add_object(value: serde_yaml::Value, loaded: &mut Loaded) -> Result<(), (String, String)> {
    let str_field = |v: &serde_yaml::Value, k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_owned();
    let kind = str_field(&value, "kind");
    let api_version = str_field(&value, "apiVersion");
    let meta = value.get("metadata");
    let name = meta.map(|m| str_field(m, "name")).unwrap_or_default();
    let label = format!(" ({kind} {name})");
    if kind.is_empty() || api_version.is_empty() {
        return Err((label, "missing apiVersion or kind".into()));
    }
    if kind == "List" {
        let items = value.get("items").and_then(|i| i.as_sequence()).cloned().unwrap_or_default();
        for item in items {
            add_object(item, loaded)?;
        }
        return Ok(());
    }
    if (api_version.as_str(), kind.as_str()) == ("v1", "ConfigMap") {
        let cm = serde_yaml::from_value(value).map_err(|e| (label, e.to_string()))?;
        loaded.config_maps.push(cm);
        return Ok(());
    }
    match crate::kinds::add_to_world(&api_version, &kind, value, &mut loaded.world) {
        Some(result) => result.map_err(|e| (label, e.to_string())),
        None => {
            loaded.ignored.push(format!("{kind} {name}"));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (Loaded, Vec<FileError>) {
        let mut loaded = Loaded::default();
        let mut errors = Vec::new();
        parse_into(Path::new("x.yaml"), text, &mut loaded, &mut errors);
        (loaded, errors)
    }

    #[test]
    fn reads_kinds_and_merges_string_data() {
        let (loaded, errors) = parse(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ntype: kubernetes.io/tls\nstringData: {tls.crt: abc}\n---\n\
             apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: i, namespace: web}\n---\n\
             apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n---\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        let s = &loaded.world.secrets[0];
        assert_eq!(&*s.namespace, "default");
        assert_eq!(s.get("tls.crt"), Some(&b"abc"[..]));
        assert_eq!(loaded.world.ingresses[0].metadata.namespace.as_deref(), Some("web"));
        assert_eq!(loaded.ignored, ["Deployment d"]);
    }

    #[test]
    fn errors_name_file_document_and_object() {
        let (_, errors) = parse(
            "apiVersion: v1\nkind: Service\nmetadata: {name: ok}\n---\n\
             apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: broken}\nspec: {rules: 7}\n",
        );
        let msg = errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n");
        assert!(msg.starts_with("x.yaml: document 2 (Ingress broken): "), "{msg}");
        let (_, errors) = parse("a: [\n");
        assert!(errors[0].to_string().starts_with("x.yaml: document 1: "), "{}", errors[0]);
    }
}
