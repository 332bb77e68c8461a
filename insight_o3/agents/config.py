"""The typed, frozen settings of an InSight-o3 system: what :class:`~insight_o3.agents.drivers.InSightO3` and
:class:`~insight_o3.agents.drivers.VSearcher` need besides their clients and the image store.

Two producers, one shape: ``insight_o3.scripts.evaluate`` builds an :class:`InSightO3Config` from its flags
(``--vsearcher_model`` ...), the training recipe builds a :class:`ReasonerSettings` from its ``RunSettings``
(``recipe.vsearch.settings.RunSettings.reasoner_settings``). Nothing here knows a command line: errors name
fields, the commands map them to their flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..endpoints.endpoint import Endpoint
from ..imaging.geometry import VSEARCHER_EVAL_MAX_PIXELS
from ..protocol.limits import LIMITS
from ..protocol.prompts import FORK_HINTS, ReasonerHints
from ..protocol.statuses import ReasonerMode
from .reasoner_session import REASONER_MODES


@dataclass(frozen=True, kw_only=True)
class ReasonerSettings:
    """The vReasoner of an episode. ``completion_kwargs``: per-turn request settings; empty gives the fork's
    (``drivers.VREASONER_COMPLETION_KWARGS``). ``max_format_retries``: per round (None: the protocol's for
    ``mode``). ``max_pixels``: the image budget (None or 0: no limit)."""

    model: str
    max_pixels: int | None = None
    mode: str = ReasonerMode.INFER
    max_search_calls: int = LIMITS.max_search_calls
    system_prompt: str | None = None
    completion_kwargs: Mapping[str, Any] = field(default_factory=dict)
    image_url_extra: Mapping[str, Any] | None = None
    max_format_retries: int | None = None
    hints: ReasonerHints = FORK_HINTS
    #: a request lost after the SDK's retries uses one of the round's attempts (the fork's training loop) instead of
    #: ending the episode (``drivers.InSightO3``)
    lost_reply_is_attempt: bool = False

    def __post_init__(self) -> None:
        if self.mode not in REASONER_MODES:
            raise ValueError(f"reasoner mode must be one of {REASONER_MODES}, got {self.mode!r}")
        if "n" in self.completion_kwargs:
            raise ValueError("reasoner completion_kwargs: 'n' cannot be set (each trial is its own episode)")
        if self.max_search_calls < 1:
            raise ValueError(f"reasoner max_search_calls must be at least 1, got {self.max_search_calls}")


@dataclass(frozen=True, kw_only=True)
class SearcherSettings:
    """The vSearcher behind an endpoint (e.g. vLLM serving InSight-o3-vS). ``completion_kwargs`` are merged over
    the fork's validation sampling (``drivers.VSEARCHER_COMPLETION_KWARGS``)."""

    model: str
    max_pixels: int = VSEARCHER_EVAL_MAX_PIXELS
    prompt: str = "trained"
    max_tool_calls: int = LIMITS.max_tool_calls
    completion_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if "n" in self.completion_kwargs:
            raise ValueError("vSearcher completion_kwargs: 'n' cannot be set (one episode per search)")


@dataclass(frozen=True, kw_only=True)
class InsightVSettings:
    """Insight-V's summary agent (the reasoning agent is the run's ``model`` on the run's endpoint): its model and
    endpoint, the run's by default (the release derives both agents from one model)."""

    summary_model: str
    summary_api: Endpoint


@dataclass(frozen=True, kw_only=True)
class InSightO3Config:
    """A vReasoner + vSearcher system behind two endpoints (the agent-specific part of an evaluation run)."""

    reasoner: ReasonerSettings
    searcher: SearcherSettings
    reasoner_api: Endpoint
    searcher_api: Endpoint
