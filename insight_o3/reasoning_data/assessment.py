"""The two tiers of the assessment: step ``check`` (tier 1: an LLM checks each chain's final answer against the
ground truth) and step ``score`` (tier 2: an MLLM scores each chain that passed, 1-100).

**Tier 1** is the release's ``data_check.py`` (rows IVD10-IVD11): one request per well-formed chain, system
``"You are a helpful assistant.\\n" + CHECK_PROMPT``, user ``"Question: …\\nGround Truth: …\\nModel 1: …\\nYour
answer: "`` with the final answer's ``content``, temperature 0.2, top_p 0.7, repetition penalty 1.05, 512 tokens;
the reply up to its first ``]`` (plus ``]``) is read as JSON, anything unreadable is ``[0]`` (no retry, as the
release). The chain passes when that list starts with the integer 1 (ours: the release saves the list and stops).

**Tier 2** is ours from the seed text (row IVD12): the scorer sees the image (the generator's view), the question,
the ground truth and the chain (:func:`.chain.chain_text`) with :data:`~.prompts.SCORE_PROMPT`, and replies with a
JSON object whose ``score`` (1-100) ranks the chain; the rubric (:data:`~.prompts.SCORE_RUBRIC`) and the prompt's
sha256 are in the step card. A reply without a usable score is asked again ``parse_retries`` times, then recorded
``unscored`` (final, not kept).
"""

from __future__ import annotations

import json
from typing import Any

from ..base.json_types import JSONObject
from ..base.untrusted import loads
from ..endpoints.chat import NoChoice, chat_once
from ..imaging.images import ImageStore
from ..jobs.clients import Clients
from ..jobs.execute import Emit, JobResult, unit_meter
from ..jobs.retried import execute_retried
from ..protocol.trajectory import image_part, message, to_openai
from .chain import chain_text
from .generation import IMAGE_RESIZE
from .prompts import CHECK_KWARGS, CHECK_SYSTEM_PROMPT, CHECK_USER_TEMPLATE, NO_ANSWER, SCORE_KWARGS, SCORE_PROMPT
from .settings import CheckSettings, ModelAccess, ScoreSettings
from .steps import EngineItems, EngineRun, close_step, engine_client, engine_images, open_step, step_summary

SCORE_KEYS = ("logic", "hallucination", "completeness", "score")


# ----------------------------------------------------------------------------- tier 1
def check_response(final_answer: Any) -> str:
    """What the check is told the model answered: the final answer's ``content`` as the release's f-string writes
    it, or :data:`~.prompts.NO_ANSWER`."""
    return NO_ANSWER if final_answer is None else f"{final_answer}"


def check_messages(question: str, ground_truth: str, final_answer: Any) -> list[JSONObject]:
    user = CHECK_USER_TEMPLATE.format(
        question=question, ground_truth=ground_truth, response=check_response(final_answer)
    )
    return [{"role": "system", "content": CHECK_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def parse_verdict(reply: str) -> Any:
    """The release's reading of a check reply: the text up to its first ``]``, plus ``]``, as JSON; ``[0]`` when that
    is not JSON (linear: one ``partition``, then JSON of a bounded reply)."""
    try:
        return json.loads(reply.partition("]")[0] + "]")
    except (ValueError, RecursionError):
        return [0]


def passed(verdict: Any) -> bool:
    """Whether a parsed verdict says "correct": a list whose first element is the integer 1 (ours: the release
    keeps the list)."""
    return isinstance(verdict, list) and bool(verdict) and type(verdict[0]) is int and verdict[0] == 1


class CheckWork(EngineItems[JSONObject]):
    """Tier 1 on one chain: the judge says whether its final answer is the ground truth."""

    def __init__(self, run: EngineRun, records: dict[str, Any], api: Any, judge: ModelAccess, settings: CheckSettings):
        super().__init__(run, records)
        self.api, self.judge = api, judge
        self.kwargs = {**CHECK_KWARGS, **settings.completion_kwargs}

    def key(self, chain: JSONObject) -> str:
        return str(chain["sample_key"])

    def base(self, chain: JSONObject) -> JSONObject:
        return {"sample_key": self.key(chain), "question_key": chain.get("question_key")}

    async def work(self, chain: JSONObject, emit: Emit) -> JSONObject:
        meter = unit_meter()
        messages = check_messages(str(chain["prompt"]), str(chain["answer"]), chain.get("final_answer"))
        reply = await chat_once(self.api, self.judge.model, messages, n=1, **self.kwargs)
        verdict = parse_verdict(reply.text)
        rec = {**self.base(chain), "status": "ok", "reply": reply.text, "verdict": verdict, "passed": passed(verdict)}
        return self.with_usage(rec, meter)


async def run_check(
    run: EngineRun, judge: ModelAccess, settings: CheckSettings, chains: list[JSONObject]
) -> JobResult[JSONObject]:
    """Tier 1 on every chain not checked yet; the step's summary (with how many ``passed``)."""
    with open_step(run, "check") as (rd, log):
        async with Clients(rd.guard) as clients:
            api = engine_client(clients, run.controls, judge, "checker")
            work = CheckWork(run, log.records, api, judge, settings)
            await execute_retried(rd, chains, work, clients, desc="answer checks")
        order = [work.key(c) for c in chains]
        summary = step_summary("check", log.records, order)
        summary["passed"] = sum(bool(log.records[k].get("passed")) for k in order if k in log.records)
        close_step(run, "check", log, order, summary)
    return JobResult(summary, int(summary.get("failed", 0)))


# ----------------------------------------------------------------------------- tier 2
def score_messages(chain: JSONObject, image: JSONObject) -> list[JSONObject]:
    text = SCORE_PROMPT.format(
        question=chain["prompt"], ground_truth=chain["answer"], chain=chain_text(list(chain.get("steps") or []))
    )
    return [message("user", image, text)]


def parse_score(reply: str) -> JSONObject:
    """The scores of a scorer's reply: the JSON object from its first ``{`` to its last ``}`` (bounded JSON), whose
    ``score`` is a number in 1..100 (rounded); the other criteria kept when they are numbers. Raises ``ValueError``
    saying what is wrong."""
    start, end = reply.find("{"), reply.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in the reply")
    obj = loads(reply[start : end + 1], max_depth=4, max_chars=20_000)
    if not isinstance(obj, dict):
        raise ValueError("the reply's JSON is not an object")
    out: JSONObject = {}
    for k in SCORE_KEYS:
        v = obj.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool) and 1 <= v <= 100:
            out[k] = int(round(v))
    if "score" not in out:
        raise ValueError("no 'score' between 1 and 100")
    return out


class ScoreWork(EngineItems[JSONObject]):
    """Tier 2 on one chain: the scorer's scores, asked again (``parse_retries``) while its reply has none; a chain
    still without is recorded ``unscored`` (final)."""

    def __init__(
        self,
        run: EngineRun,
        records: dict[str, Any],
        api: Any,
        images: ImageStore,
        scorer: ModelAccess,
        settings: ScoreSettings,
    ):
        super().__init__(run, records, final_statuses=("ok", "unscored"))
        self.api, self.images, self.scorer, self.s = api, images, scorer, settings
        self.kwargs = {**SCORE_KWARGS, **settings.completion_kwargs}

    def key(self, chain: JSONObject) -> str:
        return str(chain["sample_key"])

    def base(self, chain: JSONObject) -> JSONObject:
        return {"sample_key": self.key(chain), "question_key": chain.get("question_key")}

    async def work(self, chain: JSONObject, emit: Emit) -> JSONObject:
        meter = unit_meter()
        enc = await self.images.aget(str(chain["image_path"]), IMAGE_RESIZE)
        messages = to_openai(score_messages(chain, image_part(enc.ref)), {enc.ref: enc}.__getitem__)
        reason, reply = "", ""
        for attempt in range(1, self.s.parse_retries + 2):
            try:
                c = await chat_once(self.api, self.scorer.model, messages, n=1, **self.kwargs)
            except NoChoice as e:
                reason, reply = str(e), ""
                continue
            reply = c.text
            try:
                scores = parse_score(reply)
            except ValueError as e:
                reason = str(e)
                continue
            rec = {**self.base(chain), "status": "ok", **scores, "reply": reply, "attempts": attempt}
            return self.with_usage(rec, meter)
        rec = {**self.base(chain), "status": "unscored", "problem": reason, "reply": reply[:4000]}
        return self.with_usage({**rec, "attempts": self.s.parse_retries + 1}, meter)


async def run_score(
    run: EngineRun, scorer: ModelAccess, settings: ScoreSettings, chains: list[JSONObject]
) -> JobResult[JSONObject]:
    """Tier 2 on every chain not scored yet; the step's summary."""
    with open_step(run, "score") as (rd, log):
        async with Clients(rd.guard) as clients:
            api = engine_client(clients, run.controls, scorer, "scorer")
            images = engine_images(clients, run.controls)
            work = ScoreWork(run, log.records, api, images, scorer, settings)
            await execute_retried(rd, chains, work, clients, desc="chain scores")
        order = [work.key(c) for c in chains]
        summary = step_summary("score", log.records, order)
        close_step(run, "score", log, order, summary)
    return JobResult(summary, int(summary.get("failed", 0)))
