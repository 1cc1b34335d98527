#!/usr/bin/env python3
"""EngineCheck.CorpusPlansAreWhatTheirEnginesRun: every plan tools/engine_check/corpus.py writes is one
its engine runs as written. mist refuses a plan its engine cannot run and the harness then checks
the engine's fastest plan instead of the one the job was written to reach (2026-12-04: 13 written
DeepSpeed and torchtitan plans had drifted so). Needs no engine checkout: only build/mist export.

Usage: corpus_test.py --mist build/mist --source SOURCE_DIR"""
import argparse, json, os, subprocess, sys, tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--mist", required=True)
ap.add_argument("--source", required=True)
a = ap.parse_args()
sys.path.insert(0, os.path.join(a.source, "tools", "engine_check"))
import corpus  # noqa: E402

work = tempfile.mkdtemp(prefix="engine-check-corpus-")
written = [j for j in corpus.JOBS if j["plan"]]
failed = []
for j in written:
    files = {}
    for k in ("cluster", "training", "plan"):
        files[k] = os.path.join(work, f"{j['name']}.{k}.json")
        with open(files[k], "w") as f:
            json.dump(j[k], f)
    r = subprocess.run([a.mist, "export", "--to", j["engine"], "--model", j["model"], "--cluster", files["cluster"],
                        "--training", files["training"], "--plan", files["plan"]],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[0]
        failed.append(f"{j['name']} ({j['engine']}): {why}")
names = {j["name"] for j in corpus.JOBS}
if len(names) != len(corpus.JOBS):
    failed.append("job names are not unique")
if len(written) < 20 or len(corpus.JOBS) < 30:
    failed.append(f"the corpus shrank: {len(corpus.JOBS)} jobs, {len(written)} written")
for f in failed:
    print("FAILED:", f)
print(f"{len(written) - len(failed)} of {len(written)} written plans exported as written")
sys.exit(1 if failed else 0)
