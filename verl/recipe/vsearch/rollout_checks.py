"""Observers of verl 0.7.0's vLLM rollout for end-to-end checks (the CPU driver test, ``smoke_gpu.sh``).

Opt-in: ``VSEARCH_ROLLOUT_CHECKS_DIR=<dir>`` in the driver's environment plus
``+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=recipe.vsearch.rollout_checks.setup_worker``
(the CPU runs' hook, :func:`recipe.vsearch.cpu.setup.setup_worker`, calls :func:`install` too). Nothing here
changes what verl or vLLM compute; each observer wraps one verl method, calls it unchanged and appends one
JSON line per event to ``<dir>/<kind>-<pid>.jsonl``:

* ``weights`` (the FSDP worker process, after ``vLLMAsyncRollout.update_weights``, i.e. every actor ->
  rollout sync): every parameter of vLLM's model compared with the actor's full tensors it was just given
  (vLLM's fused ``qkv_proj`` / ``gate_up_proj`` rebuilt from the actor's ``q/k/v`` and ``gate/up``), within
  the rounding of vLLM's dtype; sha256 digests of the actor's tensors, all and the vision tower
  (``visual.*``: ViT blocks and the patch merger) alone;
* ``prompt`` (the ``vLLMHttpServer`` process, every ``generate``): the number of prompt tokens vLLM ran
  (its ``RequestOutput.prompt_token_ids``, after its own multimodal expansion of verl's de-duplicated
  image pads) and whether they equal the ``prompt_ids`` the recipe's agent loop sent;
* ``sleep`` (the FSDP worker process, around ``vLLMAsyncRollout.release`` / ``resume``): device memory
  free before and after (CUDA only; vLLM's CPU worker treats sleep as a no-op).

:func:`verify` turns the records and the run's step metrics into a list of problems; the CPU test asserts
finer points itself, ``smoke_gpu.sh`` prints :func:`verify`'s verdict.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import json
import math
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from insight_o3.base.json_types import JSONObject

ENV_DIR = "VSEARCH_ROLLOUT_CHECKS_DIR"
#: relative rounding of a float32 value stored in vLLM's dtype (round to nearest: half an ulp)
ROUNDING = {"bfloat16": 2.0**-8, "float16": 2.0**-11, "float32": 0.0}
_INSTALLED = False
_PROMPT: contextvars.ContextVar = contextvars.ContextVar("vsearch_recipe_prompt", default=None)


# ----------------------------------------------------------------------------- records
def record(kind: str, **fields: Any) -> None:
    directory = os.environ.get(ENV_DIR)
    if not directory:
        return
    Path(directory).mkdir(parents=True, exist_ok=True)
    line = json.dumps({"kind": kind, "pid": os.getpid(), "time": time.time(), **fields})
    with open(Path(directory) / f"{kind}-{os.getpid()}.jsonl", "a") as f:
        f.write(line + "\n")


def read_records(directory: str | Path) -> dict[str, list[JSONObject]]:
    """``{kind: [record, ...]}`` in time order."""
    out: dict[str, list[dict]] = {}
    for path in sorted(Path(directory).glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                out.setdefault(rec["kind"], []).append(rec)
    for recs in out.values():
        recs.sort(key=lambda r: r["time"])
    return out


def digest(named_tensors: Iterable[tuple[str, Any]], prefix: str = "") -> str:
    """sha256 (16 hex digits) over the names and bytes of the tensors whose name starts with ``prefix``."""
    h = hashlib.sha256()
    for name, tensor in sorted(named_tensors, key=lambda x: x[0]):
        if name.startswith(prefix):
            h.update(name.encode())
            h.update(tensor.detach().contiguous().cpu().view(-1).view(dtype=_u8()).numpy().tobytes())
    return h.hexdigest()[:16]


def _u8() -> Any:
    import torch

    return torch.uint8


# ----------------------------------------------------------------------------- weight comparison
def expected_vllm_params(model: Any, named_tensors: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """What each vLLM parameter must hold after loading ``named_tensors`` (checkpoint-format names, as verl
    hands them to ``load_weights``): the model's ``hf_to_vllm_mapper`` renames, ``packed_modules_mapping``
    (and the vision tower's ``attn.q/k/v``) fuses by concatenation along dim 0 in the mapping's order."""
    import torch

    params = dict(model.named_parameters())
    mapper = getattr(model, "hf_to_vllm_mapper", None)
    packed = dict(getattr(model, "packed_modules_mapping", {}) or {})
    packed.setdefault("qkv", ["q", "k", "v"])
    direct: dict[str, Any] = {}
    parts: dict[str, dict[int, Any]] = {}
    for name, tensor in named_tensors:
        mapped = mapper._map_name(name) if mapper is not None else name
        if mapped is None:
            continue
        if mapped in params:
            direct[mapped] = tensor
            continue
        for fused, subs in packed.items():
            hit = next((i for i, sub in enumerate(subs) if f".{sub}." in mapped), None)
            if hit is not None:
                target = mapped.replace(f".{subs[hit]}.", f".{fused}.")
                if target in params:
                    parts.setdefault(target, {})[hit] = tensor
                    break
    for target, pieces in parts.items():
        direct[target] = torch.cat([pieces[i] for i in sorted(pieces)], dim=0)
    return direct


def compare_weights(model: Any, named_tensors: Iterable[tuple[str, Any]], dtype: str) -> dict[str, Any]:
    """Every parameter of vLLM's ``model`` against the actor's tensors (see :func:`expected_vllm_params`)."""

    params = dict(model.named_parameters())
    expected = expected_vllm_params(model, named_tensors)
    rel = ROUNDING.get(dtype, 2.0**-8)
    worst_abs, worst_excess, bad, unchecked = 0.0, 0.0, [], []
    for name, param in params.items():
        want = expected.get(name)
        if want is None:
            unchecked.append(name)
            continue
        got = param.detach().float().cpu()
        want = want.detach().float().cpu()
        if got.shape != want.shape:
            if got.numel() == want.numel():
                want = want.reshape(got.shape)
            elif got.dim() == want.dim() and got.shape[0] >= want.shape[0] and got.shape[1:] == want.shape[1:]:
                got = got[: want.shape[0]]  # vocabulary padded by vLLM
            else:
                bad.append(f"{name}: shape {tuple(got.shape)} vs {tuple(want.shape)}")
                continue
        diff = (got - want).abs()
        allowed = want.abs() * rel + 1e-30
        worst_abs = max(worst_abs, float(diff.max()))
        excess = float((diff - allowed).max())
        worst_excess = max(worst_excess, excess)
        if excess > 0:
            bad.append(f"{name}: max |diff| {float(diff.max()):.3g} beyond {dtype} rounding")
    return {
        "n_params": len(params),
        "n_checked": len(params) - len(unchecked),
        "unchecked": unchecked[:10],
        "mismatched": bad[:10],
        "max_abs_diff": worst_abs,
        "ok": not bad and not unchecked,
    }


# ----------------------------------------------------------------------------- observers
def _rank() -> int:
    try:
        import torch.distributed as dist

        return dist.get_rank() if dist.is_initialized() else 0
    except Exception:
        return 0


def _device_free() -> int | None:
    import torch

    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    free, _ = torch.cuda.mem_get_info()
    return int(free)


def _patch_rollout(module: Any) -> None:
    cls = module.vLLMAsyncRollout
    if getattr(cls, "_vsearch_checks", False):
        return
    update, release, resume = cls.update_weights, cls.release, cls.resume

    @functools.wraps(update)
    async def update_weights(self: Any, weights: Any, **kwargs: Any) -> Any:
        if kwargs.get("peft_config") is not None:
            return await update(self, weights, **kwargs)
        named = [(n, t) for n, t in weights]  # the actor's full tensors (gathered on every rank)
        result = await update(self, iter(named), **kwargs)
        self._vsearch_syncs = getattr(self, "_vsearch_syncs", 0) + 1
        model = self.inference_engine.worker.model_runner.model
        report = compare_weights(model, named, str(self.config.dtype))
        record(
            "weights",
            rank=_rank(),
            sync=self._vsearch_syncs,
            n_tensors=len(named),
            actor_digest=digest(named),
            visual_digest=digest(named, "visual."),
            n_visual=sum(n.startswith("visual.") for n, _ in named),
            dtype=str(self.config.dtype),
            **report,
        )
        return result

    @functools.wraps(release)
    async def release_(self: Any) -> Any:
        before = _device_free()
        out = await release(self)
        record("sleep", rank=_rank(), event="release", free_before=before, free_after=_device_free())
        return out

    @functools.wraps(resume)
    async def resume_(self: Any, tags: Any) -> Any:
        before = _device_free()
        out = await resume(self, tags)
        record("sleep", rank=_rank(), event=f"resume:{','.join(tags)}", free_before=before, free_after=_device_free())
        return out

    cls.update_weights, cls.release, cls.resume = update_weights, release_, resume_
    cls._vsearch_checks = True


def _patch_server(module: Any) -> None:
    """Observe ``vLLMHttpServer.generate`` without touching the class: Ray copies an actor class's methods
    when verl decorates it (at the module's import) and ships them by value, so a later patch of the class
    never reaches the actor. What the copy looks up at call time is the module-level helper that de-duplicates
    the image pads (it receives the recipe's ``prompt_ids`` first thing) and vLLM's ``AsyncLLM.generate``."""
    if getattr(module, "_vsearch_checks", False):
        return
    dedup = module._qwen2_5_vl_dedup_image_tokens

    @functools.wraps(dedup)  # same module and qualname: cloudpickle keeps shipping it by reference
    def dedup_(prompt_ids: Any, processor: Any) -> Any:
        _PROMPT.set(list(prompt_ids))  # the calling generate()'s task context
        return dedup(prompt_ids, processor)

    module._qwen2_5_vl_dedup_image_tokens = dedup_
    module._vsearch_checks = True

    from vllm.v1.engine.async_llm import AsyncLLM

    engine_generate = AsyncLLM.generate

    @functools.wraps(engine_generate)
    def engine_generate_(self: Any, *args: Any, **kwargs: Any) -> Any:
        inner = engine_generate(self, *args, **kwargs)
        prompt = kwargs.get("prompt", args[0] if args else None)
        images = ((prompt or {}).get("multi_modal_data") or {}).get("image") if isinstance(prompt, dict) else None

        async def observed() -> Any:
            last = None
            async for out in inner:
                last = out
                yield out
            sent = _PROMPT.get()
            if sent is not None and last is not None:
                ran = list(last.prompt_token_ids or [])
                record(
                    "prompt",
                    request_id=str(last.request_id),
                    recipe_len=len(sent),
                    vllm_len=len(ran),
                    equal=ran == sent,
                    images=len(images or []),
                    generated=len(last.outputs[0].token_ids) if last.outputs else 0,
                )

        return observed()

    AsyncLLM.generate = engine_generate_


def install() -> bool:
    """Install the observers in this process when :data:`ENV_DIR` is set (idempotent)."""
    global _INSTALLED
    if _INSTALLED or not os.environ.get(ENV_DIR):
        return _INSTALLED
    from .import_hooks import after_import

    after_import("verl.workers.rollout.vllm_rollout.vllm_rollout", _patch_rollout)
    after_import("verl.workers.rollout.vllm_rollout.vllm_async_server", _patch_server)
    _INSTALLED = True
    return True


def setup_worker() -> None:
    """``worker_process_setup_hook`` of runs on GPUs (``smoke_gpu.sh``)."""
    install()


# ----------------------------------------------------------------------------- verdict
def step_metrics(metrics_jsonl: str | Path) -> dict[int, JSONObject]:
    out: dict[int, dict] = {}
    for line in Path(metrics_jsonl).read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            out.setdefault(int(rec["step"]), {}).update(rec["data"])
    return out


def verify(records: dict[str, list[dict]], steps: dict[int, dict], *, gpu: bool) -> list[str]:
    """Problems (empty: all checks hold): every sync's vLLM weights equal the actor's within vLLM's dtype
    rounding, for every parameter; the vision tower is bit-identical across syncs (frozen) while the rest
    changes after an update; every generate ran exactly the recipe's prompt; grad_norm finite every step and
    > 0 in every step with a learning signal (and in one step at least); on GPU, sleep frees device memory."""
    problems = []
    syncs = records.get("weights", [])
    if not syncs:
        problems.append("no weight sync recorded")
    for r in syncs:
        if not r["ok"]:
            problems.append(
                f"rank {r['rank']} sync {r['sync']}: rollout weights differ from the actor's "
                f"({r['n_checked']}/{r['n_params']} checked; {r['mismatched'] or r['unchecked']})"
            )
    by_rank: dict[int, list[dict]] = {}
    for r in syncs:
        by_rank.setdefault(r["rank"], []).append(r)
    for rank, rs in by_rank.items():
        if len({r["visual_digest"] for r in rs}) != 1:
            problems.append(f"rank {rank}: the frozen vision tower changed between syncs")
        if len(rs) > 1 and len({r["actor_digest"] for r in rs}) == 1:
            problems.append(f"rank {rank}: the actor's weights never changed across {len(rs)} syncs")
    prompts = records.get("prompt", [])
    if not prompts:
        problems.append("no generate request recorded")
    wrong = [p for p in prompts if not p["equal"] or p["vllm_len"] != p["recipe_len"]]
    if wrong:
        problems.append(
            f"{len(wrong)}/{len(prompts)} requests: vLLM ran another prompt than the recipe sent: {wrong[:3]}"
        )
    # grad_norm: finite every step, and non-zero whenever the step has a learning signal (some advantage is not
    # 0). A step whose rewards are all equal has none: with lr 1e-6 the actor stays within fp32 rounding of the
    # reference policy, so the low-var KL term and its gradient are exactly 0 too.
    for step, m in sorted(steps.items()):
        g = m.get("actor/grad_norm")
        if g is None:
            continue
        signal = m.get("critic/advantages/max", 1.0) != 0 or m.get("critic/advantages/min", -1.0) != 0
        if not math.isfinite(g) or (signal and g <= 0):
            problems.append(f"step {step}: actor/grad_norm = {g} (advantages not all zero: {signal})")
    if steps and not any((m.get("actor/grad_norm") or 0) > 0 for m in steps.values()):
        problems.append("no step had a non-zero gradient")
    if gpu:
        releases = [r for r in records.get("sleep", []) if r["event"] == "release"]
        if not releases:
            problems.append("no rollout sleep recorded")
        for r in releases:
            if r["free_before"] is None or r["free_after"] <= r["free_before"]:
                problems.append(f"rank {r['rank']}: sleep did not free device memory ({r})")
    return problems


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(allow_abbrev=False, description="verdict of a run's rollout checks")
    ap.add_argument("records", help=f"the run's {ENV_DIR}")
    ap.add_argument("metrics", help="the run's metrics JSONL (verl's file logger)")
    ap.add_argument("--gpu", action="store_true", help="also require that sleep frees device memory")
    args = ap.parse_args(argv)
    records = read_records(args.records)
    problems = verify(records, step_metrics(args.metrics), gpu=args.gpu)
    counts = {k: len(v) for k, v in records.items()}
    print(f"[rollout checks] records: {counts}")
    for p in problems:
        print(f"[rollout checks] FAIL {p}")
    print("[rollout checks] " + ("FAILED" if problems else "all checks passed"))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
