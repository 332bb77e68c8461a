"""training/dpo/smoke_gpu.sh without a GPU: its plan (SMOKE_PLAN=1) names every check in order with the commands it
would run, and those commands exist (their --help runs); without a GPU a real run says so on one FAIL line and skips
the rest."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.stacks import REPO

SCRIPT = REPO / "training" / "dpo" / "smoke_gpu.sh"


def _smoke(tmp_path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "work")],
        env={**os.environ, "PYTHON": sys.executable, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_plan_names_every_check_in_order(tmp_path):
    r = _smoke(tmp_path, SMOKE_PLAN="1", SMOKE_MODEL=str(tmp_path / "qwen"))
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line[:4] in ("PLAN", "PASS", "SKIP", "FAIL")]
    assert [line.split()[1] for line in lines] == ["gpu", "stack", "train", "rounds", "real", "time"]
    text = r.stdout
    assert (
        "-m tests.support.dpo_train_run --device cuda" in text
        and "-m tests.support.dpo_rounds_run --device cuda" in text
    )
    assert f"--real {tmp_path / 'qwen'}" in text
    for module in ("tests.support.dpo_train_run", "tests.support.dpo_rounds_run"):
        help_ = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True)
        assert help_.returncode == 0 and "--device" in help_.stdout, help_.stderr


def test_without_a_gpu_one_fail_line_and_the_rest_skipped(tmp_path):
    r = _smoke(tmp_path, CUDA_VISIBLE_DEVICES="")
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert lines[0].startswith("FAIL gpu") and "no CUDA GPU" in lines[0]
    assert [line.split()[0] for line in lines[1:4]] == ["SKIP", "SKIP", "SKIP"]
