"""The vReasoner protocol (paper F.1) as a sans-IO state machine, following the released fork.

A driver sends :attr:`ReasonerSession.messages`, feeds each reply to :meth:`ReasonerSession.step`
and, on a ``search`` action, runs a vSearcher episode and hands its :class:`LocateResult` to
:meth:`ReasonerSession.provide_search_result`. ``mode="infer"`` is the fork's validation setting
(tool feedback off), ``mode="train"`` its training setting (the system prompt asks for
``<tool_feedback>`` and a turn without a valid one is a format error).

Protocol decisions, all from the fork the release pins (``verl/utils/vsearch_gpt_async.py`` and
``verl/experimental/agent_loop/insight_o3_agent_loop.py`` at 926d137; see docs/fidelity.md):

* every user turn puts its image *before* its text: ``[image, question]`` first, ``[crop, hint]``
  after a found region;
* a found box (vSearcher model-frame pixels) is mapped to original pixels with ``round`` and cut
  from the **original** image; a crop with a short side under 56 px is enlarged to 56 px, then one
  under 112x112 px of area to that area, then the vReasoner's pixel budget applies (LANCZOS);
  a box with no area inside the image counts as not found;
* "not found" (``[0, 0, 0, 0]``) gives the could-not-locate text without an image;
* once ``max_search_calls`` assistant turns contain ``<tool_call>``, the next user turn is the
  last-round text (with the crop of the last search if it found one) instead;
* a turn with neither ``region_description={...}`` in a tool call nor ``\\boxed{`` (train mode: or
  without a valid ``<tool_feedback>``) gets the format-retry text — or, in the last round, the
  last-round text and crop again — up to ``max_round_attempts`` replies per round (fork: 5 at
  validation, 3 in training); when they run out the episode ends with no answer
  (``format_failed``);
* a tool call past the limit ends the episode with no answer (``search_after_limit``), and so does
  a vSearcher episode without a valid box (``search_invalid``: the fork stops the vReasoner when
  the vSearcher's answer does not parse).

Only ``answered`` episodes have an answer to judge.
"""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image

from ..imaging.images import ImageRef, ImageStore, Resize
from ..imaging.view_ops import EnlargeCrop, FitPixels
from ..protocol.limits import LIMITS
from ..protocol.parsing import parse_reasoner_turn
from ..protocol.prompts import (
    FORK_HINTS,
    VREASONER_INFER_SYSTEM_PROMPT,
    VREASONER_TRAIN_SYSTEM_PROMPT,
    ReasonerHints,
)
from ..protocol.searcher_rules import resize_bbox
from ..protocol.statuses import EpisodeStatus, LocateStatus, ReasonerAction, ReasonerMode, ReplyKind
from ..protocol.trajectory import image_part, image_refs, message
from .searcher_session import LocateResult
from .views import pil_view, plan_view

REASONER_MODES = tuple(m.value for m in ReasonerMode)
_SYSTEM = {ReasonerMode.INFER: VREASONER_INFER_SYSTEM_PROMPT, ReasonerMode.TRAIN: VREASONER_TRAIN_SYSTEM_PROMPT}
#: Replies per round the fork accepts before giving up (``max_round_retries_val`` / ``max_round_retries``).
ROUND_ATTEMPTS = {
    ReasonerMode.INFER: LIMITS.max_format_retries_eval + 1,
    ReasonerMode.TRAIN: LIMITS.max_format_retries_train + 1,
}
#: The fork's crop enlargement for the vReasoner (``crop_min_side``, ``crop_min_area``).
CROP_MIN_SIDE = 56
CROP_MIN_AREA = 112 * 112


def vreasoner_resize(max_pixels: int | None) -> Resize:
    """How the vReasoner's images are sized: the budget for the image and crops, crops enlarged first."""
    enlarge = EnlargeCrop(CROP_MIN_SIDE, CROP_MIN_AREA)
    return Resize((enlarge, FitPixels(max_pixels)) if max_pixels else (enlarge,))


def crop_region(result: LocateResult, size: tuple[int, int]) -> tuple[int, int, int, int] | None:
    """The crop box (original pixels, ints) for a found vSearcher box, or None when it has no area
    inside the image (the fork's ``resize_bbox`` rounding and ``_crop_prepare_data_url`` clamping)."""
    W, H = size
    if result.box_model is not None and result.model_size is not None:
        mw, mh = result.model_size
        x1, y1, x2, y2 = resize_bbox(result.box_model, (mw, mh), (W, H))  # the fork's round(v * W / w)
    elif result.box_original is not None:
        x1, y1, x2, y2 = (round(v) for v in result.box_original)
    else:
        return None
    x1, y1, x2, y2 = max(0, x1), max(0, y1), min(W, x2), min(H, y2)
    if x2 <= x1 or y2 <= y1:
        return None
    return x1, y1, x2, y2


@dataclass
class ReasonerStep:
    """What the driver does next: ``search`` (run the vSearcher on ``description``), ``retry``
    (send ``messages`` again: a retry turn was appended), ``answer`` or ``stop`` (done)."""

    action: ReasonerAction
    description: str | None = None
    answer: str | None = None
    feedback: str | None = None
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.action in (ReasonerAction.ANSWER, ReasonerAction.STOP)


@dataclass
class SearchCall:
    """One vSearcher call as the vReasoner saw it; ``feedback`` is the vReasoner's rating."""

    description: str
    result: LocateResult | None = None
    crop: ImageRef | None = None
    feedback: str | None = None


class ReasonerSession:
    """One vReasoner episode on one image and question.

    ``max_format_retries``: retries per round after the first reply (default: the fork's, 4 for
    ``infer`` and 2 for ``train``, i.e. 5 and 3 replies per round). ``hints``: the four user hints
    (default: the fork's, :data:`~insight_o3.protocol.prompts.FORK_HINTS`; the recipe's ``vsearch.variant=paper``
    trains with the paper's F.1 ones)."""

    def __init__(
        self,
        image_path: str,
        question_text: str,
        images: ImageStore,
        max_pixels: int | None = None,
        mode: str = ReasonerMode.INFER,
        max_search_calls: int = LIMITS.max_search_calls,
        system_prompt: str | None = None,
        max_format_retries: int | None = None,
        hints: ReasonerHints = FORK_HINTS,
    ):
        if mode not in REASONER_MODES:
            raise ValueError(f"vReasoner mode must be one of {REASONER_MODES}, got {mode!r}")
        mode = ReasonerMode(mode)
        self.image_path, self.question_text, self.images, self.mode = str(image_path), question_text, images, mode
        self.max_search_calls, self.hints = max_search_calls, hints
        self.max_round_attempts = (
            ROUND_ATTEMPTS[mode] if max_format_retries is None else max(1, int(max_format_retries) + 1)
        )
        self.resize = vreasoner_resize(max_pixels)
        first = plan_view(images, self.image_path, self.resize)
        system = system_prompt if system_prompt is not None else _SYSTEM[mode]
        self.messages: list[dict] = ([message("system", system)] if system else []) + [
            message("user", image_part(first), question_text)
        ]
        self.calls: list[SearchCall] = []
        self.n_format_retries = 0
        self.n_turns = 0
        self.pending: SearchCall | None = None
        self.final_text: str | None = None
        self.answer: str | None = None
        self.status: EpisodeStatus | None = None
        self.error: str | None = None
        self._new_round(None)

    # ------------------------------------------------------------------ state
    @property
    def done(self) -> bool:
        return self.status is not None

    @property
    def has_answer(self) -> bool:
        return self.status == EpisodeStatus.ANSWERED

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

    def _tool_call_turns(self) -> int:
        """Assistant turns whose text contains ``<tool_call>`` (how the fork counts calls for the limit)."""
        return sum(m["role"] == "assistant" and "<tool_call>" in _text(m) for m in self.messages)

    def _new_round(self, crop: ImageRef | None) -> None:
        prior = self._tool_call_turns()
        self._first_round = prior == 0
        self._last_round = prior >= self.max_search_calls
        self._round_crop = crop
        self._attempts = 0

    # ------------------------------------------------------------------ protocol
    def step(self, assistant_text: str) -> ReasonerStep:
        """Consume one vReasoner reply and say what happens next."""
        if self.done or self.pending is not None:
            raise RuntimeError("vReasoner session is finished or waiting for a search result")
        text = assistant_text or ""
        self.n_turns += 1
        self._attempts += 1
        turn = parse_reasoner_turn(
            text, require_feedback=self.mode == ReasonerMode.TRAIN, first_round=self._first_round
        )
        msg = message("assistant", text)
        self.messages.append(msg)
        if turn.action != ReplyKind.INVALID and self.calls and turn.feedback is not None:
            self.calls[-1].feedback = turn.feedback
        if turn.action == ReplyKind.SEARCH:
            if self.n_search_calls >= self.max_search_calls:
                return self._finish(
                    EpisodeStatus.SEARCH_AFTER_LIMIT,
                    text,
                    ReasonerAction.STOP,
                    error="tool call after the search limit",
                )
            assert turn.description is not None  # the parser gives every search turn its description
            self.pending = SearchCall(turn.description)
            msg["search"] = {"description": turn.description}
            return ReasonerStep(ReasonerAction.SEARCH, description=turn.description, feedback=turn.feedback)
        if turn.action == ReplyKind.ANSWER:
            self.answer = turn.answer
            return self._finish(
                EpisodeStatus.ANSWERED, text, ReasonerAction.ANSWER, answer=turn.answer, feedback=turn.feedback
            )
        if self._attempts >= self.max_round_attempts:
            return self._finish(
                EpisodeStatus.FORMAT_FAILED,
                text,
                ReasonerAction.STOP,
                error=f"format retries exhausted ({self._attempts} replies in a round): {turn.error}",
            )
        self.n_format_retries += 1
        if self._last_round:
            self._last_round_turn()
        else:
            self.messages.append(message("user", self.hints.format_retry))
        return ReasonerStep(ReasonerAction.RETRY, feedback=turn.feedback, error=turn.error)

    def _finish(self, status: EpisodeStatus, text: str, action: ReasonerAction, **kw: str | None) -> ReasonerStep:
        self.status, self.final_text, self.error = status, text, kw.get("error")
        return ReasonerStep(action, **kw)

    def _last_round_turn(self) -> None:
        crop = self._round_crop
        parts = ([image_part(crop)] if crop is not None else []) + [self.hints.limit]
        self.messages.append(message("user", *parts))

    def provide_search_result(self, result: LocateResult) -> ImageRef | None:
        """Record the vSearcher's result for the pending call and append the next user turn;
        returns the crop shown (None when nothing was shown). A result without a usable box ends the
        episode (``search_invalid``; ``failed`` when the vSearcher could not be reached)."""
        if self.pending is None:
            raise RuntimeError("no search call is pending")
        call, self.pending = self.pending, None
        call.result = result
        self.calls.append(call)
        self.messages[-1]["search"] = result.to_record()
        if result.status == LocateStatus.FAILED:
            self.fail(f"vSearcher failed: {result.error}")
            return None
        if result.status not in (LocateStatus.FOUND, LocateStatus.NOT_FOUND):
            self.status = EpisodeStatus.SEARCH_INVALID
            self.final_text = _text(self.messages[-1])
            self.error = f"the vSearcher returned no valid box: {result.error}"
            return None
        if result.found:
            box = crop_region(result, self.images.size(self.image_path))
            if box is not None:
                call.crop = plan_view(self.images, self.image_path, self.resize, box)
        self._new_round(call.crop)
        if self._last_round:
            self._last_round_turn()
        elif call.crop is not None:
            self.messages.append(message("user", image_part(call.crop), self.hints.found))
        else:
            self.messages.append(message("user", self.hints.not_found))
        return call.crop

    def lost_reply(self, reason: str) -> bool:
        """A vReasoner request failed (after the SDK's retries) and uses one of the round's attempts, as in the
        fork (``vsearch_gpt_async.py:233-243``): True when the same turn may be asked again, else the episode
        fails (``failed``)."""
        if self.done:
            return False
        self._attempts += 1
        if self._attempts >= self.max_round_attempts:
            self.fail(f"{reason} (after {self._attempts} attempts in a round)")
            return False
        return True

    def fail(self, reason: str) -> None:
        """The driver could not get a reply (API error after retries, vSearcher unreachable)."""
        if not self.done:
            self.status, self.error, self.pending = EpisodeStatus.FAILED, reason, None


def _text(m: dict) -> str:
    c = m.get("content")
    if isinstance(c, str):
        return c
    return "".join(p.get("text", "") for p in c or [] if p.get("type") == "text")
