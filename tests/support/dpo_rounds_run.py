"""Two rounds of iterative DPO end to end with the tiny random Qwen2.5-VL (``python -m training.dpo.rounds``), a
round killed mid-training and resumed; used by ``tests/training/test_dpo_rounds.py`` (CPU) and by
``training/dpo/smoke_gpu.sh`` (``--device cuda``).

Real parts: the driver as a process; the policy served by vLLM through ``scripts/vllm_serve_bg.sh`` (CPU build, or
the GPU one); the data engine's generation with the release's prompts and sampling; TRL's DPOTrainer (in-process on
the CPU, accelerate + DeepSpeed ZeRO-3 on a GPU). Scripted (loopback HTTP, ``insight_o3.endpoints.scripted_server``):
the tier-1 judge (it compares ``Model 1`` with ``Ground Truth`` in the release's check prompt) and the tier-2 scorer
(80 for every chain it sees). A random model writes no JSON, so its replies are constrained by vLLM's structured
outputs to :data:`STEPS` (JSON steps that answer), through the data engine's own ``completion_kwargs``: each chain is
a step and the final answer, right or wrong by chance, ranked and paired by the real assessment.

    python -m tests.support.dpo_rounds_run --work /tmp/dpo-rounds [--device cuda]   # prints the facts as JSON
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from insight_o3.endpoints.scripted_server import Call, Reply, ScriptedOpenAIServer, chat, error
from insight_o3.reasoning_data.prompts import CHECK_SYSTEM_PROMPT, SCORE_PROMPT

REPO = Path(__file__).resolve().parents[2]
#: every reply the random policy may give (vLLM's structured outputs: one of these strings). Only answers: every request
#: of a chain carries the chain's seed, so the random policy makes the same choice at every step, and a chain that
#: continued once ran to the step cap (16 steps, ~12k-token prompts, generated twice: the cap is malformed and
#: retried) — most of the test's time, for chains that were never an ``ok`` multi-step chain (the cap and its retry
#: are tests/scripts/test_build_reasoning_data.py's)
STEPS = [
    json.dumps({"title": "Answer", "content": "A", "next_action": "final_answer"}),
    json.dumps({"title": "Answer", "content": "B", "next_action": "final_answer"}),
]
QUESTIONS = 4
CHAINS = 6
_SCORE_HEAD = SCORE_PROMPT.split("{question}", 1)[0]


def _text(m: dict) -> str:
    c = m.get("content")
    return c if isinstance(c, str) else "".join(p.get("text", "") for p in c or [] if isinstance(p, dict))


def assessor(req: dict, call: Call) -> Reply:
    """The judge (tier 1: the final answer against the ground truth) and the scorer (tier 2: 80), by model name."""
    messages = list(req.get("messages") or [])
    if req.get("model") == "judge":
        if len(messages) != 2 or _text(messages[0]) != CHECK_SYSTEM_PROMPT:
            return error(400, "not the release's check prompt")
        text = _text(messages[1])
        gt = text.split("\nGround Truth: ", 1)[-1].split("\n", 1)[0]
        got = text.split("\nModel 1: ", 1)[-1].split("\nYour answer: ", 1)[0]
        return chat("[1]" if got.strip() == gt.strip() else "[0]", model="judge")
    if req.get("model") == "scorer":
        if not "".join(_text(m) for m in messages).startswith(_SCORE_HEAD):
            return error(400, "not the scoring prompt")
        return chat(json.dumps({"logic": 80, "hallucination": 80, "completeness": 80, "score": 80}), model="scorer")
    return error(404, f"no model {req.get('model')!r}")


def make_questions(out: Path) -> Path:
    """``QUESTIONS`` two-option questions over small random images (answers alternate A, B)."""
    import numpy as np
    from PIL import Image

    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(QUESTIONS):
        name = f"chart_{i}.png"
        Image.fromarray((np.random.RandomState(100 + i).rand(224, 280, 3) * 255).astype("uint8")).save(out / name)
        rows.append(
            {
                "question_id": f"q{i}",
                "image": name,
                "question": f"Which bar of chart {i} is taller?",
                "options": ["left", "right"],
                "answer": "AB"[i % 2],
            }
        )
    path = out / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def dpo_settings(path: Path, device: str) -> Path:
    """Few steps at a high learning rate so two rounds are short and the change shows (the release's schedule is
    for 8 GPUs and thousands of pairs): a round has at most ``QUESTIONS`` pairs (one per question), so a batch of
    ``QUESTIONS`` makes each epoch one step over all of them, and 3 epochs the 3 evaluated steps the check needs (a
    batch of 2 trained, evaluated and checkpointed up to 6)."""
    s = {
        "learning_rate": 1e-3,
        "lr_scheduler_type": "constant",
        "warmup_ratio": 0.0,
        "num_train_epochs": 3,
        "per_device_train_batch_size": QUESTIONS,
        "gradient_accumulation_steps": 1,
        "bf16": device == "cuda",
        "gradient_checkpointing": False,
        "max_length": None,
        "save_steps": 1,
        "save_total_limit": 2,
    }
    path.write_text(json.dumps(s))
    return path


def driver_command(
    work: Path, model: Path, ann: Path, judge_url: str, port: int, device: str, settings: Path
) -> list[str]:
    kwargs = {"max_tokens": 128, "extra_body": {"repetition_penalty": 1.05, "structured_outputs": {"choice": STEPS}}}
    cmd = [sys.executable, "-m", "training.dpo.rounds", "--work", str(work), "--base_model", str(model)]
    cmd += ["--ann_file", str(ann), "--img_dir", str(ann.parent), "--rounds", "2", "--num_chains", str(CHAINS)]
    cmd += ["--generation_kwargs", json.dumps(kwargs), "--judge_model", "judge", "--judge_api_base_url", judge_url]
    cmd += ["--scorer_model", "scorer", "--scorer_api_base_url", judge_url, "--dpo_settings", str(settings)]
    cmd += ["--eval_steps", "1", "--port", str(port), "--max_model_len", "16384", "--concurrency", "8", "--no_progress"]
    if device == "cpu":
        cmd += ["--cpu", "--launcher", sys.executable, "--vllm_args", "--dtype float32 --max-num-seqs 8"]
    else:
        n = int(os.environ.get("SMOKE_GPUS", "1"))
        cfg = REPO / "training" / "dpo" / "configs" / "accelerate_zero3.yaml"
        cmd += ["--launcher", f"accelerate launch --config_file {cfg} --num_processes {n}"]
        cmd += ["--vllm_args", "--dtype bfloat16 --max-num-seqs 8 --gpu-memory-utilization 0.3"]
    return cmd


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "JUDGE_API_KEY", "VLLM_API_KEY")}
    env.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def _kill_when(proc: subprocess.Popen, ready: Path, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the driver ended (status {proc.returncode}) before {ready} appeared")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise RuntimeError(f"{ready} did not appear within {timeout} s")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    return time.monotonic()


def _end_all(proc: subprocess.Popen, runs: Path) -> None:
    """Kill the driver's process group and every vLLM server a round started (their own groups, by pid file)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    for pid_file in runs.glob("round_*/vllm/*.pid"):
        try:
            os.killpg(int(pid_file.read_text().strip()), signal.SIGKILL)
        except (ValueError, ProcessLookupError, PermissionError):
            pass


def vllm_log_tails(runs: Path, n: int = 1500) -> dict[str, str]:
    """The end of every server start's section of every round's vLLM log (the script appends each start to its
    port's log, after a ``===== vllm_serve_bg start`` header)."""
    tails = {}
    for p in sorted(runs.glob("round_*/vllm/*.log")):
        starts = p.read_text(errors="replace").split("===== vllm_serve_bg start ")[1:]
        for i, text in enumerate(starts, 1):
            tails[f"{p.relative_to(runs)} start {i}"] = text[-n:]
    return tails


def run(work: Path, device: str = "cpu", port: int | None = None) -> dict[str, Any]:
    """The two rounds with a kill during round 1's training; what happened, for the caller to check. ``port``: the
    policy server's (default: a free one, picked by the driver as each server starts)."""
    from tests.support.tiny_qwen import build_tiny_qwen

    work.mkdir(parents=True, exist_ok=True)
    model = build_tiny_qwen(work / "tiny-qwen2.5-vl", overwrite=False)
    ann = make_questions(work / "questions")
    settings = dpo_settings(work / "dpo.json", device)
    runs = work / "runs"
    facts: dict[str, Any] = {"work": str(runs)}
    with ScriptedOpenAIServer(assessor) as srv:
        cmd = driver_command(runs, model, ann, srv.base_url, port or 0, device, settings)
        log = open(work / "driver.log", "ab")
        t0 = time.monotonic()
        first = subprocess.Popen(
            cmd, cwd=REPO, env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            # the first complete checkpoint: the rerun resumes from it for steps 2 and 3
            _kill_when(first, runs / "round_1" / "train" / "checkpoint-1" / "trainer_state.json", timeout=1500)
        except BaseException:  # a failure or the test's timeout: leave no driver or server behind
            _end_all(first, runs)
            raise
        facts["killed_after_s"] = round(time.monotonic() - t0, 1)
        facts["assessor_calls_before_kill"] = srv.count
        facts["round_1_at_kill"] = json.loads((runs / "round_1" / "round.json").read_text())
        facts["model_at_kill"] = (runs / "round_1" / "model").exists()
        second = subprocess.run(cmd, cwd=REPO, env=_env(), stdout=log, stderr=subprocess.STDOUT, timeout=2400)
        facts["resume_status"] = second.returncode
        facts["seconds"] = round(time.monotonic() - t0, 1)
        facts["assessor_requests"] = [r.get("model") for r in srv.requests]
        # the served policy's last words, for a failed generate stage (its errors are in the driver's stop line)
        facts["vllm_log_tails"] = vllm_log_tails(runs)
        if second.returncode == 0:
            # the same command once more: every round is done, nothing is asked, nothing served (after a failed
            # resume it would retry the failed stage: a run that proves nothing, and that buries the failure)
            calls = srv.count
            third = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
            facts["rerun_status"], facts["rerun_calls"], facts["rerun_stdout"] = (
                third.returncode,
                srv.count - calls,
                third.stdout,
            )
        log.close()
    facts["driver_log_tail"] = (work / "driver.log").read_text(errors="replace")[-4000:]
    facts["command"] = cmd
    return facts


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def problems(facts: dict[str, Any]) -> list[str]:
    """What is wrong with the two rounds (empty: everything the CPU proof claims held)."""
    if facts.get("resume_status") != 0:
        vllm = "".join(f"\n--- {name} ---\n{tail}" for name, tail in facts.get("vllm_log_tails", {}).items())
        return [
            f"the resumed driver failed (status {facts.get('resume_status')}): {facts['driver_log_tail'][-800:]}{vllm}"
        ]
    runs, out = Path(facts["work"]), []
    at_kill = facts["round_1_at_kill"]
    if set(at_kill.get("stages", {})) != {"generate", "check", "score", "export"} or facts["model_at_kill"]:
        out.append(f"the kill did not come during round 1's training: {sorted(at_kill.get('stages', {}))}")
    # nothing of round 1 asked again: every assessor request after the kill is one of round 2's records
    after = len(facts["assessor_requests"]) - facts["assessor_calls_before_kill"]
    round_2 = sum(_lines(runs / "round_2" / "data" / step / "records.jsonl") for step in ("check", "score"))
    if after != round_2:
        out.append(f"{after} assessor requests after the kill, round 2 recorded {round_2}")
    recs = [json.loads((runs / f"round_{n}" / "round.json").read_text()) for n in (1, 2)]
    for n, rec in zip((1, 2), recs):
        counts = rec["stages"].get("export", {}).get("counts", {})
        if rec.get("status") != "done" or counts.get("chains") != QUESTIONS * CHAINS or not counts.get("dpo_pairs"):
            out.append(f"round {n}: status {rec.get('status')}, counts {counts}")
        evals = [r for r in _metrics(runs / f"round_{n}" / "train" / "metrics.jsonl") if "eval_loss" in r]
        steps = [r["step"] for r in evals]
        if steps != list(range(1, len(steps) + 1)) or len(steps) < 3:
            out.append(f"round {n}: evaluated steps {steps} (each step once, at least 3)")
            continue
        loss, margin = [r["eval_loss"] for r in evals], [r["eval_rewards/margins"] for r in evals]
        if not loss[-1] < loss[0]:
            out.append(f"round {n}: the fixed batch's DPO loss did not fall: {loss}")
        if not margin[-1] > margin[0]:
            out.append(f"round {n}: the reward margin did not grow: {margin}")
        export = json.loads((runs / f"round_{n}" / "model" / "dpo_export.json").read_text())
        if export.get("global_step") != steps[-1]:
            out.append(f"round {n}: exported step {export.get('global_step')}, trained {steps[-1]}")
    train_log = (runs / "round_1" / "train" / "train.log").read_text(errors="replace")
    if train_log.count("-m training.dpo.train") != 2 or "resuming from" not in train_log:
        out.append("round 1's training was not run twice with a resume from its checkpoint")
    # round 2 generated with round 1's export, served by vLLM
    if recs[1].get("policy") != str(runs / "round_1" / "model"):
        out.append(f"round 2 started from {recs[1].get('policy')}")
    vllm_log = "".join(p.read_text(errors="replace") for p in (runs / "round_2" / "vllm").glob("*.log"))
    if str(runs / "round_1" / "model") not in vllm_log:
        out.append("round 2's vLLM log does not name round 1's export")
    if facts["rerun_status"] != 0 or facts["rerun_calls"] != 0:
        out.append(f"a rerun of the finished run: status {facts['rerun_status']}, {facts['rerun_calls']} requests")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--work", required=True)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    a = p.parse_args(argv)
    facts = run(Path(a.work), a.device)
    (Path(a.work) / "facts.json").write_text(json.dumps(facts, indent=2, default=str))
    bad = problems(facts)
    for line in bad:
        print(f"FAIL {line}")
    if not bad:
        print(f"PASS 2 rounds in {facts['seconds']} s, round 1 killed after {facts['killed_after_s']} s and resumed")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
