#!/usr/bin/env python3
"""Predicted value of the Mist space over the baselines on the Mist paper's weak-scaling grid.

Runs `mist tune --json --space S` for S in mist, megatron, deepspeed on every job of the grid
(reference/mist.md §13: GPT and Llama 1.3B/2.7B/7B/13B/22B on 1x2, 1x4, 1x8, 2x8, 4x8 GPUs with
global batch 32..512; L4 with sequence 2048, A100-SXM4-40GB with 4096; flash attention, fp16 as the
artifact trains) and prints a markdown table: per job the predicted iteration time of each space,
the speedup of mist over each baseline ("no fit" where a space finds nothing that fits), and the
geometric and arithmetic mean speedups. These are predictions of mist's own model, not
measurements.

usage: tools/weak_scaling_table.py [--mist build/mist] [--gpus L4,A100] [--families gpt,llama]
                                   [--sizes 1.3b,...] [--raw results.json] [--from-raw results.json]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

# (size, nodes, gpus per node, global batch): the diagonal of the paper's weak-scaling grid.
GRID = [("1.3b", 1, 2, 32), ("2.7b", 1, 4, 64), ("7b", 1, 8, 128), ("13b", 2, 8, 256), ("22b", 4, 8, 512)]
GPUS = {"L4": ("L4-24GB", 2048), "A100": ("A100-SXM4-40GB", 4096)}
# "engine:megatron" is `--engine megatron`: every plan Megatron-LM can run (issue 6's gap), as
# opposed to the `megatron` space, what a Megatron-LM user sweeps by hand.
SPACES = ["mist", "megatron", "deepspeed", "engine:megatron"]
BASES = SPACES[1:]


def layout_text(plan):
    stages = plan["stages"]
    text = "dp{} tp{} pp{} b{} G{}".format(plan["dp"], plan["tp"], plan["pp"], plan["micro_batch_size"],
                                          plan["grad_accum_steps"])
    if plan.get("virtual_pipeline_stages", 1) > 1:
        text += " v{}".format(plan["virtual_pipeline_stages"])
    if plan.get("recompute", "none") != "none":
        text += " " + plan["recompute"]
    if len({s["num_layers"] for s in stages}) > 1:
        text += "; layers " + "/".join(str(s["num_layers"]) for s in stages)
    ckpt = [s.get("ckpt_layers", 0) for s in stages]
    if any(ckpt):
        text += "; ckpt " + "/".join(map(str, ckpt))
    zero = sorted({s.get("zero", 0) for s in stages})
    if zero != [0]:
        text += "; ZeRO " + "/".join(map(str, zero))
    off = [s.get("offload", {}) for s in stages]
    if any(any(v for v in o.values()) for o in off):
        text += "; offload"
    return text


def run_tune(mist, model, gpu, nodes, per_node, gbs, seq, space, tmp):
    cluster = os.path.join(tmp, "cluster.json")
    training = os.path.join(tmp, "training.json")
    with open(cluster, "w") as f:
        json.dump({"gpu": gpu, "nodes": nodes, "gpus_per_node": per_node}, f)
    with open(training, "w") as f:
        json.dump({"global_batch_size": gbs, "seq_length": seq, "precision": "fp16", "optimizer": "adamw",
                   "flash_attention": True}, f)
    start = time.monotonic()
    which = ["--engine", space.split(":", 1)[1]] if space.startswith("engine:") else ["--space", space]
    proc = subprocess.run([mist, "tune", "--model", model, "--cluster", cluster, "--training", training, *which,
                           "--top", "1", "--json"], capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode == 3:
        return {"fits": False, "wall_s": wall}
    if proc.returncode != 0:
        sys.exit("mist tune failed ({}) for {} {} on {}x{}: {}".format(proc.returncode, model, space, nodes, per_node,
                                                                    proc.stderr.strip()))
    out = json.loads(proc.stdout)
    return {"fits": True, "wall_s": wall, "iteration_time_s": out["prediction"]["iteration_time_s"],
            "layout": layout_text(out["plan"])}


def fmt_time(r):
    return "{:.2f} s".format(r["iteration_time_s"]) if r["fits"] else "no fit"


def table(rows):
    bases = [b for b in BASES if all(b in r for r in rows)]
    out = ["| GPU | model | GPUs | GBS | s | mist | " + " | ".join(bases) + " | " +
           " | ".join("vs " + b for b in bases) + " | mist's plan | tuning s (" + "/".join(["mist"] + bases) + ") |",
           "|---" * (7 + 2 * len(bases)) + "|"]
    for r in rows:
        sp = []
        for base in bases:
            if r["mist"]["fits"] and r[base]["fits"]:
                sp.append("{:.2f}x".format(r[base]["iteration_time_s"] / r["mist"]["iteration_time_s"]))
            else:
                sp.append("—")
        out.append("| " + " | ".join(str(x) for x in [r["gpu"], r["model"], r["gpus"], r["gbs"], r["seq"],
                                                       fmt_time(r["mist"])] + [fmt_time(r[b]) for b in bases] + sp +
                                     [r["mist"].get("layout", "—"),
                                      "/".join("{:.1f}".format(r[s]["wall_s"]) for s in ["mist"] + bases)]) + " |")
    out.append("")
    for base in bases:
        for gpu in sorted({r["gpu"] for r in rows}) + ["all"]:
            sub = [r for r in rows if gpu in ("all", r["gpu"])]
            s = [r[base]["iteration_time_s"] / r["mist"]["iteration_time_s"]
                 for r in sub if r["mist"]["fits"] and r[base]["fits"]]
            nofit = sum(1 for r in sub if r["mist"]["fits"] and not r[base]["fits"])
            if not s:
                out.append("- mist over {} on {}: no job where both fit ({} where only mist fits)".format(base, gpu, nofit))
                continue
            geo = math.exp(sum(math.log(x) for x in s) / len(s))
            out.append("- mist over {} on {}: geometric mean {:.3f}x, arithmetic mean {:.3f}x, max {:.3f}x over {} jobs; "
                       "{} more where only mist fits".format(base, gpu, geo, sum(s) / len(s), max(s), len(s), nofit))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mist", default=os.path.join(os.path.dirname(__file__), "..", "build", "mist"))
    ap.add_argument("--gpus", default="L4,A100")
    ap.add_argument("--families", default="gpt,llama")
    ap.add_argument("--sizes", default=",".join(g[0] for g in GRID))
    ap.add_argument("--raw", help="also write the raw results as JSON here")
    ap.add_argument("--from-raw", help="format a table from a file --raw wrote, without running mist")
    a = ap.parse_args()
    if a.from_raw:
        with open(a.from_raw) as f:
            print(table(json.load(f)))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for gpu_key in a.gpus.split(","):
            gpu, seq = GPUS[gpu_key]
            for family in a.families.split(","):
                for size, nodes, per_node, gbs in GRID:
                    if size not in a.sizes.split(","):
                        continue
                    model = "mist-{}-{}".format(family, size)
                    row = {"gpu": gpu, "model": model, "gpus": nodes * per_node, "gbs": gbs, "seq": seq}
                    for space in SPACES:
                        row[space] = run_tune(a.mist, model, gpu, nodes, per_node, gbs, seq, space, tmp)
                    print("{} {} done: {}".format(gpu, model, ", ".join(
                        "{} {}".format(s, fmt_time(row[s])) for s in SPACES)), file=sys.stderr, flush=True)
                    rows.append(row)
    if a.raw:
        with open(a.raw, "w") as f:
            json.dump(rows, f, indent=1)
    print(table(rows))


if __name__ == "__main__":
    main()
