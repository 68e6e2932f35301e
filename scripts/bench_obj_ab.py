#!/usr/bin/env python3
"""A/B of `dpustack bench obj` (docs/obj.md "Performance"): rounds alternate the order of the two binaries;
rows keyed by figure name without its parenthetical (p50/p99 change per run).
usage: scripts/bench_obj_ab.py A_BIN B_BIN ROUNDS OUT_JSON (last column: per-round B÷A of the value)"""
import json, os, re, statistics, subprocess, sys, time
a, b, rounds, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
res = {"A": [], "B": [], "load": []}
for r in range(rounds):
    order = [("A", a), ("B", b)] if r % 2 == 0 else [("B", b), ("A", a)]
    for tag, binary in order:
        load = os.getloadavg()[0]
        t = time.time()
        p = subprocess.run(["nice", binary, "bench", "obj", "--json", "--runs", "1", "--secs", "1"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            print(tag, "failed", p.stderr[-2000:], file=sys.stderr); sys.exit(1)
        figs = {re.sub(r"\s*\(.*\)$", "", f["name"]) + " ÷ " + re.sub(r"\s*\(.*\)$", "", f["baseline_name"]): f
                for f in json.loads(p.stdout)["figures"]}
        res[tag].append(figs)
        res["load"].append((tag, r, round(load, 1), round(time.time() - t, 1)))
        print(tag, r, "load", round(load, 1), "secs", round(time.time() - t, 1), flush=True)
json.dump(res, open(out, "w"))
def fmt(v):
    return f"{v:.3g}" if abs(v) < 1000 else f"{v/1000:.1f} k"
print("| row | A value | B value | A ratio | B ratio | B÷A per round |")
print("|---|---|---|---|---|---|")
names = list(dict.fromkeys(n for tag in ("A", "B") for x in res[tag] for n in x))
for name in names:
    row = []
    for tag in ("A", "B"):
        vs = [x[name]["value"] for x in res[tag] if name in x]
        rs = [x[name].get("ratio") for x in res[tag] if name in x and x[name].get("ratio") is not None]
        row.append((vs, rs))
    (av, ar), (bv, br) = row
    def ms(v):
        return f"{fmt(statistics.median(v))} [{fmt(min(v))}–{fmt(max(v))}]" if v else "-"
    pv = [y[name]["value"] / x[name]["value"] for x, y in zip(res["A"], res["B"])
          if name in x and name in y and x[name]["value"] > 0]
    pm = f"{statistics.median(pv):.2f} [{min(pv):.2f}–{max(pv):.2f}]" if pv else "-"
    unit = next(x[name].get("unit", "") for tag in ("A", "B") for x in res[tag] if name in x)
    print(f"| {name} ({unit}) | {ms(av)} | {ms(bv)} | {ms(ar)} | {ms(br)} | {pm} |")
print("loads:", res["load"])
