"""Collages with known difficulty for ``generate_collages filter`` and a scripted vReasoner + judge on one endpoint:
per item the vReasoner's three attempts (:data:`ITEMS`), and faults switched on by a ``state`` dict."""

from __future__ import annotations

import json
import re
from pathlib import Path

from PIL import Image

from insight_o3.data.schema import CollageRow, TileRow
from tests.support.openai_server import chat, error, last_user_text, request_text

KEY = "sk-difficulty-SECRET-13572468"
TAG = re.compile(r"\[(c\d+)\]")

# item -> (options, answer, vReasoner answers of the 3 attempts)
ITEMS = {
    "c0": (None, "red", ["blue", "blue", "blue"]),  # 0 of 3 (judge model says <wrong>)
    "c1": (None, "red", ["blue", "a crimson red", "blue"]),  # 1 of 3 (judge model says <correct>)
    "c2": (["cat", "dog", "bird"], "B", ["B", "B", "B"]),  # 3 of 3 (rule: the span is the letter)
    "c3": (["cat", "dog", "bird"], "C", ["A", "A", "(B)"]),  # 0 of 3 (judge extracts the letters)
    "c4": (None, "7", ["8", "8", "8"]),  # vReasoner API error on the first run
    "c5": (None, "blue", ["navy", "navy", "navy"]),  # judge API error on the first run
}


def make_collages(out_dir: Path, items: dict) -> list[dict]:
    """Rows in the collages.jsonl schema with small real images."""
    (out_dir / "images").mkdir(parents=True)
    rows = []
    for i, (key, (options, answer, _)) in enumerate(items.items()):
        image = f"images/collage-{i:08d}.jpg"
        Image.new("RGB", (64, 48), (40 * i % 255, 90, 160)).save(out_dir / image)
        tile = TileRow(
            id=3,
            source_id=f"src-{i}",
            image=f"/pool/{i}.jpg",
            box_on_canvas=[0, 0, 64, 48],
            crop_box_in_source=[0, 0, 64, 48],
            scale=[1.0, 1.0],
            label_box=[0, 0, 8, 8],
            is_target=True,
        )
        rows.append(
            CollageRow(
                sample_key=key,
                index=i,
                image=image,
                width=64,
                height=48,
                question=f"Look at image #3 in the collage. [{key}] What is shown?",
                source_question=f"[{key}] What is shown?",
                options=options,
                answer=answer,
                target_bbox=[10.0, 10.0, 20.0, 20.0],
                target_tile_id=3,
                tiles=[tile],
                source_ids=[f"src-{i}"],
                target_source_id=f"src-{i}",
                source="test/pool",
                seed=0,
                attempts=1,
            ).to_dict()
        )
    (out_dir / "collages.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def script(state: dict, items: dict = ITEMS):
    """vReasoner (model "vr") and judge (model "judge") on one endpoint; ``state`` switches faults."""

    def reply(req, call):
        text = request_text(req)
        key = TAG.search(text).group(1)
        if req["model"] == "vr":
            if state.get("fail_reasoner") == key:
                return error(400, "scripted vReasoner failure")
            texts = [f"<think>looking</think><answer>{a}</answer>" for a in items[key][2]]
            if call.n == 1:  # one attempt per request: the k-th request of this item gets the k-th answer
                k = state.setdefault("asked", {}).get(key, 0)
                state["asked"][key] = k + 1
                texts = [texts[k % len(texts)]]
            return chat(texts[: call.n])
        prompt = last_user_text(req)
        if prompt.startswith("You are given a question and a model-generated response"):  # open-answer extraction
            return chat(prompt.split("Model Response: ", 1)[1].split("\n\n### Output", 1)[0])
        if prompt.startswith("You are given a multiple-choice question"):  # option-letter extraction
            return chat(prompt.split("Model Answer: ", 1)[1].split("  \n", 1)[0].strip("() "))
        if "GT Answer:" in prompt:  # the paper's judge prompt
            if state.get("fail_judge") == key:
                return error(400, "scripted judge failure")
            gt = prompt.split("GT Answer:", 1)[1].split("\n", 1)[0].strip()
            model_answer = prompt.split("Model Answer:", 1)[1]
            return chat("<correct>" if gt in model_answer else "<wrong>")
        return error(400, f"unexpected judge prompt: {prompt[:80]}")

    return reply


def argv(out_dir: Path, url: str, *extra) -> list[str]:
    return [
        "--out_dir",
        str(out_dir),
        "--model",
        "vr",
        "--judge_model",
        "judge",
        "--base_url",
        url,
        "--api_key",
        KEY,
        "--max_retries",
        "0",
        "--no_progress",
        *extra,
    ]
