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

from ..agents.config import InSightO3Config, InsightVSettings
from ..base.setting_kinds import Kind
from ..endpoints.endpoint import Endpoint
from ..imaging.prepared_cache import ImageCacheSettings
from ..protocol.statuses import JudgeFlow
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
    api: Endpoint
    max_answer_length: int = 1000
    flow: str = JudgeFlow.EXTRACT
    cache: bool = False
    retries: int = DEFAULT_JUDGE_RETRIES  # judgings more of an attempt after an ambiguous or malformed judge reply


@dataclass(frozen=True, kw_only=True)
class RequestRates:
    """Requests and tokens per minute allowed to one endpoint (None: no limit)."""

    rpm: float | None = None
    tpm: float | None = None


@dataclass(frozen=True, kw_only=True)
class EvaluateConfig:
    """Every effective setting of one ``evaluate`` run. ``run``: where it writes, how many trials, and its run
    controls (the runner's whole config: the runner reads it, nothing copies it). ``settings`` is what
    ``args.json`` holds: every flag's resolved value under its flag name, never a key (the run dir's record of
    how it was made)."""

    # where, and on what
    run: RunConfig
    ann_file: str
    img_dir: str
    allow_outside_img_dir: bool = False
    subset: dict[str, Any] | None = None  # evaluation.samples.subset_spec
    # the answering model (the vReasoner in InSight-o3 mode)
    model: str
    api: Endpoint
    img_max_pixels: int = 0  # 0: no limit
    completion_kwargs: Mapping[str, Any] = field(default_factory=dict)
    image_url_extra: Mapping[str, Any] = field(default_factory=dict)
    separate_trial_requests: bool = False  # one request per trial instead of n=num_trials (the single model)
    judge: JudgeSettings
    agent: AgentSettings = field(default_factory=SingleModelSettings)
    # how the run goes besides run.controls (never what it produces)
    adaptive_concurrency: bool = True
    model_rates: RequestRates = field(default_factory=RequestRates)
    judge_rates: RequestRates = field(default_factory=RequestRates)
    max_decode_values: int | None = None
    image_cache_mb: int = 128
    #: the prepared-image cache shared across runs (None: none)
    image_cache: ImageCacheSettings | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    #: the run-integrity kind each of ``settings`` declares (its flag's)
    kinds: Mapping[str, Kind] = field(default_factory=dict)

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
        """Characters of each reply text a record keeps (``run.max_reply_chars``); every client's reply body cap
        derives from it (:func:`insight_o3.base.caps.reply_body_cap`)."""
        return self.run.max_reply_chars

    @property
    def single_model(self) -> SingleModelSettings | None:
        return self.agent if isinstance(self.agent, SingleModelSettings) else None
