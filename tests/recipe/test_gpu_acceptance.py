"""The CPU-checkable parts of the first-GPU acceptance kit (``scripts/gpu_acceptance.sh``): a clean skip without a GPU,
its plan within the device's 10-minute limit, the checks on the smoke runs' metrics (pass and fail cases; the CPU
driver test runs them on its real runs), the unit checks' result lines, the preflight's CPU answers, the summary."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import gpu_acceptance as ga
from tests.support.stacks import REPO

KIT = REPO / "scripts" / "gpu_acceptance.sh"


def _kit(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(KIT), str(tmp_path / "w")],
        env={**os.environ, "PYTHON": sys.executable, **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


@pytest.mark.skipif(ga.gpu_check().status == "PASS", reason="a CUDA GPU is visible here: the kit would run")
def test_the_kit_skips_cleanly_without_a_gpu(tmp_path):
    r = _kit(tmp_path, PATH="/usr/bin:/bin")  # no nvidia-smi on this PATH either
    assert r.returncode == 0 and r.stdout.startswith("SKIP gpu_acceptance: no GPU"), r.stdout + r.stderr
    summary = json.loads((tmp_path / "w" / "acceptance.json").read_text())
    assert summary["ok"] is True and [(c["name"], c["status"]) for c in summary["checks"]] == [("gpu", "SKIP")]


def test_the_kits_plan_fits_one_device_call():
    r = subprocess.run(
        ["bash", str(KIT), "/tmp/never-made"],
        env={**os.environ, "ACCEPT_PLAN": "1", "PYTHON": "py"},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    lines = {ln.split()[1]: ln for ln in r.stdout.splitlines()}
    assert r.returncode == 0 and list(lines) == ["preflight", "unit", "smoke", "metrics", "budget"]
    assert "-m gpu tests/gpu" in lines["unit"] and "smoke_gpu.sh" in lines["smoke"]
    assert "CUDA_VISIBLE_DEVICES=0" in lines["smoke"]
    budget = int(lines["budget"].split()[2])
    assert budget <= 570, "the device tool runs a command for at most 600 s"
    assert not Path("/tmp/never-made").exists()


# ----------------------------------------------------------------------------- what the smoke runs must show
def _step(step: int, **over) -> str:
    data = {
        "actor/grad_norm": 0.2,
        "actor/pg_loss": 0.0,
        "timing_s/gen": 3.0,
        "timing_s/ref": 1.0,
        "timing_s/update_actor": 2.0,
        "vsearch/mm_inputs_mb": 0.0002,
        "perf/max_memory_allocated_gb": 3.5,
        "vsearch/pixel_cache_hits": 2.0,
        "vsearch/pixel_cache_misses": 4.0,
        **over,
    }
    return json.dumps({"step": step, "data": data}) + "\n"


def _run_dir(tmp_path: Path, run1: list[str], run2: list[str], log2: str) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    (d / "run1.metrics.jsonl").write_text("".join(run1))
    (d / "run2.metrics.jsonl").write_text("".join(run2))
    (d / "run2.log").write_text(log2)
    return d


RESUMED = "... Resuming from /w/ckpts/cpu/driver/global_step_2 ...\n"


def test_metric_checks_pass_on_a_good_pair_of_runs(tmp_path):
    d = _run_dir(tmp_path, [_step(1, **{"actor/grad_norm": 0.0}), _step(2)], [_step(3)], RESUMED)
    checks = ga.metric_checks(d)
    assert [c.name for c in checks] == ["grad_norm", "passes", "mm_inputs", "memory", "pixel_cache", "resume_log"]
    assert all(c.status == "PASS" for c in checks), [c.line() for c in checks]


@pytest.mark.parametrize(
    ("over", "failing"),
    [
        ({"actor/grad_norm": math.nan}, "grad_norm"),
        ({"timing_s/old_log_prob": 4.0}, "passes"),
        ({"timing_s/ref": None}, "passes"),
        ({"vsearch/mm_inputs_mb": 5.4}, "mm_inputs"),
        ({"perf/max_memory_allocated_gb": 0.0}, "memory"),
        ({"vsearch/pixel_cache_misses": None}, "pixel_cache"),
    ],
)
def test_metric_checks_fail_on_what_they_name(tmp_path, over, failing):
    row = {k: v for k, v in over.items() if v is not None}
    d = _run_dir(tmp_path, [_step(1), _step(2, **row)], [_step(3)], RESUMED)
    if None in over.values():  # a metric not logged at all
        (d / "run1.metrics.jsonl").write_text(
            "".join(
                json.dumps(
                    {"step": s, "data": {k: v for k, v in json.loads(_step(s))["data"].items() if k not in over}}
                )
                + "\n"
                for s in (1, 2)
            )
        )
    bad = [c.name for c in ga.metric_checks(d) if c.status == "FAIL"]
    assert bad == [failing]


def test_metric_checks_without_a_resume_or_any_step(tmp_path):
    d = _run_dir(tmp_path, [_step(1)], [_step(3)], "started from scratch\n")
    assert [c.name for c in ga.metric_checks(d) if c.status == "FAIL"] == ["resume_log"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert [(c.name, c.status) for c in ga.metric_checks(empty)] == [("metrics", "FAIL")]
    # a CPU run logs zero memory: not required there
    d2 = tmp_path / "cpu"
    d2.mkdir()
    (d2 / "run1.metrics.jsonl").write_text(_step(1, **{"perf/max_memory_allocated_gb": 0.0}))
    (d2 / "run2.log").write_text(RESUMED)
    assert all(c.status == "PASS" for c in ga.metric_checks(d2, gpu=False))


# ----------------------------------------------------------------------------- unit lines, preflight, summary
def test_pytest_lines_reads_the_short_summary(tmp_path):
    log = tmp_path / "unit.log"
    log.write_text(
        "....s\n=== short test summary info ===\n"
        "PASSED tests/gpu/test_gpu_paths.py::test_log_probs_agree_across_the_attention_paths[cuda]\n"
        "FAILED tests/gpu/test_gpu_paths.py::test_sleep_wake_reload_gives_the_same_greedy_output - AssertionError: x\n"
        "SKIPPED [1] tests/gpu/test_gpu_paths.py:170: vllm not importable\n"
        "ERROR tests/gpu/test_gpu_paths.py::test_vllm_prompt_log_probs_match_the_trainers - RuntimeError: CUDA\n"
    )
    got = [(c.name, c.status) for c in ga.pytest_lines(log)]
    assert got == [
        ("test_log_probs_agree_across_the_attention_paths[cuda]", "PASS"),
        ("test_sleep_wake_reload_gives_the_same_greedy_output", "FAIL"),
        ("tests/gpu/test_gpu_paths.py:170", "SKIP"),
        ("test_vllm_prompt_log_probs_match_the_trainers", "FAIL"),
    ]
    assert ga.pytest_lines(tmp_path / "missing.log") == [
        ga.Check("unit", "FAIL", f"no test result in {tmp_path}/missing.log")
    ]


def test_preflight_answers_on_this_machine():
    versions = ga.versions_check({"torch": "0.0.0"})
    assert versions.status == "FAIL" and "expected {'torch': '0.0.0'}" in versions.detail
    torch = pytest.importorskip("torch")

    assert ga.versions_check({"torch": torch.__version__.split("+")[0]}).status == "PASS"
    if not torch.cuda.is_available():
        assert ga.gpu_check().status == "FAIL" and ga.flash_attn_check().status == "SKIP"
    assert ga.pytest_check().status == "PASS"
    assert ga.compiler_check().status in ("PASS", "FAIL")
    with pytest.raises(ValueError):
        ga.Check("x", "OK", "")


def test_summary_joins_every_step_and_fails_on_any_fail(tmp_path):
    (tmp_path / "preflight.tsv").write_text("gpu\tPASS\tH200\nversions\tPASS\tok\n")
    (tmp_path / "smoke.tsv").write_text("harmony\tPASS\tloads\ntime\tINFO\t512 s (budget 600 s)\n")
    s = ga.summarize(tmp_path / "a.json", [tmp_path / "preflight.tsv", tmp_path / "smoke.tsv", tmp_path / "no.tsv"])
    assert s["ok"] is True and [c["step"] for c in s["checks"]] == ["preflight"] * 2 + ["smoke"] * 2
    (tmp_path / "unit.tsv").write_text("test_x\tFAIL\tAssertionError\n")
    assert ga.summarize(tmp_path / "a.json", [tmp_path / "unit.tsv"])["ok"] is False
