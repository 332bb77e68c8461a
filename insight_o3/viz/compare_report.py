"""The ``compare`` page: runs on the same benchmark side by side, with their statistics.

Self-contained like the report (:mod:`.report`): CSS and a few lines of JS inline, charts as SVG,
crops as JPEG thumbnails. Sections: accuracy with confidence intervals (overall and per category) and the
items each run lost to API errors, the paired differences and the paired sign-flip test against the
reference run (:mod:`insight_o3.analysis.significance`), accuracy against tokens and
against cost per episode, why episodes failed (:mod:`insight_o3.evaluation.attribution`), and per
pair the flipped samples — each row links to the sample's two conversations side by side
(``#flip-<pair>-<n>``; opening the link opens the block).
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from markupsafe import Markup
from matplotlib.ticker import FuncFormatter, MaxNLocator

from ..analysis.comparison import Comparison, RunStats
from ..analysis.paired import MIN_CLUSTERS_FOR_BOOTSTRAP, Accuracy, Flip, Paired, PairResult
from ..analysis.run_records import RunRecords
from ..base.json_types import JSONObject
from ..evaluation.attribution import BUCKET_LABELS, BUCKETS
from ..protocol.statuses import VerdictStatus
from ..storage.atomic import write_text_atomic
from .draw import ImageResolver
from .plots import figure_svg, new_figure
from .run_view import VIEW_CSS, EvalRun, compare_html, load_run
from .templating import render


def _cell(a: Accuracy) -> str:
    return f"{100 * a.mean:.1f} [{100 * a.low:.1f}, {100 * a.high:.1f}]"


def _df_html(df: pd.DataFrame, table_id: str, index: bool = True) -> Markup:
    table = df.to_html(classes="data", table_id=table_id, index=index, border=0, na_rep="—")
    return Markup("<div class='table-wrap'>") + Markup(table) + Markup("</div>")


def accuracy_table(c: Comparison) -> pd.DataFrame:
    """Accuracy (%) with its interval: rows overall and each category, one column per run."""
    cats = sorted({k for r in c.runs for k in r.categories})
    rows: dict[str, dict[str, str]] = {"overall": {r.name: _cell(r.accuracy) for r in c.runs}}
    counts = [c.runs[0].n_samples]
    if any(r.other_rule for r in c.runs):
        rule = "left out" if c.failed_as_wrong else "counted as wrong"
        rows[f"overall, lost items {rule}"] = {r.name: _cell(r.other_rule) if r.other_rule else "—" for r in c.runs}
        counts.append(c.runs[0].n_samples)
    for cat in cats:
        rows[cat] = {r.name: _cell(r.categories[cat]) if cat in r.categories else "—" for r in c.runs}
    df = pd.DataFrame.from_dict(rows, orient="index", columns=[r.name for r in c.runs])
    df.insert(0, "n", counts + [c.runs[0].categories[k].n if k in c.runs[0].categories else 0 for k in cats])
    return df


def _diff(lo: float, hi: float) -> str:
    return f"[{100 * lo:+.1f}, {100 * hi:+.1f}]"


def _pvalue(v: Paired) -> str:
    text = f"{v.pvalue:.3g}" + (" (exact)" if v.exact else "")
    return text + (f"; Holm {v.pvalue_holm:.3g}" if v.pvalue_holm is not None else "")


def _reach(v: Paired) -> dict[str, str]:
    return {
        "SE (points)": f"{100 * v.se:.1f}",
        "detectable at 80% power (points)": f"{100 * v.mde:.1f}" if v.mde is not None else "—",
        "smallest attainable p": f"{v.min_pvalue:.3g}" + ("" if v.can_be_significant else " (cannot be significant)"),
    }


def pairs_table(c: Comparison) -> pd.DataFrame:
    rows = []
    for p in c.pairs:
        o, m = p.overall, p.overall.mcnemar
        comp = o.components
        rows.append(
            {
                "run": p.b,
                "vs": p.a,
                "trials": f"{p.trials_b} vs {p.trials_a}",
                "paired samples": o.n,
                "clusters": f"{o.clusters} ({p.cluster})",
                "left out (lost to API errors)": p.excluded,
                "difference (points)": f"{100 * o.difference:+.1f} {_diff(o.low, o.high)}",
                "sign-flip p (decides)": _pvalue(o)
                + ("" if o.interval_agrees else " — the interval disagrees; the test decides"),
                **_reach(o),
                "variance from trial noise": f"{100 * comp.within_share:.0f}%" if comp else "—",
                "paired cluster bootstrap": (_diff(*o.bootstrap) if o.bootstrap else "—")
                + (" (too few clusters)" if o.bootstrap and o.clusters < MIN_CLUSTERS_FOR_BOOTSTRAP else ""),
                "other failure rule": f"{100 * p.other_rule.difference:+.1f} "
                f"{_diff(p.other_rule.low, p.other_rule.high)}, p {p.other_rule.pvalue:.3g}"
                if p.other_rule
                else "—",
                "fixed / broken samples": f"{sum(f.change == 'fixed' for f in p.flips)} / "
                f"{sum(f.change == 'broken' for f in p.flips)}",
                f"pairs only {p.a} right (b)": m.b,
                "only run right (c)": m.c,
            }
        )
    return pd.DataFrame(rows)


def pair_categories_table(p: PairResult) -> pd.DataFrame:
    rows = []
    for cat, v in p.categories.items():
        rows.append(
            {
                "category": cat,
                "n": v.n,
                "clusters": v.clusters,
                p.a: f"{100 * v.accuracy_a:.1f}",
                p.b: f"{100 * v.accuracy_b:.1f}",
                "difference (points)": f"{100 * v.difference:+.1f} {_diff(v.low, v.high)}",
                "sign-flip p (exploratory)": _pvalue(v),
                **_reach(v),
                "b / c": f"{v.mcnemar.b} / {v.mcnemar.c}",
            }
        )
    return pd.DataFrame(rows)


def attribution_table(c: Comparison) -> pd.DataFrame:
    """Share of episodes per failure bucket (%), one column per run (buckets no run has are left out),
    then for InSight-o3 runs the D.4 split: the vReasoner's and the vSearcher's share of the errors (%)."""
    used = [b for b in BUCKETS if any(r.attribution.get(b) for r in c.runs)]
    rows = {BUCKET_LABELS[b]: [100 * r.attribution.get(b, 0.0) for r in c.runs] for b in used}
    if any(r.attribution.get("split") for r in c.runs):
        for part, label in (
            ("vreasoner", "vReasoner's"),
            ("vsearcher", "vSearcher's"),
            ("unattributed", "unattributed"),
        ):
            rows[f"D.4: errors that are the {label}" if part != "unattributed" else "D.4: errors unattributed"] = [
                100 * (r.attribution.get("split") or {}).get(part, float("nan")) for r in c.runs
            ]
    return pd.DataFrame.from_dict(rows, orient="index", columns=[r.name for r in c.runs]).round(1)


def cost_chart(runs: list[RunStats], confidence: float, x: str) -> str | None:
    """Accuracy (with its interval) against ``x`` = ``"tokens"`` or ``"cost"`` per episode."""
    pts = [
        (r, r.tokens_per_episode if x == "tokens" else r.cost_per_episode)
        for r in runs
        if (r.tokens_per_episode if x == "tokens" else r.cost_per_episode) is not None
    ]
    if not pts or (x == "tokens" and not any(v for _, v in pts)):
        return None
    fig, ax = new_figure(1, 1, (5.2, 3.6))
    for i, (r, v) in enumerate(pts):
        a = r.accuracy
        y = 100 * a.mean
        ax.errorbar(
            [v], [y], yerr=[[y - 100 * a.low], [100 * a.high - y]], fmt="o", capsize=4, color=f"C{i}", label=r.name
        )
        ax.annotate(r.name, (v, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.set_xlabel(
        "tokens per episode (model + vSearcher; judge not in)" if x == "tokens" else "cost per episode (US$, judge in)"
    )
    ax.set_ylabel("accuracy (%)")
    lo = min(100 * r.accuracy.low for r, _ in pts)
    hi = max(100 * r.accuracy.high for r, _ in pts)
    ax.set_ylim(max(0.0, lo - 5), min(100.0, hi + 5) + 1e-9)
    xs = np.array([v for _, v in pts], dtype=float)
    if xs.max() > 0:
        ax.set_xlim(0, xs.max() * 1.25)
    ax.xaxis.set_major_locator(MaxNLocator(5))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:.4g}"))
    ax.set_title(f"Accuracy vs {'tokens' if x == 'tokens' else 'cost'} ({100 * confidence:g}% CI)")
    ax.grid(alpha=0.3)
    return figure_svg(fig)


def _first_differing_trial(f: Flip) -> int:
    for k, (x, y) in enumerate(zip(f.statuses_a, f.statuses_b)):
        if (x == VerdictStatus.CORRECT) != (y == VerdictStatus.CORRECT):
            return k
    return 0


def _flip_blocks(
    pair_no: int,
    p: PairResult,
    views: dict[str, EvalRun],
    resolver: ImageResolver,
    max_flips: int,
    thumb_px: int,
) -> JSONObject:
    shown = p.flips if max_flips <= 0 else p.flips[:max_flips]
    rows, blocks = [], []
    for n, f in enumerate(p.flips):
        anchor = f"flip-{pair_no}-{n}"
        rows.append({"anchor": anchor if n < len(shown) else None, "flip": f})
    for n, f in enumerate(shown):
        k = _first_differing_trial(f)
        ra = views[p.a].trial(k).by_key().get(f.key) if k in [t.index for t in views[p.a].trials] else None
        rb = views[p.b].trial(k).by_key().get(f.key) if k in [t.index for t in views[p.b].trials] else None
        body = compare_html(ra, rb, resolver, thumb_px, (f"{p.a} (trial {k})", f"{p.b} (trial {k})"))
        blocks.append({"anchor": f"flip-{pair_no}-{n}", "flip": f, "trial": k, "body": Markup(body)})
    return {"pair": p, "rows": rows, "blocks": blocks, "limited": len(shown) < len(p.flips)}


def build_compare_report(
    comparison: Comparison,
    runs: list[RunRecords],
    max_flips: int = 50,
    thumb_px: int = 384,
    img_dir: str | os.PathLike | None = None,
    notes: list[str] | tuple = (),
) -> str:
    """The page's HTML (``runs`` in the comparison's order, for the conversations of flipped samples)."""
    names = [r.name for r in comparison.runs]
    views: dict[str, EvalRun] = {}
    resolver = ImageResolver()
    if any(p.flips for p in comparison.pairs):
        for name, r in zip(names, runs):
            views[name] = load_run(r.path)
            for root in views[name].image_roots():
                resolver.add_root(root)
    if img_dir:
        resolver.roots.insert(0, Path(img_dir))
    charts = [cost_chart(comparison.runs, comparison.confidence, x) for x in ("tokens", "cost")]
    return render(
        "compare_runs.html.j2",
        title="InSight-o3 comparison: " + " vs ".join(names),
        css=Markup(VIEW_CSS),
        names=names,
        reference=names[0],
        runs=comparison.runs,
        cards=[(name, r.card or {}) for name, r in zip(names, runs)],
        notes=list(notes),
        confidence=f"{100 * comparison.confidence:g}",
        failed_as_wrong=comparison.failed_as_wrong,
        cluster=str(comparison.cluster),
        n_resamples=comparison.n_resamples,
        seed=comparison.seed,
        generated=f"{_dt.datetime.now():%Y-%m-%d %H:%M}",
        accuracy=_df_html(accuracy_table(comparison), "compare-accuracy"),
        pairs=_df_html(pairs_table(comparison), "compare-pairs", index=False) if comparison.pairs else None,
        pair_categories=[
            (p, _df_html(pair_categories_table(p), f"compare-categories-{i}", index=False))
            for i, p in enumerate(comparison.pairs)
        ],
        charts=[Markup(c) for c in charts if c],
        attribution=_df_html(attribution_table(comparison), "compare-attribution"),
        flips=[_flip_blocks(i, p, views, resolver, max_flips, thumb_px) for i, p in enumerate(comparison.pairs)],
    )


def write_compare_report(comparison: Comparison, runs: list[RunRecords], out: str | os.PathLike, **kw: Any) -> Path:
    page = build_compare_report(comparison, runs, **kw)
    out = Path(out)
    write_text_atomic(out, page)
    return out
