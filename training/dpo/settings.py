"""The DPO trainer's settings: one frozen record, the release's values as defaults (torch-free, so the round driver
fixes them in its card without importing the training stack).

Defaults are ``scripts/insight-v/llava_dpo.sh`` of dongyh20/Insight-V @5e9c6f9 and the defaults of its
``llava/train/train_dpo.py`` (docs/fidelity.md rows IVP*): lr 5e-6, 2 epochs, cosine, warmup 0.05, 2 pairs per device
× 4 accumulation (× 8 GPUs in the release), weight decay 0, bf16, gradient checkpointing, 12,288 tokens, checkpoints
every 500 steps keeping 1, β 0.1, and the loss of LLaVA-NeXT's DPO trainer that the release runs: ``dpo_alpha`` (1.0)
× the sigmoid DPO loss + ``gamma`` (1.0) × the SFT loss on the chosen chain — in TRL, ``loss_type=["sigmoid", "sft"]``
with ``loss_weights=[dpo_weight, sft_weight]``. ``mm_tunable_parts="mm_mlp_adapter,mm_language_model"``: the
projector and the language model train, the vision tower is frozen — on Qwen2.5-VL the projector is the vision
tower's ``merger``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from typing import Any

from insight_o3.base.json_types import JSONObject

#: Qwen2.5-VL's image budget in the data engine's generation (``data_generation.py``: min 224², max 1280·28² pixels),
#: so the policy is trained on the image it generated from
MIN_PIXELS = 224 * 224
MAX_PIXELS = 1280 * 28 * 28


class SettingsError(ValueError):
    """A settings file or value that cannot be used (the message names the file and the field)."""


@dataclass(frozen=True, kw_only=True)
class DPOSettings:
    """Everything that changes what a DPO run learns (paths and the launcher are not here)."""

    learning_rate: float = 5e-6
    num_train_epochs: float = 2.0
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = 0.05
    per_device_train_batch_size: int = 2
    gradient_accumulation_steps: int = 4
    weight_decay: float = 0.0
    #: DPO's β (train_dpo.py's default; llava_dpo.sh sets none)
    beta: float = 0.1
    #: weight of the sigmoid DPO loss (the release's ``dpo_alpha``)
    dpo_weight: float = 1.0
    #: weight of the SFT loss on the chosen chain (the release's ``gamma``; 0 for plain DPO)
    sft_weight: float = 1.0
    #: tokens of prompt + chain (the release's ``model_max_length``); TRL keeps the start (the image tokens)
    max_length: int | None = 12288
    bf16: bool = True
    gradient_checkpointing: bool = True
    #: train the vision tower's blocks too (the release: no, ``mm_vision_tower`` is not among its tunable parts)
    train_vision_tower: bool = False
    min_pixels: int = MIN_PIXELS
    max_pixels: int = MAX_PIXELS
    save_steps: int = 500
    save_total_limit: int = 1
    logging_steps: int = 1
    seed: int = 42
    #: stop after this many optimizer steps (-1: the epochs decide); for smoke runs
    max_steps: int = -1

    def __post_init__(self) -> None:
        problems = []
        if self.learning_rate <= 0:
            problems.append(f"learning_rate must be positive, got {self.learning_rate}")
        if self.num_train_epochs <= 0 and self.max_steps <= 0:
            problems.append("num_train_epochs or max_steps must be positive")
        if not 0.0 <= self.warmup_ratio < 1.0:
            problems.append(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.per_device_train_batch_size < 1 or self.gradient_accumulation_steps < 1:
            problems.append("per_device_train_batch_size and gradient_accumulation_steps must be at least 1")
        if self.beta <= 0:
            problems.append(f"beta must be positive, got {self.beta}")
        if self.dpo_weight < 0 or self.sft_weight < 0 or self.dpo_weight + self.sft_weight == 0:
            problems.append("dpo_weight and sft_weight must not be negative, nor both 0")
        if self.max_length is not None and self.max_length < 1:
            problems.append(f"max_length must be positive or None, got {self.max_length}")
        if not 0 < self.min_pixels <= self.max_pixels:
            problems.append(f"need 0 < min_pixels <= max_pixels, got {self.min_pixels}, {self.max_pixels}")
        if self.save_steps < 1 or self.save_total_limit < 1 or self.logging_steps < 1:
            problems.append("save_steps, save_total_limit and logging_steps must be at least 1")
        if problems:
            raise SettingsError("; ".join(problems))

    def settings(self) -> JSONObject:
        """Every field, as JSON (what a round's card fixes)."""
        return dict(asdict(self))

    def loss(self) -> tuple[list[str], list[float]]:
        """TRL's ``loss_type`` and ``loss_weights`` for the release's ``dpo_alpha · DPO + gamma · SFT``."""
        types, weights = ["sigmoid"], [self.dpo_weight]
        if self.sft_weight > 0:
            types.append("sft")
            weights.append(self.sft_weight)
        return types, weights

    @classmethod
    def from_json(cls, data: Any, where: str) -> DPOSettings:
        """Settings from a JSON object: unknown fields and bad values are a :class:`SettingsError` naming ``where``."""
        if not isinstance(data, dict):
            raise SettingsError(f"{where}: expected a JSON object of DPO settings, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SettingsError(
                f"{where}: unknown DPO setting(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            )
        try:
            return cls(**data)
        except (TypeError, SettingsError) as e:
            raise SettingsError(f"{where}: {e}") from None

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> DPOSettings:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise SettingsError(f"{path}: cannot read DPO settings: {e}") from None
        return cls.from_json(data, str(path))

    def replace(self, **changes: Any) -> DPOSettings:
        return DPOSettings(**{**asdict(self), **changes})
