//! The passthrough listener's ClientHello parser sees raw bytes from the network.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(Some(name)) = wharf_dataplane::passthrough::client_hello::parse_sni(data) {
        assert!(!name.is_empty());
        assert!(name.bytes().all(|b| b.is_ascii_graphic() && !b.is_ascii_uppercase()));
    }
});
