"""What the offline data demos (``build_o3_bench_demo``, ``build_reasoning_data_demo``) share: their drawing flags,
running one step of the real command as its command line with its summary printed, and the line a stopped step
ends with.

Each demo starts a scripted endpoint, then runs its command's steps one by one through that command's ``main``
(so the step is exactly what a user runs); :func:`run_step` prints the command line and the step's own output,
and counts the requests the step made.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..base.json_types import JSONObject
from ..endpoints.scripted_server import ScriptedOpenAIServer
from ._shared import add_output_dir


def add_draw_flags(
    p: argparse.ArgumentParser, *, output_dir: str, output_help: str, num_images: int, questions: int, min_side: int
) -> None:
    """The flags that say where a demo writes and what it draws (each demo its own defaults)."""
    add_output_dir(p, default=output_dir, help=output_help)
    p.add_argument("--num_images", type=int, default=num_images, help="demo images (half charts, half maps)")
    p.add_argument("--questions_per_image", type=int, default=questions, help="demo questions per image")
    p.add_argument("--min_side", type=int, default=min_side, help="smallest image side in px (O3-Bench: ~3000)")
    p.add_argument("--seed", type=int, default=0, help="draws the images (and what the scripts decide)")


def check_draw_flags(p: argparse.ArgumentParser, a: argparse.Namespace, min_side: int, why: str) -> None:
    """Refuse a draw that cannot be made (argparse's error: status 2)."""
    if a.num_images < 1 or a.questions_per_image < 1:
        p.error("--num_images and --questions_per_image must be at least 1")
    if a.min_side < min_side:
        p.error(f"--min_side must be at least {min_side} ({why})")


def jsonl_rows(path: Path) -> list[JSONObject]:
    """The rows of a JSONL file the step before wrote (none when it is not there)."""
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


@dataclass(frozen=True)
class StepRun:
    """One step as a demo ran it: its exit status, its summary (the last JSON line it printed), the requests it made
    and its wall time."""

    rc: int
    summary: JSONObject
    requests: int
    seconds: float


def run_step(
    prog: str, label: str, argv: list[str], main: Callable[[list[str]], int], srv: ScriptedOpenAIServer
) -> StepRun:
    """Run one step as its command line (``main(argv)``); print ``label``, the command and the step's own lines."""
    print(f"{label}: {prog} {shlex.join(argv)}", flush=True)
    before, t0 = srv.count, time.perf_counter()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    summary: JSONObject = {}
    for line in out.getvalue().splitlines():
        with contextlib.suppress(ValueError):
            parsed = json.loads(line)
            if isinstance(parsed, dict):
                summary = parsed
        print(f"      {line}")
    return StepRun(rc, summary, srv.count - before, time.perf_counter() - t0)


def stopped(step: str, rc: int) -> int:
    """Say which step stopped the demo (its own message is above) and how to go on; returns its status."""
    print(
        f"the {step} step ended with status {rc} (its message is above); rerun this command to resume", file=sys.stderr
    )
    return rc
