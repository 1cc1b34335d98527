"""What the engine checks share: reading an export, the environment a rank sees, and where an
engine's exception was raised."""
import os
import shlex
import traceback

# Variables a launch sets or the engines read; each check clears them so one export's environment
# does not leak into the next.
ENV_VARS = ("CUDA_DEVICE_MAX_CONNECTIONS", "NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "WORLD_SIZE", "RANK",
            "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PYTORCH_CUDA_ALLOC_CONF")


def parse_export(text):
    """mist export's text: `export NAME=VALUE` lines, then options joined by backslash-newlines."""
    env, words = {}, []
    for line in text.replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            name, _, value = line[len("export "):].partition("=")
            env[name.strip()] = shlex.split(value)[0] if value.strip() else ""
        else:
            words += shlex.split(line)
    return env, words


def set_rank_env(env, world_size, gpus_per_node):
    for k in ENV_VARS:
        os.environ.pop(k, None)
    os.environ.update({"WORLD_SIZE": str(world_size), "RANK": "0", "LOCAL_RANK": "0",
                       "LOCAL_WORLD_SIZE": str(gpus_per_node), "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": "29500"})
    os.environ.update(env)


def where(exc, roots):
    """file:line of the innermost frame inside an engine checkout (else the innermost frame)."""
    frames = traceback.extract_tb(exc.__traceback__)
    roots = [os.path.realpath(r) + os.sep for r in roots if r]
    for f in reversed(frames):
        path = os.path.realpath(f.filename)
        for r in roots:
            if path.startswith(r):
                return f"{os.path.basename(r.rstrip(os.sep))}/{path[len(r):]}:{f.lineno}", f.line
    if frames:
        return f"{frames[-1].filename}:{frames[-1].lineno}", frames[-1].line
    return "?", None


def rejection(exc, roots, step):
    loc, line = where(exc, roots)
    msg = str(exc).strip() or (f"assert: {line.strip()}" if line else type(exc).__name__)
    if isinstance(exc, SystemExit):  # argparse: the message went to stderr, captured by the caller
        msg = f"argparse exited ({exc.code})"
    return {"verdict": "REJECTED", "step": step, "error": type(exc).__name__, "message": msg[:1500],
            "where": loc}
