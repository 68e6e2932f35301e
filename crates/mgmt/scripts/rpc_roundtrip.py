#!/usr/bin/env python3
"""RPC round trip of bdev_get_bdevs and nvmf_get_subsystems with N namespaces, through
SPDK's own Python client (pip install spdk), against `dpustack nvmf serve --empty -r SOCK`.

usage: rpc_roundtrip.py DPUSTACK_BIN [N ...]   (default N = 1 100 1000)
Prints, per N: median and min-max of 50 calls (20 for N >= 1000), and the same-run
baseline: the round trip of spdk_get_version (an empty method) on the same connection.
Two clients: SPDK's JSONRPCClient (what rpc.py users see; it reads 4 KiB at a time
and re-parses its whole buffer after each read, so large answers cost it time
quadratic in their size), and a raw socket that reads 1 MiB at a time and parses
once the answer is complete (closer to the server's own cost). Response sizes too.
"""
import json, os, socket, statistics, subprocess, sys, time
from spdk.rpc.client import JSONRPCClient

class Raw:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.id = 0
        self.size = 0
    def call(self, method):
        self.id += 1
        self.s.sendall(json.dumps({"jsonrpc": "2.0", "id": self.id, "method": method}).encode())
        buf = b""
        while True:
            d = self.s.recv(1 << 20)
            if not d:
                raise RuntimeError("closed")
            buf += d
            if buf.rstrip().endswith(b"}"):
                try:
                    v = json.loads(buf)
                    self.size = len(buf)
                    return v
                except ValueError:
                    pass

def timed(c, method, n):
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        c.call(method)
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts), min(ts), max(ts)

def main():
    binary = sys.argv[1]
    counts = [int(x) for x in sys.argv[2:]] or [1, 100, 1000]
    for n in counts:
        sock = f"/tmp/dpustack-rt-{os.getpid()}-{n}.sock"
        p = subprocess.Popen([binary, "nvmf", "serve", "--empty", "--idle-spins", "0", "-r", sock, "--for", "600", "--metrics-listen", "0"],
                             stdout=subprocess.DEVNULL)
        try:
            for _ in range(300):
                if os.path.exists(sock):
                    break
                time.sleep(0.05)
            c = JSONRPCClient(sock, timeout=120)
            c.call("nvmf_create_transport", {"trtype": "TCP"})
            nqn = "nqn.2016-06.io.spdk:rt"
            c.call("nvmf_create_subsystem", {"nqn": nqn, "allow_any_host": True, "max_namespaces": max(n, 1)})
            for i in range(n):
                c.call("bdev_null_create", {"name": f"Null{i}", "num_blocks": 2048, "block_size": 512})
                c.call("nvmf_subsystem_add_ns", {"nqn": nqn, "namespace": {"bdev_name": f"Null{i}"}})
            reps = 20 if n >= 1000 else 50
            raw = Raw(sock)
            for name, cl in (("spdk client", c), ("raw socket ", raw)):
                base = timed(cl, "spdk_get_version", reps)
                for m in ("bdev_get_bdevs", "nvmf_get_subsystems"):
                    med, lo, hi = timed(cl, m, reps)
                    size = f" {raw.size/1024:7.1f} KiB" if cl is raw else ""
                    print(f"N={n:5d} {name} {m:20s} {med:8.3f} ms [{lo:.3f}-{hi:.3f}]{size}   baseline spdk_get_version {base[0]:.3f} ms [{base[1]:.3f}-{base[2]:.3f}]")
        finally:
            p.kill()
            p.wait()

main()
