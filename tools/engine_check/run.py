#!/usr/bin/env python3
"""Run each engine's own argument parsing and validation on mist's exports.

  python3 tools/engine_check/run.py --megatron-lm DIR --megatron-deepspeed DIR --deepspeed DIR \
      --torchtitan DIR [--mist build/mist] [--json out.json] [--only SUBSTRING] [--verbose]

Tunes and exports the jobs of corpus.py with mist (in a temporary folder), then runs every export
through its engine's code in a worker process per engine. One line per export; exit 0 when every
export is ACCEPTED, 1 otherwise, 0 with a message when no checkout is given (README.md)."""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

ENGINE_MODULES = {"megatron": "megatron_lm", "deepspeed": "deepspeed_engine", "torchtitan": "torchtitan_engine"}


def debian_packages():
    """torch and numpy come from Debian's python3-torch/python3-numpy; let any python3 3.11 see them."""
    d = "/usr/lib/python3/dist-packages"
    if os.path.isdir(d) and d not in sys.path:
        sys.path.append(d)


def plan_summary(p):
    st = p["stages"]
    zero = sorted({s.get("zero", 0) for s in st})
    ckpt = [s.get("ckpt_layers", 0) for s in st]
    off = {}
    for s in st:
        for k, v in (s.get("offload") or {}).items():
            if v:
                off[k] = max(off.get(k, 0), v)
    parts = [f"dp{p['dp']} tp{p['tp']} pp{p['pp']}" + (f" cp{p['cp']}" if p.get("cp", 1) > 1 else "")]
    if p.get("virtual_pipeline_stages", 1) > 1:
        parts.append(f"v{p['virtual_pipeline_stages']}")
    if p.get("ep", 1) > 1 or p.get("etp", 1) > 1:
        parts.append(f"ep{p.get('ep', 1)} etp{p.get('etp', 1)}")
    parts.append(f"mbs{p['micro_batch_size']} gas{p['grad_accum_steps']}")
    parts.append("zero" + "/".join(map(str, zero)))
    if any(ckpt):
        parts.append("ckpt" + ",".join(map(str, ckpt)))
    if p.get("recompute", "none") != "none":
        parts.append(f"recompute={p['recompute']}")
    if off:
        parts.append("offload " + ",".join(f"{k[:3]}={v:g}" for k, v in off.items()))
    return " ".join(parts)


def mist_run(mist, args, timeout):
    r = subprocess.run([mist] + args, capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def prepare(job, mist, work, timeout):
    """Tune (unless the job gives a plan) and export; the item a worker checks, or an error."""
    d = os.path.join(work, job["name"])
    os.makedirs(d, exist_ok=True)
    files = {}
    for k in ("cluster", "training"):
        files[k] = os.path.join(d, k + ".json")
        with open(files[k], "w") as f:
            json.dump(job[k], f)
    common = ["--model", job["model"], "--cluster", files["cluster"], "--training", files["training"]]
    plan_file = os.path.join(d, "plan.json")
    item = {"job": job["name"], "engine": job["engine"], "notes": []}
    if job["plan"]:
        with open(plan_file, "w") as f:
            json.dump(job["plan"], f)
        item["source"] = "plan"
    else:
        tune = ["tune"] + common + ["--engine", job["engine"]] + job.get("tune", [])
        pick = job.get("pick", 1)
        if pick == 1:
            rc, out, err = mist_run(mist, tune + ["--out", plan_file], timeout)
        else:  # the tuner's pick-th plan: its list's alternatives (the first plan is not among them)
            rc, out, err = mist_run(mist, tune + ["--top", str(pick), "--json"], timeout)
        if rc != 0:
            return {**item, "verdict": "MIST-ERROR", "message": f"mist tune exit {rc}: {err.strip()[-600:]}"}
        if pick > 1:
            alternatives = json.loads(out).get("alternatives", [])
            if len(alternatives) < pick - 1:
                return {**item, "verdict": "MIST-ERROR",
                        "message": f"mist tune listed {len(alternatives) + 1} plans; the job picks plan {pick}"}
            with open(plan_file, "w") as f:
                json.dump(alternatives[pick - 2]["plan"], f)
            item["notes"].append(f"plan {pick} of mist tune's list")
        item["source"] = "tune"
    export = ["export"] + common + ["--to", job["engine"]]
    ds_json = os.path.join(d, "ds_config.json")
    if job["engine"] == "deepspeed":
        export += ["--out", ds_json]
    rc, out, err = mist_run(mist, export + ["--plan", plan_file], timeout)
    if rc == 2 and out.strip().startswith("{"):  # refused: the nearest plan it can run is on stdout
        lines = err.strip().splitlines()
        cut = next((i for i, l in enumerate(lines) if l.startswith("The nearest plan")), len(lines))
        item["notes"].append("mist refused the corpus plan; exported its nearest: " +
                             "; ".join(l.strip() for l in lines[cut + 1:] if l.strip())[:400])
        with open(plan_file, "w") as f:
            f.write(out)
        rc, out, err = mist_run(mist, export + ["--plan", plan_file], timeout)
    if rc != 0:
        return {**item, "verdict": "MIST-ERROR", "message": f"mist export exit {rc}: {err.strip()[-600:]}"}
    with open(plan_file) as f:
        p = json.load(f)
    with open(os.path.join(d, "export.txt"), "w") as f:
        f.write(out)
    item.update({"plan": p, "summary": plan_summary(p), "export": out,
                 "mist_notes": [l[len("mist: note: "):] for l in err.splitlines() if l.startswith("mist: note: ")],
                 "world_size": job["cluster"]["nodes"] * job["cluster"]["gpus_per_node"],
                 "gpus_per_node": job["cluster"]["gpus_per_node"], "gpu": job["cluster"]["gpu"],
                 "model": job["model"], "files": d})
    return item


def worker(engine, items_file, out_file, roots):
    debian_packages()
    import importlib
    import stubs
    mod = importlib.import_module(ENGINE_MODULES[engine])
    with open(items_file) as f:
        items = json.load(f)
    if engine == "megatron":
        ctx = mod.setup(roots["megatron_lm"])
    elif engine == "deepspeed":
        import pydantic
        if int(pydantic.VERSION.split(".")[0]) < 2:
            raise SystemExit(f"DeepSpeed needs pydantic >= 2; this python3 has {pydantic.VERSION}")
        ctx = mod.setup(roots["megatron_deepspeed"], roots["deepspeed"])
    else:
        ctx = mod.setup(roots["torchtitan"])
    results = []
    for it in items:
        r = mod.check(it, ctx)
        results.append({"job": it["job"], **r})
    with open(out_file, "w") as f:
        json.dump({"results": results, "stubs": stubs.USED}, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--megatron-lm")
    ap.add_argument("--megatron-deepspeed")
    ap.add_argument("--deepspeed")
    ap.add_argument("--torchtitan")
    ap.add_argument("--mist", default=os.path.join(REPO, "build", "mist"))
    ap.add_argument("--json")
    ap.add_argument("--only", help="run only the jobs whose name contains this")
    ap.add_argument("--work", help="folder for the exports (default: a temporary one)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds for one mist command")
    ap.add_argument("--verbose", action="store_true", help="print each export and the stubs used")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--items", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    roots = {"megatron_lm": a.megatron_lm, "megatron_deepspeed": a.megatron_deepspeed,
             "deepspeed": a.deepspeed, "torchtitan": a.torchtitan}
    if a.worker:
        return worker(a.worker, a.items, a.out, roots)

    engines = []
    if a.megatron_lm:
        engines.append("megatron")
    if a.megatron_deepspeed and a.deepspeed:
        engines.append("deepspeed")
    elif a.megatron_deepspeed or a.deepspeed:
        print("engine_check: deepspeed needs both --megatron-deepspeed and --deepspeed; skipping it")
    if a.torchtitan:
        engines.append("torchtitan")
    if not engines:
        print("engine_check: SKIPPED: no engine checkout given (--megatron-lm, --megatron-deepspeed with "
              "--deepspeed, --torchtitan); see tools/engine_check/README.md")
        return 0
    for k, v in roots.items():
        if v and not os.path.isdir(v):
            print(f"engine_check: --{k.replace('_', '-')} {v}: not a folder")
            return 2
    if not os.access(a.mist, os.X_OK):
        print(f"engine_check: {a.mist}: no mist binary (build it, or give --mist)")
        return 2

    import corpus
    jobs = [j for j in corpus.JOBS if j["engine"] in engines and (not a.only or a.only in j["name"])]
    work = a.work or tempfile.mkdtemp(prefix="engine_check.")
    os.makedirs(work, exist_ok=True)
    vocab = _vocab(os.path.join(REPO, "data", "models.json"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as ex:
        items = list(ex.map(lambda j: prepare(j, a.mist, work, a.timeout), jobs))
    for it in items:
        if "export" in it:
            it["gpu_arch"] = corpus.GPU_ARCH.get(it["gpu"], 8)
            it["vocab_size"] = vocab.get(it["model"], 32000)

    results = {it["job"]: it for it in items}
    stubs_used = {}
    for engine in engines:
        todo = [it for it in items if it["engine"] == engine and "export" in it]
        if not todo:
            continue
        items_file = os.path.join(work, f"{engine}.items.json")
        out_file = os.path.join(work, f"{engine}.results.json")
        with open(items_file, "w") as f:
            json.dump(todo, f)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", engine, "--items", items_file, "--out", out_file]
        for k, v in roots.items():
            if v:
                cmd += [f"--{k.replace('_', '-')}", os.path.abspath(v)]
        log = os.path.join(work, f"{engine}.worker.log")
        with open(log, "w") as lf:
            rc = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT, cwd=work).returncode
        if rc != 0 or not os.path.exists(out_file):
            tail = open(log).read().strip().splitlines()[-1:] or [""]
            for it in todo:
                results[it["job"]].update(verdict="HARNESS-ERROR", message=f"{engine} worker exit {rc}: {tail[0]} "
                                          f"(log {log})")
            continue
        with open(out_file) as f:
            got = json.load(f)
        stubs_used.update(got["stubs"])
        for r in got["results"]:
            it = results[r["job"]]
            notes = it.get("notes", []) + r.pop("notes", [])
            it.update(r)
            it["notes"] = notes

    ok = True
    for it in items:
        v = it.get("verdict", "?")
        ok &= v == "ACCEPTED"
        line = f"{it['engine']:<10} {it['job']:<34} {it.get('summary', '-'):<44} {v}"
        if v != "ACCEPTED":
            line += f": {it.get('message', '')}"
            if it.get("where"):
                line += f" [{it['where']}; {it.get('step', '')}]"
        print(line)
        for n in it.get("notes", []):
            print(f"{'':<11} note: {n}")
        if a.verbose and it.get("export"):
            print("    " + it["export"].replace("\n", "\n    "))
    if a.verbose:
        print("stubs used:")
        for k, why in sorted(stubs_used.items()):
            print(f"  {k}: {why}")
    n_ok = sum(it.get("verdict") == "ACCEPTED" for it in items)
    print(f"engine_check: {n_ok} of {len(items)} exports accepted (exports in {work})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"results": [{k: v for k, v in it.items()} for it in items], "stubs": stubs_used}, f,
                      indent=1)
    return 0 if ok else 1


def _vocab(path):
    out = {}
    try:
        with open(path) as f:
            data = json.load(f)
        models = data if isinstance(data, list) else data.get("models", [])
        for m in models:
            out[m["name"]] = m["vocab_size"]
    except (OSError, ValueError, KeyError):
        pass
    return out


if __name__ == "__main__":
    sys.exit(main())
