"""How a run goes, never what it produces: :class:`RunControls`, the one record of the controls every job command
shares.

A command builds it once from its flags (``insight_o3.scripts._shared.run_controls``); a job
(:func:`~insight_o3.jobs.execute.execute`) and the settings of each command carry it whole instead of copying its
fields. Every field is an operational setting (:mod:`insight_o3.jobs.integrity`): it may change between runs of one
directory.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.setting_kinds import Kind, kind_field
from ..endpoints.guard import DEFAULT_MAX_FAILURE_RATIO

__all__ = ["RunControls"]


@dataclass(frozen=True, kw_only=True)
class RunControls:
    """``concurrency``: items in flight; ``progress``: the progress bar; ``max_failure_ratio``: the share of failed
    requests that stops the run (:class:`~insight_o3.endpoints.guard.RunGuard`); ``max_cost`` (US$) and
    ``max_tokens_total``: the budgets (None: none; ``price_file`` prices the tokens); ``check_endpoints``: every endpoint asked once before the first
    item (:mod:`insight_o3.endpoints.preflight`); ``image_workers``: processes that decode, resize and encode images
    (None: one per usable CPU; 0: threads)."""

    concurrency: int = kind_field(Kind.OPERATIONAL, default=16)
    progress: bool = kind_field(Kind.OPERATIONAL, default=True)
    max_failure_ratio: float = kind_field(Kind.OPERATIONAL, default=DEFAULT_MAX_FAILURE_RATIO)
    max_cost: float | None = kind_field(Kind.OPERATIONAL, default=None)
    max_tokens_total: int | None = kind_field(Kind.OPERATIONAL, default=None)
    price_file: str | None = kind_field(Kind.OPERATIONAL, default=None)
    #: listed among a step's settings as ``skip_endpoint_check`` (its flag)
    check_endpoints: bool = kind_field(Kind.OPERATIONAL, setting="skip_endpoint_check", default=True)
    image_workers: int | None = kind_field(Kind.OPERATIONAL, default=None)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if not 0 < self.max_failure_ratio <= 1:
            raise ValueError(f"max_failure_ratio must be in (0, 1], got {self.max_failure_ratio}")
