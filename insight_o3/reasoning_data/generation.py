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
from ..endpoints.usage import CostModel
from ..imaging.images import EncodedImage, ImageStore, Resize
from ..jobs.controls import RunControls
from ..jobs.integrity import Invocation
from ..jobs.job import Emit
from ..protocol.sample import Sample
from ..protocol.trajectory import image_part, to_openai
from .chain import ChainSession
from .prompts import GENERATION_KWARGS, IMAGE_MAX_PIXELS, IMAGE_MIN_PIXELS
from .settings import GenerateSettings, ModelAccess
from .steps import EngineJob
from .workspace import WorkDir

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


class GenerateJob(EngineJob[ChainUnit]):
    step = "generate"
    desc = "chains"
    final_statuses = ("ok", "malformed")

    def __init__(
        self,
        ws: WorkDir,
        run: RunControls,
        generator: ModelAccess,
        settings: GenerateSettings,
        *,
        invocation: Invocation,
        card: JSONObject,
        cost_model: CostModel | None = None,
    ):
        super().__init__(ws, run, invocation=invocation, card=card, cost_model=cost_model)
        self.generator, self.s = generator, settings
        self.kwargs: Mapping[str, Any] = {**GENERATION_KWARGS, **settings.completion_kwargs}

    def key(self, unit: ChainUnit) -> str:
        return unit.key

    def base(self, unit: ChainUnit) -> JSONObject:
        return {"sample_key": unit.key, "chain": unit.k, **question_fields(unit.sample), "prompt": unit.sample.prompt()}

    async def setup(self) -> None:
        self.api: Any = self.endpoint_client(self.generator, "generator")
        self.images = ImageStore.for_image_workers(
            self.run_controls.image_workers, fmt="PNG", alpha="white", originals_cached=2
        )
        self.on_close(self.images.close)

    async def _chain(self, unit: ChainUnit, enc: EncodedImage, attempt: int) -> ChainSession:
        session = ChainSession(unit.sample.prompt(), image_part(enc.ref))
        seed = chain_seed(self.s.seed, unit.key, attempt)
        while not session.done:
            messages = to_openai(session.messages, {enc.ref: enc}.__getitem__, join_text=False)
            reply = await chat_once(self.api, self.generator.model, messages, n=1, seed=seed, **self.kwargs)
            session.reply(reply.text, reply.finish_reason)
        return session

    async def work(self, unit: ChainUnit, emit: Emit) -> JSONObject:
        meter = self.meter()
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

    def failed(self, unit: ChainUnit, reason: str) -> JSONObject:
        return {**self.base(unit), "status": "failed", "error": reason}
