"""Typed view of ``config/agent_<vReasoner model>.yaml``: the API vReasoner, vSearcher budgets, judge API.

The file is chosen by ``API_MODEL_FOR_AGENT`` (``_base.sh`` passes its path as
``vsearch.agent_config_path``); :class:`recipe.vsearch.settings.RunSettings` reads it once per
process and combines it with the Hydra keys. The records are frozen pydantic models (unknown keys, wrong types
and out-of-range values are refused by pydantic); an error names the file, the line and the field
(``agent_x.yaml:4: vreasoner.max_pixels: ...``), the line taken from the YAML node the error's location points at.
API keys and endpoints are not part of it: the OpenAI SDK reads ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from insight_o3.imaging.geometry import VSEARCHER_EVAL_MAX_PIXELS, VSEARCHER_TRAIN_MAX_PIXELS
from insight_o3.protocol.limits import LIMITS

STAGES = ("train", "eval")

#: a count or size that must be positive / may be zero, a duration, a name
Positive = Annotated[int, Field(gt=0)]
Count = Annotated[int, Field(ge=0)]
Seconds = Annotated[float, Field(gt=0)]
Name = Annotated[str, Field(min_length=1)]


class _Record(BaseModel):
    """Frozen, exact (no coercion: ``"6"`` is not an int), and no key the record does not declare."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class VReasonerConfig(_Record):
    model: Name
    max_pixels: Positive  # image budget sent to the API (1280x1280 GPT, 3500x3500 otherwise)
    max_search_calls: Positive = LIMITS.max_search_calls
    max_completion_tokens: Positive = 2048  # per vReasoner request (the fork's agent YAMLs at 926d137)
    image_detail: Name = "high"  # image_url "detail" of every image sent to the vReasoner
    max_format_retries_train: Count = LIMITS.max_format_retries_train
    max_format_retries_eval: Count = LIMITS.max_format_retries_eval
    max_concurrency: Positive = 64
    max_retries: Count = 3
    timeout_s: Seconds = 600

    def max_format_retries(self, stage: str) -> int:
        return self.max_format_retries_train if _stage(stage) == "train" else self.max_format_retries_eval


class VSearcherBudget(_Record):
    max_tool_calls: Positive = LIMITS.max_tool_calls
    max_pixels_train: Positive = VSEARCHER_TRAIN_MAX_PIXELS
    max_pixels_eval: Positive = VSEARCHER_EVAL_MAX_PIXELS

    def max_pixels(self, stage: str) -> int:
        return self.max_pixels_train if _stage(stage) == "train" else self.max_pixels_eval


class JudgeConfig(_Record):
    max_concurrency: Positive = 64
    max_retries: Count = 3
    timeout_s: Seconds = 300


class AgentConfig(_Record):
    vreasoner: VReasonerConfig
    vsearcher: VSearcherBudget = VSearcherBudget()
    judge: JudgeConfig = JudgeConfig()


def _stage(stage: str) -> str:
    if stage not in STAGES:
        raise ValueError(f"vsearch.stage must be one of {STAGES}, got {stage!r}")
    return stage


def load_agent_config(path: str | Path) -> AgentConfig:
    """Read and validate an agent config file; an error (:class:`ValueError`) names the file, the line and the
    field (``<file>:<line>: <field>: <what is wrong>``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"agent config {path} not found (is API_MODEL_FOR_AGENT right? "
            f"expected recipe/vsearch/config/agent_<model>.yaml)"
        )
    loader = yaml.SafeLoader(path.read_text())
    try:
        root = loader.get_single_node()  # the node tree: where each key is (the error's line)
        data = None if root is None else loader.construct_document(root)
    except yaml.MarkedYAMLError as e:
        line = e.problem_mark.line + 1 if e.problem_mark is not None else 1
        raise ValueError(f"{path}:{line}: not valid YAML: {e.problem}") from None
    finally:
        loader.dispose()
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as e:
        raise ValueError("; ".join(_describe(path, root, err) for err in e.errors(include_url=False))) from None


def _describe(path: Path, root: yaml.Node | None, err: Any) -> str:
    """``<file>:<line>: <field>: <what>`` for pydantic's first error ``err``."""
    loc = tuple(err["loc"])
    where = f"{path}:{_line(root, loc)}: {'.'.join(map(str, loc)) or '(the document)'}"
    if err["type"] == "missing":
        return f"{where}: required"
    if err["type"] == "extra_forbidden":
        return f"{where}: unknown key; allowed: {sorted(_model_at(loc[:-1]).model_fields)}"
    return f"{where}: {err['msg']}, got {err['input']!r}"


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel]:
    """The record at ``loc`` inside :class:`AgentConfig` (``("vreasoner",)`` -> :class:`VReasonerConfig`)."""
    model: type[BaseModel] = AgentConfig
    for part in loc:
        annotation = model.model_fields[str(part)].annotation
        assert isinstance(annotation, type) and issubclass(annotation, BaseModel), loc
        model = annotation
    return model


def _line(root: yaml.Node | None, loc: tuple[int | str, ...]) -> int:
    """1-based line of the key at ``loc`` in the composed YAML; for a key that is not there (a missing field), the
    line of the key that holds the mapping lacking it (1 at the top level)."""
    node, line = root, 0
    for part in loc:
        if not isinstance(node, yaml.MappingNode):
            break
        pair = next(((k, v) for k, v in node.value if k.value == part), None)
        if pair is None:
            break
        line, node = pair[0].start_mark.line, pair[1]
    return line + 1
