"""Build Insight-V-style reasoning data offline, every step for real, the models scripted.

    python -m insight_o3.scripts.build_reasoning_data_demo [--output_dir outputs/reasoning_data_demo]

SCRIPTED DATA-ENGINE DEMO — no model is called and no key is needed. It draws a few charts and maps whose answers
are known (:mod:`insight_o3.demo.bench`), starts one local OpenAI-compatible endpoint that plays the generator, the
tier-1 checker and the tier-2 scorer (:mod:`insight_o3.reasoning_data.demo`: each chain of a question follows a
plan, so a bad chain is planted for every tier), and runs the real ``build_reasoning_data`` steps against it:
generate -> check -> score -> export. It prints each step's command and what it did, which chain each tier rejected
and why, and where the SFT sets and DPO pairs are.

Output (under ``--output_dir``): ``inputs/`` (the images and ``metadata.jsonl``), ``work/`` (the engine's work
directory: every step's records and card, ``export/`` the sets). Rerunning resumes (nothing is asked twice).

Exit status: as ``build_reasoning_data``: 0 done, 1 some chains failed, 2 bad arguments, 3 an output could not be
written, 4 stopped, 5 another step holds the work directory.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from . import build_reasoning_data
from ._demo_steps import add_draw_flags, check_draw_flags, jsonl_rows, run_step, stopped
from ._shared import ExitCode, entry_point, new_parser, setup_logging

if TYPE_CHECKING:
    from ..endpoints.scripted_server import ScriptedOpenAIServer
    from ..reasoning_data.workspace import WorkDir

BANNER = (
    "SCRIPTED DATA-ENGINE DEMO: every step of build_reasoning_data runs for real; the generator, the checker and "
    "the scorer are local scripts that know the answers"
)
PROG = "python -m insight_o3.scripts.build_reasoning_data"
NO_KEY = "EMPTY"


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("python -m insight_o3.scripts.build_reasoning_data_demo", __doc__)
    add_draw_flags(
        p,
        output_dir="outputs/reasoning_data_demo",
        output_help="where the inputs and the work directory go",
        num_images=2,
        questions=2,
        min_side=500,
    )
    return p


def _step(n: int, name: str, argv: list[str], srv: ScriptedOpenAIServer) -> tuple[int, dict]:
    done = run_step(PROG, f"[{n}/4] {name}", argv, build_reasoning_data.main, srv)
    print(f"      ({done.requests} requests, {done.seconds:.1f} s)", flush=True)
    return done.rc, done.summary


def run(a: argparse.Namespace) -> int:
    from ..endpoints.scripted_server import ScriptedOpenAIServer
    from ..evaluation.samples import load_samples
    from ..reasoning_data.demo import CHECKER, GENERATOR, PLANS, SCORER, ScriptedEngine, demo_questions
    from ..reasoning_data.workspace import WorkDir

    t0 = time.perf_counter()
    out = Path(a.output_dir)
    ws = WorkDir.at(out / "work")
    print(BANNER, flush=True)
    meta = demo_questions(out / "inputs", a.num_images, a.questions_per_image, seed=a.seed, min_side=a.min_side)
    samples = load_samples(str(meta), str(out / "inputs"))
    keys = [f"{s.key}#{k}" for s in samples for k in range(len(PLANS))]
    rows = jsonl_rows(meta)
    print(f"[0/4] inputs: {len(samples)} questions on {a.num_images} demo images -> {meta}", flush=True)
    engine = ScriptedEngine(rows, keys, seed=a.seed)
    with ScriptedOpenAIServer(engine.script(), keep_bodies=False) as srv:
        common = ["--output_dir", str(ws.root), "--no_progress", "--max_retries", "0", "--concurrency", "8"]
        images = ["--image_workers", "0"]  # small images: threads, no worker processes to start
        print(f"      scripted endpoint {srv.base_url}: models '{GENERATOR}', '{CHECKER}', '{SCORER}'", flush=True)
        print(
            "      chain k of every question follows a plan: "
            + "; ".join(f"{k}: {p} -> {w}" for k, (p, w) in enumerate(PLANS))
        )
        steps = [
            (
                "generate",
                ["generate", "--ann_file", str(meta), "--img_dir", str(out / "inputs"), "--model", GENERATOR]
                + ["--api_base_url", srv.base_url, "--api_key", NO_KEY, "--num_chains", str(len(PLANS))]
                + ["--seed", str(a.seed), *images],
            ),
            (
                "check",
                ["check", "--judge_model", CHECKER, "--judge_api_base_url", srv.base_url, "--judge_api_key", NO_KEY],
            ),
            (
                "score",
                ["score", "--scorer_model", SCORER, "--scorer_api_base_url", srv.base_url]
                + ["--scorer_api_key", NO_KEY, *images],
            ),
        ]
        for n, (name, argv) in enumerate(steps, start=1):
            rc, _ = _step(n, name, argv + common, srv)
            if rc != ExitCode.OK:
                return stopped(name, rc)
        rc, summary = _step(4, "export", ["export", "--output_dir", str(ws.root)], srv)
        if rc != ExitCode.OK:
            return stopped("export", rc)
    _rejections(ws)
    files = summary.get("files") or {}
    print(
        f"{BANNER}.\nDone in {time.perf_counter() - t0:.1f} s. The reasoning-agent SFT set: {files.get('reason_sft.json')}; "
        f"the summary-agent SFT set: {files.get('summary_sft.json')}; DPO pairs (TRL's vision format): "
        f"{files.get('dpo_pairs.jsonl')}; every step's records: {ws.root}/<step>/records.jsonl",
        flush=True,
    )
    return ExitCode.OK


def _rejections(ws: WorkDir) -> None:
    """One line per tier: how many chains it rejected, and one example with its reason."""
    generated = {r["sample_key"]: r for r in jsonl_rows(ws.records("generate"))}
    checks = {r["sample_key"]: r for r in jsonl_rows(ws.records("check"))}
    scores = {r["sample_key"]: r for r in jsonl_rows(ws.records("score"))}
    tiers = Counter(c["tier"] for q in jsonl_rows(ws.export_file("ranking.jsonl")) for c in q["chains"])
    malformed = [r for r in generated.values() if r.get("status") == "malformed"]
    wrong = [k for k, c in checks.items() if not c.get("passed")]
    low = [
        k
        for k, s in scores.items()
        if s.get("status") == "ok" and k in generated and tiers and s.get("score", 100) < 60
    ]
    print(f"      tiers: {dict(sorted(tiers.items()))}")
    if malformed:
        print(
            f"      tier 0 (format) rejected {len(malformed)}, e.g. {malformed[0]['sample_key']}: {malformed[0]['problem']}"
        )
    if wrong:
        c = checks[wrong[0]]
        print(f"      tier 1 (answer) rejected {len(wrong)}, e.g. {wrong[0]}: the checker said {c['reply']!r}")
    if low:
        print(f"      tier 2 (score) rejected {len(low)}, e.g. {low[0]}: score {scores[low[0]]['score']}")


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    p = build_parser()
    a = p.parse_args(argv)
    check_draw_flags(p, a, 200, "room for a chart's parts")
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
