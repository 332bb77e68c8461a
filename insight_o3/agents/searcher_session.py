"""The vSearcher protocol (paper F.2) as a sans-IO state machine.

The session owns the conversation and every protocol decision; a driver only generates the next
assistant text (an OpenAI client in :mod:`insight_o3.agents.drivers`, verl's server manager in the
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

Protocol decisions (bad model output is expected and never raises) are the authors' verl fork's (926d137),
implemented in :mod:`insight_o3.protocol.searcher_rules` (the trained prompt; the paper defines none of them):

* a turn ends the episode unless it holds a ``<tool_call>`` whose JSON has ``name`` and ``arguments`` (verl's
  hermes parser; only the first call runs); after ``max_tool_calls`` tool responses the next turn is the last;
* the zoom-in tool maps ``bbox_2d`` to its own image (the original ``smart_resize``-d to 16384·28² at most),
  clamps it, grows a side under 28 px keeping the aspect ratio, and shows the crop ``smart_resize``-d to the
  budget (``min_pixels`` 28·28); a box it cannot use (inverted, empty, aspect over 100, unknown tool, missing
  ``bbox_2d``) gets the tool's error text as the tool response, and the model goes on;
* the episode's box is the last turn's ``<answer>`` parsed as ``[x1, y1, x2, y2]`` of integers (``[0, 0, 0, 0]``
  is ``not_found``; none is ``invalid``), mapped to original pixels with ``round(v * W / w)`` and clamped;
* r_format (:attr:`SearcherSession.format_ok`) is ``compute_format_reward`` on the turns: only whitespace
  outside the tags, ``<think>`` then one ``<tool_call>`` (no ``<answer>``) or, last, one ``<answer>`` (no
  ``<tool_call>``), integer tool boxes with some area in the frame, the answer a box or ``[0, 0, 0, 0]``
  (:attr:`SearcherSession.format_ok_inloop`: any answer text, the fork's sub-agent reward);
* ``limit_reminder`` (default True, the paper's F.1 "for the last turn, we notify vSearcher"): the limit text
  replaces the reminder once ``max_tool_calls`` crops were shown. False is what the fork's loop really shows: it
  renders each tool turn on its own (``tool_agent_loop.py:329-336``), so its template's image count never exceeds
  the limit and the normal reminder follows every crop (the recipe's ``vsearch.variant=original``);
* ``failed`` is set by the driver (:meth:`fail`) when the episode cannot run (API error, bad image).

The simple prompt (an untrained model, paper F.2) keeps a lenient reading: the last ``[x1, y1, x2, y2]`` of a
reply is its answer, boxes are clamped, a bad turn ends the episode ``invalid``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from PIL import Image

from ..base.json_types import JSONObject
from ..imaging.geometry import Box, Frame, is_null_box, validate_box
from ..imaging.images import ImageRef, ImageStore, Resize
from ..protocol import searcher_rules as rules
from ..protocol.limits import LIMITS
from ..protocol.parsing import parse_searcher_turn
from ..protocol.prompts import (
    VSEARCHER_FIRST_USER_PROMPT,
    VSEARCHER_LIMIT_PROMPT,
    VSEARCHER_SIMPLE_SYSTEM_PROMPT,
    VSEARCHER_SIMPLE_USER_PROMPT,
    VSEARCHER_SYSTEM_PROMPT,
    VSEARCHER_TOOL_RESPONSE_CLOSE,
    VSEARCHER_TOOL_RESPONSE_PROMPT,
    fill,
)
from ..protocol.statuses import LocateStatus, SearcherAction
from ..protocol.trajectory import image_part, message
from .records import compact_messages
from .views import crop_box, pil_view, plan_view

SEARCHER_JPEG_QUALITY = 90


@dataclass(kw_only=True)
class SearcherTurnRecord:
    """One assistant turn as the protocol read it (``box_original`` set for crops and answers)."""

    text: str
    action: SearcherAction  # TOOL_CALL | ANSWER | INVALID
    has_think: bool
    finish_reason: str | None = None
    bbox_raw: list | None = None  # the model's values, model-frame pixels
    box_original: Box | None = None
    error: str | None = None
    usage: dict | None = None  # token usage the server reported for this turn, if any


@dataclass
class SearcherStep:
    """The outcome of one turn: ``done`` or the tool response appended: a crop (``crop``, the new image to
    show) or, for a box the tool could not use, only the tool's error text (``crop`` None)."""

    done: bool
    action: SearcherAction
    crop: ImageRef | None = None
    error: str | None = None


@dataclass
class LocateResult:
    """A finished vSearcher episode. ``box_original`` (original pixels) is set only when found. The library
    builds it by keyword (:meth:`BaseSearcherSession.result`, :func:`failed_locate`); the fields stay positional
    for the protocol-fidelity tests' fixtures, which may not change."""

    status: LocateStatus
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
    #: r_format of an in-loop call (the fork's sub-agent reward takes any <answer> text), and its reason
    format_ok_inloop: bool = False
    format_error: str | None = None
    format_error_inloop: str | None = None
    #: the tool boxes r_format accepted (model frame, in order) and the reward's n_valid_tool_calls
    tool_boxes: list[list[int]] = field(default_factory=list)
    n_valid_tool_calls: int = 0

    @property
    def found(self) -> bool:
        return self.status == LocateStatus.FOUND

    def to_record(self) -> JSONObject:
        """JSON-ready, compact (prompt texts by name, images by reference)."""

        def rnd(b: Box | None) -> list[float] | None:
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
            "format_error": self.format_error,
            "n_valid_tool_calls": self.n_valid_tool_calls,
            "trajectory": compact_messages(self.trajectory),
        }


class BaseSearcherSession:
    """One vSearcher episode: ``messages`` to send, ``step(text)`` per reply, ``result()`` at the end.

    The machinery both vSearcher protocols share (the model frame, tool responses, ending, failing, the result);
    :class:`SearcherSession` is the trained protocol, :class:`SimpleSearcherSession` the simple one. ``prompt``,
    when given, must name the class's own protocol (:data:`SEARCHER_SESSIONS` picks a class by name)."""

    #: the prompt set of the protocol (paper F.2): "trained" or "simple"
    PROMPT: str = ""
    #: read replies leniently (the simple prompt's reading: the last [x1, y1, x2, y2] of a reply is its answer)
    LENIENT: bool = False

    def __init__(
        self,
        image_path: str,
        description: str,
        images: ImageStore,
        max_pixels: int,
        prompt: str | None = None,
        max_tool_calls: int = LIMITS.max_tool_calls,
        limit_reminder: bool = True,
    ):
        if prompt is not None and prompt != self.PROMPT:
            raise ValueError(f"{type(self).__name__} runs the {self.PROMPT!r} vSearcher prompt, not {prompt!r}")
        self.image_path, self.description = str(image_path), description
        self.images, self.max_tool_calls = images, max_tool_calls
        self.limit_reminder = limit_reminder
        #: JPEG at quality 90 over HTTP (the fork hands the resized pixels to vLLM in process)
        self.max_pixels = max_pixels
        self.resize = Resize.qwen(max_pixels, jpeg_quality=SEARCHER_JPEG_QUALITY)
        self.original_size = images.size(self.image_path)
        first = plan_view(images, self.image_path, self.resize)
        #: the model frame all vSearcher coordinates refer to (whole image at smart_resize size)
        self.frame = Frame(first.region, first.size)
        self.messages = self._first_messages(first, description)
        #: the image the zoom-in tool crops (qwen_vl_utils.fetch_image of the original with its defaults)
        self.tool_size = rules.tool_frame_size(self.original_size)
        self.turns: list[SearcherTurnRecord] = []
        #: the tool response of each tool call, in order: "" for a crop, the error text otherwise
        self.tool_texts: list[str] = []
        self._reminders: list[str] = []
        self.n_tool_calls = 0
        self.status: LocateStatus | None = None
        self.error: str | None = None
        self.box_model: Box | None = None
        self.box_original: Box | None = None
        #: the turns the reward scores when the episode ended at a fatal step (:meth:`end_fatal`); None: all of them
        self.prefix_turns: int | None = None

    @property
    def prompt(self) -> str:
        return self.PROMPT

    # ------------------------------------------------------------------ the protocol's parts
    def _first_messages(self, first: ImageRef, description: str) -> list[JSONObject]:
        raise NotImplementedError

    def _step(self, rec: SearcherTurnRecord, text: str, call_text: str) -> SearcherStep:
        """Consume one parsed turn (``rec`` was appended; ``call_text``: the reply as the tool-call parser reads it)
        and say what happens next."""
        raise NotImplementedError

    def _end_at_budget(self, reason: str) -> None:
        """End a running episode at its token budget (``end_at_budget``)."""
        self._end(LocateStatus.INVALID, SearcherAction.INVALID, reason)

    def _formats(self) -> _Formats:
        """r_format of the finished episode (out-of-loop and in-loop) and what the reward counts."""
        raise NotImplementedError

    # ------------------------------------------------------------------ state
    @property
    def done(self) -> bool:
        return self.status is not None

    @property
    def image_refs(self) -> list[ImageRef]:
        """Every image of the conversation, in order (first image, then crops)."""
        from ..protocol.trajectory import image_refs

        return image_refs(self.messages)

    def pil(self, ref: ImageRef) -> Image.Image:
        """Pixels of one image of the conversation, exactly as sized in its reference."""
        return pil_view(self.images, self.resize, ref)

    def solution_text(self, n_turns: int | None = None) -> str:
        """The episode's response as the fork decodes it for the reward (special tokens skipped): each turn,
        ``\n`` after a turn that ended on its stop token, then each tool response
        ``user\n<tool_response>…</tool_response>\n<reminder>\nassistant\n``. ``n_turns``: only the first turns
        and their tool responses (a fatal episode's valid prefix, :meth:`end_fatal`)."""
        parts: list[str] = []
        for i, t in enumerate(self.turns[:n_turns]):
            parts.append(t.text)
            if t.finish_reason != "length":
                parts.append("\n")
            if i < len(self.tool_texts):
                parts.append(
                    f"user\n<tool_response>{self.tool_texts[i]}</tool_response>\n{self._reminders[i]}\nassistant\n"
                )
        return "".join(parts)

    @property
    def format_ok(self) -> bool:
        """r_format (out-of-loop) of the episode (the protocol's rule; False until it ended, and when it failed)."""
        if self.status not in (LocateStatus.FOUND, LocateStatus.NOT_FOUND, LocateStatus.INVALID):
            return False
        return self._format_ok()

    def _format_ok(self) -> bool:
        raise NotImplementedError

    # ------------------------------------------------------------------ protocol
    def _reminder(self) -> str:
        """The text after a tool response: the limit text once the last allowed crop was shown (``limit_reminder``)."""
        if self.limit_reminder and self.n_tool_calls >= self.max_tool_calls:
            return VSEARCHER_LIMIT_PROMPT
        return VSEARCHER_TOOL_RESPONSE_PROMPT

    def _end(self, status: LocateStatus, action: SearcherAction, error: str | None = None) -> SearcherStep:
        self.status, self.error = status, error
        if self.turns:
            self.turns[-1].error = self.turns[-1].error or error
        return SearcherStep(True, action, error=error)

    def _invalid(self, rec: SearcherTurnRecord, error: str | None) -> SearcherStep:
        """The turn ``rec`` ends the episode without a usable box."""
        rec.action = SearcherAction.INVALID
        return self._end(LocateStatus.INVALID, SearcherAction.INVALID, error)

    def _show_crop(self, ref: ImageRef) -> SearcherStep:
        """Append the tool response showing the crop ``ref``: the recipe's chat template,
        ``"<tool_response>" + crop + "</tool_response>\n" + reminder``."""
        reminder = self._reminder()
        self.messages.append(
            message("user", "<tool_response>", image_part(ref), VSEARCHER_TOOL_RESPONSE_CLOSE, reminder)
        )
        return SearcherStep(False, SearcherAction.TOOL_CALL, crop=ref)

    def step(
        self,
        assistant_text: str,
        finish_reason: str | None = None,
        usage: dict | None = None,
        call_text: str | None = None,
    ) -> SearcherStep:
        """Consume one assistant reply; append the tool response (a crop) or finish. ``call_text``: the reply as the
        tool-call parser reads it, when it differs (the fork's hermes parser decodes the turn with its special tokens
        kept); the answer and r_format always read ``assistant_text``."""
        if self.done:
            raise RuntimeError("vSearcher session is already finished")
        text = assistant_text or ""
        turn = parse_searcher_turn(text, simple_prompt=self.LENIENT)
        rec = SearcherTurnRecord(
            text=text,
            action=turn.action,
            has_think=turn.has_think,
            finish_reason=finish_reason,
            bbox_raw=turn.bbox,
            error=turn.error,
            usage={k: v for k, v in (usage or {}).items() if isinstance(v, (int, float))} or None,
        )
        self.turns.append(rec)
        self.messages.append(message("assistant", text))
        return self._step(rec, text, text if call_text is None else call_text)

    def end_at_budget(
        self,
        reason: str,
        pending_text: str | None = None,
        finish_reason: str | None = None,
        drop_tool_response: bool = False,
    ) -> None:
        """The episode ran out of its token budget and ends as the fork's loop ends it (``tool_agent_loop.py:348-349``
        and ``VSearcherLoop.run``): the box is the last turn's ``<answer>`` (none: ``invalid``), r_format is read on
        what the policy saw. ``pending_text``: a last turn the driver did not step (cut at the budget: the fork stops
        before running its tool call; or aborted by the server). ``drop_tool_response``: the tool response appended
        after the last turn did not fit and was never shown (the fork stops before adding it)."""
        if self.done:
            return
        if drop_tool_response and self.tool_texts:
            self.tool_texts.pop()
            self._reminders.pop()
            self.messages.pop()
            if self.turns and self.turns[-1].box_original is not None:
                self.n_tool_calls -= 1
        if pending_text is not None:
            self.turns.append(
                SearcherTurnRecord(
                    text=pending_text,
                    action=SearcherAction.INVALID,
                    has_think="<think>" in pending_text,
                    finish_reason=finish_reason,
                )
            )
            self.messages.append(message("assistant", pending_text))
        if not self.turns:
            self._end(LocateStatus.INVALID, SearcherAction.INVALID, reason)
            return
        self._end_at_budget(reason)

    def end_fatal(self, step: int, reason: str) -> None:
        """End the episode at its fatal step (fatal-aware GRPO, :mod:`insight_o3.protocol.fatal`): the driver saw the
        run of consecutive tool errors that begins at turn ``step`` (0-based) and stops before showing the last
        error's tool response. No answer (status ``invalid``); r_format and the reward's tool counts are those of the
        valid prefix, the turns before ``step`` (:attr:`prefix_turns`)."""
        if self.done:
            return
        if not 0 <= step < len(self.turns):
            raise ValueError(f"fatal step {step} outside the episode's {len(self.turns)} turns")
        if self.tool_texts and len(self.tool_texts) == len(self.turns):  # the last turn's tool response: not shown
            self.tool_texts.pop()
            self._reminders.pop()
            self.messages.pop()
        self.prefix_turns = step
        self._end(LocateStatus.INVALID, SearcherAction.INVALID, reason)

    def fail(self, reason: str) -> None:
        """The driver could not continue (API error after retries, bad image): status ``failed``."""
        if not self.done:
            self.status, self.error = LocateStatus.FAILED, reason

    def result(self) -> LocateResult:
        if not self.done or self.status is None:
            raise RuntimeError("vSearcher session is not finished")
        f = self._formats()
        return LocateResult(
            status=self.status,
            box_original=self.box_original,
            box_model=self.box_model,
            n_tool_calls=self.n_tool_calls,
            format_ok=f.ok,
            trajectory=list(self.messages),
            n_turns=len(self.turns),
            error=self.error,
            description=self.description,
            turn_usage=[t.usage for t in self.turns],
            model_size=self.frame.size,
            format_ok_inloop=f.ok_inloop,
            format_error=f.error if not f.ok else None,
            format_error_inloop=f.error_inloop if not f.ok_inloop else None,
            tool_boxes=f.tool_boxes,
            n_valid_tool_calls=f.n_valid_tool_calls,
        )


@dataclass(kw_only=True)
class _Formats:
    """r_format of a finished episode: out-of-loop (``ok``), in-loop, and the reward's tool-call counts."""

    ok: bool
    error: str | None = None
    ok_inloop: bool = False
    error_inloop: str | None = None
    tool_boxes: list[list[int]] = field(default_factory=list)
    n_valid_tool_calls: int = 0


class SearcherSession(BaseSearcherSession):
    """The trained vSearcher protocol (paper F.2, the fork's agent loop and zoom-in tool at 926d137): the one
    InSight-o3-vS was trained and evaluated with (module docstring)."""

    PROMPT = "trained"

    def _first_messages(self, first: ImageRef, description: str) -> list[JSONObject]:
        return [
            message("system", VSEARCHER_SYSTEM_PROMPT),
            message("user", image_part(first), fill(VSEARCHER_FIRST_USER_PROMPT, target=description)),
        ]

    def verdict(self, inloop: bool = False) -> rules.FormatVerdict:
        """r_format of the episode so far (:func:`insight_o3.protocol.searcher_rules.format_verdict`); ``inloop``: the
        sub-agent reward, which takes any answer text."""
        responses = rules.split_responses(self.solution_text())
        return rules.format_verdict(responses, self.frame.size, answer_must_parse=not inloop)

    def _format_ok(self) -> bool:
        """The fork's ``compute_format_reward`` (module docstring)."""
        return self.verdict().ok

    def _formats(self) -> _Formats:
        if self.status == LocateStatus.FAILED:
            return _Formats(ok=False, n_valid_tool_calls=self.n_tool_calls)
        if self.prefix_turns is not None:
            return self._prefix_formats(self.prefix_turns)
        v, v_in = self.verdict(), self.verdict(inloop=True)
        return _Formats(
            ok=v.ok,
            error=v.error,
            ok_inloop=v_in.ok,
            error_inloop=v_in.error,
            tool_boxes=[list(b) for b in v.boxes],
            n_valid_tool_calls=rules.n_valid_tool_calls(v, self.solution_text()),
        )

    def _prefix_formats(self, n_turns: int) -> _Formats:
        """r_format on a fatal episode's valid prefix (its first ``n_turns`` turns, each a tool call with its tool
        response): every turn ``<think>`` + a tool call whose box the rule accepts, no answer required. An empty prefix
        scores 0 (the released workflow: no scored step, r_format 0)."""
        if n_turns == 0:
            why = "fatal at the first turn: no valid prefix"
            return _Formats(ok=False, error=why, ok_inloop=False, error_inloop=why)
        solution = self.solution_text(n_turns)
        responses = rules.split_responses(solution)
        kw = {"must_have_answer": False, "skip_last_response_if_empty": True}
        v = rules.format_verdict(responses, self.frame.size, **kw)
        v_in = rules.format_verdict(responses, self.frame.size, answer_must_parse=False, **kw)
        return _Formats(
            ok=v.ok,
            error=v.error,
            ok_inloop=v_in.ok,
            error_inloop=v_in.error,
            tool_boxes=[list(b) for b in v.boxes],
            n_valid_tool_calls=rules.n_valid_tool_calls(v, solution),
        )

    def _step(self, rec: SearcherTurnRecord, text: str, call_text: str) -> SearcherStep:
        """One turn under the fork's agent loop (``ToolAgentLoop`` + ``VSearcherLoop``) and zoom-in tool."""
        calls = rules.hermes_tool_calls(call_text)
        if len(self.tool_texts) >= self.max_tool_calls or not calls:
            return self._answer(rec, text)
        call = calls[0]
        args = call.arguments if isinstance(call.arguments, dict) else {}
        bbox = args.get("bbox_2d")
        rec.action, rec.bbox_raw = SearcherAction.TOOL_CALL, bbox if isinstance(bbox, list) else None
        zoom = rules.run_tool_call(call, self.tool_size, self.frame.size, self.max_pixels or 0)
        ref = None
        if zoom.ok:
            assert zoom.box is not None and zoom.shown_wh is not None
            sx, sy = self.original_size[0] / self.tool_size[0], self.original_size[1] / self.tool_size[1]
            x0, y0, x1, y1 = zoom.box
            region = (x0 * sx, y0 * sy, x1 * sx, y1 * sy)  # the tool's crop, in original pixels
            shown = self.resize.at_size(zoom.shown_wh)
            ref = plan_view(self.images, self.image_path, shown, region)
            rec.box_original = ref.region
            self.n_tool_calls += 1
        else:
            rec.error = zoom.error
        self.tool_texts.append("" if ref is not None else str(zoom.error))
        self._reminders.append(self._reminder())
        if ref is not None:
            return self._show_crop(ref)
        # a text tool message: "<tool_response>" + the tool's error text + "</tool_response>\n" + reminder
        self.messages.append(
            message("user", "<tool_response>" + str(zoom.error) + VSEARCHER_TOOL_RESPONSE_CLOSE + self._reminders[-1])
        )
        return SearcherStep(False, SearcherAction.TOOL_ERROR, error=zoom.error)

    def _answer(self, rec: SearcherTurnRecord, text: str) -> SearcherStep:
        """The episode is over: its box is the last turn's ``<answer>`` (``VSearcherLoop.run``)."""
        box = rules.final_answer_box(text)
        if box is None:
            return self._invalid(rec, self.verdict().error or "the last turn has no [x1, y1, x2, y2] answer")
        rec.action, rec.bbox_raw = SearcherAction.ANSWER, list(box)
        if box == rules.NULL_BOX:
            return self._end(LocateStatus.NOT_FOUND, SearcherAction.ANSWER)
        fb = tuple(float(v) for v in box)
        self.box_model = (fb[0], fb[1], fb[2], fb[3])
        o = rules.to_original_box(box, self.frame.size, self.original_size)
        self.box_original = (float(o[0]), float(o[1]), float(o[2]), float(o[3]))
        rec.box_original = self.box_original
        return self._end(LocateStatus.FOUND, SearcherAction.ANSWER)

    def _end_at_budget(self, reason: str) -> None:
        self._answer(self.turns[-1], self.turns[-1].text)
        self.error = self.error or reason


class SimpleSearcherSession(BaseSearcherSession):
    """The simple vSearcher prompt for an untrained model (paper F.2), read leniently: the last
    ``[x1, y1, x2, y2]`` of a reply is its answer, boxes are clamped, a bad turn ends the episode ``invalid``."""

    PROMPT = "simple"
    LENIENT = True

    def _first_messages(self, first: ImageRef, description: str) -> list[JSONObject]:
        return [
            message("system", VSEARCHER_SIMPLE_SYSTEM_PROMPT),
            message("user", fill(VSEARCHER_SIMPLE_USER_PROMPT, target=description), image_part(first)),
        ]

    def _format_ok(self) -> bool:
        """Every turn parsed, none cut, and a valid answer."""
        return self.status != LocateStatus.INVALID and all(
            t.action != SearcherAction.INVALID and t.finish_reason != "length" for t in self.turns
        )

    def _formats(self) -> _Formats:
        ok = self.format_ok
        why = None if ok else self.error
        return _Formats(ok=ok, error=why, ok_inloop=ok, error_inloop=why, n_valid_tool_calls=self.n_tool_calls)

    def _step(self, rec: SearcherTurnRecord, text: str, call_text: str) -> SearcherStep:
        if rec.action == SearcherAction.TOOL_CALL:
            return self._tool_call(rec)
        if rec.action == SearcherAction.ANSWER:
            if is_null_box(rec.bbox_raw):
                return self._end(LocateStatus.NOT_FOUND, SearcherAction.ANSWER)
            box, why = validate_box(rec.bbox_raw, self.frame.size)
            if box is None:
                return self._invalid(rec, f"answer: {why}")
            self.box_model, self.box_original = box, self.frame.to_original(box)
            rec.box_original = self.box_original
            return self._end(LocateStatus.FOUND, SearcherAction.ANSWER)
        return self._end(LocateStatus.INVALID, SearcherAction.INVALID, rec.error)

    def _tool_call(self, rec: SearcherTurnRecord) -> SearcherStep:
        if self.n_tool_calls >= self.max_tool_calls:
            return self._invalid(rec, "tool call after the tool call limit")
        box, why = validate_box(rec.bbox_raw, self.frame.size)
        if box is None:
            return self._invalid(rec, f"tool call: {why}")
        region = crop_box(self.frame.to_original(box), self.original_size)
        try:
            ref = plan_view(self.images, self.image_path, self.resize, region)
        except ValueError as e:
            return self._invalid(rec, f"tool call: {e}")
        rec.box_original = ref.region
        self.n_tool_calls += 1
        return self._show_crop(ref)


#: The vSearcher protocols by prompt name (``--vsearcher_prompt``).
SEARCHER_SESSIONS: dict[str, type[BaseSearcherSession]] = {"trained": SearcherSession, "simple": SimpleSearcherSession}
SEARCHER_PROMPTS = tuple(SEARCHER_SESSIONS)


def searcher_session_class(prompt: str) -> type[BaseSearcherSession]:
    """The session class of a vSearcher prompt name."""
    if prompt not in SEARCHER_SESSIONS:
        raise ValueError(f"vSearcher prompt must be one of {SEARCHER_PROMPTS}, got {prompt!r}")
    return SEARCHER_SESSIONS[prompt]


def failed_locate(description: str, reason: str) -> LocateResult:
    """A result for an episode that could not even start (e.g. the image cannot be read)."""
    return LocateResult(
        status=LocateStatus.FAILED,
        box_original=None,
        box_model=None,
        n_tool_calls=0,
        format_ok=False,
        trajectory=[],
        error=reason,
        description=description,
    )
