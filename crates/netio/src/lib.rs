//! # netio — the I/O drivers under the sans-IO cores
//!
//! Owns: UDP sockets with batched send/receive (sendmmsg/recvmmsg, UDP GSO/GRO),
//! AF_XDP sockets with a tiny XDP redirect program (an opt-in kernel-bypass path,
//! [`xdp`]), raw-socket helpers, per-core run-to-completion pollers (SPDK's reactor
//! model) and the same-run baselines. Protocol crates call into it from their
//! `driver` modules; protocol logic itself never opens a socket.
//!
//! Depends inside dpustack only on `wire` (Ethernet/IPv4/UDP views to build and
//! check AF_XDP frames); no protocol logic.

pub mod baseline;
pub mod ifaddr;
pub mod neigh;
pub mod udp;
pub mod xdp;
