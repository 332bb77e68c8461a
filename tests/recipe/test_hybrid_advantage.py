"""vsearch_hybrid_grpo through verl's own compute_advantage on a real DataProto (hand-computed numbers)."""

from __future__ import annotations

import pytest

from tests.support.stacks import require_recipe

require_recipe()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo.core_algos import get_adv_estimator_fn  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402

from recipe.vsearch.hybrid_advantage import ESTIMATOR_NAME, compute_vsearch_hybrid_advantage, inloop_uid  # noqa: E402
from verl import DataProto  # noqa: E402

# rows 0-1: out-of-loop group g0; 2-3: group g1; 4-6: in-loop samples of two episodes;
# 7: in-loop sample of an episode cut by an API failure (response fully masked)
SCORES = [1.0, 0.2, 0.5, 0.5, 1.0, 0.2, 0.0, 0.9]
LENGTHS = [4, 2, 3, 4, 1, 4, 3, 0]
UIDS = ["g0", "g0", "g1", "g1", inloop_uid("epA", 0), inloop_uid("epA", 1), inloop_uid("epB", 0), inloop_uid("epC", 0)]
T = 5


def _batch() -> DataProto:
    mask = torch.zeros(len(SCORES), T)
    tlr = torch.zeros(len(SCORES), T)
    for i, (s, n) in enumerate(zip(SCORES, LENGTHS)):
        mask[i, :n] = 1
        tlr[i, max(n - 1, 0)] = s  # outcome reward on the last response token
    return DataProto.from_dict(
        tensors={"token_level_rewards": tlr, "response_mask": mask}, non_tensors={"uid": np.array(UIDS, dtype=object)}
    )


def _run(scope: str | None, norm: str | None = "paper") -> tuple[torch.Tensor, torch.Tensor]:
    algo = {"adv_estimator": ESTIMATOR_NAME, "norm_adv_by_std_in_grpo": True}
    if scope is not None:
        algo["inloop_norm_scope"] = scope
    if norm is not None:
        algo["inloop_norm"] = norm
    data = compute_advantage(
        _batch(), adv_estimator=ESTIMATOR_NAME, config=OmegaConf.create(algo), norm_adv_by_std_in_grpo=True
    )
    return data.batch["advantages"], data.batch["response_mask"]


# hand-computed (unbiased std, eps 1e-6):
# g0: mean 0.6, std sqrt(0.32) = 0.565685 -> +-0.707107; g1: identical scores -> 0
# in-loop scope: {1.0, 0.2, 0.0} mean 0.4, std sqrt(0.28) = 0.529150 -> 1.133893, -0.377964, -0.755929
# batch scope: rows 0-6 mean 3.4/7 = 0.485714, std sqrt(0.928571/6) = 0.393398 -> 1.307290, -0.726273, -1.234679
# original (inloop_norm original, the fork's np.std, also the default): in-loop std sqrt(0.56/3) = 0.432049 ->
# 1.388727, -0.462909, -0.925818; batch std 0.364216 -> 1.412032, -0.784462, -1.333586
OUT = [0.707107, -0.707107, 0.0, 0.0]
INLOOP = [1.133893, -0.377964, -0.755929]
BATCH = [1.307290, -0.726273, -1.234679]
INLOOP_POP = [1.388727, -0.462909, -0.925818]
BATCH_POP = [1.412032, -0.784462, -1.333586]


@pytest.mark.parametrize(
    "scope,norm,expected_in",
    [
        (None, "paper", INLOOP),
        ("inloop", "paper", INLOOP),
        ("batch", "paper", BATCH),
        ("inloop", "original", INLOOP_POP),
        ("batch", "original", BATCH_POP),
        (None, None, INLOOP_POP),
    ],
)
def test_hybrid_advantage_hand_numbers(scope, norm, expected_in):
    adv, mask = _run(scope, norm)
    per_sample = [adv[i, 0].item() for i in range(7)]
    assert per_sample == pytest.approx(OUT + expected_in, abs=1e-4)
    # constant over each sample's response tokens, exactly 0 on masked tokens (row 7 entirely)
    assert (adv[mask == 0] == 0).all()
    for i in range(7):
        assert torch.allclose(adv[i, : LENGTHS[i]], adv[i, 0].expand(LENGTHS[i]))
    assert (adv[7] == 0).all()


def test_registered_and_flags_override_uid():
    assert get_adv_estimator_fn(ESTIMATOR_NAME) is compute_vsearch_hybrid_advantage
    b = _batch()
    # all rows flagged out-of-loop: identical to verl's GRPO on the same uids
    adv, _ = compute_vsearch_hybrid_advantage(
        b.batch["token_level_rewards"],
        b.batch["response_mask"],
        index=b.non_tensor_batch["uid"],
        config=AlgoConfig(),
        is_in_loop=np.zeros(8, dtype=bool),
    )
    ref = compute_advantage(_batch(), adv_estimator="grpo", norm_adv_by_std_in_grpo=True).batch["advantages"]
    assert torch.allclose(adv, ref)


def test_bad_scope_is_a_clear_error():
    with pytest.raises(ValueError, match="inloop_norm_scope must be one of"):
        _run("global")
