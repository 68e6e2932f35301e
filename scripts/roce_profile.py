#!/usr/bin/env python3
"""Per-packet cost breakdown of the soft RoCE provider, without a PMU (issue 19).

    python3 scripts/roce_profile.py [--bin target/release/dpustack] [--out DIR] [--scale 1.0]
                                    [--cases write4k,write64k,lat2] [--no-callgrind] [--no-strace]

(`bash scripts/roce_profile.sh` builds the release binary first and runs this.)

For each case (RDMA WRITE 4 KiB and 64 KiB streams, the 2-byte write-lat ping-pong),
both ends in one process on 127.0.0.1 (client, the sender) and 127.0.0.2 (server):

1. valgrind callgrind, `--mode manual` (one thread per end, no poller threads, so the
   client thread is the sender's whole user-space cost and the server thread the
   receiver's), a bounded number of messages: instructions per data packet by
   function (self cost, grouped), from `--toggle-collect` of the two measuring loops.
2. the provider's own counters (logged by each device when it closes, with
   RUST_LOG=verbs::soft::counters=info), native runs in `--mode threaded` (what
   `bench roce` runs) and `--mode manual`: syscalls, empty receive calls, device
   and receive-batch mutex acquisitions, poller wake-ups, payload bytes copied and
   bytes run through the ICRC, per message; user and system CPU per message
   (getrusage of the child).
3. `strace -f -c` of the threaded run: every syscall per message, futex included
   (contended locks and thread wake-ups).
4. `perf record -e cpu-clock` (a timer-driven software event: no PMU needed),
   `--mode manual` and `--mode threaded`, native speed: where the *time* goes per
   packet, user space and kernel, by symbol (callgrind counts instructions, and
   under valgrind the CPU has no AVX-512: crc32fast and memcpy take other paths).

Prints markdown tables (and keeps the raw outputs in --out). Figures depend on
the machine and its load: callgrind's instruction counts do not (they are exact
counts for the code run, apart from the number of empty polls, which depends on
timing: that row says so).
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time

CASES = {
    # name: (perf test, size, messages natively, messages under callgrind)
    "write4k": ("write-bw", 4096, 100000, 20000),
    "write64k": ("write-bw", 65536, 10000, 2000),
    "lat2": ("write-lat", 2, 20000, 4000),
}

# function-name patterns -> category (first match wins), for self costs
CATEGORIES = [
    ("ICRC (crc32fast)", r"crc32fast|icrc"),
    ("payload copy (memcpy/memmove)", r"memmove|memcpy|__memcpy|__memmove"),
    ("syscall wrappers (libc, user side only)",
     r"^(sendmmsg|recvmmsg|poll|__poll|sched_yield|syscall|__libc_|__GI_|clock_gettime|__clock_gettime|__vdso|write|read)\b|\bsyscall\b"),
    ("clock (Instant::now, vDSO)", r"Instant::now|Timespec::now|clock_gettime|vdso"),
    ("locks/atomics (std sync, futex)", r"std::sys::sync|futex|Mutex|parking|pthread_mutex"),
    ("headers: build/parse (wire::roce)", r"wire::roce"),
    ("QP logic (requester/responder/completer)", r"verbs::soft::qp"),
    ("engine (classify, transmit, CQ)", r"verbs::soft::engine|verbs::soft::shared|verbs::soft::sgl|verbs::soft::mr|verbs::region"),
    ("driver (rounds, transmit batches)", r"verbs::soft::driver|verbs::soft::transmit|verbs::soft::device|verbs::soft::xdp"),
    ("verbs API (post_send, poll_cq)", r"verbs::soft::provider|verbs::device|verbs::provider|^verbs::"),
    ("netio batches (sendmmsg/recvmmsg set-up, GRO split)", r"netio::"),
    ("perf tool loop", r"verbs_tools"),
]

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def perf_cmd(binary, case, mode, n):
    test, size, _, _ = CASES[case]
    return [binary, "perf", test, "--loopback", "--mode", mode, "-s", str(size),
            "-n", str(n), "-t", "128", "--json"]


def device_counters(stderr):
    """The two devices' counter lines: {ip_suffix: {key: int}}."""
    out = {}
    for line in stderr.splitlines():
        line = ANSI.sub("", line)
        if "soft RoCE device closed" not in line:
            continue
        kv = dict(re.findall(r"(\w+)=(\S+)", line))
        dev = kv.get("dev", "?")
        out[dev] = {k: int(v) for k, v in kv.items() if v.isdigit()}
    return out


def roles(counters):
    """(client, server) counters: the client is x.x.x.1 of the pair."""
    devs = sorted(counters)
    if len(devs) != 2:
        raise SystemExit(f"expected two devices' counters, got {devs}: "
                         "was the binary built with the counters (issue 19)?")
    return counters[devs[0]], counters[devs[1]]


def data_packets(case, n):
    test, size, _, _ = CASES[case]
    per = max(1, -(-size // 4096))
    return n * per * (2 if test == "write-lat" else 1)


# ------------------------------------------------------------------ callgrind
def callgrind(binary, case, out, scale):
    n = max(1, int(CASES[case][3] * scale))
    prefix = os.path.join(out, f"cg.{case}")
    for f in os.listdir(out):
        if f.startswith(f"cg.{case}."):
            os.remove(os.path.join(out, f))
    toggles = ["--toggle-collect=verbs_tools::perf::perf_client*",
               "--toggle-collect=verbs_tools::perf::perf_server*"]
    cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes",
           f"--callgrind-out-file={prefix}.%p", *toggles] + perf_cmd(binary, case, "manual", n)
    env = dict(os.environ, RUST_LOG="verbs::soft::counters=info")
    r = sh(cmd, env=env)
    if r.returncode != 0:
        raise SystemExit(f"callgrind run failed: {' '.join(cmd)}\n{r.stderr[-3000:]}")
    cli, srv = roles(device_counters(r.stderr))
    files = sorted(f for f in os.listdir(out) if f.startswith(f"cg.{case}."))
    threads = []
    for f in files:
        path = os.path.join(out, f)
        a = sh(["callgrind_annotate", "--threshold=100", "--inclusive=no", path]).stdout
        by_fn = {}
        total = 0
        section = 0  # 1 = inside the "Ir file:function" list
        for line in a.splitlines():
            if re.match(r"^Ir\s+file:function", line):
                section = 1
                continue
            if section == 1 and line.startswith("-----"):
                continue
            if section == 1 and not line.strip():
                break
            m = re.match(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$", line)
            if not m:
                continue
            ir = int(m.group(1).replace(",", ""))
            name = m.group(2)
            if "PROGRAM TOTALS" in name:
                total = ir
                continue
            if section != 1 or ":" not in name:
                continue
            # "source file:function [object]": the file is where inlined code came
            # from; sum a function's lines over its files
            fn = re.sub(r"\s+\[[^\]]*\]$", "", name).strip()
            fn = fn.split(":", 1)[1] if not fn.startswith("???:") else fn[4:]
            by_fn[fn] = by_fn.get(fn, 0) + ir
        fns = [(ir, fn) for fn, ir in by_fn.items()]
        threads.append((f, total, fns))
    # the two threads with the most instructions are the two measuring loops; the
    # client's is the one whose functions include perf_client
    threads = [t for t in threads if t[1] > 0]
    if len(threads) < 2:
        raise SystemExit(f"callgrind collected fewer than two threads ({files}): "
                         "were perf_client/perf_server inlined away?")
    def is_client(t):
        return any("perf_client" in fn for _, fn in t[2])
    cl = [t for t in threads if is_client(t)]
    sv = [t for t in threads if not is_client(t)]
    return {"n": n, "client": cl[0], "server": max(sv, key=lambda t: t[1]),
            "counters": (cli, srv), "cmd": " ".join(cmd)}


def categorize(fns):
    cats = {c: 0 for c, _ in CATEGORIES}
    cats["other"] = 0
    for ir, fn in fns:
        for c, pat in CATEGORIES:
            if re.search(pat, fn):
                cats[c] += ir
                break
        else:
            cats["other"] += ir
    return cats


def report_callgrind(case, res, lines):
    test, size, _, _ = CASES[case]
    n = res["n"]
    cli, srv = res["counters"]
    lat = test == "write-lat"
    # data packets each way: the client's tx (sender) for a stream; for the
    # ping-pong both send one WRITE per iteration
    pk_c = cli["tx_packets"]
    pk_s = srv["rx_packets"] if not lat else srv["tx_packets"]
    lines.append(f"\n### callgrind, {case}: {n} messages of {size} B, `--mode manual`\n")
    lines.append(f"`{res['cmd']}`\n")
    lines.append(f"client (sender) sent {cli['tx_packets']} packets, received {cli['rx_packets']}; "
                 f"server (receiver) sent {srv['tx_packets']}, received {srv['rx_packets']}. "
                 f"Per packet = instructions / packets the side sent ({pk_c}) or received "
                 f"({srv['rx_packets']}); per message = / {n}.\n")
    ct, st = res["client"], res["server"]
    cc, sc = categorize(ct[2]), categorize(st[2])
    lines.append("| where (self cost) | sender instr/pkt | receiver instr/pkt | sender instr/msg | receiver instr/msg |")
    lines.append("|---|---|---|---|---|")
    rows = sorted(cc, key=lambda k: -(cc[k] + sc[k]))
    for k in rows:
        if cc[k] + sc[k] == 0:
            continue
        lines.append(f"| {k} | {cc[k] / pk_c:,.0f} | {sc[k] / srv['rx_packets']:,.0f} | "
                     f"{cc[k] / n:,.0f} | {sc[k] / n:,.0f} |")
    lines.append(f"| **total** | **{ct[1] / pk_c:,.0f}** | **{st[1] / srv['rx_packets']:,.0f}** | "
                 f"**{ct[1] / n:,.0f}** | **{st[1] / n:,.0f}** |")
    for side, t, pk in (("sender", ct, pk_c), ("receiver", st, srv["rx_packets"])):
        top = sorted(t[2], reverse=True)[:8]
        lines.append(f"\n{side} top functions (self instr/pkt): " + "; ".join(
            f"`{short(fn)}` {ir / pk:,.0f}" for ir, fn in top))
    empties = cli["recv_empty"] + srv["recv_empty"]
    lines.append(f"\nEmpty `recvmmsg` polls in this run: client {cli['recv_empty']}, server "
                 f"{srv['recv_empty']} ({empties / n:.1f} per message; under valgrind the threads "
                 "take turns, so this count, and the poll-loop rows, depend on timing).")


def short(fn):
    fn = re.sub(r"<[^<>]*>", "", fn)
    fn = re.sub(r"<[^<>]*>", "", fn)
    parts = fn.split("::")
    return "::".join(parts[-2:]) if len(parts) > 2 else fn


# ------------------------------------------------------------------ counters
def native(binary, case, mode, scale, out):
    n = max(1, int(CASES[case][2] * scale))
    cmd = perf_cmd(binary, case, mode, n)
    env = dict(os.environ, RUST_LOG="verbs::soft::counters=info")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    r = sh(cmd, env=env)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"run failed: {' '.join(cmd)}\n{r.stderr[-3000:]}")
    with open(os.path.join(out, f"native.{case}.{mode}.txt"), "w") as f:
        f.write(r.stdout + r.stderr)
    cli, srv = roles(device_counters(r.stderr))
    res = json.loads(r.stdout)
    return {"n": n, "cmd": " ".join(cmd), "cli": cli, "srv": srv, "res": res, "wall": wall,
            "user": after.ru_utime - before.ru_utime, "sys": after.ru_stime - before.ru_stime}


def report_native(case, runs, lines):
    test, size, _, _ = CASES[case]
    lines.append(f"\n### provider counters, {case} ({size} B), per message\n")
    for r in runs:
        lines.append(f"- `{r['cmd']}`: {r['n'] / r['wall']:,.0f} msg/s wall incl. set-up; "
                     f"result {perf_summary(r['res'])}")
    lines.append("")
    hdr = "| per message | " + " | ".join(
        f"{r['mode']} sender | {r['mode']} receiver" for r in runs) + " |"
    lines.append(hdr)
    lines.append("|---|" + "---|---|" * len(runs))

    def row(label, f):
        cells = []
        for r in runs:
            cells += [f(r, r["cli"]), f(r, r["srv"])]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    per = lambda key: (lambda r, c: f"{c[key] / r['n']:.2f}")
    row("packets sent", per("tx_packets"))
    row("packets received", per("rx_packets"))
    row("`sendmmsg` calls", per("send_calls"))
    row("`recvmmsg` calls", per("recv_calls"))
    row("... of which empty", per("recv_empty"))
    row("device mutex acquisitions", per("device_locks"))
    row("receive-batch mutex acquisitions", per("rx_locks"))
    row("poller wake-ups", per("poller_wakeups"))
    row("payload copies by the CPU (bytes copied / message size)",
        lambda r, c: f"{(c['tx_copy_bytes'] + c['rx_copy_bytes']) / (r['n'] * size):.2f}")
    row("ICRC passes (bytes / message size)",
        lambda r, c: f"{c['icrc_bytes'] / (r['n'] * size):.2f}")
    cpu = []
    for r in runs:
        cpu.append(f"{r['mode']}: user {r['user'] / r['n'] * 1e6:.2f} µs + system "
                   f"{r['sys'] / r['n'] * 1e6:.2f} µs per message (both ends, whole process, "
                   f"set-up included; system share {r['sys'] / max(1e-9, r['user'] + r['sys']):.0%})")
    lines.append("\nCPU (getrusage of the child): " + "; ".join(cpu))


def perf_summary(res):
    if res.get("lat"):
        return f"p50 one-way {res['lat']['p50_ns'] / 1e3:.2f} µs"
    return f"{res['bw'] / 1e6:,.0f} MB/s"


# ------------------------------------------------------------------ perf (cpu-clock)
PERF_HZ = 4999


def perf_sample(binary, case, mode, scale, out):
    n = max(1, int(CASES[case][2] * scale))
    data = os.path.join(out, f"perf.{case}.{mode}.data")
    cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(PERF_HZ), "-o", data, "--"] + \
        perf_cmd(binary, case, mode, n)
    env = dict(os.environ, RUST_LOG="verbs::soft::counters=info")
    r = sh(cmd, env=env)
    if r.returncode != 0:
        raise SystemExit(f"perf record failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    cli, srv = roles(device_counters(r.stderr))
    res = json.loads(r.stdout)
    sc = sh(["perf", "script", "-i", data, "-F", "comm,tid,ip,sym,dso"]).stdout
    # per thread: {sym: samples}, kernel samples
    threads = {}
    for line in sc.splitlines():
        m = re.match(r"^\s*(.*?)\s+(\d+)\s+[0-9a-f]+\s+(.*?)\s+\(([^)]*)\)\s*$", line)
        if not m:
            continue
        comm, tid, sym, dso = m.group(1), int(m.group(2)), m.group(3), m.group(4)
        t = threads.setdefault(tid, {"comm": comm, "syms": {}, "kernel": 0, "total": 0})
        kern = "kernel" in dso
        key = ("[k] " if kern else "") + (sym if sym and sym != "[unknown]" else os.path.basename(dso))
        t["syms"][key] = t["syms"].get(key, 0) + 1
        t["total"] += 1
        t["kernel"] += kern
    return {"n": n, "cmd": " ".join(cmd), "cli": cli, "srv": srv, "res": res, "threads": threads}


def report_perf(case, mode, r, lines):
    n, cli, srv = r["n"], r["cli"], r["srv"]
    th = sorted(r["threads"].items(), key=lambda kv: -kv[1]["total"])
    lines.append(f"\n`{r['cmd']}` ({perf_summary(r['res'])}; {PERF_HZ} Hz cpu-clock samples, "
                 f"µs = samples / {PERF_HZ} Hz; per message = / {n})\n")
    lines.append("| thread | CPU µs/msg | kernel share | top symbols (µs/msg) |")
    lines.append("|---|---|---|---|")
    for tid, t in th[:5]:
        if t["total"] < 10:
            continue
        us = lambda k: k / PERF_HZ * 1e6 / n
        top = sorted(t["syms"].items(), key=lambda kv: -kv[1])[:8]
        lines.append(f"| {t['comm']} ({tid}) | {us(t['total']):.2f} | {t['kernel'] / t['total']:.0%} | "
                     + "; ".join(f"`{short(k)}` {us(v):.2f}" for k, v in top) + " |")


# ------------------------------------------------------------------ strace
def strace(binary, case, scale, out):
    n = max(1, int(CASES[case][2] * scale / 10))
    path = os.path.join(out, f"strace.{case}.txt")
    cmd = ["strace", "-f", "-c", "-o", path] + perf_cmd(binary, case, "threaded", n)
    r = sh(cmd)
    if r.returncode != 0:
        raise SystemExit(f"strace run failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    calls = {}
    for line in open(path):
        m = re.match(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
        if m:
            calls[m.group(2)] = int(m.group(1))
    return n, " ".join(cmd), calls


def report_strace(case, res, lines):
    n, cmd, calls = res
    keep = ["sendmmsg", "recvmmsg", "poll", "futex", "sched_yield", "clock_nanosleep",
            "nanosleep", "write", "read"]
    lines.append(f"\n`{cmd}` (both ends, all threads; strace slows every syscall, so "
                 "polling counts grow): per message " + ", ".join(
                     f"{k} {calls.get(k, 0) / n:.2f}" for k in keep if k in calls))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/dpustack")
    ap.add_argument("--out", default="/tmp/roce_profile")
    ap.add_argument("--cases", default="write4k,write64k,lat2")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply message counts")
    ap.add_argument("--no-callgrind", action="store_true")
    ap.add_argument("--no-strace", action="store_true")
    ap.add_argument("--no-perf", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    lines = [f"## soft RoCE per-packet profile ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"load {os.getloadavg()[0]:.1f}, binary {a.bin})"]
    for case in a.cases.split(","):
        if case not in CASES:
            raise SystemExit(f"unknown case {case}; known: {','.join(CASES)}")
        runs = []
        for mode in ("threaded", "manual"):
            r = native(a.bin, case, mode, a.scale, a.out)
            r["mode"] = mode
            runs.append(r)
        report_native(case, runs, lines)
        if not a.no_perf:
            lines.append(f"\n### where the time goes, {case} (perf cpu-clock; main thread = client = sender, "
                         "the other measuring thread = server; `roce-dps_*` = poller threads)")
            for mode in ("manual", "threaded"):
                report_perf(case, mode, perf_sample(a.bin, case, mode, a.scale, a.out), lines)
        if not a.no_strace:
            report_strace(case, strace(a.bin, case, a.scale, a.out), lines)
        if not a.no_callgrind:
            report_callgrind(case, callgrind(a.bin, case, a.out, a.scale), lines)
        print("\n".join(lines), flush=True)
        lines = []


if __name__ == "__main__":
    main()
