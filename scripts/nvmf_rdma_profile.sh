#!/bin/bash
# Where the time of NVMe/RDMA goes on the loopback (docs/nvmf.md, "NVMe/RDMA: where the
# time goes"): a target (`nvmf serve`, null bdev, soft RoCE on 127.0.0.91) and a host
# (`nvme perf`, soft RoCE on 127.0.0.92) in two processes; for each, CPU time, context
# switches and the syscalls that matter (sendmmsg, recvmmsg, sched_yield, nanosleep,
# futex, poll) counted by perf's tracepoints, per I/O. Needs root and perf.
#
#   scripts/nvmf_rdma_profile.sh [BIN] [SECS]      # BIN: a release dpustack (default target/release/dpustack)
#
# Each workload: 4 KiB randread qd 32, 128 KiB seq read qd 8. Prints one block per
# workload: IOPS, then per process CPU ms per 1000 I/Os and events per I/O.
set -euo pipefail
BIN=${1:-target/release/dpustack}
SECS=${2:-3}
EV=task-clock,context-switches,syscalls:sys_enter_sendmmsg,syscalls:sys_enter_recvmmsg,syscalls:sys_enter_sched_yield,syscalls:sys_enter_clock_nanosleep,syscalls:sys_enter_futex,syscalls:sys_enter_poll
tmp=$(mktemp -d)
trap 'kill $SP 2>/dev/null || true; rm -rf "$tmp"' EXIT
"$BIN" nvmf serve --listen rdma://127.0.0.91:4420 --bdev null:4G --no-rpc >"$tmp/srv.log" 2>&1 &
SP=$!
sleep 1
for w in "randread 4096 32" "read 131072 8"; do
    set -- $w
    perf stat -x, -e "$EV" -o "$tmp/tgt.csv" -p "$SP" -- sleep $((SECS + 1)) &
    PS=$!
    perf stat -x, -e "$EV" -o "$tmp/host.csv" \
        "$BIN" nvme perf -a rdma://127.0.0.91:4420 --host-traddr 127.0.0.92 \
        -q "$3" -o "$2" -w "$1" -t "$SECS" >"$tmp/perf.txt" 2>&1
    wait $PS || true
    python3 - "$tmp" "$SECS" <<'EOF'
import re, sys
d, secs = sys.argv[1], float(sys.argv[2])
line = open(f"{d}/perf.txt").read().strip().splitlines()[-1]
print(line)
iops = float(re.search(r"(\d+) IOPS", line).group(1))
ios = iops * secs
for who in ("tgt", "host"):
    ev = {}
    for l in open(f"{d}/{who}.csv"):
        f = l.strip().split(",")
        if len(f) > 3 and f[0] and f[0][0].isdigit():
            ev[f[2].replace("syscalls:sys_enter_", "")] = float(f[0])
    cpu = ev.pop("task-clock", 0.0)  # ms
    per = "  ".join(f"{k} {v / ios:.2f}" for k, v in ev.items())
    print(f"  {who:4}: CPU {cpu:.0f} ms ({cpu / (ios / 1000):.1f} ms per 1000 I/Os, whole run incl. warm-up)  per I/O: {per}")
EOF
done
