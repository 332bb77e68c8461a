"""Helpers of the DPO trainer's tests: pairs files in the data engine's format, runs of the trainer as a process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.stacks import REPO


def write_pairs(out: Path, n: int = 2) -> Path:
    """``n`` vision preference pairs (the data engine's ``dpo_pairs.jsonl`` format) over small random images."""
    import numpy as np
    from PIL import Image

    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        img = out / f"img{i}.png"
        Image.fromarray((np.random.RandomState(i).rand(56, 84, 3) * 255).astype("uint8")).save(img)
        text = f"Which bar is taller in chart {i}?\nA. left\nB. right\nPerform step-by-step reasoning of the problem."

        def turn(body: str) -> list[dict]:
            return [{"role": "assistant", "content": [{"type": "text", "text": f"<thoughts>\n{body}\n</thoughts>"}]}]

        rows.append(
            {
                "images": [str(img)],
                "prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}],
                "chosen": turn("Step 1: The left bar reaches higher than the right one. The answer is A."),
                "rejected": turn("Step 1: Bars are hard to see. Maybe the right one. The answer is B."),
                "question_key": f"q{i}",
                "chosen_key": f"q{i}#0",
                "rejected_key": f"q{i}#1",
            }
        )
    path = out / "dpo_pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),  # scripts/test.sh's workers: 1
    }


def metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def kill_when(proc: subprocess.Popen, ready: Path, timeout: float = 600) -> None:
    """SIGKILL ``proc``'s process group once ``ready`` exists (or fail after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the process ended (status {proc.returncode}) before {ready} appeared")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"{ready} did not appear within {timeout} s")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def python() -> str:
    return sys.executable
