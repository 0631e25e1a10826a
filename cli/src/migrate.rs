//! `wharf migrate`: reads Ingresses from files or a cluster and prints the report or the
//! rewritten Ingresses.

use std::io::Write;

use anyhow::Context;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, ListParams};
use wharf_controller::migrate::{self, MigrateOptions};
use wharf_controller::nginx_configmap;
use wharf_controller::translate::ingress::annotations::{AnnotationOptions, SnippetPolicy};
use wharf_controller::World;

use crate::args::{MigrateArgs, MigrateOutput, SnippetMode};

/// Runs `wharf migrate`.
pub async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    let (cm_ns, cm_name) = &args.configmap;
    let (world, configmap) = if args.files.is_empty() {
        let client = crate::controller::client_from(args.kubeconfig.as_deref()).await?;
        let api: Api<Ingress> = match &args.namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let list = api.list(&ListParams::default()).await.context("cannot list Ingresses")?;
        // Without the right to read it, the report says so and goes on with the defaults.
        let configmap = match Api::<ConfigMap>::namespaced(client, cm_ns).get_opt(cm_name).await {
            Ok(Some(c)) => Ok(c),
            Ok(None) => Err("no such ConfigMap".to_owned()),
            Err(e) => Err(format!("the ConfigMap cannot be read ({e})")),
        };
        (World { ingresses: list.items.into(), ..World::default() }, configmap)
    } else {
        match wharf_controller::files::load(&args.files) {
            Ok(loaded) => {
                let named = |c: &ConfigMap| {
                    c.metadata.name.as_deref() == Some(cm_name.as_str())
                        && c.metadata.namespace.as_deref().unwrap_or("default") == cm_ns
                };
                let configmap =
                    loaded.config_maps.into_iter().find(named).ok_or_else(|| "no such ConfigMap".to_owned());
                (loaded.world, configmap)
            }
            Err(errors) => {
                let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
                anyhow::bail!("the files cannot be read:\n{}", all.join("\n"));
            }
        }
    };
    let global = nginx_configmap::read(configmap.as_ref().ok().map(|c| c.data.clone().unwrap_or_default()).as_ref());
    let opts = MigrateOptions {
        from_class: args.from_class,
        to_class: args.to_class,
        rename_annotations: args.rename_annotations,
        annotations: AnnotationOptions {
            nginx_names: args.nginx_annotations,
            snippets: match args.snippet_annotations {
                SnippetMode::SkipIngress => SnippetPolicy::SkipIngress,
                SnippetMode::Ignore => SnippetPolicy::Ignore,
            },
        },
    };
    let mut text = String::new();
    match args.output {
        MigrateOutput::Report => {
            text = migrate::render(&migrate::report(&world, &opts), &opts);
            text.push('\n');
            let missing = configmap.as_ref().err().map(String::as_str);
            text.push_str(&nginx_configmap::render(&format!("{cm_ns}/{cm_name}"), missing, &global));
        }
        MigrateOutput::Values => {
            text = match global.flags.is_empty() {
                true => "# Nothing to set: Wharf's defaults keep ingress-nginx's global settings.\n{}\n".to_owned(),
                false => serde_yaml::to_string(&global.values)?,
            }
        }
        MigrateOutput::Yaml => {
            for ing in world.ingresses.iter().filter(|i| migrate::is_of_class(i, &opts.from_class)) {
                let mut value = serde_json::to_value(migrate::for_apply(ing, &opts))?;
                value["apiVersion"] = "networking.k8s.io/v1".into();
                value["kind"] = "Ingress".into();
                text.push_str("---\n");
                text.push_str(&serde_yaml::to_string(&value)?);
            }
        }
    }
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).context("cannot write to standard output")
}
