"""The report's analysis tables: why episodes failed (per trial, per category, the D.4 split, D.3 crop
levels) and how judges agree. The numbers come from :mod:`insight_o3.evaluation.attribution` and
:mod:`insight_o3.analysis.agreement`; this module only lays them out as DataFrames."""

from __future__ import annotations

from collections import Counter

import pandas as pd

from ..analysis.agreement import JudgeAgreement, kappa_ci_text
from ..base.json_types import JSONObject
from ..evaluation.attribution import BUCKET_LABELS, BUCKETS, QUALITY_LEVELS, SPLIT, Attribution, attribute
from ..evaluation.schema import EvalRecord
from .run_view import EvalRun, SampleResult

SPLIT_LABELS = {"vreasoner": "vReasoner", "vsearcher": "vSearcher", "unattributed": "unattributed"}


def attribution_of(result: SampleResult) -> Attribution:
    """The failure attribution of one browsed result (from its record as written)."""
    return attribute(
        EvalRecord.from_dict(result.record or {"sample_key": result.key, "eval_result": {"status": result.status}})
    )


def _cells(counts: Counter, total: int, buckets: list[str]) -> dict[str, str]:
    return {
        BUCKET_LABELS[b]: f"{counts.get(b, 0)} ({100 * counts.get(b, 0) / total:.0f}%)" if total else "0"
        for b in buckets
    }


def attribution_tables(run: EvalRun) -> JSONObject | None:
    """``by_trial`` / ``by_category`` (records per bucket), ``split`` (D.4, InSight-o3 episodes' errors per
    trial), ``quality`` (D.3 crop levels and mean evidence coverage per trial); None without records."""
    atts = {t.index: [attribution_of(r) for r in t.results] for t in run.trials}
    if not any(atts.values()):
        return None
    used = [b for b in BUCKETS if any(a.bucket == b for v in atts.values() for a in v)]
    by_trial = {f"trial_{k}": _cells(Counter(a.bucket for a in v), len(v), used) for k, v in atts.items() if v}
    cats: dict[str, Counter] = {}
    for t in run.trials:
        for r, a in zip(t.results, atts[t.index]):
            cats.setdefault(r.category, Counter())[a.bucket] += 1
    by_cat = {c: _cells(cnt, sum(cnt.values()), used) for c, cnt in sorted(cats.items())}
    split_rows, quality_rows = {}, {}
    for k, v in atts.items():
        io3 = [a for a in v if a.insight_o3 and a.blame is not None]
        if any(a.insight_o3 for a in v):
            c = Counter(a.blame for a in io3)
            n = len(io3)
            split_rows[f"trial_{k}"] = {
                **{SPLIT_LABELS[s]: f"{c.get(s, 0)} ({100 * c.get(s, 0) / n:.0f}%)" if n else "0" for s in SPLIT},
                "errors": n,
            }
        covs = [a.evidence_coverage for a in v if a.evidence_coverage is not None]
        if covs:
            q = Counter(level for a in v for level in a.crop_quality)
            quality_rows[f"trial_{k}"] = {
                **{f"{level} crops": q.get(level, 0) for level in QUALITY_LEVELS},
                "mean evidence coverage": round(sum(covs) / len(covs), 3),
                "episodes with crops": len(covs),
            }
    return {
        "by_trial": pd.DataFrame.from_dict(by_trial, orient="index", columns=[BUCKET_LABELS[b] for b in used]),
        "by_category": pd.DataFrame.from_dict(by_cat, orient="index", columns=[BUCKET_LABELS[b] for b in used]),
        "split": pd.DataFrame.from_dict(split_rows, orient="index") if split_rows else None,
        "quality": pd.DataFrame.from_dict(quality_rows, orient="index") if quality_rows else None,
    }


def agreement_tables(ag: JudgeAgreement) -> JSONObject:
    """``judges`` (accuracy, items lost per judge), ``pairs`` (agreement and κ per pair) and
    ``disagreements`` (one dict per item: question, answer, response, each verdict and output)."""

    def num(v: float | None, fmt: str) -> str:
        return "—" if v is None else format(v, fmt)

    judges = pd.DataFrame(
        {
            "accuracy (%)": [round(100 * ag.accuracy[j], 1) for j in ag.judges],
            "lost to API errors": [ag.lost[j] for j in ag.judges],
            "run": ag.runs,
        },
        index=ag.judges,
    )
    unit = "images" if ag.cluster == "image" else "samples"
    pairs = pd.DataFrame(
        [
            {
                "judges": f"{p['a']} vs {p['b']}",
                "items": p["n"],
                "agreement (%)": num(p["agreement"] and 100 * p["agreement"], ".1f"),
                "Cohen's kappa": num(p["kappa"], ".3f"),
                f"95% CI (bootstrap over {unit})": kappa_ci_text(p["kappa_ci"], p["clusters"], unit),
                "items a judge model decided": p["n_judge_decided"],
                "kappa on those": num(p["kappa_judge_decided"], ".3f"),
            }
            for p in ag.pairs
        ]
    )
    return {
        "judges": judges,
        "pairs": pairs,
        "items": ag.items,
        "judged": ag.judged,
        "disagreements": [d.to_dict() for d in ag.disagreements],
        "names": ag.judges,
        "fleiss": None
        if ag.fleiss is None
        else f"Fleiss' kappa of all {len(ag.judges)} judges on the {ag.fleiss['n']} items every judge judged: "
        f"{num(ag.fleiss['kappa'], '.3f')} {kappa_ci_text(ag.fleiss['ci'], ag.fleiss['clusters'], unit)} "
        f"(95% CI, bootstrap over {unit})",
    }
