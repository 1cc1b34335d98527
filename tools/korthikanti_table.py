#!/usr/bin/env python3
"""Prints the table in docs/memory-model.md: mist's block_activation_bytes against Korthikanti et
al. 2022 (Table 2) for GPT blocks, fp16, 1-byte dropout masks, no flash attention.
Usage: tools/korthikanti_table.py [build/mist]  (standard library only)."""
import json, os, subprocess, sys, tempfile

mist = sys.argv[1] if len(sys.argv) > 1 else "build/mist"
cases = [(2048, 1, 2048, 16, 1), (2048, 4, 4096, 32, 1), (1024, 2, 5120, 40, 4),
         (2048, 1, 12288, 96, 8), (4096, 1, 8192, 64, 8), (512, 8, 1024, 16, 2)]

def formula(s, b, h, a, t, sp, sel):
    sbh, ash = s * b * h, a * s / h
    if sp and sel: return sbh * 34 / t
    if sp: return sbh * (34 / t + 5 * ash / t)
    if sel: return sbh * (10 + 24 / t)
    return sbh * (10 + 24 / t + 5 * ash / t)

def run(tmp, s, b, h, a, t, sp, sel):
    files = {
        "model": {"name": "gpt", "family": "gpt", "num_layers": 4, "hidden_size": h, "num_heads": a,
                  "ffn_hidden_size": 4 * h, "vocab_size": 51200, "max_position_embeddings": 2048,
                  "norm": "layernorm", "mlp": "gelu", "positions": "learned", "qkv_bias": True,
                  "linear_bias": True, "tie_word_embeddings": True},
        "cluster": {"gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": t},
        "training": {"global_batch_size": b, "seq_length": s, "precision": "fp16",
                     "flash_attention": False, "dropout": True, "grad_dtype": "fp32"},
        "plan": {"dp": 1, "tp": t, "pp": 1, "sequence_parallel": sp, "micro_batch_size": b,
                 "grad_accum_steps": 1, "recompute": "selective" if sel else "none",
                 "stages": [{"num_layers": 4}]},
    }
    args = [mist, "predict", "--json"]
    for k, v in files.items():
        p = os.path.join(tmp, k + ".json")
        with open(p, "w") as f: json.dump(v, f)
        args += ["--" + k, p]
    return json.loads(subprocess.check_output(args))["stages"][0]

with tempfile.TemporaryDirectory() as tmp:
    print("| s | b | h | a | t | technique | Korthikanti (MiB) | mist (MiB) | error |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (s, b, h, a, t) in cases:
        for sp in (False, True):
            for sel in (False, True):
                if sp and t == 1: continue
                st = run(tmp, s, b, h, a, t, sp, sel)
                ref = formula(s, b, h, a, t, sp, sel)
                got = st["block_activation_bytes"]
                name = ("TP+SP" if sp else ("TP" if t > 1 else "none")) + (" + selective" if sel else "")
                print(f"| {s} | {b} | {h} | {a} | {t} | {name} | {ref/2**20:.1f} | {got/2**20:.1f} | "
                      f"{100*(got-ref)/ref:+.2f}% |")
