#!/usr/bin/env python3
"""Compare two dpustack binaries' benchmark figures, interleaved in one session.

    python3 scripts/bench_compare.py OLD_BIN NEW_BIN [--areas roce,nvmf,flow,tse] [--rounds 3]

Each round runs `OLD bench AREA --json --runs 1` then `NEW bench AREA --json --runs 1`
(the order alternates every round so neither binary always runs on a warmer or quieter
machine). A figure's comparable number is its *ratio* to the baseline measured in the
same invocation (the machine is shared and noisy); raw values are shown too.

Noise is judged per figure from the spread of the OLD binary's own rounds: a NEW median
ratio is called worse only when it is below (or, for lower-is-better figures, above)
the OLD rounds' whole range by more than that range's width. Everything else is "same".
"""
import argparse
import json
import statistics
import subprocess
import sys


def run(binary, area):
    out = subprocess.run([binary, "bench", area, "--json", "--runs", "1"],
                         capture_output=True, text=True, check=True).stdout
    return {f["name"]: f for f in json.loads(out)["figures"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--areas", default="roce,nvmf,flow,tse")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    worse = 0
    for area in a.areas.split(","):
        rows = {}  # name -> {"old": [...], "new": [...], "better": ...}
        for r in range(a.rounds):
            order = [("old", a.old), ("new", a.new)]
            if r % 2:
                order.reverse()
            for tag, binary in order:
                for name, f in run(binary, area).items():
                    row = rows.setdefault(name, {"old": [], "new": [], "oldv": [], "newv": [],
                                                 "better": f.get("better", "higher"),
                                                 "unit": f.get("unit", "")})
                    ratio = f.get("ratio")
                    row[tag].append(ratio if ratio is not None else f["value"])
                    row[tag + "v"].append(f["value"])
        print(f"\n## bench {area}: {a.rounds} interleaved rounds (ratio to same-run baseline; median [min-max])")
        print(f"| figure | old ratio | new ratio | old value | new value | verdict |")
        print(f"|---|---|---|---|---|---|")
        for name, row in rows.items():
            if not row["old"] or not row["new"]:
                print(f"| {name} | {row['old']} | {row['new']} | | | only in one binary |")
                continue
            om, nm = statistics.median(row["old"]), statistics.median(row["new"])
            lo, hi = min(row["old"]), max(row["old"])
            width = hi - lo
            if row["better"] == "lower":
                bad = nm > hi + width
            else:
                bad = nm < lo - width
            verdict = "WORSE beyond noise" if bad else "same within noise"
            worse += bad
            fmt = lambda xs: f"{statistics.median(xs):.3g} [{min(xs):.3g}-{max(xs):.3g}]"
            print(f"| {name} | {fmt(row['old'])} | {fmt(row['new'])} | {fmt(row['oldv'])} {row['unit']} "
                  f"| {fmt(row['newv'])} {row['unit']} | {verdict} |")
    print(f"\n{worse} figure(s) worse beyond noise")
    return 0


if __name__ == "__main__":
    sys.exit(main())
