"""The judge's settings that commands offer as flags (``--judge_flow``, ``--judge_retries``), apart from
:mod:`insight_o3.evaluation.judge` so that building a parser does not load the HTTP client."""

from __future__ import annotations

from ..protocol.statuses import JudgeFlow

__all__ = ["DEFAULT_JUDGE_RETRIES", "FLOWS"]

FLOWS = tuple(f.value for f in JudgeFlow)
#: Judgings more of an attempt whose judge reply was ambiguous or malformed (``--judge_retries``).
DEFAULT_JUDGE_RETRIES = 2
