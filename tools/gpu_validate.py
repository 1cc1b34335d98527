#!/usr/bin/env python3
"""Real training steps on one GPU, to check mist's memory and time predictions (issue 15, part 5).

For a grid of Llama-shaped models (decoder blocks as torchtitan writes them: RMSNorm in fp32,
separate wq/wk/wv, rotary in fp32, repeat_kv, SDPA flash attention, SwiGLU w1/w3/w2; embedding,
final norm, LM head and F.cross_entropy), wrapped as torchtitan wraps them (each block and the
whole model in a 1-rank FSDP2 `fully_shard`, MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32), AdamW), it runs training steps and records, per configuration:
torch.cuda.max_memory_allocated and max_memory_reserved over every step (the run's peak, as
torchtitan reports it), the median step time after warm-up, with the torch, CUDA and driver
versions. The grid: micro-batch, sequence, hidden size, recompute none / selective (torchtitan's
op-level policy: the outputs of SDPA and of every other matmul kept) / full (per block), and CPU
offload of parameters, gradients and optimizer states (FSDP2's CPUOffloadPolicy).

Each configuration is written as one JSON line to OUT/gpu_validate.jsonl as soon as it is measured,
with the mist inputs (model, training, plan) that describe it, so that a run cut short keeps
what it measured. PYTORCH_CUDA_ALLOC_CONF is left as found and recorded (torchtitan's launcher sets
expandable_segments:True; --expandable sets it before CUDA starts).

    python3 tools/gpu_validate.py --out $OUT --minutes 8            # on the GPU machine
    python3 tools/gpu_validate.py --compare data/measured/h200_gpu_validate.jsonl --mist build/mist

--compare runs `mist predict --engine torchtitan` on every measured line and prints the errors of
the allocated and reserved peaks and of the step time (docs/validation.md keeps the table).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# hidden, heads, kv heads, ffn, layers; vocabulary 32768 for all (a multiple of 128, as torchtitan pads).
MODELS = {
    "h1024": (1024, 8, 2, 3584, 4),
    "h2048": (2048, 16, 4, 5632, 4),
    "h4096": (4096, 32, 8, 14336, 2),
}
VOCAB = 32768
# model, seq, micro-batch, recompute, offload
GRID = [
    ("h1024", 2048, 2, "none", False),
    ("h1024", 4096, 1, "none", False),
    ("h2048", 2048, 2, "none", False),
    ("h2048", 2048, 2, "selective", False),
    ("h2048", 2048, 2, "full", False),
    ("h2048", 4096, 4, "selective", False),
    ("h4096", 2048, 1, "none", False),
    ("h4096", 4096, 2, "selective", False),
    ("h4096", 8192, 1, "full", False),
    ("h2048", 2048, 2, "none", True),
    ("h4096", 4096, 1, "selective", True),
]
QUICK = [0, 3, 4, 7, 9]


def mist_inputs(name, seq, mb, recompute, offload):
    h, a, g, f, layers = MODELS[name]
    model = {"model_type": "llama", "hidden_size": h, "num_attention_heads": a, "num_key_value_heads": g,
             "intermediate_size": f, "num_hidden_layers": layers, "vocab_size": VOCAB,
             "max_position_embeddings": max(seq, 2048), "tie_word_embeddings": False}
    training = {"global_batch_size": mb, "seq_length": seq, "precision": "bf16", "optimizer": "adamw",
                "flash_attention": True, "dropout": False}
    stage = {"num_layers": layers, "zero": 3, "ckpt_layers": layers if recompute == "full" else 0}
    if offload:
        stage["offload"] = {"weights": 1.0, "gradients": 1.0, "optimizer_states": 1.0, "activations": 0.0}
    plan = {"dp": 1, "tp": 1, "pp": 1, "micro_batch_size": mb, "grad_accum_steps": 1, "stages": [stage],
            "recompute": "selective" if recompute == "selective" else "none"}
    return model, training, plan


def measure(args):
    if args.expandable:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts, CheckpointPolicy
    try:
        from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy
    except ImportError:  # torch 2.4-2.5
        from torch.distributed._composable.fsdp import fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy

    class RMSNorm(nn.Module):  # torchtitan's: the norm in fp32, the weight applied in the input dtype
        def __init__(self, d, eps=1e-5):
            super().__init__()
            self.eps, self.weight = eps, nn.Parameter(torch.ones(d))

        def forward(self, x):
            y = x.float()
            y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
            return y.type_as(x) * self.weight

    def rotary(xq, xk, freqs):  # torchtitan's apply_rotary_emb: complex multiply in fp32
        q = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        k = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
        f = freqs.view(1, q.shape[1], 1, q.shape[-1])
        return torch.view_as_real(q * f).flatten(3).type_as(xq), torch.view_as_real(k * f).flatten(3).type_as(xk)

    class Block(nn.Module):
        def __init__(self, h, a, g, f):
            super().__init__()
            self.a, self.g, self.d = a, g, h // a
            self.attention_norm, self.ffn_norm = RMSNorm(h), RMSNorm(h)
            self.wq = nn.Linear(h, a * self.d, bias=False)
            self.wk = nn.Linear(h, g * self.d, bias=False)
            self.wv = nn.Linear(h, g * self.d, bias=False)
            self.wo = nn.Linear(a * self.d, h, bias=False)
            self.w1 = nn.Linear(h, f, bias=False)
            self.w2 = nn.Linear(f, h, bias=False)
            self.w3 = nn.Linear(h, f, bias=False)

        def forward(self, x, freqs):
            b, s, _ = x.shape
            y = self.attention_norm(x)
            q = self.wq(y).view(b, s, self.a, self.d)
            k = self.wk(y).view(b, s, self.g, self.d)
            v = self.wv(y).view(b, s, self.g, self.d)
            q, k = rotary(q, k, freqs)
            rep = self.a // self.g  # repeat_kv
            k = k[:, :, :, None, :].expand(b, s, self.g, rep, self.d).reshape(b, s, self.a, self.d)
            v = v[:, :, :, None, :].expand(b, s, self.g, rep, self.d).reshape(b, s, self.a, self.d)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            x = x + self.wo(o.transpose(1, 2).contiguous().view(b, s, -1))
            y = self.ffn_norm(x)
            return x + self.w2(F.silu(self.w1(y)) * self.w3(y))

    def op_policy():  # torchtitan's op-level selective AC (_save_list, every other mm)
        save = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_flash_attention.default,
                torch.ops.aten._scaled_dot_product_efficient_attention.default}
        count = {"mm": 0}

        def policy(ctx, func, *a, **k):
            if func == torch.ops.aten.mm.default and not ctx.is_recompute:
                count["mm"] += 1
            keep = func in save and not (func == torch.ops.aten.mm.default and count["mm"] % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
        return create_selective_checkpoint_contexts(policy)

    def rotary_freqs(name, seq):  # torchtitan's precompute_freqs_cis (theta 500000), complex64
        h, a = MODELS[name][0], MODELS[name][1]
        d = h // a
        inv = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=dev).float() / d))
        angles = torch.outer(torch.arange(seq, device=dev).float(), inv)
        return torch.polar(torch.ones_like(angles), angles)

    class Model(nn.Module):
        def __init__(self, name, recompute):
            super().__init__()
            h, a, g, f, layers = MODELS[name]
            self.recompute = recompute
            self.tok_embeddings = nn.Embedding(VOCAB, h)
            self.layers = nn.ModuleList(Block(h, a, g, f) for _ in range(layers))
            self.norm = RMSNorm(h)
            self.output = nn.Linear(h, VOCAB, bias=False)
            self.freqs = None  # set once the model is on its device (not a parameter or a buffer)

        def forward(self, tokens):
            x = self.tok_embeddings(tokens)
            for blk in self.layers:
                if self.recompute == "full":
                    x = checkpoint(blk, x, self.freqs, use_reentrant=False)
                elif self.recompute == "selective":
                    x = checkpoint(blk, x, self.freqs, use_reentrant=False, context_fn=op_policy)
                else:
                    x = blk(x, self.freqs)
            return self.output(self.norm(x))

    dev = torch.device("cuda")
    torch.cuda.set_device(0)
    if not dist.is_initialized():
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29531", rank=0, world_size=1)
    versions = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0),
                "driver": subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                         capture_output=True, text=True).stdout.strip(),
                "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                "total_memory_bytes": torch.cuda.get_device_properties(0).total_memory}
    grid = [GRID[i] for i in QUICK] if args.quick else GRID
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "gpu_validate.jsonl")
    deadline = time.time() + 60 * args.minutes
    with open(path, "a") as out:
        for name, seq, mb, recompute, offload in grid:
            if time.time() > deadline:
                print("time budget spent: stopping before", name, seq, mb, recompute, offload, flush=True)
                break
            row = {"model": name, "seq": seq, "micro_batch": mb, "recompute": recompute, "offload": offload,
                   "date": time.strftime("%Y-%m-%d"), **versions}
            row["mist"] = dict(zip(("model", "training", "plan"), mist_inputs(name, seq, mb, recompute, offload)))
            try:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                with torch.device("meta"):
                    model = Model(name, recompute)
                mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                kw = {"mp_policy": mp}
                if offload:
                    kw["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
                for blk in model.layers:
                    fully_shard(blk, **kw)
                fully_shard(model, **kw)
                model.to_empty(device="cpu" if offload else dev)
                with torch.no_grad():
                    for p in model.parameters():
                        p.normal_(0, 0.02)
                model.freqs = rotary_freqs(name, seq)
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=not offload)
                tokens = torch.randint(0, VOCAB, (mb, seq + 1), device=dev)
                times = []
                for step in range(args.warmup + args.steps):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    logits = model(tokens[:, :-1])
                    loss = F.cross_entropy(logits.float().view(-1, VOCAB), tokens[:, 1:].reshape(-1))
                    del logits
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    opt.step()
                    opt.zero_grad()
                    torch.cuda.synchronize()
                    if step >= args.warmup:
                        times.append(time.perf_counter() - t0)
                row.update({"max_allocated_bytes": torch.cuda.max_memory_allocated() - base,
                            "max_reserved_bytes": torch.cuda.max_memory_reserved(),
                            "step_time_s": statistics.median(times), "steps": len(times)})
                del model, opt, tokens, loss
            except torch.OutOfMemoryError as e:
                row["error"] = "out of memory: " + str(e).splitlines()[0]
            except Exception as e:  # a configuration this torch cannot run: recorded, the grid goes on
                row["error"] = f"{type(e).__name__}: {e}"
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps({k: row.get(k) for k in ("model", "seq", "micro_batch", "recompute", "offload",
                                                      "max_allocated_bytes", "max_reserved_bytes", "step_time_s",
                                                      "error")}), flush=True)
    dist.destroy_process_group()


def compare(args):
    gib = 1024.0 ** 3
    rows = [json.loads(l) for l in open(args.compare) if l.strip()]
    tmp = tempfile.mkdtemp(prefix="gpu-validate-")
    print(f"{'configuration':40} {'alloc meas/pred GiB':>20} {'err':>7} {'resv meas/pred GiB':>20} {'err':>7} "
          f"{'step meas/pred s':>18} {'err':>7}")
    errs = {"allocated": [], "reserved": [], "time": []}
    for i, r in enumerate(rows):
        if "error" in r:
            print(f"{r['model']} s{r['seq']} b{r['micro_batch']} {r['recompute']}: not measured ({r['error']})")
            continue
        files = []
        for k in ("model", "training", "plan"):
            p = os.path.join(tmp, f"{i}_{k}.json")
            json.dump(r["mist"][k], open(p, "w"))
            files.append(p)
        cluster = os.path.join(tmp, f"{i}_cluster.json")
        json.dump({"gpu": args.gpu, "nodes": 1, "gpus_per_node": 1}, open(cluster, "w"))
        out = subprocess.run([args.mist, "predict", "--model", files[0], "--cluster", cluster, "--training", files[1],
                              "--plan", files[2], "--engine", "torchtitan", "--json"], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{r['model']}: mist refused: {out.stderr.strip()}")
            continue
        p = json.loads(out.stdout)
        st = max(p["stages"], key=lambda s: s["reserved_memory_bytes"])
        pa, pr, pt = st["peak_memory_bytes"], st["reserved_memory_bytes"], p["iteration_time_s"]
        ma, mr, mt = r["max_allocated_bytes"], r["max_reserved_bytes"], r["step_time_s"]
        e = (pa / ma - 1, pr / mr - 1, pt / mt - 1)
        for key, v in zip(errs, e):
            errs[key].append(abs(v))
        name = f"{r['model']} s{r['seq']} b{r['micro_batch']} {r['recompute']}{' offload' if r['offload'] else ''}"
        print(f"{name:40} {ma/gib:9.2f}/{pa/gib:<9.2f} {100*e[0]:+6.1f}% {mr/gib:9.2f}/{pr/gib:<9.2f} {100*e[1]:+6.1f}% "
              f"{mt:8.4f}/{pt:<8.4f} {100*e[2]:+6.1f}%")
    for k, v in errs.items():
        if v:
            print(f"{k}: {len(v)} configurations, mean |error| {100*statistics.mean(v):.1f}%, max {100*max(v):.1f}%")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for gpu_validate.jsonl ($OUT)")
    ap.add_argument("--minutes", type=float, default=8, help="time budget: no new configuration starts after it")
    ap.add_argument("--quick", action="store_true", help=f"{len(QUICK)} of the {len(GRID)} configurations")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--expandable", action="store_true", help="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    ap.add_argument("--compare", help="a gpu_validate.jsonl to hold mist's predictions against")
    ap.add_argument("--mist", default="build/mist")
    ap.add_argument("--gpu", default="H200-SXM-141GB", help="mist's catalog name of the measured GPU")
    args = ap.parse_args()
    if args.compare:
        compare(args)
    else:
        measure(args)


if __name__ == "__main__":
    sys.exit(main())
