"""Typed view of ``config/agent_<vReasoner model>.yaml``: the API vReasoner, vSearcher budgets, judge API.

The file is chosen by ``API_MODEL_FOR_AGENT`` (``_base.sh`` passes its path as
``vsearch.agent_config_path``); :class:`recipe.vsearch.settings.RunSettings` reads it once per
process and combines it with the Hydra keys. Unknown or missing keys and wrong types are errors that
name the file and the field. API keys and endpoints are not part of it: the OpenAI SDK reads
``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from insight_o3.imaging.geometry import VSEARCHER_EVAL_MAX_PIXELS, VSEARCHER_TRAIN_MAX_PIXELS
from insight_o3.protocol.limits import LIMITS

STAGES = ("train", "eval")


def _min(value: float) -> dict[str, float]:
    """Field metadata: the smallest allowed value (default: positive)."""
    return {"min": value}


@dataclass(frozen=True)
class VReasonerConfig:
    model: str
    max_pixels: int  # image budget sent to the API (1280x1280 GPT, 3500x3500 otherwise)
    max_search_calls: int = LIMITS.max_search_calls
    max_completion_tokens: int = 2048  # per vReasoner request (the fork's agent YAMLs at 926d137)
    image_detail: str = "high"  # image_url "detail" of every image sent to the vReasoner
    max_format_retries_train: int = field(default=LIMITS.max_format_retries_train, metadata=_min(0))
    max_format_retries_eval: int = field(default=LIMITS.max_format_retries_eval, metadata=_min(0))
    max_concurrency: int = 64
    max_retries: int = field(default=3, metadata=_min(0))
    timeout_s: float = 600

    def max_format_retries(self, stage: str) -> int:
        return self.max_format_retries_train if _stage(stage) == "train" else self.max_format_retries_eval


@dataclass(frozen=True)
class VSearcherBudget:
    max_tool_calls: int = LIMITS.max_tool_calls
    max_pixels_train: int = VSEARCHER_TRAIN_MAX_PIXELS
    max_pixels_eval: int = VSEARCHER_EVAL_MAX_PIXELS

    def max_pixels(self, stage: str) -> int:
        return self.max_pixels_train if _stage(stage) == "train" else self.max_pixels_eval


@dataclass(frozen=True)
class JudgeConfig:
    max_concurrency: int = 64
    max_retries: int = field(default=3, metadata=_min(0))
    timeout_s: float = 300


@dataclass(frozen=True)
class AgentConfig:
    vreasoner: VReasonerConfig
    vsearcher: VSearcherBudget = field(default_factory=VSearcherBudget)
    judge: JudgeConfig = field(default_factory=JudgeConfig)


def _stage(stage: str) -> str:
    if stage not in STAGES:
        raise ValueError(f"vsearch.stage must be one of {STAGES}, got {stage!r}")
    return stage


_NESTED = {"VReasonerConfig": VReasonerConfig, "VSearcherBudget": VSearcherBudget, "JudgeConfig": JudgeConfig}


def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(fields)}")
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"{where}.{name}: required")
            continue
        value, typ = data[name], f.type if isinstance(f.type, str) else f.type.__name__
        if typ in _NESTED:
            kwargs[name] = _build(_NESTED[typ], value, f"{where}.{name}")
            continue
        low = f.metadata.get("min")
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = {
            "str": isinstance(value, str) and value != "",
            "int": number and isinstance(value, int) and (value >= low if low is not None else value > 0),
            "float": number and (value >= low if low is not None else value > 0),
        }[typ]
        if not ok:
            what = (
                "a non-empty str" if typ == "str" else (f"a {typ} >= {low}" if low is not None else f"a positive {typ}")
            )
            raise ValueError(f"{where}.{name}: expected {what}, got {value!r}")
        kwargs[name] = value
    return cls(**kwargs)


def load_agent_config(path: str | Path) -> AgentConfig:
    """Read and validate an agent config file (errors name the file and the field)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"agent config {path} not found (is API_MODEL_FOR_AGENT right? "
            f"expected recipe/vsearch/config/agent_<model>.yaml)"
        )
    with path.open() as f:
        data = yaml.safe_load(f)
    return _build(AgentConfig, data, str(path))
