"""The typed, frozen settings of the data engine's steps: one per step, plus a model at its endpoint; the run
controls every step shares are the jobs' :class:`~insight_o3.jobs.controls.RunControls`. The command (``build_reasoning_data``) builds them from its flags; a round driver builds
them directly. :meth:`settings` of each is what the step's first run fixes, by the name and of the run-integrity kind each field
declares (:func:`~insight_o3.base.setting_kinds.kind_field`: result-changing ones refuse a later run that
differs)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..base.json_types import JSONObject
from ..base.setting_kinds import Kind, field_kinds, kind_field
from ..endpoints.endpoint import Endpoint
from ..jobs.controls import RunControls


@dataclass(frozen=True, kw_only=True)
class ModelAccess:
    """A model behind an OpenAI-compatible endpoint (its key in memory only: never in a ``repr`` nor a file)."""

    model: str = kind_field(Kind.RESULT)
    #: its fields' kinds are the endpoint's own (the URL is where a model is served, not what it is)
    api: Endpoint = field(default_factory=Endpoint)

    def settings(self, prefix: str = "") -> JSONObject:
        return {f"{prefix}model": self.model, f"{prefix}api_base_url": self.api.base_url}

    @staticmethod
    def kinds(prefix: str = "") -> dict[str, Kind]:
        """The kind of each of :meth:`settings` (and of the endpoint's other settings) under ``prefix``."""
        return {**field_kinds(ModelAccess, prefix), **field_kinds(Endpoint, prefix)}


def controls_settings(run: RunControls) -> JSONObject:
    """The run controls as a step's settings list them (its invocation: none of them fixed by the first run)."""
    return {
        "concurrency": run.concurrency,
        "max_failure_ratio": run.max_failure_ratio,
        "price_file": run.price_file,
        "max_cost": run.max_cost,
        "max_tokens_total": run.max_tokens_total,
        "image_workers": run.image_workers,
        "skip_endpoint_check": not run.check_endpoints,
    }


@dataclass(frozen=True, kw_only=True)
class GenerateSettings:
    """Progressive generation: ``num_chains`` chains per question (the paper's N), a malformed chain generated again
    up to ``chain_retries`` times; ``completion_kwargs`` over the release's sampling; ``seed``: each chain's requests
    carry a seed derived from it and the chain (so a rerun asks the same)."""

    num_chains: int = kind_field(Kind.RESULT, default=4)
    chain_retries: int = kind_field(Kind.RESULT, default=1)
    completion_kwargs: Mapping[str, Any] = kind_field(
        Kind.RESULT, setting="chat_completion_kwargs", default_factory=dict
    )
    seed: int = kind_field(Kind.RESULT, default=0)

    def __post_init__(self) -> None:
        if self.num_chains < 1:
            raise ValueError(f"num_chains must be at least 1, got {self.num_chains}")
        if self.chain_retries < 0:
            raise ValueError(f"chain_retries must not be negative, got {self.chain_retries}")
        if "n" in self.completion_kwargs or "seed" in self.completion_kwargs:
            raise ValueError("completion_kwargs: 'n' and 'seed' are the engine's (one chain per request, seeded)")

    def settings(self) -> JSONObject:
        return {
            "num_chains": self.num_chains,
            "chain_retries": self.chain_retries,
            "chat_completion_kwargs": dict(self.completion_kwargs),
            "seed": self.seed,
        }


@dataclass(frozen=True, kw_only=True)
class CheckSettings:
    """Tier 1, the answer check: ``completion_kwargs`` over the release's sampling."""

    completion_kwargs: Mapping[str, Any] = kind_field(
        Kind.RESULT, setting="chat_completion_kwargs", default_factory=dict
    )

    def settings(self) -> JSONObject:
        return {"chat_completion_kwargs": dict(self.completion_kwargs)}


@dataclass(frozen=True, kw_only=True)
class ScoreSettings:
    """Tier 2, chain scoring: a reply without a usable score is asked again ``parse_retries`` times."""

    #: asks again only where the reply has no usable score
    parse_retries: int = kind_field(Kind.OPERATIONAL, default=2)
    completion_kwargs: Mapping[str, Any] = kind_field(
        Kind.RESULT, setting="chat_completion_kwargs", default_factory=dict
    )

    def __post_init__(self) -> None:
        if self.parse_retries < 0:
            raise ValueError(f"parse_retries must not be negative, got {self.parse_retries}")

    def settings(self) -> JSONObject:
        return {"parse_retries": self.parse_retries, "chat_completion_kwargs": dict(self.completion_kwargs)}


@dataclass(frozen=True, kw_only=True)
class ExportSettings:
    """What the assessed chains become (ours, rows IVD12-IVD15): a chain is *kept* when its answer passed tier 1 and
    its score is at least ``min_score``; the reasoning-agent set holds the ``keep_top`` best kept chains of each
    question; the summary-agent set holds every kept chain and flawed ones (tier-1 or tier-2 rejects) so that
    ``flawed_ratio`` of it is flawed (as far as there are flawed chains); DPO pairs: per question up to
    ``pairs_per_question`` (best kept, worst rejected) pairs, a tier-2 reject only ``dpo_min_margin`` points below the
    chosen one; ``seed`` picks the flawed chains."""

    min_score: int = kind_field(Kind.RESULT, default=60)
    keep_top: int = kind_field(Kind.RESULT, default=1)
    flawed_ratio: float = kind_field(Kind.RESULT, default=0.3)
    pairs_per_question: int = kind_field(Kind.RESULT, default=1)
    dpo_min_margin: int = kind_field(Kind.RESULT, default=20)
    seed: int = kind_field(Kind.RESULT, default=0)

    def __post_init__(self) -> None:
        if not 1 <= self.min_score <= 100:
            raise ValueError(f"min_score must be in 1..100, got {self.min_score}")
        if self.keep_top < 1 or self.pairs_per_question < 0:
            raise ValueError("keep_top must be at least 1 and pairs_per_question not negative")
        if not 0.0 <= self.flawed_ratio < 1.0:
            raise ValueError(f"flawed_ratio must be in [0, 1), got {self.flawed_ratio}")
        if self.dpo_min_margin < 0:
            raise ValueError(f"dpo_min_margin must not be negative, got {self.dpo_min_margin}")

    def settings(self) -> JSONObject:
        return {
            "min_score": self.min_score,
            "keep_top": self.keep_top,
            "flawed_ratio": self.flawed_ratio,
            "pairs_per_question": self.pairs_per_question,
            "dpo_min_margin": self.dpo_min_margin,
            "seed": self.seed,
        }
