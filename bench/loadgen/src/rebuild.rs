//! The cost of one rebuild, in process: translating a set of objects (as `wharf run -f`
//! reads them) and compiling the snapshot, repeated over the same objects so that each
//! round after the first reuses what the previous one validated and compiled; or, with
//! `--change`, one Ingress changed each round and only what it touches translated again.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use wharf_controller::changes::Changes;
use wharf_controller::translate::incremental::Incremental;

/// Translates and compiles the objects in `file` `rounds` times after a first time;
/// prints each round's milliseconds and the median of the repeated rounds. `change`: each
/// round changes a path of one Ingress first and translates by parts.
pub fn run(file: PathBuf, rounds: usize, change: bool) -> Result<()> {
    let mut world = wharf_controller::files::load(&[file])
        .map_err(|errs| anyhow!("{}", errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")))?
        .world;
    // In key order, as the controller's index holds the objects.
    world.sort_by_key();
    let opts = wharf_controller::Options { now: wharf_controller::unix_now(), ..Default::default() };
    let gateway = wharf_dataplane::Gateway::new(Default::default())?;
    let mut last: Option<wharf_controller::Translation> = None;
    let (mut translated, mut compiled) = (Vec::new(), Vec::new());
    let mut parts = Incremental::default();
    for round in 0..=rounds {
        let changes = match (round, change) {
            (0, _) | (_, false) => Changes::everything(),
            (_, true) => change_one(&mut world, round)?,
        };
        let started = Instant::now();
        let t = parts.translate(&world, &opts, last.as_ref().map(|t| &*t.snapshot), &changes);
        let middle = Instant::now();
        gateway.apply_shared(Arc::clone(&t.snapshot))?;
        let (translate, compile) = (middle - started, middle.elapsed());
        println!("round={round} translate_ms={:.1} compile_ms={:.1}", ms(translate), ms(compile));
        if round > 0 {
            translated.push(translate);
            compiled.push(compile);
        }
        last = Some(t);
    }
    println!("median translate_ms={:.1} compile_ms={:.1}", ms(median(&mut translated)), ms(median(&mut compiled)));
    Ok(())
}

/// Changes the first path of Ingress `round` (modulo their number) to `/round-N`.
fn change_one(world: &mut wharf_controller::World, round: usize) -> Result<Changes> {
    if world.ingresses.is_empty() {
        return Err(anyhow!("--change needs Ingresses in the file"));
    }
    let i = round % world.ingresses.len();
    let ing = &mut world.ingresses[i];
    let path = ing
        .spec
        .as_mut()
        .and_then(|s| s.rules.as_mut()?.first_mut()?.http.as_mut()?.paths.first_mut())
        .ok_or_else(|| anyhow!("--change needs a path in each Ingress's first rule"))?;
    path.path = Some(format!("/round-{round}").into());
    let m = &ing.metadata;
    let key = (m.namespace.as_deref().unwrap_or_default().to_owned(), m.name.as_deref().unwrap_or_default().to_owned());
    Ok(Changes { ingresses: [key].into(), ..Changes::default() })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}
