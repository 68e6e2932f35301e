#![allow(dead_code)] // each target uses part of it
//! What the mgmt fuzz targets let through to the management plane: nothing that
//! touches files or sockets, and no bdev larger than 4 MiB (a fuzzer asking for
//! a 1 TiB malloc bdev finds the machine's memory, not a bug). The management
//! plane itself has no such bound: see docs/fuzzing.md.
use mgmt::jsonrpc::{Dispatch, RpcError};
use serde_json::Value;

pub const MAX_BDEV_BYTES: u64 = 4 << 20;

/// Whether the fuzz targets may run `method` with `params`.
pub fn allowed(method: &str, params: Option<&Value>) -> bool {
    match method {
        // files: bdev_{uring,aio}_create open/create the named file
        "bdev_uring_create" | "bdev_aio_create" => false,
        "bdev_malloc_create" | "bdev_null_create" => {
            let n = |k: &str| params.and_then(|p| p.get(k)).and_then(Value::as_u64);
            match (n("num_blocks"), n("block_size")) {
                (Some(a), Some(b)) => a.checked_mul(b).is_some_and(|x| x <= MAX_BDEV_BYTES),
                // missing/ill-typed sizes: the method's own error path
                _ => true,
            }
        }
        _ => true,
    }
}

/// Whether an SPDK JSON config only holds allowed entries.
pub fn config_allowed(cfg: &Value) -> bool {
    let Some(subs) = cfg.get("subsystems").and_then(Value::as_array) else {
        return true;
    };
    let mut n = 0;
    for s in subs {
        if let Some(Value::Array(es)) = s.get("config") {
            for e in es {
                n += 1;
                let m = e.get("method").and_then(Value::as_str).unwrap_or("");
                if !allowed(m, e.get("params")) || n > 64 {
                    return false;
                }
            }
        }
    }
    true
}

/// [`mgmt::Mgmt`] behind [`allowed`].
pub struct Guard(pub mgmt::Mgmt);

impl Dispatch for Guard {
    fn call(&self, method: &str, params: Option<&Value>) -> Result<Value, RpcError> {
        if !allowed(method, params) {
            return Err(RpcError::new(-1, "refused by the fuzz guard"));
        }
        if method == "load_config" {
            let ok = params
                .and_then(|p| p.get("config"))
                .is_none_or(config_allowed)
                && params.is_none_or(config_allowed);
            if !ok {
                return Err(RpcError::new(-1, "refused by the fuzz guard"));
            }
        }
        self.0.call(method, params)
    }
}
