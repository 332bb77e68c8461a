"""A keyless demo: a small demo benchmark, scripted endpoints on 127.0.0.1, both evaluation modes, a report.

    python -m insight_o3.scripts.demo [--output_dir outputs/demo]      (or: insight-o3-demo)

SCRIPTED DEMO — no model is called and no key is needed. The command draws a small O3-Bench-like
benchmark (:mod:`insight_o3.data.demo_bench`: charts and maps whose answers and evidence boxes are
known), starts three local OpenAI-compatible endpoints (:mod:`insight_o3.data.demo_endpoints`): a
scripted model that answers right at a set rate (``--accuracy``; ``--searched_accuracy`` after a
search), a scripted vSearcher that returns the known target box, and a scripted judge; then runs the
real ``evaluate`` command twice — a single model, and InSight-o3 (vReasoner + vSearcher) — and
writes one HTML report comparing them. The accuracies are the ones set here; they measure nothing.
What it shows is the pipeline: requests, judging, records, resume, the report.

Output (under ``--output_dir``): ``bench/`` (images + ``metadata.jsonl``),
``eval/scripted-demo/{single-model,insight-o3}/`` (run directories, as ``evaluate`` writes them) and
``report.html``. Rerunning resumes (nothing left to do: it only rewrites the report).

Exit status: as ``evaluate`` (:class:`insight_o3.cli.ExitCode`): 0 done, 2 bad arguments, 3 an output
could not be written, 5 another demo holds the output directory.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..cli import ExitCode, add_output_dir, entry_point, new_parser, setup_logging
from ..data.demo_endpoints import DemoScripts
from ..endpoints.scripted_server import ScriptedOpenAIServer
from . import evaluate, make_demo_bench, report

BANNER = (
    "SCRIPTED DEMO: the model, vSearcher and judge are local scripts that know the answers; "
    "accuracies are the ones set by --accuracy/--searched_accuracy and measure nothing"
)
BANNER_REAL_SEARCHER = (
    "SCRIPTED DEMO with a real vSearcher: the model (vReasoner) and judge are local scripts that know the "
    "answers; the vSearcher is the endpoint given; accuracies measure nothing"
)
EVAL_NAMES = {"single-model": "scripted-demo/single-model", "insight-o3": "scripted-demo/insight-o3"}
#: The key flags' placeholder ("EMPTY", as for vLLM: no warning about keys on the command line): the scripted
#: endpoints accept any key, and a real key from the environment is never sent.
NO_KEY = "EMPTY"


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("python -m insight_o3.scripts.demo", __doc__)
    add_output_dir(p, default="outputs/demo", help="where the benchmark, the runs and report.html go")
    p.add_argument("--num_images", type=int, default=6, help="demo images (charts and maps)")
    p.add_argument("--questions_per_image", type=int, default=2)
    p.add_argument("--num_trials", type=int, default=2)
    p.add_argument("--accuracy", type=float, default=0.6, help="how often the scripted model answers right")
    p.add_argument(
        "--searched_accuracy",
        type=float,
        default=0.85,
        help="how often the scripted vReasoner answers right after the vSearcher found the evidence",
    )
    p.add_argument("--seed", type=int, default=0, help="draws the benchmark and the scripted answers")
    p.add_argument("--min_side", type=int, default=1000, help="smallest image side in px (O3-Bench: ~3000)")
    p.add_argument("--progress", action="store_true", help="show evaluate's progress bars")
    g = p.add_argument_group(
        "a real vSearcher (the second step)",
        "InSight-o3 mode with a real vSearcher endpoint instead of the scripted one, e.g. the tiny Qwen2.5-VL "
        "served by vLLM on CPU (README, Quick start); the vReasoner and the judge stay scripted",
    )
    g.add_argument("--vsearcher_api_base_url", default=None, help="e.g. http://127.0.0.1:8001/v1")
    g.add_argument("--vsearcher_model", default=None, help="the served model name (default: scripted)")
    g.add_argument("--vsearcher_max_pixels", type=int, default=None, help="image budget sent to the vSearcher")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = build_parser()
    a = p.parse_args(argv)
    if a.num_images < 1 or a.questions_per_image < 1 or a.num_trials < 1:
        p.error("--num_images, --questions_per_image and --num_trials must be at least 1")
    if not (0 <= a.accuracy <= 1 and 0 <= a.searched_accuracy <= 1):
        p.error("--accuracy and --searched_accuracy must be within [0, 1]")
    if a.min_side < 64:
        p.error("--min_side must be at least 64")
    if bool(a.vsearcher_api_base_url) != bool(a.vsearcher_model):
        p.error("--vsearcher_api_base_url and --vsearcher_model go together")
    return a


def insight_o3_name(a: argparse.Namespace) -> str:
    """The InSight-o3 run's eval name: its own directory when the vSearcher is a real endpoint."""
    if a.vsearcher_model is None:
        return EVAL_NAMES["insight-o3"]
    return f"{EVAL_NAMES['insight-o3']}+{a.vsearcher_model.replace('/', '_')}"


def _evaluate_argv(a: argparse.Namespace, bench: Path, model_url: str, judge_url: str) -> list[str]:
    return [
        "--model",
        "scripted-demo-model",
        "--api_base_url",
        model_url,
        "--api_key",
        NO_KEY,
        "--judge_model",
        "scripted-demo-judge",
        "--judge_api_base_url",
        judge_url,
        "--judge_api_key",
        NO_KEY,
        "--ann_file",
        str(bench / "metadata.jsonl"),
        "--img_dir",
        str(bench),
        "--output_dir",
        str(Path(a.output_dir) / "eval"),
        "--num_trials",
        str(a.num_trials),
        "--concurrency",
        "8",
        *([] if a.progress else ["--no_progress"]),
    ]


def run_demo(a: argparse.Namespace) -> int:
    out = Path(a.output_dir)
    bench = out / "bench"
    t0 = time.perf_counter()
    banner = BANNER if a.vsearcher_model is None else BANNER_REAL_SEARCHER
    print(banner, flush=True)
    rc = make_demo_bench.main(
        ["--output_dir", str(bench), "--num_images", str(a.num_images), "--seed", str(a.seed)]
        + ["--questions_per_image", str(a.questions_per_image), "--min_side", str(a.min_side)]
        + ["--max_side", str(int(a.min_side * 1.4))]
    )
    if rc != ExitCode.OK:
        return rc
    scripts = DemoScripts.from_metadata(
        bench / "metadata.jsonl", accuracy=a.accuracy, searched_accuracy=a.searched_accuracy, seed=a.seed
    )
    if a.vsearcher_max_pixels:
        scripts.searcher_max_pixels = a.vsearcher_max_pixels
    servers = [ScriptedOpenAIServer(s, keep_bodies=False) for s in (scripts.model, scripts.searcher, scripts.judge)]
    model, searcher, judge = (s.start() for s in servers)
    try:
        common = _evaluate_argv(a, bench, model.base_url, judge.base_url)
        real = a.vsearcher_api_base_url is not None
        vsearch = ["--vsearcher_model", a.vsearcher_model or "scripted-demo-vsearcher", "--vsearcher_api_key", NO_KEY]
        vsearch += ["--vsearcher_api_base_url", a.vsearcher_api_base_url or searcher.base_url]
        if a.vsearcher_max_pixels:
            vsearch += ["--vsearcher_max_pixels", str(a.vsearcher_max_pixels)]
        runs = {
            "single-model": common + ["--eval_name", EVAL_NAMES["single-model"]],
            "insight-o3": common + ["--eval_name", insight_o3_name(a)] + vsearch,
        }
        if real:
            print(f"the vSearcher is {a.vsearcher_model} at {a.vsearcher_api_base_url} (not scripted)")
        for mode, argv in runs.items():
            print(f"evaluating in {mode} mode ({mode == 'insight-o3' and 'vReasoner + vSearcher' or 'one model'})")
            rc = evaluate.main(argv)
            if rc != ExitCode.OK:
                return rc
    finally:
        for s in servers:
            s.stop()
    eval_dir = out / "eval"
    page = out / "report.html"
    rc = report.main(
        [str(eval_dir / insight_o3_name(a)), "--compare", str(eval_dir / EVAL_NAMES["single-model"])]
        + ["--out", str(page), "--max_samples", "0", "--thumb_px", "256", "--note", banner]
    )
    if rc != ExitCode.OK:
        return rc
    print(f"{banner}.\nDone in {time.perf_counter() - t0:.1f} s. Open the report: {page.resolve()}")
    print(
        "Next: the same commands against a real endpoint (README, 'Evaluate a model'), or a tiny local model "
        "served by vLLM on CPU (README, 'Quick start')."
    )
    return ExitCode.OK


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    return run_demo(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
