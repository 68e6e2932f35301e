#!/usr/bin/env python3
"""Engine-thread CPU per operation: runs `BIN bench obj` for one workload group,
samples /proc/PID/task/*/schedstat (on-CPU time in ns; the 10 ms ticks of
/proc/PID/task/*/stat were too coarse for the few hundredths of a second a
loaded machine gives a 1 s run) every 50 ms, sums the last value seen of the
obj-tgt* and obj-net threads (obj-rdma's and all other threads' — the
client and the baselines — shown apart as obj-rdma and other); ops = sum of the group's TCP figures × the run time.
usage: scripts/bench_obj_cpu.py BIN GROUP [SECS] (prints one JSON line; SECS: per phase, default 1)"""
import json, os, subprocess, sys, time, re
binary, group = sys.argv[1], sys.argv[2]
secs = sys.argv[3] if len(sys.argv) > 3 else "1"
env = dict(os.environ, DPUSTACK_BENCH_OBJ_ONLY=group)
p = subprocess.Popen(["nice", binary, "bench", "obj", "--json", "--runs", "1", "--secs", secs],
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
last = {}
pid = None
while p.poll() is None:
    try:
        if pid is None:
            # nice execs the binary: same pid
            pid = p.pid
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
                ns = int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            if not (name.startswith("obj-tgt") or name in ("obj-net", "obj-rdma")):
                name = "other"  # the client (main thread), baselines' threads
            last[tid] = (name, ns / 1e9)
    except OSError:
        pass
    time.sleep(0.05)
out = json.loads(p.stdout.read())
# one figure per phase (the extra rows against other baselines repeat a phase's value)
main = [f for f in out["figures"] if "RDMA" not in f["name"]
        and f["baseline_name"].startswith(("NVMe/TCP", "raw TCP"))]
ops = sum(f["value"] for f in main if f["unit"] == "ops/s") * float(secs)
mb = sum(f["value"] for f in main if f["unit"] == "MB/s") * float(secs)
# obj-rdma (the RDMA poller, idle in the TCP phases) is reported, not counted
cpu = sum(v for n, v in last.values() if n not in ("obj-rdma", "other"))
per = {}
for n, v in last.values():
    per[n] = per.get(n, 0) + v
print(json.dumps({"group": group, "ops": ops, "mib": mb, "cpu_s": cpu, "per_thread": per,
                  "us_per_op": (cpu / ops * 1e6) if ops else None,
                  "ms_per_mib": (cpu / mb * 1e3) if mb else None}))
