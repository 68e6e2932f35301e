//! JSON-RPC requests into the management plane's sans-IO core
//! (`mgmt::jsonrpc::Framer` + the SPDK-compatible methods). Invariants:
//! - no panic, whatever the bytes (deep nesting, batches, bad ids, huge values);
//! - every answer is a JSON-RPC 2.0 response object (or a non-empty batch of
//!   them) carrying either `result` or `error`, never both;
//! - framing does not depend on segmentation: with a pure dispatcher, feeding
//!   the stream at once or split at any point answers the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mgmt::jsonrpc::{Dispatch, Framer, Next, RpcError};
use serde_json::{json, Value};

#[path = "mgmt_guard.rs"]
mod guard;

const LIMIT: usize = 16 * 1024;

/// Answers with what it was asked: pure, so two runs must agree.
struct Echo;
impl Dispatch for Echo {
    fn call(&self, method: &str, params: Option<&Value>) -> Result<Value, RpcError> {
        if method.len().is_multiple_of(3) {
            Err(RpcError::new(-22, method))
        } else {
            Ok(json!({"m": method, "p": params}))
        }
    }
}

fn check_response(v: &Value) {
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("response is not an object: {v}"));
    assert_eq!(o.get("jsonrpc"), Some(&json!("2.0")), "{v}");
    assert!(o.contains_key("id"), "no id: {v}");
    assert!(
        o.contains_key("result") ^ o.contains_key("error"),
        "result xor error: {v}"
    );
}

fn answers(out: &[u8]) {
    for v in serde_json::Deserializer::from_slice(out).into_iter::<Value>() {
        let v = v.expect("we wrote invalid JSON");
        match &v {
            Value::Array(a) => {
                assert!(!a.is_empty(), "empty batch answer");
                a.iter().for_each(check_response);
            }
            v => check_response(v),
        }
    }
}

fn feed(d: &dyn Dispatch, parts: &[&[u8]]) -> (Vec<u8>, Vec<Next>) {
    let mut f = Framer::new(LIMIT);
    let mut out = Vec::new();
    let mut nexts = Vec::new();
    for p in parts {
        let n = f.feed(p, d, &mut out);
        nexts.push(n);
        if n == Next::Close {
            break;
        }
    }
    (out, nexts)
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, s)) = data.split_first() else {
        return;
    };
    let at = usize::from(cut) * s.len() / 256;
    let (a, b) = s.split_at(at);
    // the real methods, behind the guard
    let m = guard::Guard(mgmt::Mgmt::new());
    let (out, _) = feed(&m, &[a, b]);
    answers(&out);
    // segmentation invariance with the pure dispatcher
    let (o1, n1) = feed(&Echo, &[s]);
    let (o2, n2) = feed(&Echo, &[a, b]);
    answers(&o1);
    let closed1 = n1.last() == Some(&Next::Close);
    let closed2 = n2.contains(&Next::Close);
    if !closed1 && !closed2 {
        assert_eq!(
            o1, o2,
            "answers depend on where the stream was split ({at})"
        );
    }
});
