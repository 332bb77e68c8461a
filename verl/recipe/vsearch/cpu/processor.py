"""Qwen2.5-VL's processor without its video half, for machines without torchvision.

transformers 4.57's ``AutoProcessor`` builds Qwen2.5-VL's video processor, which needs torchvision;
the CPU stack has none (see the recipe README), so verl's ``hf_processor`` would return ``None``.
:class:`ImageOnlyQwen2_5_VLProcessor` is the real ``Qwen2_5_VLProcessor`` (same ``__call__``, chat
template and image-token expansion) with ``attributes = [image_processor, tokenizer]`` so that it is
built, saved (verl's checkpoints save it) and reloaded without a video processor. Its ``__name__`` is
``Qwen2_5_VLProcessor`` because verl's ``hf_processor`` dispatches on the class name to bind
``get_rope_index`` (mrope positions); ``__qualname__`` stays true, so pickling finds this class.
"""

from __future__ import annotations

import types
from typing import Any

from transformers import AutoConfig, AutoTokenizer, Qwen2_5_VLProcessor, Qwen2VLImageProcessor
from transformers.models.qwen2_5_vl import Qwen2_5_VLModel
from transformers.processing_utils import ProcessorMixin


class ImageOnlyQwen2_5_VLProcessor(Qwen2_5_VLProcessor):
    attributes = ["image_processor", "tokenizer"]

    def __init__(
        self, image_processor: Any = None, tokenizer: Any = None, chat_template: str | None = None, **kwargs: Any
    ) -> None:
        self.image_token = getattr(tokenizer, "image_token", "<|image_pad|>")
        self.video_token = getattr(tokenizer, "video_token", "<|video_pad|>")
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        self.video_processor = None
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)


ImageOnlyQwen2_5_VLProcessor.__name__ = "Qwen2_5_VLProcessor"


def image_only_processor(model_dir: str, tokenizer: Any = None) -> ImageOnlyQwen2_5_VLProcessor:
    """The processor of ``model_dir`` (a Qwen2.5-VL checkpoint) with ``config`` and ``get_rope_index``
    bound as verl's ``hf_processor`` binds them."""
    tok = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(model_dir)
    p = ImageOnlyQwen2_5_VLProcessor(
        Qwen2VLImageProcessor.from_pretrained(model_dir), tok, chat_template=tok.chat_template
    )
    p.config = AutoConfig.from_pretrained(model_dir)
    p.get_rope_index = types.MethodType(Qwen2_5_VLModel.get_rope_index, p)
    return p
