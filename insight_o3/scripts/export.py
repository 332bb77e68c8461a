"""Export a finished evaluation run: trajectories as Parquet and a leaderboard entry as JSON.

    python -m insight_o3.scripts.export outputs/eval/<eval_name> [--output_dir DIR] \\
        [--trajectories PATH] [--leaderboard PATH] [--confidence 0.95] [--failed_as_wrong] [--cluster image|sample]

``trajectories.parquet`` has one row per (sample, trial): the conversation with image references
(never pixels), every vSearcher call, the verdict, the failure attribution, token usage and cost;
``datasets.load_dataset("parquet", data_files=PATH)`` or ``pyarrow.parquet.read_table(PATH)`` loads it
(columns: :data:`insight_o3.analysis.export.TRAJECTORY_SCHEMA`). ``leaderboard.json`` holds the
accuracy with its interval (:mod:`insight_o3.analysis.significance`: each sample's trials averaged, Wilson
at the effective sample size over ``--cluster`` clusters, by default the samples sharing an image), overall and
per category, the items lost to API errors (left out unless ``--failed_as_wrong``; the accuracy under the other
rule beside), tokens per episode (model + vSearcher; the judge's apart), cost, the failure
attribution and the run card's sha256. Both go to ``--output_dir`` (default ``<eval_dir>/export``).

Exit status: 0 written; 2 bad input (no run there, an unfinished trial, a malformed record, a run without
samples); 3 an
output could not be written.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from ._shared import ExitCode, add_output_dir, entry_point, new_parser, run_main, setup_logging
from .compare import add_stats_flags

if TYPE_CHECKING:
    from ..analysis.settings import Cluster
    from ..base.json_types import JSONObject


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("python -m insight_o3.scripts.export", __doc__.split("\n")[0])
    p.add_argument("eval_dir", help="a finished evaluation directory (<output_dir>/<eval_name>)")
    add_output_dir(p, dest="out_dir", help="where both files go (default: <eval_dir>/export)")
    p.add_argument("--trajectories", default=None, help="the Parquet file (default: <output_dir>/trajectories.parquet)")
    p.add_argument("--leaderboard", default=None, help="the JSON file (default: <output_dir>/leaderboard.json)")
    add_stats_flags(p, resampling=False)
    return p


def summary_lines(
    name: str, entry: JSONObject, confidence: float, failed_as_wrong: bool, cluster: Cluster
) -> list[str]:
    """The accuracy as printed: over the samples it counts (``k of n`` when some had no judged trial), with the
    lost items' other rule beside."""
    from ..analysis.settings import Cluster

    acc = entry["accuracy"]
    counted = acc["n"] if acc["n"] == entry["num_samples"] else f"{acc['n']} of {entry['num_samples']}"
    on = f" on {acc['clusters']} image(s)" if cluster is Cluster.IMAGE else ""
    out = [
        f"{name}: accuracy {100 * acc['mean']:.1f}% [{100 * acc['ci'][0]:.1f}, {100 * acc['ci'][1]:.1f}] "
        f"({100 * confidence:g}% CI, {counted} samples{on} x {entry['num_trials']} trial(s))"
    ]
    failed = entry["failed"]
    if failed["items"]:
        other = failed["accuracy_other_rule"]
        beside = (
            f"; {'left out' if failed_as_wrong else 'counted as wrong'} instead: {100 * other['mean']:.1f}% "
            f"[{100 * other['ci'][0]:.1f}, {100 * other['ci'][1]:.1f}] on {other['n']} samples"
            if other
            else ""
        )
        out.append(
            f"{failed['items']} item(s) lost to API errors: {failed['counted_as']} "
            f"({failed['samples_without_a_judged_trial']} sample(s) without a judged trial){beside}"
        )
    return out


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    p = build_parser()
    a = p.parse_args(argv)
    from ..analysis.export import leaderboard, trajectory_rows, write_trajectories
    from ..analysis.outcomes import PairingError
    from ..analysis.run_records import read_run
    from ..analysis.settings import Cluster
    from ..evaluation.run_dir import RunDirError
    from ..evaluation.schema import RecordError
    from ..storage.atomic import make_output_dir, write_json_atomic
    from .compare import check_stats_flags

    check_stats_flags(p, a)
    out_dir = a.out_dir or os.path.join(a.eval_dir, "export")

    def body() -> int:
        run = read_run(a.eval_dir)
        traj = a.trajectories or os.path.join(out_dir, "trajectories.parquet")
        board = a.leaderboard or os.path.join(out_dir, "leaderboard.json")
        # first: a run without samples writes nothing
        entry = leaderboard(run, a.confidence, a.failed_as_wrong, Cluster(a.cluster))
        rows = trajectory_rows(run)
        for path in (traj, board):
            make_output_dir(os.path.dirname(os.path.abspath(path)))
        size = write_trajectories(traj, rows)
        write_json_atomic(board, entry)
        print(f"wrote {traj} ({len(rows)} rows, {size / 1e6:.2f} MB) and {board}")
        for line in summary_lines(run.name, entry, a.confidence, a.failed_as_wrong, Cluster(a.cluster)):
            print(line)
        print(f"run card sha256: {entry['run_card_sha256']} (in the leaderboard entry: the run it comes from)")
        return ExitCode.OK

    return run_main(body, bad_input=(RunDirError, RecordError, PairingError))


if __name__ == "__main__":
    sys.exit(main())
