"""The recipe's real driver end to end on CPU: ``bash recipe/vsearch/train.sh`` -> ``python -m
recipe.vsearch.main`` with real Ray, verl 0.7.0's FSDP2 workers (2 gloo ranks), ``RayPPOTrainer``'s
machinery through ``VSearchRayPPOTrainer.fit``, the recipe's agent loops against a scripted
OpenAI-compatible vReasoner/judge, and the ``hf_cpu`` rollout replica in vLLM's place
(``tests/support/recipe_cpu_run.py``, ``verl/recipe/vsearch/cpu``).

Run 1 trains 2 steps, validates and saves ``global_step_2``; run 2 resumes from it, trains step 3,
validates and saves ``global_step_3``. Standalone: ``PYTHONPATH=.:verl .venv/bin/python -m
tests.support.recipe_cpu_run --work /tmp/vsearch-cpu``.
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import require_module, require_recipe

require_recipe()
require_module("ray")

from tests.support.recipe_cpu_run import SECRET, run_all  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.verl, pytest.mark.timeout(1800)]

SYNC = re.compile(r"\[hf_cpu\] replica (\d+): weight sync (\d+), (\d+) tensors, sha256 ([0-9a-f]{16})")


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    summary = run_all(tmp_path_factory.mktemp("driver_cpu"))
    for name in ("run1", "run2"):
        run = summary[name]
        assert run is not None and run["rc"] == 0, f"{name} failed:\n{(run or summary['run1'])['log'][-6000:]}"
    return summary


def _steps(run: dict) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for rec in run["metrics"]:
        out.setdefault(rec["step"], {}).update(rec["data"])
    return out


def _syncs(log: str) -> dict[int, list[str]]:
    """Weight digests received by each rollout replica, in order."""
    out: dict[int, list[str]] = {}
    for m in SYNC.finditer(log):
        out.setdefault(int(m.group(1)), []).append(m.group(4))
    return out


def test_two_steps_checkpoint_then_resume_at_step_3_and_validate(cpu_run):
    from pathlib import Path

    ckpt = Path(cpu_run["ckpt_dir"])
    run1, run2 = _steps(cpu_run["run1"]), _steps(cpu_run["run2"])
    assert sorted(run1) == [1, 2] and sorted(run2) == [3]
    assert [run1[1]["training/global_step"], run1[2]["training/global_step"], run2[3]["training/global_step"]] == [
        1,
        2,
        3,
    ]
    # verl's FSDP checkpoint of both ranks, the dataloader state and the HF config/tokenizer/processor
    for step in (2, 3):
        actor = ckpt / f"global_step_{step}" / "actor"
        for rank in (0, 1):
            for kind in ("model", "optim", "extra_state"):
                assert (actor / f"{kind}_world_size_2_rank_{rank}.pt").is_file()
        assert (ckpt / f"global_step_{step}" / "data.pt").is_file()
        assert (actor / "huggingface" / "preprocessor_config.json").is_file()
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    assert f"local_global_step_folder: {ckpt}/global_step_2" in cpu_run["run1"]["log"]
    assert f"Resuming from {ckpt}/global_step_2" in cpu_run["run2"]["log"]
    assert "Training from scratch" in cpu_run["run1"]["log"] and "Training from scratch" not in cpu_run["run2"]["log"]
    # validation at the end of each run: the in-loop benchmark question is answered and judged correct
    for metrics in (run1[2], run2[3]):
        assert metrics["val-core/cpu_bench/vsearch/accuracy_reward"] == 1.0
        assert metrics["val-aux/cpu_bench/vsearch/critical_failure_ratio"] == 0.0
        assert metrics["val-aux/cpu_bench/vsearch/has_answer"] == 1.0
        assert metrics["val-aux/cpu_region/vsearch/outloop_samples"] == 1.0
        assert 0.0 <= metrics["val-aux/cpu_region/vsearch/outloop_mean_iou"] <= 1.0


def test_each_step_runs_both_loops_and_verls_update(cpu_run):
    steps = {**_steps(cpu_run["run1"]), **_steps(cpu_run["run2"])}
    for step in (1, 2, 3):
        m = steps[step]
        # 2 prompts x n=2: one out-of-loop group and two in-loop episodes (one vSearcher call each)
        assert m["vsearch/outloop_samples"] == 2.0 and m["vsearch/inloop_samples"] == 2.0
        assert m["vsearch/calls_per_qa"] == 1.0 and m["vsearch/critical_failure_ratio"] == 0.0
        # c is judged only for answered episodes (the fork ends an episode whose vSearcher answer does not
        # parse: search_invalid, no answer); the judge alternates over the answered ones
        assert m["vsearch/accuracy_reward"] in (0.0, 0.5, 1.0)
        assert m["vsearch/accuracy_reward"] <= m["vsearch/has_answer"]
        for key in (
            "actor/pg_loss",
            "actor/kl_loss",
            "actor/grad_norm",
            "actor/entropy",
            "critic/score/mean",
            "critic/advantages/mean",
            "global_seqlen/mean",
            "timing_s/update_actor",
            "timing_s/gen",
            "vsearch/mm_inputs_mb",
        ):
            assert isinstance(m[key], (int, float)), key
        # the driver's image inputs of the step: every row carries its image(s) (160-token budget, fp32)
        assert 0 < m["vsearch/mm_inputs_row_max_mb"] <= m["vsearch/mm_inputs_mb"]
        assert m["actor/lr"] == pytest.approx(1e-6)
    # the warm-started policy makes valid calls: some samples are rewarded
    assert max(steps[s]["critic/score/max"] for s in (1, 2, 3)) > 0
    assert cpu_run["api_requests"] > 0


def test_rollout_weights_follow_the_actor_across_the_resume(cpu_run):
    first, second = _syncs(cpu_run["run1"]["log"]), _syncs(cpu_run["run2"]["log"])
    assert sorted(first) == sorted(second) == [0, 1]  # one hf_cpu replica per FSDP rank
    # run 1: rollouts of steps 1 and 2, then validation; run 2: rollout of step 3, then validation
    assert [len(first[r]) for r in (0, 1)] == [3, 3] and [len(second[r]) for r in (0, 1)] == [2, 2]
    # both replicas always receive the same weights (each FSDP rank gathers the full tensors)
    assert first[0] == first[1] and second[0] == second[1]
    # run 2 starts from the checkpoint: exactly the weights run 1 validated with (after step 2)
    assert second[0][0] == first[0][-1]
    # after an update with a gradient, the rollout samples with the new weights
    digests = first[0] + second[0][1:]  # before steps 1, 2, 3 and after step 3
    steps = {**_steps(cpu_run["run1"]), **_steps(cpu_run["run2"])}
    for k in (1, 2, 3):
        if steps[k]["actor/grad_norm"] > 0:
            assert digests[k] != digests[k - 1], f"step {k} updated the actor but the rollout weights did not change"
    assert any(steps[k]["actor/grad_norm"] > 0 for k in (1, 2, 3))


def test_no_secret_in_logs_and_bounded_memory(cpu_run):
    for name in ("run1", "run2"):
        run = cpu_run[name]
        assert SECRET not in run["log"]
        # measured ~4.5 GB summed PSS on a 2-core machine (README); a wide bound, not a benchmark
        assert 0 < run["peak_pss_gb"] < 15


def test_hf_export_of_the_last_checkpoint_loads(cpu_run, tmp_path):
    """``recipe/vsearch/export_hf.sh`` (verl's model merger) turns global_step_3's FSDP shards of both ranks
    into a Hugging Face directory that transformers loads, with every parameter of the tiny model."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    from tests.conftest import REPO

    ckpt = Path(cpu_run["ckpt_dir"])
    target = tmp_path / "hf"
    r = subprocess.run(
        ["bash", str(REPO / "verl/recipe/vsearch/export_hf.sh"), str(ckpt / "global_step_3"), str(target)],
        cwd=REPO / "verl",
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert list(target.glob("*.safetensors")) and (target / "config.json").is_file()
    merged = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(target), torch_dtype=torch.float32)
    assert sum(p.numel() for p in merged.parameters()) > 0
    assert all(torch.isfinite(p).all() for p in merged.parameters())
    # the validation generations of both runs (trainer.validation_data_dir, set by _base.sh)
    assert (ckpt / "val_generations" / "2.jsonl").is_file() and (ckpt / "val_generations" / "3.jsonl").is_file()
    bad = subprocess.run(
        ["bash", str(REPO / "verl/recipe/vsearch/export_hf.sh"), str(ckpt / "global_step_9"), str(tmp_path / "x")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "no actor checkpoint" in bad.stderr
