"""The Table 3 ablations as switches (the paper's text calls the table "Table 4"), named as in the authors' fork,
and one override script per row (``verl/recipe/vsearch/ablations/<row>.sh``): each switch changes exactly the
quantity it names and nothing else, under both ``vsearch.variant`` values.

* ``vsearch.reward.reward_type=basic_weighted_addition`` ("w/o tool cond."): only ``score`` changes, to
  ``λ_format r_format + λ_tool gate + λ_IoU r_IoU`` (the fork's ``Score``);
* ``vsearch.reward.pseudo_iou_reward_type`` ("w/o feedback" / "w/o outcome"): only an in-loop sample's ``r_iou``
  (and so its ``score``) changes, to ``1[c]`` / ``1[s]``;
* ``algorithm.subagent_advantage_estimator=no_global_norm`` ("w/o GN"): only in-loop advantages change, to the
  raw rewards; ``broadcast``: to the GRPO advantage of the episode's answer within its QA item.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from insight_o3.protocol.fatal import FatalMode
from insight_o3.protocol.rewards import RewardRules, trajectory_reward
from tests.support.recipe_env import entry_point_recorder
from tests.support.stacks import REPO

RECIPE = REPO / "verl" / "recipe" / "vsearch"
ABLATIONS = RECIPE / "ablations"
FRAME = (1000, 800)
IMAGE = (2000, 1600)
GT = [(200, 200, 400, 400)]


def _cases():
    """Episodes of every kind: in/out of loop, format ok/failed, with/without crops, a repeated view, (s, c)."""
    crops = {"none": [], "one": [(100, 100, 300, 300)], "repeat": [(0, 0, 990, 800)]}
    for in_loop, fmt, kind in itertools.product((False, True), (True, False), crops):
        n_tool = len(crops[kind])
        if in_loop:
            for s, c in itertools.product((True, False, None), (True, False)):
                yield dict(in_loop=True, n_tool=n_tool, format_ok=fmt, crop_boxes=crops[kind], helpful=s, correct=c)
        else:
            for box in ((200, 200, 400, 400), (190, 190, 420, 410), (0, 0, 0, 0)):
                yield dict(
                    in_loop=False,
                    n_tool=n_tool,
                    format_ok=fmt,
                    crop_boxes=crops[kind],
                    pred_box=box,
                    gt_boxes=GT,
                    image_size=IMAGE,
                )


def _score(rules: RewardRules, case: dict):
    return trajectory_reward(rules, frame_size=FRAME, format_error=None if case["format_ok"] else "bad", **case)


def _diff(a, b) -> set[str]:
    da, db = dataclasses.asdict(a), dataclasses.asdict(b)
    return {k for k in da if da[k] != db[k]}


@pytest.mark.parametrize("variant", ["original", "paper"])
def test_reward_type_changes_only_the_score(variant):
    base, ablated = RewardRules(variant=variant), RewardRules(variant=variant, reward_type="basic_weighted_addition")
    changed = 0
    for case in _cases():
        a, b = _score(base, case), _score(ablated, case)
        assert _diff(a, b) <= {"score"}, case
        w = base.weights
        assert b.score == pytest.approx(w.format * b.r_format + w.tool * b.tool_gate + w.iou * b.r_iou)
        assert a.score == pytest.approx(a.tool_gate * (w.format * a.r_format + w.iou * a.r_iou))
        changed += a.score != pytest.approx(b.score)
    assert changed > 10
    # the fork: an in-loop sample whose format failed keeps its pseudo IoU (set after scoring) -> 0.8 without the
    # gate (original: the gate needs the format); paper's gate is 1[n_tool > 0] alone -> 1.0 + 0.8
    case = dict(in_loop=True, n_tool=1, format_ok=False, crop_boxes=[(100, 100, 300, 300)], helpful=True, correct=True)
    assert _score(ablated, case).score == pytest.approx(0.8 if variant == "original" else 1.8)


@pytest.mark.parametrize("variant", ["original", "paper"])
@pytest.mark.parametrize(
    "kind,want",
    [("outcome_no_caller_feedback", lambda s, c: c is True), ("caller_feedback_no_outcome", lambda s, c: s is True)],
)
def test_pseudo_iou_type_changes_only_the_in_loop_pseudo_reward(variant, kind, want):
    base, ablated = RewardRules(variant=variant), RewardRules(variant=variant, pseudo_iou_reward_type=kind)
    for case in _cases():
        a, b = _score(base, case), _score(ablated, case)
        if not case["in_loop"]:
            assert a == b, case
            continue
        assert _diff(a, b) <= {"r_iou", "score"}, case
        assert b.r_iou == float(want(case["helpful"], case["correct"]))
        assert a.r_iou == float(case["helpful"] is True and case["correct"] is True)
        assert b.score == pytest.approx(b.tool_gate * (0.2 * b.r_format + 0.8 * b.r_iou))


def test_bad_switch_values_are_errors():
    with pytest.raises(ValueError, match="reward_type must be one of"):
        RewardRules(reward_type="additive")
    with pytest.raises(ValueError, match="pseudo_iou_reward_type must be one of"):
        RewardRules(pseudo_iou_reward_type="feedback")


# ----------------------------------------------------------------------------- advantages
def test_subagent_estimator_changes_only_in_loop_advantages():
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    pytest.importorskip("verl")
    sys.path.insert(0, str(REPO / "verl"))
    from recipe.vsearch.hybrid_advantage import compute_vsearch_hybrid_advantage, inloop_uid

    scores = [1.0, 0.2, 0.5, 0.9, 1.0, 0.2, 0.0]
    uids = ["g", "g", "h", "h", inloop_uid("q1-0", 0), inloop_uid("q1-0", 1), inloop_uid("q1-1", 0)]
    eps = ["", "", "", "", "q1-0", "q1-0", "q1-1"]
    outcomes = {"q1-0": ("q1", True), "q1-1": ("q1", False), "q1-2": ("q1", False)}  # q1-2: no call (placeholder)
    mask = torch.ones(len(scores), 3)
    tlr = torch.zeros(len(scores), 3)
    tlr[:, -1] = torch.tensor(scores)

    def run(kind, norm="original", gate=None):
        cfg = {"subagent_advantage_estimator": kind, "inloop_norm": norm}
        adv, _ = compute_vsearch_hybrid_advantage(
            tlr,
            mask,
            index=np.array(uids, dtype=object),
            config=cfg,
            episode_ids=np.array(eps, dtype=object),
            episode_correct=outcomes,
            tool_gate=gate,
        )
        return adv[:, 0]

    gn = run("global_norm")
    s = torch.tensor(scores[4:])
    assert gn[4:].tolist() == pytest.approx(((s - s.mean()) / (s.std(correction=0) + 1e-6)).tolist(), abs=1e-5)
    gn1 = run("global_norm", norm="paper")  # paper: unbiased std
    assert gn1[4:].tolist() == pytest.approx(((s - s.mean()) / (s.std() + 1e-6)).tolist(), abs=1e-5)
    raw = run("no_global_norm")
    assert torch.equal(raw[:4], gn[:4]) and raw[4:].tolist() == pytest.approx(scores[4:])
    # broadcast: GRPO of c over the item's 3 episodes (1, 0, 0): mean 1/3, unbiased std sqrt(1/3)
    b = run("broadcast")
    hi, lo = (1 - 1 / 3) / ((1 / 3) ** 0.5 + 1e-6), (0 - 1 / 3) / ((1 / 3) ** 0.5 + 1e-6)
    assert torch.equal(b[:4], gn[:4]) and b[4:].tolist() == pytest.approx([hi, hi, lo], abs=1e-5)
    bt = run("broadcast_tool_only", gate=np.array([1, 1, 1, 1, 1.0, 0.0, 1.0]))
    assert bt[4:].tolist() == pytest.approx([hi, 0.0, lo], abs=1e-5)
    with pytest.raises(ValueError, match="subagent_advantage_estimator must be one of"):
        run("broadcast_root")


# ----------------------------------------------------------------------------- the override scripts
ROWS = {
    "wo_tool_cond": ["vsearch.reward.reward_type=basic_weighted_addition"],
    "wo_feedback": ["vsearch.reward.pseudo_iou_reward_type=outcome_no_caller_feedback"],
    "wo_outcome": ["vsearch.reward.pseudo_iou_reward_type=caller_feedback_no_outcome"],
    "wo_gn": ["algorithm.subagent_advantage_estimator=no_global_norm"],
    "in_loop_only": [
        "++data.batch_sampler.weights.info_vqa_region_localization=0",
        "++data.batch_sampler.weights.visual_cot_vstar_collage=1",
    ],
    "out_of_loop_only": [
        "++data.batch_sampler.weights.info_vqa_region_localization=1",
        "++data.batch_sampler.weights.visual_cot_vstar_collage=0",
    ],
    # fatal-aware GRPO (OpenSearch-VL's ablation rows; tests/recipe/test_fatal_grpo.py)
    "fatal_aware": ["vsearch.fatal.mode=fatal_mask_clamp"],
    "fatal_mask_only": ["vsearch.fatal.mode=fatal_mask"],
    "hard_mask": ["vsearch.fatal.mode=hard_mask"],
}


def _argv(script: Path, tmp_path: Path, *extra: str) -> list[str]:
    """The overrides ``script`` hands the recipe's entry point (``PYTHON`` replaced by a recorder)."""
    rec, log = entry_point_recorder(tmp_path)
    env = {
        **os.environ,
        "VERL_PROJ_DIR": str(REPO / "verl"),
        "MODEL_PATH": "m",
        "WORK_DIR": str(tmp_path / "w"),
        "PROJECT_NAME": "p",
        "EXP_NAME": "e",
        "API_MODEL_FOR_AGENT": "gpt-5-mini",
        "JUDGE_MODEL": "gpt-5-nano",
        "TRAIN_FILES": "/d/t.parquet",
        "VAL_FILES": "/d/v.parquet",
        "PYTHON": str(rec),
        "DRY_RUN": "1",
    }
    r = subprocess.run(["bash", str(script), *extra], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return log.read_text().splitlines()


def test_every_row_has_one_script_adding_exactly_its_switch(tmp_path):
    assert sorted(p.stem for p in ABLATIONS.glob("*.sh")) == sorted(ROWS)
    base = _argv(RECIPE / "train.sh", tmp_path)
    for row, overrides in ROWS.items():
        got = _argv(ABLATIONS / f"{row}.sh", tmp_path, "vsearch.variant=paper")
        assert got == base + overrides + ["vsearch.variant=paper"], row


@pytest.mark.parametrize("variant", ["original", "paper"])
def test_every_row_composes_and_validates(variant):
    """Each script's overrides on top of train.sh's compose with the recipe YAML and pass the start-up checks."""
    pytest.importorskip("verl")
    sys.path.insert(0, str(REPO / "verl"))
    from hydra import compose, initialize_config_dir

    from recipe.vsearch.settings import RunSettings

    base = [
        f"vsearch.agent_config_path={RECIPE / 'config' / 'agent_gpt-5-mini.yaml'}",
        f"vsearch.variant={variant}",
        "+data.batch_sampler.weights.info_vqa_region_localization=0.5",
        "+data.batch_sampler.weights.visual_cot_vstar_collage=0.5",
    ]
    with initialize_config_dir(config_dir=str(RECIPE / "config"), version_base=None):
        ref_cfg = compose(config_name="qwen_2_5_vl_7b_async", overrides=base)
        ref = RunSettings.from_config(ref_cfg)
        for row, overrides in ROWS.items():
            cfg = compose(config_name="qwen_2_5_vl_7b_async", overrides=base + overrides)
            s = RunSettings.from_config(cfg)
            assert s.variant == variant and s.protocol == ref.protocol
            reward_edits = {
                o.split("=")[0].rsplit(".", 1)[1]: o.split("=")[1] for o in overrides if o.startswith("vsearch.reward.")
            }
            assert s.reward == dataclasses.replace(ref.reward, **reward_edits), row
            estimator = cfg.algorithm.subagent_advantage_estimator
            assert estimator == ("no_global_norm" if row == "wo_gn" else "global_norm")
            weights = dict(cfg.data.batch_sampler.weights)
            assert sorted(weights.values()) == ([0, 1] if row.endswith("loop_only") else [0.5, 0.5]), row
            fatal = [o.split("=")[1] for o in overrides if o.startswith("vsearch.fatal.mode=")]
            assert s.fatal == dataclasses.replace(ref.fatal, **({"mode": fatal[0]} if fatal else {})), row
            assert s.fatal.fatal_mode is FatalMode(fatal[0] if fatal else "off"), row
            assert ref.fatal.fatal_mode is FatalMode.OFF and ref.fatal.k == 3
