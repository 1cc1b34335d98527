"""Megatron-LM: parse_args (sys.argv = the export) + validate_args + core_transformer_config_from_args,
under the export's environment, on rank 0 of the plan's world size; then the blocks it builds in each
model chunk of each pipeline rank against the plan's split (SPLIT-MISMATCH when they differ)."""
import contextlib
import io
import os
import sys

import common
import stubs

# Flags a launch always adds and that say nothing about the plan: data (mock), tokenizer, the
# learning-rate schedule, a run length. validate_args needs some of them.
LAUNCH_FLAGS = [("--train-iters", "10"), ("--lr", "1e-4"), ("--mock-data", None),
                ("--tokenizer-type", "NullTokenizer"), ("--vocab-size", "{vocab}")]


# What a GPU install of Megatron-LM has (an NGC PyTorch container of the commit's time): the
# version checks in validate_args and TransformerConfig read these.
TE_VERSION = "2.8.0"
TORCH_VERSION = "2.9.0"


def setup(root):
    stubs.torch_common()
    stubs.stub_modules("Transformer Engine needs CUDA; a GPU install has it, and TransformerConfig checks "
                       "its version (e.g. for rope fusion)", "transformer_engine", version=TE_VERSION)
    stubs.stub_modules("apex needs CUDA; imported optionally", "apex")
    sys.path.insert(0, root)
    import megatron.core.utils as core_utils
    from packaging.version import Version
    stubs.force_attr(core_utils, "_torch_version", Version(TORCH_VERSION), "megatron.core.utils._torch_version",
                     f"Debian's torch is 1.13; Megatron-LM's is_torch_min_version checks answer as torch {TORCH_VERSION}")
    import megatron.training.arguments  # noqa: F401
    import megatron.training.argument_utils  # noqa: F401
    return root


def check(item, root):
    import megatron.core.utils as core_utils
    import megatron.training.arguments as arguments
    from megatron.training.argument_utils import core_transformer_config_from_args

    env, words = common.parse_export(item["export"])
    common.set_rank_env(env, item["world_size"], item["gpus_per_node"])
    arch = item["gpu_arch"]
    # torch.cuda.get_device_capability()[0] on the plan's GPU
    for mod in (core_utils, arguments):
        if hasattr(mod, "get_device_arch_version"):
            stubs.force_attr(mod, "get_device_arch_version", lambda: arch, "megatron get_device_arch_version",
                             "reads torch.cuda.get_device_properties; answers the plan's GPU's major arch")
    import torch
    # validate_args reads it for --moe-grouped-gemm (compute capability >= 8)
    stubs.force_attr(torch.cuda, "get_device_capability", lambda *a: (arch, 0), "torch.cuda.get_device_capability",
                     "needs a GPU; answers the plan's GPU's (major arch, 0)")
    notes = []
    if "CUDA_DEVICE_MAX_CONNECTIONS" not in env:
        notes.append("export sets no CUDA_DEVICE_MAX_CONNECTIONS")
    sys.argv = ["pretrain_gpt.py"] + words + launch_flags(LAUNCH_FLAGS, words, item)
    err = io.StringIO()
    step = "parse_args"
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = arguments.parse_args()
            step = "validate_args"
            arguments.validate_args(args, {})
            step = "core_transformer_config_from_args"
            config = core_transformer_config_from_args(args)
            step = "get_num_layers_to_build"
            built = built_split(config)
    except (Exception, SystemExit) as e:
        r = common.rejection(e, [root], step)
        if isinstance(e, SystemExit):
            r["message"] = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else r["message"]
        r["notes"] = notes
        return r
    planned = plan_split(item["plan"])
    if built != planned:
        return {"verdict": "SPLIT-MISMATCH", "notes": notes,
                "message": f"Megatron-LM builds {built} blocks per rank and model chunk; the plan has {planned}"}
    return {"verdict": "ACCEPTED", "notes": notes}


def built_split(config):
    """Blocks Megatron-LM builds in each model chunk of each pipeline rank: transformer_block.py
    get_num_layers_to_build, or the layout's own lists (its method asks parallel_state for the
    virtual pipeline size, which no process group sets here)."""
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    pp = config.pipeline_model_parallel_size
    vp = config.virtual_pipeline_model_parallel_size or 1
    layout = config.pipeline_model_parallel_layout
    if layout is not None:
        return [[layout.layout[r][c].count(LayerType.decoder) for c in range(vp)] for r in range(pp)]
    return [[get_num_layers_to_build(config, vp_stage=c if vp > 1 else None, pp_rank=r) for c in range(vp)]
            for r in range(pp)]


def plan_split(p):
    """The plan's blocks per stage and model chunk (plan.stages[i].chunk_layers, else equal chunks)."""
    v = p.get("virtual_pipeline_stages", 1)
    return [s.get("chunk_layers") or [s["num_layers"] // v] * v for s in p["stages"]]


def launch_flags(flags, words, item):
    out = []
    for flag, value in flags:
        if flag not in words:
            out += [flag] + ([value.replace("{vocab}", str(item["vocab_size"]))] if value else [])
    return out
