//! The HBONE inbound listener's CONNECT target comes from mesh peers. The checks are in
//! `wharf_dataplane::fuzzing`, which also replays the committed corpus on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wharf_dataplane::fuzzing::hbone_connect(data));
