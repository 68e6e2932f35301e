//! SPDK JSON config files into `Mgmt::load_config`. Invariants: no panic; a
//! config that loads saves (`save_config`) to a config that loads into a fresh
//! management plane and saves again to the same JSON (a fixed point).
#![no_main]
use libfuzzer_sys::fuzz_target;
use mgmt::jsonrpc::Dispatch;
use serde_json::Value;

#[path = "mgmt_guard.rs"]
mod guard;

fuzz_target!(|data: &[u8]| {
    let Ok(cfg) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if !guard::config_allowed(&cfg) {
        return;
    }
    let m = mgmt::Mgmt::new();
    if m.load_config(&cfg).is_err() {
        return;
    }
    let saved = m
        .call("save_config", None)
        .expect("save_config after a load");
    let m2 = mgmt::Mgmt::new();
    m2.load_config(&saved)
        .unwrap_or_else(|e| panic!("our own saved config does not load: {e}\n{saved}"));
    let again = m2.call("save_config", None).expect("save_config");
    assert_eq!(saved, again, "save -> load -> save is not a fixed point");
});
