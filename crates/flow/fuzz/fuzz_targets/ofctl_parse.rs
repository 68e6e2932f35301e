//! The ovs-ofctl flow parser returns errors, never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = flow::parse_flows(s);
        let _ = flow::parse_exact_flow(s);
    }
});
