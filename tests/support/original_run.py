"""A run directory as the original release's harness writes it (m-Just/InSight-o3
``insight_o3/scripts/evaluate.py`` at 21acec8), for the tests of the readers of old runs.

The layout and every field are the original's: ``<eval_name>/args.json`` (with the API keys, as the
original writes them), ``summary_metrics.json``, ``trial_<k>/{eval_records.jsonl, eval_metrics.json,
done}``; a record is the annotation row plus ``eval_result`` = the original ``EvalResult``
(``sample_index``, ``success``, ``fail_reason``, ``inference_result`` with the conversation holding the
image as a base64 data URL, ``extracted_answer``, ``is_correct``). The shapes were checked against a
run of the original code (tests/golden/README.md).
"""

from __future__ import annotations

import base64
import io
import json
from math import floor
from pathlib import Path

from PIL import Image

ORIGINAL_KEY = "sk-original-harness-KEY-2468"


def _data_url(path: Path, max_pixels: int) -> str:
    im = Image.open(path).convert("RGB")
    w, h = im.size
    if w * h > max_pixels:
        r = (max_pixels / (w * h)) ** 0.5
        im = im.resize((floor(w * r), floor(h * r)), Image.LANCZOS)
    buf = io.BytesIO()
    im.save(buf, format="JPEG")
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()


def _record(row: dict, index: int, img_dir: Path, outcome: str, max_pixels: int, model: str) -> dict:
    """``outcome``: correct | wrong | truncated | lost | judge_failed."""
    question, options = row["question"], row.get("options")
    user_prompt = f"{question}\n{options}" if options else question
    answer = row["answer"] if outcome == "correct" else "something else"
    text = f"<think>looked</think><answer>{answer}</answer>"
    image = row.get("image") or row["file_name"]
    inf = {
        "success": True,
        "fail_reason": "",
        "finish_reason": "length" if outcome == "truncated" else "stop",
        "conversations": [
            {
                "agent": model,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image_url",
                                "image_url": {"url": _data_url(img_dir / image, max_pixels), "detail": "high"},
                            },
                            {"type": "text", "text": user_prompt},
                        ],
                    },
                    {"content": text, "role": "assistant"},
                ],
            }
        ],
        "last_message_content": text,
    }
    er = {
        "sample_index": index,
        "success": True,
        "fail_reason": None,
        "inference_result": inf,
        "extracted_answer": answer,
        "is_correct": outcome == "correct",
    }
    if outcome == "lost":
        er.update(
            success=False,
            fail_reason="inference_failed",
            extracted_answer=None,
            is_correct=False,
            inference_result={
                "success": False,
                "fail_reason": "api_error",
                "finish_reason": "",
                "conversations": [],
                "last_message_content": "",
            },
        )
    elif outcome == "truncated":
        er.update(success=False, fail_reason="finish_reason:length", extracted_answer=None)
    elif outcome == "judge_failed":
        er.update(success=False, fail_reason="judge_failed", extracted_answer=None)
    return {**row, "eval_result": er}


def _stats(records: list[dict]) -> dict:
    """The original's metrics of one trial (its ``main``)."""
    cats: dict[str, dict] = {}
    for r in records:
        c = cats.setdefault(
            r.get("category", r.get("subset", "unknown")),
            {k: 0 for k in ("correct", "wrong", "incomplete", "invalid", "total")},
        )
        er = r["eval_result"]
        if er["success"]:
            c["correct" if er["is_correct"] else "wrong"] += 1
        elif er["inference_result"]["success"]:
            c["invalid" if er["inference_result"]["finish_reason"] == "stop" else "incomplete"] += 1
        else:
            c["invalid"] += 1
        c["total"] += 1
    overall = {k: sum(c[k] for c in cats.values()) for k in ("correct", "wrong", "incomplete", "invalid", "total")}

    def rates(s):
        valid = s["correct"] + s["wrong"] + s["incomplete"]
        return (
            (s["correct"] + s["wrong"]) / s["total"],
            (s["correct"] + s["wrong"]) / valid if valid else 0,
            s["correct"] / s["total"],
        )

    o = rates(overall)
    return {
        "overall_success_rate": o[0],
        "overall_completion_rate": o[1],
        "overall_accuracy": o[2],
        "overall_stats": overall,
        "category_success_rate": {k: rates(v)[0] for k, v in cats.items()},
        "category_completion_rate": {k: rates(v)[1] for k, v in cats.items()},
        "category_accuracy": {k: rates(v)[2] for k, v in cats.items()},
        "category_stats": cats,
    }


def write_original_run(
    output_dir: Path,
    eval_name: str,
    ann_file: Path,
    img_dir: Path,
    outcomes: list[list[str]],
    model: str = "old-model",
    max_pixels: int = 3500 * 3500,
) -> Path:
    """Write ``<output_dir>/<eval_name>`` in the original's format; ``outcomes[k][i]`` is sample i's
    outcome in trial k. Returns the eval directory."""
    rows = [json.loads(x) for x in Path(ann_file).read_text().splitlines() if x.strip()]
    eval_dir = Path(output_dir) / eval_name
    trial_metrics = []
    for k, per_sample in enumerate(outcomes):
        d = eval_dir / f"trial_{k}"
        d.mkdir(parents=True, exist_ok=True)
        recs = [_record(r, i, Path(img_dir), per_sample[i], max_pixels, model) for i, r in enumerate(rows)]
        (d / "eval_records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        m = _stats(recs)
        trial_metrics.append(m)
        (d / "eval_metrics.json").write_text(json.dumps(m, indent=4))
        (d / "done").touch()
    args = {
        "eval_name": eval_name,
        "ann_file": str(ann_file),
        "img_dir": str(img_dir),
        "model": model,
        "api_base_url": "http://x/v1",
        "api_key": ORIGINAL_KEY,
        "img_max_pixels": max_pixels,
        "sys_prompt": "model_default",
        "judge_model": "gpt-5-nano",
        "judge_api_key": ORIGINAL_KEY,
        "num_trials": len(outcomes),
    }
    (eval_dir / "args.json").write_text(json.dumps(args, indent=4))

    def ms(vals):
        n = len(vals)
        mean = sum(vals) / n
        return {"mean": mean, "std": (sum((v - mean) ** 2 for v in vals) / n) ** 0.5}

    summary = {"num_trials": len(outcomes)}
    for key in ("overall_success_rate", "overall_completion_rate", "overall_accuracy"):
        summary[key] = ms([m[key] for m in trial_metrics])
    for key in ("category_success_rate", "category_completion_rate", "category_accuracy"):
        summary[key] = {c: ms([m[key][c] for m in trial_metrics]) for c in trial_metrics[0][key]}
    (eval_dir / "summary_metrics.json").write_text(json.dumps(summary, indent=4))
    return eval_dir
