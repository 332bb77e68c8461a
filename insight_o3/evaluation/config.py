"""One frozen, typed configuration per evaluation run (:class:`EvaluateConfig`).

``insight_o3.scripts.evaluate`` produces it from its flags (defaults that depend on other flags, keys from the
environment, the eval name of a subset: all resolved there, once); everything below the command reads this
object, never a command line. It has an agent-agnostic part (data, the answering model's endpoint, judge, run
controls) and an agent-specific part, :attr:`EvaluateConfig.agent`: :class:`SingleModelSettings` for one model
answering alone, :class:`~insight_o3.agents.config.InSightO3Config` for vReasoner + vSearcher,
:class:`~insight_o3.agents.config.InsightVSettings` for Insight-V's summary agent,
:class:`PluginAgentSettings` for any other agent of the registry (:mod:`.agent_registry`), which builds its
solver from this config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..agents.config import ApiAccess, InSightO3Config, InsightVSettings
from ..base.caps import DEFAULT_MAX_REPLY_CHARS
from ..endpoints.usage import CostModel
from ..tools.setup import ToolSettings
from .judge import DEFAULT_JUDGE_RETRIES
from .runner import RunConfig


@dataclass(frozen=True, kw_only=True)
class SingleModelSettings:
    """One model answering alone. ``system_prompt``: None (the model's default) or a prompt; ``oracle_crops``:
    give the annotated target layouts' crops after the full image (paper Table 6), or None."""

    system_prompt: str | None = None
    oracle_crops: str | None = None


@dataclass(frozen=True, kw_only=True)
class PluginAgentSettings:
    """An agent of the registry (:mod:`.agent_registry`) other than the two above: its name; its settings are
    the run's model endpoint and request settings, the rest is its protocol's."""

    name: str
    tools: ToolSettings | None = None  # an agent of the tool layer (opensearch_vl): its tools, retrieval, limits


#: The agent-specific settings an evaluation run may carry.
AgentSettings = SingleModelSettings | InSightO3Config | InsightVSettings | PluginAgentSettings


@dataclass(frozen=True, kw_only=True)
class JudgeSettings:
    """The judge of the answers (``flow``: see :data:`insight_o3.evaluation.judge.FLOWS`)."""

    model: str
    api: ApiAccess
    max_answer_length: int = 1000
    flow: str = "extract"
    cache: bool = False
    retries: int = DEFAULT_JUDGE_RETRIES  # judgings more of an attempt after an ambiguous or malformed judge reply


@dataclass(frozen=True, kw_only=True)
class RequestRates:
    """Requests and tokens per minute allowed to one endpoint (None: no limit)."""

    rpm: float | None = None
    tpm: float | None = None


@dataclass(frozen=True, kw_only=True)
class EvaluateConfig:
    """Every effective setting of one ``evaluate`` run. ``settings`` is what ``args.json`` holds: every flag's
    resolved value under its flag name, never a key (the run dir's record of how it was made)."""

    # where, and on what
    output_dir: str
    eval_name: str
    ann_file: str
    img_dir: str
    allow_outside_img_dir: bool = False
    subset: dict[str, Any] | None = None  # evaluation.samples.subset_spec
    # the answering model (the vReasoner in InSight-o3 mode)
    model: str
    api: ApiAccess
    img_max_pixels: int = 0  # 0: no limit
    completion_kwargs: Mapping[str, Any] = field(default_factory=dict)
    image_url_extra: Mapping[str, Any] = field(default_factory=dict)
    judge: JudgeSettings
    agent: AgentSettings = field(default_factory=SingleModelSettings)
    # run controls
    num_trials: int = 1
    concurrency: int = 128
    adaptive_concurrency: bool = True
    model_rates: RequestRates = field(default_factory=RequestRates)
    judge_rates: RequestRates = field(default_factory=RequestRates)
    price_file: str | None = None
    max_cost: float | None = None
    max_tokens_total: int | None = None
    max_failure_ratio: float = 1.0
    max_reply_chars: int | None = None
    max_decode_values: int | None = None
    separate_trial_requests: bool = False
    retry_failed: bool = False
    image_cache_mb: int = 128
    image_workers: int | None = None
    progress: bool = True
    check_endpoints: bool = True
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def insight_o3(self) -> InSightO3Config | None:
        """The vReasoner + vSearcher settings in InSight-o3 mode, else None."""
        return self.agent if isinstance(self.agent, InSightO3Config) else None

    @property
    def agent_name(self) -> str:
        """The registry name of the run's agent (:mod:`.agent_registry`)."""
        if isinstance(self.agent, InSightO3Config):
            return "insight_o3"
        if isinstance(self.agent, SingleModelSettings):
            return "single_model"
        if isinstance(self.agent, InsightVSettings):
            return "insight_v"
        return self.agent.name

    @property
    def insight_v(self) -> InsightVSettings | None:
        """Insight-V's summary agent settings (``--agent insight_v``), else None."""
        return self.agent if isinstance(self.agent, InsightVSettings) else None

    @property
    def reply_chars(self) -> int:
        """Characters of each reply text a record keeps (``--max_reply_chars``; the default when unset); every
        client's reply body cap derives from it (:func:`insight_o3.base.caps.reply_body_cap`)."""
        return DEFAULT_MAX_REPLY_CHARS if self.max_reply_chars is None else self.max_reply_chars

    @property
    def single_model(self) -> SingleModelSettings | None:
        return self.agent if isinstance(self.agent, SingleModelSettings) else None

    def run_config(self, costs: CostModel | None) -> RunConfig:
        """The runner's settings of this run (``costs``: the price file's model, read by the command)."""
        return RunConfig(
            output_dir=self.output_dir,
            eval_name=self.eval_name,
            num_trials=self.num_trials,
            concurrency=self.concurrency,
            retry_failed=self.retry_failed,
            group_trials=not self.separate_trial_requests,
            progress=self.progress,
            cost_model=costs,
            max_cost=self.max_cost,
            max_tokens_total=self.max_tokens_total,
            check_endpoints=self.check_endpoints,
            max_reply_chars=self.reply_chars,
        )
