"""The InSight-o3 protocol as pure functions and constants, shared by evaluation and training.

Numeric limits (:mod:`.limits`), prompts (:mod:`.prompts`), the vReasoner question (:mod:`.questions`),
answer and tool-call parsing (:mod:`.parsing`), the vSearcher's format rules (:mod:`.searcher_rules`),
rewards (:mod:`.rewards`), trajectories (:mod:`.trajectory`), what one attempt at a sample returns
(:mod:`.attempt`) with its stats, one record per agent family (:mod:`.attempt_stats`), OpenSearch-VL's
fatal-aware GRPO rule, a training option (:mod:`.fatal`), and the built-in agents' names and descriptions
(:mod:`.agent_catalog`).
"""

__all__ = [
    "agent_catalog",
    "attempt",
    "attempt_stats",
    "evidence",
    "fatal",
    "limits",
    "parsing",
    "prompts",
    "questions",
    "rewards",
    "sample",
    "searcher_rules",
    "statuses",
    "trajectory",
]
