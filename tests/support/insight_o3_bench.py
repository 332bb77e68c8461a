"""InSight-o3 mode of ``evaluate`` on the scripted benchmark of :mod:`tests.support.eval_bench`: a vReasoner and a
vSearcher script whose episodes make exactly one search each, so the metrics are known (:data:`EXPECTED_STATS`).

Every episode: the vReasoner asks for one region, the vSearcher answers a box, the vReasoner then gives a boxed final
answer (:data:`FINAL`), judged by the fork's in-loop check (the default judge flow in this mode): correct q0 q2 q5
q6, wrong q1 q4 q7, and q3 — whose replies are truncated and never box an answer — runs out of format retries and
has no answer (``invalid``, never judged).
"""

from __future__ import annotations

import threading
from pathlib import Path

from tests.support import eval_bench as eb
from tests.support.openai_server import Call, Reply, chat, error, request_text

SEARCH_KEY = "sk-vsearch-SECRET-7777wxyz"


FINAL = {  # marker: the vReasoner's final turn (the judge script decides q1 q2 q4-q7, see eval_bench.JUDGE)
    "q0": ("<think>seen</think>Answer: \\boxed{C}", "stop"),
    "q1": ("So the result is \\boxed{(D)}.", "stop"),
    "q2": ("The road bends north: \\boxed{the first one}", "stop"),
    "q3": ("Let me count the stations one by one: 1, 2, 3, 4", "length"),
    "q4": ("\\boxed{cannot tell}", "stop"),
    "q5": ("\\boxed{white}", "stop"),
    "q6": ("The distance is \\boxed{forty-two kilometres}.", "stop"),
    "q7": ("\\boxed{blue}", "stop"),
}


EXPECTED_STATS = {"correct": 4, "wrong": 3, "incomplete": 0, "invalid": 1, "failed": 0, "total": 8}


def is_first_turn(req: dict) -> bool:
    return not any(m["role"] == "assistant" for m in req["messages"])


def reasoner_script(delay: float = 0.0, faults: bool = False, server_ref: dict | None = None):
    """Turn 1: one region description; turn 2: the benchmark's scripted answer for the question.
    With ``faults``, the first request of each question fails as in the single-model test."""
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def script(req: dict, call: Call) -> Reply:
        q = eb.marker(request_text(req))
        first = is_first_turn(req)
        if faults and first:
            with lock:
                k = seen[q] = seen.get(q, 0) + 1
            if k == 1:
                if q == "q3":  # slower than --client_timeout
                    return Reply(body=chat("<tool_call>region_description={x}</tool_call>").body, delay=2.5)
                fault = eb.first_request_fault(q, call, server_ref)
                if fault is not None:
                    return fault
        if first:
            reply = chat(
                f"<think>need a closer look</think><tool_call>region_description={{the legend of [{q}]}}</tool_call>"
            )
        else:
            text, finish = FINAL[q]
            reply = chat(text, finish_reason=finish)
        reply.delay = delay
        return reply

    return script


def searcher_script(faults: bool = False, down: set | None = None):
    """Answers a box; with ``faults``, q5's first request gets a 503 (recovered by the SDK); every
    request for a marker in ``down`` gets a 500 (the search is lost, and so is the episode)."""
    seen: dict[str, int] = {}
    lock = threading.Lock()
    down = down if down is not None else set()

    def script(req: dict, call: Call) -> Reply:
        q = eb.marker(request_text(req))
        with lock:
            k = seen[q] = seen.get(q, 0) + 1
        if faults and q == "q5" and k == 1:
            return error(503, "warming up", retry_after=0.1)
        if q in down:
            return error(500, "searcher down")
        return chat("<think>the legend is at the top left</think> <answer>[2, 2, 40, 30]</answer>")

    return script


def argv(out: Path, ann, img_dir, reasoner_url: str, searcher_url: str, judge_url: str, *extra) -> list[str]:
    return [
        "--eval_name",
        eb.EVAL,
        "--model",
        "scripted-reasoner",
        "--api_base_url",
        reasoner_url,
        "--api_key",
        eb.MAIN_KEY,
        "--judge_model",
        "scripted-judge",
        "--judge_api_base_url",
        judge_url,
        "--judge_api_key",
        eb.JUDGE_KEY,
        "--vsearcher_model",
        "scripted-searcher",
        "--vsearcher_api_base_url",
        searcher_url,
        "--vsearcher_api_key",
        SEARCH_KEY,
        "--ann_file",
        str(ann),
        "--img_dir",
        str(img_dir),
        "--output_dir",
        str(out),
        "--no_progress",
        "--max_retries",
        "3",
        *extra,
    ]
