"""The vSearcher protocol (paper F.2) as a sans-IO state machine.

The session owns the conversation and every protocol decision; a driver only generates the next
assistant text (an OpenAI client in :mod:`insight_o3.agents.clients`, verl's server manager in the
training recipe) and calls :meth:`SearcherSession.step` until ``done``.

Coordinates. The vSearcher sees the whole image resized to Qwen2.5-VL's ``smart_resize`` size for
its pixel budget (the *model frame*, :attr:`SearcherSession.frame`). Every ``bbox_2d`` of a tool
call and the final ``<answer>`` box are absolute pixels **of that first image's model frame**
(the DeepEyes/Qwen convention), never of a zoomed crop. They are mapped to original pixels with
the frame; crops are always cut from the original image and resized to the smart_resize size of
the same budget.

Messages (the fork's agent loop and chat template, 926d137): system prompt; ``[image, "\nLocate
<description>.\n<instructions>"]``; each tool response ``["<tool_response>", crop,
"</tool_response>\n" + reminder]`` (the limit text after the last allowed crop). The simple prompt
for an untrained model puts its text before the image (paper F.2).

Protocol decisions (bad model output is expected and never raises):

* out-of-range boxes are clamped to the image; tiny/thin crops are grown to >= 28 px per side;
* a turn that is not a well-formed tool call or answer (malformed JSON, unknown tool, missing,
  inverted, empty, NaN or fully outside boxes), or a tool call after the limit, ends the episode
  with status ``invalid`` (the fork's zoom-in tool answers an unusable box with an error text and
  lets the model go on; that turn is not reproduced — see docs/fidelity.md);
* ``[0, 0, 0, 0]`` is ``not_found``; a valid answer box is ``found``;
* after ``max_tool_calls`` crops the tool response carries the limit text, so an episode has at
  most ``max_tool_calls + 1`` assistant turns;
* ``failed`` is set by the driver (:meth:`fail`) when the episode cannot run (API error, bad image).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from PIL import Image

from ..geometry import Box, Frame, is_null_box, validate_box
from ..images import ImageRef, ImageStore, Resize
from ..parsing import parse_searcher_turn
from ..prompts import (
    VSEARCHER_FIRST_USER_PROMPT,
    VSEARCHER_LIMIT_PROMPT,
    VSEARCHER_SIMPLE_SYSTEM_PROMPT,
    VSEARCHER_SIMPLE_USER_PROMPT,
    VSEARCHER_SYSTEM_PROMPT,
    VSEARCHER_TOOL_RESPONSE_CLOSE,
    VSEARCHER_TOOL_RESPONSE_PROMPT,
    fill,
)
from ..protocol import LIMITS
from ..trajectory import image_part, message
from .records import compact_messages
from .views import crop_box, pil_view, plan_view

SEARCHER_PROMPTS = ("trained", "simple")
SEARCHER_JPEG_QUALITY = 90
STATUSES = ("found", "not_found", "invalid", "failed")


@dataclass
class SearcherTurnRecord:
    """One assistant turn as the protocol read it (``box_original`` set for crops and answers)."""

    text: str
    action: str  # tool_call | answer | invalid
    has_think: bool
    finish_reason: str | None = None
    bbox_raw: list | None = None  # the model's values, model-frame pixels
    box_original: Box | None = None
    error: str | None = None
    usage: dict | None = None  # token usage the server reported for this turn, if any


@dataclass
class SearcherStep:
    """The outcome of one turn: ``done`` or, for a crop, the new image to show (``crop``)."""

    done: bool
    action: str  # tool_call | answer | invalid
    crop: ImageRef | None = None
    error: str | None = None


@dataclass
class LocateResult:
    """A finished vSearcher episode. ``box_original`` (original pixels) is set only when found."""

    status: str
    box_original: Box | None
    box_model: Box | None
    n_tool_calls: int
    format_ok: bool
    trajectory: list[dict]
    n_turns: int = 0
    error: str | None = None
    description: str = ""
    turn_usage: list[dict | None] = field(default_factory=list)  # per assistant turn, as the server reported
    model_size: tuple[int, int] | None = None  # (w, h) of the model frame ``box_model`` refers to

    @property
    def found(self) -> bool:
        return self.status == "found"

    def to_record(self) -> dict:
        """JSON-ready, compact (prompt texts by name, images by reference)."""

        def rnd(b):
            return [round(v, 2) for v in b] if b is not None else None

        return {
            "description": self.description,
            "status": self.status,
            "box_original": rnd(self.box_original),
            "box_model": rnd(self.box_model),
            "n_tool_calls": self.n_tool_calls,
            "n_turns": self.n_turns,
            "format_ok": self.format_ok,
            "error": self.error,
            "turn_usage": self.turn_usage,
            "model_size": list(self.model_size) if self.model_size else None,
            "trajectory": compact_messages(self.trajectory),
        }


class SearcherSession:
    """One vSearcher episode: ``messages`` to send, ``step(text)`` per reply, ``result()`` at the end."""

    def __init__(
        self,
        image_path: str,
        description: str,
        images: ImageStore,
        max_pixels: int,
        prompt: str = "trained",
        max_tool_calls: int = LIMITS.max_tool_calls,
    ):
        if prompt not in SEARCHER_PROMPTS:
            raise ValueError(f"vSearcher prompt must be one of {SEARCHER_PROMPTS}, got {prompt!r}")
        self.image_path, self.description = str(image_path), description
        self.images, self.prompt, self.max_tool_calls = images, prompt, max_tool_calls
        #: JPEG at quality 90 over HTTP (the fork hands the resized pixels to vLLM in process)
        self.resize = Resize(max_pixels, qwen=True, jpeg_quality=SEARCHER_JPEG_QUALITY)
        self.original_size = images.size(self.image_path)
        first = plan_view(images, self.image_path, self.resize)
        #: the model frame all vSearcher coordinates refer to (whole image at smart_resize size)
        self.frame = Frame(first.region, first.size)
        if prompt == "simple":
            self.messages = [
                message("system", VSEARCHER_SIMPLE_SYSTEM_PROMPT),
                message("user", fill(VSEARCHER_SIMPLE_USER_PROMPT, target=description), image_part(first)),
            ]
        else:
            self.messages = [
                message("system", VSEARCHER_SYSTEM_PROMPT),
                message("user", image_part(first), fill(VSEARCHER_FIRST_USER_PROMPT, target=description)),
            ]
        self.turns: list[SearcherTurnRecord] = []
        self.n_tool_calls = 0
        self.status: str | None = None
        self.error: str | None = None
        self.box_model: Box | None = None
        self.box_original: Box | None = None

    # ------------------------------------------------------------------ state
    @property
    def done(self) -> bool:
        return self.status is not None

    @property
    def image_refs(self) -> list[ImageRef]:
        """Every image of the conversation, in order (first image, then crops)."""
        from ..trajectory import image_refs

        return image_refs(self.messages)

    def pil(self, ref: ImageRef) -> Image.Image:
        """Pixels of one image of the conversation, exactly as sized in its reference."""
        return pil_view(self.images, self.resize, ref)

    @property
    def format_ok(self) -> bool:
        """r_format: every turn well-formed (``<think>`` first with the trained prompt), not
        truncated, and the episode ended with a valid answer (found or not found)."""
        if self.status not in ("found", "not_found"):
            return False
        need_think = self.prompt == "trained"
        return all(
            t.action != "invalid" and t.finish_reason != "length" and (t.has_think or not need_think)
            for t in self.turns
        )

    # ------------------------------------------------------------------ protocol
    def _end(self, status: str, action: str, error: str | None = None) -> SearcherStep:
        self.status, self.error = status, error
        if self.turns:
            self.turns[-1].error = self.turns[-1].error or error
        return SearcherStep(True, action, error=error)

    def step(self, assistant_text: str, finish_reason: str | None = None, usage: dict | None = None) -> SearcherStep:
        """Consume one assistant reply; append the tool response (a crop) or finish."""
        if self.done:
            raise RuntimeError("vSearcher session is already finished")
        text = assistant_text or ""
        turn = parse_searcher_turn(text, simple_prompt=self.prompt == "simple")
        rec = SearcherTurnRecord(
            text,
            turn.action,
            turn.has_think,
            finish_reason,
            turn.bbox,
            error=turn.error,
            usage={k: v for k, v in (usage or {}).items() if isinstance(v, (int, float))} or None,
        )
        self.turns.append(rec)
        self.messages.append(message("assistant", text))
        if turn.action == "tool_call":
            if self.n_tool_calls >= self.max_tool_calls:
                rec.action = "invalid"
                return self._end("invalid", "invalid", "tool call after the tool call limit")
            box, why = validate_box(turn.bbox, self.frame.size)
            if box is None:
                rec.action = "invalid"
                return self._end("invalid", "invalid", f"tool call: {why}")
            region = crop_box(self.frame.to_original(box), self.original_size)
            try:
                ref = plan_view(self.images, self.image_path, self.resize, region)
            except ValueError as e:
                rec.action = "invalid"
                return self._end("invalid", "invalid", f"tool call: {e}")
            rec.box_original = ref.region
            self.n_tool_calls += 1
            reminder = (
                VSEARCHER_LIMIT_PROMPT if self.n_tool_calls >= self.max_tool_calls else VSEARCHER_TOOL_RESPONSE_PROMPT
            )
            # the recipe's chat template: "<tool_response>" + crop + "</tool_response>\n" + reminder
            self.messages.append(
                message("user", "<tool_response>", image_part(ref), VSEARCHER_TOOL_RESPONSE_CLOSE, reminder)
            )
            return SearcherStep(False, "tool_call", crop=ref)
        if turn.action == "answer":
            if is_null_box(turn.bbox):
                return self._end("not_found", "answer")
            box, why = validate_box(turn.bbox, self.frame.size)
            if box is None:
                rec.action = "invalid"
                return self._end("invalid", "invalid", f"answer: {why}")
            self.box_model, self.box_original = box, self.frame.to_original(box)
            rec.box_original = self.box_original
            return self._end("found", "answer")
        return self._end("invalid", "invalid", turn.error)

    def fail(self, reason: str) -> None:
        """The driver could not continue (API error after retries, bad image): status ``failed``."""
        if not self.done:
            self.status, self.error = "failed", reason

    def result(self) -> LocateResult:
        if not self.done or self.status is None:
            raise RuntimeError("vSearcher session is not finished")
        return LocateResult(
            self.status,
            self.box_original,
            self.box_model,
            self.n_tool_calls,
            self.format_ok,
            list(self.messages),
            len(self.turns),
            self.error,
            self.description,
            [t.usage for t in self.turns],
            self.frame.size,
        )


def failed_locate(description: str, reason: str) -> LocateResult:
    """A result for an episode that could not even start (e.g. the image cannot be read)."""
    return LocateResult("failed", None, None, 0, False, [], 0, reason, description)
