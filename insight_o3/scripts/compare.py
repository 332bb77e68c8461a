"""Compare two or more runs on the same benchmark: is the difference real, and where does it come from?

    python -m insight_o3.scripts.compare outputs/eval/gpt-5-mini/o3_bench outputs/eval/insight-o3/o3_bench \\
        [more runs] [--output_file compare.html] [--json compare.json] [--max_flips 50] [--allow_mixed_settings] \\
        [--confidence 0.95] [--n_resamples 10000] [--seed 0] [--failed_as_wrong] [--cluster image|sample]

The first run is the reference; every other run is compared with it over the samples, each run with all
its trials averaged per sample, and the samples grouped into independent clusters (``--cluster``: by default
the samples that share an image, whose outcomes are not independent; ``sample``: each sample alone). Printed and
written: accuracy with Wilson intervals at the effective sample size; the paired difference with its interval
(Bonett–Price, cluster-robust) and the cluster bootstrap; the paired sign-flip test over clusters, which decides
(Holm-adjusted over the pairs when there are several); what the comparison could have found (the smallest
attainable p, the standard error, the minimum detectable effect at 80 % power, and how much of the variance
more trials would remove); McNemar's counts of (sample, trial) pairs only as a description; the same per
category (Holm-adjusted, exploratory), and the samples whose outcome flipped — each linked to the two
conversations side by side in the HTML page, which also plots accuracy against tokens and against cost per
episode and shows why episodes failed (:mod:`insight_o3.evaluation.attribution`). Items lost to API errors are
left out and counted per run (``--failed_as_wrong`` counts them as wrong); with such items the figures under
the other rule are printed beside. Statistics: :mod:`insight_o3.analysis.significance`,
:mod:`insight_o3.analysis.power`.

Runs whose ``run_card.json`` differ on what a verdict depends on — the benchmark file, subset, judge model,
judge flow, answer length or prompts — are refused (exit 2, naming each difference) unless
``--allow_mixed_settings``; the judge cache is not one, and a single model judged with its ``extract``
flow against InSight-o3 with its ``verify`` flow (each mode's default, as in the paper) is accepted with a
note. Exit status: 0 written; 2 bad input (such runs, runs on other samples or giving a sample other
categories, an unfinished trial, a malformed record); 3 an output could not be written.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from ..analysis.settings import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, DEFAULT_SEED, Cluster
from ._shared import ExitCode, add_output_file, entry_point, new_parser, run_main, setup_logging

if TYPE_CHECKING:
    from ..analysis.comparison import Comparison, RunStats
    from ..analysis.paired import Paired, PairResult
    from ..analysis.run_records import RunRecords


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
    g.add_argument(
        "--cluster",
        choices=[c.value for c in Cluster],
        default=Cluster.IMAGE.value,
        help="the independent unit: the samples that share an image (default; a sample without a recorded image "
        "is its own) or each sample alone",
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
    from ..analysis.comparison import unique_names
    from ..evaluation.run_card import verdict_conflicts
    from .gather_eval_results import MixedSettingsError

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


def _units(n: int, clusters: int, cluster: Cluster) -> str:
    if cluster is Cluster.SAMPLE:
        return f"{n} samples"
    return f"{n} samples on {clusters} image(s)"


def _p(o: Paired, what: str = "pairs") -> str:
    text = f"p = {o.pvalue:.3g}{' (exact)' if o.exact else ''}"
    return text + (f", Holm over the {what} {o.pvalue_holm:.3g}" if o.pvalue_holm is not None else "")


def _rule(failed_as_wrong: bool) -> str:
    return "left out" if failed_as_wrong else "counted as wrong"


def _reach(o: Paired, unit: str) -> list[str]:
    """What the comparison could have found: SE, MDE, variance components, and whether p < alpha can happen."""
    out = []
    if not o.can_be_significant:
        out.append(
            f"  cannot be significant: the runs differ on {o.differing} {unit}(s), so the smallest attainable p is "
            f"{o.min_pvalue:.3g} >= {o.alpha:g}"
        )
    if o.se <= 0 or o.mde is None:
        out.append("  precision: the differences do not vary over the clusters: no standard error can be estimated")
        return out
    out.append(
        f"  precision: SE {100 * o.se:.1f} points; minimum detectable effect (80% power at {o.alpha:g}): "
        f"{100 * o.mde:.1f} points" + ("; smaller true differences are often missed" if not o.significant else "")
    )
    c = o.components
    if c is not None:
        more = ", ".join(
            f"{k}x the trials: SE {100 * c.se(k):.1f}" + (f" (MDE {100 * m:.1f})" if (m := c.detectable(k)) else "")
            for k in (2, 4)
        )
        out.append(
            f"  variance: {100 * (1 - c.within_share):.0f}% from which questions, {100 * c.within_share:.0f}% from "
            f"trial noise; {more}; unlimited trials: SE {100 * c.se(float('inf')):.1f}"
        )
    return out


def pair_lines(p: PairResult, confidence: float, failed_as_wrong: bool) -> list[str]:
    """The console lines of one pair: the difference, the test that decides, its reach, caveats, categories."""
    from ..analysis.paired import MIN_CLUSTERS_FOR_BOOTSTRAP

    o, m = p.overall, p.overall.mcnemar
    unit = "image" if p.cluster is Cluster.IMAGE else "sample"
    fixed = sum(f.change == "fixed" for f in p.flips)
    excluded = f", {p.excluded} left out (lost to API errors)" if p.excluded else ""
    verdict = "significant" if o.significant else "not significant"
    out = [
        f"{p.b} vs {p.a}: {100 * o.difference:+.1f} points, {100 * confidence:g}% CI {_pct(o.low, o.high, '+')} "
        f"on {_units(o.n, o.clusters, p.cluster)}{excluded}; paired sign-flip test over {o.clusters} {unit}(s) "
        f"{_p(o)}: {verdict} at {o.alpha:g} (the test decides; the interval may disagree near the boundary)",
        *_reach(o, unit),
    ]
    if not o.interval_agrees:
        out.append(
            "  note: here the interval and the test disagree "
            + (
                "(the interval excludes 0, the test does not reject)"
                if o.pvalue >= o.alpha
                else "(the test rejects, the interval holds 0)"
            )
            + ": the test decides"
        )
    if p.other_rule is not None:
        r = p.other_rule
        out.append(
            f"  with the lost items {_rule(failed_as_wrong)} instead: {100 * r.difference:+.1f} points "
            f"{_pct(r.low, r.high, '+')} on {r.n} samples, p = {r.pvalue:.3g}"
        )
    if o.bootstrap:
        lo, hi = o.bootstrap
        caveat = []
        if o.clusters < MIN_CLUSTERS_FOR_BOOTSTRAP:
            caveat.append(f"only {o.clusters} {unit}s: too narrow below {MIN_CLUSTERS_FOR_BOOTSTRAP}, for reference")
        if hi - lo < 1e-12:
            caveat.append("degenerate: every resample gives the same difference")
        out.append(f"  paired {unit} bootstrap {_pct(lo, hi, '+')}" + (f" ({'; '.join(caveat)})" if caveat else ""))
    if len(p.categories) > 1:
        cats = "; ".join(
            f"{c} {100 * v.difference:+.1f} (n={v.n}, p = {v.pvalue:.3g}, Holm {v.pvalue_holm:.3g}"
            + (", cannot be significant" if not v.can_be_significant else "")
            + ")"
            for c, v in p.categories.items()
        )
        out.append(f"  per category (exploratory; Holm over {len(p.categories)} categories): {cats}")
    out.append(
        f"  {len(p.flips)} sample(s) flipped ({fixed} fixed, {len(p.flips) - fixed} broken); "
        f"descriptive: {m.b} (sample, trial) pair(s) only {p.a} right, {m.c} only {p.b} right"
    )
    return out


def summary_lines(c: Comparison) -> list[str]:
    pct = 100 * c.confidence
    unit = "clusters of samples sharing an image" if c.cluster is Cluster.IMAGE else "samples"
    out = [
        f"accuracy ({pct:g}% CI: Wilson at the effective sample size over {unit}; each sample's trials averaged; "
        "tokens/episode = model + vSearcher, the judge's left out; cost includes the judge):"
    ]
    for r in c.runs:
        a = r.accuracy
        out.append(
            f"  {r.name}: {100 * a.mean:.1f}% {_pct(a.low, a.high)}  ({_units(a.n, a.clusters, c.cluster)} x "
            f"{r.n_trials} trial(s){_failed(r, c.failed_as_wrong)}, {r.tokens_per_episode:.0f} tokens/episode"
            + (f", ${r.cost_per_episode:.4f}/episode)" if r.cost_per_episode is not None else ")")
        )
        if r.other_rule is not None:
            o = r.other_rule
            out.append(
                f"    with the lost items {_rule(c.failed_as_wrong)} instead: {100 * o.mean:.1f}% "
                f"{_pct(o.low, o.high)} ({o.n} samples)"
            )
    if len(c.pairs) > 1:
        out.append(f"{len(c.pairs)} runs against {c.runs[0].name}: p-values Holm-adjusted over the pairs")
    for p in c.pairs:
        out += pair_lines(p, c.confidence, c.failed_as_wrong)
    return out


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    p = build_parser()
    a = p.parse_args(argv)
    from ..analysis.comparison import compare_runs
    from ..analysis.outcomes import PairingError
    from ..analysis.run_records import read_run
    from ..evaluation.run_dir import RunDirError
    from ..evaluation.schema import RecordError
    from ..imaging.images import ImageError
    from ..storage.atomic import make_output_dir, write_json_atomic
    from .gather_eval_results import MixedSettingsError

    check_stats_flags(p, a)
    if len(a.eval_dirs) < 2:
        p.error("give two or more eval dirs")
    if a.thumb_px < 32:
        p.error("--thumb_px must be at least 32")

    def body() -> int:
        from ..viz.compare_report import write_compare_report  # matplotlib only when writing

        runs = [read_run(d) for d in a.eval_dirs]
        notes = check_cards(runs, a.allow_mixed_settings)
        comparison = compare_runs(runs, a.n_resamples, a.confidence, a.seed, a.failed_as_wrong, Cluster(a.cluster))
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
