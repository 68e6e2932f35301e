//! RPC status codes: DAOS's `DER_*` numbers (negated on the wire, as in
//! libdaos), with an `Unknown` variant so a code this build does not know
//! survives a round trip.

use std::fmt;

macro_rules! statuses {
    ($( $(#[$m:meta])* $name:ident = $code:literal, $text:literal; )*) => {
        /// The outcome of one RPC (`0` = success; otherwise a negative `DER_*`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Status {
            $( $(#[$m])* $name, )*
            /// A code this build does not know (kept as received).
            Unknown(i32),
        }

        impl Status {
            /// The wire value (negative for errors).
            pub const fn code(self) -> i32 {
                match self {
                    $( Status::$name => $code, )*
                    Status::Unknown(c) => c,
                }
            }

            pub const fn from_code(c: i32) -> Status {
                match c {
                    $( $code => Status::$name, )*
                    other => Status::Unknown(other),
                }
            }

            /// What the status means, for people.
            pub const fn text(self) -> &'static str {
                match self {
                    $( Status::$name => $text, )*
                    Status::Unknown(_) => "unknown status",
                }
            }
        }
    };
}

statuses! {
    Ok = 0, "success";
    /// `DER_NO_HDL`: the pool/container handle is not open on this engine.
    NoHandle = -1002, "invalid or unknown handle";
    /// `DER_INVAL`: an argument is out of range (bad OID class, zero record size, ...).
    Invalid = -1003, "invalid argument";
    /// `DER_EXIST`: a pool or container with that label/UUID exists.
    Exists = -1004, "already exists";
    /// `DER_NONEXIST`: no such pool, container, object, key or snapshot.
    NonExist = -1005, "does not exist";
    /// `DER_UNREACH`: a replica the request needed did not answer (DTX: the
    /// leader aborted; re-place without it and retry).
    Unreach = -1006, "unreachable node";
    /// `DER_NOSPACE`: the pool is full.
    NoSpace = -1007, "no space left in the pool";
    /// `DER_NOSYS`: the opcode is not implemented by this engine.
    NoSys = -1010, "operation not supported";
    /// `DER_TIMEDOUT`: the request expired before the engine got to it.
    TimedOut = -1011, "timed out";
    /// `DER_BUSY`: the pool/container is in use (open handles, containers).
    Busy = -1012, "busy (still in use)";
    /// `DER_PROTO`: the request could not be parsed.
    Proto = -1014, "malformed request (protocol error)";
    /// `DER_TRUNC`: the answer does not fit the given buffers.
    Trunc = -1016, "buffer too small (truncated)";
    /// `DER_CANCELED`: the request was cancelled.
    Canceled = -1018, "cancelled";
    /// `DER_MISC`: an internal engine error (see its log).
    Misc = -1025, "internal engine error";
    /// `DER_IO`: the store failed to read or write.
    Io = -2001, "I/O error in the store";
    /// `DER_STALE`: the request's pool-map version is older than the engine's
    /// (the reply header carries the engine's version: refresh and retry).
    StaleMap = -2007, "stale pool map version";
    /// `DER_KEY2BIG`: a key is longer than the engine accepts.
    KeyTooBig = -2012, "key too large";
    /// `DER_REC2BIG`: a value or the whole request exceeds the engine's limit.
    RecTooBig = -2013, "value too large";
    /// `DER_SHUTDOWN`: the engine is shutting down.
    Shutdown = -2017, "engine shutting down";
    /// `DER_INPROGRESS`: the key has a prepared, not yet committed update
    /// (DTX): retry.
    InProgress = -2018, "operation now in progress";
}

impl Status {
    pub const fn is_ok(self) -> bool {
        matches!(self, Status::Ok)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.text(), self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_survives() {
        for s in [
            Status::Ok,
            Status::NoHandle,
            Status::RecTooBig,
            Status::Proto,
        ] {
            assert_eq!(Status::from_code(s.code()), s);
        }
        assert_eq!(Status::from_code(-77), Status::Unknown(-77));
        assert_eq!(Status::Unknown(-77).code(), -77);
        assert_eq!(Status::NonExist.code(), -1005);
    }
}
