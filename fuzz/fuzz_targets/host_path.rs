//! Host and path parsing see user input from Ingress objects.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(h) = wharf_model::Host::parse(s) {
        // What was accepted prints back to an equivalent host.
        assert_eq!(wharf_model::Host::parse(&h.to_string()).ok(), Some(h));
    }
    if let Ok(p) = wharf_model::PathMatch::prefix(s) {
        assert!(p.matches(p.path()));
    }
});
