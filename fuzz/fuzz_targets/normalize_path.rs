//! Request paths come straight from the network; what the normaliser accepts is routed.
#![no_main]

use wharf_dataplane::proxy::normalize::{normalize_path, EscapedSlashes, PathOptions};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    for escaped_slashes in [EscapedSlashes::Keep, EscapedSlashes::Reject, EscapedSlashes::Decode] {
        for merge_slashes in [false, true] {
            let opts = PathOptions { escaped_slashes, merge_slashes };
            if let Ok(once) = normalize_path(s, opts) {
                // Normalising twice changes nothing, and no dot segment is left.
                assert_eq!(normalize_path(&once, opts).as_deref(), Ok(&*once));
                if once.starts_with('/') {
                    assert!(!once.split('/').any(|seg| seg == "." || seg == ".."), "{once}");
                }
            }
        }
    }
});
