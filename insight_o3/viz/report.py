"""A single self-contained HTML report of an evaluation run (optionally compared with another).

Everything is inline: CSS, a few lines of JS for the filter buttons, charts as SVG, images as
downscaled JPEG ``data:`` URLs. The page fetches nothing, so it opens from disk without a server or
network. Sizes stay reasonable because every picture is a thumbnail (``thumb_px``) redrawn from the
source image, and ``max_samples`` bounds the per-sample section.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from markupsafe import Markup

from ..analysis.agreement import judge_agreement
from ..analysis.run_records import read_run
from ..base.caps import DEFAULT_MAX_TEXT_CHARS
from ..base.json_types import JSONObject
from ..endpoints.usage import system_tokens, total_tokens
from ..evaluation.attribution import BUCKET_LABELS, BUCKETS
from ..protocol.statuses import VerdictStatus
from ..storage.atomic import write_text_atomic
from .analysis_view import agreement_tables, attribution_of, attribution_tables
from .draw import ImageResolver
from .plots import figure_svg, legend_below, new_figure
from .run_view import (
    STATUSES,
    VIEW_CSS,
    EvalRun,
    SampleResult,
    accuracy_by_category,
    compare_frame,
    compare_html,
    conversation_html,
    failure_table,
    load_run,
    results_frame,
)
from .templating import render

_SECRET_HINTS = ("key", "token", "secret", "password")


def _df_html(df: pd.DataFrame, table_id: str, index: bool = True) -> Markup:
    """A pandas table (pandas escapes the cells) as safe markup for the templates."""
    table = df.to_html(
        classes="data", table_id=table_id, index=index, border=0, na_rep="", float_format=lambda v: f"{v:.2f}"
    )
    return Markup("<div class='table-wrap'>") + Markup(table) + Markup("</div>")


def _status_group(status: str) -> str:
    return (
        VerdictStatus.WRONG
        if status in (VerdictStatus.WRONG, VerdictStatus.INCOMPLETE, VerdictStatus.INVALID)
        else status
    )


def _accuracy_chart(runs: list[EvalRun]) -> str:
    tables = [accuracy_by_category(r) for r in runs]
    cats = list(dict.fromkeys(c for t in tables for c in t.index))
    fig, ax = new_figure(1, 1, (max(5.0, 1.1 * len(cats) * len(runs) + 2), 3.4))
    width = 0.8 / len(runs)
    x = np.arange(len(cats))
    for i, (run, t) in enumerate(zip(runs, tables)):
        means = [t.loc[c, "mean"] if c in t.index else 0.0 for c in cats]
        stds = [t.loc[c, "std"] if c in t.index else 0.0 for c in cats]
        bars = ax.bar(
            x + (i - (len(runs) - 1) / 2) * width,
            means,
            width,
            yerr=stds if len(run.trials) > 1 else None,
            capsize=3,
            label=run.name,
        )
        for b, m in zip(bars, means):
            ax.text(b.get_x() + b.get_width() / 2, m + 1, f"{m:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, cats)
    ax.set_ylim(0, 110)
    ax.set_ylabel("accuracy (%)")
    ax.set_title(
        "Accuracy per category (mean over trials"
        + (", error bars: std over trials)" if any(len(r.trials) > 1 for r in runs) else ")")
    )
    if len(runs) > 1:
        legend_below(ax, len(runs))
    return figure_svg(fig)


def _trial_chart(runs: list[EvalRun]) -> str:
    fig, ax = new_figure(1, 1, (max(4.0, 0.9 * sum(len(r.trials) for r in runs) + 2), 3.4))
    labels, values, colors = [], [], []
    for i, run in enumerate(runs):
        for t in run.trials:
            labels.append(f"{'AB'[i] if len(runs) > 1 else ''}{' ' if len(runs) > 1 else ''}trial {t.index}")
            values.append(100.0 * sum(r.is_correct for r in t.results) / max(1, len(t.results)))
            colors.append(f"C{i}")
    bars = ax.bar(range(len(values)), values, color=colors)
    for b, v in zip(bars, values):
        ax.text(b.get_x() + b.get_width() / 2, v + 1, f"{v:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(values)), labels, rotation=0, fontsize=8)
    ax.set_ylim(0, 110)
    ax.set_ylabel("overall accuracy (%)")
    ax.set_title("Accuracy per trial")
    return figure_svg(fig)


def _calls_chart(runs: list[EvalRun]) -> str | None:
    # only InSight-o3 runs: a single model makes no vSearcher calls, its bar at 0 would say nothing
    runs = [run for run in runs if any(r.is_episode for t in run.trials for r in t.results)]
    per_run = [
        [r.n_search_calls for t in run.trials for r in t.results if r.status != VerdictStatus.FAILED] for run in runs
    ]
    if not any(any(v) for v in per_run):
        return None
    hi = max(max(v) for v in per_run if v)
    fig, ax = new_figure(1, 1, (5.5, 3.4))
    bins = np.arange(0, hi + 2) - 0.5
    ax.hist([v for v in per_run], bins=bins, label=[r.name for r in runs], rwidth=0.85)
    ax.set_xticks(range(0, hi + 1))
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("vSearcher calls per (sample, trial)")
    ax.set_ylabel("count")
    means = ", ".join(f"{np.mean(v):.2f}" for v in per_run if v)
    ax.set_title(f"vSearcher calls (mean {means})")
    if len(runs) > 1:
        legend_below(ax, len(runs))
    return figure_svg(fig)


def _metrics_table(run: EvalRun) -> pd.DataFrame:
    keys = [
        "overall_accuracy",
        "overall_success_rate",
        "overall_completion_rate",
        "critical_failure_ratio",
        "has_answer",
        "mean_search_calls",
        "search_not_found_ratio",
    ]
    rows = {}
    for t in run.trials:
        m = t.metrics
        row = {k: m[k] for k in keys if isinstance(m.get(k), (int, float))}
        row["records"] = len(t.results)
        row["done"] = "yes" if t.done else "no"
        rows[f"trial_{t.index}"] = row
    short = {
        "overall_accuracy": "accuracy",
        "overall_success_rate": "success",
        "overall_completion_rate": "completion",
        "critical_failure_ratio": "critical failures",
        "mean_search_calls": "mean vSearcher calls",
        "search_not_found_ratio": "not-found ratio",
    }
    return pd.DataFrame.from_dict(rows, orient="index").rename(columns=short)


def _shared_requests(run: EvalRun) -> dict[str, str]:
    """Roles whose requests answered several trials at once (``n`` choices): the records split a request's
    count in integer parts with the remainder on the first trial, so the other trials would show 0 requests
    for tokens they did use. For those roles the table says how many requests all trials shared instead."""
    per_role: dict[str, list[dict]] = {}
    for t in run.trials:
        for role, c in (t.metrics.get("usage") or {}).items():
            if isinstance(c, dict):
                per_role.setdefault(role, []).append(c)
    out = {}
    for role, counts in per_role.items():
        if len(counts) > 1 and any(not c.get("requests") and c.get("prompt_tokens") for c in counts):
            total = sum(int(c.get("requests") or 0) for c in counts)
            out[role] = f"{total} shared by {len(counts)} trials"
    return out


def _usage_table(run: EvalRun) -> pd.DataFrame | None:
    """Tokens per role (and cost) per trial, from the trials' metrics; None for runs without usage."""
    rows = {}
    shared = _shared_requests(run)
    for t in run.trials:
        usage = t.metrics.get("usage")
        if not isinstance(usage, dict) or not usage:
            continue
        row: dict = {}
        for role, c in usage.items():
            if isinstance(c, dict):
                row[f"{role} prompt"] = c.get("prompt_tokens", 0)
                row[f"{role} completion"] = c.get("completion_tokens", 0)
                if c.get("reasoning_tokens"):
                    row[f"{role} reasoning"] = c["reasoning_tokens"]
                row[f"{role} requests"] = shared.get(role, c.get("requests", 0))
        row["tokens total"] = t.metrics.get("tokens_total", 0)
        if t.metrics.get("cost_usd") is not None:
            row["cost (US$)"] = f"{float(t.metrics['cost_usd']):.6f}"
        rows[f"trial_{t.index}"] = row
    return pd.DataFrame.from_dict(rows, orient="index") if rows else None


#: A run whose share of episodes without a vSearcher call is at least this is flagged.
ZERO_TOOL_USE_ALERT = 0.9


def _tool_health(run: EvalRun) -> tuple[pd.DataFrame | None, list[str]]:
    """Tool-use health per trial (InSight-o3 runs) and alert lines."""
    rows, alerts = {}, []
    for t in run.trials:
        m = t.metrics
        if "mean_search_calls" not in m:
            continue
        row = {
            "mean vSearcher calls": m.get("mean_search_calls"),
            "no-call episodes": m.get("zero_search_ratio"),
            "not-found ratio": m.get("search_not_found_ratio"),
            "format failures": m.get("format_failure_ratio"),
            "format retries": m.get("format_retry_ratio"),
        }
        crop = m.get("crop_area") or {}
        if crop:
            row["crop area mean"], row["crop area median"] = crop.get("mean"), crop.get("median")
        hist = m.get("search_calls_hist") or {}
        row["calls: episodes"] = ", ".join(f"{k}: {v}" for k, v in hist.items())
        rows[f"trial_{t.index}"] = {
            k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items() if v is not None
        }
        zero = m.get("zero_search_ratio")
        if isinstance(zero, (int, float)) and zero >= ZERO_TOOL_USE_ALERT:
            alerts.append(
                f"trial_{t.index}: {100 * zero:.0f}% of episodes made no vSearcher call (tool use has collapsed)"
            )
    return (pd.DataFrame.from_dict(rows, orient="index") if rows else None), alerts


def _run_card(run: EvalRun) -> JSONObject | None:
    """The run card's main fields (label, text) and its full JSON, or None without a readable card."""
    card = run.card
    if card is None:
        return None
    judge = card.get("judge") or {}
    sha = card.get("benchmark_sha256") or ""
    fields = [
        ("version", card.get("version")),
        ("git commit", card.get("git_commit")),
        ("model", card.get("model")),
        ("benchmark", card.get("benchmark_file")),
        ("benchmark sha256", sha[:16] + ("…" if sha else "")),
        ("samples", card.get("num_samples")),
        ("subset", json.dumps(card.get("subset")) if card.get("subset") else "none (full benchmark)"),
        ("image budget", json.dumps(card.get("image_budget"))),
        ("judge", f"{judge.get('model')} ({judge.get('flow')} flow, cache {'on' if judge.get('cache') else 'off'})"),
        ("seeds", json.dumps(card.get("seeds")) if card.get("seeds") else "none"),
        ("prompts", f"{len(card.get('prompts_sha256') or {})} hashed"),
        ("re-judged from", card.get("rejudged_from")),
    ]
    return {
        "name": run.name,
        "rows": [(k, str(v)) for k, v in fields if v is not None],
        "json": json.dumps(card, indent=1, sort_keys=True),
    }


#: args.json keys that only mean something in InSight-o3 mode (``--vsearcher_model`` given).
_VSEARCH_ARGS = ("vsearcher_max_pixels", "max_vsearch_calls")


def _args_items(run: EvalRun) -> list[tuple[str, str]]:
    items = []
    for k in (
        "eval_name",
        "model",
        "vsearcher_model",
        "benchmark",
        "ann_file",
        "img_dir",
        "num_trials",
        "img_max_pixels",
        "sys_prompt",
        "vsearcher_max_pixels",
        "max_vsearch_calls",
    ):
        v = run.args.get(k)
        if not run.args.get("vsearcher_model") and k in _VSEARCH_ARGS:
            continue  # a single-model run: the vSearcher flags' defaults were not used
        if v is not None and not any(h in k.lower() for h in _SECRET_HINTS):
            items.append((k, str(v)))
    return items


def _sample_view(
    key: str,
    trials_status: list[str],
    shown: SampleResult,
    other: SampleResult | None,
    resolver: ImageResolver,
    thumb_px: int,
    labels: tuple[str, str] | None,
    is_open: bool = False,
    max_text_chars: int | None = DEFAULT_MAX_TEXT_CHARS,
) -> JSONObject:
    """One sample's ``<details>`` block: summary fields and the (pre-rendered) conversation view, each server
    text cut to ``max_text_chars`` (:meth:`SampleResult.capped`)."""
    shown = shown.capped(max_text_chars)
    other = other.capped(max_text_chars) if other is not None else None
    if labels is not None:
        body = compare_html(shown, other, resolver, max(192, thumb_px * 3 // 4), labels)
    else:
        body = conversation_html(shown, resolver, thumb_px)
    bucket = attribution_of(shown).bucket
    return {
        "key": key,
        "status": shown.status,
        "bucket": bucket,
        "bucket_label": BUCKET_LABELS[bucket],
        "status_group": _status_group(shown.status),
        "category": shown.category,
        "trial_statuses": trials_status,
        "is_open": is_open,
        "other_status": other.status if labels is not None and other is not None else None,
        "n_calls": shown.n_search_calls if shown.is_episode or (other is not None and other.is_episode) else None,
        "body": Markup(body),
        "question": shown.question if len(shown.question) < 140 else shown.question[:137] + "...",
    }


def build_report(
    eval_dir: str | os.PathLike,
    compare_dir: str | os.PathLike | None = None,
    max_samples: int | None = 50,
    thumb_px: int = 512,
    trial: int | None = None,
    img_dir: str | os.PathLike | None = None,
    judges: list[str | os.PathLike] | None = None,
    max_text_chars: int | None = DEFAULT_MAX_TEXT_CHARS,
    note: str | None = None,
) -> str:
    """The report's HTML. ``trial`` picks the trial browsed per sample (default: the first);
    ``img_dir`` adds a place to look for source images moved since the run; ``judges``: re-judgings of
    the run (``rejudge``) whose agreement with its judge is shown; ``max_text_chars``: each server text shown
    keeps its beginning and end around a marker (:func:`insight_o3.base.caps.cut_middle`); ``note``: a line shown
    under the title (the keyless demo says there that its endpoints are scripted)."""
    run = load_run(eval_dir)
    other = load_run(compare_dir) if compare_dir is not None else None
    runs = [run] + ([other] if other else [])
    if other is not None and other.name == run.name:
        other.name = f"{other.name} ({other.path})"
    charts = [_accuracy_chart(runs), _trial_chart(runs), _calls_chart(runs)]
    return render(
        "report.html.j2",
        title=f"InSight-o3 report: {run.name}",
        note=note,
        css=Markup(VIEW_CSS),
        run=run,
        other=other,
        multi=other is not None,
        n_trials=len(run.trials),
        n_samples=len(run.trials[0].results),
        generated=f"{_dt.datetime.now():%Y-%m-%d %H:%M}",
        args=[items for items in map(_args_items, runs) if items],
        charts=[Markup(c) for c in charts if c],
        cards=[c for c in map(_run_card, runs) if c],
        failed=[line for line in map(_failed_line, runs) if line],
        compare=_compare_summary(run, other, trial) if other is not None else None,
        agreement=_agreement_section(eval_dir, judges) if judges else None,
        samples=_samples_section(run, other, trial, max_samples, _resolver(runs, img_dir), thumb_px, max_text_chars),
        **_tables(runs),
    )


def _resolver(runs: list[EvalRun], img_dir: str | os.PathLike | None) -> ImageResolver:
    resolver = ImageResolver()
    for r in runs:
        for root in r.image_roots():
            resolver.add_root(root)
    if img_dir:
        resolver.roots.insert(0, Path(img_dir))
    return resolver


def _table_id(base: str, i: int) -> str:
    return base if i == 0 else f"{base}-{i}"


def _tables(runs: list[EvalRun]) -> JSONObject:
    """The report's per-run tables (accuracy, metrics, usage, tool-use health, failures)."""
    table_id = _table_id
    usage = [
        {
            "name": r.name,
            "table": None if t is None else _df_html(t, table_id("usage-table", i)),
            "totals": _totals_line(r),
        }
        for i, (r, t) in enumerate((r, _usage_table(r)) for r in runs)
    ]
    health = [
        {"name": r.name, "alerts": alerts, "table": _df_html(t, table_id("tool-use-table", i))}
        for i, (r, (t, alerts)) in enumerate((r, _tool_health(r)) for r in runs)
        if t is not None
    ]
    failures = [
        (r.name, _df_html(ft, table_id("failure-table", i), index=False) if len(ft) else None)
        for i, (r, ft) in enumerate((r, failure_table(r)) for r in runs)
    ]
    return {
        "accuracy": [
            (r.name, _df_html(accuracy_by_category(r), table_id("category-table", i))) for i, r in enumerate(runs)
        ],
        "metrics": [(r.name, _df_html(_metrics_table(r), table_id("metrics-table", i))) for i, r in enumerate(runs)],
        "usage": usage if any(u["table"] is not None for u in usage) else [],
        "health": health,
        "failures": failures,
        "attribution": _attribution_sections(runs),
    }


def _attribution_sections(runs: list[EvalRun]) -> list[JSONObject]:
    out = []
    for i, r in enumerate(runs):
        t = attribution_tables(r)
        if t is None:
            continue
        out.append(
            {
                "name": r.name,
                "by_trial": _df_html(t["by_trial"], _table_id("attribution-table", i)),
                "by_category": _df_html(t["by_category"], _table_id("attribution-category-table", i)),
                "split": None if t["split"] is None else _df_html(t["split"], _table_id("error-split-table", i)),
                "quality": None if t["quality"] is None else _df_html(t["quality"], _table_id("crop-quality-table", i)),
            }
        )
    return out


def _agreement_section(eval_dir: str | os.PathLike, judges: list[str | os.PathLike]) -> JSONObject:
    """Agreement of the run's judge with the judges of its re-judgings (all trials must be finished)."""
    t = agreement_tables(judge_agreement([read_run(eval_dir), *(read_run(j) for j in judges)]))
    return {
        "judges": _df_html(t["judges"], "judges-table"),
        "pairs": _df_html(t["pairs"], "kappa-table", index=False),
        "n_items": t["items"],  # not "items": Jinja would find the dict's method
        "judged": t["judged"],
        "names": t["names"],
        "fleiss": t["fleiss"],
        "disagreements": t["disagreements"],
    }


def _totals_line(run: EvalRun) -> str | None:
    """Tokens and cost of all trials, and tokens per episode as ``compare`` and the leaderboard count them
    (:func:`~insight_o3.endpoints.usage.system_tokens`: model + vSearcher, the judge's apart)."""
    totals = run.summary.get("run_totals") or {}
    results = [r for t in run.trials for r in t.results]
    usages = [r.record.get("usage") or {} for r in results]
    if not totals and not any(usages):
        return None
    cost = totals.get("cost_usd")
    line = f"All trials: {totals.get('tokens_total', sum(map(total_tokens, usages)))} tokens" + (
        f", US${cost:.4f}" if isinstance(cost, (int, float)) else ", no price file"
    )
    if results:
        judge = sum(total_tokens({"judge": u.get("judge") or {}}) for u in usages) / len(results)
        line += (
            f". Tokens per episode: {sum(map(system_tokens, usages)) / len(results):.0f} (model + vSearcher; "
            f"the judge's {judge:.0f} per episode are not in)"
        )
    return line


def _failed_line(run: EvalRun) -> str | None:
    """How many items the run lost to API errors and how each analysis counts them; None without any."""
    statuses: dict[str, list[str]] = {}
    for t in run.trials:
        for r in t.results:
            statuses.setdefault(r.key, []).append(r.status)
    items = sum(s.count(VerdictStatus.FAILED) for s in statuses.values())
    if not items:
        return None
    samples = sum(all(x == VerdictStatus.FAILED for x in s) for s in statuses.values())
    return (
        f"{run.name}: {items} of {sum(map(len, statuses.values()))} items (sample x trial) were lost to API errors "
        f"({samples} sample(s) without a judged trial). The per-trial accuracy here counts them as wrong (as "
        "eval_metrics.json); compare and export leave them out of the accuracy and the paired test unless "
        "--failed_as_wrong. Rerun evaluate with --retry_failed to judge them."
    )


def _samples_section(
    run: EvalRun,
    other: EvalRun | None,
    trial: int | None,
    max_samples: int | None,
    resolver: ImageResolver,
    thumb_px: int,
    max_text_chars: int | None = DEFAULT_MAX_TEXT_CHARS,
) -> JSONObject:
    shown_trial = run.trial(trial)
    other_trial = other.trial(trial if trial in [t.index for t in other.trials] else None) if other else None
    by_trial = [t.by_key() for t in run.trials]
    results = shown_trial.results
    limit = len(results) if not max_samples or max_samples <= 0 else min(max_samples, len(results))
    counts = Counter(_status_group(r.status) for r in results[:limit])
    labels = (run.name, other.name) if other else None
    other_by_key = other_trial.by_key() if other_trial else {}
    first_open = next((r.key for r in results[:limit] if r.n_search_calls), results[0].key if results else None)
    blocks = [
        _sample_view(
            r.key,
            [bt[r.key].status for bt in by_trial if r.key in bt],
            r,
            other_by_key.get(r.key),
            resolver,
            thumb_px,
            labels,
            is_open=r.key == first_open,
            max_text_chars=max_text_chars,
        )
        for r in results[:limit]
    ]
    return {
        "trial": shown_trial.index,
        "limit": limit,
        "total": len(results),
        "blocks": blocks,
        "status_counts": [
            (s, counts[s]) for s in (VerdictStatus.CORRECT, VerdictStatus.WRONG, VerdictStatus.FAILED) if counts.get(s)
        ],
        "bucket_counts": [
            (bucket, BUCKET_LABELS[bucket], n)
            for bucket in BUCKETS
            if (n := sum(x["bucket"] == bucket for x in blocks)) and bucket != "correct"
        ],
        "categories": sorted({r.category for r in results[:limit]}),
    }


def _compare_summary(a: EvalRun, b: EvalRun, trial: int | None) -> JSONObject:
    ta = a.trial(trial)
    tb = b.trial(trial if trial in [t.index for t in b.trials] else None)
    df = compare_frame(ta, tb)
    counts = df["change"].value_counts()
    changed = df[df["change"] != "same"]
    return {
        "trial_a": ta.index,
        "trial_b": tb.index,
        "name_a": a.name,
        "name_b": b.name,
        "fixed": int(counts.get("fixed", 0)),
        "broken": int(counts.get("broken", 0)),
        "lost": int(counts.get("lost", 0)),
        "table": _df_html(changed, "compare-table", index=False) if len(changed) else None,
    }


def write_report(eval_dir: str | os.PathLike, out: str | os.PathLike, **kw: Any) -> Path:
    """Build the report and write it to ``out`` (parent directories created)."""
    page = build_report(eval_dir, **kw)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, page)
    return out


__all__ = ["build_report", "write_report", "results_frame", "STATUSES"]
