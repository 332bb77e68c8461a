"""Exports of a finished run: its trajectories as Parquet (for SFT or rejection sampling) and a
leaderboard entry as JSON.

**Trajectories** — one row per (sample, trial), typed by :data:`TRAJECTORY_SCHEMA` so
``datasets.load_dataset("parquet", data_files=...)`` (or ``pyarrow.parquet.read_table``) loads
it as is. The conversation is ``messages``: chat messages whose ``content`` is a list of parts
``{"type": "text", "text": ..., "image": null}`` or ``{"type": "image", "text": null, "image": i}``,
``i`` indexing ``images`` — image *references* (source file, region in original pixels, size sent),
never pixels, exactly as in the records. Prompt texts that records store by name are written out.
Each vSearcher call is a row of ``searches`` (the vReasoner turn it answered, description, status,
boxes, the vSearcher's own ``messages``/``images``). Verdicts (``status``, ``extracted_answer``,
``judge_outputs`` …), the failure ``attribution`` (:mod:`.attribution`), token ``usage`` per role and
``cost_usd`` complete the row. ``question_id`` is written as text (benchmarks mix ints and strings).

**Leaderboard** — :func:`leaderboard`: accuracy with its interval overall and per category
(:mod:`.significance`: each sample's trials averaged, Wilson at the effective sample size), per-trial
accuracy and its standard deviation (the one convention, :func:`~insight_o3.evaluation.metrics.std_over_trials`:
ddof 0, as ``summary_metrics.json``), the items lost to API errors (left out unless counted as wrong; the
accuracy under the other rule beside), tokens per episode as ``compare`` counts them (model + vSearcher, the
judge's apart) and cost, the failure attribution and the sha256 of the run card, so an entry can always be
traced to the exact settings that produced it.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .. import __version__
from ..agents.records import expand_messages
from ..base.json_types import JSONObject
from ..endpoints.usage import merge, total_tokens
from ..evaluation.attribution import attribute, attribution_metrics, n_search_calls
from ..evaluation.metrics import TRIAL_STD_DDOF, std_over_trials
from ..evaluation.schema import USAGE_ROLES, EvalRecord, TokenUsage
from ..protocol.sample import row_fields
from ..protocol.statuses import VerdictStatus
from ..storage.atomic import atomic_writer
from .clusters import Cluster
from .comparison import tokens_per_episode
from .outcomes import outcomes
from .paired import run_accuracy
from .run_records import RunRecords
from .significance import DEFAULT_CONFIDENCE, METHODS

LEADERBOARD_FORMAT = "insight_o3.leaderboard/1"

_PART = pa.struct([("type", pa.string()), ("text", pa.string()), ("image", pa.int32())])
_MESSAGE = pa.struct([("role", pa.string()), ("content", pa.list_(_PART))])
_IMAGE = pa.struct([("path", pa.string()), ("region", pa.list_(pa.float64())), ("size", pa.list_(pa.int64()))])
_SEARCH = pa.struct(
    [
        ("turn", pa.int32()),
        ("description", pa.string()),
        ("status", pa.string()),
        ("box_original", pa.list_(pa.float64())),
        ("box_model", pa.list_(pa.float64())),
        ("n_tool_calls", pa.int64()),
        ("format_ok", pa.bool_()),
        ("error", pa.string()),
        ("messages", pa.list_(_MESSAGE)),
        ("images", pa.list_(_IMAGE)),
    ]
)
_COUNTS = pa.struct(
    [
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("reasoning_tokens", pa.int64()),
        ("requests", pa.int64()),
        ("unreported_requests", pa.int64()),  # replies without valid usage: the token counts are lower bounds
    ]
)
#: The columns of ``trajectories.parquet``.
TRAJECTORY_SCHEMA = pa.schema(
    [
        ("eval_name", pa.string()),
        ("run_card_sha256", pa.string()),
        ("sample_key", pa.string()),
        ("question_id", pa.string()),
        ("index", pa.int64()),
        ("trial", pa.int64()),
        ("category", pa.string()),
        ("image", pa.string()),
        ("image_path", pa.string()),
        ("question", pa.string()),
        ("options", pa.string()),
        ("answer", pa.string()),
        ("status", pa.string()),
        ("is_correct", pa.bool_()),
        ("has_answer", pa.bool_()),
        ("response", pa.string()),
        ("finish_reason", pa.string()),
        ("extracted_answer", pa.string()),
        ("judge_method", pa.string()),
        ("judge_outputs", pa.list_(pa.string())),
        ("fail_reason", pa.string()),
        ("fail_stage", pa.string()),
        ("attribution", pa.string()),
        ("blame", pa.string()),
        ("evidence_coverage", pa.float64()),
        ("n_search_calls", pa.int64()),
        ("messages", pa.list_(_MESSAGE)),
        ("images", pa.list_(_IMAGE)),
        ("searches", pa.list_(_SEARCH)),
        ("usage", pa.struct([(role, _COUNTS) for role in USAGE_ROLES])),
        ("cost_usd", pa.float64()),
        ("row", pa.string()),
    ]
)


def _boxf(v: Any) -> list[float] | None:
    return [float(x) for x in v] if isinstance(v, (list, tuple)) else None


def conversation(messages: list[JSONObject] | None) -> tuple[list[JSONObject], list[JSONObject]]:
    """``(messages, images)`` of a recorded conversation: text parts expanded, image parts as indices
    into ``images`` (the references in order of appearance)."""
    msgs, images = [], []
    for m in expand_messages(messages or []):
        c = m.get("content")
        parts: list[dict[str, Any]] = []
        if isinstance(c, str):
            parts.append({"type": "text", "text": c, "image": None})
        for p in c if isinstance(c, list) else []:
            if p.get("type") == "image" and isinstance(p.get("image"), dict):
                ref = p["image"]
                images.append(
                    {"path": str(ref.get("path")), "region": _boxf(ref.get("region")), "size": ref.get("size")}
                )
                parts.append({"type": "image", "text": None, "image": len(images) - 1})
            else:
                parts.append({"type": "text", "text": str(p.get("text", "")), "image": None})
        msgs.append({"role": str(m.get("role")), "content": parts})
    return msgs, images


def _searches(trajectory: list[JSONObject] | None) -> list[JSONObject]:
    out = []
    for i, m in enumerate(trajectory or []):
        s = m.get("search") if isinstance(m, dict) else None
        if not isinstance(s, dict):
            continue
        sub_msgs, sub_imgs = conversation(s.get("trajectory"))
        out.append(
            {
                "turn": i,
                "description": s.get("description"),
                "status": s.get("status"),
                "box_original": _boxf(s.get("box_original")),
                "box_model": _boxf(s.get("box_model")),
                "n_tool_calls": s.get("n_tool_calls"),
                "format_ok": s.get("format_ok"),
                "error": s.get("error"),
                "messages": sub_msgs,
                "images": sub_imgs,
            }
        )
    return out


def trajectory_row(rec: EvalRecord, eval_name: str = "", card_sha: str | None = None) -> JSONObject:
    """One Parquet row (see the module docstring) of one record."""
    er = rec.eval_result
    att = attribute(rec)
    msgs, images = conversation(er.trajectory)
    searches = _searches(er.trajectory)
    return {
        "eval_name": eval_name,
        "run_card_sha256": card_sha,
        "sample_key": rec.sample_key,
        "question_id": None if rec.question_id is None else str(rec.question_id),
        "index": rec.index,
        "trial": rec.trial,
        "category": rec.category,
        "image": rec.image,
        "image_path": rec.image_path,
        "question": rec.question,
        "options": rec.options,
        "answer": rec.answer,
        "status": er.status,
        "is_correct": er.status == VerdictStatus.CORRECT,
        "has_answer": er.has_answer,
        "response": er.response,
        "finish_reason": er.finish_reason,
        "extracted_answer": er.extracted_answer,
        "judge_method": er.judge_method,
        "judge_outputs": [str(x) for x in er.judge_outputs],
        "fail_reason": er.fail_reason,
        "fail_stage": er.fail_stage,
        "attribution": att.bucket,
        "blame": att.blame,
        "evidence_coverage": att.evidence_coverage,
        "n_search_calls": n_search_calls(er),
        "messages": msgs,
        "images": images,
        "searches": searches,
        "usage": {role: (_counts(rec.usage[role]) if role in rec.usage else None) for role in USAGE_ROLES},
        "cost_usd": rec.cost_usd,
        # the row's other fields (any names, a column called "index" too), as JSON text: a table keeps one type a column
        "row": json.dumps(row_fields({k: v for k, v in rec.fields.items() if k not in _ANNOTATED}), ensure_ascii=False),
    }


#: Record fields a trajectory row has columns of already (the image's name), left out of its ``row``.
_ANNOTATED = ("image", "file_name", "subset", "options")


def _counts(u: TokenUsage) -> dict[str, int]:
    """A role's usage with every column of ``_COUNTS`` (``to_dict`` leaves out a zero ``unreported_requests``)."""
    return {**u.to_dict(), "unreported_requests": u.unreported_requests}


def trajectory_rows(run: RunRecords) -> list[JSONObject]:
    """Every record of every trial, as rows (trial-major, in the annotation file's order)."""
    sha = run.card_sha256
    return [trajectory_row(r, run.name, sha) for r in run.records()]


def write_trajectories(path: str | os.PathLike, rows: list[dict]) -> int:
    """Write rows as one Parquet file (atomically: a reader never sees half a file); returns its size."""
    table = pa.Table.from_pylist(rows, schema=TRAJECTORY_SCHEMA)
    with atomic_writer(path, "wb") as f:
        pq.write_table(table, f, compression="zstd")
    return os.path.getsize(path)


def _agent(card: JSONObject, settings: JSONObject) -> JSONObject:
    """The run's agent and protocol version as its card names them; a card from before agents were recorded: the
    mode its settings imply (InSight-o3 with a vSearcher, else a single model), protocol unknown."""
    agent = card.get("agent")
    if isinstance(agent, dict) and agent.get("name"):
        return {"name": agent["name"], "protocol": agent.get("protocol")}
    return {"name": "insight_o3" if settings.get("vsearcher_model") else "single_model", "protocol": None}


def leaderboard(
    run: RunRecords,
    confidence: float = DEFAULT_CONFIDENCE,
    failed_as_wrong: bool = False,
    cluster: Cluster = Cluster.IMAGE,
) -> JSONObject:
    """The run's leaderboard entry (see the module docstring). Raises
    :class:`~.significance.PairingError` for a run without samples (nothing to rank)."""
    card = run.card or {}
    settings = card.get("settings") or {}
    o = outcomes(run.trials, name=run.name)
    overall, cats = run_accuracy(o, confidence, failed_as_wrong, run.name, cluster)
    other = None
    if o.failed_items() and (failed_as_wrong or o.failed_items() < o.statuses.size):
        other = run_accuracy(o, confidence, not failed_as_wrong, run.name, cluster)[0].to_dict()
    counted = o.judged(failed_as_wrong)
    per_trial = [float(o.correct[c, k].mean()) if (c := counted[:, k]).any() else None for k in range(counted.shape[1])]
    finite = [v for v in per_trial if v is not None]
    recs = run.records()
    usage = merge([r.usage_dict() for r in recs])
    costs = [r.cost_usd for r in recs if r.cost_usd is not None]
    episodes = len(recs)
    judge = sum(total_tokens({"judge": r.usage_dict().get("judge") or {}}) for r in recs)
    att = attribution_metrics(recs)
    return {
        "format": LEADERBOARD_FORMAT,
        "eval_name": run.name,
        "model": card.get("model", settings.get("model")),
        "agent": _agent(card, settings),
        "vsearcher_model": settings.get("vsearcher_model"),
        "oracle_crops": settings.get("oracle_crops"),
        "benchmark_file": card.get("benchmark_file", settings.get("ann_file")),
        "benchmark_sha256": card.get("benchmark_sha256"),
        "subset": card.get("subset"),
        "judge": card.get("judge"),
        "run_card_sha256": run.card_sha256,
        "num_samples": len(o.keys),
        "num_samples_counted": overall.n,
        "num_trials": len(run.trials),
        "accuracy": {
            **overall.to_dict(),
            "per_trial": per_trial,
            "std_over_trials": std_over_trials(finite) if len(finite) > 1 else None,
            "std_ddof": TRIAL_STD_DDOF,
        },
        "categories": {c: a.to_dict() for c, a in cats.items()},
        "failed": {
            "items": o.failed_items(),
            "samples_without_a_judged_trial": o.failed_samples(),
            "counted_as": "wrong" if failed_as_wrong else "excluded",
            "accuracy_other_rule": other,
        },
        "ci": {"method": METHODS["accuracy_ci"], "confidence": confidence, "cluster": str(cluster)},
        "tokens": {
            "total": sum(total_tokens(r.usage_dict()) for r in recs),
            "per_episode": tokens_per_episode(recs),
            "per_episode_means": "model + vSearcher prompt and completion tokens; the judge's excluded",
            "judge_per_episode": judge / episodes if episodes else 0.0,
            "by_role": usage,
        },
        "cost_usd": ({"total": float(sum(costs)), "per_episode": float(sum(costs)) / episodes} if costs else None),
        "attribution": att["attribution_ratio"],
        "error_split": att.get("error_split_ratio"),
        "insight_o3_version": __version__,
    }
