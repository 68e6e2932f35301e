//! The open write transaction with the four index tables every update and
//! read uses (`idx`, `extmax`, `conts`, `snaps`) kept open for as long as the
//! transaction lives.
//!
//! redb's `open_table` looks the table up in the transaction's table tree
//! (a B-tree descent, a decode of the table definition, a type check) and
//! dropping the table stages its new root back into that tree; four of each
//! per update and four more per read inside a batch were ~15 % of a target's
//! CPU in mdtest-hard write. A transaction now opens them once (the first
//! update or read after `begin_write`) and closes them only when it is
//! committed, aborted or dropped — with the deferred index commit that is
//! once per checkpoint. Nothing else opens these four tables in the write
//! transaction (redb refuses a second open of an open table, so a mistake
//! shows as an error, not as a silent divergence).
//!
//! A redb `Table` borrows its `WriteTransaction`; holding both in one struct
//! needs the transaction at a fixed address (a heap allocation owned through
//! a raw pointer, so moving `Txn` does not move or re-borrow it) and the
//! tables dropped before it (`Drop`, `into_inner`).

use std::ptr::NonNull;

use redb::{Table, WriteTransaction};

use super::{ix, CONTS, EXTMAX, IDX, SNAPS};
use crate::types::StoreResult;

type Bytes = &'static [u8];

/// The four index tables of one write transaction.
pub(crate) struct Tables<'t> {
    pub(crate) idx: Table<'t, Bytes, Bytes>,
    pub(crate) extmax: Table<'t, Bytes, u64>,
    pub(crate) conts: Table<'t, Bytes, u64>,
    pub(crate) snaps: Table<'t, Bytes, Bytes>,
}

/// A write transaction and (once asked for) its open [`Tables`].
pub(crate) struct Txn {
    /// Borrow `*txn`; always dropped before it.
    tables: Option<Tables<'static>>,
    /// Owned: a `Box::into_raw` of the transaction, freed in `Drop` or
    /// handed back by [`Txn::into_inner`].
    txn: NonNull<WriteTransaction>,
}

impl Txn {
    pub(crate) fn new(txn: WriteTransaction) -> Txn {
        Txn {
            tables: None,
            txn: NonNull::from(Box::leak(Box::new(txn))),
        }
    }

    /// The transaction (to open tables other than the four).
    pub(crate) fn txn(&self) -> &WriteTransaction {
        // SAFETY: `txn` is a live allocation owned by `self` until `Drop`
        // or `into_inner`; only shared references to it are ever made.
        unsafe { self.txn.as_ref() }
    }

    /// The four tables (opened on first use) and the transaction.
    pub(crate) fn tables(&mut self) -> StoreResult<(&mut Tables<'_>, &WriteTransaction)> {
        if self.tables.is_none() {
            // SAFETY: the tables borrow the transaction for as long as they
            // are stored in `self.tables`, which is always emptied before the
            // transaction is freed or moved out (`Drop`, `into_inner`); the
            // 'static lifetime never leaves this module: callers get them
            // back at the lifetime of their borrow of `self` (below).
            let t: &'static WriteTransaction = unsafe { &*self.txn.as_ptr() };
            self.tables = Some(Tables {
                idx: t.open_table(IDX).map_err(ix)?,
                extmax: t.open_table(EXTMAX).map_err(ix)?,
                conts: t.open_table(CONTS).map_err(ix)?,
                snaps: t.open_table(SNAPS).map_err(ix)?,
            });
        }
        let txn = self.txn.as_ptr();
        let Some(t) = self.tables.as_mut() else {
            return Err(super::StoreError::Index("tables not open".into()));
        };
        // SAFETY: shortening the tables' lifetime to this borrow of `self`
        // (they cannot be moved out to outlive it).
        let t: &mut Tables<'_> = unsafe { &mut *(t as *mut Tables<'static>).cast::<Tables<'_>>() };
        // SAFETY: as in `txn()` (a shared reference to the owned allocation).
        let txn = unsafe { &*txn };
        Ok((t, txn))
    }

    /// The transaction back, its tables closed (for commit, abort,
    /// durability settings).
    pub(crate) fn into_inner(mut self) -> WriteTransaction {
        self.tables = None;
        let p = self.txn;
        std::mem::forget(self);
        // SAFETY: `p` came from `Box::leak` in `new`, no table borrows it
        // any more, and `self` (which would free it again) is forgotten.
        *unsafe { Box::from_raw(p.as_ptr()) }
    }
}

impl Drop for Txn {
    fn drop(&mut self) {
        // the tables first: they borrow the transaction
        self.tables = None;
        // SAFETY: as in `into_inner` (`Drop` runs at most once, never after it)
        drop(unsafe { Box::from_raw(self.txn.as_ptr()) });
    }
}
