"""Compare two or more runs on the same benchmark: is the difference real, and where does it come from?

    python -m insight_o3.scripts.compare outputs/eval/gpt-5-mini/o3_bench outputs/eval/insight-o3/o3_bench \\
        [more runs] [--output_file compare.html] [--json compare.json] [--max_flips 50] [--allow_mixed_settings] \\
        [--confidence 0.95] [--n_resamples 10000] [--seed 0] [--failed_as_wrong]

The first run is the reference; every other run is compared with it over the samples, each run with all
its trials averaged per sample: accuracy with Wilson intervals at the effective sample size, the paired
difference with Newcombe's paired score interval and the paired bootstrap over samples, the paired
sign-flip test over samples (McNemar's counts of (sample, trial) pairs only as a description), the same
per category, and the samples whose outcome flipped — each linked to the two conversations side
by side in the HTML page, which also plots accuracy against tokens and against cost per episode and shows
why episodes failed (:mod:`insight_o3.evaluation.attribution`). Items lost to API errors are left out
and counted per run (``--failed_as_wrong`` counts them as wrong). Statistics:
:mod:`insight_o3.analysis.significance`.

Runs whose ``run_card.json`` differ on what a verdict depends on — the benchmark file, subset, judge model,
judge flow, answer length or prompts — are refused (exit 2, naming each difference) unless
``--allow_mixed_settings``; the judge cache is not one, and a single model judged with its ``extract``
flow against InSight-o3 with its ``verify`` flow (each mode's default, as in the paper) is accepted with a
note. Exit status: 0 written; 2 bad input (such runs, runs on other samples, an
unfinished trial, a malformed record); 3 an output could not be written.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..analysis.comparison import Comparison, RunStats, compare_runs, unique_names
from ..analysis.run_records import RunRecords, read_run
from ..analysis.significance import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, DEFAULT_SEED, PairingError
from ..evaluation.run_card import verdict_conflicts
from ..evaluation.run_dir import RunDirError
from ..evaluation.schema import RecordError
from ..imaging.images import ImageError
from ..storage.atomic import make_output_dir, write_json_atomic
from ._shared import ExitCode, add_output_file, entry_point, new_parser, run_main, setup_logging
from .gather_eval_results import MixedSettingsError


def add_stats_flags(p: argparse.ArgumentParser, resampling: bool = True) -> None:
    """The flags of the statistics (shared by ``compare`` and ``export``; ``resampling``: the test's and
    the bootstrap's ``--n_resamples`` and ``--seed``)."""
    g = p.add_argument_group("statistics")
    g.add_argument("--confidence", type=float, default=DEFAULT_CONFIDENCE, help="confidence level of the intervals")
    if resampling:
        g.add_argument(
            "--n_resamples",
            type=int,
            default=DEFAULT_RESAMPLES,
            help="sign-flip and bootstrap resamples (the test is exact when 2^samples is at most this)",
        )
        g.add_argument(
            "--seed", type=int, default=DEFAULT_SEED, help="seed of the resampling (same seed, same numbers)"
        )
    g.add_argument(
        "--failed_as_wrong",
        action="store_true",
        help="count items lost to API errors (status failed) as wrong answers (default: leave them out, "
        "and count them per run)",
    )


def check_stats_flags(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    if not 0 < a.confidence < 1:
        p.error("--confidence must be in (0, 1)")
    if getattr(a, "n_resamples", DEFAULT_RESAMPLES) < 100:
        p.error("--n_resamples must be at least 100")


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("python -m insight_o3.scripts.compare", __doc__.split("\n")[0])
    p.add_argument("eval_dirs", nargs="+", help="two or more finished eval dirs; the first is the reference")
    add_output_file(p, default="compare.html", help="the HTML page (default: compare.html)")
    p.add_argument("--json", default=None, help="also write every number as JSON here")
    p.add_argument("--max_flips", type=int, default=50, help="flipped samples rendered side by side per pair (0: all)")
    p.add_argument("--thumb_px", type=int, default=384, help="longer side of the embedded crop thumbnails")
    p.add_argument("--img_dir", default=None, help="where to find source images if they moved since the runs")
    p.add_argument(
        "--allow_mixed_settings",
        action="store_true",
        help="compare runs whose run cards differ on benchmark, subset, judge or prompts (with a warning)",
    )
    add_stats_flags(p)
    return p


def check_cards(runs: list[RunRecords], allow: bool) -> list[str]:
    """Refuse runs whose verdicts could differ for another reason than the system
    (:func:`~insight_o3.evaluation.run_card.verdict_conflicts`: benchmark, subset, judge model, flow and
    answer length, prompts); returns the lines to print (runs without a card, differences accepted)."""
    names = unique_names(runs)
    cards = {n: r.card for n, r in zip(names, runs) if r.card is not None}
    notes = [
        f"warning: {n}: no run_card.json, its benchmark and judge cannot be checked"
        for n, r in zip(names, runs)
        if r.card is None
    ]
    conflicts, accepted = verdict_conflicts(cards)
    if conflicts and not allow:
        raise MixedSettingsError(
            "runs on different benchmarks or judges cannot be compared:\n  "
            + "\n  ".join(conflicts)
            + "\n(rerun them alike, e.g. `rejudge` with the same judge, or pass --allow_mixed_settings)"
        )
    return notes + [f"note: {n}" for n in accepted] + [f"warning: mixed settings: {c}" for c in conflicts]


def _failed(r: RunStats, failed_as_wrong: bool) -> str:
    if not r.failed_items:
        return ""
    how = "counted as wrong" if failed_as_wrong else f"left out; {r.failed_samples} sample(s) without a judged trial"
    return f", {r.failed_items} item(s) lost to API errors ({how})"


def _pct(lo: float, hi: float, sign: str = "") -> str:
    return f"[{100 * lo:{sign}.1f}, {100 * hi:{sign}.1f}]"


def summary_lines(c: Comparison) -> list[str]:
    pct = 100 * c.confidence
    out = [
        f"accuracy ({pct:g}% CI: Wilson at the effective sample size; each sample's trials averaged; "
        "tokens/episode = model + vSearcher, the judge's left out; cost includes the judge):"
    ]
    for r in c.runs:
        a = r.accuracy
        out.append(
            f"  {r.name}: {100 * a.mean:.1f}% {_pct(a.low, a.high)}  ({a.n} samples x {r.n_trials} trial(s)"
            f"{_failed(r, c.failed_as_wrong)}, {r.tokens_per_episode:.0f} tokens/episode"
            + (f", ${r.cost_per_episode:.4f}/episode)" if r.cost_per_episode is not None else ")")
        )
    for p in c.pairs:
        o, m = p.overall, p.overall.mcnemar
        fixed = sum(f.change == "fixed" for f in p.flips)
        excluded = f", {p.excluded} left out (lost to API errors)" if p.excluded else ""
        boot = f"; paired bootstrap {_pct(*o.bootstrap, '+')}" if o.bootstrap else ""
        out.append(
            f"{p.b} vs {p.a}: {100 * o.difference:+.1f} points {_pct(o.low, o.high, '+')} on {o.n} paired "
            f"samples{excluded}; paired sign-flip test p = {o.pvalue:.3g}{' (exact)' if o.exact else ''}{boot}; "
            f"{len(p.flips)} sample(s) flipped ({fixed} fixed, {len(p.flips) - fixed} broken); "
            f"descriptive: {m.b} (sample, trial) pair(s) only {p.a} right, {m.c} only {p.b} right"
        )
    return out


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    p = build_parser()
    a = p.parse_args(argv)
    check_stats_flags(p, a)
    if len(a.eval_dirs) < 2:
        p.error("give two or more eval dirs")
    if a.thumb_px < 32:
        p.error("--thumb_px must be at least 32")

    def body() -> int:
        from ..viz.compare_report import write_compare_report  # matplotlib only when writing

        runs = [read_run(d) for d in a.eval_dirs]
        notes = check_cards(runs, a.allow_mixed_settings)
        comparison = compare_runs(runs, a.n_resamples, a.confidence, a.seed, a.failed_as_wrong)
        for line in summary_lines(comparison):
            print(line)
        for n in notes:
            print(n, file=sys.stderr)
        make_output_dir(os.path.dirname(os.path.abspath(a.out)))
        out = write_compare_report(
            comparison, runs, a.out, max_flips=a.max_flips, thumb_px=a.thumb_px, img_dir=a.img_dir, notes=notes
        )
        print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")
        if a.json:
            write_json_atomic(a.json, comparison.to_dict())
            print(f"wrote {a.json}")
        return ExitCode.OK

    return run_main(body, bad_input=(RunDirError, RecordError, PairingError, MixedSettingsError, ImageError))


if __name__ == "__main__":
    sys.exit(main())
