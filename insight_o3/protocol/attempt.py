"""The contract between the evaluation runner and whatever answers questions.

The runner owns scheduling, resume, judging and metrics; a *solver* only produces attempts.
``SingleModelSolver`` (one chat model) and the InSight-o3 solver (vReasoner + vSearcher, in
``insight_o3.agents``) both implement :class:`Solver`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ..base.json_types import JSONObject
from .attempt_stats import AttemptStats


@dataclass
class Attempt:
    """One answer to one sample for one trial.

    ``error`` is set (and ``text`` is None) when the attempt was lost to the API after the SDK's
    retries — a *critical failure*, counted and never judged. ``finish_reason`` other than
    ``"stop"`` means a truncated/incomplete response. ``trajectory`` is the conversation with image
    references (see :mod:`insight_o3.protocol.trajectory`); ``stats`` is what the solver reports besides, a record
    of its agent family (:mod:`insight_o3.protocol.attempt_stats`; a single model's is empty).
    """

    text: str | None
    finish_reason: str | None
    error: str | None = None
    trajectory: list[dict] | None = None
    usage: dict | None = None
    stats: AttemptStats = field(default_factory=AttemptStats)

    def to_dict(self) -> JSONObject:
        return {**asdict(self), "stats": self.stats.to_dict()}


class Solver(Protocol):
    async def solve(self, sample: object, n: int) -> list[Attempt]:
        """Return exactly ``n`` attempts (trials) for ``sample`` (an ``evaluation`` Sample).

        Must not raise for API/model problems: those become attempts with ``error`` set.
        """
        ...

    async def aclose(self) -> None: ...


class TrialSolver(ABC):
    """Answers given (sample, trial) pairs rather than ``n`` fresh trials: ``rejudge``'s stored attempts. The
    evaluation runner asks a :class:`Solver` for ``n`` attempts and a ``TrialSolver`` for these trials' attempts
    and their usage (:class:`FreshTrials` makes the one the other)."""

    @abstractmethod
    async def solve_trials(self, sample: Any, trials: list[int]) -> list[Attempt]:
        """The attempt of each of ``trials`` (in order); never raises for a lost attempt (``error`` set)."""

    def usage_shares(self, sample: Any, trials: list[int]) -> list[JSONObject] | None:
        """Each trial's usage per role, when known beforehand (None: measured while solving)."""
        return None

    async def aclose(self) -> None:
        return None


class FreshTrials(TrialSolver):
    """A :class:`Solver` asked for as many fresh attempts as trials are pending."""

    def __init__(self, solver: Solver):
        self.solver = solver

    async def solve_trials(self, sample: Any, trials: list[int]) -> list[Attempt]:
        return list(await self.solver.solve(sample, len(trials)))

    async def aclose(self) -> None:
        await self.solver.aclose()
