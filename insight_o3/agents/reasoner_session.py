"""The vReasoner protocol (paper F.1) as a sans-IO state machine.

A driver sends :attr:`ReasonerSession.messages`, feeds each reply to :meth:`ReasonerSession.step`
and, on a ``search`` action, runs a vSearcher episode and hands its :class:`LocateResult` to
:meth:`ReasonerSession.provide_search_result`. ``mode="infer"`` uses the inference prompts,
``mode="train"`` the training prompts, which require ``<tool_feedback>`` in every turn.

Protocol decisions:

* the first user turn is the question text followed by the image (``{question}<image>``);
* a found box is cropped from the **original** image and resized only if over the vReasoner's
  pixel budget; the crop comes after the continuation text (limit text after the last call);
* not found / invalid / failed vSearcher episodes all give the "could not locate" text;
* a turn with neither a tool call nor ``\\boxed{}`` (train mode: or no valid ``<tool_feedback>``)
  gets the format-retry text, at most ``max_format_retries`` times, then the episode stops;
* a tool call after the limit is not run: the episode stops with that text as the final message;
* feedback: in train mode the feedback of the turns that follow call *k*'s result rates call *k*
  (the last parsable value wins); ``feedback[k]`` is None when it was never given.

An episode therefore has at most ``max_search_calls + max_format_retries + 1`` assistant turns.
"""
from __future__ import annotations

from dataclasses import dataclass

from PIL import Image

from ..images import ImageRef, ImageStore, Resize
from ..parsing import parse_reasoner_turn
from ..prompts import (VREASONER_INFER_CONTINUE_PROMPT, VREASONER_INFER_FORMAT_RETRY_PROMPT,
                       VREASONER_INFER_LIMIT_PROMPT, VREASONER_INFER_NOT_FOUND_PROMPT,
                       VREASONER_INFER_SYSTEM_PROMPT, VREASONER_TRAIN_CONTINUE_PROMPT,
                       VREASONER_TRAIN_FORMAT_RETRY_PROMPT, VREASONER_TRAIN_LIMIT_PROMPT,
                       VREASONER_TRAIN_NOT_FOUND_PROMPT, VREASONER_TRAIN_SYSTEM_PROMPT)
from ..trajectory import image_part, image_refs, message
from .searcher_session import LocateResult
from .views import pil_view, plan_view

REASONER_MODES = ("infer", "train")
_PROMPTS = {
    "infer": dict(system=VREASONER_INFER_SYSTEM_PROMPT, cont=VREASONER_INFER_CONTINUE_PROMPT,
                  limit=VREASONER_INFER_LIMIT_PROMPT, not_found=VREASONER_INFER_NOT_FOUND_PROMPT,
                  retry=VREASONER_INFER_FORMAT_RETRY_PROMPT),
    "train": dict(system=VREASONER_TRAIN_SYSTEM_PROMPT, cont=VREASONER_TRAIN_CONTINUE_PROMPT,
                  limit=VREASONER_TRAIN_LIMIT_PROMPT, not_found=VREASONER_TRAIN_NOT_FOUND_PROMPT,
                  retry=VREASONER_TRAIN_FORMAT_RETRY_PROMPT),
}


@dataclass
class ReasonerStep:
    """What the driver does next: ``search`` (run the vSearcher on ``description``), ``retry``
    (send ``messages`` again: a format-retry turn was appended), ``answer`` or ``stop`` (done)."""

    action: str
    description: str | None = None
    answer: str | None = None
    feedback: str | None = None
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.action in ("answer", "stop")


@dataclass
class SearchCall:
    """One vSearcher call as the vReasoner saw it; ``feedback`` is the vReasoner's rating."""

    description: str
    result: LocateResult | None = None
    crop: ImageRef | None = None
    feedback: str | None = None


class ReasonerSession:
    """One vReasoner episode on one image and question."""

    def __init__(self, image_path: str, question_text: str, images: ImageStore, max_pixels: int | None = None,
                 mode: str = "infer", max_search_calls: int = 6, system_prompt: str | None = None,
                 max_format_retries: int = 2):
        if mode not in REASONER_MODES:
            raise ValueError(f"vReasoner mode must be one of {REASONER_MODES}, got {mode!r}")
        self.image_path, self.question_text, self.images, self.mode = str(image_path), question_text, images, mode
        self.max_search_calls, self.max_format_retries = max_search_calls, max_format_retries
        self.prompts = _PROMPTS[mode]
        self.resize = Resize(max_pixels)
        first = plan_view(images, self.image_path, self.resize)
        system = system_prompt if system_prompt is not None else self.prompts["system"]
        self.messages: list[dict] = ([message("system", system)] if system else []) + \
            [message("user", question_text, image_part(first))]
        self.calls: list[SearchCall] = []
        self.n_format_retries = 0
        self.n_turns = 0
        self.pending: SearchCall | None = None
        self.final_text: str | None = None
        self.answer: str | None = None
        self.status: str | None = None    # answered | format_failed | search_after_limit | failed
        self.error: str | None = None

    # ------------------------------------------------------------------ state
    @property
    def done(self) -> bool:
        return self.status is not None

    @property
    def n_search_calls(self) -> int:
        return sum(c.result is not None for c in self.calls)

    @property
    def n_search_not_found(self) -> int:
        return sum(c.result is not None and not c.result.found for c in self.calls)

    @property
    def feedback(self) -> list[str | None]:
        return [c.feedback for c in self.calls if c.result is not None]

    @property
    def image_refs(self) -> list[ImageRef]:
        return image_refs(self.messages)

    def pil(self, ref: ImageRef) -> Image.Image:
        return pil_view(self.images, self.resize, ref)

    # ------------------------------------------------------------------ protocol
    def step(self, assistant_text: str) -> ReasonerStep:
        """Consume one vReasoner reply and say what happens next."""
        if self.done or self.pending is not None:
            raise RuntimeError("vReasoner session is finished or waiting for a search result")
        text = assistant_text or ""
        self.n_turns += 1
        turn = parse_reasoner_turn(text, require_feedback=self.mode == "train")
        if self.calls and turn.feedback is not None:
            self.calls[-1].feedback = turn.feedback
        msg = message("assistant", text)
        self.messages.append(msg)
        if turn.action == "search":
            if self.n_search_calls >= self.max_search_calls:
                return self._finish("search_after_limit", text, "stop", error="tool call after the search limit")
            self.pending = SearchCall(turn.description)
            msg["search"] = {"description": turn.description}
            return ReasonerStep("search", description=turn.description, feedback=turn.feedback)
        if turn.action == "answer":
            self.answer = turn.answer
            return self._finish("answered", text, "answer", answer=turn.answer, feedback=turn.feedback)
        if self.n_format_retries >= self.max_format_retries:
            return self._finish("format_failed", text, "stop", error=turn.error)
        self.n_format_retries += 1
        self.messages.append(message("user", self.prompts["retry"]))
        return ReasonerStep("retry", feedback=turn.feedback, error=turn.error)

    def _finish(self, status: str, text: str, action: str, **kw) -> ReasonerStep:
        self.status, self.final_text, self.error = status, text, kw.get("error")
        return ReasonerStep(action, **kw)

    def provide_search_result(self, result: LocateResult) -> ImageRef | None:
        """Record the vSearcher's result for the pending call and append the next user turn;
        returns the crop shown (None when nothing was found)."""
        if self.pending is None:
            raise RuntimeError("no search call is pending")
        call, self.pending = self.pending, None
        call.result = result
        self.calls.append(call)
        self.messages[-1]["search"] = result.to_record()
        if result.found:
            call.crop = plan_view(self.images, self.image_path, self.resize, result.box_original)
            last = self.n_search_calls >= self.max_search_calls
            self.messages.append(message("user", self.prompts["limit" if last else "cont"], image_part(call.crop)))
        else:
            self.messages.append(message("user", self.prompts["not_found"]))
        return call.crop

    def fail(self, reason: str) -> None:
        """The driver could not get a vReasoner reply (API error after retries)."""
        if not self.done:
            self.status, self.error, self.pending = "failed", reason, None
