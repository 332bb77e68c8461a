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
error's message (sent back to the model) is the one Python gives the release; the golden test checks that.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from ..base.json_types import JSONObject
from ..imaging.images import ImageRef
from ..protocol.trajectory import image_part, message
from .tool_agents import AgentDefaults, AgentSpec, Ask, DemoTurn, Finish, Step

PROTOCOL_VERSION = "mini_o3@8654dbf42d2ea98b9d81b6cc7179026dd0598fdf:vllm_async_engine.py"

SYSTEM_PROMPT = """You are a helpful assistant. Answer the user's question based on the image provided. Output your thinking process within the <think> and </think> tags. Whenever you find anything unclear, you can zoom in a specific region in the given image to see more clearly by outputing <grounding>{\"bbox_2d\": [x0, y0, x1, y1], \"source\": \"original_image\"}</grounding>, where (x0, y0) and (x1, y1) are the top-left and bottom-right coordinates of the region that you want to zoom in, respectively (suppose the width and height of the image are 1.0), and 'source' refers to the image that you zoom in and could be either 'original_image' or 'observation_i'. Once the final answer is confirmed, put it within <answer> and </answer>."""  # noqa: E501
OBSERVATION_PROMPT = "After the above Action {action_turn}, here is the the zoom-in image (Observation {observation_turn}):\n<|vision_start|><|image_pad|><|vision_end|>.\nContinue your reasoning process inside <think> and </think>. If needed, you can continue to zoom in on the original image or any of the observations, by outputting <grounding> and </grounding> as before. If the final answer is confirmed, put your final answer inside <answer> and </answer>."  # noqa: E501
ERROR_PROMPT = "Please analyze the error information obtained from the function tool and adjust your response. Countinue your reasoning process inside <think> and </think>."  # noqa: E501
IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"
GROUNDING = re.compile(r"<grounding>(.*?)</grounding>", re.DOTALL)
CALL = re.compile('.*<grounding>{"bbox_2d": (.*),.*"source": [\',"](.*)[\',"]}</grounding>', re.DOTALL)
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
STOP = "</grounding>"
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


def ground(reply: str, observations: list[tuple[int, int]]) -> tuple[int, list[int]]:
    """``process_tool_call``'s parsing + ``prepare_grounding_inputs_multi_turn`` (relative coordinates): the source
    observation and the integer crop box in its pixels. Raises what the release raises (its message is sent back)."""
    match = CALL.match(reply)
    bbox_text, source = match.group(1), match.group(2)  # type: ignore[union-attr]  # AttributeError as the release
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
    box = (bbox[0] * w, bbox[1] * h, bbox[2] * w, bbox[3] * h)
    b = [int(box[0]), int(box[1]), int(box[2]), int(box[3])]
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
    matches = ANSWER.findall(reply.strip())
    return matches[-1] if matches else None


def _view(ref: ImageRef, resample: str, steps: list[tuple[int, int]] | None = None) -> JSONObject:
    part = {**image_part(ref), "resample": resample}
    if steps and len(steps) > 1:
        part["steps"] = [list(st) for st in steps]
    return part


class MiniO3Session:
    """One Mini-o3 episode (see the module docstring). ``observations``: the regions (original pixels) of the
    original image (0) and of each crop (1, 2, ...), at their own resolution as the release keeps them."""

    def __init__(self, question: str, options: str | None, image: str, size: tuple[int, int]):
        self.image = image
        full = (0.0, 0.0, float(size[0]), float(size[1]))
        self.regions: list[tuple[float, float, float, float]] = [full]
        first = ImageRef(image, full, first_image_size(*size))
        text = question if not options else f"{question}\n{options}"
        self.messages: list[dict] = [message("system", SYSTEM_PROMPT), message("user", _view(first, "lanczos"), text)]
        self.round = 0

    def _sizes(self) -> list[tuple[int, int]]:
        return [(int(r[2] - r[0]), int(r[3] - r[1])) for r in self.regions]

    def step(self, reply: str, finish_reason: str | None = None) -> Step:
        if finish_reason == "stop" and "<grounding>" in reply and not reply.endswith(STOP) and STOP not in reply:
            reply += STOP  # a server that drops the stop string (vLLM keeps it: include_stop_str_in_output)
        self.messages.append(message("assistant", reply))
        answer = answer_text(reply)
        if not GROUNDING.findall(reply):
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
        self.messages.append(message("user", before, _view(crop, "nearest", steps), after))
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
    name="mini_o3",
    protocol_version=PROTOCOL_VERSION,
    description="Mini-o3: <grounding> calls in relative coordinates on the image or an observation, its verl "
    "validation rollout (sampled: run --num_trials 32 for its Avg@32)",
    session=MiniO3Session,
    defaults=DEFAULTS,
    demo_reply=demo_reply,
)
