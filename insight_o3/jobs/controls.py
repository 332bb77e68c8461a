"""How a run goes, never what it produces: :class:`RunControls`, the one record of the controls every job command
shares.

A command builds it once from its flags (``insight_o3.scripts._shared.run_controls``); a job
(:func:`~insight_o3.jobs.execute.execute`) and the settings of each command carry it whole instead of copying its
fields. Every field is an operational setting (:mod:`insight_o3.jobs.integrity`): it may change between runs of one
directory.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..endpoints.guard import DEFAULT_MAX_FAILURE_RATIO

__all__ = ["RunControls"]


@dataclass(frozen=True, kw_only=True)
class RunControls:
    """``concurrency``: items in flight; ``progress``: the progress bar; ``max_failure_ratio``: the share of failed
    requests that stops the run (:class:`~insight_o3.endpoints.guard.RunGuard`); ``max_cost`` (US$) and
    ``max_tokens_total``: the budgets (None: none; ``price_file`` prices the tokens); ``check_endpoints``: every endpoint asked once before the first
    item (:mod:`insight_o3.endpoints.preflight`); ``image_workers``: processes that decode, resize and encode images
    (None: one per usable CPU; 0: threads)."""

    concurrency: int = 16
    progress: bool = True
    max_failure_ratio: float = DEFAULT_MAX_FAILURE_RATIO
    max_cost: float | None = None
    max_tokens_total: int | None = None
    price_file: str | None = None
    check_endpoints: bool = True
    image_workers: int | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if not 0 < self.max_failure_ratio <= 1:
            raise ValueError(f"max_failure_ratio must be in (0, 1], got {self.max_failure_ratio}")
