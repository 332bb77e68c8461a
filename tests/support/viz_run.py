"""A small real evaluation run for the visualisation tests (notebooks, report, browser).

``make_demo_run(root)`` draws a tiny demo benchmark (``make_demo_bench``), starts a scripted
vReasoner, vSearcher and judge on 127.0.0.1, and runs ``python -m insight_o3.scripts.evaluate`` in
InSight-o3 mode, so the records are exactly what users get. The scripts are keyed by question:

* question 0: one search (found: the first target layout), then the right answer;
* question 1: a found search then a not-found search, then a wrong answer;
* question 2: answers at once (right);
* question 3: the vReasoner API refuses (400) -> a failed record.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from insight_o3.geometry import VSEARCHER_EVAL_MAX_PIXELS, smart_resize
from insight_o3.scripts import evaluate, make_demo_bench
from tests.support.openai_server import ScriptedOpenAIServer, chat, error, request_text

EVAL_NAME = "scripted-reasoner/demo_bench"
_KEY = re.compile(r"\[\[(\S+?)\]\]")


@dataclass
class DemoRun:
    bench_dir: Path
    ann_file: Path
    eval_dir: Path  # outputs/eval/<EVAL_NAME>
    samples: list[dict]  # metadata rows
    plan: dict  # question_id -> role in the script ("search_right", ...)


def _count_assistant(req: dict) -> int:
    return sum(1 for m in req.get("messages", []) if m.get("role") == "assistant")


def _wrong_letter(answer: str) -> str:
    return "B" if answer != "B" else "C"


def make_demo_run(root: Path, num_trials: int = 2) -> DemoRun:
    bench = root / "bench"
    assert make_demo_bench.main(
        ["--out", str(bench), "--num_images", "2", "--questions_per_image", "2", "--min_side", "1100", "--workers", "1"]
    ) in (0, None)
    ann = bench / "metadata.jsonl"
    rows = [json.loads(line) for line in ann.read_text().splitlines() if line.strip()]
    roles = ["search_right", "search_twice_wrong", "direct_right", "api_error"]
    plan = {r["question_id"]: roles[i % len(roles)] for i, r in enumerate(rows)}
    by_id = {r["question_id"]: r for r in rows}

    def target_box_model(qid: str) -> list[int]:
        r = by_id[qid]
        info = r["layout_infos"][str(r["target_layouts"][0])]
        w, h = r["img_width"], r["img_height"]
        nh, nw = smart_resize(h, w, max_pixels=VSEARCHER_EVAL_MAX_PIXELS)
        x1, y1, x2, y2 = info["bbox"]
        return [round(x1 * nw / w), round(y1 * nh / h), round(x2 * nw / w), round(y2 * nh / h)]

    def reasoner(req, call):
        text = request_text(req)
        qid = next((q for q in plan if by_id[q]["question"] in text), None)
        if qid is None:
            return error(400, "unknown question")
        role, turn = plan[qid], _count_assistant(req)
        answer = by_id[qid]["answer"]
        if role == "api_error":
            return error(400, "scripted refusal")
        if role == "direct_right":
            return chat(f"The answer can be read directly. \\boxed{{{answer}}}")
        n_searches = 1 if role == "search_right" else 2
        if turn < n_searches:
            what = "the legend" if turn == 0 else "a symbol that is not there"
            return chat(f"I need a closer look.\n<tool_call>region_description={{{what} [[{qid}#{turn}]]}}</tool_call>")
        final = answer if role == "search_right" else _wrong_letter(answer)
        return chat(f"From the crops, the answer is \\boxed{{{final}}}.")

    def searcher(req, call):
        m = _KEY.search(request_text(req))
        if not m:
            return chat("<think>nothing</think><answer>[0, 0, 0, 0]</answer>")
        qid, turn = m.group(1).split("#")
        if turn == "1":
            return chat("<think>I cannot find it.</think><answer>[0, 0, 0, 0]</answer>")
        box = target_box_model(qid)
        return chat(f"<think>The region is near the top.</think><answer>{json.dumps(box)}</answer>")

    def judge(req, call):
        return chat("A")

    servers = [ScriptedOpenAIServer(s).start() for s in (reasoner, searcher, judge)]
    try:
        out = root / "outputs" / "eval"
        argv = [
            "--eval_name",
            EVAL_NAME,
            "--model",
            "scripted-reasoner",
            "--api_base_url",
            servers[0].base_url,
            "--api_key",
            "sk-test",
            "--judge_model",
            "scripted-judge",
            "--judge_api_base_url",
            servers[2].base_url,
            "--judge_api_key",
            "sk-test",
            "--vsearcher_model",
            "scripted-searcher",
            "--vsearcher_api_base_url",
            servers[1].base_url,
            "--vsearcher_api_key",
            "sk-test",
            "--ann_file",
            str(ann),
            "--img_dir",
            str(bench),
            "--output_dir",
            str(out),
            "--num_trials",
            str(num_trials),
            "--no_progress",
            "--max_retries",
            "0",
        ]
        rc = evaluate.main(argv)
        assert rc == 1, f"evaluate exited with {rc}"  # INCOMPLETE: question 3 failed (API 400)
    finally:
        for s in servers:
            s.stop()
    return DemoRun(bench, ann, out / EVAL_NAME, rows, plan)
