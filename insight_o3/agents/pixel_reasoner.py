"""Pixel-Reasoner (github TIGER-AI-Lab/Pixel-Reasoner) as a sans-IO session: the rules of its released evaluation
(README "Evaluation": ``scripts/eval_vlm_new.sh`` with ``sys=vcot``, ``MIN_PIXELS=401408``, ``MAX_PIXELS=4014080``),
over the chat API instead of its offline vLLM loop. Sources (commit a3a6c3a, under ``curiosity_driven_rl/openrlhf``;
docs/fidelity.md rows P*):

* ``datasets/prompts_dataset.py`` l. 37 (``vcot``), l. 142 and 156-157: the user message ``[image, question +
  "\\n\\n" + vcot]``;
* ``trainer/ppo_utils/experience_maker.py``:
  l. 124-166 (the tool ``crop_image_normalized``: a box in ``[0, 1]`` when all four values are < 1, else pixels of
  the image it crops; padded by 0.1 of a side, clamped to the image, ``Image.crop`` (which rounds), the crop must be
  more than 28 px a side), l. 1145-1147 (``parse_last_tool``: JSON between the last ``<tool_call>`` of the whole
  text so far and the next ``</tool_call>``), l. 1170-1241 (``execute_tool``: ``target_image`` counts from 1),
  l. 1244-1276 (the system prompt: "You are a helpful assistant." and qwen-agent's ``NousFnCallPrompt`` with the two
  tools, l. 1450-1453), l. 1365-1379 (``resize_cropped``: ``smart_resize`` to 256..5120 x 28 x 28 pixels),
  l. 1951-2400 (``_generate_vllm``, the loop: the question's image through ``fetch_image`` at 256..8000 x 28 x 28
  pixels, greedy decoding, 2048 tokens a reply, the stop strings; a reply ending with ``</tool_call>`` is a call;
  the episode ends on a reply that is not, or on any reply after 4 calls, with more than 16 images, or whose
  request had more than 12 x 1024 - 200 tokens; a call's error goes back to the model as ``"\\nExecution
  error:\\n{e}\\n"``, a crop as ``"\\nHere is the cropped image (Image Size: WxH):"`` and the image);
  l. 818-948, 2405 (the reward: the response from its last ``boxed``; here the judge reads the reply holding it).

Crops are taken from the images the loop holds (the resized question image, earlier crops), so a view is a
pipeline of resizes and crops of the original file (:attr:`~insight_o3.imaging.view_ops.Resize.ops`). The
tool-call handling runs the release's operations in the release's order on the parsed values, so an error's
message (sent back to the model) is the one Python gives the release; the golden test checks that.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..base.json_types import JSONObject
from ..imaging.geometry import smart_resize
from ..imaging.images import ImageRef
from ..imaging.view_ops import Crop, Resample, Resize, ResizeTo, ViewOp
from ..protocol.agent_catalog import PIXEL_REASONER
from ..protocol.trajectory import image_part, message, message_text
from .tool_agents import AgentDefaults, AgentSpec, Ask, DemoTurn, Finish, Step, UnusableImage

PROTOCOL_VERSION = "pixel_reasoner@a3a6c3a557a87d89ffaec825bd8c8d09b719fb97:experience_maker.py"

#: "You are a helpful assistant." + qwen-agent 0.0.20's NousFnCallPrompt with the release's two tools (recorded by
#: running them: tests/golden/record_pixel_reasoner_goldens.py)
SYSTEM_PROMPT = """You are a helpful assistant.

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type": "function", "function": {"name": "crop_image_normalized", "description": "Zoom in on the image based on the bounding box coordinates. It is useful when the object or text in the image is too small to be seen.", "parameters": {"type": "object", "properties": {"bbox_2d": {"type": "array", "description": "coordinates for bounding box of the area you want to zoom in. Values should be within [0.0,1.0].", "items": {"type": "number"}}, "target_image": {"type": "number", "description": "The index of the image to crop. Index from 1 to the number of images. Choose 1 to operate on original image."}}, "required": ["bbox_2d", "target_image"]}}}
{"type": "function", "function": {"name": "select_frames", "description": "Select frames from a video.", "parameters": {"type": "object", "properties": {"target_frames": {"type": "array", "description": "List of frame indices to select from the video (no more than 8 frames in total).", "items": {"type": "integer", "description": "Frame index from 1 to 16."}}}, "required": ["target_frames"]}}}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call>"""  # noqa: E501
#: ``"\n\n" + templates["vcot"]`` (prompts_dataset.py l. 37, 142): appended to the question
USER_SUFFIX = "\n\n\n\nGuidelines: Understand the given visual information and the user query. Determine if it is beneficial to employ the given visual operations (tools). For a video, we can look closer by `select_frames`. For an image, we can look closer by `crop_image`. Reason with the visual information step by step, and put your final answer within \\boxed{}."  # noqa: E501
CROP_TEXT = "\nHere is the cropped image (Image Size: {}x{}):"
ERROR_TEXT = "\nExecution error:\n{}\n"
SELECT_FRAMES_ERROR = (
    "Execution Error: You attempted to `select_frames` from **image** not **video**. You should use "
    "`crop_image_normalized` instead for inspecting **image**."
)
TARGET_ERROR = (
    "Execution Error: Incorrect `target_image` argument in `crop_image_normalized` operation. You can only pick an "
    "image within [1,{}]"
)
TOOL_START, TOOL_END = "<tool_call>", "</tool_call>"
#: the release's ``self.operations`` (l. 1450): looked up by name, so a bad name fails as it does there
OPERATIONS = {"crop_image_normalized": "crop", "select_frames": "select"}
STOP = ["<|im_end|>", "<|eot_id|>", "<|endoftext|>"]
#: the loop's limits (l. 2058, 2246): a reply after 4 calls, more than 16 images, a request past 12*1024-200 tokens
MAX_CALLS, MAX_IMAGES, MAX_TOKENS = 3, 16, 12 * 1024 - 200
FACTOR = 28
FIRST_MIN_PIXELS, FIRST_MAX_PIXELS = 256 * 28 * 28, 8000 * 28 * 28  # eval_minpixel, eval_maxpixel (l. 1960-1961)
CROP_MIN_PIXELS, CROP_MAX_PIXELS = 256 * 28 * 28, 5120 * 28 * 28  # resize_cropped at eval (l. 2306)
PADDING = 0.1
#: evaluation sampling (l. 1979, 1989, 2067-2070, 2108-2119): greedy, ``max_out_tokens`` 2048 (eval_ray.py has no such flag)
COMPLETION_KWARGS = {
    "temperature": 0.0,
    "top_p": 1.0,
    "max_tokens": 2048,
    "stop": STOP,
    "extra_body": {"top_k": -1, "min_tokens": 1, "skip_special_tokens": False, "include_stop_str_in_output": False},
}
DEFAULTS = AgentDefaults(completion_kwargs=COMPLETION_KWARGS, image_format="PNG", join_text=False)


@dataclass(frozen=True)
class View:
    """An image the loop holds: the pipeline that makes it from the original file, its size, its region of the
    original (for the record)."""

    pipeline: tuple[ViewOp, ...]
    size: tuple[int, int]
    region: tuple[float, float, float, float]

    def crop(self, box: tuple[int, int, int, int], shown: tuple[int, int]) -> View:
        x0, y0, x1, y1 = box
        rx0, ry0, rx1, ry1 = self.region
        sx, sy = (rx1 - rx0) / self.size[0], (ry1 - ry0) / self.size[1]
        region = (rx0 + x0 * sx, ry0 + y0 * sy, rx0 + x1 * sx, ry0 + y1 * sy)
        return View((*self.pipeline, Crop(box), ResizeTo(shown, Resample.BICUBIC)), shown, region)


def first_view(size: tuple[int, int]) -> View:
    """``fetch_image`` of the question's image: ``smart_resize`` at 256..8000 x 28 x 28 pixels (BICUBIC). Raises
    :class:`~insight_o3.agents.tool_agents.UnusableImage` where it raises (an aspect ratio past 200: the release's
    loop stops there, docs/fidelity.md P3)."""
    try:
        h, w = smart_resize(size[1], size[0], FACTOR, FIRST_MIN_PIXELS, FIRST_MAX_PIXELS)
    except ValueError as e:
        raise UnusableImage(f"the release's fetch_image refuses the {size[0]}x{size[1]} image: {e}") from None
    return View((ResizeTo((w, h), Resample.BICUBIC),), (w, h), (0.0, 0.0, float(size[0]), float(size[1])))


def crop_box(size: tuple[int, int], bbox_2d: Any) -> tuple[int, int, int, int]:
    """``CropImageNormalized.call`` (l. 150-166) on an image of ``size``: the integer box ``Image.crop`` takes.
    Raises what the release raises (its message goes back to the model)."""
    img_x, img_y = size
    padding = PADDING
    b: tuple[float, float, float, float]
    if bbox_2d[0] < 1 and bbox_2d[1] < 1 and bbox_2d[2] < 1 and bbox_2d[3] < 1:
        b = (
            float(bbox_2d[0]) - padding,
            float(bbox_2d[1]) - padding,
            float(bbox_2d[2]) + padding,
            float(bbox_2d[3]) + padding,
        )
    else:
        b = (
            float(bbox_2d[0]) / img_x - padding,
            float(bbox_2d[1]) / img_y - padding,
            float(bbox_2d[2]) / img_x + padding,
            float(bbox_2d[3]) / img_y + padding,
        )
    x1, y1, x2, y2 = (min(max(0, v), 1) for v in b)
    box = (x1 * img_x, y1 * img_y, x2 * img_x, y2 * img_y)
    if box[2] < box[0]:  # Image.crop's checks, then its rounding
        raise ValueError("Coordinate 'right' is less than 'left'")
    if box[3] < box[1]:
        raise ValueError("Coordinate 'lower' is less than 'upper'")
    r = tuple(int(round(v)) for v in box)
    w, h = r[2] - r[0], r[3] - r[1]
    if not (w > 28 and h > 28):
        raise AssertionError(f"Cropped image is too small: {w}x{h}")
    return r  # type: ignore[return-value]


def answer_reply(replies: list[str]) -> int:
    """Which reply the judge reads: the last one holding ``boxed`` (the release's reward scores the response from its
    last ``boxed``, lowercased: ``rule_reward`` / ``handle_boxed`` l. 818-948), so a ``\\boxed{}`` of an earlier turn
    still counts; none: the last reply (the release's ``rindex`` raises there; ours: the judge decides)."""
    for i in range(len(replies) - 1, -1, -1):
        if "boxed" in replies[i].lower():
            return i
    return len(replies) - 1


def answer_text(replies: list[str]) -> str:
    """The text of :func:`answer_reply`."""
    return replies[answer_reply(replies)]


def last_tool_call(text: str) -> Any:
    """``parse_last_tool`` (l. 1145-1147): JSON between the last ``<tool_call>`` and the next ``</tool_call>``."""
    return json.loads(text.split(TOOL_START)[-1].split(TOOL_END)[0])


class PixelReasonerSession:
    """One Pixel-Reasoner episode (see the module docstring). ``views``: the images the loop holds (1-based
    ``target_image``); ``raw``: the list the release reads indices below its length from (the question's image
    only: it is never extended, l. 2158-2160, 1233-1237)."""

    def __init__(self, question: str, options: str | None, image: str, size: tuple[int, int]):
        self.image = image
        first = first_view(size)
        self.views: list[View] = [first]
        self.raw: list[View] = [first]
        text = (question if not options else f"{question}\n{options}") + USER_SUFFIX
        self.messages: list[dict] = [message("system", SYSTEM_PROMPT), message("user", self._part(first), text)]
        self.calls = 0
        self.tokens: int | None = None

    def _part(self, v: View) -> JSONObject:
        ref = ImageRef(self.image, v.region, v.size)
        return image_part(ref, Resize(v.pipeline))

    def qa_text(self) -> str:
        """The text ``parse_last_tool`` searches (l. 2205-2206, 2391, 2399): the conversation as Qwen2.5-VL's chat
        template renders it, image pads removed, the last reply after the generation prompt."""
        out = []
        for m in self.messages[:-1]:
            body = "".join(p["text"] if p["type"] == "text" else "<|vision_start|><|vision_end|>" for p in m["content"])
            out.append(f"<|im_start|>{m['role']}\n{body}<|im_end|>\n")
        return "".join(out) + "<|im_start|>assistant\n" + message_text(self.messages[-1])

    def answer(self) -> str:
        return answer_text(self._replies())

    def _replies(self) -> list[str]:
        return [message_text(m) for m in self.messages if m["role"] == "assistant"]

    def _finish(self, reason: str | None) -> Finish:
        """The answer, naming the reply it is (its ``finish_reason`` is the attempt's, not the last reply's)."""
        replies = self._replies()
        i = answer_reply(replies)
        return Finish(replies[i], reason, reply=i)

    def note_usage(self, usage: Mapping[str, int]) -> None:
        if "prompt_tokens" in usage and "completion_tokens" in usage:
            self.tokens = usage["prompt_tokens"] + usage["completion_tokens"]
        else:
            self.tokens = None

    def _execute(self, text: str) -> View:
        """Parse and run the last call (l. 2270-2306); raises what the release raises."""
        tool_params = last_tool_call(text)
        tool_name = tool_params["name"]
        tool_args = tool_params["arguments"]
        if OPERATIONS[tool_name] == "select":
            raise AssertionError(SELECT_FRAMES_ERROR)
        tgt = tool_args["target_image"]
        index = tgt - 1
        if not index < len(self.views):
            raise AssertionError(TARGET_ERROR.format(len(self.views)))
        source = self.raw[index] if index < len(self.raw) else self.views[index]
        box = crop_box(source.size, tool_args["bbox_2d"])
        bw, bh = box[2] - box[0], box[3] - box[1]
        h, w = smart_resize(bh, bw, FACTOR, CROP_MIN_PIXELS, CROP_MAX_PIXELS)
        return source.crop(box, (w, h))

    def step(self, reply: str, finish_reason: str | None = None) -> Step:
        rsp = reply.replace("<|im_end|>", "")
        require_tool = rsp.endswith(TOOL_END)
        force = self.calls > MAX_CALLS or len(self.views) > MAX_IMAGES or (self.tokens or 0) > MAX_TOKENS
        self.calls += int(require_tool)
        self.messages.append(message("assistant", rsp))
        if not require_tool or force:
            reason = None
            if require_tool:
                reason = (
                    f"a tool call after {MAX_CALLS + 1} calls or past {MAX_TOKENS} tokens (the reply is the answer)"
                )
            return self._finish(reason)
        try:
            view = self._execute(self.qa_text())
        except Exception as e:  # the release's catch-all: the message goes back to the model
            self.messages.append(message("user", ERROR_TEXT.format(e)))
            return Ask()
        if len(self.views) + 1 > MAX_IMAGES:  # l. 2335-2339: the episode ends, the call unanswered
            return self._finish(f"more than {MAX_IMAGES} images")
        self.views.append(view)
        self.messages.append(message("user", CROP_TEXT.format(*view.size), self._part(view)))
        return Ask(zoomed=True)


def demo_reply(turn: DemoTurn) -> str | None:
    """The keyless demo's scripted Pixel-Reasoner: a ``crop_image_normalized`` call on the evidence box (normalized,
    on image 1), then ``\\boxed{}``."""
    if turn.system != SYSTEM_PROMPT:
        return None
    if turn.turns == 0:
        w, h = turn.size
        x0, y0, x1, y1 = turn.box
        rel = [min(round(v, 3), 0.999) for v in (x0 / w, y0 / h, x1 / w, y1 / h)]  # all < 1: relative
        call = json.dumps({"name": "crop_image_normalized", "arguments": {"bbox_2d": rel, "target_image": 1}})
        return (
            f"I need a closer look at the region the question is about {turn.tag}.\n<tool_call>\n{call}\n</tool_call>"
        )
    return f"The cropped image shows it. The answer is \\boxed{{{turn.letter}}}."


SPEC = AgentSpec(
    name=PIXEL_REASONER.name,
    protocol_version=PROTOCOL_VERSION,
    description=PIXEL_REASONER.description,
    session=PixelReasonerSession,
    defaults=DEFAULTS,
    alpha="white",  # qwen_vl_utils.to_rgb / the release's to_rgb: RGBA pasted on white
    demo_reply=demo_reply,
)
