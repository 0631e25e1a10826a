//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/`) through the same checks the
//! fuzz targets run, so that every input the fuzzers found interesting keeps passing on
//! stable, in CI, without cargo-fuzz.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

#[test]
fn the_committed_fuzz_corpus_passes_every_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    for (target, check) in wharf_dataplane::fuzzing::TARGETS {
        let dir = root.join(target);
        let inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (each fuzz target has a committed corpus)", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        assert!(inputs.len() >= 20, "{target}: only {} inputs in {}", inputs.len(), dir.display());
        for input in inputs {
            let data = std::fs::read(&input).unwrap();
            if std::panic::catch_unwind(|| check(&data)).is_err() {
                panic!("{target}: {} fails its check", input.display());
            }
        }
    }
}
