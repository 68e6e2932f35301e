//! # cm — the RDMA connection manager (librdmacm's model)
//!
//! Owns: event channels, cm_ids with port spaces, address/route resolution,
//! listen/connect/accept/reject/disconnect with private data and ECE, as a sans-IO
//! state machine that exchanges IB CM MADs (REQ/REP/RTU/REJ/MRA/DREQ/DREP,
//! SIDR_REQ/REP) on QP1 of a `verbs` device.
//!
//! Depends on `wire` (MAD formats), `verbs` (QPs, QP1), `netio`.
