"""Fake modules and attributes for what the engines import but a CPU machine with Debian's
packages lacks (GPU libraries, newer torch APIs). Nothing here decides a verdict: the stubs only
let the engines' argument and config code import. Every stub that was used is recorded in USED
(run.py --verbose prints it); README.md lists them and why."""
import abc
import importlib.abc
import importlib.machinery
import sys
import types

USED = {}  # name -> why
VERSIONS = {}  # top-level stub module -> the __version__ it reports


class _StubMeta(abc.ABCMeta):
    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return make_class(f"{cls.__name__}.{name}")

    def __call__(cls, *args, **kwargs):
        # used as a decorator (@torch.compile, @jit_fuser, ...): hand the function back
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], _StubMeta):
            return args[0]
        return super().__call__(*args, **kwargs)

    def __or__(cls, other):
        return cls

    __ror__ = __or__

    def __getitem__(cls, item):
        return cls

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False


class Stub(metaclass=_StubMeta):
    """Anything: callable, subclassable, every attribute is another stub, falsy."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return make_class(name)()

    def __call__(self, *args, **kwargs):
        # a configured decorator (@torch.library.custom_op(...)): keep classes, wrap functions so
        # that what the decorated function is then asked for (.register_fake) is a stub too
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0] if isinstance(args[0], type) else _Wrapped(args[0])
        return Stub()

    def __bool__(self):
        return False

    def __iter__(self):
        return iter(())

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


class _Wrapped:
    def __init__(self, fn):
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", "wrapped")

    def __call__(self, *args, **kwargs):
        return self.__wrapped__(*args, **kwargs)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return make_class(name)


def make_class(name):
    return _StubMeta(name.rsplit(".", 1)[-1], (Stub,), {"__module__": "engine_check.stub", "__qualname__": name})


class StubModule(types.ModuleType):
    def __init__(self, name):
        super().__init__(name)
        self.__path__ = []  # a package, so submodules import too
        self.__file__ = f"<engine_check stub {name}>"
        self.__version__ = VERSIONS.get(name.split(".")[0], "0.0.0")

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = make_class(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: answers only for the prefixes registered, and only when no real
    module of that name was found first."""

    def __init__(self):
        self.prefixes = {}

    def find_spec(self, fullname, path, target=None):
        for prefix, why in self.prefixes.items():
            if fullname == prefix or fullname.startswith(prefix + "."):
                USED.setdefault(prefix, why)
                return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return StubModule(spec.name)

    def exec_module(self, module):
        pass


_FINDER = _Finder()


def stub_modules(why, *prefixes, force=False, version=None):
    """Missing modules under these prefixes become StubModules. force: stub even when a real one
    exists (it would try to use a GPU or a library that is not there)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
    for p in prefixes:
        _FINDER.prefixes[p] = why
        if version:
            VERSIONS[p] = version
        if force:
            for name in [m for m in sys.modules if m == p or m.startswith(p + ".")]:
                del sys.modules[name]
            sys.modules[p] = StubModule(p)
            USED.setdefault(p, why)


def stub_attr(module, name, value, why):
    """Set module.name when the real module lacks it (an API newer than the installed torch)."""
    mod = importlib.import_module(module) if isinstance(module, str) else module
    if not hasattr(mod, name):
        setattr(mod, name, value if value is not None else make_class(f"{mod.__name__}.{name}"))
        USED.setdefault(f"{mod.__name__}.{name}", why)


def force_attr(obj, name, value, label, why):
    """Replace something the engine calls that needs a GPU or a process group."""
    setattr(obj, name, value)
    USED.setdefault(label, why)


NEWER_TORCH = ("an API newer than Debian 12's torch 1.13: imported at module level by code the checks "
               "do not run")


def torch_common():
    """What Debian 12's torch 1.13 on Python 3.11 lacks or cannot import, for all three engines."""
    import torch
    import torch.jit
    import typing

    stub_modules("torch 1.13's torch.distributed._shard fails to import on Python 3.11 (a dataclass with a "
                 "mutable default)", "torch.distributed._shard", force=True)
    stub_modules("torch.utils.tensorboard raises ImportError without the tensorboard package",
                 "torch.utils.tensorboard", force=True)
    force_attr(torch.jit, "script", lambda fn=None, *a, **k: fn if fn is not None else (lambda f: f),
               "torch.jit.script", "torch 1.13 cannot script Megatron's fused kernels; the checks never call them")
    stub_attr(typing, "override", lambda f: f, "typing.override is Python 3.12 (Megatron-LM uses it); identity")
    stub_modules(NEWER_TORCH, "torch.distributed.checkpoint", "torch.distributed.tensor",
                 "torch.distributed._tensor", "torch.distributed.device_mesh",
                 "torch.distributed._symmetric_memory", "torch.distributed._composable",
                 "torch.distributed._functional_collectives", "torch.distributed.pipelining",
                 "torch.distributed._mesh_layout", "torch.distributed.nn", "torch._inductor",
                 "torch.nn.attention", "torch._functorch", "numpy.dtypes")
    for mod, attr in [("torch", "float8_e8m0fnu"), ("torch", "compile"), ("torch", "compiler"),
                      ("torch.distributed", "DeviceMesh"), ("torch.distributed", "_coalescing_manager"),
                      ("torch.cuda", "MemPool"), ("torch.cuda.memory", "CUDAPluggableAllocator"),
                      ("torch.optim.optimizer", "ParamsT"), ("torch._utils", "_get_device_module"),
                      ("torch.optim.lr_scheduler", "LRScheduler"), ("torch.nn", "RMSNorm"),
                      ("torch.library", "custom_op"), ("torch.utils.checkpoint", "CheckpointPolicy"),
                      ("torch.utils.checkpoint", "create_selective_checkpoint_contexts"),
                      ("torch.distributed.fsdp", "CPUOffloadPolicy"), ("torch.distributed.fsdp", "fully_shard"),
                      ("torch.distributed.fsdp", "DataParallelMeshDims"),
                      ("torch.distributed.fsdp", "MixedPrecisionPolicy")]:
        stub_attr(mod, attr, None, NEWER_TORCH)
    stub_modules("not packaged for Debian 12 (GPU kernels, data and tokenizer libraries): imported at "
                 "module level, never called by the checks", "triton", "spmd_types", "grain", "datasets",
                 "tokenizers", "tyro", "cpuinfo", "einops", version="3.0.0")
