#!/usr/bin/env python3
"""Measure mist's op times on one GPU and write them as profile rows for `mist profile import`.

For a few GPT and Llama blocks (bf16, flash attention through torch SDPA, Megatron's [s, b, h]
layout, no dropout, t = 1) it times every op of the block as mist's lowering names it (forward and
backward apart), then the whole block's forward and backward, with CUDA events after a warm-up,
and keeps the median and the 10th/90th percentiles of --reps repetitions. It also records the
block's peak allocated and reserved memory (torch.cuda.max_memory_*) in a second CSV.

    python3 tools/gpu_profile.py --device H100-SXM5-80GB --out h100.csv --memory-out h100_mem.csv
    build/mist profile import --db profile.db h100.csv

The columns are docs/profile.md's; --device must be the GPU's mist catalog name (mist list gpus).
Runs in about two minutes on one H100/H200.
"""
import argparse
import csv
import datetime
import statistics
import time

import torch
import torch.nn.functional as F

# family, hidden, heads, kv heads, ffn, sequence, micro-batch
BLOCKS = [
    ("gpt", 2048, 16, 16, 8192, 2048, 1),
    ("gpt", 4096, 32, 32, 16384, 2048, 2),
    ("llama", 4096, 32, 8, 14336, 4096, 1),
    ("llama", 8192, 64, 8, 28672, 4096, 1),
]
# --smoke: the same code path on the CPU with tiny blocks, to check the script and its rows
# (op names, shape keys) without a GPU; its times mean nothing.
SMOKE_BLOCKS = [("gpt", 64, 4, 4, 256, 32, 2), ("llama", 64, 4, 2, 176, 32, 1)]
COLUMNS = ["device", "op", "kind", "shape", "dtype", "pass", "median_s", "p10_s", "p90_s", "reps", "source", "date"]


def percentile(v, p):
    v = sorted(v)
    x = p * (len(v) - 1)
    i = int(x)
    j = min(i + 1, len(v) - 1)
    return v[i] + (x - i) * (v[j] - v[i])


def timed(fn, reps, warmup):
    """Seconds of each of `reps` calls of fn() (CUDA events on the current stream), after `warmup` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if not torch.cuda.is_available():  # --smoke
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return times


def causal_attention(q, k, v):
    """Flash attention through SDPA; plain causal attention where torch predates SDPA (--smoke on old torch)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    s = q.shape[-2]
    scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(mask, float("-inf")).softmax(-1) @ v


def rms_norm(x, w):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, 1e-5)
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * w


def rotate(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def block_ops(family, h, a, g, f, s, b, dev):
    """(name, kind, fn, inputs) for each op of mist's lowered block, in order, with their weights."""
    dt, d = torch.bfloat16, h // a
    kv = h * g // a
    gpt = family == "gpt"

    def p(*shape):  # a weight or activation that takes a gradient
        return (torch.randn(*shape, device=dev, dtype=dt) * 0.02).requires_grad_()

    x = lambda width: p(s, b, width)  # noqa: E731
    norm_kind = "layernorm" if gpt else "rmsnorm"
    norm = (lambda t, w, bb: F.layer_norm(t, (h,), w, bb)) if gpt else (lambda t, w, bb: rms_norm(t, w))
    lin = lambda n_in, n_out: (p(n_out, n_in), p(n_out) if gpt else None)  # noqa: E731
    cos = torch.randn(s, 1, 1, d, device=dev, dtype=dt)
    sin = torch.randn(s, 1, 1, d, device=dev, dtype=dt)
    ops = [("ln1", norm_kind, norm, [x(h), p(h), p(h)])]
    ops.append(("attn.qkv", "linear", F.linear, [x(h), *lin(h, h + 2 * kv)]))
    if not gpt:
        ops.append(("attn.rotary", "rotary", lambda q, k: (rotate(q, cos, sin), rotate(k, cos, sin)),
                    [p(s, b, a, d), p(s, b, g, d)]))

    def flash(q, k, v):
        if g != a:  # GQA: SDPA's flash kernel wants equal heads here; the repeat is timed too
            k, v = k.repeat_interleave(a // g, dim=1), v.repeat_interleave(a // g, dim=1)
        return causal_attention(q, k, v)

    ops.append(("attn.core", "flash_attention", flash, [p(b, a, s, d), p(b, g, s, d), p(b, g, s, d)]))
    ops.append(("attn.proj", "linear", F.linear, [x(h), *lin(h, h)]))
    ops.append(("residual1", "add", torch.add, [x(h), x(h)]))
    ops.append(("ln2", norm_kind, norm, [x(h), p(h), p(h)]))
    if gpt:
        ops.append(("mlp.fc1", "linear", F.linear, [x(h), *lin(h, f)]))
        ops.append(("mlp.gelu", "gelu", lambda t: F.gelu(t, approximate="tanh"), [x(f)]))
        ops.append(("mlp.fc2", "linear", F.linear, [x(f), *lin(f, h)]))
    else:
        ops.append(("mlp.gate_up", "linear", F.linear, [x(h), *lin(h, 2 * f)]))
        ops.append(("mlp.swiglu", "swiglu", lambda t: F.silu(t[..., :f]) * t[..., f:], [x(2 * f)]))
        ops.append(("mlp.down", "linear", F.linear, [x(f), *lin(f, h)]))
    ops.append(("residual2", "add", torch.add, [x(h), x(h)]))
    return ops


def block_forward(family, h, a, g, f, s, b, dev):
    """The whole block as one function of its input, weights made once."""
    ops = {name: (fn, inputs) for name, _, fn, inputs in block_ops(family, h, a, g, f, s, b, dev)}
    d, kv = h // a, h * g // a

    def call(name, *args):
        fn, inputs = ops[name]
        weights = [t for t in inputs[len(args):]]
        return fn(*args, *weights)

    def forward(x):
        y = call("ln1", x)
        qkv = call("attn.qkv", y)
        q, k, v = qkv.split([h, kv, kv], dim=-1)
        q, k, v = q.reshape(s, b, a, d), k.reshape(s, b, -1, d), v.reshape(s, b, -1, d)
        if family != "gpt":
            q, k = call("attn.rotary", q, k)
        ctx = call("attn.core", *(t.permute(1, 2, 0, 3) for t in (q, k, v)))
        ctx = ctx.permute(2, 0, 1, 3).reshape(s, b, h)
        r1 = call("residual1", x, call("attn.proj", ctx))
        y = call("ln2", r1)
        if family == "gpt":
            m = call("mlp.fc2", call("mlp.gelu", call("mlp.fc1", y)))
        else:
            m = call("mlp.down", call("mlp.swiglu", call("mlp.gate_up", y)))
        return call("residual2", r1, m)

    return forward


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", required=True, help="mist catalog name of this GPU, e.g. H100-SXM5-80GB")
    ap.add_argument("--out", required=True, help="CSV of op times for `mist profile import`")
    ap.add_argument("--memory-out", help="CSV of each block's peak allocated/reserved bytes")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="tiny blocks on the CPU: checks the script, not a GPU")
    args = ap.parse_args()
    dev = torch.device("cpu" if args.smoke else "cuda")
    gpu = "CPU smoke run" if args.smoke else torch.cuda.get_device_name(dev).replace(",", " ")
    source = f"tools/gpu_profile.py; torch {torch.__version__}; CUDA {torch.version.cuda}; {gpu}"
    today = datetime.date.today().isoformat()
    rows, memory = [], []

    def row(op, kind, shape, pass_, times):
        rows.append(dict(device=args.device, op=op, kind=kind, shape=shape, dtype="bf16", pass_=pass_,
                         median_s=statistics.median(times), p10_s=percentile(times, 0.1),
                         p90_s=percentile(times, 0.9), reps=len(times), source=source, date=today))

    for family, h, a, g, f, s, b in SMOKE_BLOCKS if args.smoke else BLOCKS:
        shape = f"b={b};s={s};h={h};a={a};g={g};f={f};t=1"
        print(f"{family} {shape}", flush=True)
        for name, kind, fn, inputs in block_ops(family, h, a, g, f, s, b, dev):
            row(name, kind, shape, "forward", timed(lambda: fn(*inputs), args.reps, args.warmup))
            out = fn(*inputs)
            outs = out if isinstance(out, tuple) else (out,)
            grads = [torch.randn_like(o) for o in outs]

            def backward():
                torch.autograd.backward(outs, grads, retain_graph=True)

            row(name, kind, shape, "backward", timed(backward, args.reps, args.warmup))
            del out, outs, grads
        forward = block_forward(family, h, a, g, f, s, b, dev)
        x = (torch.randn(s, b, h, device=dev, dtype=torch.bfloat16)).requires_grad_()
        row("block", "layer", shape, "forward", timed(lambda: forward(x), args.reps, args.warmup))
        y = forward(x)
        gy = torch.randn_like(y)
        row("block", "layer", shape, "backward",
            timed(lambda: torch.autograd.backward(y, gy, retain_graph=True), args.reps, args.warmup))
        del y
        if args.smoke:
            continue
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        forward(x).backward(gy)
        torch.cuda.synchronize()
        memory.append(dict(device=args.device, shape=shape, family=family, dtype="bf16",
                           peak_allocated_bytes=torch.cuda.max_memory_allocated() - base,
                           peak_reserved_bytes=torch.cuda.max_memory_reserved(), source=source, date=today))
        torch.cuda.empty_cache()

    with open(args.out, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow([r["device"], r["op"], r["kind"], r["shape"], r["dtype"], r["pass_"], repr(r["median_s"]),
                        repr(r["p10_s"]), repr(r["p90_s"]), r["reps"], r["source"], r["date"]])
    if args.memory_out and memory:
        with open(args.memory_out, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(memory[0]), lineterminator="\n")
            w.writeheader()
            w.writerows(memory)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
