#!/usr/bin/env python3
"""Prints the block-time table of docs/validation.md from `mist validate --json`: per layer, the
forward+backward time predicted from its ops' profile against the layer's own measured time.
Usage: tools/time_validation_table.py [build/mist | validate.json]  (standard library only)."""
import json
import statistics
import subprocess
import sys

arg = sys.argv[1] if len(sys.argv) > 1 else "build/mist"
if arg.endswith(".json"):
    report = json.load(open(arg))
else:
    report = json.loads(subprocess.run([arg, "validate", "--json"], capture_output=True, text=True).stdout)

print("| layer | forward predicted / measured (ms) | backward predicted / measured (ms) | total error | op times from the profile |")
print("|---|---|---|---|---|")
errors = []
for c in report["cases"]:
    t, s = c["time"], c["time"]["op_sources"]
    e = c["terms"]["block_time"]["error"]
    errors.append(abs(e))
    print(f"| {c['name']} | {1e3 * t['predicted_forward_s']:.2f} / {1e3 * t['measured_forward_s']:.2f} | "
          f"{1e3 * t['predicted_backward_s']:.2f} / {1e3 * t['measured_backward_s']:.2f} | {100 * e:+.1f}% | "
          f"{s['exact']} of {s['exact'] + s['scaled'] + s['analytical']} |")
signed = [c["terms"]["block_time"]["error"] for c in report["cases"]]
print()
print(f"layers {len(errors)}, median |error| {100 * statistics.median(errors):.1f}%, "
      f"max |error| {100 * max(errors):.1f}%, median signed error {100 * statistics.median(signed):+.1f}%")
