"""The jobs the harness tunes and exports. Each job is tuned with `mist tune --engine E` unless it
gives a plan, which is exported as it is (to force pipeline parallelism, ZeRO, offload, recompute
or virtual stages). `tune` adds flags to `mist tune` (e.g. `--no-offload`); `pick` takes the tuner's
N-th plan instead of its first (its list with `--top N`), to reach a plan the first does not (e.g.
context parallelism where tensor parallelism wins). A plan the engine cannot run is refused by mist
with its nearest plan, which the harness then exports (and says so)."""

# A100/A10G/L4/L40S are Ampere/Ada (arch 8), H100/H200 Hopper (9), B200 Blackwell (10): Megatron-LM
# reads the arch (torch.cuda.get_device_capability) for its CUDA_DEVICE_MAX_CONNECTIONS rule.
GPU_ARCH = {"V100-SXM2-32GB": 7, "A100-SXM4-40GB": 8, "A100-SXM4-80GB": 8, "A10G-24GB": 8, "L4-24GB": 8,
            "L40S-48GB": 8, "H100-SXM5-80GB": 9, "H100-SXM5-96GB": 9, "H100-PCIe-80GB": 9,
            "H200-SXM-141GB": 9, "B200-SXM-180GB": 10}


# What a written plan must state for the engine to run it as written (mist's plan defaults are
# Megatron-LM's): only Megatron-LM fuses the gradient accumulation into the weight-gradient GEMM and
# overlaps the TP backward all-reduce; DeepSpeed overlaps the gradient reduction from ZeRO-2 on
# (zero_optimization.overlap_comm) and prefetches parameters only under ZeRO-3 (ZeRO-1/2 gather the
# updated ones inside the optimizer step); torchtitan's pipeline schedule reduce-scatters FSDP's gradients after
# the last micro-batch's backward. Without these, mist refuses the plan and the harness
# would export the fastest plan the engine runs instead, not the one the job was written to reach.
def engine_plan(engine, p):
    if engine == "megatron":
        return p
    out = {**p, "grad_accumulation_fusion": False, "async_tp_backward": False}
    if engine == "deepspeed":
        zero = p["stages"][0]["zero"]
        out.update(overlap_grad_reduce=zero >= 2, overlap_param_gather=zero == 3)
    if engine == "torchtitan" and p["pp"] > 1 and p["stages"][0]["zero"] >= 1 and p["dp"] * p.get("cp", 1) > 1:
        out.update(overlap_grad_reduce=False)
    return out


def job(name, engine, model, gpu, gpus, gbs, seq, plan=None, gpus_per_node=8, optimizer="adamw",
        precision="bf16", compile=False, tune=(), pick=1, fp8_recipe=None, mtp_layers=0, recompute_modules=None):
    nodes = max(1, gpus // gpus_per_node)
    per_node = gpus if gpus < gpus_per_node else gpus_per_node
    training = {"global_batch_size": gbs, "seq_length": seq, "precision": precision,
                "optimizer": optimizer, "flash_attention": True, "compile": compile}
    if fp8_recipe:
        training.update(precision="fp8", fp8_recipe=fp8_recipe)
    if mtp_layers:
        training["mtp_layers"] = mtp_layers
    if recompute_modules:
        training["recompute_modules"] = list(recompute_modules)
    if plan:
        plan = engine_plan(engine, plan)
    return {"name": name, "engine": engine, "model": model,
            "cluster": {"gpu": gpu, "nodes": nodes, "gpus_per_node": per_node},
            "training": training, "plan": plan, "tune": list(tune), "pick": pick}


def stages(layers, pp, zero=0, ckpt=0, offload=None):
    per = [layers // pp + (1 if i < layers % pp else 0) for i in range(pp)]
    out = []
    for n in per:
        s = {"num_layers": n, "zero": zero, "ckpt_layers": min(ckpt, n)}
        if offload:
            s["offload"] = dict(offload)
        out.append(s)
    return out


def plan(dp, tp, pp, mbs, gas, layers, zero=0, ckpt=0, offload=None, v=1, recompute=None, sp=None, ep=1, etp=1,
         cp=1, moe_a2a_overlap=False):
    p = {"dp": dp, "tp": tp, "pp": pp, "sequence_parallel": tp > 1 if sp is None else sp,
         "micro_batch_size": mbs, "grad_accum_steps": gas, "stages": stages(layers, pp, zero, ckpt, offload)}
    if cp > 1:
        p["cp"] = cp
    if ep > 1 or etp > 1:
        p["ep"], p["etp"] = ep, etp
    if v > 1:
        p["virtual_pipeline_stages"] = v
    if recompute:
        p["recompute"] = recompute
    if moe_a2a_overlap:
        p["overlap_moe_a2a"] = True
    return p


def accounted(p):
    """Megatron's --account-for-embedding/loss-in-pipeline-split on an interleaved plan: the
    embedding and the loss count as layers, so the first stage's first chunk and the last stage's
    last build one block fewer (plan.stages[i].chunk_layers)."""
    pp, v = p["pp"], p.get("virtual_pipeline_stages", 1)
    total = sum(s["num_layers"] for s in p["stages"])
    per = (total + 2) // (pp * v)
    for i, s in enumerate(p["stages"]):
        chunks = [per] * v
        if i == 0:
            chunks[0] -= 1
        if i == pp - 1:
            chunks[-1] -= 1
        s["num_layers"] = sum(chunks)
        s["ckpt_layers"] = min(s["ckpt_layers"], s["num_layers"])
        if len(set(chunks)) > 1:
            s["chunk_layers"] = chunks
    return p


def chunked(p, chunks):
    """A plan whose stages hold `chunks` blocks per model chunk (a layout's split)."""
    for s, ch in zip(p["stages"], chunks):
        s["num_layers"] = sum(ch)
        s["ckpt_layers"] = min(s["ckpt_layers"], s["num_layers"])
        if len(set(ch)) > 1:
            s["chunk_layers"] = list(ch)
    return p


OPT = {"weights": 0, "gradients": 0, "optimizer_states": 1, "activations": 0}
ALL = {"weights": 1, "gradients": 1, "optimizer_states": 1, "activations": 0}

JOBS = [
    # Megatron-LM
    job("mlm-llama2-7b-8xA100-s4096", "megatron", "llama2-7b", "A100-SXM4-80GB", 8, 256, 4096),
    job("mlm-llama2-7b-8xH100-s8192", "megatron", "llama2-7b", "H100-SXM5-80GB", 8, 128, 8192),
    job("mlm-llama3-8b-8xH100-s8192", "megatron", "llama3-8b", "H100-SXM5-80GB", 8, 256, 8192),
    job("mlm-llama3-70b-32xH100-s4096", "megatron", "llama3-70b", "H100-SXM5-80GB", 32, 512, 4096),
    job("mlm-gpt3-13b-16xA100-s2048", "megatron", "gpt3-13b", "A100-SXM4-80GB", 16, 512, 2048),
    job("mlm-gpt3-1.3b-4xA100-40-s2048", "megatron", "gpt3-1.3b", "A100-SXM4-40GB", 4, 256, 2048),
    job("mlm-gpt3-6.7b-8xL40S-s2048", "megatron", "gpt3-6.7b", "L40S-48GB", 8, 256, 2048),
    job("mlm-llama2-13b-8xA100-40-s4096", "megatron", "llama2-13b", "A100-SXM4-40GB", 8, 128, 4096),
    job("mlm-llama3-8b-16xH100-s4096", "megatron", "llama3-8b", "H100-SXM5-80GB", 16, 512, 4096),
    job("mlm-llama2-70b-64xA100-s4096", "megatron", "llama2-70b", "A100-SXM4-80GB", 64, 1024, 4096),
    job("mlm-gpt3-2.7b-8xA10G-s2048", "megatron", "gpt3-2.7b", "A10G-24GB", 8, 256, 2048),
    job("mlm-llama3-8b-8xB200-s8192", "megatron", "llama3-8b", "B200-SXM-180GB", 8, 256, 8192),
    job("mlm-gpt3-13b-pp2-recompute", "megatron", "gpt3-13b", "A100-SXM4-80GB", 16, 512, 2048,
        plan=plan(2, 4, 2, 2, 128, 40, zero=1, ckpt=6)),
    job("mlm-llama2-7b-zero1-optoffload", "megatron", "llama2-7b", "A100-SXM4-80GB", 8, 64, 4096,
        plan=plan(4, 2, 1, 1, 16, 32, zero=1, offload={**OPT, "optimizer_states": 0.5})),
    job("mlm-llama3-8b-pp4-v2", "megatron", "llama3-8b", "H100-SXM5-80GB", 8, 64, 8192,
        plan=plan(1, 2, 4, 1, 64, 32, zero=1, v=2)),
    job("mlm-llama2-7b-zero3-fsdp", "megatron", "llama2-7b", "H100-SXM5-80GB", 8, 64, 4096,
        plan=plan(8, 1, 1, 1, 8, 32, zero=3)),
    job("mlm-llama2-7b-actoffload", "megatron", "llama2-7b", "A100-SXM4-80GB", 8, 64, 4096,
        plan=plan(4, 2, 1, 1, 16, 32, zero=1, offload={"weights": 0, "gradients": 0, "optimizer_states": 0,
                                                        "activations": 0.25})),
    job("mlm-llama2-7b-selective-tp4", "megatron", "llama2-7b", "A100-SXM4-80GB", 8, 64, 4096,
        plan=plan(2, 4, 1, 2, 16, 32, zero=1, recompute="selective")),
    # Megatron-LM, mixtures of experts
    job("mlm-mixtral-8x7b-16xH100-s4096", "megatron", "mixtral-8x7b", "H100-SXM5-80GB", 16, 256, 4096),
    job("mlm-mixtral-8x22b-64xH100-s4096", "megatron", "mixtral-8x22b", "H100-SXM5-80GB", 64, 256, 4096),
    job("mlm-qwen1.5-moe-8xH100-s4096", "megatron", "qwen1.5-moe-a2.7b", "H100-SXM5-80GB", 8, 256, 4096),
    job("mlm-qwen2-57b-a14b-32xH100-s4096", "megatron", "qwen2-57b-a14b", "H100-SXM5-80GB", 32, 256, 4096),
    job("mlm-qwen3-30b-a3b-16xH100-s4096", "megatron", "qwen3-30b-a3b", "H100-SXM5-80GB", 16, 1024, 4096),
    job("mlm-qwen3-8b-8xH100-s4096", "megatron", "qwen3-8b", "H100-SXM5-80GB", 8, 256, 4096),
    job("mlm-qwen3-235b-a22b-tp2-pp8-ep8", "megatron", "qwen3-235b-a22b", "H100-SXM5-80GB", 128, 1024, 4096,
        plan=plan(8, 2, 8, 1, 128, 94, zero=1, ep=8, etp=1)),
    job("mlm-mixtral-8x7b-tp2-pp4-ep8", "megatron", "mixtral-8x7b", "H100-SXM5-80GB", 32, 256, 4096,
        plan=plan(4, 2, 4, 1, 64, 32, zero=1, ep=8, etp=1)),
    job("mlm-mixtral-8x7b-tp4-ep2-etp4", "megatron", "mixtral-8x7b", "H100-SXM5-80GB", 16, 128, 4096,
        plan=plan(4, 4, 1, 1, 32, 32, zero=1, ep=2, etp=4)),
    # Megatron-LM, context parallelism (long context: the tuner tries cp with >= 4096 tokens per rank)
    job("mlm-llama3-8b-8xH100-s131072-cp", "megatron", "llama3-8b", "H100-SXM5-80GB", 8, 8, 131072,
        tune=("--no-offload",)),
    job("mlm-llama3-8b-16xH100-s65536", "megatron", "llama3-8b", "H100-SXM5-80GB", 16, 32, 65536),
    job("mlm-llama3-70b-32xH100-s32768", "megatron", "llama3-70b", "H100-SXM5-80GB", 32, 64, 32768),
    job("mlm-llama3-70b-32xH100-s32768-nooffload", "megatron", "llama3-70b", "H100-SXM5-80GB", 32, 64, 32768,
        tune=("--no-offload",)),
    job("mlm-llama3-8b-tp2-pp2-v2-cp2", "megatron", "llama3-8b", "H100-SXM5-80GB", 8, 16, 65536,
        plan=plan(1, 2, 2, 1, 16, 32, zero=1, ckpt=16, v=2, cp=2)),
    # Megatron-LM, FP8 (Transformer Engine recipes) and the newer mixtures of experts (2026-12-04)
    job("mlm-llama3-70b-64xH100-fp8-tensorwise", "megatron", "llama3-70b", "H100-SXM5-80GB", 64, 256, 8192,
        fp8_recipe="tensorwise"),
    job("mlm-llama3-8b-8xH100-fp8-delayed", "megatron", "llama3-8b", "H100-SXM5-80GB", 8, 256, 8192,
        fp8_recipe="delayed"),
    job("mlm-llama3-8b-8xB200-mxfp8", "megatron", "llama3-8b", "B200-SXM-180GB", 8, 256, 8192,
        fp8_recipe="mxfp8"),
    job("mlm-llama3-8b-tp2-fp8-blockwise", "megatron", "llama3-8b", "H100-SXM5-80GB", 8, 64, 8192,
        plan=plan(4, 2, 1, 1, 16, 32, zero=1), fp8_recipe="blockwise"),
    job("mlm-qwen3-30b-a3b-16xH100-fp8", "megatron", "qwen3-30b-a3b", "H100-SXM5-80GB", 16, 1024, 4096,
        fp8_recipe="tensorwise"),
    job("mlm-gpt-oss-20b-8xH100-s4096", "megatron", "gpt-oss-20b", "H100-SXM5-80GB", 8, 256, 4096),
    job("mlm-gpt-oss-120b-pp4-ep8-bridge", "megatron", "gpt-oss-120b", "H100-SXM5-80GB", 64, 1280, 4096,
        plan=plan(16, 1, 4, 1, 80, 36, zero=1, ep=8)),
    job("mlm-deepseek-v3-256xH100-pp8-ep32", "megatron", "deepseek-v3", "H100-SXM5-80GB", 256, 1024, 4096,
        plan=plan(32, 1, 8, 1, 32, 61, zero=1, ckpt=8, ep=32)),
    # 2026-12-07: multi-token prediction (--mtp-num-layers) and the MoE all-to-all overlap
    # (--overlap-moe-expert-parallel-comm, interleaved with pp > 1); accepted by the harness 2026-12-07.
    job("mlm-deepseek-v3-256xH100-pp8-ep32-mtp", "megatron", "deepseek-v3", "H100-SXM5-80GB", 256, 1024, 4096,
        plan=plan(32, 1, 8, 1, 32, 61, zero=1, ckpt=8, ep=32), mtp_layers=1),
    # 2026-12-07: --recompute-modules (Megatron-Bridge's gpt-oss recipe recomputes these two);
    # accepted by the harness the same day.
    job("mlm-gpt-oss-120b-pp4-ep8-recompute-modules", "megatron", "gpt-oss-120b", "H100-SXM5-80GB", 64, 1280, 4096,
        plan=plan(16, 1, 4, 1, 80, 36, zero=1, ep=8, recompute="selective"),
        recompute_modules=("layernorm", "moe_act")),
    # 2026-12-07: chunks of unequal size, as Megatron-Bridge's Llama 3.1 405B H100 recipe runs it
    # (tp 8, pp 8, cp 2, 8 chunks a stage, the embedding and the loss counted in the split), and a
    # layout of unequal chunks; both accepted by the harness the same day.
    job("mlm-llama3-405b-1024xH100-accounting", "megatron", "llama3-405b", "H100-SXM5-80GB", 1024, 1536, 8192,
        plan=accounted(plan(8, 8, 8, 1, 192, 126, zero=1, v=8, cp=2)), fp8_recipe="tensorwise"),
    job("mlm-llama3-8b-pp4-v2-uneven-layout", "megatron", "llama3-8b", "H100-SXM5-80GB", 8, 64, 8192,
        plan=chunked(plan(2, 1, 4, 1, 32, 32, zero=1, v=2), [[3, 4], [4, 4], [4, 4], [4, 5]])),
    job("mlm-qwen3-30b-a3b-16xH100-a2a-overlap", "megatron", "qwen3-30b-a3b", "H100-SXM5-80GB", 16, 1024, 4096,
        plan=plan(8, 1, 2, 1, 128, 48, zero=1, ep=8, v=2, moe_a2a_overlap=True)),
    # DeepSpeed (Megatron-DeepSpeed + DeepSpeed)
    job("ds-llama2-7b-8xA100-s4096", "deepspeed", "llama2-7b", "A100-SXM4-80GB", 8, 256, 4096),
    job("ds-gpt3-13b-16xA100-s2048", "deepspeed", "gpt3-13b", "A100-SXM4-80GB", 16, 512, 2048),
    job("ds-llama3-8b-8xH100-s8192", "deepspeed", "llama3-8b", "H100-SXM5-80GB", 8, 256, 8192),
    job("ds-gpt3-1.3b-4xA10G-s2048", "deepspeed", "gpt3-1.3b", "A10G-24GB", 4, 128, 2048),
    job("ds-llama2-13b-8xL4-s4096", "deepspeed", "llama2-13b", "L4-24GB", 8, 64, 4096),
    job("ds-llama3-70b-32xH100-s4096", "deepspeed", "llama3-70b", "H100-SXM5-80GB", 32, 512, 4096),
    job("ds-llama2-70b-32xA100-s4096", "deepspeed", "llama2-70b", "A100-SXM4-80GB", 32, 512, 4096),
    job("ds-gpt3-6.7b-8xH100-s2048", "deepspeed", "gpt3-6.7b", "H100-SXM5-80GB", 8, 256, 2048),
    job("ds-llama3-8b-16xA100-40-s4096", "deepspeed", "llama3-8b", "A100-SXM4-40GB", 16, 256, 4096),
    job("ds-gpt3-22b-16xA100-s2048", "deepspeed", "gpt3-22b", "A100-SXM4-80GB", 16, 512, 2048),
    job("ds-llama2-7b-zero2-optoffload", "deepspeed", "llama2-7b", "A100-SXM4-80GB", 8, 64, 4096,
        plan=plan(8, 1, 1, 1, 8, 32, zero=2, offload=OPT)),
    job("ds-llama2-7b-zero3-offload-all", "deepspeed", "llama2-7b", "A100-SXM4-40GB", 8, 64, 4096,
        plan=plan(8, 1, 1, 1, 8, 32, zero=3, offload={**ALL, "gradients": 0})),
    job("ds-gpt3-13b-pp2-tp4-recompute", "deepspeed", "gpt3-13b", "A100-SXM4-80GB", 16, 512, 2048,
        plan=plan(2, 4, 2, 2, 128, 40, zero=1, ckpt=20)),
    job("ds-llama3-8b-tp2-selective", "deepspeed", "llama3-8b", "H100-SXM5-80GB", 8, 64, 8192,
        plan=plan(4, 2, 1, 1, 16, 32, zero=1, recompute="selective")),
    job("ds-llama2-7b-zero0-tp8", "deepspeed", "llama2-7b", "H100-SXM5-80GB", 8, 64, 4096,
        plan=plan(1, 8, 1, 1, 64, 32, zero=0)),
    job("ds-llama2-7b-zero0-pp2-tp4", "deepspeed", "llama2-7b", "H100-SXM5-80GB", 8, 64, 4096,
        plan=plan(1, 4, 2, 1, 64, 32, zero=0)),
    # DeepSpeed-Ulysses: sequence parallelism over the data-parallel ranks (plan cp with cp_comm a2a)
    # (Megatron-DeepSpeed's Ulysses attention needs as many key/value heads as heads: llama2-7b)
    job("ds-llama2-7b-8xH100-s32768-ulysses", "deepspeed", "llama2-7b", "H100-SXM5-80GB", 8, 16, 32768,
        plan={**plan(2, 1, 1, 1, 8, 32, zero=2, ckpt=32, cp=4), "cp_comm": "a2a"}),
    # torchtitan
    job("tt-llama3-8b-8xH100-s8192", "torchtitan", "llama3-8b", "H100-SXM5-80GB", 8, 256, 8192),
    job("tt-llama3-70b-32xH100-s8192", "torchtitan", "llama3-70b", "H100-SXM5-80GB", 32, 256, 8192),
    job("tt-llama2-7b-8xA100-s4096", "torchtitan", "llama2-7b", "A100-SXM4-80GB", 8, 256, 4096),
    job("tt-gpt3-13b-16xA100-s2048", "torchtitan", "gpt3-13b", "A100-SXM4-80GB", 16, 512, 2048),
    job("tt-llama3-8b-4xL4-s4096", "torchtitan", "llama3-8b", "L4-24GB", 4, 64, 4096),
    job("tt-llama3-8b-16xH100-s8192-compile", "torchtitan", "llama3-8b", "H100-SXM5-80GB", 16, 256, 8192,
        compile=True),
    job("tt-llama3-70b-64xH100-s8192-compile", "torchtitan", "llama3-70b", "H100-SXM5-80GB", 64, 512, 8192,
        compile=True),
    job("tt-llama3-8b-8xH200-s8192", "torchtitan", "llama3-8b", "H200-SXM-141GB", 8, 128, 8192),
    job("tt-llama3-8b-8xA100-s4096", "torchtitan", "llama3-8b", "A100-SXM4-80GB", 8, 256, 4096),
    # Under PP torchtitan's FSDP keeps the stage's whole weights and gradients: ZeRO-1 (2026-12-07).
    job("tt-llama3-8b-pp2-fsdp", "torchtitan", "llama3-8b", "H100-SXM5-80GB", 8, 64, 8192,
        plan=plan(4, 1, 2, 1, 16, 32, zero=1)),
    job("tt-llama3-8b-tp2-zero3-fullac", "torchtitan", "llama3-8b", "H100-SXM5-80GB", 8, 64, 8192,
        plan=plan(4, 2, 1, 1, 16, 32, zero=3, ckpt=32)),
    job("tt-llama3-8b-zero3-cpuoffload", "torchtitan", "llama3-8b", "A100-SXM4-40GB", 8, 64, 8192,
        plan=plan(8, 1, 1, 1, 8, 32, zero=3, offload=ALL)),
    job("tt-llama3-8b-tp4-ddp", "torchtitan", "llama3-8b", "H100-SXM5-80GB", 8, 64, 8192,
        plan=plan(2, 4, 1, 1, 32, 32, zero=0)),
    job("tt-llama3-70b-pp4-v2-tp8", "torchtitan", "llama3-70b", "H100-SXM5-80GB", 32, 64, 8192,
        plan=plan(1, 8, 4, 1, 64, 80, zero=0, v=2)),
    job("tt-llama3-8b-tp2-selective", "torchtitan", "llama3-8b", "H100-SXM5-80GB", 8, 64, 8192,
        plan=plan(4, 2, 1, 1, 16, 32, zero=2, recompute="selective")),
    # torchtitan, float8 (torchao) under torch.compile
    job("tt-llama3-8b-8xH100-float8-rowwise", "torchtitan", "llama3-8b", "H100-SXM5-80GB", 8, 128, 8192,
        compile=True, fp8_recipe="rowwise"),
    job("tt-llama3-70b-64xH100-float8-rowwise", "torchtitan", "llama3-70b", "H100-SXM5-80GB", 64, 512, 8192,
        compile=True, fp8_recipe="rowwise"),
    # torchtitan, context parallelism (FSDP over dp_shard·cp)
    job("tt-llama3-8b-8xH100-s131072-cp8", "torchtitan", "llama3-8b", "H100-SXM5-80GB", 8, 8, 131072,
        tune=("--no-offload",), pick=2),
    job("tt-llama3-8b-16xH100-s65536", "torchtitan", "llama3-8b", "H100-SXM5-80GB", 16, 32, 65536),
    job("tt-llama3-8b-16xH100-s65536-nooffload", "torchtitan", "llama3-8b", "H100-SXM5-80GB", 16, 32, 65536,
        tune=("--no-offload",)),
    job("tt-llama3-70b-32xH100-s32768-nooffload", "torchtitan", "llama3-70b", "H100-SXM5-80GB", 32, 64, 32768,
        tune=("--no-offload",)),
    job("tt-llama3-8b-pp2-tp2-cp2", "torchtitan", "llama3-8b", "H100-SXM5-80GB", 8, 16, 65536,
        plan=plan(1, 2, 2, 1, 16, 32, zero=1, ckpt=16, cp=2)),
]
