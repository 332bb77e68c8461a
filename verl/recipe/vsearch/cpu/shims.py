"""What verl 0.7.0's FSDP workers and agent loops expect from a CUDA machine, provided on a CPU one.

Each shim is a no-op where CUDA is available (:func:`install` returns without touching anything), so
this module can never change a GPU run. Installed in every Ray worker process by
:func:`recipe.vsearch.cpu.setup.setup_worker`.

* **Device module.** verl calls ``get_torch_device().<fn>`` (``torch.cpu`` here) for RNG state, cache
  and memory statistics that ``torch.cpu`` does not have: RNG goes to torch's CPU generator, cache and
  device-memory calls are no-ops / zeros (host memory is what ``perf/cpu_memory_used_gb`` reports).
* **Process group.** ``ActorRolloutRefWorker`` asks for ``"cpu:gloo,cpu:nccl"`` (verl's
  ``get_nccl_backend()`` is NCCL unless on NPU); NCCL does not exist on CPU, so the backend becomes gloo.
* **FSDP2 offload.** The reference policy is always wrapped with ``CPUOffloadPolicy(pin_memory=True)``;
  pinned memory needs an accelerator, so on CPU the policy is built with ``pin_memory=False``.
* **Processor.** transformers 4.57's ``AutoProcessor`` for Qwen2.5-VL also builds the video processor,
  which needs torchvision (absent from the CPU stack, see the recipe README). verl's ``hf_processor``
  then silently returns ``None`` and every image disappears from the rollouts. The fallback builds
  the real ``Qwen2_5_VLProcessor`` with its image half only (:mod:`recipe.vsearch.cpu.processor`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeAlias

from ..import_hooks import after_import

_INSTALLED = False


#: How a patch is applied (``setattr``; tests pass a recorder).
SetAttr: TypeAlias = Callable[[Any, str, Any], None]


def patch_processor(set_attr: SetAttr = setattr) -> None:
    """``AutoProcessor.from_pretrained`` falls back to the image-only processor when the video half
    cannot be built for lack of torchvision (``set_attr``: ``setattr`` or pytest's ``monkeypatch.setattr``)."""
    from transformers import AutoConfig, AutoProcessor

    original = AutoProcessor.from_pretrained.__func__

    @functools.wraps(original)
    def from_pretrained(cls: Any, name_or_path: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(cls, name_or_path, *args, **kwargs)
        except ImportError as e:
            if "torchvision" not in str(e).lower():
                raise
            if getattr(AutoConfig.from_pretrained(name_or_path), "model_type", None) != "qwen2_5_vl":
                raise
            from .processor import image_only_processor

            return image_only_processor(str(name_or_path))

    set_attr(AutoProcessor, "from_pretrained", classmethod(from_pretrained))


def patch_device_module() -> None:
    """The ``torch.cuda`` functions verl calls through ``get_torch_device()``, on ``torch.cpu``."""
    import torch

    dev = torch.cpu
    zero = lambda *a, **k: 0  # noqa: E731
    none = lambda *a, **k: None  # noqa: E731
    fill = {
        "get_rng_state": lambda *a, **k: torch.get_rng_state(),
        "set_rng_state": lambda state, *a, **k: torch.set_rng_state(state),
        "manual_seed": lambda seed: torch.manual_seed(seed),
        "manual_seed_all": lambda seed: torch.manual_seed(seed),
        "empty_cache": none,
        "reset_peak_memory_stats": none,
        "set_per_process_memory_fraction": none,
        "memory_allocated": zero,
        "max_memory_allocated": zero,
        "memory_reserved": zero,
        "max_memory_reserved": zero,
        "mem_get_info": lambda *a, **k: (0, 0),
        "get_device_name": lambda *a, **k: "cpu",
    }
    for name, fn in fill.items():
        if not hasattr(dev, name):
            setattr(dev, name, fn)


def patch_process_group(set_attr: SetAttr = setattr) -> None:
    """``init_process_group`` with an NCCL backend (string) uses gloo instead."""
    import torch.distributed as dist

    original = dist.init_process_group

    @functools.wraps(original)
    def init_process_group(*args: Any, backend: Any = None, **kwargs: Any) -> Any:
        if isinstance(backend, str) and "nccl" in backend:
            backend = "gloo"
        return original(*args, backend=backend, **kwargs)

    set_attr(dist, "init_process_group", init_process_group)


def patch_fsdp2_offload(fsdp_workers: Any, set_attr: SetAttr = setattr) -> None:
    """verl's FSDP workers build ``CPUOffloadPolicy`` with ``pin_memory=False``."""
    original = fsdp_workers.CPUOffloadPolicy
    if original is None:
        return

    def cpu_offload_policy(*args: Any, pin_memory: bool = True, **kwargs: Any) -> Any:
        return original(*args, pin_memory=False, **kwargs)

    set_attr(fsdp_workers, "CPUOffloadPolicy", cpu_offload_policy)


def install() -> bool:
    """Install the shims in this process (idempotent). Returns False (and does nothing) with CUDA."""
    global _INSTALLED
    import torch

    if torch.cuda.is_available():
        return False
    if _INSTALLED:
        return True
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    patch_device_module()
    patch_process_group()
    patch_processor()
    after_import("verl.workers.fsdp_workers", patch_fsdp2_offload)
    _INSTALLED = True
    return True
