//! `wharf migrate`: reads Ingresses from files or a cluster and prints the report or the
//! rewritten Ingresses.

use std::io::Write;

use anyhow::Context;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, ListParams};
use wharf_controller::migrate::{self, MigrateOptions};
use wharf_controller::translate::annotations::{AnnotationOptions, SnippetPolicy};
use wharf_controller::World;

use crate::args::{MigrateArgs, MigrateOutput, SnippetMode};

/// Runs `wharf migrate`.
pub async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    let world = if args.files.is_empty() {
        let client = crate::controller::client_from(args.kubeconfig.as_deref()).await?;
        let api: Api<Ingress> = match &args.namespace {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::all(client),
        };
        let list = api.list(&ListParams::default()).await.context("cannot list Ingresses")?;
        World { ingresses: list.items, ..World::default() }
    } else {
        match wharf_controller::files::load(&args.files) {
            Ok(loaded) => loaded.world,
            Err(errors) => {
                let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
                anyhow::bail!("the files cannot be read:\n{}", all.join("\n"));
            }
        }
    };
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
        MigrateOutput::Report => text = migrate::render(&migrate::report(&world, &opts), &opts),
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
