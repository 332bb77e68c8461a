"""A step's rollout batch as verl 0.7's reward loop returns it, for tests of the recipe's batch-level reward rules.

Each sample was scored alone by ``recipe.vsearch.reward_fn.compute_score``; the loop writes the score on the last
response token of ``rm_scores`` and every key of the returned dict as a ``non_tensor_batch`` column
(``verl/experimental/agent_loop/agent_loop.py``). Needs verl (callers skip with ``require_recipe`` first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

PROMPT_LEN, RESPONSE_LEN = 3, 5


def reward_loop_batch(samples: Sequence[Mapping[str, Any]], scores: Sequence[Mapping[str, Any]], columns=()):
    """``samples``: each sample's fields (the columns named in ``columns`` are copied); ``scores``: what
    ``compute_score`` returned for it. Response lengths vary (2-4 tokens) so the score's position varies."""
    import numpy as np
    import torch

    from verl import DataProto

    b = len(samples)
    resp_len = torch.tensor([2 + i % 3 for i in range(b)])
    attn = torch.cat(
        [torch.ones(b, PROMPT_LEN, dtype=torch.long), (torch.arange(RESPONSE_LEN)[None] < resp_len[:, None]).long()], 1
    )
    rm = torch.zeros(b, RESPONSE_LEN)
    rm[torch.arange(b), resp_len - 1] = torch.tensor([float(s["score"]) for s in scores], dtype=torch.float)
    non_tensor = {k: np.array([s.get(k) for s in samples], dtype=object) for k in columns}
    for key in scores[0]:
        non_tensor[key] = np.array([s[key] for s in scores])
    ids = torch.randint(1, 9, (b, PROMPT_LEN + RESPONSE_LEN)) * attn
    return DataProto.from_dict(
        tensors={
            "prompts": ids[:, :PROMPT_LEN],
            "responses": ids[:, PROMPT_LEN:],
            "attention_mask": attn,
            "rm_scores": rm,
        },
        non_tensors=non_tensor,
        meta_info={"reward_extra_keys": list(scores[0])},
    )
