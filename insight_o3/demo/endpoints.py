"""The scripted endpoints of the keyless demo (``python -m insight_o3.scripts.demo``).

Three OpenAI-compatible chat scripts for :class:`insight_o3.endpoints.scripted_server.ScriptedOpenAIServer`, all
reading the demo benchmark's ``metadata.jsonl`` (:mod:`insight_o3.demo.bench`), so they *know every
answer and every evidence box*. They are a demo of the harness (requests, judging, records, report), not
a model: the accuracies they reach are the ones they are set to.

* :meth:`DemoScripts.model` — a model (the single model, and the vReasoner in InSight-o3 mode). It finds
  the question in the request, and answers it right with probability ``accuracy`` (else a wrong letter),
  drawn per (question, attempt) from a seeded RNG. Replies come in three styles: ``\\boxed{C}``,
  ``<answer>C</answer>`` and a sentence ("I'd go with option C."), so the rule decides some answers and
  the judge the others. As a vReasoner it first asks the vSearcher for the question's first target layout
  (``region_description={...}``), then answers: right with probability ``searched_accuracy`` when a crop came
  back, ``accuracy`` when the vSearcher found nothing.
  Asked in a tool-using agent's protocol (``evaluate --agent deepeyes|mini_o3|pixel_reasoner``, or an installed
  agent whose plugin declares ``demo_reply``: its system prompt tells which), it speaks that protocol: a zoom on the
  question's first target layout in the protocol's own call format, then the answer in its format, right with
  probability ``searched_accuracy`` (the crop was seen).
* :meth:`DemoScripts.searcher` — a vSearcher that returns the layout's box, in the coordinates of the image
  it was sent (Qwen2.5-VL's ``smart_resize`` grid for ``max_pixels``).
* :meth:`DemoScripts.judge` — a judge that reads the judge prompts as a careful model would: it extracts
  the option letter or phrase from the model answer and compares it with the ground truth.
* :class:`InsightVScripts` — Insight-V's reasoning and summary agents (``evaluate --agent insight_v``) on one
  endpoint, each question's episode planted by its position (:data:`INSIGHT_V_CASES`): a right chain the summary
  follows, a wrong chain the summary overrules, a malformed chain (no ``<thoughts>`` span, or cut by the token
  limit) with no answer in it, and a right chain the summary overrules wrongly.
"""

from __future__ import annotations

import json
import random
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..agents.insight_v import SUMMARY_PREFIX
from ..agents.tool_agents import DemoSpeaker, DemoTurn
from ..base.json_types import JSONObject
from ..endpoints.scripted_server import Call, Reply, chat, error, refusal, request_text, user_message_text
from ..evaluation.agent_registry import PluginError, agent_names, get_agent
from ..imaging.geometry import VSEARCHER_EVAL_MAX_PIXELS, smart_resize

LETTERS = "ABCDEF"
#: The model's reply styles, in order; one is drawn per answer.
STYLES = ("boxed", "answer_tag", "sentence")
_REF = re.compile(r"\(demo ref (\S+?)@(\d+)\)")
_LETTER = re.compile(r"\b([A-F])\b")


def _field(prompt: str, name: str) -> str:
    """The text after ``name:`` on its line in a judge prompt ('' when absent)."""
    m = re.search(rf"^{re.escape(name)}:\s*(.*?)\s*$", prompt, re.M)
    return m.group(1) if m else ""


def _letter_in(text: str) -> str | None:
    """The last standalone option letter A–F in ``text`` (the judge's reading of an MCQ answer)."""
    found = _LETTER.findall(text)
    return found[-1] if found else None


def searcher_box(row: dict, max_pixels: int = VSEARCHER_EVAL_MAX_PIXELS) -> list[int]:
    """A benchmark row's first target layout box in the coordinates of the image a vSearcher gets (the
    ``smart_resize`` grid for ``max_pixels``): what a perfect vSearcher answers."""
    info = row["layout_infos"][str(row["target_layouts"][0])]
    w, h = row["img_width"], row["img_height"]
    nh, nw = smart_resize(h, w, max_pixels=max_pixels)
    x1, y1, x2, y2 = info["bbox"]
    return [round(x1 * nw / w), round(y1 * nh / h), round(x2 * nw / w), round(y2 * nh / h)]


def agent_speakers() -> list[DemoSpeaker]:
    """The scripted behaviour of every registered agent that declares one (built-in, then installed packages'; a
    package whose plugin cannot be loaded is left out: ``evaluate --agent`` names its error)."""
    out = []
    for name in agent_names():
        try:
            plugin = get_agent(name)
        except PluginError:  # a broken third-party plugin: not the demo's business
            continue
        if plugin.demo_reply is not None:
            out.append(plugin.demo_reply)
    return out


def _system_text(messages: list[dict]) -> str:
    first = messages[0] if messages else {}
    if first.get("role") != "system":
        return ""
    c = first.get("content")
    return c if isinstance(c, str) else "".join(p.get("text", "") for p in c or [] if isinstance(p, dict))


@dataclass
class DemoScripts:
    """The demo's three scripts over the rows of a demo benchmark (``metadata.jsonl`` rows)."""

    rows: list[dict]
    accuracy: float = 0.6
    searched_accuracy: float = 0.85
    seed: int = 0
    searcher_max_pixels: int = VSEARCHER_EVAL_MAX_PIXELS
    speakers: list[DemoSpeaker] = field(default_factory=agent_speakers)
    #: the model name each role answers to (``model``, ``vsearcher``, ``judge``; None: any name), and whether a key
    #: is wanted: a request for another model gets vLLM's 404 and one without a key (none, or ``EMPTY``) a 401, as
    #: from a real server, so a wiring mistake (the model pointed at the judge's port) stops the run at once
    names: dict[str, str] | None = None
    require_key: bool = False
    _attempts: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_metadata(cls, path: Path, **kwargs: Any) -> DemoScripts:
        rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
        return cls(rows, **kwargs)

    # ------------------------------------------------------------------ helpers
    def _row_in(self, text: str) -> JSONObject | None:
        return next((r for r in self.rows if r["question"] in text), None)

    def _next_attempt(self, qid: str) -> int:
        with self._lock:
            k = self._attempts[qid] = self._attempts.get(qid, -1) + 1
        return k

    def _draw(self, qid: str, attempt: int, accuracy: float) -> tuple[bool, str]:
        """(answers right?, reply style) of one attempt, the same for a seed whatever the order."""
        rng = random.Random(f"insight-o3-demo:{self.seed}:{qid}:{attempt}")
        return rng.random() < accuracy, rng.choice(STYLES)

    @staticmethod
    def _letter(row: dict, right: bool) -> str:
        answer = row["answer"]
        if right:
            return answer
        return next(c for c in "BCDAE" if c != answer)

    @staticmethod
    def _say(letter: str, style: str) -> str:
        if style == "boxed":
            return f"Reading the values off the figure, the answer is \\boxed{{{letter}}}."
        if style == "answer_tag":
            return f"I compared every candidate against the figure.\n<answer>{letter}</answer>"
        return f"After comparing the candidates, I'd go with option {letter}."

    def target_box(self, row: dict) -> list[int]:
        return searcher_box(row, self.searcher_max_pixels)

    def _refused(self, role: str, call: Call) -> Reply | None:
        """A real server's refusal of a request without a key or for a model it does not serve (None: served)."""
        return refusal(call, role, (self.names or {}).get(role), self.require_key)

    # ------------------------------------------------------------------ scripts
    def model(self, req: dict, call: Call) -> Reply:
        """The single model, or the vReasoner (a conversation with an assistant turn is a later turn)."""
        refused = self._refused("model", call)
        if refused is not None:
            return refused
        text = request_text(req)
        row = self._row_in(text)
        if row is None:
            return error(400, "the demo model only knows the demo benchmark's questions")
        qid = row["question_id"]
        messages = req.get("messages", [])
        if "region_description" in text:  # the vReasoner's prompt names the tool
            return self._reasoner_turn(row, qid, messages)
        spoken = self._protocol_turn(row, qid, messages)
        if spoken is not None:
            return chat(spoken, model=call.model or "scripted-demo-model", prompt_tokens=1400)
        texts = []
        for _ in range(call.n):
            right, style = self._draw(qid, self._next_attempt(qid), self.accuracy)
            texts.append(self._say(self._letter(row, right), style))
        return chat(texts, model=call.model or "scripted-demo-model", prompt_tokens=1200)

    def _protocol_turn(self, row: dict, qid: str, messages: list[dict]) -> str | None:
        """A tool-using agent's turn in its own protocol (the first speaker that knows the system prompt), or None."""
        system = _system_text(messages)
        if not system or not self.speakers:
            return None
        turns = [m for m in messages if m.get("role") == "assistant"]
        if turns:
            first = turns[0]["content"] if isinstance(turns[0]["content"], str) else ""
            ref = _REF.search(first)
            attempt = int(ref.group(2)) if ref else 0
        else:
            attempt = self._next_attempt(qid)
        right, _ = self._draw(qid, attempt, self.searched_accuracy if turns else self.accuracy)
        info = row["layout_infos"][str(row["target_layouts"][0])]
        x0, y0, x1, y1 = (float(v) for v in info["bbox"])
        turn = DemoTurn(
            system=system,
            turns=len(turns),
            box=(x0, y0, x1, y1),
            size=(int(row["img_width"]), int(row["img_height"])),
            letter=self._letter(row, right),
            tag=f"(demo ref {qid}@{attempt})",
        )
        for speak in self.speakers:
            reply = speak(turn)
            if reply is not None:
                return reply
        return None

    def _reasoner_turn(self, row: dict, qid: str, messages: list[dict]) -> Reply:
        turns = [m for m in messages if m.get("role") == "assistant"]
        if not turns:
            info = row["layout_infos"][str(row["target_layouts"][0])]
            label = info.get("label", "the region the question is about")
            attempt = self._next_attempt(qid)
            return chat(
                "I need a closer look at the evidence first.\n"
                f"<tool_call>region_description={{{label} (demo ref {qid}@{attempt})}}</tool_call>",
                prompt_tokens=1200,
            )
        first = turns[0]["content"] if isinstance(turns[0]["content"], str) else ""
        ref = _REF.search(first)
        attempt = int(ref.group(2)) if ref else 0
        # a crop came back (an image in the last user turn): the evidence was found; else "not found"
        last = messages[-1].get("content") if messages else None
        found = isinstance(last, list) and any(p.get("type") == "image_url" for p in last if isinstance(p, dict))
        right, _ = self._draw(qid, attempt, self.searched_accuracy if found else self.accuracy)
        letter = self._letter(row, right)
        return chat(f"The crop shows the values I needed. \\boxed{{{letter}}}", prompt_tokens=1600)

    def searcher(self, req: dict, call: Call) -> Reply:
        refused = self._refused("vsearcher", call)
        if refused is not None:
            return refused
        ref = _REF.search(request_text(req))
        row = next((r for r in self.rows if ref and r["question_id"] == ref.group(1)), None)
        if row is None:
            return chat("<think>I cannot find it.</think><answer>[0, 0, 0, 0]</answer>", prompt_tokens=900)
        box = self.target_box(row)
        return chat(f"<think>The region is here.</think><answer>{json.dumps(box)}</answer>", prompt_tokens=900)

    def judge(self, req: dict, call: Call) -> Reply:
        refused = self._refused("judge", call)
        if refused is not None:
            return refused
        prompt = user_message_text(req)
        if "GT Answer:" in prompt:  # JUDGE_PROMPT / QA_VERIFY_PROMPT: compare
            gt, got = _field(prompt, "GT Answer"), _field(prompt, "Model Answer")
            same = gt.strip().lower() == got.strip().lower() or (len(gt) == 1 and _letter_in(got) == gt)
            return chat("<correct>" if same else "<wrong>", model="scripted-demo-judge")
        if "Options:" in prompt:  # MCQ_EXTRACTION_PROMPT: the option letter
            return chat(_letter_in(_field(prompt, "Model Answer")) or "none", model="scripted-demo-judge")
        return chat(_field(prompt, "Model Response") or "none", model="scripted-demo-judge")


#: Insight-V's planted episodes, by a question's position in the benchmark (index modulo 4): the chain's own answer
#: and the summary's, and the attribution bucket each record lands in.
INSIGHT_V_CASES = (
    ("chain_right", "right", "right", "correct"),
    ("chain_wrong_summary_overrules", "wrong", "right", "summary_rescued"),
    ("malformed_chain", "none", "right", "correct"),
    ("chain_right_summary_overruled", "right", "wrong", "summary_overruled"),
)


@dataclass
class InsightVScripts:
    """Insight-V's two agents over a demo benchmark's rows, on one endpoint (a request holding the summary prompt is
    the summary agent's). Each question's episode is the case of :data:`INSIGHT_V_CASES` at its row's index modulo 4;
    the malformed chains alternate between a reply without a ``<thoughts>`` span and one cut by the token limit
    (``finish_reason`` ``length``). The chains are one line, so a judge extracts their letter."""

    rows: list[dict]

    @classmethod
    def from_metadata(cls, path: Path) -> InsightVScripts:
        return cls([json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()])

    def case(self, row: dict) -> tuple[str, str, str, str]:
        return INSIGHT_V_CASES[self.rows.index(row) % len(INSIGHT_V_CASES)]

    def malformed_kind(self, row: dict) -> str:
        """``no_span`` or ``cut``, alternating over the malformed cases."""
        return ("no_span", "cut")[self.rows.index(row) // len(INSIGHT_V_CASES) % 2]

    def script(self, req: dict, call: Call) -> Reply:
        text = request_text(req)
        row = next((r for r in self.rows if r["question"] in text), None)
        if row is None:
            return error(400, "the demo agents only know the demo benchmark's questions")
        _, chain, summary, _ = self.case(row)
        if SUMMARY_PREFIX in text:
            letter = DemoScripts._letter(row, summary == "right")
            return chat(f"The answer is {letter}.", model="scripted-insight-v", prompt_tokens=1500)
        if chain == "none":
            if self.malformed_kind(row) == "cut":
                return chat(
                    "<thoughts>\nIdentifying Key Information: the first panel lists the values of",
                    finish_reason="length",
                    prompt_tokens=1200,
                )
            return chat("I looked at every panel of the figure and compared them.", prompt_tokens=1200)
        letter = DemoScripts._letter(row, chain == "right")
        return chat(
            f"<thoughts>Reading the panels one by one and comparing the candidates, option {letter} fits.</thoughts>",
            prompt_tokens=1200,
        )
