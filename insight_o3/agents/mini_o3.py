"""Mini-o3 (github Mini-o3/Mini-o3) as a sans-IO session: the rules of its released evaluation (the verl
validation rollout, commit 8654dbf; README "Evaluation": the training command plus ``val_n=32``, ``val_do_sample``),
over the chat API instead of its token-level loop. Sources (that commit; docs/fidelity.md rows M*):

* ``verl/trainer/constants.py`` l. 1 (system prompt ``tool_crop``), l. 7 (observation prompt), l. 9 (error prompt);
* ``verl/utils/dataset/multimodal_dataset.py`` l. 34-47 (system + user message), l. 79-113 (the first image:
  LANCZOS to ``data.max_pixels=2000000`` / ``data.min_pixels=40000``, README l. 126-127);
* ``verl/workers/rollout/vllm_rollout/vllm_async_engine.py`` l. 189-223 (``process_image`` of each crop: NEAREST to
  ``rollout.max_pixels=12845056`` / ``min_pixels=3136``, ``ppo_trainer.yaml`` l. 127-128), l. 520-582
  (``process_tool_call``: the grounding regex, the observation or error message), l. 584-745 (the loop: 12 rounds,
  12 images, a reply without ``<grounding>`` ends the episode);
* ``verl/workers/rollout/vllm_rollout/function_tools.py`` l. 8-27 (``crop_image``, ``resize=1``: no resize),
  l. 29-74 (``prepare_grounding_inputs_multi_turn``, ``use_relative_coordinates=True``: README l. 165);
* ``verl/utils/reward_score/general_qa_tool_mc.py`` l. 194-211 (the answer: the last ``<answer>...</answer>`` of the
  last turn, whatever ended the episode — a tool call at a limit, a cut at the length limit; none scores 0).

The tool-call handling below runs the release's operations in the release's order on the parsed values, so an
error's message (sent back to the model) is the one Python gives the release; the golden test checks that. The
release's tool-call regex backtracks (a 7 KB reply took 23 s); :func:`call_match` finds its match in linear time. A
coordinate that is a string is multiplied by the image width as in the release, without building the product
(:func:`int_of_product`: a 240 KB string took 1.14 GB).
"""

from __future__ import annotations

import ast
import math
import re
import sys
from typing import Any

from ..base.json_types import JSONObject
from ..base.text_scan import has_tagged, tagged_spans
from ..imaging.geometry import QWEN_MAX_RATIO, pixel_box
from ..imaging.images import ImageRef
from ..imaging.view_ops import Crop, Resample, Resize, ResizeTo, ViewOp
from ..protocol.agent_catalog import MINI_O3
from ..protocol.trajectory import image_part, message
from .tool_agents import AgentDefaults, AgentSpec, Ask, DemoTurn, Finish, Step, UnusableImage

PROTOCOL_VERSION = "mini_o3@8654dbf42d2ea98b9d81b6cc7179026dd0598fdf:vllm_async_engine.py"

SYSTEM_PROMPT = """You are a helpful assistant. Answer the user's question based on the image provided. Output your thinking process within the <think> and </think> tags. Whenever you find anything unclear, you can zoom in a specific region in the given image to see more clearly by outputing <grounding>{\"bbox_2d\": [x0, y0, x1, y1], \"source\": \"original_image\"}</grounding>, where (x0, y0) and (x1, y1) are the top-left and bottom-right coordinates of the region that you want to zoom in, respectively (suppose the width and height of the image are 1.0), and 'source' refers to the image that you zoom in and could be either 'original_image' or 'observation_i'. Once the final answer is confirmed, put it within <answer> and </answer>."""  # noqa: E501
OBSERVATION_PROMPT = "After the above Action {action_turn}, here is the the zoom-in image (Observation {observation_turn}):\n<|vision_start|><|image_pad|><|vision_end|>.\nContinue your reasoning process inside <think> and </think>. If needed, you can continue to zoom in on the original image or any of the observations, by outputting <grounding> and </grounding> as before. If the final answer is confirmed, put your final answer inside <answer> and </answer>."  # noqa: E501
ERROR_PROMPT = "Please analyze the error information obtained from the function tool and adjust your response. Countinue your reasoning process inside <think> and </think>."  # noqa: E501
IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"
#: the release's tool-call pattern (``re.match`` with ``re.DOTALL``), matched by :func:`call_match`
CALL_PATTERN = '.*<grounding>{"bbox_2d": (.*),.*"source": [\',"](.*)[\',"]}</grounding>'
STOP = "</grounding>"
#: Characters of the bbox text read as a literal (docs/fidelity.md M5): the parser's tree takes ~500 bytes a
#: character, and a real box is under 100 characters.
MAX_LITERAL_CHARS = 16_384
#: Characters of a string coordinate times a side that are built as the release builds them; past this the
#: outcome of ``int()`` on the product is worked out from a few copies (:func:`int_of_product`).
MAX_PRODUCT_CHARS = 1 << 20
#: val_max_generation_round, val_limit_mm_per_prompt (README l. 155-156)
MAX_ROUNDS, MAX_IMAGES = 12, 12
FIRST_MAX_PIXELS, FIRST_MIN_PIXELS = 2_000_000, 40_000
CROP_MAX_PIXELS, CROP_MIN_PIXELS = 12_845_056, 3136
#: rollout sampling (ppo_trainer.yaml l. 94-96: temperature 1.0, top_p 1, top_k -1; val_do_sample=True) and
#: ``response_length`` = ``data.max_response_length`` 8192 per turn; the stop string kept in the reply
COMPLETION_KWARGS = {
    "temperature": 1.0,
    "top_p": 1.0,
    "max_tokens": 8192,
    "stop": [STOP],
    "extra_body": {"top_k": -1, "include_stop_str_in_output": True},
}
DEFAULTS = AgentDefaults(completion_kwargs=COMPLETION_KWARGS, image_format="PNG", join_text=False)


def first_image_size(w: int, h: int) -> tuple[int, int]:
    """The dataset's ``process_image`` (l. 98-106): the size the question's image is shown at (LANCZOS)."""
    if w * h > FIRST_MAX_PIXELS:
        f = math.sqrt(FIRST_MAX_PIXELS / (w * h))
        w, h = int(w * f), int(h * f)
    if w * h < FIRST_MIN_PIXELS:
        f = math.sqrt(FIRST_MIN_PIXELS / (w * h))
        w, h = int(w * f), int(h * f)
    return w, h


def crop_view_steps(w: int, h: int) -> list[tuple[int, int]]:
    """The rollout's ``process_image`` (engine l. 189-223): the successive sizes a crop is resized to (NEAREST each
    time; the last is the size shown)."""
    steps = []
    if w * h > CROP_MAX_PIXELS:
        f = math.sqrt(CROP_MAX_PIXELS / (w * h))
        w, h = int(w * f), int(h * f)
        steps.append((w, h))
    if w * h < CROP_MIN_PIXELS:
        f = math.sqrt(CROP_MIN_PIXELS / (w * h))
        w, h = int(w * f), int(h * f)
        steps.append((w, h))
    if w < 28 or h < 28:
        f = 28 / min(w, h)
        w, h = int(w * f + 1), int(h * f + 1)
        steps.append((w, h))
    if w / h >= 200:
        w, h = w, int(w / 190 + 1)
        steps.append((w, h))
    if h / w >= 200:
        w, h = int(h / 190 + 1), h
        steps.append((w, h))
    return steps


_CALL_HEAD, _SOURCE, _CALL_TAIL, _QUOTES = '<grounding>{"bbox_2d": ', '"source": ', "}</grounding>", "',\""


def _last_before(text: str, sub: str, end: int, ok: Any = None) -> int:
    """The last index ``i`` with ``text[i:i+len(sub)] == sub`` inside ``text[:end]`` (and ``ok(i)``), or -1."""
    while True:
        i = text.rfind(sub, 0, max(end, 0))  # (a negative end would count from the text's end)
        if i < 0 or ok is None or ok(i):
            return i
        end = i + len(sub) - 1  # the next occurrence left of this one


def call_match(reply: str) -> tuple[str, str] | None:
    """The two groups of ``re.match(CALL_PATTERN, reply, re.DOTALL)``, in linear time (None: no match).

    Backtracking takes each greedy part as long as the rest can still match, left to right, so each boundary is
    the last one that leaves the rest matchable: the quote before the last ``}</grounding>``; the last ``"source": ``
    and quote that end before it; the last comma before that; the last ``<grounding>{"bbox_2d": `` that ends
    before the comma. Each is one backward search."""
    tail = _last_before(reply, _CALL_TAIL, len(reply), lambda t: t > 0 and reply[t - 1] in _QUOTES)
    if tail < 0:
        return None
    close_quote = tail - 1
    # "source": , its quote, then group 2 (possibly empty) up to the closing quote
    src = _last_before(reply, _SOURCE, close_quote - 1, lambda i: reply[i + len(_SOURCE)] in _QUOTES)
    if src < 0:
        return None
    comma = reply.rfind(",", 0, src)
    head = _last_before(reply, _CALL_HEAD, comma) if comma >= 0 else -1
    if head < 0:
        return None
    return reply[head + len(_CALL_HEAD) : comma], reply[src + len(_SOURCE) + 1 : close_quote]


def int_of_product(value: Any, factor: int, max_chars: int = MAX_PRODUCT_CHARS) -> Any:
    """``int(value * factor)`` as Python computes it for the release (the same value, or the same exception with the
    same message), without building a string or list product of more than ``max_chars`` items.

    ``int()`` of a list or tuple raises the same ``TypeError`` whatever it holds. ``int()`` of a string (or bytes)
    reads leading spaces, a sign, digits with single underscores between them, trailing spaces; a misplaced
    underscore is refused first, then more digits than ``sys.get_int_max_str_digits()`` (naming their count), then
    anything after the trailing spaces. A copy of only digits and underscores repeats into one number: malformed
    exactly when a copy starts or ends with an underscore or holds two in a row, else its digit count is ``factor``
    times the copy's. Any other copy holds a character that ends the digits, so the product is refused within its
    first three copies, and the message shows the first 200 characters of its repr: ``int()`` of a few copies
    raises the very same error."""
    if not isinstance(value, str | bytes | list | tuple) or len(value) * max(factor, 0) <= max_chars:
        return int(value * factor)
    seq: Any = value
    if isinstance(value, list | tuple):
        return int(seq[:0])  # TypeError: int() argument must be ... not 'list'
    copies = min(factor, max(3, -(-201 // len(seq))))  # 201 characters or all: the repr shown is cut at 200
    underscore: Any = "_" if isinstance(value, str) else b"_"
    digits = sum(c.isdecimal() for c in value) if isinstance(value, str) else sum(48 <= c <= 57 for c in seq)
    malformed = seq.startswith(underscore) or seq.endswith(underscore) or underscore * 2 in seq
    if not digits or digits + seq.count(underscore) < len(seq) or malformed:
        return int(seq * copies)  # raises as the whole product would
    limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 0  # Python 3.10.7+
    if limit and digits * factor > limit:
        raise ValueError(
            f"Exceeds the limit ({limit} digits) for integer string conversion: value has {digits * factor} digits; "
            "use sys.set_int_max_str_digits() to increase the limit"
        )
    return int(value * factor)  # pragma: no cover - only without a digit limit (sys.set_int_max_str_digits(0))


def ground(reply: str, observations: list[tuple[int, int]]) -> tuple[int, list[int]]:
    """``process_tool_call``'s parsing + ``prepare_grounding_inputs_multi_turn`` (relative coordinates): the source
    observation and the integer crop box in its pixels. Raises what the release raises (its message is sent back)."""
    match = call_match(reply)
    if match is None:  # the release's ``match.group`` on None
        raise AttributeError("'NoneType' object has no attribute 'group'")
    bbox_text, source = match
    if len(bbox_text) > MAX_LITERAL_CHARS:
        raise ValueError(f"the bbox_2d text has {len(bbox_text)} characters; at most {MAX_LITERAL_CHARS} are read")
    # the release eval()s the text; a literal reads the same (its SyntaxError names "<string>" as eval's does)
    obj: dict[str, Any] = {
        "bbox_2d": ast.literal_eval(ast.parse(bbox_text.lstrip(" \t"), "<string>", "eval")),
        "source": source,
    }
    if not (isinstance(obj["bbox_2d"], list) and len(obj["bbox_2d"]) == 4):
        raise AssertionError()  # the release's bare assert: an empty message
    bbox = obj["bbox_2d"]
    if source == "original_image":
        observation_id = 0
    else:
        m = re.match("observation_([0-9]*)", source, re.DOTALL)
        try:
            observation_id = int(m.group(1))  # type: ignore[union-attr]
        except Exception:
            raise ValueError(
                f"The 'source' argument \"{source}\" does not match the pattern 'observation_([0-9]*)'."
            ) from None
    if not observation_id < len(observations):
        raise AssertionError(f'Error in predicting the source observation: "{source}".')
    w, h = observations[observation_id]
    # (bbox[0] * w, bbox[1] * h, ...) then int() of each, as the release; a sequence's product is not built
    for v, side in zip(bbox, (w, h, w, h)):
        if not isinstance(v, str | bytes | list | tuple):
            v * side  # the release's TypeError for a value that cannot be multiplied, in its order
    b = [int_of_product(bbox[0], w), int_of_product(bbox[1], h), int_of_product(bbox[2], w), int_of_product(bbox[3], h)]
    b = [max(b[0], 0), max(b[1], 0), min(b[2], w - 1), min(b[3], h - 1)]
    if not b[0] <= b[2] - 1:
        raise AssertionError(f"The bounding box is not valid in width: {b}")
    if not b[1] <= b[3] - 1:
        raise AssertionError(f"The bounding box is not valid in height: {b}")
    width_box, height_box = b[2] - b[0], b[3] - b[1]
    if width_box / height_box >= 200 or height_box / width_box >= 200:
        raise ValueError("The absolute aspect ratio of the bounding box exceeds 200, which is too large.")
    return observation_id, b


def answer_text(reply: str) -> str | None:
    """The reward's answer (general_qa_tool_mc l. 197-209): the last ``<answer>`` span of the stripped last turn."""
    matches = tagged_spans(reply.strip(), "<answer>", "</answer>")
    return matches[-1] if matches else None


def _view(
    ref: ImageRef,
    whole: tuple[float, float, float, float],
    resample: Resample,
    steps: list[tuple[int, int]] | None = None,
) -> JSONObject:
    """The image part of ``ref``: its region cut from the original (``whole``: the image's own region, not cut), then
    resized through ``steps`` (or to its size) with ``resample``."""
    crop: tuple[ViewOp, ...] = () if ref.region == whole else (Crop(pixel_box(ref.region)),)
    return image_part(ref, Resize((*crop, *(ResizeTo(s, resample) for s in steps or [ref.size]))))


class MiniO3Session:
    """One Mini-o3 episode (see the module docstring). ``observations``: the regions (original pixels) of the
    original image (0) and of each crop (1, 2, ...), at their own resolution as the release keeps them."""

    def __init__(self, question: str, options: str | None, image: str, size: tuple[int, int]):
        self.image = image
        full = (0.0, 0.0, float(size[0]), float(size[1]))
        self.regions: list[tuple[float, float, float, float]] = [full]
        shown = first_image_size(*size)
        if min(shown) < 1 or max(shown) / min(shown) > QWEN_MAX_RATIO:  # docs/fidelity.md M3
            raise UnusableImage(
                f"the image is shown at {shown[0]}x{shown[1]}: an aspect ratio past {QWEN_MAX_RATIO}, which the "
                "Qwen2.5-VL processor of the release's vLLM refuses"
            )
        first = ImageRef(image, full, shown)
        text = question if not options else f"{question}\n{options}"
        self.messages: list[dict] = [
            message("system", SYSTEM_PROMPT),
            message("user", _view(first, full, Resample.LANCZOS), text),
        ]
        self.round = 0

    def _sizes(self) -> list[tuple[int, int]]:
        return [(int(r[2] - r[0]), int(r[3] - r[1])) for r in self.regions]

    def step(self, reply: str, finish_reason: str | None = None) -> Step:
        if finish_reason == "stop" and "<grounding>" in reply and not reply.endswith(STOP) and STOP not in reply:
            reply += STOP  # a server that drops the stop string (vLLM keeps it: include_stop_str_in_output)
        self.messages.append(message("assistant", reply))
        answer = answer_text(reply)
        if not has_tagged(reply, "<grounding>", "</grounding>"):
            if answer is None:
                return Finish("", reason="the last turn has no <answer> (scored 0 by the release)")
            if finish_reason == "length":  # the release marks the episode void for training; validation scores the span
                return Finish(answer, reason="the last turn was cut at the length limit (its <answer> span is judged)")
            return Finish(answer)
        if len(self.regions) >= MAX_IMAGES or self.round == MAX_ROUNDS - 1:
            # the release stops here; its validation still scores the last turn's <answer> span, if it has one
            what = f"a tool call after {MAX_IMAGES} images or in round {MAX_ROUNDS}"
            return Finish(answer or "", reason=f"{what} ({'its <answer> span is judged' if answer else 'scored 0'})")
        try:
            source, b = ground(reply, self._sizes())
        except Exception as e:  # the release's catch-all: the message goes back to the model
            text = f"ERROR occurs during grounding. Error Information: {e}.\n" + ERROR_PROMPT
            self.messages.append(message("user", text))
            self.round += 1
            return Ask()
        ox, oy = self.regions[source][0], self.regions[source][1]
        region = (ox + b[0], oy + b[1], ox + b[2], oy + b[3])
        self.regions.append(region)
        native = (b[2] - b[0], b[3] - b[1])
        steps = crop_view_steps(*native)
        crop = ImageRef(self.image, region, steps[-1] if steps else native)
        before, after = OBSERVATION_PROMPT.format(action_turn=self.round, observation_turn=self.round + 1).split(
            IMAGE_PLACEHOLDER
        )
        self.messages.append(message("user", before, _view(crop, self.regions[0], Resample.NEAREST, steps), after))
        self.round += 1
        return Ask(zoomed=True)


def demo_reply(turn: DemoTurn) -> str | None:
    """The keyless demo's scripted Mini-o3: a ``<grounding>`` call on the evidence box in coordinates relative to the
    original image, then ``<answer>``."""
    if turn.system != SYSTEM_PROMPT:
        return None
    if turn.turns == 0:
        w, h = turn.size
        x0, y0, x1, y1 = turn.box
        rel = [min(round(v, 3), 0.999) for v in (x0 / w, y0 / h, x1 / w, y1 / h)]  # all < 1: relative
        call = f'<grounding>{{"bbox_2d": {rel}, "source": "original_image"}}{STOP}'
        return f"<think>Let me zoom in on the region the question is about {turn.tag}.</think> {call}"
    return f"<think>The observation shows it.</think> <answer>{turn.letter}</answer>"


SPEC = AgentSpec(
    name=MINI_O3.name,
    protocol_version=PROTOCOL_VERSION,
    description=MINI_O3.description,
    session=MiniO3Session,
    defaults=DEFAULTS,
    demo_reply=demo_reply,
)
