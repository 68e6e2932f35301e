//! # verbs — the RDMA verbs API and the software RoCEv2 provider
//!
//! Owns: devices, PDs, MRs (lkey/rkey, access flags), CQs and completion channels,
//! QPs (RC/UD) with the IB state machine, SRQs, post_send/post_recv and work
//! completions with rdma-core's names and statuses. The `soft` provider is a
//! RoCEv2 engine byte-compatible with Linux rdma_rxe (requester, responder,
//! completer as sans-IO state machines) driven over UDP 4791 by `netio`.
//! A provider over rdma-core for real NICs will sit beside `soft` behind a feature.
//!
//! Depends on `wire` (packet formats) and `netio` (UDP driver).
