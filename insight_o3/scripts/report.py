"""Write a self-contained HTML report of an evaluation run.

    python -m insight_o3.scripts.report outputs/eval/<eval_name> [--compare outputs/eval/<other>] \
        --output_file report.html [--max_samples 50] [--thumb_px 512] [--trial K] [--img_dir DIR] \
        [--judges <eval_dir>@rejudge-<judge> ...]

The file embeds everything (charts as SVG, images as JPEG thumbnails) and opens in any browser
without a server or network access. Exit status: 0 written, 2 bad input (no run there, a
broken run, an unreadable image) (:class:`insight_o3.scripts._shared.ExitCode`).
"""

from __future__ import annotations

import argparse
import sys

from ..base.caps import DEFAULT_MAX_TEXT_CHARS
from ._shared import ExitCode, add_output_file, entry_point, new_parser, run_main, setup_logging


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("python -m insight_o3.scripts.report", __doc__.split("\n\n")[0])
    p.add_argument("eval_dir", help="outputs/eval/<eval_name> (with trial_<k>/) or one trial_<k> directory")
    p.add_argument("--compare", default=None, help="another eval directory, shown side by side")
    add_output_file(p, default="report.html", help="output HTML file (default: report.html)")
    p.add_argument("--max_samples", type=int, default=50, help="samples rendered in the browsable list (0: all)")
    p.add_argument("--thumb_px", type=int, default=512, help="longer side of embedded crop thumbnails")
    p.add_argument("--trial", type=int, default=None, help="trial browsed per sample (default: the first)")
    p.add_argument("--img_dir", default=None, help="where to find source images if they moved since the run")
    p.add_argument(
        "--max_text_chars",
        type=int,
        default=DEFAULT_MAX_TEXT_CHARS,
        help=f"characters of each reply text shown; a longer one shows its beginning and end around a marker "
        f"(default: {DEFAULT_MAX_TEXT_CHARS}; 0: no limit)",
    )
    p.add_argument("--note", default=None, help="a line shown under the report's title")
    g = p.add_argument_group("judge agreement")
    g.add_argument(
        "--judges",
        nargs="+",
        default=None,
        help="eval dirs re-judging this run (rejudge): show Cohen's kappa per pair (Fleiss' kappa of three or more) "
        "with intervals, each judge's accuracy and the disagreements",
    )
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    if args.thumb_px < 32:
        p.error("--thumb_px must be at least 32")
    if args.max_text_chars < 0:
        p.error("--max_text_chars must not be negative")
    return args


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    args = parse_args(argv)

    from ..analysis.outcomes import PairingError
    from ..evaluation.schema import RecordError
    from ..imaging.images import ImageError
    from ..viz.report import write_report
    from ..viz.run_view import RunError

    def body() -> int:
        out = write_report(
            args.eval_dir,
            args.out,
            compare_dir=args.compare,
            max_samples=args.max_samples,
            thumb_px=args.thumb_px,
            trial=args.trial,
            img_dir=args.img_dir,
            judges=args.judges,
            max_text_chars=args.max_text_chars or None,
            note=args.note,
        )
        size = out.stat().st_size
        print(f"wrote {out} ({size / 1e6:.2f} MB)")
        return ExitCode.OK

    return run_main(body, bad_input=(RunError, ImageError, RecordError, PairingError))


if __name__ == "__main__":
    sys.exit(main())
