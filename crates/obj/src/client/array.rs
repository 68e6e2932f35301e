//! The array convenience (`daos_array_*`): a byte array of fixed-size cells
//! over an object of type [`ObjType::Array`]. Cells are grouped in chunks of
//! `chunk` cells; chunk `c` is dkey `c + 1` (a u64) holding one array akey
//! ([`ARRAY_AKEY`]) with `cell`-byte records; dkey 0 holds the array's
//! metadata (cell and chunk size) as a single value under [`MD_AKEY`]. A
//! read or write spanning several chunks sends one RPC per chunk, all in
//! flight together; the operation completes when the last one answered.

use std::cell::RefCell;
use std::rc::Rc;

use tse::{Event, Scheduler};

use super::obj::{
    decode_fetch, decode_update, fetch_req, punch_req, query_key, update_req, with_fetched_one,
    ObjHandle, QueryKeyOut,
};
use super::{send_rpc, Client, ContHandle, Done, Error, Net, Pending, Result};
use crate::rpc::msg::{PunchWhat, Request, QUERY_MAX_DKEY, QUERY_MAX_RECX};
use crate::rpc::Status;
use crate::types::{AKey, DKey, Iod, ObjType, ObjectId, Recx, SgList};

/// The akey of the data records.
pub const ARRAY_AKEY: &[u8] = b"0";
/// The akey of the metadata single value (under dkey 0).
pub const MD_AKEY: &[u8] = b"array_md";

/// An open array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Array {
    pub oh: ObjHandle,
    /// Bytes per cell.
    pub cell: u64,
    /// Cells per chunk (per dkey).
    pub chunk: u64,
}

impl Array {
    /// The pieces of `[idx, idx + nr)` cells: (chunk, first cell in the
    /// chunk, cells, offset in the caller's buffer in cells).
    fn pieces(&self, idx: u64, nr: u64) -> Vec<(u64, u64, u64, u64)> {
        let mut v = Vec::new();
        let mut at = idx;
        let end = idx.saturating_add(nr);
        while at < end {
            let c = at / self.chunk;
            let in_chunk = at % self.chunk;
            let n = (self.chunk - in_chunk).min(end - at);
            v.push((c, in_chunk, n, at - idx));
            at += n;
        }
        v
    }
}

fn chunk_dkey(c: u64) -> DKey {
    DKey::from_u64(c + 1)
}

fn md_dkey() -> DKey {
    DKey::from_u64(0)
}

/// Counts down the RPCs of one operation and finishes it with the first
/// error (or `out` when all succeeded).
struct Gather<T> {
    left: usize,
    err: Option<Error>,
    out: Option<T>,
    done: Option<Done<T>>,
}

type Shared<T> = Rc<RefCell<Gather<T>>>;

fn gather<T>(n: usize, out: T, done: Done<T>) -> Shared<T> {
    Rc::new(RefCell::new(Gather {
        left: n,
        err: None,
        out: Some(out),
        done: Some(done),
    }))
}

fn arrive<T>(g: &Shared<T>, s: &mut Scheduler, r: Result<()>) {
    let fin = {
        let mut g = g.borrow_mut();
        if let Err(e) = r {
            g.err.get_or_insert(e);
        }
        g.left -= 1;
        if g.left == 0 {
            let out = match g.err.take() {
                Some(e) => Err(e),
                None => g.out.take().ok_or(Error::NotDone),
            };
            g.done.take().map(|d| (d, out))
        } else {
            None
        }
    };
    if let Some((d, out)) = fin {
        d.finish(s, out);
    }
}

impl Client {
    /// `daos_array_create`: records the cell and chunk size (in cells).
    pub fn array_create(
        &self,
        coh: &ContHandle,
        oid: ObjectId,
        cell: u64,
        chunk: u64,
        ev: Option<&Event>,
    ) -> Result<Pending<Array>> {
        let (t, _) = oid.validate()?;
        if t != ObjType::Array {
            return Err(Error::Invalid("not an array object (type must be Array)"));
        }
        if cell == 0 || chunk == 0 {
            return Err(Error::Invalid("cell and chunk size must be positive"));
        }
        let a = Array {
            oh: ObjHandle { coh: coh.coh, oid },
            cell,
            chunk,
        };
        let mut md = cell.to_le_bytes().to_vec();
        md.extend_from_slice(&chunk.to_le_bytes());
        let (req, bulk) = update_req(
            &a.oh,
            &md_dkey(),
            &[Iod::single(MD_AKEY, 16)],
            vec![SgList::one(md)],
        )?;
        self.rpc(ev, req, bulk, move |r| decode_update(r).map(|_| a))
    }

    /// `daos_array_open`: reads the cell and chunk size
    /// (`Engine(NonExist)` if the array was never created).
    pub fn array_open(
        &self,
        coh: &ContHandle,
        oid: ObjectId,
        ev: Option<&Event>,
    ) -> Result<Pending<Array>> {
        let (t, _) = oid.validate()?;
        if t != ObjType::Array {
            return Err(Error::Invalid("not an array object (type must be Array)"));
        }
        let oh = ObjHandle { coh: coh.coh, oid };
        let req = fetch_req(&oh, None, &md_dkey(), &[Iod::single(MD_AKEY, 16)], &[])?;
        self.rpc(ev, req, Vec::new(), move |r| {
            let f = decode_fetch(r, 1, Vec::new())?;
            let md = f.sgls.first().map(SgList::concat).unwrap_or_default();
            if md.len() != 16 {
                return Err(Error::Engine(Status::NonExist));
            }
            let mut c = [0u8; 8];
            c.copy_from_slice(&md[..8]);
            let cell = u64::from_le_bytes(c);
            c.copy_from_slice(&md[8..]);
            let chunk = u64::from_le_bytes(c);
            if cell == 0 || chunk == 0 {
                return Err(Error::Engine(Status::Invalid));
            }
            Ok(Array { oh, cell, chunk })
        })
    }

    /// `daos_array_write`: `data` (a whole number of cells) from cell `idx`.
    pub fn array_write(
        &self,
        a: &Array,
        idx: u64,
        data: &[u8],
        ev: Option<&Event>,
    ) -> Result<Pending<()>> {
        if data.is_empty() || !(data.len() as u64).is_multiple_of(a.cell) {
            return Err(Error::Invalid(
                "array data must be a positive whole number of cells",
            ));
        }
        let nr = data.len() as u64 / a.cell;
        let mut reqs = Vec::new();
        for (c, in_chunk, n, off) in a.pieces(idx, nr) {
            let bytes = &data[(off * a.cell) as usize..((off + n) * a.cell) as usize];
            let iod = Iod::array(
                ARRAY_AKEY,
                a.cell,
                vec![Recx {
                    idx: in_chunk,
                    nr: n,
                }],
            );
            reqs.push(update_req(
                &a.oh,
                &chunk_dkey(c),
                &[iod],
                vec![SgList::one(bytes.to_vec())],
            )?);
        }
        self.custom(ev, move |net, done| {
            let g = gather(reqs.len(), (), done);
            for (req, bulk) in reqs {
                let g = g.clone();
                send_rpc(net, req, bulk, move |s, r| {
                    arrive(&g, s, r.and_then(decode_update).map(|_| ()))
                });
            }
        })
    }

    /// `daos_array_read`: `nr` cells from cell `idx` (holes read as zeros).
    pub fn array_read(
        &self,
        a: &Array,
        idx: u64,
        nr: u64,
        ev: Option<&Event>,
    ) -> Result<Pending<Vec<u8>>> {
        let len = nr
            .checked_mul(a.cell)
            .ok_or(Error::Invalid("read too large"))?;
        if len > super::MAX_IO_BYTES * 16 {
            return Err(Error::ValueTooLarge {
                size: len,
                limit: super::MAX_IO_BYTES * 16,
            });
        }
        let mut reqs = Vec::new();
        for (c, in_chunk, n, off) in a.pieces(idx, nr) {
            let iod = Iod::array(
                ARRAY_AKEY,
                a.cell,
                vec![Recx {
                    idx: in_chunk,
                    nr: n,
                }],
            );
            reqs.push((fetch_req(&a.oh, None, &chunk_dkey(c), &[iod], &[])?, off));
        }
        let cell = a.cell;
        self.custom(ev, move |net, done| {
            if reqs.is_empty() {
                let g = gather(1, Vec::new(), done);
                return send_ping_arrive(net, g);
            }
            let g = gather(reqs.len(), vec![0u8; len as usize], done);
            for (req, off) in reqs {
                let g = g.clone();
                send_rpc(net, req, Vec::new(), move |s, r| {
                    // the reply's bytes go straight into the result
                    let r = r.and_then(|r| {
                        with_fetched_one(&r, |data| {
                            let at = (off * cell) as usize;
                            if let Some(out) = g.borrow_mut().out.as_mut() {
                                let n = data.len().min(out.len().saturating_sub(at));
                                out[at..at + n].copy_from_slice(&data[..n]);
                            }
                        })
                    });
                    arrive(&g, s, r)
                });
            }
        })
    }

    /// `daos_array_get_size`: cells up to and including the last written
    /// one.
    pub fn array_get_size(&self, a: &Array, ev: Option<&Event>) -> Result<Pending<u64>> {
        let a = *a;
        self.custom(ev, move |net, done| {
            query_size(net, &a, move |s, r| done.finish(s, r))
        })
    }

    /// `daos_array_set_size`: shrinking drops the cells at and beyond
    /// `size` (whole chunks punched; the last partial chunk rewritten);
    /// growing writes one zero cell at `size - 1`.
    pub fn array_set_size(&self, a: &Array, size: u64, ev: Option<&Event>) -> Result<Pending<()>> {
        let a = *a;
        self.custom(ev, move |net, done| {
            let net2 = net.clone();
            query_size(net, &a, move |s, r| {
                let cur = match r {
                    Ok(c) => c,
                    Err(e) => return done.finish(s, Err(e)),
                };
                set_size_from(s, &net2, a, cur, size, done)
            })
        })
    }
}

fn send_ping_arrive(net: &Rc<RefCell<Net>>, g: Shared<Vec<u8>>) {
    send_rpc(net, Request::Ping, Vec::new(), move |s, r| {
        arrive(&g, s, r.map(|_| ()))
    })
}

/// The array's size in cells (its greatest chunk dkey and that chunk's
/// last extent); `k` gets it.
fn query_size(
    net: &Rc<RefCell<Net>>,
    a: &Array,
    k: impl FnOnce(&mut Scheduler, Result<u64>) + 'static,
) {
    let a = *a;
    query_key(
        net,
        &a.oh,
        None,
        QUERY_MAX_DKEY | QUERY_MAX_RECX,
        Vec::new(),
        ARRAY_AKEY.to_vec(),
        move |s, r| k(s, decode_size(&a, r)),
    )
}

fn decode_size(a: &Array, r: Result<QueryKeyOut>) -> Result<u64> {
    r.and_then(|q| {
        let d = q.dkey.as_u64().ok_or(Error::Engine(Status::Invalid))?;
        if d == 0 {
            return Ok(0);
        }
        Ok((d - 1) * a.chunk + q.recx.idx + q.recx.nr)
    })
    .or_else(|e: Error| match e.status() {
        Some(Status::NonExist) => Ok(0),
        _ => Err(e),
    })
}

/// The second step of `set_size`, once the current size `cur` is known.
fn set_size_from(
    s: &mut Scheduler,
    net: &Rc<RefCell<Net>>,
    a: Array,
    cur: u64,
    size: u64,
    done: Done<()>,
) {
    if size == cur {
        return done.finish(s, Ok(()));
    }
    if size > cur {
        let iod = Iod::array(
            ARRAY_AKEY,
            a.cell,
            vec![Recx {
                idx: (size - 1) % a.chunk,
                nr: 1,
            }],
        );
        let r = update_req(
            &a.oh,
            &chunk_dkey((size - 1) / a.chunk),
            &[iod],
            vec![SgList::one(vec![0u8; a.cell as usize])],
        );
        return match r {
            Ok((req, bulk)) => send_rpc(net, req, bulk, move |s, r| {
                done.finish(s, r.and_then(decode_update).map(|_| ()))
            }),
            Err(e) => done.finish(s, Err(e)),
        };
    }
    // shrink: punch whole chunks past the new end, rewrite the partial one
    let keep_chunks = size.div_ceil(a.chunk);
    let last_chunk = (cur - 1) / a.chunk;
    let partial = !size.is_multiple_of(a.chunk);
    let n = (keep_chunks..=last_chunk).count() + usize::from(partial);
    let g = gather(n, (), done);
    for c in keep_chunks..=last_chunk {
        let g = g.clone();
        let req = punch_req(&a.oh, PunchWhat::Dkey(chunk_dkey(c).0));
        send_rpc(net, req, Vec::new(), move |s, r| {
            arrive(&g, s, r.map(|_| ()))
        });
    }
    if partial {
        let c = size / a.chunk;
        let keep = size % a.chunk;
        let iod = Iod::array(ARRAY_AKEY, a.cell, vec![Recx { idx: 0, nr: keep }]);
        let req = match fetch_req(&a.oh, None, &chunk_dkey(c), std::slice::from_ref(&iod), &[]) {
            Ok(r) => r,
            Err(e) => return arrive(&g, s, Err(e)),
        };
        let net2 = net.clone();
        send_rpc(net, req, Vec::new(), move |s, r| {
            let data = match r.and_then(|r| decode_fetch(r, 1, Vec::new())) {
                Ok(f) => f.sgls.first().map(SgList::concat).unwrap_or_default(),
                Err(e) => return arrive(&g, s, Err(e)),
            };
            let punch = punch_req(
                &a.oh,
                PunchWhat::Akeys {
                    dkey: chunk_dkey(c).0,
                    akeys: vec![AKey(ARRAY_AKEY.to_vec()).0],
                },
            );
            let net3 = net2.clone();
            send_rpc(&net2, punch, Vec::new(), move |s, r| {
                if let Err(e) = r {
                    return arrive(&g, s, Err(e));
                }
                match update_req(&a.oh, &chunk_dkey(c), &[iod], vec![SgList::one(data)]) {
                    Ok((req, bulk)) => send_rpc(&net3, req, bulk, move |s, r| {
                        arrive(&g, s, r.and_then(decode_update).map(|_| ()))
                    }),
                    Err(e) => arrive(&g, s, Err(e)),
                }
            });
        });
    }
}
