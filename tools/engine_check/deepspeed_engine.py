"""Megatron-DeepSpeed + DeepSpeed: Megatron-DeepSpeed's parse_args/validate_args on the exported
flags, DeepSpeed's DeepSpeedConfig on the exported JSON (with the plan's data-parallel size, as the
engine's mpu gives it), then DeepSpeedEngine._configure_optimizer with the optimizer that
Megatron-DeepSpeed's get_megatron_optimizer builds from those flags (the client optimizer
pretrain_gpt.py hands to deepspeed.initialize)."""
import contextlib
import io
import json
import os
import sys
import types

import common
import stubs

# Flags a launch always adds and that say nothing about the plan.
LAUNCH_FLAGS = [("--train-iters", "10"), ("--lr", "1e-4"), ("--tokenizer-type", "GPT2BPETokenizer")]


def setup(md_root, ds_root):
    os.environ["DS_ACCELERATOR"] = "cpu"  # DeepSpeed's accelerator of a machine without CUDA
    stubs.torch_common()
    stubs.stub_modules("apex needs CUDA; Megatron-DeepSpeed imports it when the accelerator is cuda", "apex")
    stubs.stub_modules("not packaged for Debian 12; imported at module level, never called by the checks",
                       "transformers", "intel_extension_for_pytorch")
    stubs.stub_attr("torch", "xpu", None, stubs.NEWER_TORCH)
    hjson = types.ModuleType("hjson")  # JSON is a subset of Hjson: json reads what mist writes
    hjson.load, hjson.loads = json.load, json.loads
    sys.modules.setdefault("hjson", hjson)
    stubs.USED.setdefault("hjson", "not packaged for Debian 12; DeepSpeedConfig reads the file with it: json's "
                          "load/loads (mist writes plain JSON)")
    sys.path.insert(0, ds_root)
    sys.path.insert(0, md_root)
    import deepspeed
    import deepspeed.comm as dist
    version_txt = os.path.join(ds_root, "version.txt")
    if deepspeed.__version__ == "0.0.0" and os.path.isfile(version_txt):
        stubs.force_attr(deepspeed, "__version__", open(version_txt).read().strip(), "deepspeed.__version__",
                         "an uninstalled checkout reads version.txt from the working directory only "
                         "(git_version_info.py) and says 0.0.0; the checkout's version.txt (Megatron-DeepSpeed "
                         "asserts 0.10.2+ for DeepSpeed-Ulysses, arguments.py:99)")
    from deepspeed.ops.op_builder import CPUAdamBuilder
    stubs.force_attr(dist, "get_rank", lambda group=None: 0, "deepspeed.comm.get_rank",
                     "no process group: rank 0 (DeepSpeedConfig reads it before the mpu's data-parallel size)")
    stubs.force_attr(CPUAdamBuilder, "load", lambda self, verbose=True: stubs.Stub(), "CPUAdamBuilder.load",
                     "JIT-compiles DeepSpeed's C++ CPU Adam; DeepSpeedCPUAdam is built with a stub kernel handle")
    from megatron import arguments  # noqa: F401
    return [md_root, ds_root]


class _Mpu:
    """The grid's sizes as DeepSpeedConfig and the engine ask for them."""

    def __init__(self, dp, tp, pp):
        self.dp, self.tp, self.pp = dp, tp, pp

    def get_data_parallel_world_size(self):
        return self.dp

    def get_model_parallel_world_size(self):
        return self.tp

    def get_data_parallel_rank(self):
        return 0

    def get_model_parallel_rank(self):
        return 0


def check(item, roots):
    import torch
    from megatron import arguments, global_vars
    from megatron.optimizer import get_megatron_optimizer
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.engine import DeepSpeedEngine

    env, words = common.parse_export(item["export"])
    common.set_rank_env(env, item["world_size"], item["gpus_per_node"])
    # the exported --deepspeed_config names the file mist wrote
    sys.argv = ["pretrain_gpt.py"] + words + launch_flags(words)
    p = item["plan"]
    err = io.StringIO()
    step = "megatron-deepspeed parse_args"
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = arguments.parse_args()
            step = "megatron-deepspeed validate_args"
            args = arguments.validate_args(args, {}) or args
            global_vars._GLOBAL_ARGS = args
            step = "DeepSpeedConfig"
            config = DeepSpeedConfig(args.deepspeed_config, mpu=_Mpu(p["dp"], p["tp"], p["pp"]))
            step = "megatron-deepspeed get_megatron_optimizer"
            model = torch.nn.Linear(4, 4)  # stands for the model chunk: only its parameters are read
            optimizer = get_megatron_optimizer([model])
            step = "DeepSpeedEngine._configure_optimizer"
            engine = _bare_engine(DeepSpeedEngine, config, p, model)
            engine._configure_optimizer(optimizer, None)
    except (Exception, SystemExit) as e:
        r = common.rejection(e, roots, step)
        if isinstance(e, SystemExit) and err.getvalue().strip():
            r["message"] = err.getvalue().strip().splitlines()[-1]
        return r
    return {"verdict": "ACCEPTED", "notes": [f"optimizer {type(optimizer).__name__} -> "
                                             f"{engine.optimizer}"]}


def _bare_engine(cls, config, plan, model):
    """A DeepSpeedEngine without __init__ (which needs a process group and a GPU): the attributes
    _configure_optimizer reads, and the wrappers it ends in (which allocate the ZeRO/bf16/fp16
    optimizers on the GPU) replaced by their names."""
    e = cls.__new__(cls)
    import torch
    torch.nn.Module.__init__(e)
    object.__setattr__(e, "module", model)  # in __dict__, where DeepSpeedEngine.__getattr__ looks
    e._config = config
    e.has_moe_layers = False
    e.global_rank = 0
    e.pipeline_parallelism = plan["pp"] > 1
    e.client_optimizer = None
    for name in ("_configure_zero_optimizer", "_configure_fp16_optimizer", "_configure_bf16_optimizer"):
        setattr(e, name, lambda *a, _n=name: _n)
    e._configure_compression_scheduler = lambda: None
    e._configure_quantization = lambda: None
    stubs.USED.setdefault("DeepSpeedEngine._configure_{zero,fp16,bf16}_optimizer",
                          "build the wrapped optimizer on the GPU; the check stops at which one is chosen")
    return e


def launch_flags(words):
    out = []
    for flag, value in LAUNCH_FLAGS:
        if flag not in words:
            out += [flag] + ([value] if value else [])
    return out
