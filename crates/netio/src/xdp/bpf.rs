//! The XDP redirect program, written as raw eBPF instructions, and the bpf(2)
//! calls that load and attach it (no libbpf, no clang).
//!
//! The program sends an Ethernet/IPv4 (no options, not a fragment)/UDP frame whose
//! destination is `(ip, port)` to the AF_XDP socket registered in an XSKMAP under
//! the frame's RX queue index; everything else, and frames for a queue with no
//! socket, goes on to the kernel stack (`XDP_PASS`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// One eBPF instruction (`struct bpf_insn`): opcode, dst/src registers, offset,
/// immediate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    /// The 8-byte kernel encoding (little-endian host; regs byte = dst | src << 4).
    pub fn encode(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = (self.dst & 0x0f) | (self.src << 4);
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }
}

// Opcode pieces from linux/bpf.h / bpf_common.h.
const BPF_LD: u8 = 0x00;
const BPF_LDX: u8 = 0x01;
const BPF_ALU: u8 = 0x04;
const BPF_ALU64: u8 = 0x07;
const BPF_JMP: u8 = 0x05;
const BPF_JMP32: u8 = 0x06;
const BPF_W: u8 = 0x00;
const BPF_H: u8 = 0x08;
const BPF_B: u8 = 0x10;
const BPF_DW: u8 = 0x18;
const BPF_IMM: u8 = 0x00;
const BPF_MEM: u8 = 0x60;
const BPF_K: u8 = 0x00;
const BPF_X: u8 = 0x08;
const BPF_ADD: u8 = 0x00;
const BPF_AND: u8 = 0x50;
const BPF_MOV: u8 = 0xb0;
const BPF_JNE: u8 = 0x50;
const BPF_JGT: u8 = 0x20;
const BPF_JSET: u8 = 0x40;
const BPF_CALL: u8 = 0x80;
const BPF_EXIT: u8 = 0x90;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;

/// `XDP_PASS` action.
pub const XDP_PASS: i32 = 2;

fn ins(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        dst,
        src,
        off,
        imm,
    }
}
fn ldx(size: u8, dst: u8, src: u8, off: i16) -> Insn {
    ins(BPF_LDX | BPF_MEM | size, dst, src, off, 0)
}
fn mov_k(dst: u8, imm: i32) -> Insn {
    ins(BPF_ALU64 | BPF_MOV | BPF_K, dst, 0, 0, imm)
}
fn mov_x(dst: u8, src: u8) -> Insn {
    ins(BPF_ALU64 | BPF_MOV | BPF_X, dst, src, 0, 0)
}
fn add_k(dst: u8, imm: i32) -> Insn {
    ins(BPF_ALU64 | BPF_ADD | BPF_K, dst, 0, 0, imm)
}
/// 32-bit compare: the immediate is not sign-extended against a 64-bit register.
fn jne32_k(dst: u8, imm: i32, off: i16) -> Insn {
    ins(BPF_JMP32 | BPF_JNE | BPF_K, dst, 0, off, imm)
}

/// The program for frames to `ip:port` (host order), redirecting through the
/// XSKMAP with file descriptor `map_fd`. Branches all jump to the trailing
/// "return XDP_PASS".
pub fn redirect_program(map_fd: RawFd, ip: u32, port: u16) -> Vec<Insn> {
    redirect_program_net(map_fd, ip, u32::MAX, port)
}

/// As [`redirect_program`] for every destination address `a` with
/// `a & mask == net & mask`.
pub fn redirect_program_net(map_fd: RawFd, net: u32, mask: u32, port: u16) -> Vec<Insn> {
    // Packet fields are loaded as little-endian integers from network-order bytes,
    // so constants are byte-swapped: compare against from_le_bytes(be bytes).
    let le16 = |v: u16| u16::from_le_bytes(v.to_be_bytes()) as i32;
    let le32 = |v: u32| u32::from_le_bytes(v.to_be_bytes()) as i32;
    let mut p = vec![
        // r6 = ctx->rx_queue_index; r2 = ctx->data; r3 = ctx->data_end
        ldx(BPF_W, 6, 1, 16),
        ldx(BPF_W, 2, 1, 0),
        ldx(BPF_W, 3, 1, 4),
        // if data + 42 > data_end: pass
        mov_x(4, 2),
        add_k(4, 42),
        ins(BPF_JMP | BPF_JGT | BPF_X, 4, 3, 0, 0), // off patched below
        // EtherType IPv4
        ldx(BPF_H, 5, 2, 12),
        jne32_k(5, le16(0x0800), 0),
        // version 4, IHL 5
        ldx(BPF_B, 5, 2, 14),
        jne32_k(5, 0x45, 0),
        // not a fragment: (flags/offset & 0x3fff) == 0
        ldx(BPF_H, 5, 2, 20),
        ins(BPF_JMP | BPF_JSET | BPF_K, 5, 0, 0, le16(0x3fff)),
        // protocol UDP
        ldx(BPF_B, 5, 2, 23),
        jne32_k(5, 17, 0),
        // destination address within net/mask (32-bit AND keeps the upper half 0)
        ldx(BPF_W, 5, 2, 30),
        ins(BPF_ALU | BPF_AND | BPF_K, 5, 0, 0, le32(mask)),
        jne32_k(5, le32(net & mask), 0),
        // UDP destination port
        ldx(BPF_H, 5, 2, 36),
        jne32_k(5, le16(port), 0),
        // return bpf_redirect_map(map, rx_queue_index, XDP_PASS)
        ins(BPF_LD | BPF_IMM | BPF_DW, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        ins(0, 0, 0, 0, 0),
        mov_x(2, 6),
        mov_k(3, XDP_PASS),
        ins(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
    ];
    // pass:
    let pass = p.len();
    p.push(mov_k(0, XDP_PASS));
    p.push(ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
    for (i, insn) in p.iter_mut().enumerate() {
        let class = insn.code & 0x07;
        let op = insn.code & 0xf0;
        let cond = (class == BPF_JMP || class == BPF_JMP32) && op != BPF_CALL && op != BPF_EXIT;
        if cond && i < pass {
            insn.off = (pass - i - 1) as i16;
        }
    }
    p
}

// bpf(2) commands and types.
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_LINK_CREATE: libc::c_int = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
/// `XDP_FLAGS_SKB_MODE`: generic XDP, works on every netdev.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: the driver's native XDP hook (veth has one).
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// A zeroed `union bpf_attr` large enough for the commands used here.
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }
    fn u32(&mut self, at: usize, v: u32) -> &mut Self {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, at: usize, v: u64) -> &mut Self {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
}

fn bpf(cmd: libc::c_int, attr: &mut Attr) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a valid, zero-padded bpf_attr of the size passed; any
    // pointers written into it point to memory live for the duration of the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut Attr,
            std::mem::size_of::<Attr>() as u32,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: the kernel just returned this new descriptor to us; nobody else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// An XSKMAP + the redirect program attached (generic mode, through a BPF link) to
/// one interface. Dropping it detaches the program (the link's last fd closes).
pub struct XdpRedirect {
    link: OwnedFd,
    prog: OwnedFd,
    map: OwnedFd,
    pub ifindex: u32,
}

impl XdpRedirect {
    /// Creates a map of `queues` entries, loads the program for `ip:port` and
    /// attaches it to `ifindex` with `XDP_FLAGS_SKB_MODE`. Needs CAP_BPF/CAP_NET_ADMIN.
    pub fn attach(ifindex: u32, ip: u32, port: u16, queues: u32) -> io::Result<XdpRedirect> {
        Self::attach_mode(ifindex, ip, port, queues, XDP_FLAGS_SKB_MODE)
    }

    /// As [`Self::attach`] with explicit XDP flags ([`XDP_FLAGS_SKB_MODE`] or
    /// [`XDP_FLAGS_DRV_MODE`]).
    pub fn attach_mode(
        ifindex: u32,
        ip: u32,
        port: u16,
        queues: u32,
        xdp_flags: u32,
    ) -> io::Result<XdpRedirect> {
        Self::attach_net(ifindex, ip, u32::MAX, port, queues, xdp_flags)
    }

    /// As [`Self::attach_mode`] for every destination in `net/mask`.
    pub fn attach_net(
        ifindex: u32,
        net: u32,
        mask: u32,
        port: u16,
        queues: u32,
        xdp_flags: u32,
    ) -> io::Result<XdpRedirect> {
        let map = owned(bpf(
            BPF_MAP_CREATE,
            Attr::new()
                .u32(0, BPF_MAP_TYPE_XSKMAP)
                .u32(4, 4)
                .u32(8, 4)
                .u32(12, queues.max(1)),
        )?);
        let insns: Vec<[u8; 8]> = redirect_program_net(map.as_raw_fd(), net, mask, port)
            .iter()
            .map(Insn::encode)
            .collect();
        let license = c"GPL";
        let mut log = vec![0u8; 64 * 1024];
        let name = b"dpu_xsk_redir\0\0\0";
        let mut a = Attr::new();
        a.u32(0, BPF_PROG_TYPE_XDP)
            .u32(4, insns.len() as u32)
            .u64(8, insns.as_ptr() as u64)
            .u64(16, license.as_ptr() as u64)
            .u32(24, 1)
            .u32(28, log.len() as u32)
            .u64(32, log.as_mut_ptr() as u64)
            .u32(68, BPF_XDP);
        a.0[48..64].copy_from_slice(name);
        let prog = match bpf(BPF_PROG_LOAD, &mut a) {
            Ok(fd) => owned(fd),
            Err(e) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let msg = String::from_utf8_lossy(&log[..end]);
                return Err(io::Error::new(
                    e.kind(),
                    format!("BPF_PROG_LOAD: {e}; verifier log:\n{msg}"),
                ));
            }
        };
        let link = owned(bpf(
            BPF_LINK_CREATE,
            Attr::new()
                .u32(0, prog.as_raw_fd() as u32)
                .u32(4, ifindex)
                .u32(8, BPF_XDP)
                .u32(12, xdp_flags),
        )?);
        Ok(XdpRedirect {
            link,
            prog,
            map,
            ifindex,
        })
    }

    /// Steers frames received on `queue` to the AF_XDP socket `xsk_fd` (bound).
    pub fn register(&self, queue: u32, xsk_fd: RawFd) -> io::Result<()> {
        let key = queue;
        let val = xsk_fd as u32;
        bpf(
            BPF_MAP_UPDATE_ELEM,
            Attr::new()
                .u32(0, self.map.as_raw_fd() as u32)
                .u64(8, &key as *const u32 as u64)
                .u64(16, &val as *const u32 as u64)
                .u64(24, 0),
        )?;
        Ok(())
    }

    /// The link's descriptor (closing it detaches the program).
    pub fn link_fd(&self) -> RawFd {
        self.link.as_raw_fd()
    }
    /// The program's descriptor.
    pub fn prog_fd(&self) -> RawFd {
        self.prog.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insn_encoding_matches_kernel_layout() {
        // r4 = r2  -> bf 24 00 00 00 00 00 00
        assert_eq!(mov_x(4, 2).encode(), [0xbf, 0x24, 0, 0, 0, 0, 0, 0]);
        // r5 = *(u16 *)(r2 + 36) -> 69 25 24 00 00 00 00 00
        assert_eq!(
            ldx(BPF_H, 5, 2, 36).encode(),
            [0x69, 0x25, 36, 0, 0, 0, 0, 0]
        );
        // r0 = 2 -> b7 00 00 00 02 00 00 00
        assert_eq!(mov_k(0, 2).encode(), [0xb7, 0, 0, 0, 2, 0, 0, 0]);
        // w5 != 0x45 goto +7 -> 56 05 07 00 45 00 00 00
        assert_eq!(jne32_k(5, 0x45, 7).encode(), [0x56, 5, 7, 0, 0x45, 0, 0, 0]);
        // negative offsets/immediates are two's complement little-endian
        assert_eq!(
            ins(0x55, 1, 0, -2, -1).encode(),
            [0x55, 1, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
    }

    #[test]
    fn net_program_masks_the_address() {
        let net = u32::from_be_bytes([127, 0, 0, 0]);
        let p = redirect_program_net(3, net | 5, 0xff00_0000, 4791);
        let and = p.iter().position(|i| i.code == 0x54).expect("ALU32 AND");
        assert_eq!((p[and].dst, p[and].imm), (5, 0xff));
        assert_eq!(p[and + 1].code, 0x56);
        assert_eq!(p[and + 1].imm, 127, "net & mask, as loaded little-endian");
        // The exact-address program masks with all ones.
        let q = redirect_program(3, net | 5, 4791);
        let and = q.iter().position(|i| i.code == 0x54).unwrap();
        assert_eq!(q[and].imm, -1);
    }

    #[test]
    fn program_shape() {
        let ip = u32::from_be_bytes([10, 77, 0, 2]);
        let p = redirect_program(7, ip, 4791);
        let n = p.len();
        // Ends with "r0 = XDP_PASS; exit", after the redirect's own exit.
        assert_eq!(p[n - 2], mov_k(0, XDP_PASS));
        assert_eq!(p[n - 1].code, BPF_JMP | BPF_EXIT);
        assert_eq!(p[n - 3].code, BPF_JMP | BPF_EXIT);
        assert_eq!(p[n - 4].imm, BPF_FUNC_REDIRECT_MAP);
        // Every conditional jump lands on the pass label.
        let mut jumps = 0;
        for (i, insn) in p.iter().enumerate() {
            let class = insn.code & 7;
            let op = insn.code & 0xf0;
            if (class == BPF_JMP || class == BPF_JMP32) && op != BPF_CALL && op != BPF_EXIT {
                assert_eq!(i as i64 + 1 + insn.off as i64, (n - 2) as i64, "insn {i}");
                jumps += 1;
            }
        }
        assert_eq!(jumps, 7);
        // The map is a 16-byte ld_imm64 with the pseudo-map source register.
        let ld = p.iter().position(|i| i.code == 0x18).unwrap();
        assert_eq!((p[ld].src, p[ld].imm), (BPF_PSEUDO_MAP_FD, 7));
        assert_eq!(p[ld + 1], ins(0, 0, 0, 0, 0));
        // Constants compared as little-endian loads of network-order fields.
        assert!(
            p.iter().any(|i| i.code == 0x56 && i.imm == 0xb712),
            "port 4791"
        );
        assert!(
            p.iter().any(|i| i.code == 0x56 && i.imm == 0x0008),
            "EtherType"
        );
        let dst = p
            .iter()
            .find(|i| i.code == 0x56 && i.dst == 5 && i.imm == i32::from_le_bytes([10, 77, 0, 2]));
        assert!(dst.is_some(), "destination address compare");
    }
}
