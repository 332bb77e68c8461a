"""One DPO run of the tiny random Qwen2.5-VL on two fixed pairs, killed after its second checkpoint and resumed; used
by ``tests/training/test_dpo_train.py`` (CPU, one process) and ``training/dpo/smoke_gpu.sh`` (``--device cuda``:
accelerate + DeepSpeed ZeRO-3 over the node's GPUs).

One batch (the two pairs) per step, evaluated every step: the run trains and is measured on the same fixed batch.

    python -m tests.support.dpo_train_run --work /tmp/dpo-train [--device cuda]   # prints the facts as JSON
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.training.support import env, kill_when, metrics, write_pairs

REPO = Path(__file__).resolve().parents[2]
STEPS = 5


def settings(device: str) -> dict[str, Any]:
    return {
        "learning_rate": 1e-3,
        "lr_scheduler_type": "constant",
        "warmup_ratio": 0.0,
        "max_steps": STEPS,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 1,
        "bf16": device == "cuda",
        "gradient_checkpointing": device == "cuda",
        "max_length": None,
        "save_steps": 2,
        "save_total_limit": 2,
    }


def command(device: str, model: Path, pairs: Path, out: Path, export: Path, settings_file: Path) -> list[str]:
    if device == "cpu":
        launch = [sys.executable, "-m", "training.dpo.train", "--cpu"]
    else:
        n = os.environ.get("SMOKE_GPUS", "1")
        cfg = REPO / "training" / "dpo" / "configs" / "accelerate_zero3.yaml"
        launch = ["accelerate", "launch", "--config_file", str(cfg), "--num_processes", n, "-m", "training.dpo.train"]
    args = ["--model", str(model), "--pairs", str(pairs), "--output_dir", str(out), "--export_dir", str(export)]
    args += ["--settings", str(settings_file), "--eval_pairs", str(pairs), "--eval_steps", "1"]
    return launch + args


def run(work: Path, device: str = "cpu", model: Path | None = None) -> dict[str, Any]:
    from tests.support.tiny_qwen import build_tiny_qwen

    work.mkdir(parents=True, exist_ok=True)
    model = model or build_tiny_qwen(work / "tiny-qwen2.5-vl", overwrite=False)
    pairs = write_pairs(work / "data", n=2)
    settings_file = work / "dpo.json"
    settings_file.write_text(json.dumps(settings(device)))
    out, export = work / "train", work / "model"
    cmd = command(device, model, pairs, out, export, settings_file)
    with open(work / "first.log", "wb") as log:
        first = subprocess.Popen(cmd, cwd=REPO, env=env(), start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
        kill_when(first, out / "checkpoint-2" / "trainer_state.json", timeout=1200)
    facts: dict[str, Any] = {"exported_before_resume": export.exists()}
    second = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=1800)
    facts["resume_status"] = second.returncode
    facts["resumed_from_checkpoint_2"] = f"resuming from {out / 'checkpoint-2'}" in second.stderr
    facts["stderr_tail"] = second.stderr[-3000:]
    if second.returncode != 0:
        return facts
    evals = [r for r in metrics(out / "metrics.jsonl") if "eval_loss" in r]
    facts["eval_steps"] = [r["step"] for r in evals]
    facts["eval_loss"] = [r["eval_loss"] for r in evals]
    facts["eval_margin"] = [r["eval_rewards/margins"] for r in evals]
    facts["eval_accuracy_last"] = evals[-1]["eval_rewards/accuracies"] if evals else None
    facts["export"] = json.loads((export / "dpo_export.json").read_text())
    facts["export_config_architectures"] = json.loads((export / "config.json").read_text()).get("architectures")
    facts["export_files"] = sorted(p.name for p in export.iterdir())
    facts["ds_shards"] = sorted(p.name for p in (out / f"checkpoint-{STEPS - 1}").glob("global_step*"))
    return facts


def long_pairs(out: Path, model: Path, tokens: int) -> Path:
    """Two pairs whose chains fill ``tokens`` tokens of the model's tokenizer (prompt and image tokens come on top):
    a real checkpoint at the release's 12,288-token context."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    pairs = write_pairs(out, n=2)
    rows = [json.loads(line) for line in pairs.read_text().splitlines()]
    sentence = "Step: the left bar rises above the right one, so the comparison favours option A. "
    per = len(tok(sentence)["input_ids"])
    body = sentence * max(1, tokens // per)
    for r in rows:
        for side in ("chosen", "rejected"):
            r[side][0]["content"][0]["text"] = f"<thoughts>\n{body}{side}\n</thoughts>"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return pairs


def real_step(work: Path, model: Path, chain_tokens: int = 10_500) -> dict[str, Any]:
    """Two optimiser steps of the release's settings (bf16, gradient checkpointing, 12,288 tokens, 2 pairs per device)
    on a real checkpoint under accelerate + ZeRO-3: does it fit, how long does a step take."""
    work.mkdir(parents=True, exist_ok=True)
    pairs = long_pairs(work / "data", model, chain_tokens)
    settings_file = work / "dpo.json"
    settings_file.write_text(json.dumps({"max_steps": 2, "gradient_accumulation_steps": 1, "save_steps": 1000}))
    out, export = work / "train", work / "model"
    cmd = command("cuda", model, pairs, out, export, settings_file)
    done = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=3000)
    rows = metrics(out / "metrics.jsonl") if (out / "metrics.jsonl").exists() else []
    return {
        "status": done.returncode,
        "losses": [r["loss"] for r in rows if "loss" in r],
        "train_runtime_s": next((r["train_runtime"] for r in rows if "train_runtime" in r), None),
        "stderr_tail": done.stderr[-3000:],
    }


def problems(facts: dict[str, Any]) -> list[str]:
    """What is wrong with a run (empty: DPO learned on the fixed batch and the killed run resumed)."""
    if facts.get("resume_status") != 0:
        return [f"the resumed run failed (status {facts.get('resume_status')}): {facts.get('stderr_tail', '')[-500:]}"]
    out = []
    if facts["exported_before_resume"]:
        out.append("the model was exported before the kill (the kill came too late to test a resume)")
    if not facts["resumed_from_checkpoint_2"]:
        out.append("the second run did not resume from checkpoint-2")
    if facts["eval_steps"] != list(range(1, STEPS + 1)):
        out.append(f"evaluated steps {facts['eval_steps']}, expected each of 1..{STEPS} once")
    loss, margin = facts["eval_loss"], facts["eval_margin"]
    # every step lowers the loss on the fixed batch, the first after the resume included (a resume that kept the
    # starting weights raised it there)
    if not all(b < a for a, b in zip(loss, loss[1:])) or not loss[-1] < loss[0] - 0.5:
        out.append(f"the fixed batch's DPO loss did not fall step after step: {loss}")
    if not all(b > a for a, b in zip(margin, margin[1:])) or not margin[-1] > margin[0] + 0.5:
        out.append(f"the chosen-vs-rejected reward margin did not grow step after step: {margin}")
    if facts["eval_accuracy_last"] != 1.0:
        out.append(f"reward accuracy at the end {facts['eval_accuracy_last']}, expected 1.0")
    if facts["export"].get("global_step") != STEPS:
        out.append(f"the export is of step {facts['export'].get('global_step')}, expected {STEPS}")
    if facts["export_config_architectures"] != ["Qwen2_5_VLForConditionalGeneration"]:
        out.append(f"the export's config.json architectures: {facts['export_config_architectures']}")
    missing = {"model.safetensors", "tokenizer.json", "preprocessor_config.json", "chat_template.json"} - set(
        facts["export_files"]
    )
    if missing:
        out.append(f"the export lacks {sorted(missing)}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--work", required=True)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--real", help="a real Qwen2.5-VL checkpoint: two steps at the release's settings instead")
    a = p.parse_args(argv)
    if a.real:
        real = real_step(Path(a.work), Path(a.real))
        (Path(a.work) / "facts.json").write_text(json.dumps(real, indent=2))
        ok = real["status"] == 0 and len(real["losses"]) == 2 and all(x == x for x in real["losses"])
        print(
            f"{'PASS' if ok else 'FAIL'} status {real['status']}, losses {real['losses']}, {real['train_runtime_s']} s"
        )
        return 0 if ok else 1
    facts = run(Path(a.work), a.device)
    (Path(a.work) / "facts.json").write_text(json.dumps(facts, indent=2, default=str))
    bad = problems(facts)
    for line in bad:
        print(f"FAIL {line}")
    if not bad:
        print(
            f"PASS loss {facts['eval_loss'][0]:.3f} -> {facts['eval_loss'][-1]:.3f}, margin "
            f"{facts['eval_margin'][0]:.3f} -> {facts['eval_margin'][-1]:.3f}, resumed from checkpoint-2, shards {facts['ds_shards']}"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
