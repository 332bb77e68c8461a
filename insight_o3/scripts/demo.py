"""A keyless demo: a small demo benchmark, scripted endpoints on 127.0.0.1, both evaluation modes, a report.

    python -m insight_o3.scripts.demo [--output_dir outputs/demo]      (or: insight-o3-demo)
    python -m insight_o3.scripts.demo --serve [--port 8100]            (keep the endpoints up for your commands)

SCRIPTED DEMO — no model is called and no key is needed. The command draws a small O3-Bench-like
benchmark (:mod:`insight_o3.demo.bench`: charts and maps whose answers and evidence boxes are
known), starts three local OpenAI-compatible endpoints (:mod:`insight_o3.demo.endpoints`): a
scripted model that answers right at a set rate (``--accuracy``; ``--searched_accuracy`` after a
search), a scripted vSearcher that returns the known target box, and a scripted judge; then runs the
real ``evaluate`` command twice — a single model, and InSight-o3 (vReasoner + vSearcher) — and
writes one HTML report comparing them. The accuracies are the ones set here; they measure nothing.
What it shows is the pipeline: requests, judging, records, resume, the report.

Output (under ``--output_dir``): ``bench/`` (images + ``metadata.jsonl``),
``eval/scripted-demo/{single-model,insight-o3}/`` (run directories, as ``evaluate`` writes them) and
``report.html``. Rerunning resumes (nothing left to do: it only rewrites the report).

``--serve``: draw the benchmark, start the three endpoints and keep them up (nothing is evaluated) until Ctrl-C or
SIGTERM; it prints their URLs and ready-to-paste ``evaluate`` commands (keys and URLs through the environment
variables ``evaluate`` reads) for both modes on ``<output_dir>/bench``. ``--port P`` serves the model on P, the
vSearcher on P+1 and the judge on P+2 (default: free ports). A stop is its normal end: status 0.

Exit status: as ``evaluate`` (:class:`insight_o3.scripts._shared.ExitCode`): 0 done, 2 bad arguments, 3 an output
could not be written, 5 another demo holds the output directory.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from ..endpoints.endpoint import DEMO_KEY
from ..endpoints.scripted_server import ScriptedOpenAIServer
from . import make_demo_bench, report
from ._serve import keep_serving, python_command
from ._shared import ExitCode, add_output_dir, entry_point, new_parser, seconds_since_start, setup_logging

BANNER = (
    "SCRIPTED DEMO: the model, vSearcher and judge are local scripts that know the answers; "
    "accuracies are the ones set by --accuracy/--searched_accuracy and measure nothing"
)
BANNER_REAL_SEARCHER = (
    "SCRIPTED DEMO with a real vSearcher: the model (vReasoner) and judge are local scripts that know the "
    "answers; the vSearcher is the endpoint given; accuracies measure nothing"
)
EVAL_NAMES = {"single-model": "scripted-demo/single-model", "insight-o3": "scripted-demo/insight-o3"}
#: The agents whose protocol the scripted model speaks in the printed commands (the Table 1 baselines).
BASELINE_AGENTS = ("deepeyes", "mini_o3", "pixel_reasoner")
#: The names the scripted endpoints serve (a request for another name is refused with a 404, as by vLLM).
DEMO_NAMES = {"model": "scripted-demo-model", "vsearcher": "scripted-demo-vsearcher", "judge": "scripted-demo-judge"}
#: The key the demo sends its scripted endpoints (they want one, as a real server; a real key from the environment is
#: never sent to them). Not a secret: no warning about a key on the command line (``client.PUBLIC_KEYS``).
NO_KEY = DEMO_KEY


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
    p.add_argument(
        "--agent",
        choices=("insight_o3", "opensearch_vl"),
        default="insight_o3",
        help="insight_o3: single model vs InSight-o3 (the default); opensearch_vl: OpenSearch-VL's agent and tools on "
        "photographed signs (crop -> sharpen -> layout_parsing -> text_search on a local corpus -> answer; needs the "
        "tools extra and Tesseract)",
    )
    g = p.add_argument_group(
        "serve the endpoints",
        "keep the scripted model, vSearcher and judge up for your own commands (evaluate, rejudge, the notebooks) "
        "instead of running the two evaluations",
    )
    g.add_argument(
        "--serve",
        action="store_true",
        help="draw the benchmark, start the endpoints, print their URLs and an evaluate command; Ctrl-C stops",
    )
    g.add_argument(
        "--port",
        type=int,
        default=0,
        help="with --serve: the model on PORT, the vSearcher on PORT+1, the judge on PORT+2 (default 0: free ports)",
    )
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
    if a.serve and a.vsearcher_api_base_url:
        p.error("--serve serves the scripted vSearcher; give your own vSearcher to evaluate instead")
    if not 0 <= a.port <= 65533:
        p.error("--port must be within [0, 65533] (the judge takes PORT+2)")
    if a.port and not a.serve:
        p.error("--port goes with --serve")
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


def _draw_bench(a: argparse.Namespace, bench: Path) -> int:
    return make_demo_bench.main(
        ["--output_dir", str(bench), "--num_images", str(a.num_images), "--seed", str(a.seed)]
        + ["--questions_per_image", str(a.questions_per_image), "--min_side", str(a.min_side)]
        + ["--max_side", str(int(a.min_side * 1.4))]
    )


def _servers(a: argparse.Namespace, bench: Path, port: int = 0) -> list[ScriptedOpenAIServer]:
    """The model, vSearcher and judge endpoints (not started); ``port`` > 0: on port, port+1, port+2."""
    from ..demo.endpoints import DemoScripts  # the scripted replies (Pillow): not for --help

    scripts = DemoScripts.from_metadata(
        bench / "metadata.jsonl",
        accuracy=a.accuracy,
        searched_accuracy=a.searched_accuracy,
        seed=a.seed,
        names=dict(DEMO_NAMES),
        require_key=True,
    )
    if a.vsearcher_max_pixels:
        scripts.searcher_max_pixels = a.vsearcher_max_pixels
    roles = (scripts.model, scripts.searcher, scripts.judge)
    return [ScriptedOpenAIServer(s, port=port + k if port else 0, keep_bodies=False) for k, s in enumerate(roles)]


def run_demo(a: argparse.Namespace) -> int:
    from . import evaluate  # the clients (openai) and the agents: not for --help

    out = Path(a.output_dir)
    bench = out / "bench"
    t0 = time.perf_counter()
    banner = BANNER if a.vsearcher_model is None else BANNER_REAL_SEARCHER
    print(banner, flush=True)
    rc = _draw_bench(a, bench)
    if rc != ExitCode.OK:
        return rc
    servers = _servers(a, bench)
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
    print(f"{banner}.\nDone in {seconds_since_start(t0):.1f} s. Open the report: {page.resolve()}")
    print(
        "Next: the same commands against a real endpoint (README, 'Evaluate a model'), or a tiny local model "
        "served by vLLM on CPU (README, 'Quick start')."
    )
    return ExitCode.OK


def serve_commands(bench: Path, eval_dir: Path, urls: dict[str, str]) -> dict[str, str]:
    """The ready-to-paste commands against served endpoints (``urls``: model, vsearcher, judge): ``evaluate`` in each
    mode, keys and URLs through the environment variables it reads (README, 'Evaluate a model'), then ``report``."""
    q = shlex.quote
    nl = " \\\n  "
    env = [f"OPENAI_BASE_URL={q(urls['model'])} OPENAI_API_KEY={NO_KEY}"]
    env += [f"JUDGE_API_BASE_URL={q(urls['judge'])} JUDGE_API_KEY={NO_KEY}"]
    searcher_env = [f"VSEARCHER_API_BASE_URL={q(urls['vsearcher'])} VSEARCHER_API_KEY={NO_KEY}"]
    evaluate_ = [f"{python_command()} -m insight_o3.scripts.evaluate --model scripted-demo-model"]
    evaluate_ += ["--judge_model scripted-demo-judge"]
    data = [f"--ann_file {q(str(bench / 'metadata.jsonl'))} --img_dir {q(str(bench))}"]
    data += [f"--output_dir {q(str(eval_dir))}"]
    return {
        "single-model": nl.join(env + evaluate_ + data + ["--eval_name served/single-model"]),
        "insight-o3": nl.join(
            env
            + searcher_env
            + evaluate_
            + data
            + ["--eval_name served/insight-o3 --vsearcher_model scripted-demo-vsearcher"]
        ),
        # the Table 1 agents: the scripted model speaks each one's protocol (a zoom on the evidence, then the answer)
        "baselines": f"for agent in {' '.join(BASELINE_AGENTS)}; do{nl}"
        + nl.join(env + evaluate_ + data + ['--agent "$agent" --eval_name "served/$agent"'])
        + f"{nl}&& {python_command()} -m insight_o3.scripts.report {q(str(eval_dir / 'served'))}/\"$agent\"{nl}"
        f"--output_file {q(str(eval_dir.parent))}/\"served_$agent.html\" || break; done",
        "report": f"{python_command()} -m insight_o3.scripts.report {q(str(eval_dir / 'served' / 'insight-o3'))}{nl}"
        f"--compare {q(str(eval_dir / 'served' / 'single-model'))} "
        f"--output_file {q(str(eval_dir.parent / 'served_report.html'))}",
    }


def serve(a: argparse.Namespace) -> int:
    """Draw the benchmark, keep the endpoints up until Ctrl-C/SIGTERM (then stop them and return 0)."""
    out = Path(a.output_dir).resolve()
    bench = out / "bench"
    print(BANNER, flush=True)
    rc = _draw_bench(a, bench)
    if rc != ExitCode.OK:
        return rc
    try:
        servers = _servers(a, bench, a.port)
    except OSError as e:
        print(f"--port {a.port}: cannot serve on 127.0.0.1:{a.port}..{a.port + 2}: {e}", file=sys.stderr)
        return ExitCode.BAD_INPUT

    def say(base_urls: list[str]) -> str:
        urls = dict(zip(("model", "vsearcher", "judge"), base_urls))
        lines = [f"serving the scripted endpoints of the demo benchmark {bench / 'metadata.jsonl'}:"]
        lines += [f"  {role:<10} {url}   (model name: scripted-demo-{role})" for role, url in urls.items()]
        lines.append(
            f"they want a key (any value but EMPTY: {NO_KEY} below) and their own model names, as a real server does. "
            "Evaluate against them, then report (paste; keys and URLs go through the environment):"
        )
        for mode, cmd in serve_commands(bench, out / "eval", urls).items():
            lines += [f"# {mode}", cmd]
        lines.append("Ctrl-C (or SIGTERM) stops the endpoints.")
        return "\n".join(lines)

    return keep_serving(servers, say, "the demo endpoints")


OSV_BANNER = (
    "SCRIPTED DEMO (OpenSearch-VL): the model and judge are local scripts; the tools are real (OpenCV, Tesseract, "
    "a local SQLite corpus): the model reads each sign only through layout_parsing and answers from text_search"
)


def tools_missing() -> str | None:
    """What the OpenSearch-VL demo lacks here (None: nothing)."""
    from ..tools.layout import tesseract_version

    try:
        import cv2  # noqa: F401
    except ImportError:
        return "OpenCV: pip install 'insight-o3[tools]'"
    if tesseract_version() is None:
        return "Tesseract OCR: apt-get install tesseract-ocr tesseract-ocr-eng (and pip install 'insight-o3[tools]')"
    return None


def run_opensearch_vl_demo(a: argparse.Namespace) -> int:
    from ..demo.opensearch_vl import ScriptedInvestigator, judge_script, make_demo
    from . import evaluate

    missing = tools_missing()
    if missing is not None:
        print(f"error: demo --agent opensearch_vl needs {missing}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    out = Path(a.output_dir) / "opensearch_vl"
    t0 = time.perf_counter()
    print(OSV_BANNER, flush=True)
    files = make_demo(out, n=a.num_images, seed=a.seed)
    with (
        ScriptedOpenAIServer(ScriptedInvestigator(), keep_bodies=False) as model,
        ScriptedOpenAIServer(judge_script, keep_bodies=False) as judge,
    ):
        argv = _evaluate_argv(a, files.bench, model.base_url, judge.base_url)
        argv += ["--agent", "opensearch_vl", "--corpus", str(files.index), "--eval_name", "scripted-demo/opensearch-vl"]
        argv[argv.index("--output_dir") + 1] = str(out / "eval")
        argv[argv.index("--num_trials") + 1] = "1"
        rc = evaluate.main(argv)
        if rc != ExitCode.OK:
            return rc
    page = out / "report.html"
    run = out / "eval" / "scripted-demo" / "opensearch-vl"
    rc = report.main([str(run), "--out", str(page), "--max_samples", "0", "--thumb_px", "256", "--note", OSV_BANNER])
    if rc != ExitCode.OK:
        return rc
    print(
        f"Done in {seconds_since_start(t0):.1f} s. Open the report (every tool call with its images and text): {page.resolve()}"
    )
    return ExitCode.OK


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    a = parse_args(argv)
    if a.agent == "opensearch_vl":
        return run_opensearch_vl_demo(a)
    return serve(a) if a.serve else run_demo(a)


if __name__ == "__main__":
    sys.exit(main())
