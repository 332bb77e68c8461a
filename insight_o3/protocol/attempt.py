"""The contract between the evaluation runner and whatever answers questions.

The runner owns scheduling, resume, judging and metrics; a *solver* only produces attempts.
``SingleModelSolver`` (one chat model) and the InSight-o3 solver (vReasoner + vSearcher, in
``insight_o3.agents``) both implement :class:`Solver`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol


@dataclass
class Attempt:
    """One answer to one sample for one trial.

    ``error`` is set (and ``text`` is None) when the attempt was lost to the API after the SDK's
    retries — a *critical failure*, counted and never judged. ``finish_reason`` other than
    ``"stop"`` means a truncated/incomplete response. ``trajectory`` is the conversation with image
    references (see :mod:`insight_o3.protocol.trajectory`); ``stats`` holds solver-specific numbers such as
    ``n_search_calls`` and ``n_search_not_found``.
    """

    text: str | None
    finish_reason: str | None
    error: str | None = None
    trajectory: list[dict] | None = None
    usage: dict | None = None
    stats: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


class Solver(Protocol):
    async def solve(self, sample: object, n: int) -> list[Attempt]:
        """Return exactly ``n`` attempts (trials) for ``sample`` (an ``evaluation`` Sample).

        Must not raise for API/model problems: those become attempts with ``error`` set.
        """
        ...

    async def aclose(self) -> None: ...
