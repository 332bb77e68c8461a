"""The InSight-o3 agents: vReasoner and vSearcher protocols as sans-IO sessions (shared with the
verl training recipe) and their OpenAI-compatible drivers. Imports no torch/verl/vllm."""

from .reasoner_session import ReasonerSession, ReasonerStep, SearchCall
from .searcher_session import (
    BaseSearcherSession,
    LocateResult,
    SearcherSession,
    SearcherStep,
    SearcherTurnRecord,
    SimpleSearcherSession,
)

__all__ = [
    "ReasonerSession",
    "ReasonerStep",
    "SearchCall",
    "LocateResult",
    "BaseSearcherSession",
    "SearcherSession",
    "SimpleSearcherSession",
    "SearcherStep",
    "SearcherTurnRecord",
]
