"""The offline data-engine demo's inputs and scripted endpoints (``python -m insight_o3.scripts.build_reasoning_data_demo``).

SCRIPTED: no model is called. A demo benchmark (:mod:`insight_o3.demo.bench`: charts and maps whose answers are
known) gives the questions; one OpenAI-compatible endpoint plays every model, routed by model name:

* ``generator`` writes each chain by a plan (:data:`PLANS`, chain ``k`` of a question follows ``PLANS[k]``), so every
  tier has something to reject: a good chain; one whose final answer is wrong (tier 1 rejects it); one with a
  planted hallucination (a detail the image does not have: tier 2 scores it low); one whose second step is broken
  JSON once (the release's repair prompt fixes it); one that never stops (``continue`` to the cap: malformed, and
  generated again, well, on its retry); one whose second step fails three times (the release's ``Error`` step:
  malformed on both tries, rejected at tier 0). It tells the chains of a question apart by the ``seed`` each chain's
  requests carry (:func:`~insight_o3.reasoning_data.generation.chain_seed`), as it knows the keys.
* ``checker`` (tier 1) compares ``Model 1`` with ``Ground Truth`` in the release's check prompt: ``[1]`` or ``[0]``.
* ``scorer`` (tier 2) scores a chain 88, or 18 when it holds the planted hallucination; its first reply to a chain
  that was repaired has no JSON (the step asks again).

Usage numbers are estimates (4 characters a token); what they cost means nothing.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..base.json_types import JSONObject
from ..demo import bench as demo_bench
from ..endpoints.scripted_server import Call, Reply, Script, chat, error
from .generation import chain_seed
from .prompts import CHECK_SYSTEM_PROMPT, FINAL_PROMPT, REPAIR_PROMPT, SCORE_PROMPT

GENERATOR, CHECKER, SCORER = "generator", "checker", "scorer"
#: chain k of every question follows PLANS[k]: (name, what happens to it)
PLANS = (
    ("good", "kept"),
    ("wrong_answer", "rejected at tier 1 (wrong final answer)"),
    ("hallucinated", "rejected at tier 2 (low score)"),
    ("repaired", "kept (a broken JSON step repaired)"),
    ("endless_then_good", "kept on its retry (the first try never said final_answer)"),
    ("error_step", "rejected at tier 0 (malformed: a step failed 3 times, twice)"),
)
HALLUCINATION = "The legend also lists a purple unicorn series, which settles it."
REPAIRED_MARK = "double-checking"
_SCORE_HEAD = SCORE_PROMPT.split("{question}", 1)[0]


def demo_questions(out: Path, num_images: int = 3, questions: int = 2, seed: int = 0, min_side: int = 500) -> Path:
    """Draw a demo benchmark under ``out`` (images already there with the right size are kept); its
    ``metadata.jsonl``."""
    return demo_bench.draw_demo(out, num_images, seed=seed, questions_per_image=questions, min_side=min_side)[1]


def _text(m: dict) -> str:
    c = m.get("content")
    if isinstance(c, str):
        return c
    return "".join(p.get("text", "") for p in c or [] if isinstance(p, dict))


def _step(title: str, content: str, action: str) -> str:
    return json.dumps({"title": title, "content": content, "next_action": action})


@dataclass
class ScriptedEngine:
    """The scripted endpoint of the demo over the questions of a ``metadata.jsonl`` (see the module docstring).
    ``keys``: every chain key the run will ask (``<question key>#<k>``) and ``seed``: the generate step's seed, so a
    request's seed names its chain."""

    rows: list[JSONObject]
    keys: list[str]
    seed: int = 0
    retries: int = 1
    _by_seed: dict[int, tuple[str, int]] = field(default_factory=dict)
    _scored: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        for key in self.keys:
            for attempt in range(self.retries + 1):
                self._by_seed[chain_seed(self.seed, key, attempt)] = (key, attempt)

    def _row(self, text: str) -> JSONObject | None:
        return next((r for r in self.rows if text.startswith(str(r["question"]))), None)

    @staticmethod
    def _letter(row: JSONObject, right: bool) -> str:
        answer = str(row["answer"])
        return answer if right else next(c for c in "BCDAE" if c != answer)

    # ------------------------------------------------------------------ generator
    def generator(self, req: JSONObject, call: Call) -> Reply:
        chain = self._by_seed.get(int(req.get("seed") or -1))
        messages = list(req.get("messages") or [])
        row = self._row(_text(messages[1])) if len(messages) > 1 else None
        if chain is None or row is None:
            return error(400, "not a chain of the demo run")
        key, attempt = chain
        plan = PLANS[int(key.rsplit("#", 1)[1]) % len(PLANS)][0]
        last = _text(messages[-1])
        done = sum(m.get("role") == "assistant" for m in messages) - 1  # steps so far (the prefill is not one)
        repairs = 0
        for m in reversed(messages):
            if m.get("role") != "user" or _text(m) != REPAIR_PROMPT:
                break
            repairs += 1
        if last == FINAL_PROMPT:
            letter = self._letter(row, plan != "wrong_answer")
            return self._say(json.dumps({"title": "FINAL ANSWER", "content": letter}))
        if plan == "endless_then_good" and attempt == 0:
            return self._say(_step(f"Looking again ({done + 1})", "Another look at the figure.", "continue"))
        if done == 1 and (plan == "error_step" or (plan == "repaired" and repairs == 0)):
            return self._say('{"title": "Comparing the panels", "content": "the values')  # broken JSON
        letter = self._letter(row, plan != "wrong_answer")
        steps = [
            _step("Identifying Key Information", "The question asks about one value of the figure.", "continue"),
            _step(
                "Comparing the candidates",
                (HALLUCINATION if plan == "hallucinated" else "Each option is checked against the figure.")
                + (f" I am {REPAIRED_MARK} the panel." if plan == "repaired" else ""),
                "continue",
            ),
            _step("Concluding", f"Option {letter} is the one the figure supports.", "final_answer"),
        ]
        return self._say(steps[min(done, len(steps) - 1)])

    @staticmethod
    def _say(text: str, finish_reason: str = "stop") -> Reply:
        return chat(text, finish_reason=finish_reason, model="scripted-engine", prompt_tokens=1200)

    # ------------------------------------------------------------------ tier 1, tier 2
    @staticmethod
    def checker(req: JSONObject, call: Call) -> Reply:
        messages = list(req.get("messages") or [])
        if len(messages) != 2 or _text(messages[0]) != CHECK_SYSTEM_PROMPT:
            return error(400, "not the release's check prompt")
        text = _text(messages[1])
        gt = text.split("\nGround Truth: ", 1)[-1].split("\n", 1)[0]
        got = text.split("\nModel 1: ", 1)[-1].split("\nYour answer: ", 1)[0]
        return chat(
            "[1]" if got.strip() == gt.strip() else "[0]", model="scripted-engine", prompt_tokens=len(text) // 4
        )

    def scorer(self, req: JSONObject, call: Call) -> Reply:
        text = "".join(_text(m) for m in req.get("messages") or [])
        if not text.startswith(_SCORE_HEAD):
            return error(400, "not the scoring prompt")
        if REPAIRED_MARK in text:
            with self._lock:
                first = text not in self._scored
                self._scored.add(text)
            if first:
                return chat("The reasoning looks sound to me.", model="scripted-engine", prompt_tokens=1500)
        low = HALLUCINATION in text
        scores = (
            {"logic": 40, "hallucination": 5, "completeness": 60, "score": 18}
            if low
            else {
                "logic": 90,
                "hallucination": 95,
                "completeness": 85,
                "score": 88,
            }
        )
        return chat(json.dumps(scores), model="scripted-engine", prompt_tokens=1500)

    def script(self) -> Script:
        """One endpoint for the three roles, routed by model name."""

        def route(req: JSONObject, call: Call) -> Reply:
            model = req.get("model")
            if model == GENERATOR:
                return self.generator(req, call)
            if model == CHECKER:
                return self.checker(req, call)
            if model == SCORER:
                return self.scorer(req, call)
            return error(404, f"the demo endpoint has no model {model!r}")

        return route
