"""The agents: each system's protocol as a sans-IO session (InSight-o3's vReasoner and vSearcher, shared with the verl
training recipe; the baselines, OpenSearch-VL, Insight-V) and the solvers that drive them against OpenAI-compatible
endpoints.

Imports no torch/verl/vllm. Re-exported here: the InSight-o3 sessions the recipe uses.
"""

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
