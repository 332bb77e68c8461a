"""verl dataset for the vsearch recipe: builds each row's prompt from :mod:`insight_o3.protocol.prompts`.

The parquet rows (``create_parquet_dataset.py``) carry the task, not the prompt wording:
``extra_info.description`` for ``agent_name=vsearcher`` rows and ``extra_info.question`` (+
``options``) for ``agent_name=vreasoner`` rows. :class:`VSearchDataset` renders them with the paper's
prompts at load time, so the wording lives in one place (``insight_o3.protocol.prompts``) for evaluation and
training and old parquet files never carry stale prompt text:

* ``vsearcher``: system = F.2 vSearcher prompt, user = [image, "Locate {description}. ..."]; the
  policy answers it directly (out-of-loop RL).
* ``vreasoner``: system = F.1 *training* vReasoner prompt (asks for ``<tool_feedback>``), user =
  [question + options, image]; this conversation goes to the API vReasoner and the policy only sees
  the vSearcher calls it issues (in-loop RL).

The agent loops find the image in the prompt's image part (``agent_loops.row_image_path``). The
dataset overrides :meth:`process_vision_info` with a PIL-only version
of ``qwen_vl_utils.process_vision_info`` for images (same ``smart_resize`` rule, from
``insight_o3.imaging.geometry``), so it runs on machines without torchvision.
"""

from __future__ import annotations

from typing import Any

from PIL import Image
from verl.utils.dataset.rl_dataset import RLHFDataset

from insight_o3.base.json_types import JSONObject
from insight_o3.imaging.geometry import QWEN_MIN_PIXELS, VSEARCHER_EVAL_MAX_PIXELS, smart_resize
from insight_o3.imaging.images import open_image
from insight_o3.protocol.prompts import (
    VREASONER_TRAIN_SYSTEM_PROMPT,
    VSEARCHER_FIRST_USER_PROMPT,
    VSEARCHER_SYSTEM_PROMPT,
    fill,
)
from insight_o3.protocol.questions import vreasoner_question

AGENT_NAMES = ("vsearcher", "vreasoner")


def image_path_from_uri(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


def _row_error(row: dict, index: int, msg: str) -> ValueError:
    return ValueError(f"vsearch dataset row {index} (data_source={row.get('data_source')!r}): {msg}")


def build_messages(row: dict, index: int = -1) -> tuple[list[JSONObject], str]:
    """``(raw_prompt, image_uri)`` for one parquet row (see module doc)."""
    agent = row.get("agent_name")
    if agent not in AGENT_NAMES:
        raise _row_error(row, index, f"agent_name must be one of {AGENT_NAMES}, got {agent!r}")
    images = row.get("images")
    if images is None or len(images) != 1 or not isinstance(images[0], dict) or not images[0].get("image"):
        raise _row_error(row, index, "images must be [{'image': 'file:///abs/path'}] (single-image rows only)")
    uri = str(images[0]["image"])
    info = row.get("extra_info") or {}
    image_part = {"type": "image", "image": uri}
    if agent == "vsearcher":
        desc = info.get("description")
        if not isinstance(desc, str) or not desc.strip():
            raise _row_error(row, index, "extra_info.description is missing (vsearcher rows)")
        text = fill(VSEARCHER_FIRST_USER_PROMPT, target=desc.strip())
        return [
            {"role": "system", "content": VSEARCHER_SYSTEM_PROMPT},
            {"role": "user", "content": [image_part, {"type": "text", "text": text}]},
        ], uri
    question = info.get("question")
    if not isinstance(question, str) or not question.strip():
        raise _row_error(row, index, "extra_info.question is missing (vreasoner rows)")
    options = info.get("options")
    text = vreasoner_question(question, options)
    return [
        {"role": "system", "content": VREASONER_TRAIN_SYSTEM_PROMPT},
        {"role": "user", "content": [{"type": "text", "text": text}, image_part]},
    ], uri


def vsearcher_prompt_text_tokens(tokenizer: Any, description: str) -> int:
    """Tokens of the vSearcher's first prompt (F.2 system prompt + the task) without the image's pad tokens:
    the chat template with one image part, minus its single ``<|image_pad|>``."""
    messages = [
        {"role": "system", "content": VSEARCHER_SYSTEM_PROMPT},
        {
            "role": "user",
            "content": [
                {"type": "image"},
                {"type": "text", "text": fill(VSEARCHER_FIRST_USER_PROMPT, target=description)},
            ],
        },
    ]
    return len(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)) - 1


class VSearchDataset(RLHFDataset):
    """RLHFDataset whose ``raw_prompt`` is rendered from the insight_o3 prompts (CPU-safe)."""

    def maybe_filter_out_long_prompts(self, dataframe: Any = None) -> Any:
        """The first vSearcher prompt of every out-of-loop row must fit ``data.max_prompt_length``: verl pads
        prompts to it and never truncates, so one longer prompt would fail a whole training step. The start-up
        check (``settings.RunSettings``) reserves ``PROMPT_TEXT_TOKENS`` of the prompt for text next to the
        largest image; here each row's text is held to that reservation, when the data is loaded. A row over it
        is an error naming the row, or is dropped (and counted) with ``data.filter_overlong_prompts=True``, as
        verl does. In-loop rows carry a question for the API vReasoner; their vSearcher prompts are built from
        its descriptions at run time and checked there (``policy_searcher.PromptTooLong``: a failed episode)."""
        from .settings import PROMPT_TEXT_TOKENS

        dataframe = self.dataframe if dataframe is None else dataframe
        if self.tokenizer is None:  # nothing to count with (verl always passes the policy's tokenizer)
            return dataframe
        cols = dataframe.select_columns(
            [c for c in ("agent_name", "extra_info", "data_source") if c in dataframe.column_names]
        )
        too_long = []
        for i, row in enumerate(cols):
            if row.get("agent_name") != "vsearcher":
                continue
            desc = (row.get("extra_info") or {}).get("description")
            if not isinstance(desc, str):
                continue  # build_messages reports the missing field when the row is read
            n = vsearcher_prompt_text_tokens(self.tokenizer, desc.strip())
            if n > PROMPT_TEXT_TOKENS:
                too_long.append((i, n, row.get("data_source")))
        if not too_long:
            return dataframe
        what = ", ".join(f"row {i} (data_source={ds!r}): {n} tokens" for i, n, ds in too_long[:5])
        if not self.filter_overlong_prompts:
            raise ValueError(
                f"vsearch dataset: {len(too_long)} vSearcher prompt(s) have more than the {PROMPT_TEXT_TOKENS} text "
                f"tokens the first prompt reserves next to the image: {what}. Shorten their extra_info.description, "
                "or set data.filter_overlong_prompts=True to drop them"
            )
        drop = {i for i, _, _ in too_long}
        print(f"[vsearch] dropped {len(drop)} row(s) whose vSearcher prompt is too long: {what}", flush=True)
        return dataframe.select([i for i in range(len(dataframe)) if i not in drop])

    def __getitem__(self, item: int) -> JSONObject:
        row: dict = self.dataframe[item]
        messages, _ = build_messages(row, item)
        row.pop(self.image_key, None)
        row.pop(self.video_key, None)
        row["raw_prompt"] = messages
        # verl's DataProto needs at least one tensor per batch (same placeholder as RLHFDataset)
        import torch

        row["dummy_tensor"] = torch.tensor([0], dtype=torch.uint8)
        info = row.get("extra_info") or {}
        row["extra_info"] = info
        row["index"] = info.get("index", item)
        return row

    @classmethod
    async def process_vision_info(
        cls, messages: list[dict], image_patch_size: int = 14, config: Any = None
    ) -> tuple[list[Image.Image], list]:
        """Images of ``messages`` resized as Qwen2.5-VL's processor expects (``smart_resize`` with
        factor ``2 * image_patch_size``; ``min_pixels``/``max_pixels`` per image part as in
        qwen_vl_utils, default max 16384 tokens). Videos are not part of this protocol."""
        images: list[Image.Image] = []
        factor = 2 * int(image_patch_size)
        for m in messages:
            content = m.get("content")
            if not isinstance(content, list):
                continue
            for part in content:
                if not isinstance(part, dict):
                    continue
                kind = part.get("type")
                if kind == "video" or "video" in part:
                    raise ValueError("the vsearch recipe supports image inputs only (got a video part)")
                if kind != "image" and "image" not in part:
                    continue
                src = part.get("image")
                img = src if isinstance(src, Image.Image) else open_image(image_path_from_uri(str(src)))
                img = img.convert("RGB")
                h, w = smart_resize(
                    img.height,
                    img.width,
                    factor=factor,
                    min_pixels=int(part.get("min_pixels", QWEN_MIN_PIXELS)),
                    max_pixels=int(part.get("max_pixels", VSEARCHER_EVAL_MAX_PIXELS)),
                )
                images.append(img.resize((w, h), Image.Resampling.BICUBIC) if (w, h) != img.size else img)
        return images, []
