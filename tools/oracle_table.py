#!/usr/bin/env python3
"""The per-job table of the tuner's optimality check (tests/tuner/oracle_test.cpp) for docs/tuner.md.

Runs the test binary's TunerOracle test with MIST_ORACLE_TABLE set, which makes it write one row per
job (hierarchical and exhaustive iteration time, the gap, and for the baseline spaces the value of
an independent enumeration with `mist predict`'s functions), and prints a markdown table and a
summary. The test's own assertions (gap within 1%) still apply; a failure is reported.

usage: tools/oracle_table.py [--tests build/tests/mist_tuner_tests] [--from-tsv rows.tsv]
"""
import argparse
import csv
import os
import subprocess
import sys
import tempfile

# What the test writes per job (tests/tuner/oracle_test.cpp).
COLUMNS = ["job", "space", "gpus", "hier_s", "exh_s", "gap_pct", "brute_s", "hier_time_s", "exh_time_s", "settings",
           "plan"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", default=os.path.join(os.path.dirname(__file__), "..", "build", "tests",
                                                    "mist_tuner_tests"))
    ap.add_argument("--from-tsv", help="format rows the test already wrote (MIST_ORACLE_TABLE) without running it")
    a = ap.parse_args()
    if a.from_tsv:
        with open(a.from_tsv) as f:
            print_table(list(csv.DictReader(f, fieldnames=COLUMNS, delimiter="\t")))
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "oracle.tsv")
        env = dict(os.environ, MIST_ORACLE_TABLE=path)
        proc = subprocess.run([a.tests, "--gtest_filter=*TunerOracle.*"], env=env, capture_output=True, text=True)
        if not os.path.exists(path):
            sys.exit("the test wrote no table:\n" + proc.stdout[-3000:] + proc.stderr[-3000:])
        with open(path) as f:
            rows = list(csv.DictReader(f, fieldnames=COLUMNS, delimiter="\t"))
    print_table(rows)
    if proc.returncode != 0:
        print("\nthe test FAILED:\n" + proc.stdout[-3000:], file=sys.stderr)
        sys.exit(1)


def print_table(rows):
    print("| job | space | hierarchical | exhaustive | gap | enumeration (baselines) | time hier. / exh. | "
          "settings costed | best plan |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        brute = "—" if r["brute_s"] == "-" else "{:.4f} s".format(float(r["brute_s"]))
        print("| {} | {} | {:.4f} s | {:.4f} s | {:.3f}% | {} | {:.2f} s / {:.2f} s | {} | {} |".format(
            r["job"], r["space"], float(r["hier_s"]), float(r["exh_s"]), float(r["gap_pct"]), brute,
            float(r["hier_time_s"]), float(r["exh_time_s"]), r["settings"], r["plan"]))
    gaps = [float(r["gap_pct"]) for r in rows]
    spaces = sorted({r["space"].split("/")[0] for r in rows})
    print()
    print("{} jobs ({}); gap max {:.3f}%, mean {:.3f}%; {} at 0; search time hierarchical {:.1f} s, "
          "exhaustive {:.1f} s in all.".format(
              len(rows), ", ".join(spaces), max(gaps), sum(gaps) / len(gaps), sum(1 for g in gaps if abs(g) < 1e-6),
              sum(float(r["hier_time_s"]) for r in rows), sum(float(r["exh_time_s"]) for r in rows)))


if __name__ == "__main__":
    main()
