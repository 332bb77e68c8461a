"""The training protocol against goldens recorded by running the authors' verl fork (926d137).

``tests/golden/training/*.json`` hold generated cases and the fork's outputs (how they were recorded:
``tests/golden/README.md``; the recorder is ``tests/golden/record_training_goldens.py``). Each test feeds the
same inputs to this project's code, the way the recipe does, and compares:

* ``resize_bbox.json``: a box of the model frame mapped to original pixels (the fork's ``resize_bbox``);
* ``zoom_tool.json``: the zoom-in tool on one ``bbox_2d`` (crop or error text, crop region and the size shown);
* ``episodes.json``: whole vSearcher episodes through :class:`SearcherSession` (the format verdict, the crops)
  and ``recipe.vsearch.reward_fn.compute_score`` (every reward term), out-of-loop and in-loop, for each fork
  ``reward_type`` and ``pseudo_iou_reward_type``; the in-loop calls also in the same batch without any caller
  feedback, through ``recipe.vsearch.episodes.withhold_pseudo_iou`` (the fork's batch rule);
* ``vreasoner.json``: the answer span of a vReasoner's final message that the judge sees;
* ``advantages.json``: ``vsearch_hybrid_grpo`` against the fork's ``compute_advantage`` (GRPO groups and each
  ``subagent_advantage_estimator``).

A case that does not match yet is ``xfail(strict=True)`` with the rule it breaks (:data:`DIFFERENCES`): it turns
into a failure the moment the rule is fixed, and its entry is then removed. Entries marked ``deliberate`` are
differences kept on purpose, with the reason.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from insight_o3.agents import SearcherSession
from insight_o3.imaging.images import ImageStore
from insight_o3.protocol.parsing import extract_verify_span
from tests.support.stacks import add_recipe_path

add_recipe_path()

from recipe.vsearch.policy_searcher import SearcherRollout  # noqa: E402
from recipe.vsearch.protocols import PROTOCOLS  # noqa: E402
from recipe.vsearch.reward_fn import compute_score  # noqa: E402
from recipe.vsearch.rollout_fields import ROLE_INLOOP, ROLE_OUTLOOP, EpisodeStats  # noqa: E402

GOLDEN = Path(__file__).parents[1] / "golden" / "training"
TOL = 1e-6


@cache
def golden(name: str) -> dict:
    return json.loads((GOLDEN / name).read_text())


def cases(name: str) -> list[dict]:
    return golden(name)["cases"]


# ----------------------------------------------------------------------------- known differences
#: rule -> {"reason", "ids", optional "deliberate"}: the cases that do not match yet, by the fork rule they show
#: (tests/golden/training/differences.json; an id leaves its list when its rule is fixed: strict xfail says when)
DIFFERENCES: dict[str, dict] = json.loads((GOLDEN / "differences.json").read_text())


def params(items: list[tuple[str, Any]]) -> list:
    out = []
    for pid, case in items:
        hit = [(rule, d) for rule, d in DIFFERENCES.items() if pid in d["ids"]]
        reason = "; ".join(("deliberate: " if d.get("deliberate") else "") + d["reason"] for _rule, d in hit)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if hit else []
        out.append(pytest.param(case, id=pid, marks=marks))
    return out


def test_differences_name_existing_cases():
    """Every id listed as a known difference is a case of the goldens (a stale id would mark nothing)."""
    ids = {c["id"] for name in ("resize_bbox.json", "zoom_tool.json", "vreasoner.json") for c in cases(name)}
    ids |= {p.id for p in EPISODE_PARAMS} | {p.id for p in ADVANTAGE_PARAMS}
    stale = {rule: sorted(set(d["ids"]) - ids) for rule, d in DIFFERENCES.items() if set(d["ids"]) - ids}
    assert not stale


def close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    return math.isclose(float(a), float(b), rel_tol=TOL, abs_tol=TOL)


# ----------------------------------------------------------------------------- images (headers only are read)
@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[ImageStore, Path]:
    return ImageStore(workers=1), tmp_path_factory.mktemp("golden_images")


def image_of(store: tuple[ImageStore, Path], wh: list[int]) -> str:
    path = store[1] / f"{wh[0]}x{wh[1]}.png"
    if not path.exists():
        Image.new("1", tuple(wh)).save(path)  # 1-bit: cheap to write; the session reads the size from the header
    return str(path)


# ----------------------------------------------------------------------------- box rounding
def project_answer_box(case: dict, store) -> tuple[list[float] | None, str | None]:
    """A model-frame answer box in original pixels, as the vSearcher maps it (``SearcherSession``): the box, or
    None and the session's error."""
    sess = SearcherSession(
        image_of(store, case["image_ori_wh"]), "target", store[0], case["max_pixels"], "trained", max_tool_calls=6
    )
    assert list(sess.frame.size) == case["image_processed_wh"]
    sess.step(f"<think>found</think>\n<answer>{json.dumps(case['box'])}</answer>", "stop")
    result = sess.result()
    return (list(result.box_original), None) if result.box_original is not None else (None, result.error)


@pytest.mark.parametrize("case", params([(c["id"], c) for c in cases("resize_bbox.json")]))
def test_resize_bbox(case, store):
    got, error = project_answer_box(case, store)
    if case["fork"]["error"] is not None:
        # rounding collapsed a side: the fork's validate_bbox raises (the training step stops); here the box is
        # empty once clamped and scores IoU 0 (docs/fidelity.md, "answer/crop boxes")
        assert got is None or not (got[0] < got[2] and got[1] < got[3]), got
        return
    assert got == case["fork"]["box"], error


# ----------------------------------------------------------------------------- zoom-in tool
@pytest.mark.parametrize("case", params([(c["id"], c) for c in cases("zoom_tool.json")]))
def test_zoom_tool(case, store):
    sess = SearcherSession(
        image_of(store, case["image_ori_wh"]), "target", store[0], case["max_pixels"], "trained", max_tool_calls=6
    )
    assert list(sess.frame.size) == case["image_processed_wh"]
    call = {"name": "image_zoom_in_tool", "arguments": {"bbox_2d": case["bbox_2d"]}}
    step = sess.step(f"<think>zoom</think>\n<tool_call>\n{json.dumps(call)}\n</tool_call>", "stop")
    fork = case["fork"]
    assert (step.crop is not None) == fork["success"], (step, fork["text"])
    if not fork["success"]:
        assert not step.done, "the fork answers an unusable box with an error text and the episode goes on"
        assert fork["text"] in json.dumps(sess.messages[-1])
        return
    assert list(step.crop.size) == fork["shown_wh"]
    crop = [round(v) for v in fork["box_in_tool_image"]]  # PIL crops at the rounded box
    if fork["tool_image_wh"] == case["image_ori_wh"]:
        assert list(step.crop.region) == crop
    else:  # the fork's tool holds qwen's fetch_image copy of the original (sides rounded to multiples of 28)
        (w, h), (fw, fh) = case["image_ori_wh"], fork["tool_image_wh"]
        scaled = [v * (w / fw, h / fh)[i % 2] for i, v in enumerate(crop)]
        assert all(abs(a - b) <= 2.0 for a, b in zip(step.crop.region, scaled)), (step.crop.region, scaled)


# ----------------------------------------------------------------------------- episodes and rewards
REWARD_CONFIGS_OUT = [("conditioned_on_tool_reward", "caller_feedback"), ("basic_weighted_addition", "caller_feedback")]
REWARD_CONFIGS_IN = [
    (rt, pt)
    for rt in ("conditioned_on_tool_reward", "basic_weighted_addition")
    for pt in ("caller_feedback", "caller_feedback_no_outcome", "outcome_no_caller_feedback")
]


def project_episode(case: dict, store) -> SearcherRollout:
    """The episode as ``PolicySearcher.run`` plays it under ``vsearch.variant=original``: the session consumes each
    turn until it is done; a session still open after the last turn ran out of its budget before the tool response
    (``end_at_budget``, as the fork's loop ends it)."""
    frame = case["frame"]
    sess = SearcherSession(
        image_of(store, frame["image_ori_wh"]),
        "target",
        store[0],
        frame["max_pixels"],
        "trained",
        max_tool_calls=6,
        limit_reminder=PROTOCOLS["original"].searcher_limit_reminder,
    )
    assert list(sess.frame.size) == frame["image_processed_wh"]
    _SESSIONS[case["id"]] = sess
    for turn in case["turns"]:
        if sess.done:
            break
        sess.step(turn["text"], turn["finish"])
    if not sess.done:  # the fork's loop stops before the tool response that no longer fits (original)
        sess.end_at_budget("response budget used up", drop_tool_response=True)
    result = sess.result()
    crops = [[float(v) for v in t.bbox_raw] for t in sess.turns if t.action == "tool_call" and t.bbox_raw is not None]
    return SearcherRollout(
        [],
        [],
        [],
        None,
        [],
        result,
        [t["text"] for t in case["turns"]],
        tuple(sess.frame.size),
        bool(result.format_ok),
        None if result.format_ok else (result.error or "format check failed"),
        crop_boxes=crops,
        image_size=tuple(sess.original_size),
    )


_ROLLOUTS: dict[str, SearcherRollout] = {}  # one session per episode, shared by its reward configurations
_SESSIONS: dict[str, SearcherSession] = {}


def project_reward(case: dict, store, reward_type: str, pseudo: str, unrated: bool = False) -> dict:
    """The reward ``compute_score`` gives the case alone; ``unrated``: an in-loop call without caller feedback."""
    if case["id"] not in _ROLLOUTS:
        _ROLLOUTS[case["id"]] = project_episode(case, store)
    rollout = _ROLLOUTS[case["id"]]
    if case["role"] == "outloop":
        fields = rollout.sample_fields(bboxes=case["gt"], role=ROLE_OUTLOOP)
    else:
        fb = None if unrated else case["caller_feedback"]
        correct = case["root_accuracy"] == 1.0
        stats = EpisodeStats.of(
            "golden", n_calls=1, has_answer=True, correct=correct, critical_failure=False, status="answer", n_feedback=1
        )
        fields = rollout.sample_fields(
            is_in_loop=True,
            feedback_helpful=None if fb is None else fb == "helpful",
            answer_correct=correct,
            call_index=0,
            feedback=fb,
            role=ROLE_INLOOP,
            critical_failure=False,
            episode=stats,
        )
    kwargs: dict[str, Any] = {"variant": "original"}
    if reward_type != "conditioned_on_tool_reward":
        kwargs["reward_type"] = reward_type
    if pseudo != "caller_feedback":
        kwargs["pseudo_iou_reward_type"] = pseudo
    return compute_score("vsearch_golden", "", "", fields.to_extra_fields(), **kwargs)


EPISODE_PARAMS = params(
    [
        (
            f"{c['id']}-{rt}-{pt}" if c["role"] == "inloop" else f"{c['id']}-{rt}",
            {"case": c, "reward_type": rt, "pseudo": pt},
        )
        for c in cases("episodes.json")
        for rt, pt in (REWARD_CONFIGS_OUT if c["role"] == "outloop" else REWARD_CONFIGS_IN)
    ]
)


@pytest.mark.parametrize("item", EPISODE_PARAMS)
def test_episode_reward(item, store):
    case, rt, pt = item["case"], item["reward_type"], item["pseudo"]
    fork = case["fork"][f"{rt}|{pt}"]
    got = project_reward(case, store, rt, pt)
    assert got["r_format"] == fork["format_reward"], ("format verdict", got["format_error"])
    assert got["tool_gate"] == fork["tool_reward"], "tool reward"
    assert close(got["r_iou"], fork["iou_reward"]), "iou reward"
    if case["role"] == "outloop" and fork["format_reward"] and fork["extracted_answer"] not in (None, [0, 0, 0, 0]):
        assert close(got["iou"], fork["final_iou"]), "IoU of the answer"
    assert close(got["score"], fork["score"]), "score"


@pytest.mark.parametrize("case", params([(c["id"], c) for c in cases("episodes.json")]))
def test_episode_text(case, store):
    """The decoded response the fork's reward reads (its loop renders each tool turn on its own, so the normal
    reminder follows even the 6th crop) is the session's ``solution_text`` under ``vsearch.variant=original``."""
    if case["id"] not in _ROLLOUTS:
        _ROLLOUTS[case["id"]] = project_episode(case, store)
    sess = _SESSIONS[case["id"]]
    assert len(sess.turns) == len(case["turns"]), "the session ends on the turn the fork's loop ends on"
    assert sess.solution_text().rstrip("\n") == case["solution_str"].rstrip("\n")


UNRATED_PARAMS = params(
    [
        (f"{c['id']}-{rt}-{pt}-unrated", {"case": c, "reward_type": rt, "pseudo": pt})
        for c in cases("episodes.json")
        if c["role"] == "inloop"
        for rt, pt in REWARD_CONFIGS_IN
    ]
)


@pytest.fixture(scope="module")
def unrated_batch(store):
    """The recorded batch with no caller feedback anywhere, as the recipe trains it: every in-loop case scored alone
    by ``compute_score``, then ``withhold_pseudo_iou`` (the fork's batch rule) on the rollout of all of them.
    Returns ``(reward_type, pseudo) -> case id -> reward columns``."""
    from tests.support.stacks import require_recipe

    require_recipe()
    from recipe.vsearch.episodes import ROLE_KEY, withhold_pseudo_iou
    from recipe.vsearch.reward_fn import rules_from_kwargs
    from tests.support.reward_batch import reward_loop_batch

    inloop = [c for c in cases("episodes.json") if c["role"] == "inloop"]
    out: dict[tuple[str, str], dict[str, dict]] = {}
    for rt, pt in REWARD_CONFIGS_IN:
        scores = [project_reward(c, store, rt, pt, unrated=True) for c in inloop]
        samples = [{"feedback_helpful": None, ROLE_KEY: ROLE_INLOOP} for _c in inloop]
        batch = reward_loop_batch(samples, scores, columns=("feedback_helpful", ROLE_KEY))
        withhold_pseudo_iou(batch, rules_from_kwargs(variant="original", reward_type=rt, pseudo_iou_reward_type=pt))
        nt, rm = batch.non_tensor_batch, batch.batch["rm_scores"].sum(-1).tolist()
        out[(rt, pt)] = {
            c["id"]: {k: nt[k][i] for k in ("r_format", "tool_gate", "r_iou", "score")} | {"rm_score": rm[i]}
            for i, c in enumerate(inloop)
        }
    return out


@pytest.mark.parametrize("item", UNRATED_PARAMS)
def test_episode_reward_in_a_batch_without_feedback(item, unrated_batch):
    """The fork sets no pseudo IoU when no row of its reward batch has a caller feedback (``vsearch_batch.py:695``)."""
    case, rt, pt = item["case"], item["reward_type"], item["pseudo"]
    fork = case["fork_unrated_batch"][f"{rt}|{pt}"]
    got = unrated_batch[(rt, pt)][case["id"]]
    assert got["r_format"] == fork["format_reward"], "format verdict"
    assert got["tool_gate"] == fork["tool_reward"], "tool reward"
    assert close(got["r_iou"], fork["iou_reward"]), "iou reward"
    assert close(got["score"], fork["score"]), "score"
    assert close(got["rm_score"], fork["score"]), "score in rm_scores"


# ----------------------------------------------------------------------------- vReasoner answer span
@pytest.mark.parametrize("case", params([(c["id"], c) for c in cases("vreasoner.json")]))
def test_vreasoner_answer_span(case):
    span = extract_verify_span(case["text"])
    fork = case["fork_root"]
    assert span == fork["extracted_answer"] or (span is None and fork["extracted_answer"] in (None, ""))
    assert float(bool(span)) == fork["format_reward"]


# ----------------------------------------------------------------------------- advantages
SUBAGENT_ESTIMATORS = ("None", "broadcast", "broadcast_tool_only", "global_norm", "no_global_norm")


@pytest.fixture(scope="module")
def hybrid():
    from tests.support.stacks import require_recipe

    require_recipe()
    import torch

    from recipe.vsearch.hybrid_advantage import compute_vsearch_hybrid_advantage, inloop_uid

    return torch, compute_vsearch_hybrid_advantage, inloop_uid


def project_advantages(case: dict, estimator: str, by_std: bool, hybrid) -> dict[int, list[float]]:
    """The rows this project trains (out-of-loop vSearcher rows in their uid groups, in-loop vSearcher calls) through
    ``vsearch_hybrid_grpo``; vReasoner rows (an API model here) are not in the batch: what ``broadcast`` needs of them
    goes in as each episode's QA group and judged correctness. Returns row index -> advantages."""
    torch, estimate, inloop_uid = hybrid
    rows = [(i, r) for i, r in enumerate(case["rows"]) if r["agent_name"] == "vsearcher"]
    T = case["T"]
    mask, rewards, uids = torch.zeros(len(rows), T), torch.zeros(len(rows), T), []
    for j, (i, r) in enumerate(rows):
        mask[j, : r["length"]] = 1
        rewards[j, r["length"] - 1] = r["score"]
        uids.append(r["uid"] if r["job_id"] == r["root_job_id"] else inloop_uid(r["root_job_id"], i))
    episodes = {r["job_id"]: (r["uid"], r["score"] == 1.0) for r in case["rows"] if r["agent_name"] == "vreasoner"}
    config: dict[str, Any] = {"norm_adv_by_std_in_grpo": by_std}
    if estimator != "global_norm":
        config["subagent_advantage_estimator"] = None if estimator == "None" else estimator
    adv, _ = estimate(
        rewards,
        mask,
        index=uids,
        config=config,
        episode_ids=np.array([r["root_job_id"] for _i, r in rows], dtype=object),
        episode_correct=episodes,
        tool_gate=np.array([r["tool_reward"] for _i, r in rows], dtype=float),
    )
    return {i: adv[j].tolist() for j, (i, _r) in enumerate(rows)}


ADVANTAGE_PARAMS = params(
    [
        (f"{c['id']}-{est}-{'std' if by_std else 'nostd'}", {"case": c, "estimator": est, "by_std": by_std})
        for c in cases("advantages.json")
        for est in SUBAGENT_ESTIMATORS
        for by_std in (True, False)
    ]
)


@pytest.mark.parametrize("item", ADVANTAGE_PARAMS)
def test_advantages(item, hybrid):
    case = item["case"]
    fork = case["fork"][f"{item['estimator']}|{item['by_std']}"]
    got = project_advantages(case, item["estimator"], item["by_std"], hybrid)
    by_job = {r["job_id"]: r for r in case["rows"]}
    for i, adv in got.items():
        row = case["rows"][i]
        n = row["length"]
        if item["estimator"].startswith("broadcast") and row["job_id"] != row["root_job_id"]:
            # deliberate: the fork copies its vReasoner row token by token (adv_new[idx] = advantages[root_idx]), so
            # a call's tokens past the vReasoner's response length get 0; here the vReasoner is an API model with no
            # token row, and every token of the call gets the episode's advantage
            n = min(n, by_job[row["root_job_id"]]["length"])
        assert close(adv[:n], fork[i][:n]), (i, row, adv[:n], fork[i][:n])


# ----------------------------------------------------------------------------- the sample stream
@pytest.mark.parametrize("case", params([(c["id"], c) for c in cases("sampler.json")]))
def test_sample_stream(case):
    """``vsearch.variant=original`` yields the fork's ``VSearchBatchSampler`` stream (recorded by running it) for
    the same rows, weights (in the order the fork took its sources), batch size and seed: two epochs, batch by
    batch. The recipe YAML's ``paper`` stream is another one."""
    from omegaconf import OmegaConf

    from recipe.vsearch.sampler import WeightedSourceSampler

    class Frame(dict):
        column_names = ["data_source"]

    class Rows:
        dataframe = Frame(data_source=case["sources"])

    weights = {k: case["weights"][k] for k in case["fork_order"]}
    weights |= {k: w for k, w in case["weights"].items() if k not in weights}
    proto = PROTOCOLS["original"]
    seed = case["seed"] if case["seed"] is not None else proto.sampler_seed
    data = {"train_batch_size": case["batch_size"], "batch_sampler": {"weights": weights, "seed": seed}}
    got = WeightedSourceSampler(
        Rows(), OmegaConf.create({**data, "batch_sampler": {**data["batch_sampler"], "stream": proto.sampler_stream}})
    )
    assert got.counts == case["fork_counts"]
    stream = [int(i) for i in got]
    stream += [int(i) for i in got]
    want = [i for epoch in case["fork"]["epochs"] for batch in epoch for i in batch]
    assert stream == want
    paper = PROTOCOLS["paper"]
    other = WeightedSourceSampler(
        Rows(), OmegaConf.create({**data, "batch_sampler": {**data["batch_sampler"], "stream": paper.sampler_stream}})
    )
    assert [int(i) for i in other] != want[: len(stream) // 2]
