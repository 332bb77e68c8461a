"""Iterative DPO end to end on the CPU (tests/support/dpo_rounds_run.py): the tiny random Qwen2.5-VL served by vLLM's
CPU build through scripts/vllm_serve_bg.sh generates chains with the data engine, scripted endpoints assess them,
TRL's DPOTrainer trains on the pairs, and round 2 serves round 1's export; round 1 is killed mid-training and the rerun
resumes it (no question asked again, training from its last checkpoint). On each round's fixed batch (its pairs,
evaluated every step) the DPO loss falls and the chosen-vs-rejected reward margin grows."""

from __future__ import annotations

import pytest

from tests.support.stacks import require_module

pytestmark = pytest.mark.slow


@pytest.mark.timeout(3600)  # ~90 s alone on 2 cores (12 min before answer-only replies); waits bounded inside
def test_two_rounds_with_a_round_killed_mid_training(vllm_venv_python, tmp_path):
    require_module("trl")
    from tests.support.dpo_rounds_run import problems, run

    facts = run(tmp_path)
    assert problems(facts) == [], facts["driver_log_tail"]
    assert "round 2:" in facts["rerun_stdout"]
