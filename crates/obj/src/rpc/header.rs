//! The 32-byte frame header, as a typed view (`Header<B>`) over bytes plus a
//! [`HeaderRepr`] with `parse`/`emit`.
//!
//! ```text
//!  0       4   5   6       8               16      20      24      28      32
//!  +-------+---+---+-------+---------------+-------+-------+-------+-------+
//!  | magic |ver|flg|opcode |    rpc_id     |status |timeout| body  | bulk  |
//!  | DOBJ  | 1 |   |  u16  |      u64      |  i32  |  ms   |  len  |  len  |
//!  +-------+---+---+-------+---------------+-------+-------+-------+-------+
//! ```
//! All integers little-endian. A frame is the header followed by `body_len`
//! bytes: the arguments, then the last `bulk_len` bytes of the body, the
//! bulk region. Descriptors inside the arguments name `(offset, length)`
//! ranges of the bulk region (the TCP stand-in for a registered buffer).
//! `flags` bit 0 marks a response; `status` is meaningful in responses,
//! `timeout_ms` in requests (0 = none).
//!
//! **Pool-map version** (DAOS: every object RPC carries the client's map
//! version). `flags` bit 4 ([`FLAG_MAP_VERSION`]) says a map version is in
//! the header (bits 1–3 belong to the RDMA transport, `rpc::rdma`), in a field the frame's direction leaves unused:
//! - in a request, bytes 16..20 (`status`, meaningless in requests) hold the
//!   client's map version;
//! - in a response, bytes 20..24 (`timeout`, meaningless in responses) hold
//!   the engine's map version (sent with `DER_STALE`: the client's map is
//!   older than the engine's).
//!
//! Compatibility, explicitly: the protocol version stays 1. A frame without
//! the flag has no map version (an old client's request: the engine does not
//! check it). An engine built before this field ignores the flag (it never
//! looked at `flags` bit 4 nor at a request's `status`), so a new client is
//! served without the check there. The flag on a request with a non-zero
//! status, or a response with status 0, cannot be emitted by `HeaderRepr`.

use std::fmt;
use std::ops::Range;

use super::WireError;

mod field {
    use std::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const VERSION: usize = 4;
    pub const FLAGS: usize = 5;
    pub const OPCODE: Range<usize> = 6..8;
    pub const RPC_ID: Range<usize> = 8..16;
    pub const STATUS: Range<usize> = 16..20;
    pub const TIMEOUT: Range<usize> = 20..24;
    pub const BODY_LEN: Range<usize> = 24..28;
    pub const BULK_LEN: Range<usize> = 28..32;
}

/// Header length, derived from the last field.
pub const HEADER_LEN: usize = field::BULK_LEN.end;
pub const MAGIC: [u8; 4] = *b"DOBJ";
pub const VERSION: u8 = 1;
pub const FLAG_RESPONSE: u8 = 0x01;
/// A pool-map version is in the header (see the module doc).
pub const FLAG_MAP_VERSION: u8 = 0x10;

macro_rules! opcodes {
    ($( $(#[$m:meta])* $name:ident = $v:literal, $text:literal; )*) => {
        /// RPC opcodes (named after the libdaos call they serve).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Opcode {
            $( $(#[$m])* $name, )*
            Unknown(u16),
        }
        impl From<u16> for Opcode {
            fn from(v: u16) -> Opcode {
                match v { $( $v => Opcode::$name, )* o => Opcode::Unknown(o) }
            }
        }
        impl From<Opcode> for u16 {
            fn from(o: Opcode) -> u16 {
                match o { $( Opcode::$name => $v, )* Opcode::Unknown(v) => v }
            }
        }
        impl Opcode {
            pub const fn name(self) -> &'static str {
                match self { $( Opcode::$name => $text, )* Opcode::Unknown(_) => "unknown" }
            }
        }
    };
}

opcodes! {
    Ping = 1, "ping";
    /// The engine's per-target endpoints (run-to-completion: a client sends
    /// a target's object I/O straight to that target's own listener). The
    /// reply lists one TCP port per target, on the engine's IP; an engine
    /// without them answers `DER_NOSYS` (an older one: unknown opcode).
    TargetPorts = 2, "target_ports";
    PoolCreate = 0x10, "pool_create";
    PoolDestroy = 0x11, "pool_destroy";
    PoolList = 0x12, "pool_list";
    PoolQuery = 0x13, "pool_query";
    PoolConnect = 0x14, "pool_connect";
    PoolDisconnect = 0x15, "pool_disconnect";
    ContCreate = 0x20, "cont_create";
    ContDestroy = 0x21, "cont_destroy";
    ContList = 0x22, "cont_list";
    ContOpen = 0x23, "cont_open";
    ContClose = 0x24, "cont_close";
    ContQuery = 0x25, "cont_query";
    SnapCreate = 0x26, "cont_create_snap";
    SnapList = 0x27, "cont_list_snap";
    SnapDestroy = 0x28, "cont_destroy_snap";
    ObjUpdate = 0x30, "obj_update";
    ObjFetch = 0x31, "obj_fetch";
    ObjPunch = 0x32, "obj_punch";
    ObjListDkey = 0x33, "obj_list_dkey";
    ObjListAkey = 0x34, "obj_list_akey";
    ObjListRecx = 0x35, "obj_list_recx";
    ObjQueryKey = 0x36, "obj_query_key";
    ObjListObj = 0x37, "obj_list_obj";
    /// Rebuild: the epoch of what a fetch would return, per iod (an
    /// `obj_fetch` body; answered with epochs, 0 = nothing visible).
    ObjFetchEpochs = 0x38, "obj_fetch_epochs";
    /// Rebuild: an update at the request's epoch (the source version's),
    /// not the engine's clock; refused in the engine's future.
    ObjUpdateAt = 0x39, "obj_update_at";
    /// Reintegration: a punch at the request's epoch (just above a stale
    /// version the returning engine holds and its source does not).
    ObjPunchAt = 0x3a, "obj_punch_at";
    /// A replicated KV update through a leader replica (DTX, `engine::dtx`).
    DtxUpdate = 0x40, "obj_dtx_update";
    /// An engine-to-engine DTX message (`engine::dtx::Msg`).
    DtxMsg = 0x41, "dtx_msg";
}

impl Opcode {
    /// Object I/O: served by the target owning the object's shard. Their
    /// bodies start with `coh: u64` and `oid: (hi u64, lo u64)`, the routing
    /// prefix (see [`crate::rpc::msg::route_prefix`]).
    pub const fn is_object_io(self) -> bool {
        matches!(
            self,
            Opcode::ObjUpdate
                | Opcode::ObjFetch
                | Opcode::ObjPunch
                | Opcode::ObjListDkey
                | Opcode::ObjListAkey
                | Opcode::ObjListRecx
                | Opcode::ObjQueryKey
                | Opcode::ObjFetchEpochs
                | Opcode::ObjUpdateAt
                | Opcode::ObjPunchAt
        )
    }

    /// Requests checked against the pool-map version (object I/O and the
    /// DTX update, which starts with the same routing prefix).
    pub const fn carries_map_version(self) -> bool {
        self.is_object_io() || matches!(self, Opcode::DtxUpdate)
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Opcode::Unknown(v) => write!(f, "unknown({v:#x})"),
            o => f.write_str(o.name()),
        }
    }
}

/// A read-only or writable view of a frame header.
#[derive(Debug, Clone, Copy)]
pub struct Header<B> {
    buf: B,
}

impl<B: AsRef<[u8]>> Header<B> {
    /// Wraps without checking (for emitting into a buffer of `HEADER_LEN`).
    pub const fn new_unchecked(buf: B) -> Self {
        Header { buf }
    }

    /// Wraps and checks: length, magic, version, `bulk_len <= body_len`.
    /// Afterwards no accessor can panic.
    pub fn new_checked(buf: B) -> Result<Self, WireError> {
        let h = Header { buf };
        h.check_len()?;
        Ok(h)
    }

    pub fn check_len(&self) -> Result<(), WireError> {
        let b = self.buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if b[field::MAGIC] != MAGIC {
            return Err(WireError::BadMagic);
        }
        if b[field::VERSION] != VERSION {
            return Err(WireError::BadVersion(b[field::VERSION]));
        }
        if self.bulk_len() > self.body_len() {
            return Err(WireError::BadLength {
                field: "bulk_len",
                len: self.bulk_len() as usize,
            });
        }
        Ok(())
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }
    fn u32_at(&self, r: Range<usize>) -> u32 {
        let mut a = [0u8; 4];
        a.copy_from_slice(&self.b()[r]);
        u32::from_le_bytes(a)
    }
    pub fn flags(&self) -> u8 {
        self.b()[field::FLAGS]
    }
    pub fn is_response(&self) -> bool {
        self.flags() & FLAG_RESPONSE != 0
    }
    pub fn opcode(&self) -> Opcode {
        let mut a = [0u8; 2];
        a.copy_from_slice(&self.b()[field::OPCODE]);
        Opcode::from(u16::from_le_bytes(a))
    }
    pub fn rpc_id(&self) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.b()[field::RPC_ID]);
        u64::from_le_bytes(a)
    }
    pub fn has_map_version(&self) -> bool {
        self.flags() & FLAG_MAP_VERSION != 0
    }
    /// The status of a response; a request's status is 0 (its bytes hold the
    /// map version when [`Self::has_map_version`]).
    pub fn status(&self) -> i32 {
        if !self.is_response() {
            return 0;
        }
        self.u32_at(field::STATUS) as i32
    }
    /// The pool-map version: the client's in a request, the engine's in a
    /// response (`None` without [`FLAG_MAP_VERSION`]).
    pub fn map_version(&self) -> Option<u32> {
        if !self.has_map_version() {
            return None;
        }
        Some(if self.is_response() {
            self.u32_at(field::TIMEOUT)
        } else {
            self.u32_at(field::STATUS)
        })
    }
    /// A request's deadline; 0 in a response (its bytes may hold the
    /// engine's map version).
    pub fn timeout_ms(&self) -> u32 {
        if self.is_response() {
            return 0;
        }
        self.u32_at(field::TIMEOUT)
    }
    pub fn body_len(&self) -> u32 {
        self.u32_at(field::BODY_LEN)
    }
    pub fn bulk_len(&self) -> u32 {
        self.u32_at(field::BULK_LEN)
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Header<B> {
    fn bm(&mut self) -> &mut [u8] {
        self.buf.as_mut()
    }
    pub fn set_magic_version(&mut self) {
        self.bm()[field::MAGIC].copy_from_slice(&MAGIC);
        self.bm()[field::VERSION] = VERSION;
    }
    pub fn set_flags(&mut self, v: u8) {
        self.bm()[field::FLAGS] = v;
    }
    pub fn set_opcode(&mut self, o: Opcode) {
        self.bm()[field::OPCODE].copy_from_slice(&u16::from(o).to_le_bytes());
    }
    pub fn set_rpc_id(&mut self, v: u64) {
        self.bm()[field::RPC_ID].copy_from_slice(&v.to_le_bytes());
    }
    pub fn set_status(&mut self, v: i32) {
        self.bm()[field::STATUS].copy_from_slice(&v.to_le_bytes());
    }
    pub fn set_timeout_ms(&mut self, v: u32) {
        self.bm()[field::TIMEOUT].copy_from_slice(&v.to_le_bytes());
    }
    pub fn set_body_len(&mut self, v: u32) {
        self.bm()[field::BODY_LEN].copy_from_slice(&v.to_le_bytes());
    }
    pub fn set_bulk_len(&mut self, v: u32) {
        self.bm()[field::BULK_LEN].copy_from_slice(&v.to_le_bytes());
    }
}

/// The meaningful fields of a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderRepr {
    pub response: bool,
    pub opcode: Opcode,
    pub rpc_id: u64,
    pub status: i32,
    pub timeout_ms: u32,
    pub body_len: u32,
    pub bulk_len: u32,
    /// The pool-map version (see the module doc): the client's in a
    /// request, the engine's in a response.
    pub map_version: Option<u32>,
}

impl HeaderRepr {
    pub fn parse<B: AsRef<[u8]>>(h: &Header<B>) -> Result<HeaderRepr, WireError> {
        h.check_len()?;
        Ok(HeaderRepr {
            response: h.is_response(),
            opcode: h.opcode(),
            rpc_id: h.rpc_id(),
            status: h.status(),
            timeout_ms: h.timeout_ms(),
            body_len: h.body_len(),
            bulk_len: h.bulk_len(),
            map_version: h.map_version(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into `h` (at least `HEADER_LEN` bytes). A request
    /// carries `timeout_ms` and no status, a response a status and no
    /// timeout; the map version goes in the field the direction leaves free.
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Header<B>) {
        h.set_magic_version();
        let mut flags = if self.response { FLAG_RESPONSE } else { 0 };
        if self.map_version.is_some() {
            flags |= FLAG_MAP_VERSION;
        }
        h.set_flags(flags);
        h.set_opcode(self.opcode);
        h.set_rpc_id(self.rpc_id);
        if self.response {
            h.set_status(self.status);
            h.set_timeout_ms(self.map_version.unwrap_or(0));
        } else {
            h.set_status(self.map_version.unwrap_or(0) as i32);
            h.set_timeout_ms(self.timeout_ms);
        }
        h.set_body_len(self.body_len);
        h.set_bulk_len(self.bulk_len);
    }

    /// Appends the header to `out`.
    pub fn emit_to(&self, out: &mut Vec<u8>) {
        let at = out.len();
        out.resize(at + HEADER_LEN, 0);
        self.emit(&mut Header::new_unchecked(&mut out[at..]));
    }
}

impl fmt::Display for HeaderRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DOBJ {} {} id={} status={} body={} bulk={}",
            if self.response { "rep" } else { "req" },
            self.opcode,
            self.rpc_id,
            self.status,
            self.body_len,
            self.bulk_len
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // a ping request, id 0x0102030405060708, timeout 1000 ms, empty body
    static PING: [u8; 32] = [
        b'D', b'O', b'B', b'J', 1, 0, 0x01, 0x00, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
        0, 0, 0, 0, 0xe8, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];

    #[test]
    fn deconstruct() {
        let h = Header::new_checked(&PING[..]).unwrap();
        assert_eq!(h.opcode(), Opcode::Ping);
        assert_eq!(h.rpc_id(), 0x0102030405060708);
        assert_eq!(h.timeout_ms(), 1000);
        assert!(!h.is_response());
        assert_eq!(h.body_len(), 0);
    }

    #[test]
    fn construct_and_round_trip() {
        let r = HeaderRepr {
            response: false,
            opcode: Opcode::Ping,
            rpc_id: 0x0102030405060708,
            status: 0,
            timeout_ms: 1000,
            body_len: 0,
            bulk_len: 0,
            map_version: None,
        };
        let mut out = Vec::new();
        r.emit_to(&mut out);
        assert_eq!(out, PING);
        assert_eq!(
            HeaderRepr::parse(&Header::new_unchecked(&out[..])).unwrap(),
            r
        );
    }

    #[test]
    fn impossible_headers() {
        assert_eq!(
            Header::new_checked(&PING[..31]).unwrap_err(),
            WireError::Truncated
        );
        let mut b = PING;
        b[0] = b'X';
        assert_eq!(
            Header::new_checked(&b[..]).unwrap_err(),
            WireError::BadMagic
        );
        let mut b = PING;
        b[4] = 9;
        assert_eq!(
            Header::new_checked(&b[..]).unwrap_err(),
            WireError::BadVersion(9)
        );
        // a request's status bytes are not a status
        let mut b = PING;
        b[16] = 0xff;
        assert_eq!(Header::new_checked(&b[..]).unwrap().status(), 0);
        let mut b = PING;
        b[28] = 1; // bulk longer than body
        assert!(matches!(
            Header::new_checked(&b[..]).unwrap_err(),
            WireError::BadLength { .. }
        ));
        let mut b = PING;
        b[6] = 0xee;
        assert_eq!(
            Header::new_checked(&b[..]).unwrap().opcode(),
            Opcode::Unknown(0xee)
        );
    }

    #[test]
    fn map_version_in_request_and_response() {
        // request: version 7 in bytes 16..20, flag bit 1, timeout kept
        let req = HeaderRepr {
            response: false,
            opcode: Opcode::ObjUpdate,
            rpc_id: 9,
            status: 0,
            timeout_ms: 1000,
            body_len: 40,
            bulk_len: 8,
            map_version: Some(7),
        };
        let mut out = Vec::new();
        req.emit_to(&mut out);
        assert_eq!(out[5], FLAG_MAP_VERSION);
        assert_eq!(&out[16..20], &7u32.to_le_bytes());
        assert_eq!(&out[20..24], &1000u32.to_le_bytes());
        let h = Header::new_checked(&out[..]).unwrap();
        assert_eq!(h.status(), 0);
        assert_eq!(HeaderRepr::parse(&h).unwrap(), req);

        // refusal: DER_STALE with the engine's version 9 in bytes 20..24
        let rep = HeaderRepr {
            response: true,
            opcode: Opcode::ObjUpdate,
            rpc_id: 9,
            status: crate::rpc::Status::StaleMap.code(),
            timeout_ms: 0,
            body_len: 0,
            bulk_len: 0,
            map_version: Some(9),
        };
        let mut out = Vec::new();
        rep.emit_to(&mut out);
        assert_eq!(out[5], FLAG_RESPONSE | FLAG_MAP_VERSION);
        assert_eq!(&out[16..20], &(-2007i32).to_le_bytes());
        assert_eq!(&out[20..24], &9u32.to_le_bytes());
        assert_eq!(
            HeaderRepr::parse(&Header::new_checked(&out[..]).unwrap()).unwrap(),
            rep
        );
    }

    #[test]
    fn old_frames_have_no_map_version() {
        // an old client's request: flag clear, so bytes 16..20 are ignored
        let h = Header::new_checked(&PING[..]).unwrap();
        assert_eq!(h.map_version(), None);
        let mut b = PING;
        b[16] = 5; // garbage in the unused status field of an old request
        let r = HeaderRepr::parse(&Header::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r.map_version, None);
        assert_eq!(r.status, 0);
        // the same bytes with the flag set: version 5
        b[5] = FLAG_MAP_VERSION;
        let r = HeaderRepr::parse(&Header::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r.map_version, Some(5));
        assert_eq!(r.timeout_ms, 1000);
    }
}
