//! Index key layout: one ordered byte-string key space in which a prefix scan
//! walks a container, an object, a dkey or an akey, and a forward scan from an
//! epoch finds the newest version at or below it first.
//!
//! ```text
//! cont(16) oid(16) 0x00 VER                              object punch
//! cont(16) oid(16) 0x01 enc(dkey) 0x00 VER               dkey punch
//! cont(16) oid(16) 0x01 enc(dkey) 0x01 enc(akey) 0x00 VER  akey punch
//!                                               0x01 VER  single value
//!                                               0x02 idx(8 BE) VER  array extent
//! VER = !epoch (8 BE) !seq (8 BE)   (newest first)
//! ```
//! `enc` escapes 0x00 as 0x00 0xFF and ends with 0x00 0x01, so encoded keys sort
//! like the raw bytes and no encoded key is a prefix of another: everything under
//! a dkey lies strictly below `enc(dkey) 0xFF`, which is where the next dkey's
//! scan starts (listing skips subtrees with one seek).

use crate::types::{ContId, ObjectId};

pub(crate) const T_PUNCH: u8 = 0x00;
pub(crate) const T_CHILD: u8 = 0x01;
pub(crate) const T_SV: u8 = 0x01;
pub(crate) const T_EXT: u8 = 0x02;
/// Above every tag: "after this subtree".
pub(crate) const T_AFTER: u8 = 0xff;

/// A version: epoch, then a store-wide sequence number that orders changes made
/// at the same epoch (DAOS's minor epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(crate) struct Ver {
    pub epoch: u64,
    pub seq: u64,
}

impl Ver {
    pub const LEN: usize = 16;
    /// The greatest version at epoch `e` (every change at `e` is ≤ it).
    pub fn top(e: u64) -> Ver {
        Ver {
            epoch: e,
            seq: u64::MAX,
        }
    }
    pub fn push(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(!self.epoch).to_be_bytes());
        out.extend_from_slice(&(!self.seq).to_be_bytes());
    }
    pub fn parse(b: &[u8]) -> Option<Ver> {
        let e = u64::from_be_bytes(b.get(..8)?.try_into().ok()?);
        let s = u64::from_be_bytes(b.get(8..16)?.try_into().ok()?);
        Some(Ver { epoch: !e, seq: !s })
    }
}

/// Append the order-preserving, prefix-free encoding of `b`.
pub(crate) fn enc(out: &mut Vec<u8>, b: &[u8]) {
    for &x in b {
        out.push(x);
        if x == 0 {
            out.push(0xff);
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

/// Decode an [`enc`]oded string at the start of `b`: the bytes and the length consumed.
pub(crate) fn dec(b: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut v = Vec::new();
    let mut i = 0;
    loop {
        let x = *b.get(i)?;
        if x == 0 {
            match *b.get(i + 1)? {
                0xff => v.push(0),
                0x01 => return Some((v, i + 2)),
                _ => return None,
            }
            i += 2;
        } else {
            v.push(x);
            i += 1;
        }
    }
}

pub(crate) fn cont_prefix(cont: ContId) -> Vec<u8> {
    cont.as_bytes().to_vec()
}

pub(crate) fn obj_prefix(cont: ContId, oid: ObjectId) -> Vec<u8> {
    let mut k = Vec::with_capacity(64);
    k.extend_from_slice(cont.as_bytes());
    k.extend_from_slice(&oid.to_bytes());
    k
}

pub(crate) fn dkey_prefix(cont: ContId, oid: ObjectId, dkey: &[u8]) -> Vec<u8> {
    let mut k = obj_prefix(cont, oid);
    k.push(T_CHILD);
    enc(&mut k, dkey);
    k
}

pub(crate) fn akey_prefix(dkey_prefix: &[u8], akey: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(dkey_prefix.len() + akey.len() + 24);
    k.extend_from_slice(dkey_prefix);
    k.push(T_CHILD);
    enc(&mut k, akey);
    k
}

/// `prefix tag VER`.
pub(crate) fn ver_key(prefix: &[u8], tag: u8, v: Ver) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + 1 + Ver::LEN);
    k.extend_from_slice(prefix);
    k.push(tag);
    v.push(&mut k);
    k
}

/// `akey_prefix 0x02 idx VER`.
pub(crate) fn ext_key(akey_prefix: &[u8], idx: u64, v: Ver) -> Vec<u8> {
    let mut k = Vec::with_capacity(akey_prefix.len() + 9 + Ver::LEN);
    k.extend_from_slice(akey_prefix);
    k.push(T_EXT);
    k.extend_from_slice(&idx.to_be_bytes());
    v.push(&mut k);
    k
}

/// `prefix tag`: the start of one tag's entries.
pub(crate) fn with_tag(prefix: &[u8], tag: u8) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + 1);
    k.extend_from_slice(prefix);
    k.push(tag);
    k
}

/// The smallest key greater than every key starting with `p` (`None`: unbounded).
pub(crate) fn prefix_end(p: &[u8]) -> Option<Vec<u8>> {
    let mut v = p.to_vec();
    while let Some(last) = v.pop() {
        if last != 0xff {
            v.push(last + 1);
            return Some(v);
        }
    }
    None
}

/// A parsed index key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub oid: ObjectId,
    pub dkey: Option<Vec<u8>>,
    pub akey: Option<Vec<u8>>,
    pub kind: Kind,
    pub ver: Ver,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    ObjPunch,
    DkeyPunch,
    AkeyPunch,
    Single,
    Extent(u64),
}

/// Parse a full index key (including the container prefix).
pub(crate) fn parse(k: &[u8]) -> Option<Parsed> {
    let oid = ObjectId::from_bytes(k.get(16..32)?.try_into().ok()?);
    let rest = k.get(32..)?;
    let (&t, rest) = rest.split_first()?;
    if t == T_PUNCH {
        return Some(Parsed {
            oid,
            dkey: None,
            akey: None,
            kind: Kind::ObjPunch,
            ver: Ver::parse(rest)?,
        });
    }
    let (dkey, n) = dec(rest)?;
    let rest = &rest[n..];
    let (&t, rest) = rest.split_first()?;
    if t == T_PUNCH {
        return Some(Parsed {
            oid,
            dkey: Some(dkey),
            akey: None,
            kind: Kind::DkeyPunch,
            ver: Ver::parse(rest)?,
        });
    }
    let (akey, n) = dec(rest)?;
    let rest = &rest[n..];
    let (&t, rest) = rest.split_first()?;
    let (kind, rest) = match t {
        T_PUNCH => (Kind::AkeyPunch, rest),
        T_SV => (Kind::Single, rest),
        T_EXT => {
            let idx = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
            (Kind::Extent(idx), &rest[8..])
        }
        _ => return None,
    };
    Some(Parsed {
        oid,
        dkey: Some(dkey),
        akey: Some(akey),
        kind,
        ver: Ver::parse(rest)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enc_preserves_order_and_is_prefix_free() {
        let samples: Vec<&[u8]> = vec![
            b"", b"\0", b"\0\0", b"\0\x01", b"a", b"a\0", b"a\0b", b"ab", b"\xff", b"\xff\0",
        ];
        for a in &samples {
            let mut ea = Vec::new();
            enc(&mut ea, a);
            assert_eq!(dec(&ea).unwrap(), (a.to_vec(), ea.len()));
            for b in &samples {
                let mut eb = Vec::new();
                enc(&mut eb, b);
                assert_eq!(a.cmp(b), ea.cmp(&eb), "{a:?} {b:?}");
                if a != b {
                    assert!(!eb.starts_with(&ea));
                    // everything under a lies below a's "after" key
                    let mut after = ea.clone();
                    after.push(T_AFTER);
                    let mut under = ea.clone();
                    under.extend_from_slice(&[T_EXT, 0xff, 0xff]);
                    assert!(under < after);
                    assert!((eb < ea) == (eb < after));
                }
            }
        }
    }

    #[test]
    fn versions_sort_newest_first_and_keys_parse() {
        let c = ContId::from_u128(7);
        let oid = ObjectId { hi: 1, lo: 2 };
        let dp = dkey_prefix(c, oid, b"d\0");
        let ap = akey_prefix(&dp, b"a");
        let old = ext_key(&ap, 5, Ver { epoch: 3, seq: 9 });
        let new = ext_key(&ap, 5, Ver { epoch: 4, seq: 1 });
        assert!(new < old);
        let p = parse(&old).unwrap();
        assert_eq!(p.kind, Kind::Extent(5));
        assert_eq!(p.ver, Ver { epoch: 3, seq: 9 });
        assert_eq!(p.dkey.as_deref(), Some(&b"d\0"[..]));
        assert_eq!(p.akey.as_deref(), Some(&b"a"[..]));
        let op = ver_key(&obj_prefix(c, oid), T_PUNCH, Ver { epoch: 1, seq: 1 });
        assert_eq!(parse(&op).unwrap().kind, Kind::ObjPunch);
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff]), None);
    }
}
