#!/usr/bin/env python3
"""Engine-thread CPU per operation: runs `BIN bench obj` for one workload group,
samples /proc/PID/task/*/stat every 50 ms, sums the last utime+stime seen of the
obj-tgt* and obj-net threads; ops = sum of the group's TCP figures × 1 s.
usage: scripts/bench_obj_cpu.py BIN GROUP (prints one JSON line)"""
import json, os, subprocess, sys, time, re
binary, group = sys.argv[1], sys.argv[2]
env = dict(os.environ, DPUSTACK_BENCH_OBJ_ONLY=group)
p = subprocess.Popen(["nice", binary, "bench", "obj", "--json", "--runs", "1", "--secs", "1"],
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
hz = os.sysconf("SC_CLK_TCK")
last = {}
pid = None
while p.poll() is None:
    try:
        if pid is None:
            # nice execs the binary: same pid
            pid = p.pid
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                st = open(f"/proc/{pid}/task/{tid}/stat").read()
            except OSError:
                continue
            name = st[st.index("(") + 1:st.rindex(")")]
            f = st[st.rindex(")") + 2:].split()
            if name.startswith("obj-tgt") or name == "obj-net":
                last[tid] = (name, (int(f[11]) + int(f[12])) / hz)
    except OSError:
        pass
    time.sleep(0.05)
out = json.loads(p.stdout.read())
ops = sum(f["value"] for f in out["figures"] if "RDMA" not in f["name"] and f["unit"] == "ops/s")
mb = sum(f["value"] for f in out["figures"] if "RDMA" not in f["name"] and f["unit"] == "MB/s" and "raw file" not in f["baseline_name"])
cpu = sum(v for _, v in last.values())
per = {}
for n, v in last.values():
    per[n] = per.get(n, 0) + v
print(json.dumps({"group": group, "ops": ops, "mib": mb, "cpu_s": cpu, "per_thread": per,
                  "us_per_op": (cpu / ops * 1e6) if ops else None,
                  "ms_per_mib": (cpu / mb * 1e3) if mb else None}))
