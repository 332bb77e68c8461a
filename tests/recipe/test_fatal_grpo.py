"""Fatal-aware GRPO in the recipe (``vsearch.fatal``; OpenSearch-VL's method on the vSearcher): hand-made hybrid batches
through the trainer's own advantage step (``trainer.hybrid_advantages``) and ``fatal_grpo.apply_fatal``, checked against
the equations (:func:`insight_o3.protocol.fatal.group_advantages`); a real multi-turn row of the agent loop, stopped at
its fatal step and masked; the reward's conventions on it."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.stacks import require_recipe

require_recipe()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage  # noqa: E402

from insight_o3.protocol.fatal import FatalMode, group_advantages  # noqa: E402
from recipe.vsearch.agent_loops import VSearcherAgentLoop  # noqa: E402
from recipe.vsearch.fatal_grpo import apply_fatal  # noqa: E402
from recipe.vsearch.hybrid_advantage import inloop_uid  # noqa: E402
from recipe.vsearch.rollout_fields import (  # noqa: E402
    ROLE_INLOOP,
    ROLE_KEY,
    ROLE_OUTLOOP,
    ROLE_PADDING,
    VALIDATE_KEY,
)
from recipe.vsearch.trainer import hybrid_advantages  # noqa: E402
from tests.support.recipe_loops import TOOL, ScriptedServerManager  # noqa: E402
from tests.support.recipe_loops import expand_rows as _expand  # noqa: E402
from tests.support.recipe_loops import loop_config as _config  # noqa: E402
from tests.support.recipe_loops import make_loop as _make  # noqa: E402
from verl import DataProto  # noqa: E402

# rows 0-3: out-of-loop group g0; 4-5: group g1 (equal rewards); 6-8: in-loop calls (episode A: calls 0, 1; B: 0);
# 9: a DP padding copy of row 1 (original's trained padding)
SCORES = [1.0, 0.2, 0.0, 0.56, 0.2, 0.2, 1.0, 0.2, 0.0, 0.2]
UIDS = ["g0"] * 4 + ["g1"] * 2 + [inloop_uid("epA", 0), inloop_uid("epA", 1), inloop_uid("epB", 0), "g0"]
ROLES = [ROLE_OUTLOOP] * 6 + [ROLE_INLOOP] * 3 + [ROLE_PADDING]
#: every response: 3 steps of 2 generated tokens, each followed by 1 observation token (steps start at 0, 3, 6)
GEN = [1, 1, 0, 1, 1, 0, 1, 1, 0]
STARTS = [0, 3, 6]
ALGO = {"norm_adv_by_std_in_grpo": True, "inloop_norm_scope": "inloop", "inloop_norm": "paper"}


def _batch(fatal: dict[int, int]) -> DataProto:
    """``fatal``: row -> its fatal step (0-based); row 9 copies row 1's."""
    if 1 in fatal:
        fatal = {**fatal, 9: fatal[1]}
    n, t = len(SCORES), len(GEN)
    mask = torch.tensor([GEN] * n, dtype=torch.float32)
    tlr = torch.zeros(n, t)
    tlr[:, t - 2] = torch.tensor(SCORES)  # the outcome reward on the last generated token
    col = lambda f: np.array([f(i) for i in range(n)], dtype=object)  # noqa: E731
    return DataProto.from_dict(
        tensors={"token_level_rewards": tlr, "response_mask": mask},
        non_tensors={
            "uid": np.array(UIDS, dtype=object),
            ROLE_KEY: np.array(ROLES, dtype=object),
            "fatal_step": col(lambda i: fatal.get(i)),
            "fatal_from": col(lambda i: STARTS[fatal[i]] if i in fatal else None),
        },
    )


def _run(fatal: dict[int, int], mode: FatalMode, algo: dict = ALGO) -> tuple[DataProto, dict]:
    b = _batch(fatal)
    hybrid_advantages(b, OmegaConf.create(algo), {})
    return b, apply_fatal(b, mode)


def _per_row(b: DataProto) -> list[float]:
    return [float(b.batch["advantages"][i, 0]) for i in range(len(b))]


def test_no_fatal_row_is_vanilla_grpo_bit_for_bit():
    off, metrics = _run({}, FatalMode.OFF)
    assert metrics == {}
    # the out-of-loop rows are verl's own GRPO (the in-loop ones the recipe's global normalisation), untouched; the
    # trained padding copy keeps its uid and joins its group, as in the fork
    idx = [0, 1, 2, 3, 4, 5, 9]
    sub = _batch({})
    verl_adv, _ = compute_grpo_outcome_advantage(
        sub.batch["token_level_rewards"][idx], sub.batch["response_mask"][idx], np.array(UIDS)[idx]
    )
    assert torch.equal(off.batch["advantages"][idx], verl_adv)
    for mode in FatalMode:
        b, m = _run({}, mode)
        for key in ("advantages", "returns", "response_mask"):
            assert torch.equal(b.batch[key], off.batch[key]), (mode, key)
        if mode is not FatalMode.OFF:
            assert m == {
                "vsearch/fatal_rows": 0.0,
                "vsearch/fatal_ratio": 0.0,
                "vsearch/fatal_masked_tokens": 0.0,
                "vsearch/fatal_clamped_rows": 0.0,
            }


def test_fatal_rows_above_and_below_the_mean_against_the_equations():
    """g0: row 0 (1.0, above the group mean 0.44) and row 1 (0.2, below) are fatal; in-loop: row 7 (0.2, below the
    in-loop mean 0.4) is fatal, its sibling call row 6 (episode A) is not. Every row enters its statistics."""
    fatal = {0: 2, 1: 1, 7: 0}
    off, _ = _run({}, FatalMode.OFF)
    b, m = _run(fatal, FatalMode.FATAL_MASK_CLAMP)
    got = _per_row(b)
    # the equations, group by group: out-of-loop groups of n, the in-loop rows as one population
    flags = [i in fatal for i in range(10)]
    g0 = [0, 1, 2, 3, 9]  # the trained padding copy of row 1 is a member of g0 (as in the fork)
    want_g0 = group_advantages([SCORES[i] for i in g0], [flags[i] or i == 9 for i in g0], FatalMode.FATAL_MASK_CLAMP)
    want_in = group_advantages(SCORES[6:9], flags[6:9], FatalMode.FATAL_MASK_CLAMP)
    assert [got[i] for i in g0] == pytest.approx(want_g0, abs=1e-5)
    assert got[6:9] == pytest.approx(want_in, abs=1e-5)
    assert got[1] == 0.0 and _per_row(off)[1] < 0  # below the mean: clamped to 0
    assert got[0] == _per_row(off)[0] > 0  # above: unchanged
    assert got[7] == 0.0 and got[6] == _per_row(off)[6]  # the clamp is the call's own; its sibling keeps its own
    assert got[4:6] == [0.0, 0.0] and got[9] == 0.0  # equal rewards; the padding copy of row 1 is treated as row 1
    # masks: each fatal row from its fatal step on (observations stay 0), advantages 0 there; the others untouched
    mask = b.batch["response_mask"]
    for i in range(10):
        cut = STARTS[fatal[i]] if i in fatal else (STARTS[1] if i == 9 else None)
        want = [g if cut is None or t < cut else 0 for t, g in enumerate(GEN)]
        assert mask[i].tolist() == want, i
        assert (b.batch["advantages"][i][mask[i] == 0] == 0).all()
    assert m["vsearch/fatal_rows"] == 3.0 and m["vsearch/fatal_ratio"] == 3 / 9
    assert m["vsearch/fatal_clamped_rows"] == 3.0  # rows 1, 7 and the copy of 1
    # tokens taken out: row 0 step 2 (2), row 1 steps 1-2 (4) and its copy (4), row 7 all (6)
    assert m["vsearch/fatal_masked_tokens"] == 16.0


def test_all_fatal():
    fatal = dict.fromkeys(range(9), 1)
    off, _ = _run({}, FatalMode.OFF)
    b, m = _run(fatal, FatalMode.FATAL_MASK_CLAMP)
    assert _per_row(b) == [max(a, 0.0) for a in _per_row(off)]
    assert min(_per_row(b)) == 0.0 and max(_per_row(b)) > 0
    assert m["vsearch/fatal_ratio"] == 1.0


def test_the_fatal_mask_alone_and_the_hard_mask_baseline():
    fatal = {1: 1, 7: 0}
    off, _ = _run({}, FatalMode.OFF)
    only, _ = _run(fatal, FatalMode.FATAL_MASK)
    hard, m = _run(fatal, FatalMode.HARD_MASK)
    for b in (only, hard):  # no clamp: every advantage as under off, where its token is still trained
        trained = b.batch["response_mask"] > 0
        assert torch.equal(b.batch["advantages"][trained], off.batch["advantages"][trained])
    assert only.batch["response_mask"][1].tolist() == [1, 1, 0, 0, 0, 0, 0, 0, 0]
    # hard masking: a fatal row trains nothing, whatever its prefix; the others are untouched
    for i in (1, 7, 9):
        assert hard.batch["response_mask"][i].sum() == 0 and (hard.batch["advantages"][i] == 0).all()
    others = [i for i in range(10) if i not in (1, 7, 9)]
    assert torch.equal(hard.batch["response_mask"][others], off.batch["response_mask"][others])
    assert m["vsearch/fatal_clamped_rows"] == 0.0 and m["vsearch/fatal_masked_tokens"] == 18.0


# ----------------------------------------------------------------------------- a real multi-turn row of the agent loop
ERROR_BOX = (300, 200, 100, 50)  # an inverted box: the session answers with the zoom-in tool's error text


def _fatal_rollout(policy, image_path, boxes, k: int = 3, validate: bool = False):  # noqa: F811
    tok, _ = policy
    turns = iter(boxes)
    server = ScriptedServerManager(tok, lambda n_images, prompt: TOOL % next(turns))
    cfg = _config()
    cfg.vsearch.fatal = {"mode": "fatal_mask_clamp", "k": k}
    row = {
        "raw_prompt": [{"role": "user", "content": "the band"}],
        "extra_info": {"image_path": image_path, "description": "the band", "bboxes": [[60, 40, 300, 200]]},
        "data_source": "region",
        "reward_model": {"ground_truth": "", "style": "rule"},
        "uid": "u1",
    }
    if validate:
        row[VALIDATE_KEY] = True
    out = asyncio.run(_make(VSearcherAgentLoop, policy, server, cfg).run({"temperature": 1.0}, **row))
    return out, row, server


def test_a_real_row_is_stopped_at_its_fatal_step_and_masked_from_it(policy, image_path):  # noqa: F811
    """A vSearcher episode of the real agent loop (tiny Qwen2.5-VL tokenizer and processor): a valid crop, an isolated
    tool error, a valid crop, then K = 3 consecutive tool errors. The episode stops at the third of them (its tool
    response never shown); the fatal step is the first of the run (turn 3, not the isolated error); through verl's
    post-processing and the trainer's mask: every token from turn 3's first on is masked, the observations before it
    stay masked, the generated tokens before it stay trained."""
    good = (40, 30, 200, 150)
    out, row, server = _fatal_rollout(policy, image_path, [good, ERROR_BOX, good, ERROR_BOX, ERROR_BOX, ERROR_BOX])
    f = out.extra_fields
    assert len(server.calls) == 6 and f["fatal_step"] == 3 and f["search_status"] == "invalid"
    rows = _expand(policy, out, row)
    gen = rows.batch["response_mask"][0].tolist()
    start = f["fatal_from"]
    # the fatal step starts where the policy's 4th turn begins: after three turns and their tool responses
    spans, t = [], 0
    while t < len(gen):
        if gen[t] == 1:
            e = t
            while e < len(gen) and gen[e] == 1:
                e += 1
            spans.append((t, e))
            t = e
        else:
            t += 1
    assert len(spans) == 6 and spans[3][0] == start
    assert sum(gen[spans[5][1] :]) == 0 and rows.batch["attention_mask"][0, -len(gen) :][spans[5][1] :].sum() == 0
    rows.batch["advantages"] = torch.full_like(rows.batch["response_mask"], -0.5, dtype=torch.float32)
    rows.batch["returns"] = rows.batch["advantages"].clone()
    metrics = apply_fatal(rows, FatalMode.FATAL_MASK_CLAMP)
    masked = rows.batch["response_mask"][0].tolist()
    assert masked[:start] == gen[:start] and sum(masked[start:]) == 0
    assert sum(masked[:start]) == sum(e - s for s, e in spans[:3]) > 0  # the 3 turns of the prefix train
    assert all(m == 0 for m, g in zip(masked, gen) if g == 0)  # observations stay masked
    assert metrics["vsearch/fatal_masked_tokens"] == sum(e - s for s, e in spans[3:])
    assert (rows.batch["advantages"][0] == 0).all()  # -0.5 clamped to 0


def test_the_reward_of_a_fatal_episode_scores_its_valid_prefix_without_accuracy(policy, image_path):  # noqa: F811
    """A clean prefix (two valid crops), then K = 3 tool errors: r_format of the prefix (1), no box (r_IoU 0), the
    tool gate of the prefix's crops: 0.2 under both variants. With an isolated error in the prefix its format fails
    (the fork's rule: every turn a valid call): 0. Fatal at the first turn: nothing valid, 0."""
    from recipe.vsearch.reward_fn import compute_score

    good, other = (40, 30, 200, 150), (100, 60, 260, 200)
    cases = [
        ([good, other, ERROR_BOX, ERROR_BOX, ERROR_BOX], 2, 0.2),
        ([good, ERROR_BOX, other, ERROR_BOX, ERROR_BOX, ERROR_BOX], 3, 0.0),
        ([ERROR_BOX, ERROR_BOX, ERROR_BOX], 0, 0.0),
    ]
    for boxes, step, score in cases:
        out, row, _ = _fatal_rollout(policy, image_path, boxes)
        info = {**row["extra_info"], **out.extra_fields}
        assert info["fatal_step"] == step and info["pred_box"] is None
        for variant in ("original", "paper"):
            r = compute_score("region", "", "", info, variant=variant)
            assert r["score"] == pytest.approx(score) and r["r_iou"] == 0.0, (boxes, variant, r)


def test_k_larger_than_the_episode_never_stops_it_and_validation_runs_to_the_end(policy, image_path):  # noqa: F811
    """K = 7 > the 6 tool calls an episode may make: the session's own limit ends it, not fatal. A validation rollout
    is never stopped (it measures what evaluation would)."""
    out, _, server = _fatal_rollout(policy, image_path, [ERROR_BOX] * 7, k=7)
    assert out.extra_fields.get("fatal_step") is None and len(server.calls) == 7
    out, _, server = _fatal_rollout(policy, image_path, [ERROR_BOX] * 7, k=1, validate=True)
    assert out.extra_fields.get("fatal_step") is None and len(server.calls) == 7
    out, _, server = _fatal_rollout(policy, image_path, [ERROR_BOX] * 7, k=1)  # the same rollout in training: K = 1
    assert out.extra_fields["fatal_step"] == 0 and len(server.calls) == 1
