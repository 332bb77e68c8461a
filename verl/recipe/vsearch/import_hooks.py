"""Run a function right after a module is imported, in this process (used by the CPU shims and the rollout
observers, on CPU and GPU alike), so that processes which never import the module do not pay for importing it."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class _AfterImport(importlib.abc.MetaPathFinder):
    """Run ``fn(module)`` right after ``name`` is imported (so that processes which never import it,
    e.g. the agent-loop workers, do not pay for importing it)."""

    def __init__(self, name: str, fn: Callable[[ModuleType], None]) -> None:
        self.name, self.fn = name, fn

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return None  # not importable: the import fails as it would without the hook
        loader, fn = spec.loader, self.fn
        exec_module = loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            fn(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def after_import(name: str, fn: Callable[[ModuleType], None]) -> None:
    if name in sys.modules:
        fn(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, fn))
