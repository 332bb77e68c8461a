"""The protocol's numeric limits, named once.

Every CLI default, agent default and the recipe's config default reads these; change a limit here (or
override it per run with the flag / config key) rather than writing the number again. Each field says
where the number comes from (paper section or the authors' released code).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProtocolLimits:
    #: vSearch calls a vReasoner episode may make; the next one gets the limit prompt
    #: (paper §4 / Appendix D.1, the fork's ``max_search_calls``).
    max_search_calls: int = 6
    #: Crop (tool) calls of one vSearcher episode; after them the tool response carries the limit text
    #: (Appendix D.1, the fork's ``vsearcher max_tool_calls``).
    max_tool_calls: int = 6
    #: vReasoner format retries per round after the first reply, during training (the fork's
    #: ``max_round_retries``: 3 replies per round).
    max_format_retries_train: int = 2
    #: The same during evaluation (the fork's ``max_round_retries_val``: 5 replies per round).
    max_format_retries_eval: int = 4
    #: New tokens of one vSearcher turn, inside the trajectory's response budget (the fork's
    #: ``VSearcherLoop.MAX_TOKENS_PER_TURN``, ``verl/experimental/agent_loop/insight_o3_agent_loop.py:54``,
    #: applied when the sampling parameters set no ``max_tokens``; training and validation).
    vsearcher_max_tokens_per_turn: int = 1024
    #: pass@k of the C.1 difficulty filter (Appendix C.1: "pass@3").
    difficulty_attempts: int = 3


#: The released system's limits.
LIMITS = ProtocolLimits()
