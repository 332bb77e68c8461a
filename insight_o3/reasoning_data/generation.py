"""Step ``generate``: N progressive reasoning chains per question (:mod:`.chain`) over an OpenAI-compatible endpoint.

One unit is one chain, keyed ``<question key>#<k>``. Every request of a chain is the session's messages with the
question's image (Qwen2-VL's ``smart_resize`` between 224² and 1280·28² pixels, BICUBIC, sent losslessly as PNG: the
release's ``min_pixels``/``max_pixels``, so the server does not resize it again), the release's sampling under the
run's ``completion_kwargs``, and a ``seed`` derived from the run's seed, the chain's key and its attempt (so a rerun
asks the same questions; ours, row IVD9). A malformed chain (:meth:`.chain.ChainSession.problem`) is generated again
up to ``chain_retries`` times, each attempt kept in the record (``attempts``); still malformed, the record's status
is ``malformed`` (final: the data is bad, not the run). A request lost after the SDK's retries fails the unit
(``failed``, asked again by the next run).

The user text of a question is the question, then its options block (ours, row IVD2: the release's data files are not
released); the record keeps it (``prompt``), with the question fields the later steps need.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..base.json_types import JSONObject
from ..endpoints.chat import chat_once
from ..imaging.images import EncodedImage, ImageStore, Resize
from ..jobs.clients import Clients
from ..jobs.execute import Emit, JobResult, unit_meter
from ..jobs.retried import execute_retried
from ..protocol.sample import Sample
from ..protocol.trajectory import image_part, to_openai
from .chain import ChainSession
from .prompts import GENERATION_KWARGS, IMAGE_MAX_PIXELS, IMAGE_MIN_PIXELS
from .settings import GenerateSettings, ModelAccess
from .steps import EngineItems, EngineRun, close_step, engine_client, engine_images, open_step, step_summary

#: the view of a question's image the generator (and the scorer) sees
IMAGE_RESIZE = Resize.qwen(IMAGE_MAX_PIXELS, IMAGE_MIN_PIXELS)


@dataclass(frozen=True)
class ChainUnit:
    """One chain of one question."""

    sample: Sample
    k: int

    @property
    def key(self) -> str:
        return f"{self.sample.key}#{self.k}"


def units_for(samples: list[Sample], num_chains: int) -> list[ChainUnit]:
    """Every chain of the step, question by question (one image decode serves a question's chains)."""
    return [ChainUnit(s, k) for s in samples for k in range(num_chains)]


def chain_seed(seed: int, key: str, attempt: int) -> int:
    """The ``seed`` of every request of a chain's attempt (32 bits of a sha256)."""
    return int(hashlib.sha256(f"{seed}:{key}:{attempt}".encode()).hexdigest()[:8], 16)


def question_fields(s: Sample) -> JSONObject:
    """What the later steps need of a question."""
    return {
        "question_key": s.key,
        "question_id": s.question_id,
        "question": s.question,
        "options": s.options,
        "answer": s.answer,
        "category": s.category,
        "image": s.image,
        "image_path": s.image_path,
    }


STEP, DESC = "generate", "chains"


class GenerateWork(EngineItems[ChainUnit]):
    """One chain: asked until well-formed (``chain_retries`` more times), else recorded ``malformed`` (final)."""

    def __init__(
        self,
        run: EngineRun,
        records: dict[str, Any],
        api: Any,
        images: ImageStore,
        generator: ModelAccess,
        settings: GenerateSettings,
    ):
        super().__init__(run, records, final_statuses=("ok", "malformed"))
        self.api, self.images, self.generator, self.s = api, images, generator, settings
        self.kwargs: Mapping[str, Any] = {**GENERATION_KWARGS, **settings.completion_kwargs}

    def key(self, unit: ChainUnit) -> str:
        return unit.key

    def base(self, unit: ChainUnit) -> JSONObject:
        return {"sample_key": unit.key, "chain": unit.k, **question_fields(unit.sample), "prompt": unit.sample.prompt()}

    async def _chain(self, unit: ChainUnit, enc: EncodedImage, attempt: int) -> ChainSession:
        session = ChainSession(unit.sample.prompt(), image_part(enc.ref))
        seed = chain_seed(self.s.seed, unit.key, attempt)
        while not session.done:
            messages = to_openai(session.messages, {enc.ref: enc}.__getitem__, join_text=False)
            reply = await chat_once(self.api, self.generator.model, messages, n=1, seed=seed, **self.kwargs)
            session.reply(reply.text, reply.finish_reason)
        return session

    async def work(self, unit: ChainUnit, emit: Emit) -> JSONObject:
        meter = unit_meter()
        enc = await self.images.aget(unit.sample.image_path, IMAGE_RESIZE)
        attempts: list[JSONObject] = []
        for attempt in range(self.s.chain_retries + 1):
            session = await self._chain(unit, enc, attempt)
            problem = session.problem()
            if problem is None:
                rec = {**self.base(unit), "status": "ok", **session.result(), "attempts": attempts}
                return self.with_usage({**rec, "image_size": list(enc.ref.size)}, meter)
            attempts.append({"problem": problem, **session.result()})
        rec = {**self.base(unit), "status": "malformed", "problem": attempts[-1]["problem"], "attempts": attempts}
        return self.with_usage({**rec, "image_size": list(enc.ref.size)}, meter)


async def run_generate(
    run: EngineRun, generator: ModelAccess, settings: GenerateSettings, units: list[ChainUnit]
) -> JobResult[JSONObject]:
    """Every chain of ``units`` not final yet; the step's summary (exit status 1 while some failed)."""
    with open_step(run, STEP) as (rd, log):
        async with Clients(rd.guard) as clients:
            api = engine_client(clients, run.controls, generator, "generator")
            images = engine_images(clients, run.controls)
            work = GenerateWork(run, log.records, api, images, generator, settings)
            await execute_retried(rd, units, work, clients, desc=DESC)
        order = [u.key for u in units]
        summary = step_summary(STEP, log.records, order)
        close_step(run, STEP, log, order, summary)
    return JobResult(summary, int(summary.get("failed", 0)))
