"""``python_interpreter``: the RL rollout's ``PythonInterpreterTool`` (RL/.../tools/python_interpreter_tool.py at
c5c02a4) — its pattern check, restricted builtins, safe imports and result texts (``[Output]``, ``[Error]``,
``[Variables]``, ``[Success] Code executed (no output)``, ``[Timeout] Execution exceeded 30s``) — run in a real
sandbox (:mod:`.sandbox`) instead of the release's thread of the trainer's own process, whose restrictions the
code can step around (``__import__('sys').modules['os']``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..base.json_types import JSONObject
from .base import BackendFailed, BadArguments, LimitExceeded, Observation, Unavailable
from .sandbox import SandboxLimits, run_python
from .tool import Tool, ToolContext

ERR = "Tool execution error:\n"
DANGEROUS_PATTERNS = (
    "import os",
    "import subprocess",
    "import sys",
    "from os import",
    "from subprocess import",
    "from sys import",
    "exec(",
    "eval(",
    "compile(",
    "open(",
    "file(",
)
DESCRIPTION = (
    "Execute Python code in a sandboxed environment. Use this to run Python code and get the execution results.\n"
    "**Make sure to use print() for any output you want to see in the results.**"
)


def security_error(code: str) -> str | None:
    """The release's refusal of a code containing one of :data:`DANGEROUS_PATTERNS` (case-insensitive)."""
    low = code.lower()
    for pattern in DANGEROUS_PATTERNS:
        if pattern in low:
            return f"[Security Error] '{pattern}' not allowed for safety reasons"
    return None


def sandbox_limits(ctx: ToolContext) -> SandboxLimits:
    s = ctx.settings
    return SandboxLimits(
        seconds=float(s.get("python_seconds", 30)),
        memory=int(s.get("python_memory", 2 * 2**30)),
        processes=int(s.get("python_processes", 32)),
        output_chars=min(int(s.get("python_output_chars", 100_000)), ctx.limits.output_chars),
        file_bytes=int(s.get("python_file_bytes", 64 * 2**20)),
    )


class PythonInterpreterTool(Tool):
    name = "python_interpreter"
    schema: JSONObject = {
        "name": "python_interpreter",
        "description": DESCRIPTION,
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The Python code to execute."}},
            "required": ["code"],
        },
    }

    async def run(self, arguments: Mapping[str, Any], ctx: ToolContext) -> Observation:
        code = arguments.get("code")
        if not isinstance(code, str):
            raise BadArguments(f"{ERR}'code' (a string of Python) is required for python_interpreter.")
        refused = security_error(code)
        if refused is not None:
            raise BadArguments(refused)
        limits = sandbox_limits(ctx)
        res = await run_python(code, limits, unshare=str(ctx.settings.get("sandbox_unshare", "unshare")))
        if res.refused is not None:
            raise Unavailable(f"{ERR}python_interpreter is unavailable here: {res.refused}.")
        if res.limit == "time" and res.text is None:
            raise LimitExceeded(f"[Timeout] Execution exceeded {limits.seconds:g}s")
        if res.text is None:
            raise BackendFailed(f"{ERR}python_interpreter: the sandbox returned no readable result.")
        if res.limit is not None:
            raise LimitExceeded(res.text)
        return Observation(res.text)
