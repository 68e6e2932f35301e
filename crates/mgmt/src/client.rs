//! A small JSON-RPC client (for `dpustack rpc` and tests).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::jsonrpc::RpcError;
use crate::Error;

/// One connection to an RPC server.
#[derive(Debug)]
pub struct Client {
    s: UnixStream,
    buf: Vec<u8>,
    next_id: u64,
}

impl Client {
    pub fn connect(path: &Path, timeout: Duration) -> Result<Client, Error> {
        let s = UnixStream::connect(path).map_err(|e| Error::Socket {
            path: path.display().to_string(),
            source: e,
        })?;
        s.set_read_timeout(Some(timeout))
            .map_err(|e| Error::Client(e.to_string()))?;
        Ok(Client {
            s,
            buf: Vec::new(),
            next_id: 1,
        })
    }

    /// Sends raw bytes and reads one JSON value back.
    pub fn raw(&mut self, req: &[u8]) -> Result<Value, Error> {
        self.s
            .write_all(req)
            .map_err(|e| Error::Client(format!("sending: {e}")))?;
        self.read_value()
    }

    /// Reads the next JSON value from the stream.
    pub fn read_value(&mut self) -> Result<Value, Error> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            let mut it = serde_json::Deserializer::from_slice(&self.buf).into_iter::<Value>();
            match it.next() {
                Some(Ok(v)) => {
                    let used = it.byte_offset();
                    self.buf.drain(..used);
                    return Ok(v);
                }
                Some(Err(e)) if !e.is_eof() => {
                    return Err(Error::Client(format!("bad response: {e}")))
                }
                _ => {}
            }
            let n = self
                .s
                .read(&mut chunk)
                .map_err(|e| Error::Client(format!("reading: {e}")))?;
            if n == 0 {
                return Err(Error::Client("server closed the connection".into()));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Calls `method`: `Ok(Ok(result))`, `Ok(Err(rpc error))`, or a transport error.
    pub fn call(
        &mut self,
        method: &str,
        params: Option<Value>,
    ) -> Result<Result<Value, RpcError>, Error> {
        let id = self.next_id;
        self.next_id += 1;
        let mut req = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if let Some(p) = params {
            req["params"] = p;
        }
        let v = self.raw(req.to_string().as_bytes())?;
        if let Some(e) = v.get("error") {
            return Ok(Err(RpcError::new(
                e["code"].as_i64().unwrap_or(0) as i32,
                e["message"].as_str().unwrap_or_default(),
            )));
        }
        Ok(Ok(v.get("result").cloned().unwrap_or(Value::Null)))
    }
}
