"""Metrics of one trial (overall and per category) and their mean/std over trials.

Per trial (``eval_metrics.json``), with ``total`` = all samples:

* ``overall_accuracy`` = correct / total
* ``overall_success_rate`` = (correct + wrong) / total
* ``overall_completion_rate`` = (correct + wrong) / (correct + wrong + incomplete)
* ``critical_failure_ratio`` = queries lost to API errors / total
* ``has_answer`` = fraction of samples with an extracted answer
* ``overall_stats`` = the counts (correct, wrong, incomplete, invalid, failed, total)
* ``category_<name>`` = the same per ``category``/``subset``
* InSight-o3 runs (attempt stats present): ``mean_search_calls``, ``search_not_found_ratio`` and the
  tool-use health numbers of :func:`tool_use_health`
* ``usage`` (tokens per role), ``tokens_total`` and, with prices, ``cost_usd`` of the trial's records
* why episodes failed (:mod:`.attribution`): ``attribution`` / ``attribution_ratio`` (records per
  bucket), ``category_attribution``, and for InSight-o3 runs the paper's D.4 ``error_split``
  (vReasoner / vSearcher); with annotated evidence, ``evidence_coverage`` and ``crop_quality``

The summary (``summary_metrics.json``) mirrors that structure with every number replaced by
``{"mean": …, "std": …}`` (:func:`std_over_trials`) and adds ``num_trials`` (the runner adds
``run_totals``: tokens and cost summed over trials).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from ..base.json_types import JSONObject
from ..endpoints.usage import merge, total_tokens
from ..protocol.attempt_stats import InSightO3Stats
from ..protocol.statuses import EpisodeStatus, VerdictStatus
from ..protocol.trajectory import image_refs
from .attribution import attribution_metrics
from .schema import STATUSES, EvalRecord, EvalResult, RecordError

#: The one standard deviation over trials (the summary, ``gather_eval_results``' ``mean±std``, the leaderboard,
#: the report's error bars): ``np.std`` with ddof 0, as the released summary computes it (docs/fidelity.md row 30).
TRIAL_STD_DDOF = 0


def std_over_trials(values: Any) -> float:
    """The standard deviation of per-trial values (:data:`TRIAL_STD_DDOF`); 0 for one trial."""
    return float(np.std(np.asarray(values, dtype=float), ddof=TRIAL_STD_DDOF))


RATES = ("accuracy", "success_rate", "completion_rate", "critical_failure_ratio", "has_answer")


def _rates(results: list[EvalResult]) -> tuple[dict[str, float], dict[str, int]]:
    counts = {s: 0 for s in STATUSES}
    for r in results:
        counts[r.status] += 1
    total = len(results)
    counts["total"] = total
    c, w, inc = counts[VerdictStatus.CORRECT], counts[VerdictStatus.WRONG], counts[VerdictStatus.INCOMPLETE]
    judged = c + w
    rates = {
        "accuracy": c / total if total else 0.0,
        "success_rate": judged / total if total else 0.0,
        "completion_rate": judged / (judged + inc) if judged + inc else 0.0,
        "critical_failure_ratio": counts[VerdictStatus.FAILED] / total if total else 0.0,
        "has_answer": sum(r.has_answer for r in results) / total if total else 0.0,
    }
    return rates, counts


def _parts(r: EvalRecord | dict, where: str) -> tuple[str, EvalResult]:
    """``(category, eval_result)`` of a record; a dict needs only those two fields."""
    if isinstance(r, EvalRecord):
        return r.category, r.eval_result
    if not isinstance(r, dict):
        raise RecordError(f"{where}: expected a record object, got {type(r).__name__}")
    return str(r.get("category", "unknown")), EvalResult.from_dict(r.get("eval_result"), where)


def compute_metrics(records: list[EvalRecord | JSONObject]) -> JSONObject:
    """Metrics of one trial from its records (dicts are validated as :class:`EvalRecord`)."""
    parts = [_parts(r, f"record {i}") for i, r in enumerate(records)]
    results = [er for _, er in parts]
    rates, counts = _rates(results)
    out: dict = {
        "overall_accuracy": rates["accuracy"],
        "overall_success_rate": rates["success_rate"],
        "overall_completion_rate": rates["completion_rate"],
        "critical_failure_ratio": rates["critical_failure_ratio"],
        "has_answer": rates["has_answer"],
        "overall_stats": counts,
    }
    by_cat: dict[str, list[EvalResult]] = defaultdict(list)
    for cat, er in parts:
        by_cat[cat].append(er)
    cats = {name: _rates(res) for name, res in sorted(by_cat.items())}
    for rate in RATES:
        out[f"category_{rate}"] = {name: v[0][rate] for name, v in cats.items()}
    out["category_stats"] = {name: v[1] for name, v in cats.items()}
    answered = [r for r in results if r.status != VerdictStatus.FAILED]
    episodes = _episodes(answered)
    if any(isinstance(r.stats, InSightO3Stats) for r in answered):
        calls = [s.n_search_calls for s in episodes]
        not_found = sum(s.n_search_not_found for s in episodes)
        out["mean_search_calls"] = float(np.mean(calls)) if calls else 0.0
        out["search_not_found_ratio"] = not_found / sum(calls) if sum(calls) else 0.0
        out.update(tool_use_health(answered))
    usages = [r.usage_dict() if isinstance(r, EvalRecord) else r.get("usage") for r in records]
    out["usage"] = merge(usages)
    out["tokens_total"] = sum(total_tokens(u) for u in usages)
    costs = [
        c for c in (r.cost_usd if isinstance(r, EvalRecord) else r.get("cost_usd") for r in records) if c is not None
    ]
    if costs:
        out["cost_usd"] = float(sum(costs))
    out.update(attribution_metrics(_as_records(records)))
    return out


def _as_records(records: list[EvalRecord | dict]) -> list[EvalRecord]:
    """Records for the attribution (a dict without a key gets its position as one)."""
    return [
        r if isinstance(r, EvalRecord) else EvalRecord.from_dict({"sample_key": f"#{i}", **r}, f"record {i}")
        for i, r in enumerate(records)
    ]


def _episodes(results: list[EvalResult]) -> list[InSightO3Stats]:
    """The InSight-o3 stats of each result (another family's count as an episode without searches or retries)."""
    return [r.stats if isinstance(r.stats, InSightO3Stats) else InSightO3Stats() for r in results]


def _crop_area_ratios(result: EvalResult) -> list[float]:
    """Area of every crop the vReasoner was shown, relative to the full image (its first image)."""
    refs = image_refs(result.trajectory or [])
    if len(refs) < 2:
        return []
    x1, y1, x2, y2 = refs[0].region
    full = max((x2 - x1) * (y2 - y1), 1e-9)
    out = []
    for r in refs[1:]:
        if r.path == refs[0].path:
            a1, b1, a2, b2 = r.region
            out.append(max(0.0, (a2 - a1) * (b2 - b1)) / full)
    return out


def tool_use_health(results: list[EvalResult]) -> JSONObject:
    """InSight-o3 runs: how the vReasoner used the vSearcher, so a collapse to no tool use shows at once.

    ``search_calls_hist`` (episodes per number of calls), ``zero_search_ratio`` (episodes without a
    call), ``format_failure_ratio`` (episodes ended by exhausted format retries),
    ``format_retry_ratio`` (episodes with at least one format retry) and ``crop_area`` (mean, median,
    p10, p90 of the crops' area relative to the image; absent without crops)."""
    stats = _episodes(results)
    n = len(stats)
    if not n:
        return {}
    calls = [s.n_search_calls for s in stats]
    hist = {str(k): calls.count(k) for k in range(max(calls) + 1)}
    out = {
        "search_calls_hist": hist,
        "zero_search_ratio": calls.count(0) / n,
        "format_failure_ratio": sum(s.status == EpisodeStatus.FORMAT_FAILED for s in stats) / n,
        "format_retry_ratio": sum(bool(s.n_format_retries) for s in stats) / n,
    }
    areas = [a for r in results for a in _crop_area_ratios(r)]
    if areas:
        arr = np.asarray(areas)
        out["crop_area"] = {
            "mean": float(arr.mean()),
            "median": float(np.median(arr)),
            "p10": float(np.percentile(arr, 10)),
            "p90": float(np.percentile(arr, 90)),
        }
    return out


def summarize(trial_metrics: list[JSONObject]) -> JSONObject:
    """Mean and std over trials of every number in the per-trial metrics (nested dicts kept)."""

    def agg(values: list[Any]) -> Any:
        first = values[0]
        if isinstance(first, dict):
            keys = list(dict.fromkeys(k for v in values for k in v))
            return {k: agg([v[k] for v in values if k in v]) for k in keys}
        arr = np.asarray(values, dtype=float)
        return {"mean": float(arr.mean()), "std": std_over_trials(arr)}

    out = {"num_trials": len(trial_metrics)}
    if trial_metrics:
        keys = list(dict.fromkeys(k for m in trial_metrics for k in m))
        for k in keys:
            out[k] = agg([m[k] for m in trial_metrics if k in m])
    return out
