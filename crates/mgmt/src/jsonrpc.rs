//! JSON-RPC 2.0 over a byte stream, as SPDK's server speaks it: requests are JSON
//! values written back to back (no delimiter), responses likewise; a batch is an
//! array of requests. Sans-IO: [`Framer::feed`] takes bytes and a dispatcher and
//! appends response bytes.

use serde_json::{json, Map, Value};

pub const PARSE_ERROR: i32 = -32700;
pub const INVALID_REQUEST: i32 = -32600;
pub const METHOD_NOT_FOUND: i32 = -32601;
pub const INVALID_PARAMS: i32 = -32602;
pub const INTERNAL_ERROR: i32 = -32603;
/// SPDK's domain errors are negative errnos with `spdk_strerror` text.
pub const EEXIST: i32 = -17;
pub const ENOMEM: i32 = -12;
pub const ENODEV: i32 = -19;
pub const EINVAL: i32 = -22;
pub const ENOTSUP: i32 = -95;

/// Default request size limit (bytes of one not yet complete JSON value).
pub const DEFAULT_LIMIT: usize = 1 << 20;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcError {
    pub code: i32,
    pub message: String,
}

impl RpcError {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }
    pub fn parse() -> Self {
        Self::new(PARSE_ERROR, "Parse error")
    }
    pub fn invalid_request() -> Self {
        Self::new(INVALID_REQUEST, "Invalid request")
    }
    pub fn method_not_found() -> Self {
        Self::new(METHOD_NOT_FOUND, "Method not found")
    }
    /// SPDK's "Invalid parameters" (what its JSON decoders answer).
    pub fn invalid_params() -> Self {
        Self::new(INVALID_PARAMS, "Invalid parameters")
    }
    pub fn params(msg: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, msg)
    }
    pub fn exists(msg: impl Into<String>) -> Self {
        Self::new(EEXIST, msg)
    }
    pub fn no_device(msg: impl Into<String>) -> Self {
        Self::new(ENODEV, msg)
    }
    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(INTERNAL_ERROR, msg)
    }
    pub fn to_json(&self) -> Value {
        json!({"code": self.code, "message": self.message})
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (code {})", self.message, self.code)
    }
}
impl std::error::Error for RpcError {}

/// Something that runs methods.
pub trait Dispatch {
    /// Runs `method`; `params` is the request's `params` (object or array) if any.
    fn call(&self, method: &str, params: Option<&Value>) -> Result<Value, RpcError>;
}

fn response(id: Value, r: Result<Value, RpcError>) -> Value {
    match r {
        Ok(v) => json!({"jsonrpc": "2.0", "id": id, "result": v}),
        Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e.to_json()}),
    }
}

/// Handles one request object; `None` for a notification (no `id`).
fn handle_one(req: &Value, d: &dyn Dispatch) -> Option<Value> {
    let Some(obj) = req.as_object() else {
        return Some(response(Value::Null, Err(RpcError::invalid_request())));
    };
    let id = obj.get("id").cloned();
    let id_ok = matches!(
        id,
        None | Some(Value::Null) | Some(Value::Number(_)) | Some(Value::String(_))
    );
    let method = obj.get("method").and_then(Value::as_str);
    let params = obj.get("params");
    let valid = obj.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
        && id_ok
        && method.is_some()
        && params.is_none_or(|p| p.is_object() || p.is_array());
    if !valid {
        let id = if id_ok {
            id.unwrap_or(Value::Null)
        } else {
            Value::Null
        };
        return Some(response(id, Err(RpcError::invalid_request())));
    }
    let r = d.call(method.unwrap_or_default(), params);
    id.map(|id| response(id, r))
}

/// Handles one JSON value (request or batch); `None` when nothing is answered.
pub fn handle_value(v: &Value, d: &dyn Dispatch) -> Option<Value> {
    match v {
        Value::Array(reqs) if reqs.is_empty() => {
            Some(response(Value::Null, Err(RpcError::invalid_request())))
        }
        Value::Array(reqs) => {
            let out: Vec<Value> = reqs.iter().filter_map(|r| handle_one(r, d)).collect();
            (!out.is_empty()).then_some(Value::Array(out))
        }
        _ => handle_one(v, d),
    }
}

/// What the connection should do after [`Framer::feed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Keep reading.
    More,
    /// The stream is unusable (parse error, request too large): send and close.
    Close,
}

/// Splits a byte stream into JSON values and answers each.
#[derive(Debug)]
pub struct Framer {
    buf: Vec<u8>,
    limit: usize,
}

impl Framer {
    pub fn new(limit: usize) -> Self {
        Framer {
            buf: Vec::new(),
            limit,
        }
    }

    /// Appends `data`, answers every complete value into `out`.
    pub fn feed(&mut self, data: &[u8], d: &dyn Dispatch, out: &mut Vec<u8>) -> Next {
        self.buf.extend_from_slice(data);
        let mut consumed = 0;
        let mut next = Next::More;
        {
            let mut it = serde_json::Deserializer::from_slice(&self.buf).into_iter::<Value>();
            loop {
                match it.next() {
                    None => {
                        consumed = it.byte_offset();
                        break;
                    }
                    // a number that ends the buffer may go on in the next read
                    // ("8" then "8" is 88, not 8 and 8): wait for a delimiter
                    Some(Ok(v)) if v.is_number() && it.byte_offset() == self.buf.len() => break,
                    Some(Ok(v)) => {
                        consumed = it.byte_offset();
                        if let Some(r) = handle_value(&v, d) {
                            out.extend_from_slice(r.to_string().as_bytes());
                        }
                    }
                    Some(Err(e)) if e.is_eof() => break,
                    Some(Err(_)) => {
                        let r = response(Value::Null, Err(RpcError::parse()));
                        out.extend_from_slice(r.to_string().as_bytes());
                        next = Next::Close;
                        break;
                    }
                }
            }
        }
        self.buf.drain(..consumed);
        if next == Next::More && self.buf.len() > self.limit {
            let e = RpcError::new(
                INVALID_REQUEST,
                format!("Request too large (limit {} bytes)", self.limit),
            );
            out.extend_from_slice(response(Value::Null, Err(e)).to_string().as_bytes());
            next = Next::Close;
        }
        next
    }
}

/// Reads `params` as an object (absent = empty); an array is SPDK's
/// "Invalid parameters".
pub fn params_object(p: Option<&Value>) -> Result<Map<String, Value>, RpcError> {
    match p {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err(RpcError::invalid_params()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo;
    impl Dispatch for Echo {
        fn call(&self, method: &str, params: Option<&Value>) -> Result<Value, RpcError> {
            match method {
                "echo" => Ok(params.cloned().unwrap_or(Value::Null)),
                "exists" => Err(RpcError::exists("File exists")),
                _ => Err(RpcError::method_not_found()),
            }
        }
    }

    /// Fuzz regression (fuzz/artifacts/mgmt_jsonrpc, input `b"88 "` split after
    /// one byte): a top-level number at the end of a read was answered at once,
    /// so `8|8 ` got two answers where `88 ` gets one.
    #[test]
    fn number_split_across_reads_is_one_value() {
        let feed = |parts: &[&[u8]]| {
            let mut f = Framer::new(4096);
            let mut out = Vec::new();
            for p in parts {
                f.feed(p, &Echo, &mut out);
            }
            out
        };
        let whole = feed(&[b"88 "]);
        assert_eq!(feed(&[b"8", b"8 "]), whole);
        assert_eq!(
            serde_json::Deserializer::from_slice(&whole)
                .into_iter::<Value>()
                .count(),
            1
        );
    }

    fn run(input: &[u8]) -> (Vec<Value>, Next) {
        run_limit(input, 4096)
    }

    fn run_limit(input: &[u8], limit: usize) -> (Vec<Value>, Next) {
        let mut f = Framer::new(limit);
        let mut out = Vec::new();
        let mut next = Next::More;
        // byte by byte: framing must not depend on read boundaries
        for b in input {
            next = f.feed(std::slice::from_ref(b), &Echo, &mut out);
            if next == Next::Close {
                break;
            }
        }
        let vals = serde_json::Deserializer::from_slice(&out)
            .into_iter::<Value>()
            .map(|v| v.unwrap())
            .collect();
        (vals, next)
    }

    #[test]
    fn requests_back_to_back_batches_and_notifications() {
        let (v, next) = run(
            br#"{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}} {"jsonrpc":"2.0","method":"echo"}[{"jsonrpc":"2.0","id":"x","method":"nope"},{"jsonrpc":"2.0","id":2,"method":"exists"},5]"#,
        );
        assert_eq!(next, Next::More);
        assert_eq!(v.len(), 2, "{v:?}");
        assert_eq!(v[0]["result"]["a"], 1);
        assert_eq!(v[0]["id"], 1);
        let b = v[1].as_array().unwrap();
        assert_eq!(b[0]["id"], "x");
        assert_eq!(b[0]["error"]["code"], METHOD_NOT_FOUND);
        assert_eq!(b[0]["error"]["message"], "Method not found");
        assert_eq!(b[1]["error"]["code"], EEXIST);
        assert_eq!(b[2]["error"]["code"], INVALID_REQUEST);
        assert_eq!(b[2]["id"], Value::Null);
    }

    #[test]
    fn bad_requests() {
        let (v, _) = run(br#"{"jsonrpc":"1.0","id":3,"method":"echo"}"#);
        assert_eq!(v[0]["error"]["code"], INVALID_REQUEST);
        assert_eq!(v[0]["id"], 3);
        let (v, _) = run(br#"{"jsonrpc":"2.0","id":4,"method":"echo","params":7}"#);
        assert_eq!(v[0]["error"]["code"], INVALID_REQUEST);
        let (v, _) = run(br#"[]"#);
        assert_eq!(v[0]["error"]["code"], INVALID_REQUEST);
        let (v, next) = run(br#"{"jsonrpc":"2.0",,}"#);
        assert_eq!(next, Next::Close);
        assert_eq!(v[0]["error"]["code"], PARSE_ERROR);
        assert_eq!(v[0]["error"]["message"], "Parse error");
        // deeper than serde_json's recursion limit (128)
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let mut f = Framer::new(1 << 20);
        let mut out = Vec::new();
        assert_eq!(f.feed(deep.as_bytes(), &Echo, &mut out), Next::Close);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["error"]["code"], PARSE_ERROR);
    }

    #[test]
    fn request_over_the_limit_is_refused() {
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"echo","params":{{"s":"{}"}}}}"#,
            "a".repeat(100)
        );
        let (v, next) = run_limit(big.as_bytes(), 64);
        assert_eq!(next, Next::Close);
        assert_eq!(v[0]["error"]["code"], INVALID_REQUEST);
        assert!(v[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too large"));
    }
}
