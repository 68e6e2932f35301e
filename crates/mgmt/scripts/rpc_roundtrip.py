#!/usr/bin/env python3
"""RPC round trip of bdev_get_bdevs and nvmf_get_subsystems with N namespaces, through
SPDK's own Python client (pip install spdk), against `dpustack nvmf serve --empty -r SOCK`.

usage: rpc_roundtrip.py DPUSTACK_BIN [N ...]   (default N = 1 100 1000)
Prints, per N: median and min-max of 50 calls (20 for N >= 1000), and the same-run
baseline: the round trip of spdk_get_version (an empty method) on the same connection.
"""
import os, statistics, subprocess, sys, time
from spdk.rpc.client import JSONRPCClient

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
        p = subprocess.Popen([binary, "nvmf", "serve", "--empty", "--idle-spins", "0", "-r", sock, "--for", "600"],
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
            base = timed(c, "spdk_get_version", reps)
            for m in ("bdev_get_bdevs", "nvmf_get_subsystems"):
                med, lo, hi = timed(c, m, reps)
                print(f"N={n:5d} {m:20s} {med:8.3f} ms [{lo:.3f}-{hi:.3f}]   baseline spdk_get_version {base[0]:.3f} ms [{base[1]:.3f}-{base[2]:.3f}]")
        finally:
            p.kill()
            p.wait()

main()
