"""``python -m training.dpo.train`` on the CPU with the tiny random Qwen2.5-VL (tests/support/dpo_train_run.py): TRL's
DPOTrainer on vision preference pairs learns — on a fixed batch, evaluated every step, the loss falls and the
chosen-vs-rejected reward margin grows — a run killed after a checkpoint resumes from it (every step logged once, the
first step after the resume lowers the loss too), and the export is a checkpoint the next round can load and serve."""

from __future__ import annotations

import pytest

from tests.support.dpo_train_run import STEPS, problems, run
from tests.support.stacks import require_module

pytestmark = pytest.mark.slow


def test_dpo_learns_on_a_fixed_batch_and_a_killed_run_resumes(tmp_path):
    require_module("trl")
    facts = run(tmp_path, "cpu")
    assert problems(facts) == [], facts
    assert facts["eval_steps"] == list(range(1, STEPS + 1))
    from transformers import AutoModelForImageTextToText

    AutoModelForImageTextToText.from_pretrained(tmp_path / "model")  # the export loads
