"""Gather evaluation summaries into a settings × datasets table.

    python -m insight_o3.scripts.gather_eval_results --settings gpt-5-mini qwen3-vl-8b \\
        --datasets o3_bench vstar [--output_dir ./outputs/eval] [--csv t.csv] [--markdown t.md]

Reads ``<output_dir>/<setting>/<dataset>/summary_metrics.json`` through
:class:`~insight_o3.evaluation.run_dir.RunDir` (written by
``insight_o3.scripts.evaluate`` with ``--eval_name <setting>/<dataset>``). Cells are
``mean±std @trials`` of the accuracy in percent. With a single dataset the table has one column
per category instead. Missing results are shown as ``—`` with a note; runs whose success or
completion rate is below 100% get a warning, since their accuracy counts lost or truncated queries
as wrong. Runs that recorded token usage add ``tokens`` (and, with prices, ``cost_usd``) columns:
the totals over all trials (and datasets of the row).

Every run's ``run_card.json`` is compared: runs in one column (one dataset) must agree on what a verdict
depends on (:func:`~insight_o3.evaluation.run_card.verdict_conflicts`, as ``compare``: benchmark file,
subset, judge model, flow and answer length, prompts; not the judge cache, and each mode's own default
judge flow is accepted), runs in one row (one setting) on the model-side settings
(image budget, request settings, prompts …). Otherwise the command refuses (exit 2), naming what
differs, unless ``--allow_mixed_settings`` (then it warns). Subset runs always get a warning.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from ._shared import OUTPUT_ROOT, ExitCode, entry_point, new_parser

if TYPE_CHECKING:
    import pandas as pd

    from ..evaluation.run_dir import RunDir

MISSING = "—"


class SummaryError(ValueError):
    """A summary file that exists but cannot be used; the message names the file and field."""


class MixedSettingsError(ValueError):
    """Runs that would share a row or column were made with different settings."""


@dataclass
class Stat:
    mean: float
    std: float

    def cell(self, trials: int | None) -> str:
        suffix = f" @{trials}" if trials is not None else ""
        return f"{100 * self.mean:.1f}±{100 * self.std:.1f}{suffix}"


@dataclass
class Summary:
    path: str
    num_trials: int | None
    accuracy: Stat
    success_rate: Stat | None
    completion_rate: Stat | None
    critical_failure_ratio: Stat | None
    categories: dict[str, Stat]
    tokens_total: int | None = None
    cost_usd: float | None = None


#: The table's runs: (setting, dataset) -> that run's summary.
Summaries: TypeAlias = dict[tuple[str, str], Summary]


def _stat(value: Any, path: str, field: str) -> Stat:
    if isinstance(value, (int, float)) and not isinstance(value, bool):  # a single-trial number
        return Stat(float(value), 0.0)
    if not isinstance(value, dict) or "mean" not in value:
        raise SummaryError(f"{path}: field '{field}' must be a number or an object with 'mean' and 'std'")
    try:
        mean, std = float(value["mean"]), float(value.get("std", 0.0))
    except (TypeError, ValueError):
        raise SummaryError(f"{path}: field '{field}' has a non-numeric mean/std") from None
    if math.isnan(mean):
        raise SummaryError(f"{path}: field '{field}' mean is NaN")
    return Stat(mean, std)


def load_summary(run: str | RunDir) -> Summary:
    """A run's ``summary_metrics.json`` (a :class:`RunDir`, or the file's path), read through :class:`RunDir`
    (:class:`~insight_o3.evaluation.run_dir.StaleSummary` when it covers fewer trials than the run holds),
    validated field by field."""
    from ..evaluation.run_dir import SUMMARY_FILE, RunDir

    rd = run if isinstance(run, RunDir) else RunDir(os.path.dirname(os.path.abspath(run)))
    path = rd.file(SUMMARY_FILE)
    data = rd.summary()
    if data is None:
        raise SummaryError(f"{path}: not found")
    if "overall_accuracy" not in data:
        raise SummaryError(f"{path}: field 'overall_accuracy' is missing")
    trials = data.get("num_trials")
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int)):
        raise SummaryError(f"{path}: field 'num_trials' must be an integer")
    opt = {
        k: _stat(data[k], path, k) if k in data else None
        for k in ("overall_success_rate", "overall_completion_rate", "critical_failure_ratio")
    }
    cats = data.get("category_accuracy") or {}
    if not isinstance(cats, dict):
        raise SummaryError(f"{path}: field 'category_accuracy' must be an object")
    totals = data.get("run_totals") or {}
    if not isinstance(totals, dict):
        raise SummaryError(f"{path}: field 'run_totals' must be an object")
    tokens, cost = totals.get("tokens_total"), totals.get("cost_usd")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)):
        raise SummaryError(f"{path}: field 'run_totals.tokens_total' must be an integer")
    if cost is not None and (isinstance(cost, bool) or not isinstance(cost, (int, float))):
        raise SummaryError(f"{path}: field 'run_totals.cost_usd' must be a number or null")
    return Summary(
        path,
        trials,
        _stat(data["overall_accuracy"], path, "overall_accuracy"),
        opt["overall_success_rate"],
        opt["overall_completion_rate"],
        opt["critical_failure_ratio"],
        {str(k): _stat(v, path, f"category_accuracy.{k}") for k, v in cats.items()},
        tokens,
        None if cost is None else float(cost),
    )


def summary_path(output_dir: str, setting: str, dataset: str) -> str:
    from ..evaluation.run_dir import SUMMARY_FILE, RunDir

    return RunDir.at(output_dir, os.path.join(setting, dataset)).file(SUMMARY_FILE)


def warnings_for(name: str, s: Summary) -> list[str]:
    out = []
    for label, stat in (("success rate", s.success_rate), ("completion rate", s.completion_rate)):
        if stat is not None and stat.mean < 1.0 - 1e-9:
            out.append(f"warning: {name}: {label} {100 * stat.mean:.1f}% < 100%")
    if s.critical_failure_ratio is not None and s.critical_failure_ratio.mean > 0:
        out.append(
            f"warning: {name}: {100 * s.critical_failure_ratio.mean:.1f}% of queries lost to API errors "
            "(rerun evaluate with --retry_failed)"
        )
    return out


def settings_conflicts(cards: dict[tuple[str, str], dict]) -> list[str]:
    """What differs between runs sharing a column (a dataset) or a row (a setting)."""
    from ..evaluation.run_card import ROW_KEYS, differences, verdict_conflicts

    out = []
    for ds in dict.fromkeys(d for _, d in cards):
        col = {st: c for (st, d), c in cards.items() if d == ds}
        out += [f"column {ds}: {line}" for line in verdict_conflicts(col)[0]]
    for st in dict.fromkeys(s for s, _ in cards):
        row = {ds: c for (s, ds), c in cards.items() if s == st}
        out += [f"row {st}: {line}" for line in differences(row, ROW_KEYS)]
    return out


def gather(
    output_dir: str, settings: list[str], datasets: list[str], allow_mixed_settings: bool = False
) -> tuple[pd.DataFrame, list[str]]:
    """The table and the notes/warnings to print under it. Raises SummaryError for corrupt files and
    MixedSettingsError (naming what differs) for runs whose run cards disagree, unless allowed."""
    from ..evaluation.run_dir import SUMMARY_FILE, RunDir, StaleSummary

    summaries: Summaries = {}
    cards: dict[tuple[str, str], dict] = {}
    notes: list[str] = []
    for st in settings:
        for ds in datasets:
            rd = RunDir.at(output_dir, os.path.join(st, ds))
            path = rd.file(SUMMARY_FILE)
            if os.path.isfile(path):
                rd.check_format()
                try:
                    summaries[(st, ds)] = load_summary(rd)
                except StaleSummary as e:
                    notes.append(f"note: {st}/{ds}: not finished, shown as {MISSING}: {e}")
                    continue
                notes += warnings_for(f"{st}/{ds}", summaries[(st, ds)])
                card = rd.run_card()
                if card is not None:
                    cards[(st, ds)] = card
                    if card.get("subset"):
                        notes.append(
                            f"warning: {st}/{ds}: a subset run ({card.get('num_samples')} samples, "
                            f"{json.dumps(card['subset'], sort_keys=True)}), not the full benchmark"
                        )
            else:
                notes.append(f"note: {st}/{ds}: no results ({path} not found), shown as {MISSING}")
    conflicts = settings_conflicts(cards)
    if conflicts and not allow_mixed_settings:
        raise MixedSettingsError(
            "runs with different settings would share a row or column:\n  "
            + "\n  ".join(conflicts)
            + "\n(rerun them alike, or pass --allow_mixed_settings to show them anyway)"
        )
    notes += [f"warning: mixed settings: {c}" for c in conflicts]
    if len(datasets) == 1:
        table = _category_table(summaries, settings, datasets[0])
    else:
        table = _dataset_table(summaries, settings, datasets)
    _add_usage_columns(table, summaries, settings, datasets)
    return table, notes


def _add_usage_columns(table: pd.DataFrame, summaries: Summaries, settings: list[str], datasets: list[str]) -> None:
    """``tokens`` / ``cost_usd`` columns (totals of the row's runs) when any run recorded them."""
    if not any(s.tokens_total is not None for s in summaries.values()):
        return
    has_cost = any(s.cost_usd is not None for s in summaries.values())
    tokens, costs = [], []
    for st in settings:
        found = [summaries[(st, ds)] for ds in datasets if (st, ds) in summaries]
        tk = [s.tokens_total for s in found if s.tokens_total is not None]
        cs = [s.cost_usd for s in found if s.cost_usd is not None]
        tokens.append(str(sum(tk)) if tk else MISSING)
        costs.append(f"{sum(cs):.4f}" if cs else MISSING)
    table["tokens"] = tokens
    if has_cost:
        table["cost_usd"] = costs


def _dataset_table(summaries: Summaries, settings: list[str], datasets: list[str]) -> pd.DataFrame:
    import pandas as pd

    rows = {}
    for st in settings:
        row = {}
        for ds in datasets:
            s = summaries.get((st, ds))
            row[ds] = s.accuracy.cell(s.num_trials) if s else MISSING
        found = [summaries[(st, ds)].accuracy.mean for ds in datasets if (st, ds) in summaries]
        row["average"] = f"{100 * sum(found) / len(found):.1f}" if len(found) == len(datasets) else MISSING
        rows[st] = row
    return pd.DataFrame.from_dict(rows, orient="index", columns=[*datasets, "average"]).rename_axis("setting")


def _category_table(summaries: Summaries, settings: list[str], dataset: str) -> pd.DataFrame:
    import pandas as pd

    cats = list(dict.fromkeys(c for (st, _), s in summaries.items() for c in s.categories))
    rows = {}
    for st in settings:
        s = summaries.get((st, dataset))
        row = {"overall": s.accuracy.cell(s.num_trials) if s else MISSING}
        for c in cats:
            row[c] = s.categories[c].cell(None) if s and c in s.categories else MISSING
        rows[st] = row
    return pd.DataFrame.from_dict(rows, orient="index", columns=["overall", *cats]).rename_axis("setting")


#: what a spreadsheet reads as the start of a formula (OWASP's CSV injection list)
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> str:
    """``value`` as a CSV cell a spreadsheet shows as text: one starting like a formula (a setting or category
    name such as ``=HYPERLINK(...)``) gets a leading ``'``; a number is left as it is."""
    text = str(value)
    if text.startswith(_FORMULA_START):
        try:
            float(text)
        except ValueError:
            return "'" + text
    return text


def to_csv(df: pd.DataFrame) -> str:
    """The table as CSV, every cell and label through :func:`csv_cell`."""
    import pandas as pd

    safe = df.map(csv_cell)
    safe.index = pd.Index([csv_cell(i) for i in df.index], name=csv_cell(df.index.name or ""))
    safe.columns = [csv_cell(c) for c in df.columns]
    return safe.to_csv()


def markdown_cell(value: Any) -> str:
    """``value`` as one Markdown table cell: ``|`` escaped (it would end the cell), line breaks as spaces."""
    return " ".join(str(value).splitlines()).replace("|", "\\|")


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (no dependency on ``tabulate``); every cell through :func:`markdown_cell`."""
    header = [markdown_cell(df.index.name or ""), *map(markdown_cell, df.columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + [":---:"] * len(df.columns)) + "|"]
    for idx, row in df.iterrows():
        cells = [markdown_cell(idx), *map(markdown_cell, row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("python -m insight_o3.scripts.gather_eval_results", __doc__.split("\n")[0])
    p.add_argument("--settings", nargs="+", required=True, help="eval_name prefixes, e.g. model names")
    p.add_argument("--datasets", nargs="+", required=True, help="benchmark names, e.g. o3_bench vstar")
    p.add_argument(
        "--output_dir",
        default=os.path.join(OUTPUT_ROOT, "eval"),
        help="where evaluate wrote the runs: <output_dir>/<setting>/<dataset> (default: %(default)s, evaluate's)",
    )
    p.add_argument("--csv", help="also write the table as CSV here")
    p.add_argument("--markdown", help="also write the table as Markdown here")
    p.add_argument(
        "--allow_mixed_settings",
        action="store_true",
        help="show runs whose run_card.json settings differ in one row/column (with a warning)",
    )
    return p


@entry_point
def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    from ..evaluation.run_dir import RunDirError
    from ..storage.atomic import write_text_atomic

    try:
        table, notes = gather(a.output_dir, a.settings, a.datasets, a.allow_mixed_settings)
    except (SummaryError, MixedSettingsError, RunDirError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    import pandas as pd

    with pd.option_context("display.max_columns", None, "display.width", 200):
        print(table.to_string())
    for n in notes:
        print(n)
    if a.csv:
        write_text_atomic(a.csv, to_csv(table))
    if a.markdown:
        write_text_atomic(a.markdown, to_markdown(table))
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
