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

Exit status: as ``build_o3_bench`` (:class:`insight_o3.scripts._shared.ExitCode`): 0 done, 1 some items failed, 2 bad
arguments, 3 an output could not be written, 4 stopped, 5 another step holds the workspace.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shlex
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..base.json_types import JSONObject
from ..endpoints.scripted_server import ScriptedOpenAIServer
from ..o3bench.demo import JUDGE, SOLVERS, VLM, WRITER, DemoSources, ScriptedBuild, demo_sources, scripted_review
from ..o3bench.workspace import Workspace
from . import build_o3_bench
from ._shared import ExitCode, add_output_dir, entry_point, new_parser, seconds_since_start, setup_logging

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
    add_output_dir(p, default="outputs/o3bench_demo", help="where the inputs and the build's workspace go")
    p.add_argument("--num_images", type=int, default=6, help="demo images (half charts, half maps)")
    p.add_argument(
        "--questions_per_image",
        type=int,
        default=4,
        help="demo questions per image (the scripted writer returns them, plus one bad item)",
    )
    p.add_argument("--min_side", type=int, default=1000, help="smallest image side in px (O3-Bench: ~3000)")
    p.add_argument("--seed", type=int, default=0, help="draws the images; shuffles the released options")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = build_parser()
    a = p.parse_args(argv)
    if a.num_images < 1 or a.questions_per_image < 1:
        p.error("--num_images and --questions_per_image must be at least 1")
    if a.min_side < 400:
        p.error("--min_side must be at least 400 (a chart needs room for its >= 8 layouts)")
    return a


def _lines(path: Path) -> list[JSONObject]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _step(n: int, name: str, argv: list[str], srv: ScriptedOpenAIServer) -> tuple[int, JSONObject]:
    """Run one ``build_o3_bench`` step as its command line; print the command and the step's own summary line.
    Returns its exit status and that summary."""
    print(f"[{n}/7] {name}: {PROG} {shlex.join(argv)}", flush=True)
    before, t0 = srv.count, time.perf_counter()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = build_o3_bench.main(argv)
    summary: dict = {}
    for line in out.getvalue().splitlines():
        with contextlib.suppress(ValueError):
            summary = json.loads(line)
        print(f"      {line}")
    summary["_requests"] = srv.count - before
    summary["_seconds"] = time.perf_counter() - t0
    return rc, summary


def _say(text: str, summary: dict) -> None:
    print(f"      -> {text} ({summary['_requests']} requests, {summary['_seconds']:.1f} s)", flush=True)


@dataclass(frozen=True)
class DemoStep:
    """One step of the demo build: its number in the printout, its name, its command line and what to say after."""

    n: int
    name: str
    argv: list[str]
    report: Callable[[dict], None]


def _steps(a: argparse.Namespace, ws: Workspace, inputs: DemoSources, url: str) -> list[DemoStep]:
    """Every step of the build, in order, with the command line one runs with real models (only the URL and the
    model names change)."""
    endpoint = ["--api_base_url", url, "--api_key", NO_KEY, "--no_progress"]
    w = str(ws.root)
    images = ["--chart_images", str(inputs.chart_images), "--chart_layouts", str(inputs.chart_layouts)]
    images += ["--map_images", str(inputs.map_images), "--map_layouts", str(inputs.map_layouts)]
    solvers = [x for m in SOLVERS for x in ("--solver", m)]

    def extracted(s: dict) -> None:
        n = len(_lines(ws.records("extract")))
        _say(f"E.1 on every layout crop and each full image: {n} records -> {ws.records('extract')}", s)

    def synthesized(s: dict) -> None:
        n_items = sum(len(r.get("items") or []) for r in _lines(ws.records("synthesize")))
        _say(f"E.2 from the extracted text only: {n_items} items -> {ws.records('synthesize')}", s)

    def validated(s: dict) -> None:
        reasons = Counter(r.get("reason") for r in _lines(ws.rejected))
        why = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items()))
        _say(
            f"{len(_lines(ws.candidates))} candidates -> {ws.candidates}; {sum(reasons.values())} rejected, by "
            f"reason: {why} (the writer planted one bad item per image) -> {ws.rejected}",
            s,
        )

    def filtered(s: dict) -> None:
        f = ws.step("filter")
        dropped, kept = len(_lines(f / "dropped.jsonl")), len(_lines(f / "kept.jsonl"))
        _say(f"{dropped} dropped (solved by every solver), {kept} kept -> {f / 'kept.jsonl'}", s)

    def reviewed(s: dict) -> None:
        review = ws.step("review")
        decided = Counter(scripted_review(review).values())
        print(
            f"      -> pages {review}/batch_*.html; the scripted reviewer (a person, in a real build) filled in "
            f"{review}/batch_*.decisions.txt: {decided['accept']} accept, {decided['edit']} edit, "
            f"{decided['reject']} reject",
            flush=True,
        )

    def released(s: dict) -> None:
        meta = _lines(ws.step("release") / "metadata.jsonl")
        n_images = len({m["file_name"] for m in meta})
        _say(f"{len(meta)} questions on {n_images} images -> {ws.step('release') / 'metadata.jsonl'}", s)

    return [
        DemoStep(1, "sources", ["sources", "--output_dir", w, *images], lambda s: _say(
            f"{len(_lines(ws.sources))} images with their layouts -> {ws.sources}", s
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
            rc, summary = _step(step.n, step.name, step.argv, srv)
            if rc != ExitCode.OK:
                return _stopped(step.name, rc)
            step.report(summary)
    release = ws.step("release")
    print(
        f"{BANNER}.\nDone in {seconds_since_start(t0):.1f} s. The benchmark: {release}/ (metadata.jsonl, images/, "
        f"stats.json, run_card.json); each step's files: {ws.root}/<step>/.\n"
        f"Evaluate a model on it: python -m insight_o3.scripts.evaluate --ann_file {release / 'metadata.jsonl'} "
        f"--img_dir {release} --eval_name my-model/o3bench_demo --model ... (README, 'Evaluate a model')",
        flush=True,
    )
    return ExitCode.OK


def _stopped(step: str, rc: int) -> int:
    print(
        f"the {step} step ended with status {rc} (its message is above); rerun this command to resume", file=sys.stderr
    )
    return rc


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
