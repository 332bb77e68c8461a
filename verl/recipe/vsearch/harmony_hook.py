"""Offline start-up of verl 0.7.0 + vLLM 0.12.0: tolerate a missing openai_harmony vocab in *every* process.

Why. ``verl/workers/rollout/vllm_rollout/vllm_async_server.py`` calls vLLM's
``vllm.entrypoints.harmony_utils.get_encoding()`` at import time when vLLM is 0.12.0. That loads the
``o200k_base`` vocab of gpt-oss's "harmony" chat format, downloading it when it is not cached, so an
offline node fails with ``HarmonyError: error downloading or loading vocab file`` in every process that
imports the module: the TaskRunner, the FSDP workers, the rollout servers, the agent-loop workers and
vLLM's EngineCore, which vLLM *spawns* (a fresh interpreter that unpickles verl's executor and so
re-imports the module). Qwen2.5-VL never uses the harmony format.

What. This file is installed as a top-level module ``vsearch_harmony_hook`` next to a one-line
``vsearch_harmony_hook.pth`` in a venv's site-packages (``python -m recipe.vsearch.offline
install-harmony-hook``), so Python runs it at the start of every interpreter of that venv, spawned ones
included. It only registers an import hook (no import of vLLM, nothing else at start-up): when
``vllm.entrypoints.harmony_utils`` is imported, its ``get_encoding`` is wrapped so that a failure to load
the vocab prints one warning and returns ``None`` instead of raising. ``get_encoding`` keeps trying on
later calls, and gpt-oss models still fail when they actually need the encoding.

It must not import anything from the recipe: it runs before ``PYTHONPATH`` entries matter.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

TARGET = "vllm.entrypoints.harmony_utils"
MARKER = "_vsearch_offline_tolerant"


def _wrap(module: Any) -> None:
    original = getattr(module, "get_encoding", None)
    if original is None or getattr(original, MARKER, False):
        return

    def get_encoding(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except Exception as e:  # openai_harmony.HarmonyError (vocab not cached, no network)
            if "vocab" not in str(e):
                raise
            if not getattr(get_encoding, "_warned", False):
                get_encoding._warned = True  # type: ignore[attr-defined]
                print(
                    f"[vsearch] openai_harmony vocab unavailable ({e}); continuing without the gpt-oss harmony "
                    "encoding (not used by Qwen2.5-VL). Stage the vocab with TIKTOKEN_RS_CACHE_DIR / "
                    "TIKTOKEN_ENCODINGS_BASE to silence this (recipe/vsearch/README.md, Offline nodes).",
                    file=sys.stderr,
                    flush=True,
                )
            return None

    setattr(get_encoding, MARKER, True)
    get_encoding.__wrapped__ = original  # type: ignore[attr-defined]
    module.get_encoding = get_encoding


class _HarmonyFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_wrap(module: ModuleType) -> None:
            exec_module(module)
            _wrap(module)

        spec.loader.exec_module = exec_and_wrap  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Idempotent: wrap now if the module is already imported, else when it is."""
    if TARGET in sys.modules:
        _wrap(sys.modules[TARGET])
    if not any(isinstance(f, _HarmonyFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _HarmonyFinder())


install()
