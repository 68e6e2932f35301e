//! # netio — the I/O drivers under the sans-IO cores
//!
//! Owns: UDP sockets with batched send/receive (sendmmsg/recvmmsg, UDP GSO/GRO),
//! raw-socket helpers, and per-core run-to-completion pollers (SPDK's reactor
//! model). Protocol crates call into it from their `driver` modules; protocol
//! logic itself never opens a socket.
//!
//! Depends on nothing inside dpustack (plain bytes in, bytes out).

pub mod baseline;
pub mod ifaddr;
pub mod udp;
pub mod xdp;
