"""Record the training goldens of ``tests/recipe/test_training_goldens.py`` by running the authors' verl fork.

The fork's own files are extracted from a git repository holding its history (the authors'
``m-Just/InSight-doc``; the commit m-Just/InSight-o3 pins as its ``verl`` submodule is ``926d137``)
into a temporary directory and run **unchanged** on generated cases:

* ``verl/utils/vsearch.py`` and ``verl/utils/reward_score/vsearch_batch.py`` (with
  ``verl/utils/vsearch_role_play_prompt.py``): ``resize_bbox`` and ``compute_score_batch`` (format
  verdict, tool reward, IoU, pseudo-IoU, every ``reward_type`` x ``pseudo_iou_reward_type``);
* ``verl/tools/image_zoom_in_tool.py``: ``ImageZoomInTool._validate_bbox``, ``_maybe_resize_bbox`` and
  ``execute`` (their source, cut out with ``ast``; the class's ray pool is not built);
* ``verl/trainer/ppo/ray_trainer.py``: ``compute_advantage`` (GRPO and every
  ``subagent_advantage_estimator``), with ``compute_grpo_outcome_advantage`` of the fork's
  ``verl/trainer/ppo/core_algos.py`` (both cut out with ``ast``).

Stubbed, minimally: ``insight_o3.utils.api`` (the released repo's API client; the judge here is a
scripted function, see :func:`judge_says_correct`), ``DataProto`` (a dict of tensors and a dict of numpy
columns, the two attributes ``compute_advantage`` reads) and the tool's ``ToolResponse``. Real:
``qwen_vl_utils`` (``fetch_image``, ``smart_resize``, ``to_rgb``), torch, numpy, omegaconf, PIL.

Run with the training venv, which has ``qwen_vl_utils`` (``bash scripts/setup.sh`` builds it)::

    .venvs/train-cpu/bin/python tests/golden/record_training_goldens.py \
        --repo /path/to/InSight-doc.git --commit 926d137 --out tests/golden/training

Everything is seeded: re-running on the same commit writes the same files. No image is stored (the
cases hold sizes and boxes only).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import importlib
import json
import logging
import math
import random
import subprocess
import sys
import tempfile
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORK_FILES = {
    "verl/utils/vsearch.py": "verl/utils/vsearch.py",
    "verl/utils/vsearch_role_play_prompt.py": "verl/utils/vsearch_role_play_prompt.py",
    "verl/utils/reward_score/vsearch_batch.py": "verl/utils/reward_score/vsearch_batch.py",
}
TOOL_FILE = "verl/tools/image_zoom_in_tool.py"
SAMPLER_FILE = "verl/experimental/dataset/vsearch_sampler.py"
TRAINER_FILE = "verl/trainer/ppo/ray_trainer.py"
CORE_ALGOS_FILE = "verl/trainer/ppo/core_algos.py"

#: the fork's reward settings (recipe/vsearch/config/qwen_2_5_vl_7b_async.yaml, custom_reward_function.reward_kwargs)
FORK_REWARD_KWARGS: dict[str, Any] = {
    "judge_model": "gpt-5-nano",
    "num_workers": 32,
    "task_timeout": 60,
    "min_success_rate": 0.99,
    "max_retries": 10,
    "retry_interval": 30,
    "reward_weights": {"format": 0.2, "accuracy": 0.8, "iou": 0.8, "tool": 1.0},
    "format_reward": {"must_have_answer": True, "skip_last_response_if_empty": False},
    "iou_reward": {"iou_low": 0.25, "iou_high": 1.0},
    "tool_reward": {"max_consecutive_iou": 0.6},
}
REWARD_TYPES = ("conditioned_on_tool_reward", "basic_weighted_addition")
PSEUDO_IOU_TYPES = ("caller_feedback", "caller_feedback_no_outcome", "outcome_no_caller_feedback")
SUBAGENT_ESTIMATORS = (None, "broadcast", "broadcast_tool_only", "global_norm", "no_global_norm")

#: pixel budgets of the vSearcher's first image: the fork's data.max_pixels (1280*1280) and the paper's 4K tokens
MAX_PIXELS = (1280 * 1280, 4096 * 28 * 28)
MAX_TOOL_CALLS = 6  # actor_rollout_ref.rollout.multi_turn.max_user_turns of the fork
ASPECTS = [(1, 1), (4, 3), (3, 4), (16, 9), (9, 16), (3, 1), (1, 3), (21, 9), (2, 5), (8, 1), (1, 8)]

#: the fork's recipe YAML: its ``custom_chat_template`` renders every tool turn, ``max_user_turns`` is the
#: template's ``max_tool_calls`` (``data.apply_chat_template_kwargs``)
RECIPE_YAML = "recipe/vsearch/config/qwen_2_5_vl_7b_async.yaml"
#: what ``tokenizer.decode(..., skip_special_tokens=True)`` drops from a rendered turn (Qwen2.5-VL's special tokens)
SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")


# ----------------------------------------------------------------------------- loading the fork
def git_show(repo: str, commit: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", repo, "show", f"{commit}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def _function_source(source: str, name: str, cls: str | None = None) -> str:
    """The source of a top-level function (or a method of ``cls``), decorators removed, dedented."""
    tree = ast.parse(source)
    body = tree.body
    if cls is not None:
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    node = next(n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)
    lines = source.splitlines()
    return textwrap.dedent("\n".join(lines[node.lineno - 1 : node.end_lineno])) + "\n"


def _class_constant(source: str, cls: str, name: str) -> Any:
    tree = ast.parse(source)
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            return ast.literal_eval(stmt.value)
    raise KeyError(f"{cls}.{name}")


def judge_says_correct(model_answer: str | None, gt_answer: str) -> bool:
    """The scripted judge: correct iff the answer, stripped of spaces, brackets and a trailing dot, equals the
    ground truth case-insensitively (the fork calls it only when the answer is not literally the ground truth)."""
    if model_answer is None:
        return False
    norm = str(model_answer).strip().strip("().").strip().lower()
    return norm == gt_answer.strip().lower()


@dataclass
class Fork:
    vsearch: Any
    batch: Any
    tool_cls: Any
    compute_advantage: Any
    min_dimension: int
    sources: dict
    chat_template: str = ""
    max_tool_calls: int = MAX_TOOL_CALLS


def load_fork(repo: str, commit: str, workdir: Path) -> Fork:
    for src, dst in FORK_FILES.items():
        target = workdir / dst
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(git_show(repo, commit, src))
    for pkg in ("verl", "verl/utils", "verl/utils/reward_score"):
        (workdir / pkg / "__init__.py").write_text("")

    # stub: the released repo's API client (vsearch_batch imports it at module level); the judge is scripted
    api = types.ModuleType("insight_o3.utils.api")

    class _Client:
        async def close(self) -> None:
            return None

    async def query_api(query: str, *, model: str, client: Any, max_tokens: int) -> tuple[None, Any]:
        # the fork's qa_verify prompt ends with "GT Answer: {gt_answer}\nModel Answer: {model_answer}\n"
        gt = query.rsplit("GT Answer: ", 1)[1].split("\nModel Answer: ", 1)[0]
        ans = query.rsplit("Model Answer: ", 1)[1].rsplit("\n", 1)[0]
        text = "<correct>" if judge_says_correct(ans, gt) else "<wrong>"
        msg = types.SimpleNamespace(content=text)
        return None, types.SimpleNamespace(choices=[types.SimpleNamespace(message=msg)])

    api.create_async_openai_client = lambda *a, **k: _Client()  # type: ignore[attr-defined]
    api.query_api = query_api  # type: ignore[attr-defined]
    for name in ("insight_o3", "insight_o3.utils"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["insight_o3.utils.api"] = api

    for mod in [m for m in sys.modules if m == "verl" or m.startswith("verl.")]:
        del sys.modules[mod]
    sys.path.insert(0, str(workdir))
    vsearch = importlib.import_module("verl.utils.vsearch")
    batch = importlib.import_module("verl.utils.reward_score.vsearch_batch")
    batch.logger.setLevel(logging.ERROR)

    # the zoom-in tool's geometry and execute, cut out of ImageZoomInTool
    from math import ceil, floor
    from typing import Optional

    from qwen_vl_utils import smart_resize

    tool_src = git_show(repo, commit, TOOL_FILE)
    min_dim = _class_constant(tool_src, "ImageZoomInTool", "MIN_DIMENSION")

    @dataclass
    class ToolResponse:
        image: Any = None
        text: str | None = None

    ns: dict[str, Any] = {
        "logger": logging.getLogger("fork.image_zoom_in_tool"),
        "floor": floor,
        "ceil": ceil,
        "Optional": Optional,
        "Any": Any,
        "smart_resize": smart_resize,
        "ToolResponse": ToolResponse,
    }
    ns["logger"].setLevel(logging.CRITICAL)
    body = "".join(
        textwrap.indent(_function_source(tool_src, m, "ImageZoomInTool"), "    ")
        for m in ("_validate_bbox", "_maybe_resize_bbox", "execute")
    )
    exec(f"class ZoomTool:\n    MIN_DIMENSION = {min_dim!r}\n{body}", ns)  # noqa: S102 - the fork's own code

    # compute_advantage of the trainer with the fork's GRPO
    from collections import defaultdict

    import numpy as np
    import torch

    core_src = git_show(repo, commit, CORE_ALGOS_FILE)
    trainer_src = git_show(repo, commit, TRAINER_FILE)
    adv_ns: dict[str, Any] = {
        "np": np,
        "torch": torch,
        "defaultdict": defaultdict,
        "Optional": Optional,
        "AlgoConfig": Any,
        "DataProto": Any,
    }
    exec(_function_source(core_src, "compute_grpo_outcome_advantage"), adv_ns)  # noqa: S102
    from enum import Enum

    class AdvantageEstimator(str, Enum):
        GAE = "gae"
        GRPO = "grpo"

    adv_ns["AdvantageEstimator"] = AdvantageEstimator
    adv_ns["core_algos"] = types.SimpleNamespace(
        compute_grpo_outcome_advantage=adv_ns["compute_grpo_outcome_advantage"]
    )
    exec(_function_source(trainer_src, "compute_advantage"), adv_ns)  # noqa: S102
    import yaml

    recipe = yaml.safe_load(git_show(repo, commit, RECIPE_YAML))
    rollout = recipe["actor_rollout_ref"]["rollout"]
    return Fork(
        vsearch,
        batch,
        ns["ZoomTool"],
        adv_ns["compute_advantage"],
        min_dim,
        {"tool": tool_src, "trainer": trainer_src},
        recipe["actor_rollout_ref"]["model"]["custom_chat_template"],
        int(rollout["multi_turn"]["max_user_turns"]),
    )


# ----------------------------------------------------------------------------- case generation
def frame_of(rng: random.Random) -> dict:
    """An original image size of a random aspect ratio and scale, a pixel budget, and the model frame the
    fork's dataset makes of it (``process_image`` -> ``qwen_vl_utils.fetch_image``: ``smart_resize``)."""
    from qwen_vl_utils import smart_resize

    aw, ah = rng.choice(ASPECTS)
    long_side = rng.randint(400, 5200)
    if aw >= ah:
        w, h = long_side, max(40, round(long_side * ah / aw))
    else:
        w, h = max(40, round(long_side * aw / ah)), long_side
    mp = rng.choice(MAX_PIXELS)
    ph, pw = smart_resize(h, w, max_pixels=mp)
    return {"image_ori_wh": [w, h], "max_pixels": mp, "image_processed_wh": [pw, ph]}


def rand_box(rng: random.Random, w: int, h: int, min_side: int = 1, max_frac: float = 0.6) -> list[int]:
    bw = rng.randint(min(min_side, w - 1), max(min_side, int(w * max_frac)))
    bh = rng.randint(min(min_side, h - 1), max(min_side, int(h * max_frac)))
    bw, bh = min(bw, w - 1), min(bh, h - 1)
    x1, y1 = rng.randint(0, w - bw - 1), rng.randint(0, h - bh - 1)
    return [x1, y1, x1 + bw, y1 + bh]


def think(rng: random.Random) -> str:
    return (
        "<think>"
        + rng.choice(["Look at the top.", "The sign is small.", "Zoom into the left part first."])
        + "</think>"
    )


def tool_text(box: Any, name: str = "image_zoom_in_tool", label: str | None = "target") -> str:
    args: dict[str, Any] = {"bbox_2d": box}
    if label is not None:
        args["label"] = label
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def answer_text(box: Any) -> str:
    return "<answer>" + (json.dumps(box) if not isinstance(box, str) else box) + "</answer>"


def to_frame(box: list[int], frame: dict) -> list[int]:
    (w, h), (pw, ph) = frame["image_ori_wh"], frame["image_processed_wh"]
    return [round(box[0] * pw / w), round(box[1] * ph / h), round(box[2] * pw / w), round(box[3] * ph / h)]


def near(rng: random.Random, box: list[int], frame: dict, jitter: int) -> list[int]:
    pw, ph = frame["image_processed_wh"]
    b = [v + rng.randint(-jitter, jitter) for v in box]
    b = [max(0, min(pw - 1, b[0])), max(0, min(ph - 1, b[1])), max(0, min(pw, b[2])), max(0, min(ph, b[3]))]
    if b[2] <= b[0]:
        b[2] = min(pw, b[0] + 2)
    if b[3] <= b[1]:
        b[3] = min(ph, b[1] + 2)
    return b


def good_episode(rng: random.Random, frame: dict, gts: list[list[int]]) -> list[dict]:
    """A well-formed episode: 0..3 crops (random, around the target, tiny, thin, the whole frame or repeated),
    then an answer (near the target, random, the whole frame, or not found)."""
    pw, ph = frame["image_processed_wh"]
    target = to_frame(gts[0], frame)
    turns = []
    prev: list[int] | None = None
    for _ in range(rng.choice([0, 1, 1, 2, 2, 3])):
        kind = rng.choice(["random", "target", "target", "tiny", "whole", "repeat", "thin", "wide"])
        if kind == "random":
            box = rand_box(rng, pw, ph, 30)
        elif kind == "target":
            box = near(rng, target, frame, rng.choice([3, 20, 80]))
        elif kind == "tiny":
            x, y = rng.randint(0, pw - 10), rng.randint(0, ph - 10)
            box = [x, y, x + rng.randint(1, 9), y + rng.randint(1, 9)]
        elif kind == "whole":
            box = [rng.randint(0, 3), rng.randint(0, 3), pw - rng.randint(0, 3), ph - rng.randint(0, 3)]
        elif kind == "repeat" and prev is not None:
            box = near(rng, prev, frame, 2)
        elif kind == "thin":
            x = rng.randint(0, pw - 3)
            box = [x, 0, x + rng.randint(1, 2), ph]
        else:
            y = rng.randint(0, ph - 40)
            box = [0, y, pw, y + rng.randint(2, 30)]
        prev = box
        turns.append({"text": think(rng) + "\n" + tool_text(box, label=rng.choice(["target", None])), "finish": "stop"})
    kind = rng.choice(["near", "near", "near", "exact", "random", "whole", "not_found", "outside_part"])
    if kind == "near":
        ans: Any = near(rng, target, frame, rng.choice([1, 5, 30, 120]))
    elif kind == "exact":
        ans = target
    elif kind == "random":
        ans = rand_box(rng, pw, ph, 5)
    elif kind == "whole":
        ans = [0, 0, pw, ph]
    elif kind == "not_found":
        ans = [0, 0, 0, 0]
    else:  # reaches past the frame (the fork's parse_bbox allows it; the IoU clamps)
        ans = [target[0], target[1], pw + rng.randint(1, 50), ph + rng.randint(1, 50)]
    turns.append({"text": think(rng) + "\n" + answer_text(ans), "finish": "stop"})
    return turns


def malformed_episodes(rng: random.Random, frame: dict, gts: list[list[int]]) -> list[tuple[str, list[dict]]]:
    """Hand-made episodes, each breaking (or probing) one rule; (rule, turns)."""
    pw, ph = frame["image_processed_wh"]
    target = to_frame(gts[0], frame)
    ans = near(rng, target, frame, 4)
    crop = near(rng, target, frame, 60)
    T = think(rng)
    t_ok = {"text": T + "\n" + tool_text(crop), "finish": "stop"}
    a_ok = {"text": T + "\n" + answer_text(ans), "finish": "stop"}

    def one(text: str, finish: str = "stop") -> dict:
        return {"text": text, "finish": finish}

    fx1 = crop[0] + 0.5
    out = [
        ("text_before_think", [one("Sure. " + T + "\n" + tool_text(crop)), a_ok]),
        ("text_between_tags", [t_ok, one(T + "\nSo the box is:\n" + answer_text(ans))]),
        ("text_after_answer", [t_ok, one(T + "\n" + answer_text(ans) + "\nDone.")]),
        ("text_after_tool_call", [one(T + "\n" + tool_text(crop) + " let me see"), a_ok]),
        ("text_inside_answer", [t_ok, one(T + "\n<answer>The box is " + json.dumps(ans) + "</answer>")]),
        ("two_answers", [t_ok, one(T + "\n" + answer_text(ans) + "\n" + answer_text(ans))]),
        ("two_tool_calls", [one(T + "\n" + tool_text(crop) + "\n" + tool_text(crop)), a_ok]),
        ("tool_call_and_answer", [one(T + "\n" + tool_text(crop) + "\n" + answer_text(ans))]),
        ("answer_then_tool_call", [one(T + "\n" + answer_text(ans) + "\n" + tool_text(crop))]),
        ("two_thinks", [one(T + T + "\n" + tool_text(crop)), a_ok]),
        ("no_think_tool", [one(tool_text(crop)), a_ok]),
        ("no_think_answer", [t_ok, one(answer_text(ans))]),
        ("float_tool_box", [one(T + "\n" + tool_text([fx1, crop[1], crop[2], crop[3]])), a_ok]),
        ("float_answer_box", [t_ok, one(T + "\n" + answer_text([ans[0] + 0.5, ans[1], ans[2], ans[3]]))]),
        ("integral_float_answer_box", [t_ok, one(T + "\n" + answer_text([float(v) for v in ans]))]),
        ("negative_tool_box", [one(T + "\n" + tool_text([-5, crop[1], crop[2], crop[3]])), a_ok]),
        ("negative_answer_box", [t_ok, one(T + "\n" + answer_text([-3, ans[1], ans[2], ans[3]]))]),
        ("inverted_tool_box", [one(T + "\n" + tool_text([crop[2], crop[1], crop[0], crop[3]])), a_ok]),
        ("inverted_answer_box", [t_ok, one(T + "\n" + answer_text([ans[0], ans[3], ans[2], ans[1]]))]),
        ("empty_tool_box", [one(T + "\n" + tool_text([crop[0], crop[1], crop[0], crop[3]])), a_ok]),
        ("empty_answer_box", [t_ok, one(T + "\n" + answer_text([ans[0], ans[1], ans[2], ans[1]]))]),
        ("tool_box_outside_frame", [one(T + "\n" + tool_text([pw + 5, 0, pw + 50, 40])), a_ok]),
        ("tool_box_past_frame", [one(T + "\n" + tool_text([crop[0], crop[1], pw + 30, ph + 30])), a_ok]),
        ("answer_box_outside_frame", [t_ok, one(T + "\n" + answer_text([pw + 5, ph + 5, pw + 60, ph + 60]))]),
        ("five_numbers_answer", [t_ok, one(T + "\n" + answer_text(ans + [3]))]),
        ("three_numbers_tool", [one(T + "\n" + tool_text(crop[:3])), a_ok]),
        ("answer_not_json", [t_ok, one(T + "\n<answer>" + ", ".join(str(v) for v in ans) + "</answer>")]),
        ("answer_not_found", [t_ok, one(T + "\n" + answer_text([0, 0, 0, 0]))]),
        ("answer_not_found_floats", [t_ok, one(T + "\n" + answer_text([0.0, 0.0, 0.0, 0.0]))]),
        ("answer_not_found_no_crop", [one(T + "\n" + answer_text([0, 0, 0, 0]))]),
        ("answer_spaced_json", [t_ok, one(T + "\n<answer>\n  [ " + " , ".join(str(v) for v in ans) + " ]\n</answer>")]),
        ("unknown_tool", [one(T + "\n" + tool_text(crop, name="image_crop_tool")), a_ok]),
        (
            "tool_bbox_key",
            [
                one(
                    T
                    + '\n<tool_call>\n{"name": "image_zoom_in_tool", "arguments": {"bbox": '
                    + json.dumps(crop)
                    + "}}\n</tool_call>"
                ),
                a_ok,
            ],
        ),
        (
            "tool_arguments_string",
            [
                one(
                    T
                    + '\n<tool_call>\n{"name": "image_zoom_in_tool", "arguments": '
                    + json.dumps(json.dumps({"bbox_2d": crop}))
                    + "}\n</tool_call>"
                ),
                a_ok,
            ],
        ),
        (
            "tool_call_bad_json",
            [
                one(
                    T
                    + '\n<tool_call>\n{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [1, 2, 3, 4]}\n</tool_call>'
                ),
                a_ok,
            ],
        ),
        (
            "tool_call_text_around_json",
            [
                one(
                    T
                    + "\n<tool_call>\ncall "
                    + json.dumps({"name": "image_zoom_in_tool", "arguments": {"bbox_2d": crop}})
                    + "\n</tool_call>"
                ),
                a_ok,
            ],
        ),
        ("tool_call_not_object", [one(T + "\n<tool_call>\n" + json.dumps(crop) + "\n</tool_call>"), a_ok]),
        ("empty_last_turn", [t_ok, one("")]),
        ("whitespace_last_turn", [t_ok, one("  \n")]),
        ("empty_only_turn", [one("")]),
        ("truncated_turn", [t_ok, one(T + "\n<answer>[" + str(ans[0]) + ", " + str(ans[1]), "length")]),
        ("truncated_think", [one("<think>I need to look at the upper", "length")]),
        ("truncated_after_crops", [t_ok, t_ok, one("<think>The second crop shows", "length")]),
        ("ends_with_tool_call", [t_ok, t_ok]),
        ("user_newline_in_think", [one("<think>The user\nwants the sign.</think>\n" + tool_text(crop)), a_ok]),
        ("assistant_newline_in_think", [t_ok, one("<think>As the assistant\nI answer.</think>\n" + answer_text(ans))]),
        ("answer_tag_in_think", [t_ok, one("<think>I will write <answer> at the end</think>\n" + answer_text(ans))]),
        ("tool_call_tag_in_think", [one("<think>use <tool_call> now</think>\n" + tool_text(crop)), a_ok]),
        (
            "whitespace_around_tags",
            [one("\n  " + T + "  \n\n " + tool_text(crop) + " \n"), one("\n" + T + "\n\n" + answer_text(ans) + "\n\n")],
        ),
        ("crop_limit_reached", [t_ok] * MAX_TOOL_CALLS + [a_ok]),
        # the fork's loop stops after max_assistant_turns = 7: a 7th crop request is the episode's last turn
        ("crop_after_limit", [t_ok] * (MAX_TOOL_CALLS + 1)),
        ("repeated_crop", [t_ok, t_ok, a_ok]),
        ("first_crop_whole_frame", [one(T + "\n" + tool_text([0, 0, pw, ph])), a_ok]),
        ("tiny_tool_box", [one(T + "\n" + tool_text([crop[0], crop[1], crop[0] + 3, crop[1] + 2])), a_ok]),
        ("thin_tool_box_aspect", [one(T + "\n" + tool_text([crop[0], 0, crop[0] + 1, ph])), a_ok]),
        ("one_px_tool_box", [one(T + "\n" + tool_text([crop[0], crop[1], crop[0] + 1, crop[1] + 1])), a_ok]),
        (
            "bool_in_answer_box",
            [t_ok, one(T + "\n<answer>[true, " + ", ".join(str(v) for v in ans[1:]) + "]</answer>")],
        ),
        ("answer_no_crop", [a_ok]),
    ]
    return out


def render_fork_template(template: str, messages: list[dict], add_generation_prompt: bool, **kwargs: Any) -> str:
    """The fork's chat template rendered as ``tokenizer.apply_chat_template(..., tokenize=False)`` renders it
    (transformers' sandboxed jinja environment with ``trim_blocks`` / ``lstrip_blocks``)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt, **kwargs)


def fork_tool_turn(fork: Fork, outcome: str | None) -> str:
    """One tool turn as the fork's loop adds it (``ToolAgentLoop._handle_processing_tools_state``,
    ``tool_agent_loop.py:329-349``): the chat template applied to **this turn's messages only** (``add_messages``,
    a crop as ``[{"type": "image"}, {"type": "text", ...}]``, a tool error as its text), with
    ``add_generation_prompt`` and ``max_tool_calls`` (``data.apply_chat_template_kwargs``), the system prompt
    (the template on ``[{}]``, ``cls.system_prompt``) cut off, decoded with the special tokens skipped. The
    template's image count therefore restarts at every turn."""
    if outcome is None:
        content: Any = [{"type": "image"}, {"type": "text", "text": "Zoomed in on the image to the region [...]."}]
    else:
        content = outcome
    kwargs = {"max_tool_calls": fork.max_tool_calls}
    system = render_fork_template(fork.chat_template, [{}], False, **kwargs)
    text = render_fork_template(fork.chat_template, [{"role": "tool", "content": content}], True, **kwargs)
    if not text.startswith(system):
        raise AssertionError(f"the tool turn does not start with the system prompt: {text[:200]!r}")
    text = text[len(system) :]
    for tok in SPECIAL_TOKENS:
        text = text.replace(tok, "")
    return text


def fork_solution_str(fork: Fork, turns: list[dict], tool_outcomes: list[str | None]) -> str:
    """The decoded response the fork's reward sees (``tokenizer.decode(response_ids, skip_special_tokens=True)``):
    each assistant turn, the ``\\n`` the loop adds after ``<|im_end|>``, then the tool turn rendered on its own
    (:func:`fork_tool_turn`). A successful crop renders as an empty ``<tool_response></tool_response>`` (the
    template shows only the image of a list content), a tool error as its text."""
    out = ""
    for i, turn in enumerate(turns):
        out += turn["text"]
        if i + 1 == len(turns):
            break
        out += "\n" if turn["finish"] == "stop" else ""
        out += fork_tool_turn(fork, tool_outcomes[i])
    return out


# ----------------------------------------------------------------------------- running the fork
class ToolRunner:
    """The fork's zoom-in tool on an image of a given original size (qwen ``fetch_image`` as ``create`` does)."""

    def __init__(self, fork: Fork):
        self.fork = fork
        self._fetched: dict[tuple[int, int], Any] = {}

    def fetched(self, wh: tuple[int, int]) -> Any:
        from PIL import Image
        from qwen_vl_utils import fetch_image

        if wh not in self._fetched:
            self._fetched.clear()  # one image at a time: originals are large
            self._fetched[wh] = fetch_image({"image": Image.new("RGB", wh)})
        return self._fetched[wh]

    def tool(self, frame: dict) -> Any:
        """A fresh fork tool holding instance ``"i"``: the frame's image as ``create`` would store it."""
        tool = self.fork.tool_cls()
        tool._instance_dict = {
            "i": {
                "image": self.fetched(tuple(frame["image_ori_wh"])),
                "resized_image_size": tuple(frame["image_processed_wh"]),
                "max_pixels": frame["max_pixels"],
            }
        }
        return tool

    def call(self, frame: dict, arguments: Any) -> dict:
        """``execute`` with the call's arguments as the loop passes them (exceptions propagate to the caller)."""
        tool = self.tool(frame)
        resp, _reward, info = asyncio.run(tool.execute("i", arguments))
        return {"success": bool(info["success"]), "text": resp.text}

    def run(self, frame: dict, bbox_2d: Any, label: str = "") -> dict:
        tool = self.tool(frame)
        img = tool._instance_dict["i"]["image"]
        params: dict[str, Any] = {"bbox_2d": bbox_2d}
        if label:
            params["label"] = label
        resp, reward, info = asyncio.run(tool.execute("i", params))
        resized = (
            tool._maybe_resize_bbox(
                list(bbox_2d),
                image_width=img.size[0],
                image_height=img.size[1],
                resized_image_width=frame["image_processed_wh"][0],
                resized_image_height=frame["image_processed_wh"][1],
            )
            if isinstance(bbox_2d, list) and len(bbox_2d) == 4
            else None
        )
        crop_size = None
        if resized is not None:
            crop_size = list(img.crop(resized).size)
        return {
            "tool_image_wh": list(img.size),
            "box_in_tool_image": [float(v) for v in resized] if resized is not None else None,
            "crop_wh": crop_size,
            "success": bool(info["success"]),
            "text": resp.text,
            "reward": reward,
            "shown_wh": list(resp.image[0].size) if resp.image else None,
        }


def tool_call_of(text: str) -> dict | None:
    """The tool call verl's hermes parser finds in a turn (``<tool_call>(.*?)</tool_call>``, JSON with
    ``name`` and ``arguments``), or None: what makes the fork's loop run the tool."""
    import re

    for body in re.findall(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL):
        try:
            call = json.loads(body)
        except json.JSONDecodeError:
            continue
        if isinstance(call, dict) and "name" in call and "arguments" in call:
            return call
    return None


def tool_message(tools: ToolRunner, frame: dict, call: dict) -> str | None:
    """The tool message after a parsed call, as the fork's ``ToolAgentLoop._call_tool`` makes it: None for a crop
    shown, else the text (the tool's own error text, or ``Error when executing tool: <exception>`` for an unknown
    tool or arguments the tool cannot read)."""
    try:
        if call["name"] != "image_zoom_in_tool":
            raise KeyError(call["name"])  # self.tools[tool_name]
        r = tools.call(frame, call["arguments"])
    except Exception as e:  # noqa: BLE001 - as _call_tool does
        return f"Error when executing tool: {e}"
    return None if r["success"] else r["text"]


def fork_episode(tools: ToolRunner, frame: dict, turns: list[dict]) -> tuple[list[dict], list[str | None]]:
    """The turns the fork's loop plays and, per turn but the last, its tool message. The loop stops after a turn
    in which verl's hermes parser finds no tool call, and after the 7th assistant turn (``max_assistant_turns``) or
    the 6th tool message (``max_user_turns``); a turn cut by the budget ends the episode."""
    played: list[dict] = []
    outcomes: list[str | None] = []
    for turn in turns:
        played.append(turn)
        call = tool_call_of(turn["text"])
        if call is None or turn["finish"] != "stop" or len(played) >= MAX_TOOL_CALLS + 1:
            break
        if len(played) == len(turns):  # the case ends on a tool call: the response budget ran out after it
            break
        outcomes.append(tool_message(tools, frame, call))
    return played, outcomes


def score_batch(fork: Fork, rows: list[dict], reward_type: str, pseudo: str) -> list[dict]:
    kwargs = json.loads(json.dumps(FORK_REWARD_KWARGS))
    kwargs["reward_type"] = reward_type
    kwargs["iou_reward"]["pseudo_iou_reward_type"] = pseudo
    out = fork.batch.compute_score_batch(
        [r["data_source"] for r in rows],
        [r["solution_str"] for r in rows],
        [r["ground_truth"] for r in rows],
        [json.loads(json.dumps(r["extra_info"])) for r in rows],
        **kwargs,
    )
    return [jsonable(d) for d in out]


def jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    return v


# ----------------------------------------------------------------------------- the golden sets
def record_resize(fork: Fork, rng: random.Random) -> list[dict]:
    cases = []
    for i in range(100):
        frame = frame_of(rng)
        (w, h), (pw, ph) = frame["image_ori_wh"], frame["image_processed_wh"]
        if i % 5 == 0:  # 1-2 px boxes: rounding may collapse them
            x, y = rng.randint(0, pw - 3), rng.randint(0, ph - 3)
            box = [x, y, x + rng.randint(1, 2), y + rng.randint(1, 2)]
        elif i % 5 == 1:  # touching the frame's edges
            box = [0, rng.randint(0, ph // 2), pw, ph]
        else:
            box = rand_box(rng, pw, ph, 1)
        try:
            got: Any = list(fork.vsearch.resize_bbox(tuple(box), (pw, ph), (w, h)))
            err = None
        except ValueError as e:
            got, err = None, str(e)
        cases.append({"id": f"resize-{i:03d}", **frame, "box": box, "fork": {"box": got, "error": err}})
    # half-way values (v * W / w = n + 1/2 exactly): Python's round() goes to the even integer
    j = 0
    while j < 8:
        frame = frame_of(rng)
        (w, h), (pw, ph) = frame["image_ori_wh"], frame["image_processed_wh"]
        xs = [v for v in range(pw) if (2 * v * w) % (2 * pw) == pw]
        ys = [v for v in range(ph) if (2 * v * h) % (2 * ph) == ph]
        if len(xs) < 2 or len(ys) < 2:
            continue
        box = [xs[0], ys[0], xs[-1], ys[-1]]
        try:
            got, err = list(fork.vsearch.resize_bbox(tuple(box), (pw, ph), (w, h))), None
        except ValueError as e:
            got, err = None, str(e)
        cases.append({"id": f"resize-half-{j}", **frame, "box": box, "fork": {"box": got, "error": err}})
        j += 1
    return cases


def record_tool(fork: Fork, tools: ToolRunner, rng: random.Random) -> list[dict]:
    cases = []
    for i in range(70):
        frame = frame_of(rng)
        if i % 2 == 0:  # originals in multiples of 28 under qwen's default budget: fetch_image keeps their size
            w, h = frame["image_ori_wh"]
            scale = min(1.0, math.sqrt(12_000_000 / (w * h)))
            w, h = max(56, int(w * scale) // 28 * 28), max(56, int(h * scale) // 28 * 28)
            from qwen_vl_utils import smart_resize

            ph, pw = smart_resize(h, w, max_pixels=frame["max_pixels"])
            frame = {"image_ori_wh": [w, h], "max_pixels": frame["max_pixels"], "image_processed_wh": [pw, ph]}
        pw, ph = frame["image_processed_wh"]
        kind = ["normal", "tiny", "thin", "past_edge", "outside", "float", "inverted", "one_px", "edge_tiny", "whole"][
            i % 10
        ]
        if kind == "normal":
            box: list = rand_box(rng, pw, ph, 30)
        elif kind == "tiny":
            x, y = rng.randint(0, pw - 12), rng.randint(0, ph - 12)
            box = [x, y, x + rng.randint(2, 11), y + rng.randint(2, 11)]
        elif kind == "thin":
            x = rng.randint(0, pw - 3)
            box = [x, rng.randint(0, 5), x + 1, ph - rng.randint(0, 5)]
        elif kind == "past_edge":
            b = rand_box(rng, pw, ph, 30)
            box = [b[0], b[1], pw + rng.randint(1, 40), ph + rng.randint(1, 40)]
        elif kind == "outside":
            box = [pw + 1, 0, pw + 60, 60]
        elif kind == "float":
            b = rand_box(rng, pw, ph, 30)
            box = [b[0] + 0.4, b[1] + 0.6, b[2] - 0.3, b[3] + 0.2]
        elif kind == "inverted":
            b = rand_box(rng, pw, ph, 30)
            box = [b[2], b[1], b[0], b[3]]
        elif kind == "one_px":
            x, y = rng.randint(0, pw - 2), rng.randint(0, ph - 2)
            box = [x, y, x + 1, y + 1]
        elif kind == "edge_tiny":
            box = [pw - 5, ph - 4, pw, ph]
        else:
            box = [0, 0, pw, ph]
        cases.append(
            {"id": f"tool-{i:03d}-{kind}", "kind": kind, **frame, "bbox_2d": box, "fork": tools.run(frame, box)}
        )
    return cases


def gt_boxes(rng: random.Random, frame: dict) -> list[list[int]]:
    w, h = frame["image_ori_wh"]
    return [rand_box(rng, w, h, 8, 0.3) for _ in range(rng.choice([1, 1, 1, 2]))]


def record_rewards(fork: Fork, tools: ToolRunner, rng: random.Random) -> tuple[list[dict], list[dict]]:
    """Out-of-loop vSearcher episodes (root rows with ground truth), in-loop episodes (vReasoner root rows, each
    with 1-3 vSearcher sub-agent rows), scored by ``compute_score_batch`` under every reward type and pseudo-IoU
    type. Returns (episode cases, vreasoner cases)."""
    episodes: list[dict] = []
    for i in range(160):
        frame = frame_of(rng)
        gts = gt_boxes(rng, frame)
        episodes.append(
            {
                "id": f"ep-good-{i:03d}",
                "rule": "random",
                "frame": frame,
                "gt": gts,
                "turns": good_episode(rng, frame, gts),
            }
        )
    k = 0
    n_rules = len(malformed_episodes(random.Random(0), frame_of(random.Random(0)), [[0, 0, 10, 10]]))
    for _round in range(2):
        for r in range(n_rules):  # each hand-made episode on a frame of its own
            frame = frame_of(rng)
            gts = gt_boxes(rng, frame)
            rule, turns = malformed_episodes(rng, frame, gts)[r]
            episodes.append({"id": f"ep-{rule}-{k:03d}", "rule": rule, "frame": frame, "gt": gts, "turns": turns})
            k += 1

    rows: list[dict] = []
    for ep in episodes:
        ep["turns"], ep["tool_outcomes"] = fork_episode(tools, ep["frame"], ep["turns"])
        ep["solution_str"] = fork_solution_str(fork, ep["turns"], ep["tool_outcomes"])

    # a row per episode: two in three out-of-loop, the others sub-agent calls of vReasoner episodes
    vreasoner_cases = vreasoner_texts()
    for j, ep in enumerate(episodes):
        info = {
            "agent_name": "vsearcher",
            "image_ori_wh": [ep["frame"]["image_ori_wh"]],
            "image_processed_wh": [ep["frame"]["image_processed_wh"]],
        }
        if j % 3 != 2:
            ep["role"] = "outloop"
            info.update(
                {
                    "job_id": f"job-{ep['id']}",
                    "parent_job_id": None,
                    "root_job_id": f"job-{ep['id']}",
                    "bboxes": ep["gt"],
                }
            )
        else:
            ep["role"] = "inloop"
        ep["extra_info"] = info
    inloop = [ep for ep in episodes if ep["role"] == "inloop"]
    # group in-loop calls into vReasoner episodes of 1-3 calls
    roots: list[dict] = []
    pos = 0
    while pos < len(inloop):
        n = rng.choice([1, 2, 3])
        vr = vreasoner_cases[len(roots) % len(vreasoner_cases)]
        root_id = f"job-vr-{len(roots):03d}"
        roots.append({"job_id": root_id, "vr": vr})
        for call in inloop[pos : pos + n]:
            call["extra_info"].update(
                {
                    "job_id": f"job-{call['id']}",
                    "parent_job_id": root_id,
                    "root_job_id": root_id,
                    "caller_feedback": rng.choice(["helpful", "helpful", "unhelpful", None]),
                }
            )
            call["root"] = root_id
        pos += n
    for ep in episodes:
        rows.append(
            {
                "data_source": "vsearch_golden",
                "solution_str": ep["solution_str"],
                "ground_truth": "",
                "extra_info": ep["extra_info"],
            }
        )
    for r in roots:
        rows.append(
            {
                "data_source": "vsearch_golden",
                "solution_str": r["vr"]["text"],
                "ground_truth": r["vr"]["ground_truth"],
                "extra_info": {
                    "agent_name": "vreasoner",
                    "job_id": r["job_id"],
                    "parent_job_id": None,
                    "root_job_id": r["job_id"],
                    "question": r["vr"]["question"],
                    "image_ori_wh": [[100, 100]],
                    "image_processed_wh": [[100, 100]],
                },
            }
        )
    results: dict[tuple[str, str], list[dict]] = {}
    for rt in REWARD_TYPES:
        for pt in PSEUDO_IOU_TYPES:
            results[(rt, pt)] = score_batch(fork, rows, rt, pt)
    # the same batch without any caller feedback (the fork then sets no pseudo IoU: vsearch_batch.py:695)
    unrated = [{**r, "extra_info": {**r["extra_info"], "caller_feedback": None}} for r in rows]
    unrated_results = {(rt, pt): score_batch(fork, unrated, rt, pt) for rt in REWARD_TYPES for pt in PSEUDO_IOU_TYPES}
    root_scores = {}
    for idx, r in enumerate(roots):
        d = results[(REWARD_TYPES[0], PSEUDO_IOU_TYPES[0])][len(episodes) + idx]
        root_scores[r["job_id"]] = d
        r["vr"]["fork_root"] = {
            "accuracy_reward": d["accuracy_reward"],
            "format_reward": d["format_reward"],
            "extracted_answer": d["extracted_answer"],
        }
    for j, ep in enumerate(episodes):
        ep["fork"] = {f"{rt}|{pt}": results[(rt, pt)][j] for rt in REWARD_TYPES for pt in PSEUDO_IOU_TYPES}
        if ep["role"] == "inloop":
            ep["root_accuracy"] = root_scores[ep["root"]]["accuracy_reward"]
            ep["caller_feedback"] = ep["extra_info"]["caller_feedback"]
            ep["fork_unrated_batch"] = {
                f"{rt}|{pt}": unrated_results[(rt, pt)][j] for rt in REWARD_TYPES for pt in PSEUDO_IOU_TYPES
            }
    vr_out: dict[str, dict] = {}
    for r in roots:  # one case per text (its first root row)
        vr_out.setdefault(r["vr"]["rule"], {"id": f"vr-{r['vr']['rule']}", **r["vr"]})
    return episodes, list(vr_out.values())


def vreasoner_texts() -> list[dict]:
    """vReasoner final texts probing the fork's answer extraction (first ``\\boxed{`` to the first ``}``, else
    the first ``<answer>``) and the judge's shortcut (an answer equal to the ground truth)."""
    q = "What is written on the sign?\nA. STOP\nB. EXIT\nC. OPEN"
    base = [
        ("boxed_letter", "<think>It reads EXIT.</think>\nThe answer is \\boxed{B}.", "B"),
        ("boxed_wrong", "<think>...</think>\\boxed{C}", "B"),
        ("boxed_paren", "\\boxed{(B)}", "B"),
        ("boxed_nested", "Final: \\boxed{\\text{B}}", "B"),
        ("two_boxed", "\\boxed{A} or maybe \\boxed{B}", "B"),
        ("answer_tag", "<think>x</think><answer> B </answer>", "B"),
        ("answer_and_boxed", "<answer>A</answer> \\boxed{B}", "B"),
        ("empty_boxed", "\\boxed{}", "B"),
        ("unclosed_boxed", "\\boxed{B", "B"),
        ("no_answer", "I cannot tell.", "B"),
        ("tool_call_only", "<tool_call> region_description={the sign} </tool_call>", "B"),
        ("open_answer", "\\boxed{42 km}", "42 km"),
        ("open_answer_judge", "\\boxed{42 km.}", "42 km"),
        ("unclosed_answer_tag", "<answer>B", "B"),
    ]
    return [{"rule": name, "text": text, "ground_truth": gt, "question": q} for name, text, gt in base]


def record_advantages(fork: Fork, rng: random.Random) -> list[dict]:
    """Batches laid out as the fork's trainer sees them (vReasoner roots, their vSearcher sub-agents with random
    uids, out-of-loop vSearcher roots in uid groups), through ``compute_advantage`` for every
    ``subagent_advantage_estimator`` and ``norm_adv_by_std_in_grpo``."""
    import numpy as np
    import torch
    from omegaconf import OmegaConf

    class Data:  # the two attributes compute_advantage reads of a DataProto
        def __init__(self, batch: dict, non_tensor_batch: dict):
            self.batch, self.non_tensor_batch = batch, non_tensor_batch

    T = 8
    cases = []
    for b in range(14):
        rows: list[dict] = []
        n_groups = rng.randint(1, 3)
        for g in range(n_groups):  # out-of-loop vSearcher groups
            for _ in range(rng.choice([1, 2, 4, 5])):
                jid = f"out-{b}-{len(rows)}"
                rows.append(
                    {
                        "agent_name": "vsearcher",
                        "uid": f"g{b}-{g}",
                        "job_id": jid,
                        "root_job_id": jid,
                        "tool_reward": rng.choice([0.0, 1.0]),
                    }
                )
        for g in range(rng.randint(0 if b % 4 == 0 else 1, 2)):  # in-loop: vReasoner rollouts of a question
            for _ in range(rng.choice([2, 4])):
                rid = f"vr-{b}-{len(rows)}"
                rows.append(
                    {
                        "agent_name": "vreasoner",
                        "uid": f"q{b}-{g}",
                        "job_id": rid,
                        "root_job_id": rid,
                        "tool_reward": None,
                    }
                )
                for k in range(rng.choice([0, 1, 2, 3])):
                    rows.append(
                        {
                            "agent_name": "vsearcher",
                            "uid": f"rand-{b}-{len(rows)}",
                            "job_id": f"{rid}-s{k}",
                            "root_job_id": rid,
                            "tool_reward": rng.choice([0.0, 1.0]),
                        }
                    )
        if b == 13:  # exactly one sub-agent in the batch
            rows = [r for r in rows if r["agent_name"] != "vsearcher" or r["job_id"] == r["root_job_id"]]
            rid = next((r["job_id"] for r in rows if r["agent_name"] == "vreasoner"), None)
            if rid is None:
                rows.append(
                    {
                        "agent_name": "vreasoner",
                        "uid": f"q{b}-x",
                        "job_id": "vr-x",
                        "root_job_id": "vr-x",
                        "tool_reward": None,
                    }
                )
                rid = "vr-x"
            rows.append(
                {
                    "agent_name": "vsearcher",
                    "uid": f"rand-{b}-one",
                    "job_id": f"{rid}-s0",
                    "root_job_id": rid,
                    "tool_reward": 1.0,
                }
            )
        for r in rows:
            r["length"] = rng.randint(1, T)
            if r["agent_name"] == "vreasoner":
                r["score"] = rng.choice([0.0, 1.0])
            else:
                r["score"] = rng.choice([0.0, 0.0, 0.2, 1.0, round(rng.uniform(0, 1), 6)])
        outputs = {}
        for est in SUBAGENT_ESTIMATORS:
            for by_std in (True, False):
                mask = torch.zeros(len(rows), T)
                scores = torch.zeros(len(rows), T)
                for i, r in enumerate(rows):
                    mask[i, : r["length"]] = 1
                    scores[i, r["length"] - 1] = r["score"]
                data = Data(
                    {
                        "token_level_rewards": scores.clone(),
                        "token_level_scores": scores.clone(),
                        "response_mask": mask,
                    },
                    {
                        k: np.array([r[k] for r in rows], dtype=object)
                        for k in ("uid", "job_id", "root_job_id", "tool_reward", "agent_name")
                    },
                )
                cfg = OmegaConf.create({"subagent_advantage_estimator": est})
                data = fork.compute_advantage(data, adv_estimator="grpo", norm_adv_by_std_in_grpo=by_std, config=cfg)
                outputs[f"{est}|{by_std}"] = [[float(v) for v in row] for row in data.batch["advantages"].tolist()]
        cases.append({"id": f"adv-{b:02d}", "T": T, "rows": rows, "fork": outputs})
    return cases


# ----------------------------------------------------------------------------- the sample stream
#: (sources: name -> rows, weights in the order train.sh lists them, batch size, data.seed or None): the released
#: mixture (0.5/0.5 at 24), uneven weights, a tie broken by name, a zero weight, rows interleaved
SAMPLER_CASES = [
    (
        {"info_vqa_region_localization": 60, "visual_cot_vstar_collage": 75},
        {"info_vqa_region_localization": 0.5, "visual_cot_vstar_collage": 0.5},
        24,
        None,
    ),
    ({"b_src": 40, "a_src": 33}, {"b_src": 0.5, "a_src": 0.5}, 7, None),
    ({"x": 50, "y": 31, "z": 17}, {"x": 0.6, "y": 0.3, "z": 0.1}, 10, 7),
    ({"x": 20, "y": 20}, {"x": 1.0, "y": 0.0}, 4, None),
]


def record_sampler_stream(repo: str, commit: str) -> list[dict]:
    """The fork's ``VSearchBatchSampler`` run unchanged on datasets of the cases' sources (rows interleaved), two
    epochs of batches each, with ``PYTHONHASHSEED=0`` (the sampler orders its sources by iterating a ``set``); the
    order it took is recorded with the stream."""
    out = subprocess.run(
        [sys.executable, __file__, "--repo", repo, "--commit", commit, "--sampler-only"],
        check=True,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PYTHONHASHSEED": "0"},
    ).stdout
    return json.loads(out)


def _sampler_cases(repo: str, commit: str) -> list[dict]:
    from omegaconf import OmegaConf

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pkg = root / "verl" / "experimental" / "dataset"
        pkg.mkdir(parents=True)
        for d in (root / "verl", root / "verl" / "experimental", pkg):
            (d / "__init__.py").write_text("")
        # verl 0.7 has no AbstractBatchSampler: the fork's base class adds nothing the sampler uses
        (pkg / "sampler.py").write_text("class AbstractBatchSampler:\n    pass\n")
        (pkg / "vsearch_sampler.py").write_text(git_show(repo, commit, SAMPLER_FILE))
        for mod in [m for m in sys.modules if m == "verl" or m.startswith("verl.")]:
            del sys.modules[mod]
        sys.path.insert(0, tmp)
        fork_sampler = importlib.import_module("verl.experimental.dataset.vsearch_sampler")
        fork_sampler.logger.setLevel(logging.ERROR)

        class Frame:
            def __init__(self, sources: list[str]):
                self.column_names, self._sources = ["data_source"], sources

            def __getitem__(self, key: str) -> list[str]:
                return list(self._sources)

        cases = []
        for k, (rows, weights, batch_size, seed) in enumerate(SAMPLER_CASES):
            sources = [name for i in range(max(rows.values())) for name in rows if i < rows[name]]
            data = types.SimpleNamespace(dataframe=Frame(sources))
            cfg = {"batch_sampler": {"weights": weights}} | ({"seed": seed} if seed is not None else {})
            sampler = fork_sampler.VSearchBatchSampler(batch_size, data, OmegaConf.create(cfg))
            epochs = [list(sampler), list(sampler)]
            cases.append(
                {
                    "id": f"sampler-{k}",
                    "sources": sources,
                    "weights": weights,
                    "batch_size": batch_size,
                    "seed": seed,
                    "fork_order": list(sampler.source_to_indices),
                    "fork_counts": dict(sampler.per_batch_counts),
                    "fork": {"epochs": epochs},
                }
            )
        return cases


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repo", required=True, help="git directory holding the fork's history (bare is fine)")
    ap.add_argument("--commit", default="926d137")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "training"))
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--sampler-only", action="store_true", help="print the sampler cases (run by the recorder)")
    args = ap.parse_args(argv)
    if args.sampler_only:
        print(json.dumps(_sampler_cases(args.repo, args.commit)))
        return 0
    full = subprocess.run(
        ["git", "-C", args.repo, "rev-parse", args.commit], check=True, capture_output=True, text=True
    ).stdout.strip()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        fork = load_fork(args.repo, full, Path(tmp))
        tools = ToolRunner(fork)
        rng = random.Random(args.seed)
        meta = {
            "recorded_from": {
                "commit": full,
                "files": [*FORK_FILES, TOOL_FILE, TRAINER_FILE, CORE_ALGOS_FILE, RECIPE_YAML, SAMPLER_FILE],
            },
            "recorder": "tests/golden/record_training_goldens.py",
            "seed": args.seed,
            "reward_kwargs": FORK_REWARD_KWARGS,
            "max_tool_calls": MAX_TOOL_CALLS,
            "min_dimension": fork.min_dimension,
        }
        resize = record_resize(fork, rng)
        tool = record_tool(fork, tools, rng)
        episodes, vreasoner = record_rewards(fork, tools, rng)
        adv = record_advantages(fork, rng)
    sampler = record_sampler_stream(args.repo, full)
    files = {
        "resize_bbox.json": resize,
        "zoom_tool.json": tool,
        "episodes.json": episodes,
        "vreasoner.json": vreasoner,
        "advantages.json": adv,
        "sampler.json": sampler,
    }
    for name, cases in files.items():
        (out / name).write_text(json.dumps({"meta": meta, "cases": cases}, indent=1, sort_keys=True) + "\n")
        print(f"{name}: {len(cases)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
