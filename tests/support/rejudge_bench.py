"""Runs to re-judge: an evaluation of :mod:`tests.support.eval_bench` judged by one judge model, and another judge."""

from __future__ import annotations

from insight_o3.scripts import evaluate
from tests.support import eval_bench as eb
from tests.support.openai_server import Call, Reply, chat, last_user_text


def evaluate_judge_a(bench, out, main_url, judge_url, *extra) -> None:
    """A finished ``evaluate`` run of :mod:`tests.support.eval_bench` judged by ``judge-a`` (no keys)."""
    argv = [
        "--eval_name",
        eb.EVAL,
        "--model",
        "scripted-vlm",
        "--api_base_url",
        main_url,
        "--judge_model",
        "judge-a",
        "--judge_api_base_url",
        judge_url,
        "--ann_file",
        str(bench[0]),
        "--img_dir",
        str(bench[1]),
        "--output_dir",
        str(out),
        "--no_progress",
        "--max_retries",
        "2",
        *extra,
    ]
    assert evaluate.main(argv) == 0


def lenient_judge():
    """Another judge: every verification says correct, every extraction repeats the letter/answer of eb.JUDGE,
    except q4 whose extraction is now 'F' (the ground truth)."""

    def script(req: dict, call: Call) -> Reply:
        prompt = last_user_text(req)
        q = eb.marker(prompt)
        if "GT Answer:" in prompt:
            return chat("<correct>", model=req.get("model"))
        extraction = "F" if q == "q4" else eb.JUDGE.get(q, ("none", None))[0]
        return chat(extraction, model=req.get("model"))

    return script
