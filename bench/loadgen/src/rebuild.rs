//! The cost of one rebuild, in process: translating a set of objects (as `wharf run -f`
//! reads them) and compiling the snapshot, repeated over the same objects so that each
//! round after the first reuses what the previous one validated and compiled.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

/// Translates and compiles the objects in `file` `rounds` times after a first time;
/// prints each round's milliseconds and the median of the repeated rounds.
pub fn run(file: PathBuf, rounds: usize) -> Result<()> {
    let world = wharf_controller::files::load(&[file])
        .map_err(|errs| anyhow!("{}", errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")))?
        .world;
    let opts = wharf_controller::Options { now: wharf_controller::unix_now(), ..Default::default() };
    let gateway = wharf_dataplane::Gateway::new(Default::default())?;
    let mut last: Option<wharf_controller::Translation> = None;
    let (mut translated, mut compiled) = (Vec::new(), Vec::new());
    for round in 0..=rounds {
        let started = Instant::now();
        let t = wharf_controller::translate(&world, &opts, last.as_ref().map(|t| &*t.snapshot));
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}
