"""Step ``synthesize``: E.2 question synthesis by a text-only model (B.2 step 3).

The request is one user message, the E.2 prompt of the image's type (chart or map, or a category of one's own
with its template from ``--synth_prompt CATEGORY=FILE``) with its inputs filled in (:func:`build_prompt`); the
model never sees the image. The inputs are the full image's E.1 sections and, per
layout, its id and text:

* ``GLOBAL_OCR``: the full image's ``Extracted OCR`` section; ``GLOBAL_CAPTION``: its ``Detailed Caption``;
* ``LAYOUTS``: a JSON array ``[{"layout_id": 1, "caption_or_ocr": "..."}, ...]`` in layout-id order, where
  ``caption_or_ocr`` is (``--layout_text``) ``both`` (default: the caption, then ``OCR:`` and the OCR text when the
  crop has text; B.2 gives the model "the layout set with captions and OCR texts"), ``ocr`` (the OCR text, the
  caption when there is none) or ``caption``.

The reply is parsed as the JSON array the prompt asks for (:func:`parse_reply`); an array that is valid JSON but for
benign damage (trailing commas, comments, ...) is repaired and the record says what was repaired
(``json_repair``: the strict parser's error, the repair library's log and version); a reply without an array is
asked again (``--parse_retries``) and then recorded as failed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..base.json_types import JSONObject
from ..base.untrusted import REPAIR_DEADLINE_S, JSONRepair, loads, loads_repaired_in_worker
from ..endpoints.endpoint import Endpoint
from ..jobs.clients import Clients
from ..jobs.execute import Emit, JobResult, unit_meter
from ..jobs.retried import execute_retried
from .extraction import Extraction, extractions_by_image
from .prompts import LAYOUT_TEXT_MODES, synthesis_prompt
from .records import SourceImage
from .steps import (
    BenchStepRun,
    InputNotReady,
    StepItems,
    close_step,
    limited,
    open_step,
    read_log,
    step_client,
    step_command,
    step_summary,
)
from .workspace import Workspace

_FENCED = re.compile(r"```[a-zA-Z]*[ \t]*\n(.*?)```", re.DOTALL)


class SynthesisFormatError(ValueError):
    """A reply without a JSON array of items."""


def layout_text(ex: Extraction, mode: str = "both") -> str:
    """A layout's ``caption_or_ocr`` text."""
    if mode == "caption":
        return ex.caption
    if mode == "ocr":
        return ex.ocr if ex.has_text else ex.caption
    if mode == "both":
        return f"{ex.caption}\nOCR: {ex.ocr}" if ex.has_text else ex.caption
    raise ValueError(f"layout text mode must be one of {LAYOUT_TEXT_MODES}, got {mode!r}")


def layouts_json(layouts: list[tuple[int, str]]) -> str:
    """The ``LAYOUTS`` input: ``[{"layout_id", "caption_or_ocr"}]`` as indented JSON (non-ASCII kept)."""
    return json.dumps([{"layout_id": i, "caption_or_ocr": t} for i, t in layouts], indent=2, ensure_ascii=False)


def build_prompt(
    source: SourceImage,
    full: Extraction,
    per_layout: dict[int, Extraction],
    mode: str = "both",
    templates: Mapping[str, str] | None = None,
) -> str:
    """The filled E.2 prompt of one image (its category's template in ``templates``, default the shipped chart and
    map ones); every layout of ``source`` must have an extraction."""
    missing = sorted(source.layout_ids - set(per_layout))
    if missing:
        raise ValueError(f"{source.key}: no extraction for layout(s) {missing}")
    items = [(lay.layout_id, layout_text(per_layout[lay.layout_id], mode)) for lay in source.layouts]
    return synthesis_prompt(source.subset, full.ocr, full.caption, layouts_json(items), templates)


def _candidates(text: str) -> list[str]:
    """Where the array may be: each fenced block, the whole reply, its first ``[`` to its last ``]`` (each once)."""
    out = [m.group(1) for m in _FENCED.finditer(text)]
    out.append(text)
    first, last = text.find("["), text.rfind("]")
    if 0 <= first < last:
        out.append(text[first : last + 1])
    return list(dict.fromkeys(out))


@dataclass(frozen=True)
class ParsedReply:
    """The items of a reply; ``repair`` says what was repaired when the array was not valid JSON."""

    items: list
    repair: JSONRepair | None = None


async def parse_reply(text: str | None, repair_deadline_s: float = REPAIR_DEADLINE_S) -> ParsedReply:
    """The JSON array of a reply: the first fenced code block that holds one, else the whole reply, else the text
    from its first ``[`` to its last ``]``. When none of them is valid JSON, the first of them that is an array of
    objects but for benign damage (trailing commas, comments, single quotes, a missing comma: see
    :func:`insight_o3.base.untrusted.loads_repaired`) is repaired, within the same bounds, in a worker process
    stopped after ``repair_deadline_s`` seconds (the repair library is quadratic on some damage; the event loop
    never waits on it), and the repair is returned with the items, so that a reply like that is not paid for
    again. Elements are returned as they are (validation judges them). Raises :class:`SynthesisFormatError` when
    there is no non-empty array."""
    text = (text or "").strip()
    if not text:
        raise SynthesisFormatError("empty reply")
    candidates = _candidates(text)
    for cand in candidates:
        try:
            value = loads(cand)
        except ValueError:
            continue
        if isinstance(value, list):
            if not value:
                raise SynthesisFormatError("the JSON array is empty")
            return ParsedReply(value)
    for cand in candidates:
        cand = cand.strip()
        if not (cand.startswith("[") and cand.endswith("]")):
            continue  # only a closed array is repaired: a cut-off one is asked again
        try:
            value, repair = await loads_repaired_in_worker(cand, deadline_s=repair_deadline_s)
        except ValueError:
            continue
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            return ParsedReply(value, repair)  # repaired: only an array of objects (prose in brackets is no reply)
    raise SynthesisFormatError("no JSON array of items in the reply")


async def parse_items(text: str | None) -> list:
    """The items of :func:`parse_reply`."""
    return (await parse_reply(text)).items


# ----------------------------------------------------------------------------- the step
@dataclass(frozen=True)
class SynthTask:
    source: SourceImage
    prompt: str


STEP, DESC = "synthesize", "E.2 syntheses"


class SynthWork(StepItems[SynthTask]):
    """E.2 on one image; its record: ``status`` ok with ``items`` (the parsed array, as the model wrote it) and the
    reply, or failed with the reason and the last reply."""

    def __init__(self, run: BenchStepRun, records: dict[str, Any], api: Any, model: str):
        super().__init__(run, records)
        self.api, self.model = api, model  # api: messages are our JSON dicts, not the SDK TypedDicts

    def key(self, unit: SynthTask) -> str:
        return unit.source.key

    async def work(self, unit: SynthTask, emit: Emit) -> JSONObject:
        meter = unit_meter()
        messages = [{"role": "user", "content": unit.prompt}]
        base = {
            "sample_key": unit.source.key,
            "subset": unit.source.subset,
            "prompt_sha256": hashlib.sha256(unit.prompt.encode("utf-8")).hexdigest(),
        }
        asked = await self.ask_parsed(self.api, self.model, messages, parse_reply)
        usage = meter.to_dict()
        parsed = asked.parsed
        out: JSONObject
        if parsed is None:
            out = {
                **base,
                "status": "failed",
                "error": f"no JSON array after {asked.attempts} attempt(s): {asked.reason}",
                "reply": asked.reply[:8000],
            }
        else:
            repaired = {"json_repair": parsed.repair.to_dict()} if parsed.repair is not None else {}
            out = {**base, "status": "ok", "items": parsed.items, **repaired, "reply": asked.reply}
        return self.carried({**out, "attempts": asked.attempts, "usage": usage, "cost_usd": self.run.priced(usage)})

    def failed(self, unit: SynthTask, reason: str) -> JSONObject:
        src = unit.source
        return self.carried({"sample_key": src.key, "subset": src.subset, "status": "failed", "error": reason})


@dataclass(frozen=True)
class Readiness:
    """Which images are ready for E.2 (their full image and every layout extracted ok) and which wait."""

    ready: list[SynthTask]
    waiting: list[str]
    waiting_failed: int  # of those waiting, the ones with a failed extraction record
    sources_total: int

    def waiting_note(self, ws: Workspace) -> str:
        """How many images wait for their extraction, and the command to run first."""
        n = len(self.waiting)
        return (
            f"{n} of {self.sources_total} image(s) wait for their E.1 extraction ({self.waiting_failed} with a "
            f"failed extraction record, {n - self.waiting_failed} not extracted yet); run "
            f"'{step_command(ws, 'extract')}' first (it retries failed records), then this command again"
        )


def readiness(ws: Workspace, sources: list[SourceImage], mode: str, templates: Mapping[str, str] | None) -> Readiness:
    """Images whose full image and every layout have an ok extraction (read under the workspace lock);
    :class:`InputNotReady` when there are images and none is ready."""
    extracted = read_log(ws.records("extract"))
    ex = extractions_by_image(extracted)
    ready: list[SynthTask] = []
    waiting: list[str] = []
    for s in sources:
        slot = ex.get(s.key)
        if slot is None or slot["full"] is None or not s.layout_ids <= set(slot["layouts"]):
            waiting.append(s.key)
            continue
        ready.append(SynthTask(s, build_prompt(s, slot["full"], slot["layouts"], mode, templates)))
    failed = {str(r.get("image_key")) for r in extracted.values() if r.get("status") != "ok"}
    r = Readiness(ready, waiting, sum(k in failed for k in waiting), len(sources))
    if waiting and not ready:
        raise InputNotReady(f"no image is ready for synthesis: {r.waiting_note(ws)}")
    return r


def _summary(records: dict[str, Any], order: list[str], waiting: int) -> JSONObject:
    out = step_summary(STEP, records, order)
    out["images_waiting_for_extraction"] = waiting
    ok = [records[k] for k in order if records.get(k, {}).get("status") == "ok"]
    out["synthesized_items"] = sum(len(r.get("items") or []) for r in ok)
    out["replies_repaired"] = sum("json_repair" in r for r in ok)
    return out


async def synthesize(
    run: BenchStepRun,
    model: str,
    endpoint: Endpoint,
    sources: list[SourceImage],
    *,
    layout_text_mode: str = "both",
    templates: Mapping[str, str] | None = None,
) -> tuple[JobResult[JSONObject], str | None]:
    """E.2 on every image whose extractions are all done, one record per image; the step's result (images waiting
    for their extraction are not done: status 1) and the note saying what to run for them (None: none waits)."""
    with open_step(run, STEP) as (rd, log):
        r = readiness(run.ws, sources, layout_text_mode, templates)
        tasks = limited(r.ready, run.settings.limit)
        async with Clients(rd.guard) as clients:
            work = SynthWork(run, log.records, step_client(clients, run.settings, endpoint, "synthesizer"), model)
            await execute_retried(rd, tasks, work, clients, desc=DESC)
        order = [t.source.key for t in tasks]
        summary = _summary(log.records, order, len(r.waiting))
        close_step(run, STEP, log, order, summary)
    result = JobResult(summary, int(summary["failed"]) + len(r.waiting))  # images waiting are not done (status 1)
    return result, r.waiting_note(run.ws) if r.waiting else None
