//! Request paths come straight from the network; what the normaliser accepts is routed. The checks are in
//! `wharf_dataplane::fuzzing`, which also replays the committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wharf_dataplane::fuzzing::normalize_path(data));
