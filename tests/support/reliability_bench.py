"""A collage source pool with known reliability verdicts for ``check_reliability`` and a scripted endpoint for both
checker MLLMs (``qwen``, ``nano``) and the judge: per item each checker's answer (:data:`ITEMS`), faults switched on
by a ``state`` dict."""

from __future__ import annotations

import json
import re
from pathlib import Path

from PIL import Image

from insight_o3.protocol.parsing import extract_answer_span
from tests.support.openai_server import chat, error, last_user_text, request_text

KEY = "sk-reliability-SECRET-24681357"
QWEN_KEY = "sk-qwen-SECRET-97531"
TAG = re.compile(r"\[(i\d)\]")

# item -> (source, options, answer, qwen's answer, nano's answer)
ITEMS = {
    "i0": ("viscot/textvqa", None, "stop", "go", "go"),  # OCR subset: kept without a check
    "i1": ("viscot/gqa", None, "red", "red", "red"),  # both right (rule) -> kept
    "i2": ("viscot/gqa", None, "blue", "blue", "green"),  # nano wrong (judge model) -> dropped
    "i3": ("vstar", ["a cat", "a dog"], "A", "B", "A"),  # qwen wrong (rule) -> dropped, nano not asked
    "i4": ("viscot/v7w", None, "two", "2 of them", "two"),  # qwen API error on the first run
    "i5": ("viscot/flickr30k", None, "dog", "dog", "a brown dog"),  # judge API error on nano's answer, first run
}


def make_pool(tmp_path: Path) -> Path:
    rows = []
    for i, (key, (source, options, answer, _, _)) in enumerate(ITEMS.items()):
        Image.new("RGB", (64, 48), (30 * i, 90, 160)).save(tmp_path / f"{key}.png")
        rows.append(
            {
                "id": f"{source}/{key}",
                "image": f"{key}.png",
                "width": 64,
                "height": 48,
                "bbox": [1, 1, 5, 5],
                "question": f"[{key}] What is shown?",
                "answer": answer,
                "options": options,
                "source": source,
            }
        )
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return pool


def script(state: dict):
    def reply(req, call):
        key = TAG.search(request_text(req)).group(1)
        state.setdefault("asked", []).append((req["model"], key))
        if req["model"] in ("qwen", "nano"):
            if state.get("fail_checker") == (req["model"], key):
                return error(400, "scripted checker failure")
            answer = ITEMS[key][3 if req["model"] == "qwen" else 4]
            return chat(f"<think>looking</think><answer>{answer}</answer>")
        prompt = last_user_text(req)
        if prompt.startswith("You are given a question and a model-generated response."):  # open-answer extraction
            return chat(extract_answer_span(prompt.split("Model Response:", 1)[1].split("### Output", 1)[0]))
        if prompt.startswith("You are given a multiple-choice question"):  # MCQ letter extraction
            return chat(prompt.split("Model Answer:", 1)[1].split("### Output", 1)[0].strip())
        if "GT Answer:" in prompt:  # the paper's judge prompt
            if state.get("fail_judge") == key:
                return error(400, "scripted judge failure")
            gt = prompt.split("GT Answer:", 1)[1].split("\n", 1)[0].strip()
            model_answer = prompt.split("Model Answer:", 1)[1]
            ok = gt in model_answer or (gt == "two" and "2" in model_answer)
            return chat("<correct>" if ok else "<wrong>")
        return error(400, f"unexpected judge prompt: {prompt[:80]}")

    return reply
