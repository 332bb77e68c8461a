"""The judge's settings that commands offer as flags (``--judge_flow``, ``--judge_retries``) and the default flow,
apart from :mod:`insight_o3.evaluation.judge` so that building a parser, or reading a run's card (``report``,
``compare``, ``export``), does not load the HTTP client."""

from __future__ import annotations

from ..protocol.statuses import JudgeFlow

__all__ = ["DEFAULT_JUDGE_RETRIES", "FLOWS", "default_flow"]

FLOWS = tuple(f.value for f in JudgeFlow)
#: Judgings more of an attempt whose judge reply was ambiguous or malformed (``--judge_retries``).
DEFAULT_JUDGE_RETRIES = 2


def default_flow(vsearcher_model: str | None) -> str:
    """The judge flow of a mode when none is given: ``extract`` for a single model (the released
    ``evaluate.py``), ``verify`` in InSight-o3 mode (the fork's in-loop check, as the paper's numbers)."""
    return JudgeFlow.VERIFY if vsearcher_model else JudgeFlow.EXTRACT
