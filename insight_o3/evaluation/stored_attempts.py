"""A finished run's attempts as a :class:`~insight_o3.protocol.attempt.TrialSolver`: what ``rejudge`` judges anew."""

from __future__ import annotations

from ..base.json_types import JSONObject
from ..endpoints.usage import ROLE_KEYS
from ..protocol.attempt import Attempt, TrialSolver
from ..protocol.sample import Sample
from ..protocol.statuses import FailStage, VerdictStatus
from .schema import EvalResult


class StoredAttempts(TrialSolver):
    """A solver that answers from a finished run's records: the attempt of (sample, trial) as stored."""

    def __init__(self, records: dict[int, dict[str, dict]]):
        self.records = records

    async def solve_trials(self, sample: Sample, trials: list[int]) -> list[Attempt]:
        out = []
        for k in trials:
            er = EvalResult.from_dict(self.records[k][sample.key]["eval_result"], f"trial_{k} record {sample.key}")
            if er.status == VerdictStatus.FAILED and er.fail_stage != FailStage.JUDGE:
                out.append(Attempt(None, None, error=f"stored attempt failed: {er.fail_reason}"))
            else:
                out.append(Attempt(er.response, er.finish_reason, trajectory=er.trajectory, usage=None, stats=er.stats))
        return out

    def usage_shares(self, sample: Sample, trials: list[int]) -> list[JSONObject] | None:
        """The stored model/vSearcher usage of each trial (the judge's is measured anew)."""
        return [
            {r: c for r, c in (self.records[k][sample.key].get("usage") or {}).items() if r != ROLE_KEYS["judge"]}
            for k in trials
        ]
