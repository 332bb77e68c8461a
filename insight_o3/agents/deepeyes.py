"""DeepEyes (github Visual-Agent/DeepEyes) as a sans-IO session: the rules of its released evaluation,
``eval/eval_vstar.py`` at commit 6c5e796 (line numbers below are that file's; docs/fidelity.md rows B-D*).

* prompts: the system prompt (l. 53-71) and ``instruction_prompt_before`` (l. 74-76) with ``USER_PROMPT_V2``
  (l. 72), byte for byte; options as ``"\\n" + "A. ...\\n" ...`` (l. 131-133);
* the first user message is ``[image, text]`` (l. 140-152): the image file itself, base64 of its bytes under an
  ``image/jpeg`` label (l. 81-83, 138, 144; EXIF and all: a server that applies ``exif_transpose`` sees it turned);
* a reply containing ``<tool_call>`` is a zoom-in call (l. 192-194): the text between the first ``<tool_call>``
  and the next ``</tool_call>``, read as a Python literal (the release ``eval``s it; we use
  :func:`ast.literal_eval`, which reads every literal the same and runs no code; a text longer than
  :data:`MAX_LITERAL_CHARS` is not read: parsing takes ~500 bytes a character), ``['arguments']['bbox_2d']``
  unpacked to ``left, top, right, bottom`` in original-image pixels (l. 199-201);
* the crop is ``pil_img.crop(box)`` of the image as ``Image.open`` gives it (its own mode: no RGB conversion, no EXIF
  rotation; PIL rounds each coordinate and pads what lies outside the image with black, so a box wholly outside
  it is a black crop and the loop goes on) resized with the release's ``smart_resize`` of the unrounded
  width/height (factor 28, 4*28*28..16384*28*28 pixels, BICUBIC, which PIL applies as NEAREST to a palette image and
  on premultiplied alpha to RGBA) and sent as PNG in that mode (l. 49-51, 85-89, 106-119, 202-206);
* the tool response is a user message ``["<tool_response>", crop, USER_PROMPT_V2, "</tool_response>"]`` after
  the assistant's reply (l. 214-232);
* the loop (l. 175-259): requests until a reply contains ``</answer>``, at most 11 requests (``try_count > 10``);
  a reply with neither a tool call nor ``</answer>`` is not added and the same messages are sent again;
* any error while handling a tool call ends the episode (l. 260-262): a call that is no literal or has no 4 numbers,
  ``right < left`` (PIL), a zero side where ``smart_resize`` divides by zero, a crop PNG cannot hold (CMYK);
* a question without options: the release's row writer reads ``options[0]`` (l. 271) and crashes, writing no row;
  here the prompt gets ``"\n"`` as options (what its loop sends) and the row is written;
* the answer (l. 265-268): the text between ``<answer>`` and ``</answer>`` of the last reply, stripped, when it
  has both, else the whole last reply.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Callable

from ..imaging.images import ImageRef
from ..imaging.view_ops import Crop, Resample, Resize, ResizeTo
from ..protocol.agent_catalog import DEEPEYES
from ..protocol.trajectory import image_part, message
from .tool_agents import AgentDefaults, AgentSpec, Ask, DemoTurn, Finish, Step

PROTOCOL_VERSION = "deepeyes@6c5e79671dbff958a6f9d44848ba2ca87854f0b0:eval/eval_vstar.py"

SYSTEM_PROMPT = """You are a helpful assistant.

# Tools
You may call one or more functions to assist with the user query.
You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type":"function","function":{"name":"image_zoom_in_tool","description":"Zoom in on a specific region of an image by cropping it based on a bounding box (bbox) and an optional object label.","parameters":{"type":"object","properties":{"bbox_2d":{"type":"array","items":{"type":"number"},"minItems":4,"maxItems":4,"description":"The bounding box of the region to zoom in, as [x1, y1, x2, y2], where (x1, y1) is the top-left corner and (x2, y2) is the bottom-right corner."},"label":{"type":"string","description":"The name or label of the object in the specified bounding box (optional)."}},"required":["bbox"]}}}
</tools>

# How to call a tool
Return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call>

**Example**:  
<tool_call>  
{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [10, 20, 100, 200], "label": "the apple on the desk"}}  
</tool_call>"""  # noqa: E501, W291 (byte for byte, trailing spaces included)
USER_PROMPT_V2 = (
    "\nThink first, call **image_zoom_in_tool** if needed, then answer. Format strictly as:  <think>...</think>  "
    "<tool_call>...</tool_call> (if tools needed)  <answer>...</answer> "
)
INSTRUCTION_PROMPT = "Question: {question}\nOptions: {options}\n" + USER_PROMPT_V2
TOOL_START, TOOL_END = "<tool_call>", "</tool_call>"
#: the release's request settings (l. 182-188)
COMPLETION_KWARGS = {"temperature": 0.0, "max_tokens": 10240, "stop": ["<|im_end|>"]}
#: requests per episode: ``try_count`` 0..10 (l. 179)
MAX_REQUESTS = 11
#: Characters of a tool call read as a literal (docs/fidelity.md B12): the parser's tree takes ~500 bytes a
#: character (a 2.4 MB call took 1.24 GB), and a real call is under 200 characters.
MAX_LITERAL_CHARS = 16_384
#: Pixels of a crop PIL is asked to make (docs/fidelity.md B8): a box past the image is cropped with black
#: outside, all of it allocated, so a box of 200000 x 2000 px would be 1.2 GB; a box inside the largest image the
#: store decodes is under this
MAX_CROP_PIXELS = 16384 * 16384
IMAGE_FACTOR, MIN_PIXELS, MAX_PIXELS = 28, 4 * 28 * 28, 16384 * 28 * 28
#: every image labelled ``image/jpeg`` (l. 144, 205), the file's own bytes and the PNG crops alike
DEFAULTS = AgentDefaults(
    completion_kwargs=COMPLETION_KWARGS, image_format="PNG", join_text=False, image_mime="image/jpeg"
)


class ToolCallError(ValueError):
    """A tool call the released loop would have raised on (its episode ends: l. 260-262)."""


def release_smart_resize(height: float, width: float) -> tuple[int, int]:
    """The release's ``smart_resize`` (l. 106-119: no aspect-ratio check, no lower clamp after flooring), on
    the unrounded box sides it is given. Raises :class:`ToolCallError` where it divides by zero."""

    def by(x: float, f: Callable[[float], int]) -> int:
        return f(x / IMAGE_FACTOR) * IMAGE_FACTOR

    h_bar, w_bar = max(IMAGE_FACTOR, by(height, round)), max(IMAGE_FACTOR, by(width, round))
    try:
        if h_bar * w_bar > MAX_PIXELS:
            beta = math.sqrt((height * width) / MAX_PIXELS)
            h_bar, w_bar = by(height / beta, math.floor), by(width / beta, math.floor)
        elif h_bar * w_bar < MIN_PIXELS:
            beta = math.sqrt(MIN_PIXELS / (height * width))
            h_bar, w_bar = by(height * beta, math.ceil), by(width * beta, math.ceil)
    except (ZeroDivisionError, ValueError, OverflowError) as e:
        raise ToolCallError(f"smart_resize({height}, {width}): {e}") from None
    return h_bar, w_bar


def options_block(options: str | None) -> str:
    """The release's option string (l. 131-133) of our options block ("A. ...\\nB. ..."; none: ``"\\n"``)."""
    lines = [ln for ln in (options or "").split("\n") if ln.strip()]
    return "\n" + "".join(ln + "\n" for ln in lines)


def user_prompt(question: str, options: str | None) -> str:
    return INSTRUCTION_PROMPT.format(question=question, options=options_block(options))


def parse_zoom(
    reply: str, image_size: tuple[int, int]
) -> tuple[tuple[float, float, float, float], tuple[int, int, int, int], tuple[int, int]]:
    """The zoom-in call of a reply holding ``<tool_call>`` (l. 193-204): the crop's region for the record (PIL's
    rounding, clamped to the image: empty for a box wholly outside it), the box PIL crops (rounded, not clamped: the
    outside is black) and the crop's ``(w, h)``; raises :class:`ToolCallError` where the release raises."""
    body = reply.split(TOOL_START)[1].split(TOOL_END)[0].strip()
    if len(body) > MAX_LITERAL_CHARS:
        raise ToolCallError(f"tool call of {len(body)} characters (at most {MAX_LITERAL_CHARS} are read as a literal)")
    try:
        call = ast.literal_eval(body)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
        raise ToolCallError(f"tool call is not a literal: {type(e).__name__}") from None
    try:
        bbox = call["arguments"]["bbox_2d"]
        left, top, right, bottom = bbox
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise ToolCallError(f"no 4-number arguments.bbox_2d: {type(e).__name__}: {e}") from None
    coords = (left, top, right, bottom)
    if not all(_finite_number(v) for v in coords):  # the release's crop raises on these (OverflowError, TypeError)
        raise ToolCallError(f"bbox_2d holds a non-number or a number past the float range: {_short(bbox)}")
    if right < left or bottom < top:  # PIL's crop refuses these
        raise ToolCallError(f"bbox_2d {_short(bbox)}: right < left or bottom < top")
    # the release calls smart_resize(width, height) and reads (w, h) back: the rule is symmetric, so this is each
    # side's own rounding
    new_w, new_h = release_smart_resize(right - left, bottom - top)
    if new_w <= 0 or new_h <= 0:  # a side floored to 0 (a box 1e9 wide, 1 high): the release's resize raises
        raise ToolCallError(f"smart_resize gives a {new_w}x{new_h} crop for bbox_2d {_short(bbox)}")
    x0, y0, x1, y1 = (round(v) for v in coords)  # PIL's Image.crop rounds
    W, H = image_size
    if (x1 - x0) * (y1 - y0) > MAX_CROP_PIXELS:  # PIL's crop would allocate it all, black outside the image
        raise ToolCallError(
            f"bbox_2d {_short(bbox)} is a {x1 - x0}x{y1 - y0} crop, more than {MAX_CROP_PIXELS} pixels (not made)"
        )
    cx0, cy0 = min(max(0, x0), W), min(max(0, y0), H)
    region = (float(cx0), float(cy0), float(max(cx0, min(W, x1))), float(max(cy0, min(H, y1))))
    return region, (x0, y0, x1, y1), (new_w, new_h)


def _finite_number(v: object) -> bool:
    """An int or float the crop can use: finite, and (an int) within the float range."""
    if not isinstance(v, int | float):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an int of hundreds of digits
        return False


def _short(value: object, limit: int = 200) -> str:
    """``repr(value)``, cut to ``limit`` characters (a stop reason is one line of a record)."""
    try:
        text = repr(value)
    except ValueError:  # an int past the interpreter's digit limit (a hex literal can write one)
        return f"<a {type(value).__name__} too large to print>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def answer_text(reply: str) -> str:
    """The release's answer extraction (l. 265-268)."""
    if "</answer>" in reply and "<answer>" in reply:
        return reply.split("<answer>")[1].split("</answer>")[0].strip()
    return reply


class DeepEyesSession:
    """One DeepEyes episode (see the module docstring)."""

    def __init__(self, question: str, options: str | None, image: str, size: tuple[int, int]):
        self.image, self.size = image, size
        original = ImageRef(image, (0.0, 0.0, float(size[0]), float(size[1])), size)
        self.messages: list[dict] = [
            message("system", SYSTEM_PROMPT),
            message("user", image_part(original, Resize(as_file=True)), user_prompt(question, options)),  # l. 138
        ]
        self.requests = 0
        self.last_reply: str | None = None

    def step(self, reply: str, finish_reason: str | None = None) -> Step:
        self.requests += 1
        self.last_reply = reply
        zoomed = TOOL_START in reply
        if zoomed:
            try:
                region, box, shown = parse_zoom(reply, self.size)
            except ToolCallError as e:
                self.messages.append(message("assistant", reply))
                return Finish(answer_text(reply), reason=f"tool call error: {e}")
            # l. 202-204: PIL's crop (black outside), BICUBIC
            crop = image_part(
                ImageRef(self.image, region, shown), Resize((Crop(box), ResizeTo(shown, Resample.BICUBIC)))
            )
            self.messages.append(message("assistant", reply))
            self.messages.append(message("user", "<tool_response>", crop, USER_PROMPT_V2, "</tool_response>"))
        done = "</answer>" in reply
        if not done and self.requests < MAX_REQUESTS:
            return Ask(zoomed=zoomed)
        if not zoomed:  # the record ends with the last reply
            self.messages.append(message("assistant", reply))
        return Finish(answer_text(reply), None if done else f"no </answer> after {MAX_REQUESTS} requests")

    def view_failed(self, reason: str) -> Finish | None:
        """A crop that cannot be encoded (PNG cannot hold the image's mode, CMYK) is an error in the tool call: the
        release's episode ends there with the reply as its answer (l. 205, 260-268); the tool response that could
        not be made is dropped. None before any reply (the first image is the file itself)."""
        if self.last_reply is None:
            return None
        if self.messages and self.messages[-1]["role"] == "user":
            self.messages.pop()
        return Finish(answer_text(self.last_reply), reason=f"tool call error: {reason}")


def demo_reply(turn: DemoTurn) -> str | None:
    """The keyless demo's scripted DeepEyes: an ``image_zoom_in_tool`` call on the evidence box (original pixels),
    then ``<answer>``."""
    if turn.system != SYSTEM_PROMPT:
        return None
    if turn.turns == 0:
        box = [round(v) for v in turn.box]
        call = json.dumps({"name": "image_zoom_in_tool", "arguments": {"bbox_2d": box, "label": "the evidence"}})
        return f"<think>I should zoom in on the region the question is about {turn.tag}.</think>\n{TOOL_START}\n{call}\n{TOOL_END}"
    return f"<think>The zoomed-in view shows it.</think> <answer>{turn.letter}</answer>"


SPEC = AgentSpec(
    name=DEEPEYES.name,
    protocol_version=PROTOCOL_VERSION,
    description=DEEPEYES.description,
    session=DeepEyesSession,
    defaults=DEFAULTS,
    alpha="keep",  # the release crops Image.open(path) in the file's own mode
    demo_reply=demo_reply,
)
