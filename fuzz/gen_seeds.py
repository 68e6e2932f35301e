#!/usr/bin/env python3
"""Writes the small seed corpora of fuzz/seeds/ from the repo's test vectors
(the CM MADs and the rping pcapng of crates/wire/testdata, the flow sample
files) and a few hand-made inputs. Run from the repo root; idempotent."""
import hashlib, os, struct, json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
S = os.path.join(ROOT, "fuzz", "seeds")

def put(target, data):
    d = os.path.join(S, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)

def pcapng_frames(path):
    """Ethernet frames of the Enhanced Packet Blocks of a pcapng file."""
    b = open(path, "rb").read()
    i, out = 0, []
    while i + 12 <= len(b):
        t, l = struct.unpack_from("<II", b, i)
        if l < 12:
            break
        if t == 6:  # EPB
            cap = struct.unpack_from("<I", b, i + 20)[0]
            out.append(b[i + 28:i + 28 + cap])
        i += l
    return out

def roce_payloads(frames):
    for f in frames:
        if len(f) < 42 or f[12:14] != b"\x08\x00" or f[23] != 17:
            continue
        ihl = (f[14] & 15) * 4
        udp = 14 + ihl
        if struct.unpack_from(">H", f, udp + 2)[0] == 4791:
            yield f[udp + 8:]

cm = os.path.join(ROOT, "crates/wire/testdata/cm")
frames = pcapng_frames(os.path.join(cm, "rxe-rping-udaddy.pcapng"))
roce = list(roce_payloads(frames))[:12]
for p in roce:
    put("roce_packet", p)
    # roce_engine: [ctl: QP state][len][datagram], first byte bit0 -> RC QP
    put("roce_engine", bytes([2, min(len(p), 255)]) + p[:255])
for f in frames[:12]:
    put("flow_extract", bytes([1]) + f)

# cm_mad: op sequences (see the target): captured MAD k with 0 edits, time, accept
for k in range(9):
    put("cm_mad", bytes([k << 4, 0]))
put("cm_mad", bytes([0x00, 0, 0x06, 0x0c, 0x01 | 8 << 4, 0, 0x08, 0x2c]))
put("cm_mad", bytes([0x05, 24]) + open(os.path.join(cm, "rtu.mad"), "rb").read()[:24])

# nvmf: [ctl (digests), 4 x u16 cut points] alone replays the canonical session,
# cut inside the ICReq/ICResp, a header, a PDU's data; one flipped byte each
cuts = [struct.pack(">4H", 0, 0, 0, 0), struct.pack(">4H", 1, 129, 200, 5000),
        struct.pack(">4H", 7, 136, 1100, 3000)]
for c in range(2):
    for k in cuts:
        put("nvmf_tcp_target", bytes([c]) + k)
        put("nvmf_tcp_host", bytes([c]) + k)
put("nvmf_tcp_target", bytes([1]) + cuts[1] + bytes(130) + b"\x01")
put("nvmf_tcp_host", bytes([0]) + cuts[2] + bytes(140) + b"\x04")

# nvme_dptr: SQE (PRP, len 8192 at 0x1000, list) + len + mps + mode, then memory
sqe = bytearray(64); sqe[0] = 0x02
struct.pack_into("<QQ", sqe, 24, 0x1000, 0x2000)
put("nvme_dptr", bytes(sqe) + struct.pack("<I", 8192) + b"\x00\x00" + bytes(64))
sqe[1] = 0x40  # PSDT = SGL: a data block descriptor
struct.pack_into("<QIxxxB", sqe, 24, 0x10, 512, 0x00)
put("nvme_dptr", bytes(sqe) + struct.pack("<I", 512) + b"\x00\x80" + bytes(48))

# ofctl_parse: the sample flow files, whole and line by line
flows = open(os.path.join(ROOT, "crates/flow/tests/data/sample-flows.txt")).read()
put("ofctl_parse", flows)
for l in flows.splitlines():
    if l and not l.startswith("#"):
        put("ofctl_parse", l)
put("ofctl_parse", "group_id=1,type=select,bucket=output:1,bucket=output:2")
for l in open(os.path.join(ROOT, "crates/flow/tests/data/sample-packets.txt")).read().splitlines()[3:6]:
    put("ofctl_parse", l)

# mgmt_jsonrpc: [split byte] + requests
reqs = [
    {"jsonrpc": "2.0", "id": 1, "method": "rpc_get_methods"},
    {"jsonrpc": "2.0", "id": 2, "method": "bdev_malloc_create", "params": {"name": "M0", "num_blocks": 64, "block_size": 512}},
    {"jsonrpc": "2.0", "id": 3, "method": "bdev_get_bdevs", "params": {"name": "M0"}},
    {"jsonrpc": "2.0", "id": 4, "method": "save_config"},
]
put("mgmt_jsonrpc", b"\x80" + "".join(json.dumps(r) for r in reqs).encode())
put("mgmt_jsonrpc", b"\x10" + json.dumps(reqs[:2]).encode())
put("mgmt_jsonrpc", b"\x40" + b'{"jsonrpc":"2.0","method":"bdev_null_create","params":{"name":"N","num_blocks":8,"block_size":4096}}')

# spdk_config
cfg = {"subsystems": [
    {"subsystem": "bdev", "config": [
        {"method": "bdev_malloc_create", "params": {"name": "Malloc0", "num_blocks": 128, "block_size": 512}},
        {"method": "bdev_null_create", "params": {"name": "Null0", "num_blocks": 64, "block_size": 4096}}]},
    {"subsystem": "nvmf", "config": [{"method": "nvmf_create_transport", "params": {"trtype": "TCP"}}]}]}
put("spdk_config", json.dumps(cfg, indent=1))
put("spdk_config", json.dumps({"subsystems": [{"subsystem": "bdev", "config": None}]}))

# obj_rpc: [chunk] + frames: a Ping request, a PoolList request, a Ping reply
def frame(resp, op, rid, body=b"", bulk=0, status=0):
    return b"DOBJ" + struct.pack("<BBHQiIII", 1, 1 if resp else 0, op, rid, status, 1000, len(body), bulk) + body
put("obj_rpc", b"\x05" + frame(False, 1, 7) + frame(False, 0x12, 8))
put("obj_rpc", b"\x00" + frame(True, 1, 0) + frame(True, 1, 1) + frame(True, 1, 2))
put("obj_rpc", b"\x01" + frame(True, 1, 1, status=-1005))

# nvme_wire: [selector] + bytes. 0: NVMe/TCP PDUs, 1: NVMe-oF RDMA CM data, 2: SGL descriptor
icreq = bytes([0x00, 0, 128, 0]) + struct.pack("<IHBBI", 128, 0, 0, 0, 0) + bytes(128 - 16)
put("nvme_wire", b"\x00" + icreq)
capsule = bytes([0x04, 0, 72, 0]) + struct.pack("<I", 72) + bytes([0x02]) + bytes(63)
put("nvme_wire", b"\x00" + capsule)
c2h = bytes([0x07, 0x0c, 24, 24]) + struct.pack("<IHHIII", 24 + 8, 1, 0, 0, 8, 0) + b"ABCDEFGH"
put("nvme_wire", b"\x00" + c2h)
put("nvme_wire", b"\x01" + struct.pack("<HHHHH", 0, 1, 32, 31, 0) + bytes(22))
put("nvme_wire", b"\x02" + struct.pack("<Q", 0x1000) + bytes([0, 2, 0]) + struct.pack("<I", 0x1234)[:4] + bytes([0x40]))
put("nvme_wire", b"\x02" + struct.pack("<QI", 0, 4096) + bytes(3) + bytes([0x00]))

# openflow_msg: [ctl (bit 0: a HELLO first), 3 cut points] + OpenFlow 1.3 messages,
# as the openflow crate's tests build them (the FLOW_MOD is ovs-ofctl's bytes)
def ofm(ty, body=b"", xid=9, v=4):
    return struct.pack(">BBHI", v, ty, 8 + len(body), xid) + body
of_match = struct.pack(">HH4x", 1, 4)                      # empty OXM match
out_ctrl = struct.pack(">HHIH6x", 0, 16, 0xfffffffd, 0xffff)
miss = ofm(14, struct.pack(">QQBBHHHIIIH2x", 0, 0, 0, 0, 0, 0, 0, 0xffffffff,
                           0xffffffff, 0xffffffff, 1) + of_match
           + struct.pack(">HH4x", 4, 8 + len(out_ctrl)) + out_ctrl)
ovs_fm = bytes.fromhex("040e007800000006000000000000000000000000000000000000000000008000ffffffffffffffffffffffff0000000000010029800000040000000180000a020800800019080a000000ff000000800014010680001c02005000000000000000000400180000000000000010000000020000000000000000")
delete_all = ofm(14, struct.pack(">QQBBHHHIIIH2x", 0, 0, 0xff, 3, 0, 0, 0, 0xffffffff,
                                 0xffffffff, 0xffffffff, 0) + of_match)
fsr = struct.pack(">B3xII4xQQ", 0xff, 0xffffffff, 0xffffffff, 0, 0) + of_match
def mp(t, body=b""):
    return ofm(18, struct.pack(">HH4x", t, 0) + body)
frame = bytes.fromhex("000000000002000000000001080045000001c0000000004011000000a0000010a000002303900500008000")
out2 = struct.pack(">HHIH6x", 0, 16, 2, 0xffe5)
pkt_out = ofm(13, struct.pack(">IIH6x", 0xffffffff, 0xfffffffd, 16) + out2 + frame)
msgs = {
    "features": ofm(5), "get_config": ofm(7), "set_config": ofm(9, struct.pack(">HH", 0, 128)),
    "echo": ofm(2, b"hi"), "barrier": ofm(20), "role": ofm(24, struct.pack(">I4xQ", 2, 1)),
    "flow_mod": ovs_fm, "miss": miss, "delete": delete_all, "desc": mp(0), "flows": mp(1, fsr),
    "aggregate": mp(2, fsr), "tables": mp(3), "port_stats": mp(4, struct.pack(">I4x", 0xffffffff)),
    "port_desc": mp(13), "table_features": mp(12), "packet_out": pkt_out,
}
for m in msgs.values():
    put("openflow_msg", b"\x01\x40\x80\xc0" + m)
put("openflow_msg", b"\x01\x10\x50\xa0" + b"".join(msgs.values()))
put("openflow_msg", b"\x01\x08\x30\x90" + msgs["miss"] + msgs["flow_mod"] + msgs["flows"] + msgs["delete"] + msgs["barrier"])
put("openflow_msg", b"\x03\x00\x00\x00" + msgs["echo"])      # one byte at a time
put("openflow_msg", b"\x00\x20\x20\x20" + ofm(0, struct.pack(">HHI", 1, 8, 0x02), v=1))  # a 1.0-only HELLO
put("openflow_msg", b"\x00\x20\x20\x20" + ofm(0, struct.pack(">HHI", 1, 8, 0x12), v=6) + msgs["features"])
