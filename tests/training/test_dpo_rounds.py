"""Iterative DPO end to end on the CPU (``tests/support/dpo_rounds_run.py``): the tiny random Qwen2.5-VL served by
vLLM's CPU build through scripts/vllm_serve_bg.sh generates chains with the data engine, scripted endpoints assess
them, TRL's DPOTrainer trains on the pairs, and round 2 serves round 1's export; round 1 is killed mid-training and
the rerun resumes it (no question asked again, training from its last checkpoint). On each round's fixed batch (its
pairs, evaluated every step) the DPO loss falls and the chosen-vs-rejected reward margin grows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import require_module

pytestmark = pytest.mark.slow


def _metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_two_rounds_with_a_round_killed_mid_training(vllm_venv_python, tmp_path):
    require_module("trl")
    from tests.support.dpo_rounds_run import CHAINS, QUESTIONS, run

    facts = run(tmp_path)
    log = facts["driver_log_tail"]
    assert facts["resume_status"] == 0, log
    runs = Path(facts["work"])

    # killed during round 1's training: the assessment was recorded, no model was exported yet
    at_kill = facts["round_1_at_kill"]
    assert set(at_kill["stages"]) == {"generate", "check", "score", "export"} and not facts["model_at_kill"]
    # the rerun asked nothing of round 1 again: every assessor request after the kill is one of round 2's records
    r1 = json.loads((runs / "round_1" / "round.json").read_text())
    r2 = json.loads((runs / "round_2" / "round.json").read_text())
    after = len(facts["assessor_requests"]) - facts["assessor_calls_before_kill"]
    round_2_records = sum(
        len((runs / "round_2" / "data" / step / "records.jsonl").read_text().splitlines())
        for step in ("check", "score")
    )
    assert after == round_2_records, (after, round_2_records)
    for rec in (r1, r2):
        assert rec["status"] == "done"
        counts = rec["stages"]["export"]["counts"]
        assert counts["chains"] == QUESTIONS * CHAINS and counts["dpo_pairs"] >= 1, counts
    # round 2 generated with round 1's export, served by vLLM
    assert r2["policy"] == str(runs / "round_1" / "model")
    assert str(runs / "round_1" / "model") in "".join(
        p.read_text(errors="replace") for p in (runs / "round_2" / "vllm").glob("*.log")
    )

    # training resumed from its checkpoint: two trainer runs in round 1's log, every step logged once
    train_log = (runs / "round_1" / "train" / "train.log").read_text(errors="replace")
    assert train_log.count("-m training.dpo.train") == 2
    for n in (1, 2):
        rows = _metrics(runs / f"round_{n}" / "train" / "metrics.jsonl")
        evals = [r for r in rows if "eval_loss" in r]
        steps = [r["step"] for r in evals]
        assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 3, steps
        loss = [r["eval_loss"] for r in evals]
        margin = [r["eval_rewards/margins"] for r in evals]
        assert loss[-1] < loss[0], (n, loss)
        assert margin[-1] > margin[0], (n, margin)
        export = json.loads((runs / f"round_{n}" / "model" / "dpo_export.json").read_text())
        assert export["global_step"] == steps[-1]

    # a rerun of a finished run serves nothing and asks nothing
    assert facts["rerun_status"] == 0 and facts["rerun_calls"] == 0
    assert "round 2:" in facts["rerun_stdout"]
