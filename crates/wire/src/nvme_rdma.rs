//! NVMe/RDMA (NVMe over Fabrics 1.1, RDMA transport binding): the RDMA CM private
//! data a host and a controller exchange when a queue is connected.
//!
//! | message | carried in | fields (little-endian) |
//! |---|---|---|
//! | [`CmReq`] | the CM REQ private data (after the 36-byte CMA header) | RECFMT, QID, HRQSIZE, HSQSIZE, CNTLID, 22 reserved; 32 bytes |
//! | [`CmRep`] | the CM REP private data | RECFMT, CRQSIZE, 28 reserved; 32 bytes |
//! | [`CmRej`] | the CM REJ private data (reason 28, consumer defined) | RECFMT, STS; 4 bytes |
//!
//! HRQSIZE is the host's receive queue size (the completions it can take), HSQSIZE
//! the submission queue size, **0's based** (SQSIZE of Fabrics Connect); CRQSIZE the
//! controller's receive queue size (command capsules it has receive buffers for).
//! Linux sends HRQSIZE = queue size and HSQSIZE = queue size − 1.
//!
//! Parsing checks the length (shorter than the format → [`Error::Truncated`];
//! longer is allowed, a CM pads private data) and RECFMT (only 0 is defined →
//! [`Error::BadVersion`]); reserved bytes are ignored on receive and zero on emit.

use crate::{Error, Result};

/// Length of the REQ and REP private data.
pub const CM_REQ_LEN: usize = 32;
/// Length of the REP private data.
pub const CM_REP_LEN: usize = 32;
/// Length of the REJ private data.
pub const CM_REJ_LEN: usize = 4;
/// The only record format defined (NVMe/RDMA 1.0).
pub const RECFMT_1_0: u16 = 0;

fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

/// The host's CM connect private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmReq {
    pub recfmt: u16,
    /// Queue id: 0 = admin queue.
    pub qid: u16,
    /// Host receive queue size (completions), 1's based.
    pub hrqsize: u16,
    /// Host submission queue size, 0's based.
    pub hsqsize: u16,
    /// Controller id (0xffff on the admin queue of a dynamic controller; Linux sends 0).
    pub cntlid: u16,
}

impl CmReq {
    /// Parses and checks length and RECFMT.
    pub fn parse(b: &[u8]) -> Result<Self> {
        if b.len() < CM_REQ_LEN {
            return Err(Error::Truncated);
        }
        let r = CmReq {
            recfmt: le16(b, 0),
            qid: le16(b, 2),
            hrqsize: le16(b, 4),
            hsqsize: le16(b, 6),
            cntlid: le16(b, 8),
        };
        if r.recfmt != RECFMT_1_0 {
            return Err(Error::BadVersion);
        }
        Ok(r)
    }
    /// The 32 bytes of private data.
    pub fn emit(&self) -> [u8; CM_REQ_LEN] {
        let mut b = [0u8; CM_REQ_LEN];
        put16(&mut b, 0, self.recfmt);
        put16(&mut b, 2, self.qid);
        put16(&mut b, 4, self.hrqsize);
        put16(&mut b, 6, self.hsqsize);
        put16(&mut b, 8, self.cntlid);
        b
    }
}

/// The controller's CM accept private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmRep {
    pub recfmt: u16,
    /// Controller receive queue size (command capsules), 1's based.
    pub crqsize: u16,
}

impl CmRep {
    pub fn parse(b: &[u8]) -> Result<Self> {
        if b.len() < CM_REP_LEN {
            return Err(Error::Truncated);
        }
        let r = CmRep {
            recfmt: le16(b, 0),
            crqsize: le16(b, 2),
        };
        if r.recfmt != RECFMT_1_0 {
            return Err(Error::BadVersion);
        }
        Ok(r)
    }
    pub fn emit(&self) -> [u8; CM_REP_LEN] {
        let mut b = [0u8; CM_REP_LEN];
        put16(&mut b, 0, self.recfmt);
        put16(&mut b, 2, self.crqsize);
        b
    }
}

/// Why a controller rejected a queue connection (REJ private data STS; Linux
/// `enum nvme_rdma_cm_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmRejStatus {
    InvalidLength,
    InvalidRecfmt,
    InvalidQid,
    InvalidHsqsize,
    InvalidHrqsize,
    NoResources,
    InvalidIrd,
    InvalidOrd,
    InvalidCntlid,
    Unknown(u16),
}

impl CmRejStatus {
    pub fn code(self) -> u16 {
        match self {
            CmRejStatus::InvalidLength => 0x01,
            CmRejStatus::InvalidRecfmt => 0x02,
            CmRejStatus::InvalidQid => 0x03,
            CmRejStatus::InvalidHsqsize => 0x04,
            CmRejStatus::InvalidHrqsize => 0x05,
            CmRejStatus::NoResources => 0x06,
            CmRejStatus::InvalidIrd => 0x07,
            CmRejStatus::InvalidOrd => 0x08,
            CmRejStatus::InvalidCntlid => 0x09,
            CmRejStatus::Unknown(c) => c,
        }
    }
    pub fn from_code(c: u16) -> Self {
        match c {
            0x01 => CmRejStatus::InvalidLength,
            0x02 => CmRejStatus::InvalidRecfmt,
            0x03 => CmRejStatus::InvalidQid,
            0x04 => CmRejStatus::InvalidHsqsize,
            0x05 => CmRejStatus::InvalidHrqsize,
            0x06 => CmRejStatus::NoResources,
            0x07 => CmRejStatus::InvalidIrd,
            0x08 => CmRejStatus::InvalidOrd,
            0x09 => CmRejStatus::InvalidCntlid,
            c => CmRejStatus::Unknown(c),
        }
    }
}

/// The controller's CM reject private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmRej {
    pub recfmt: u16,
    pub sts: CmRejStatus,
}

impl CmRej {
    pub fn new(sts: CmRejStatus) -> Self {
        CmRej {
            recfmt: RECFMT_1_0,
            sts,
        }
    }
    /// Parses; any RECFMT is accepted (a reject may be for a RECFMT we do not speak).
    pub fn parse(b: &[u8]) -> Result<Self> {
        if b.len() < CM_REJ_LEN {
            return Err(Error::Truncated);
        }
        Ok(CmRej {
            recfmt: le16(b, 0),
            sts: CmRejStatus::from_code(le16(b, 2)),
        })
    }
    pub fn emit(&self) -> [u8; CM_REJ_LEN] {
        let mut b = [0u8; CM_REJ_LEN];
        put16(&mut b, 0, self.recfmt);
        put16(&mut b, 2, self.sts.code());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn req_bytes_as_linux_sends_them() {
        // Linux nvme-rdma, I/O queue 3, queue size 128: recfmt 0, qid 3,
        // hrqsize 128, hsqsize 127, cntlid 1.
        let mut b = [0u8; 32];
        b[..10].copy_from_slice(&[0, 0, 3, 0, 0x80, 0, 0x7f, 0, 1, 0]);
        let r = CmReq::parse(&b).unwrap();
        assert_eq!(
            r,
            CmReq {
                recfmt: 0,
                qid: 3,
                hrqsize: 128,
                hsqsize: 127,
                cntlid: 1
            }
        );
        assert_eq!(r.emit(), b);
        // reserved bytes ignored, padding allowed
        let mut p = [0xffu8; 56];
        p[..10].copy_from_slice(&b[..10]);
        assert_eq!(CmReq::parse(&p).unwrap(), r);
        assert_eq!(CmReq::parse(&b[..31]), Err(Error::Truncated));
        b[0] = 1;
        assert_eq!(CmReq::parse(&b), Err(Error::BadVersion));
    }

    #[test]
    fn rep_and_rej() {
        let r = CmRep {
            recfmt: 0,
            crqsize: 32,
        };
        let b = r.emit();
        assert_eq!(&b[..4], &[0, 0, 32, 0]);
        assert!(b[4..].iter().all(|&x| x == 0));
        assert_eq!(CmRep::parse(&b).unwrap(), r);
        assert_eq!(CmRep::parse(&b[..3]), Err(Error::Truncated));
        let j = CmRej::new(CmRejStatus::InvalidQid);
        assert_eq!(j.emit(), [0, 0, 3, 0]);
        assert_eq!(CmRej::parse(&j.emit()).unwrap(), j);
        for c in 0..=10u16 {
            assert_eq!(CmRejStatus::from_code(c).code(), c);
        }
        assert_eq!(CmRej::parse(&[0, 0, 6]), Err(Error::Truncated));
    }
}
