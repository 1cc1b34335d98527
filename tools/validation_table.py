#!/usr/bin/env python3
"""Prints the results table of docs/validation.md from `mist validate --json`: per layer, the saved
activations and the peak, predicted against measured, and the known gap that explains a peak.
Usage: tools/validation_table.py [build/mist | validate.json]  (standard library only)."""
import json, subprocess, sys

arg = sys.argv[1] if len(sys.argv) > 1 else "build/mist"
if arg.endswith(".json"):
    report = json.load(open(arg))
else:
    run = subprocess.run([arg, "validate", "--json"], capture_output=True, text=True)
    report = json.loads(run.stdout)

MiB = 1024.0 * 1024.0
print("| layer | saved predicted / measured (MiB) | error | peak predicted / measured (MiB) | error | known gap |")
print("|---|---|---|---|---|---|")
for c in report["cases"]:
    t = c["terms"]
    s, p = t["saved"], t["peak"]
    gap = p.get("known_gap")
    gap_text = f"{gap['name']} ({100 * gap['error_with_gap']:+.2f}% with it)" if gap else ""
    print(f"| {c['name']} | {s['predicted_bytes'] / MiB:.3f} / {s['measured_bytes'] / MiB:.3f} | "
          f"{100 * s['error']:+.2f}% | {p['predicted_bytes'] / MiB:.3f} / {p['measured_bytes'] / MiB:.3f} | "
          f"{100 * p['error']:+.2f}% | {gap_text} |")
print()
print("| term | bound | layers | max abs error | median abs error | beyond the bound, explained | status |")
print("|---|---|---|---|---|---|---|")
for s in report["summary"]:
    bound = "reported" if s["bound"] < 0 else ("exact" if s["bound"] == 0 else f"±{100 * s['bound']:g}%")
    status = "-" if s["bound"] < 0 else ("ok" if s["ok"] else "FAIL")
    print(f"| {s['term']} | {bound} | {s['cases']} | {100 * s['max_abs_error']:.2f}% | "
          f"{100 * s['median_abs_error']:.2f}% | {s['explained_by_known_gap']} | {status} |")
