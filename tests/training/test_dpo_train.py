"""``python -m training.dpo.train`` on the CPU with the tiny random Qwen2.5-VL: TRL's DPOTrainer on vision preference
pairs learns (on a fixed batch, evaluated every step, the loss falls and the chosen-vs-rejected reward margin grows),
a run killed after a checkpoint resumes from it (same number of steps in the end, every step logged once), and the
export is a complete checkpoint the next round can serve."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import require_module
from tests.training.support import env, kill_when, metrics, python, write_pairs

pytestmark = pytest.mark.slow


def test_dpo_learns_on_a_fixed_batch_and_a_killed_run_resumes(tiny_qwen_dir, tmp_path):
    require_module("trl")
    pairs = write_pairs(tmp_path / "data", n=2)
    settings = tmp_path / "dpo.json"
    # one batch (2 pairs) per step, so every step trains and is evaluated on the same fixed batch
    settings.write_text(
        json.dumps(
            {
                "learning_rate": 1e-3,
                "lr_scheduler_type": "constant",
                "warmup_ratio": 0.0,
                "max_steps": 5,
                "per_device_train_batch_size": 2,
                "gradient_accumulation_steps": 1,
                "bf16": False,
                "gradient_checkpointing": False,
                "max_length": None,
                "save_steps": 2,
                "save_total_limit": 2,
            }
        )
    )
    out, model = tmp_path / "train", tmp_path / "model"
    cmd = [python(), "-m", "training.dpo.train", "--model", str(tiny_qwen_dir), "--pairs", str(pairs)]
    cmd += ["--output_dir", str(out), "--export_dir", str(model), "--settings", str(settings), "--cpu"]
    cmd += ["--eval_pairs", str(pairs), "--eval_steps", "1"]

    first = subprocess.Popen(cmd, env=env(), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    kill_when(first, out / "checkpoint-2" / "trainer_state.json")
    assert not model.exists()

    second = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"resuming from {out / 'checkpoint-2'}" in second.stderr
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    export = json.loads((model / "dpo_export.json").read_text())
    assert export["global_step"] == 5

    rows = metrics(out / "metrics.jsonl")
    evals = [r for r in rows if "eval_loss" in r]
    steps = [r["step"] for r in evals]
    assert steps == [1, 2, 3, 4, 5], steps  # each step once: the steps after the checkpoint were trimmed, then redone
    loss = [r["eval_loss"] for r in evals]
    margin = [r["eval_rewards/margins"] for r in evals]
    assert loss[-1] < loss[0] - 0.5, loss
    # every step lowers it, the first step after the resume included (a resume that kept the starting weights —
    # transformers 4.57's own load of a Qwen2.5-VL checkpoint — raised it there)
    assert all(b < a for a, b in zip(loss, loss[1:])), loss
    assert margin[-1] > margin[0] + 0.5 and all(b > a for a, b in zip(margin, margin[1:])), margin
    assert evals[-1]["eval_rewards/accuracies"] == 1.0

    # the export: weights, the source's processor files, a top-level architecture (vLLM reads it)
    config = json.loads((model / "config.json").read_text())
    assert config["architectures"] == ["Qwen2_5_VLForConditionalGeneration"]
    for name in ("tokenizer.json", "preprocessor_config.json", "chat_template.json", "model.safetensors"):
        assert (model / name).is_file(), name
    from transformers import AutoModelForImageTextToText

    AutoModelForImageTextToText.from_pretrained(model)  # loads
