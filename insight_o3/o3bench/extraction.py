"""Step ``extract``: E.1 information extraction on every layout crop and on the full image (B.2 step 2).

Each request is ``[system: EXTRACTION_PROMPT, user: [image]]`` (``--extract_prompt_role user`` sends
``[user: [image, EXTRACTION_PROMPT]]`` instead, for servers whose chat template drops system messages);
``--extract_prompt FILE`` sends one's own wording in its place (it must ask for the same three sections). The crop is
cut from the original image at the layout's box; crops and full images are resized to Qwen2.5-VL's ``smart_resize``
grid under ``--max_pixels`` (what vLLM would do to it anyway), so the server sees exactly the pixels recorded.

A reply is parsed into its three sections (:func:`parse_extraction`); a reply without them, or cut off by the token
limit, is asked again (``--parse_retries``) and then recorded as failed with the last reply and the reason. Failed
records are retried by the next run.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from ..base.json_types import JSONObject
from ..endpoints.endpoint import Endpoint
from ..imaging.images import ImageRef, ImageStore, Resize
from ..jobs.clients import Clients
from ..jobs.execute import Emit, JobResult, unit_meter
from ..jobs.retried import execute_retried
from ..protocol.trajectory import image_part, message, to_openai
from .prompts import EXTRACTION_PROMPT
from .records import SourceImage
from .steps import (
    BenchStepRun,
    StepItems,
    close_step,
    open_step,
    step_client,
    step_summary,
)

SECTIONS = ("identification", "caption", "ocr")
_TITLES = {"image identification": "identification", "detailed caption": "caption", "extracted ocr": "ocr"}
# a heading line: optional '#'s, optional bold, the title, optional "(if any)", optional colon / bold; spaces
# anywhere between. Each run of spaces belongs to one [ \t]* (two in a row around an optional part split a long run
# every way before failing: polynomial)
_HEADING = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*)?(?:(?:\*\*|__)[ \t]*)?(image identification|detailed caption|extracted ocr)"
    r"[ \t]*(?:\(if any\)[ \t]*)?(?::[ \t]*)?(?:(?:\*\*|__)[ \t]*)?(?::[ \t]*)?$",
    re.IGNORECASE | re.MULTILINE,
)
_LETTER_RUN, _SPACE_RUN = re.compile(r"[a-zA-Z]*"), re.compile(r"\s*")  # matched at one position: no backtracking
FULL_IMAGE = "full"


@dataclass(frozen=True)
class Extraction:
    """The three sections of an E.1 reply, stripped. ``ocr`` is as the model wrote it ("None" when no text)."""

    identification: str
    caption: str
    ocr: str

    @property
    def has_text(self) -> bool:
        return self.ocr.strip().strip('"').strip().lower() not in ("", "none")

    def to_dict(self) -> JSONObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Extraction:
        return cls(str(d.get("identification", "")), str(d.get("caption", "")), str(d.get("ocr", "")))


class ExtractionFormatError(ValueError):
    """A reply without the three sections of E.1's output format (the message says what is missing)."""


def unfenced(text: str) -> str | None:
    """The inside of a stripped text that is one code fence: what ``^\\s*```[a-zA-Z]*\\s*\\n(.*)\\n\\s*```\\s*$``
    (``re.DOTALL``) captured, in linear time (that expression backtracked cubically on a run of newlines). The
    opening is ````` `` , letters, then spaces holding a newline; the closing a newline, spaces, ````` `` at the end.
    Greedy as the expression: the content ends at the last newline of the spaces before the closing fence and starts
    after the last newline of the opening's spaces that is before that end."""
    if not (text.startswith("```") and text.endswith("```")):
        return None
    i = _LETTER_RUN.match(text, 3).end()  # type: ignore[union-attr]  # a run may be empty
    j = _SPACE_RUN.match(text, i).end()  # type: ignore[union-attr]
    close = len(text) - 3
    k = len(text[:close].rstrip())  # the spaces before the closing fence start at k
    end = text.rfind("\n", k, close)
    if end < 0:
        return None
    start = text.rfind("\n", i, min(j, end))
    return text[start + 1 : end] if start >= 0 else None


def parse_extraction(text: str | None) -> Extraction:
    """Split an E.1 reply into its three sections, in order: ``## Image Identification``, ``## Detailed Caption``,
    ``## Extracted OCR (if any)``. Headings may carry other ``#`` levels, bold or a colon; a reply wrapped in one code
    fence is unwrapped. Raises :class:`ExtractionFormatError` when a section is missing, out of order or (for the
    first two) empty; an empty OCR section reads as ``None``."""
    text = (text or "").strip()
    fenced = unfenced(text)
    if fenced is not None:
        text = fenced
    found: dict[str, re.Match] = {}
    for m in _HEADING.finditer(text):
        name = _TITLES[m.group(1).lower()]
        if name in found:
            continue
        found[name] = m
        if name == "ocr":
            break  # everything after is OCR text, which may contain a line that looks like a heading
    missing = [n for n in SECTIONS if n not in found]
    if missing:
        titles = {v: k.title() for k, v in _TITLES.items()}
        raise ExtractionFormatError("missing section(s): " + ", ".join(f"'## {titles[n]}'" for n in missing))
    starts = [found[n].start() for n in SECTIONS]
    if starts != sorted(starts):
        raise ExtractionFormatError("sections out of order (expected identification, caption, OCR)")
    bodies = []
    for i, name in enumerate(SECTIONS):
        end = found[SECTIONS[i + 1]].start() if i + 1 < len(SECTIONS) else len(text)
        bodies.append(text[found[name].end() : end].strip())
    ident, caption, ocr = bodies
    if not ident:
        raise ExtractionFormatError("empty section '## Image Identification'")
    if not caption:
        raise ExtractionFormatError("empty section '## Detailed Caption'")
    return Extraction(ident, caption, ocr or "None")


async def _parse_async(text: str) -> Extraction:
    return parse_extraction(text)  # linear in the reply: no worker needed


@dataclass(frozen=True)
class ExtractTask:
    """One E.1 request: the full image (``layout_id`` None) or one layout crop."""

    image_key: str
    image: str
    layout_id: int | None
    bbox: tuple[float, float, float, float] | None

    @property
    def sample_key(self) -> str:
        return f"{self.image_key}#{FULL_IMAGE if self.layout_id is None else f'L{self.layout_id}'}"


def tasks_for(sources: list[SourceImage]) -> list[ExtractTask]:
    """Every request of the step, image by image (full image first, then its layouts in id order), so one decode
    of an original serves all its crops."""
    out = []
    for s in sources:
        out.append(ExtractTask(s.key, s.image, None, None))
        out.extend(ExtractTask(s.key, s.image, lay.layout_id, lay.bbox) for lay in s.layouts)
    return out


def extraction_resize(max_pixels: int | None) -> Resize:
    """The view sent to the VLM: Qwen2.5-VL's ``smart_resize`` grid under ``max_pixels`` (None: the grid's default
    budget, 16384 * 28 * 28)."""
    return Resize.qwen(max_pixels)


def build_messages(ref: ImageRef, role: str = "system", prompt: str = EXTRACTION_PROMPT) -> list[JSONObject]:
    """The E.1 request with an image reference (``trajectory`` messages; encoded by ``to_openai``); ``prompt``: the
    paper's E.1, or one's own (``--extract_prompt``)."""
    if role == "system":
        return [message("system", prompt), message("user", image_part(ref))]
    if role == "user":
        return [message("user", image_part(ref), prompt)]
    raise ValueError(f"prompt role must be 'system' or 'user', got {role!r}")


# ----------------------------------------------------------------------------- the step
STEP, DESC = "extract", "E.1 extractions"


class ExtractWork(StepItems[ExtractTask]):
    """E.1 on one task; its record: ``status`` ok (with the three sections) or failed (with the reason and, for a
    malformed reply, the last reply)."""

    def __init__(
        self,
        run: BenchStepRun,
        records: dict[str, Any],
        api: Any,  # messages are our JSON dicts, not the SDK TypedDicts
        images: ImageStore,
        model: str,
        resize: Resize,
        prompt_role: str,
        prompt: str,
    ):
        super().__init__(run, records)
        self.api, self.images, self.model, self.resize = api, images, model, resize
        self.prompt_role, self.prompt = prompt_role, prompt

    def key(self, t: ExtractTask) -> str:
        return t.sample_key

    def _base(self, t: ExtractTask) -> JSONObject:
        return {"sample_key": t.sample_key, "image_key": t.image_key, "layout_id": t.layout_id}

    async def work(self, t: ExtractTask, emit: Emit) -> JSONObject:
        meter = unit_meter()
        enc = await self.images.aget(t.image, self.resize, region=t.bbox)
        messages = to_openai(build_messages(enc.ref, self.prompt_role, self.prompt), lambda _ref: enc)
        asked = await self.ask_parsed(self.api, self.model, messages, _parse_async)
        usage = meter.to_dict()
        out = {**self._base(t)}
        if asked.parsed is not None:
            out.update(status="ok", **asked.parsed.to_dict())
        else:
            out.update(
                status="failed",
                error=f"no usable reply after {asked.attempts} attempt(s): {asked.reason}",
                reply=asked.reply[:4000],
            )
        return self.carried(
            {
                **out,
                "attempts": asked.attempts,
                "image": enc.ref.to_dict(),
                "usage": usage,
                "cost_usd": self.run.priced(usage),
            }
        )

    def failed(self, t: ExtractTask, reason: str) -> JSONObject:
        return self.carried({**self._base(t), "status": "failed", "error": reason})


def limited_images(tasks: list[ExtractTask], limit: int | None) -> list[ExtractTask]:
    """``--limit N`` counts images: their full image and every layout."""
    if limit is None:
        return tasks
    keep = set(list(dict.fromkeys(t.image_key for t in tasks))[:limit])
    return [t for t in tasks if t.image_key in keep]


def _summary(records: dict[str, Any], order: list[str]) -> JSONObject:
    out = step_summary(STEP, records, order)
    by_image: dict[str, bool] = {}
    for k in order:
        rec = records.get(k)
        image_key = k.rsplit("#", 1)[0]
        ok = rec is not None and rec.get("status") == "ok"
        by_image[image_key] = by_image.get(image_key, True) and ok
    out["images"] = len(by_image)
    out["images_complete"] = sum(by_image.values())
    return out


async def extract(
    run: BenchStepRun,
    model: str,
    endpoint: Endpoint,
    tasks: list[ExtractTask],
    *,
    max_pixels: int | None,
    prompt_role: str,
    prompt: str = EXTRACTION_PROMPT,
) -> JobResult[JSONObject]:
    """E.1 on every task (:func:`tasks_for`) not done yet, one record per task; the step's summary."""
    tasks = limited_images(tasks, run.settings.limit)
    with open_step(run, STEP) as (rd, log):
        async with Clients(rd.guard) as clients:
            # tasks come image by image: each worker keeps the last two originals decoded while their crops are cut
            images = ImageStore.for_image_workers(run.settings.controls.image_workers, originals_cached=2)
            clients.on_close(images.close)
            api = step_client(clients, run.settings, endpoint, "extractor")
            resize = extraction_resize(max_pixels)
            work = ExtractWork(run, log.records, api, images, model, resize, prompt_role, prompt)
            await execute_retried(rd, tasks, work, clients, desc=DESC)
        order = [t.sample_key for t in tasks]
        summary = _summary(log.records, order)
        close_step(run, STEP, log, order, summary)
    return JobResult(summary, int(summary["failed"]))


def extractions_by_image(records: dict[str, dict]) -> dict[str, JSONObject]:
    """``{image_key: {"full": Extraction, "layouts": {layout_id: Extraction}}}`` from the ok records of the step."""
    out: dict[str, dict] = {}
    for rec in records.values():
        if rec.get("status") != "ok":
            continue
        slot = out.setdefault(str(rec.get("image_key")), {"full": None, "layouts": {}})
        ex = Extraction.from_dict(rec)
        if rec.get("layout_id") is None:
            slot["full"] = ex
        else:
            slot["layouts"][int(rec["layout_id"])] = ex
    return out
