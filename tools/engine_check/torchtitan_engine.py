"""torchtitan: ConfigManager._load_config on the export's --module/--config (the config function:
the model-registry lookup), the --section.field overrides applied to that Trainer.Config as tyro
would (tyro is not packaged for Debian, so run.py does what tyro.cli does: set the fields, then
construct every config dataclass again so each __post_init__ runs, Trainer.Config's last), then
ConfigManager._validate_config, ParallelDims.from_config with the plan's world size (its
_validate) and the model config's update_from_config (RoPE length, weight tying with PP)."""
import contextlib
import dataclasses
import io
import re
import sys
import types
import typing

import common
import stubs

HARNESS = "engine_check (tyro-equivalent CLI parse)"


class _Subcommand:
    def __init__(self, name, **kw):
        self.name = name


def _fake_tyro():
    """tyro's names that torchtitan uses at import time; subcommand keeps its name, so that the
    `activation-checkpoint:NAME` subcommand can be matched to the config class torchtitan names."""
    tyro = stubs.StubModule("tyro")
    tyro.conf = stubs.StubModule("tyro.conf")
    tyro.conf.subcommand = _Subcommand
    tyro.conf.Suppress = _Subcommand("<suppress>")
    tyro.constructors = stubs.StubModule("tyro.constructors")
    sys.modules.update({"tyro": tyro, "tyro.conf": tyro.conf, "tyro.constructors": tyro.constructors})
    stubs.USED["tyro"] = ("not packaged for Debian 12: a stand-in with conf.Suppress/conf.subcommand markers; "
                          "the overrides are applied by torchtitan_engine.apply_overrides")


def setup(root):
    _fake_tyro()
    stubs.torch_common()
    sys.path.insert(0, root)
    import torchtitan.trainer  # noqa: F401
    import torchtitan.config.manager  # noqa: F401
    return [root]


class CliError(Exception):
    pass


def _field(obj, name):
    for f in dataclasses.fields(obj):
        if f.name == name:
            return f
    return None


def _hint(obj, name):
    return typing.get_type_hints(type(obj), include_extras=True).get(name)


def _strip(tp):
    if typing.get_origin(tp) is typing.Annotated:
        return typing.get_args(tp)[0]
    return tp


def _coerce(tp, text, flag):
    tp = _strip(tp)
    origin, targs = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if text.lower() == "none" and type(None) in targs:
            return None
        for a in targs:
            if a is type(None):
                continue
            try:
                return _coerce(a, text, flag)
            except CliError:
                pass
        raise CliError(f"{flag}: cannot read {text!r} as {tp}")
    if origin is typing.Literal:
        for a in targs:
            if str(a) == text:
                return a
        raise CliError(f"{flag}: {text!r} is not one of {list(targs)}")
    if origin is list:
        return text.split(",")
    if tp is bool:
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise CliError(f"{flag}: {text!r} is not a bool")
    try:
        return tp(text) if tp in (int, float, str) else text
    except ValueError:
        raise CliError(f"{flag}: cannot read {text!r} as {tp.__name__}")


def apply_overrides(config, words):
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if ":" in w and not w.startswith("--"):  # tyro subcommand: field:name
            field_name, _, sub = w.partition(":")
            field_name = field_name.replace("-", "_")
            hint = _hint(config, field_name)
            if hint is None:
                raise CliError(f"unrecognized subcommand {w}")
            for alt in typing.get_args(hint):
                meta = [m for m in typing.get_args(alt)[1:] if isinstance(m, _Subcommand)]
                if meta and meta[0].name == sub:
                    cls = typing.get_args(alt)[0]
                    setattr(config, field_name, None if cls is type(None) else cls())
                    break
            else:
                raise CliError(f"{w}: no subcommand {sub!r} for {field_name}")
            continue
        if not w.startswith("--"):
            raise CliError(f"unexpected argument {w!r}")
        name, eq, value = w[2:].partition("=")
        path = name.replace("-", "_").split(".")
        obj = config
        for part in path[:-1]:
            if not dataclasses.is_dataclass(obj) or _field(obj, part) is None:
                raise CliError(f"unrecognized option --{name}")
            obj = getattr(obj, part)
        leaf = path[-1]
        negate = leaf.startswith("no_") and _field(obj, leaf) is None and _field(obj, leaf[3:]) is not None
        if negate:
            leaf = leaf[3:]
        f = _field(obj, leaf) if dataclasses.is_dataclass(obj) else None
        if f is None:
            raise CliError(f"unrecognized option --{name}")
        hint = _hint(obj, leaf)
        if any(isinstance(m, _Subcommand) and m.name == "<suppress>" for m in typing.get_args(hint)[1:]):
            raise CliError(f"--{name} is suppressed (not a command-line option)")
        if _strip(hint) is bool and not eq:
            setattr(obj, leaf, not negate)
            continue
        if not eq:
            if i >= len(words):
                raise CliError(f"--{name} needs a value")
            value = words[i]
            i += 1
        setattr(obj, leaf, _coerce(hint, value, f"--{name}"))


def rebuild(obj, skip=("model_spec",)):
    """Construct every config dataclass again from its fields, children first (what tyro.cli does),
    so that each __post_init__ sees the final values."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return obj
    kwargs = {}
    for f in dataclasses.fields(obj):
        if not f.init:
            continue
        v = getattr(obj, f.name)
        kwargs[f.name] = v if f.name in skip else rebuild(v, ())
    return type(obj)(**kwargs)


def check(item, roots):
    from torchtitan.config.manager import ConfigManager
    from torchtitan.trainer import Trainer

    env, words = common.parse_export(item["export"])
    common.set_rank_env(env, item["world_size"], item["gpus_per_node"])
    notes = []
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        manager = ConfigManager()
        step = "ConfigManager._load_config (--module/--config: the model registry)"
        try:
            config, rest = manager._load_config(words)
            notes.append(f"model {config.model_spec.name} {config.model_spec.flavor}")
        except Exception as e:
            first = common.rejection(e, roots, step)
            # The remaining steps still say what else the overrides would meet: run them on
            # torchtitan's own default Trainer.Config (no model), the rest of the export as given.
            rest = [w for i, w in enumerate(words) if w not in ("--module", "--config")
                    and (i == 0 or words[i - 1] not in ("--module", "--config"))]
            later = _after_load(manager, Trainer.Config(), rest, item, roots)
            if later.get("verdict") == "REJECTED":
                notes.append(f"then, on torchtitan's default Trainer.Config: {later['message']} "
                             f"[{later['where']}; {later['step']}]")
            # Where mist's note says what to add to torchtitan, add it as it says and load again:
            # the export is still rejected as it stands, but the note is shown to be enough.
            added = next((n for n in map(apply_flavor_note, item.get("mist_notes", [])) if n), None)
            if added:
                try:
                    config, _ = ConfigManager()._load_config(words)
                    again = _after_load(ConfigManager(), config, rest, item, roots)
                except Exception as e:
                    again = common.rejection(e, roots, step)
                notes.append(f"with the addition mist's note describes ({added}): {again['verdict']}" +
                             (f": {again['message']} [{again['where']}; {again['step']}]"
                              if again.get("verdict") == "REJECTED" else ""))
            first["notes"] = notes
            return first
        r = _after_load(manager, config, rest, item, roots)
    r["notes"] = notes + r.get("notes", [])
    return r


_FLAVOR_NOTE = re.compile(r'add a flavor "(?P<flavor>[^"]+)" to llama3_configs .*? with (?P<fields>.*?) given directly'
                          r'.*?rope=ComplexRoPE\.Config\((?P<rope>[^)]*)\).*? a function (?P<function>\w+)\(\) to torchtitan/models/llama3/config_registry\.py')


def apply_flavor_note(note):
    """Make the addition mist's note tells the user to make, as it says: a llama3 flavor built as _8b
    is with the note's fields, and a config function that is llama3_8b() with model_registry(flavor).
    The rotary theta and scaling the note leaves to the model's own config stay ComplexRoPE's
    defaults (no check reads them). Returns the function's name, or None when the note is not one."""
    m = _FLAVOR_NOTE.search(note)
    if not m:
        return None
    import torchtitan.models.llama3 as llama3
    import torchtitan.models.llama3.config_registry as registry
    def fields(text):
        return {k: (v == "True") if v in ("True", "False") else int(v) for k, v in re.findall(r"(\w+)=(\w+)", text)}

    f, rope = fields(m["fields"]), fields(m["rope"])

    def flavor(attn_backend, tp_gemm_backend="default"):
        dim, vocab = f["dim"], f["vocab_size"]
        return llama3.Llama3Model.Config(
            dim=dim, vocab_size=vocab, enable_weight_tying=f["enable_weight_tying"],
            tok_embeddings=llama3.Embedding.Config(num_embeddings=vocab, embedding_dim=dim,
                                                   param_init=llama3._EMBEDDING_INIT),
            norm=llama3.RMSNorm.Config(normalized_shape=dim, param_init=llama3._NORM_INIT),
            lm_head=llama3.Linear.Config(in_features=dim, out_features=vocab,
                                         param_init=llama3._output_linear_init(dim)),
            layers=llama3._build_llama3_layers(
                fuse_qkv=True, n_layers=f["n_layers"], dim=dim, n_heads=f["n_heads"], n_kv_heads=f["n_kv_heads"],
                hidden_dim=f["hidden_dim"], rope=llama3.ComplexRoPE.Config(**rope),
                attn_backend=attn_backend, tp_gemm_backend=tp_gemm_backend))

    llama3.llama3_configs[m["flavor"]] = flavor

    def function():
        original = registry.model_registry
        registry.model_registry = lambda _, **kw: original(m["flavor"], **kw)  # llama3_8b() as it is
        try:
            return registry.llama3_8b()
        finally:
            registry.model_registry = original

    setattr(registry, m["function"], function)
    return m["function"]


def _after_load(manager, config, rest, item, roots):
    from torchtitan.distributed.parallel_dims import ParallelDims

    step = "overrides (tyro.cli)"
    try:
        apply_overrides(config, rest)
    except CliError as e:
        return {"verdict": "REJECTED", "step": step, "error": "CliError", "message": str(e), "where": HARNESS}
    try:
        step = "Trainer.Config construction (__post_init__)"
        config = rebuild(config)
        manager.config = config
        step = "ConfigManager._validate_config"
        manager._validate_config()
        step = "ParallelDims.from_config"
        ParallelDims.from_config(config.parallelism, item["world_size"])
        if config.model_spec is not None:
            step = "model config update_from_config"
            config.model_spec.model.update_from_config(config=config)
    except (Exception, SystemExit) as e:
        return common.rejection(e, roots, step)
    return {"verdict": "ACCEPTED"}
