"""An offline O3-Bench build, step by step, against the scripted endpoints of :mod:`tests.support.o3bench_oracle`
(real HTTP on 127.0.0.1), for the tests and for measuring what each step takes:

    PYTHONPATH=. .venv/bin/python -m tests.support.o3bench_run --work /tmp/o3bench-offline --num_images 12

prints, per step, its wall time, requests and tokens (the oracle's estimates), then runs ``evaluate`` on the
release. The work directory keeps the demo images, the detector JSON, the workspace and the evaluation.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from insight_o3.o3bench.demo import scripted_review
from insight_o3.scripts import build_o3_bench, evaluate
from tests.support.o3bench_oracle import SOLVERS, Oracle, demo_inputs
from tests.support.openai_server import ScriptedOpenAIServer

KEY = "sk-o3bench-SECRET-24681357"


def sources_argv(ws: Path, inp: dict) -> list[str]:
    return [
        "sources",
        "--output_dir",
        str(ws),
        "--chart_images",
        str(inp["chart_images"]),
        "--chart_layouts",
        str(inp["chart_layouts"]),
        "--map_images",
        str(inp["map_images"]),
        "--map_layouts",
        str(inp["map_layouts"]),
    ]


def step_argv(step: str, ws: Path, url: str, *extra: str) -> list[str]:
    """The argv of a model-calling step against the oracle endpoint (models routed by name)."""
    common = ["--output_dir", str(ws), "--api_base_url", url, "--api_key", KEY, "--no_progress", "--max_retries", "2"]
    if step == "extract":
        return ["extract", *common, "--model", "vlm", "--image_workers", "0", *extra]
    if step == "synthesize":
        return ["synthesize", *common, "--model", "writer", *extra]
    if step == "filter":
        solvers = [a for s in SOLVERS for a in ("--solver", s)]
        return ["filter", *common, *solvers, "--judge_model", "judge", "--image_workers", "0", *extra]
    raise ValueError(step)


def decide(ws: Path, rejects: int = 1, edits: int = 1) -> dict[str, str]:
    """Fill in every decisions file (:func:`insight_o3.o3bench.demo.scripted_review`)."""
    return scripted_review(ws / "review", rejects, edits)


def card(ws: Path, step: str) -> dict:
    return json.loads((ws / step / "step_card.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--work", required=True)
    ap.add_argument("--num_images", type=int, default=12)
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--min_side", type=int, default=1600)
    a = ap.parse_args()
    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    t0 = time.perf_counter()
    inp = demo_inputs(work, a.num_images, questions=a.questions, min_side=a.min_side)
    oracle = Oracle(inp["records"], inp["demo"])
    print(f"demo bench + oracle: {time.perf_counter() - t0:.1f}s")
    ws = work / "ws"
    rows = []
    with ScriptedOpenAIServer(oracle.script(), keep_bodies=False) as srv:
        for name, argv in [
            ("sources", sources_argv(ws, inp)),
            ("extract", step_argv("extract", ws, srv.base_url)),
            ("synthesize", step_argv("synthesize", ws, srv.base_url)),
            ("validate", ["validate", "--output_dir", str(ws)]),
            ("filter", step_argv("filter", ws, srv.base_url)),
            ("review page", ["review", "page", "--output_dir", str(ws)]),
        ]:
            before, t = srv.count, time.perf_counter()
            rc = build_o3_bench.main(argv)
            dt = time.perf_counter() - t
            tokens = card(ws, name)["totals"]["tokens_total"] if name in ("extract", "synthesize", "filter") else 0
            rows.append((name, rc, dt, srv.count - before, tokens))
            assert rc == 0, (name, rc)
        decide(ws)
        for name, argv in [
            ("review apply", ["review", "apply", "--output_dir", str(ws)]),
            ("release", ["release", "--output_dir", str(ws), "--seed", "0"]),
        ]:
            t = time.perf_counter()
            rc = build_o3_bench.main(argv)
            rows.append((name, rc, time.perf_counter() - t, 0, 0))
        meta = [json.loads(line) for line in (ws / "release" / "metadata.jsonl").read_text().splitlines()]
    truth = {m["question"]: m["answer"] for m in meta}
    with ScriptedOpenAIServer(oracle.script(truth), keep_bodies=False) as srv:
        t = time.perf_counter()
        before = srv.count
        rc = evaluate.main(
            [
                "--ann_file",
                str(ws / "release" / "metadata.jsonl"),
                "--img_dir",
                str(ws / "release"),
                "--model",
                "solver-b",
                "--judge_model",
                "judge",
                "--api_base_url",
                srv.base_url,
                "--api_key",
                KEY,
                "--judge_api_base_url",
                srv.base_url,
                "--judge_api_key",
                KEY,
                "--output_dir",
                str(work / "eval"),
                "--eval_name",
                "solver-b/offline-bench",
                "--no_progress",
                "--image_workers",
                "0",
            ]
        )
        rows.append(("evaluate", rc, time.perf_counter() - t, srv.count - before, 0))
    print(f"{'step':<14}{'rc':>4}{'wall s':>9}{'requests':>10}{'tokens':>10}")
    for name, rc, dt, n, tok in rows:
        print(f"{name:<14}{rc:>4}{dt:>9.2f}{n:>10}{tok:>10}")
    stats = json.loads((ws / "release" / "stats.json").read_text())
    print(json.dumps({k: stats[k] for k in ("samples", "images", "layouts_per_sample", "target_layouts_per_sample")}))


if __name__ == "__main__":
    main()
