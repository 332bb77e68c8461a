"""Build a small O3-Bench-style benchmark offline, every step for real, the models scripted.

    python -m insight_o3.scripts.build_o3_bench_demo [--output_dir outputs/o3bench_demo]   (or: insight-o3-build-o3-bench-demo)

SCRIPTED BUILD DEMO — no model is called and no key is needed. It draws charts and maps whose layouts, questions
and answers are known (:mod:`insight_o3.demo.bench`), writes their layouts as the PaddleX layout detector's
JSON, starts one local OpenAI-compatible endpoint that plays every model of the build
(:mod:`insight_o3.o3bench.demo`: the E.1 VLM, the E.2 writer — which adds one deliberately bad item per image
for ``validate`` to reject —, three filter solvers and the judge), and runs the real ``build_o3_bench`` steps
against it: sources -> extract -> synthesize -> validate -> filter -> review page -> (a scripted reviewer fills in
the decisions files) -> review apply -> release. It prints each step's command and what it did, and where the
benchmark is.

Output (under ``--output_dir``): ``inputs/`` (the images, ``metadata.jsonl`` of the demo benchmark they come from,
the detector JSON), ``workspace/`` (the build's workspace: every step's files, ``release/`` the benchmark).
Rerunning resumes (every step's records are kept; nothing is asked twice).

``--serve --img_dir DIR``: for your own images, keep one local endpoint up whose scripts reply generically for any
image (:mod:`insight_o3.o3bench.generic`: models ``scripted-vlm`` for E.1, ``scripted-writer`` for E.2,
``scripted-solver-a``..``-c`` for the filter, ``scripted-judge``; every reply says it is scripted), and print every
step's ``build_o3_bench`` command on DIR, workspace ``<output_dir>/own_images/workspace``. The layouts are
``--layouts`` (the detector's JSON) or, by default, a scripted 3x3 grid per image written to
``<output_dir>/own_images/layouts``. Nothing is drawn or built; ``--port P`` serves on P (default: a free port).
Ctrl-C or SIGTERM stops it: status 0.

Exit status: as ``build_o3_bench`` (:class:`insight_o3.scripts._shared.ExitCode`): 0 done, 1 some items failed, 2 bad
arguments, 3 an output could not be written, 4 stopped, 5 another step holds the workspace.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..endpoints.endpoint import DEMO_KEY
from ..endpoints.scripted_server import ScriptedOpenAIServer
from ..o3bench.sources import IMAGE_SUFFIXES, list_images
from ..o3bench.workspace import Workspace
from . import build_o3_bench
from ._demo_steps import StepRun, add_draw_flags, check_draw_flags, jsonl_rows, run_step, stopped
from ._serve import keep_serving, python_command
from ._shared import ExitCode, entry_point, new_parser, seconds_since_start, setup_logging

if TYPE_CHECKING:
    from ..o3bench.demo import DemoSources

BANNER = (
    "SCRIPTED BUILD DEMO: every step of build_o3_bench runs for real; the models (E.1 VLM, E.2 writer, filter "
    "solvers, judge) and the reviewer are local scripts that know the answers"
)
PROG = "python -m insight_o3.scripts.build_o3_bench"
#: The key flags' placeholder (as for vLLM: no warning); the scripted endpoint accepts any key, a real key from the
#: environment is never sent to it.
NO_KEY = "EMPTY"


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("python -m insight_o3.scripts.build_o3_bench_demo", __doc__)
    add_draw_flags(
        p,
        output_dir="outputs/o3bench_demo",
        output_help="where the inputs and the build's workspace go",
        num_images=6,
        questions=4,
        min_side=1000,
    )
    g = p.add_argument_group(
        "serve the scripted models for your own images",
        "keep one endpoint with generic scripted E.1/E.2/filter/judge replies up and print every step's command on "
        "your images (nothing is drawn or built)",
    )
    g.add_argument("--serve", action="store_true", help="serve until Ctrl-C; needs --img_dir")
    g.add_argument("--img_dir", default=None, help="with --serve: the directory of your images")
    g.add_argument(
        "--layouts",
        default=None,
        help="with --serve: the layout detector's JSON for them (default: a scripted 3x3 grid per image, written "
        "to <output_dir>/own_images/layouts)",
    )
    g.add_argument("--port", type=int, default=0, help="with --serve: the port (default 0: a free one)")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = build_parser()
    a = p.parse_args(argv)
    check_draw_flags(p, a, 400, "a chart needs room for its >= 8 layouts")
    if a.serve and not a.img_dir:
        p.error("--serve needs --img_dir (the directory of your images)")
    if not a.serve and (a.img_dir or a.layouts or a.port):
        p.error("--img_dir, --layouts and --port go with --serve")
    if not 0 <= a.port <= 65535:
        p.error("--port must be within [0, 65535]")
    return a


def _say(text: str, done: StepRun) -> None:
    print(f"      -> {text} ({done.requests} requests, {done.seconds:.1f} s)", flush=True)


@dataclass(frozen=True)
class DemoStep:
    """One step of the demo build: its number in the printout, its name, its command line and what to say after."""

    n: int
    name: str
    argv: list[str]
    report: Callable[[StepRun], None]


def _steps(a: argparse.Namespace, ws: Workspace, inputs: DemoSources, url: str) -> list[DemoStep]:
    """Every step of the build, in order, with the command line one runs with real models (only the URL and the
    model names change)."""
    from ..o3bench.demo import JUDGE, SOLVERS, VLM, WRITER, scripted_review

    endpoint = ["--api_base_url", url, "--api_key", NO_KEY, "--no_progress"]
    w = str(ws.root)
    images = ["--chart_images", str(inputs.chart_images), "--chart_layouts", str(inputs.chart_layouts)]
    images += ["--map_images", str(inputs.map_images), "--map_layouts", str(inputs.map_layouts)]
    solvers = [x for m in SOLVERS for x in ("--solver", m)]

    def extracted(s: StepRun) -> None:
        n = len(jsonl_rows(ws.records("extract")))
        _say(f"E.1 on every layout crop and each full image: {n} records -> {ws.records('extract')}", s)

    def synthesized(s: StepRun) -> None:
        n_items = sum(len(r.get("items") or []) for r in jsonl_rows(ws.records("synthesize")))
        _say(f"E.2 from the extracted text only: {n_items} items -> {ws.records('synthesize')}", s)

    def validated(s: StepRun) -> None:
        reasons = Counter(r.get("reason") for r in jsonl_rows(ws.rejected))
        why = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items()))
        _say(
            f"{len(jsonl_rows(ws.candidates))} candidates -> {ws.candidates}; {sum(reasons.values())} rejected, by "
            f"reason: {why} (the writer planted one bad item per image) -> {ws.rejected}",
            s,
        )

    def filtered(s: StepRun) -> None:
        f = ws.step("filter")
        dropped, kept = len(jsonl_rows(f / "dropped.jsonl")), len(jsonl_rows(f / "kept.jsonl"))
        _say(f"{dropped} dropped (solved by every solver), {kept} kept -> {f / 'kept.jsonl'}", s)

    def reviewed(s: StepRun) -> None:
        review = ws.step("review")
        decided = Counter(scripted_review(review).values())
        print(
            f"      -> pages {review}/batch_*.html; the scripted reviewer (a person, in a real build) filled in "
            f"{review}/batch_*.decisions.txt: {decided['accept']} accept, {decided['edit']} edit, "
            f"{decided['reject']} reject",
            flush=True,
        )

    def released(s: StepRun) -> None:
        meta = jsonl_rows(ws.step("release") / "metadata.jsonl")
        n_images = len({m["file_name"] for m in meta})
        _say(f"{len(meta)} questions on {n_images} images -> {ws.step('release') / 'metadata.jsonl'}", s)

    return [
        DemoStep(1, "sources", ["sources", "--output_dir", w, *images], lambda s: _say(
            f"{len(jsonl_rows(ws.sources))} images with their layouts -> {ws.sources}", s
        )),
        DemoStep(2, "extract", ["extract", "--output_dir", w, "--model", VLM, *endpoint], extracted),
        DemoStep(3, "synthesize", ["synthesize", "--output_dir", w, "--model", WRITER, *endpoint], synthesized),
        DemoStep(4, "validate", ["validate", "--output_dir", w], validated),
        DemoStep(5, "filter", ["filter", "--output_dir", w, *solvers, "--judge_model", JUDGE, "--judge_api_key",
                               NO_KEY, *endpoint], filtered),
        DemoStep(6, "review page", ["review", "page", "--output_dir", w], reviewed),
        DemoStep(6, "review apply", ["review", "apply", "--output_dir", w], lambda s: None),
        DemoStep(7, "release", ["release", "--output_dir", w, "--seed", str(a.seed)], released),
    ]  # fmt: skip


def run(a: argparse.Namespace) -> int:
    """Draw the inputs, serve the scripted models, run every step as a user would and say what each did."""
    from ..o3bench.demo import JUDGE, SOLVERS, VLM, WRITER, ScriptedBuild, demo_sources  # the drawing (Pillow)

    t0 = time.perf_counter()
    out = Path(a.output_dir)
    ws = Workspace.at(out / "workspace")
    print(BANNER, flush=True)
    inputs = demo_sources(
        out / "inputs", a.num_images, seed=a.seed, questions=a.questions_per_image, min_side=a.min_side
    )
    subsets = Counter(key.split("/")[0] for key in inputs.records)
    print(
        f"[0/7] inputs: {len(inputs.records)} demo images ({subsets['chart']} chart, {subsets['map']} map) and "
        f"their layout detector JSON -> {out / 'inputs'} ({time.perf_counter() - t0:.1f} s)",
        flush=True,
    )
    scripts = ScriptedBuild(inputs.records, inputs.demo)
    with ScriptedOpenAIServer(scripts.script(), keep_bodies=False) as srv:
        print(
            f"      scripted endpoint {srv.base_url}: models '{VLM}' (E.1), '{WRITER}' (E.2), "
            f"{', '.join(repr(s) for s in SOLVERS)} (filter), '{JUDGE}' (judge)",
            flush=True,
        )
        for step in _steps(a, ws, inputs, srv.base_url):
            done = run_step(PROG, f"[{step.n}/7] {step.name}", step.argv, build_o3_bench.main, srv)
            if done.rc != ExitCode.OK:
                return stopped(step.name, done.rc)
            step.report(done)
    release = ws.step("release")
    print(
        f"{BANNER}.\nDone in {seconds_since_start(t0):.1f} s. The benchmark: {release}/ (metadata.jsonl, images/, "
        f"stats.json, run_card.json); each step's files: {ws.root}/<step>/.\n"
        f"Evaluate a model on it: python -m insight_o3.scripts.evaluate --ann_file {release / 'metadata.jsonl'} "
        f"--img_dir {release} --eval_name my-model/o3bench_demo --model ... (README, 'Evaluate a model')",
        flush=True,
    )
    return ExitCode.OK


SERVE_BANNER = (
    "SCRIPTED BUILD ENDPOINT for your own images: every step of build_o3_bench runs for real; the models (E.1 VLM, "
    "E.2 writer, filter solvers, judge) are local scripts with generic replies that say they are scripted; no model "
    "looks at your images"
)


def serve_commands(ws: Path, img_dir: Path, layouts: Path, url: str) -> list[tuple[str, str]]:
    """Every step's command on one's own images against the scripted endpoint at ``url``, with what it does."""
    from ..o3bench import generic

    q = shlex.quote
    run = f"{python_command()} -m insight_o3.scripts.build_o3_bench"
    w = f"--output_dir {q(str(ws))}"
    endpoint = f"--api_base_url {q(url)} --api_key {DEMO_KEY}"
    solvers = " ".join(f"--solver {m}" for m in generic.SOLVERS)
    judge = f"--judge_model {generic.JUDGE} --judge_api_base_url {q(url)} --judge_api_key {DEMO_KEY}"
    review = ws / "review"
    return [
        (
            "1. sources: your images and their layouts, as charts (the paper keeps charts with >= 8 layouts; "
            "--min_layouts 2 keeps an image with two)",
            f"{run} sources {w} --chart_images {q(str(img_dir))} --chart_layouts {q(str(layouts))} --min_layouts 2",
        ),
        (
            "2. extract: E.1 on every layout crop and each full image",
            f"{run} extract {w} --model {generic.VLM} {endpoint}",
        ),
        ("3. synthesize: E.2 from the extracted text", f"{run} synthesize {w} --model {generic.WRITER} {endpoint}"),
        ("4. validate: the deterministic checks", f"{run} validate {w}"),
        ("5. filter: drop what every solver solves", f"{run} filter {w} {solvers} {endpoint} {judge}"),
        (
            f"6. review: open {review}/batch_*.html, decide each item and export the decisions into its "
            "batch_*.decisions.txt (lines 'ID accept', 'ID reject REASON', 'ID edit JSON'); to try the rest at once, "
            "the sed line accepts every pending item; then apply",
            f"{run} review page {w}\nsed -i 's/ pending$/ accept/' {q(str(review))}/batch_*.decisions.txt\n"
            f"{run} review apply {w}",
        ),
        (f"7. release: the benchmark in {ws / 'release'}", f"{run} release {w} --seed 0"),
    ]


def serve(a: argparse.Namespace) -> int:
    """Keep the generic scripted endpoint up for one's own images until Ctrl-C/SIGTERM (then stop it: status 0);
    print its URL, its model names and every step's command."""
    from ..o3bench import generic  # the scripted replies (Pillow)

    out = Path(a.output_dir).resolve()
    img_dir = Path(a.img_dir).resolve()
    print(SERVE_BANNER, flush=True)
    if not (img_dir.is_dir() and list_images(str(img_dir))):
        print(f"--img_dir {a.img_dir}: no images there ({', '.join(IMAGE_SUFFIXES)})", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if a.layouts:
        layouts = Path(a.layouts).resolve()
        said = f"layouts: your detector's JSON {layouts}"
    else:
        layouts = out / "own_images" / "layouts"
        n = generic.grid_layouts(img_dir, layouts)
        said = (
            f"layouts: SCRIPTED {generic.GRID[0]}x{generic.GRID[1]} grids (not a detector's; label "
            f"'{generic.GRID_LABEL}') for the {n} images of {img_dir} -> {layouts}"
        )
    try:
        server = ScriptedOpenAIServer(generic.GenericBuild().script(), port=a.port, keep_bodies=False)
    except OSError as e:
        print(f"--port {a.port}: cannot serve on 127.0.0.1:{a.port}: {e}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    ws = out / "own_images" / "workspace"

    def say(urls: list[str]) -> str:
        lines = [said, f"serving the scripted build endpoint {urls[0]}; its models:"]
        lines += [f"  {role:<17} {model}" for role, model in generic.MODELS.items()]
        lines.append(
            f"it wants a key (any value but EMPTY: {DEMO_KEY} below) and its model names, as a real server does. "
            "Run each step on your images (paste):"
        )
        for what, cmd in serve_commands(ws, img_dir, layouts, urls[0]):
            lines += [f"# {what}", cmd]
        lines.append("Ctrl-C (or SIGTERM) stops the endpoint.")
        return "\n".join(lines)

    return keep_serving([server], say, "the scripted build endpoint")


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    a = parse_args(argv)
    return serve(a) if a.serve else run(a)


if __name__ == "__main__":
    sys.exit(main())
