"""The offline build demo, run as data/README.md documents it: the command is taken from the
README's block, run through bash from a fresh directory with no key in the environment. Checked: every step ran and
said what it did, the planted bad items were rejected for their six reasons, the filter dropped what every solver
solved, the scripted review was applied, the release is a benchmark the viewers read; a printed step command is the
real command (run again as printed); a rerun asks the scripted models nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from insight_o3.o3bench.demo import PLANTED_RULES, ScriptedBuild
from insight_o3.viz.bench_view import load_bench

pytestmark = pytest.mark.smoke
ROOT = Path(__file__).resolve().parents[2]
STEPS = ["sources", "extract", "synthesize", "validate", "filter", "review page", "review apply", "release"]


def documented_command() -> str:
    """The bash block after "Try it offline first" in data/README.md (comments dropped)."""
    text = (ROOT / "data" / "README.md").read_text(encoding="utf-8")
    block = re.search(r"\*\*Try it offline first\*\*.*?```bash\n(.*?)```", text, re.S)
    assert block, "data/README.md lost its 'Try it offline first' block"
    return "\n".join(line.split("#")[0].rstrip() for line in block.group(1).splitlines() if line.strip())


def _bash(command: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # `python` = this one
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str, float]:
    work = tmp_path_factory.mktemp("o3bench_demo")
    command = documented_command()
    assert command == "python -m insight_o3.scripts.build_o3_bench_demo"
    assert command in (ROOT / "README.md").read_text(encoding="utf-8")  # the README's pointer names it too
    t0 = time.perf_counter()
    r = _bash(command, work)
    seconds = time.perf_counter() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return work / "outputs" / "o3bench_demo", r.stdout, seconds


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_every_step_ran_and_said_what_it_did(built):
    out, stdout, seconds = built
    assert stdout.startswith("SCRIPTED BUILD DEMO")
    ran = re.findall(r"^\[\d/7\] ([a-z ]+): python -m insight_o3\.scripts\.build_o3_bench ", stdout, re.M)
    assert ran == STEPS
    assert re.search(r"E\.1 on every layout crop and each full image: \d+ records", stdout)
    assert "Done in " in stdout and f"The benchmark: {Path('outputs/o3bench_demo/workspace/release')}/" in stdout
    assert seconds < 120, f"the demo took {seconds:.0f} s; the README says about 15 s"


def test_validation_rejected_each_planted_item_for_its_rule(built):
    out, _, _ = built
    ws = out / "workspace"
    by_id = {r["item_id"]: r["reason"] for r in _lines(ws / "validate" / "rejected.jsonl")}
    keys = sorted(s["key"] for s in _lines(ws / "sources.jsonl"))
    demo = _lines(out / "inputs" / "demo" / "metadata.jsonl")
    n = {key: sum(f"{r['subset']}/{Path(r['file_name']).stem}" == key for r in demo) for key in keys}
    planted = [by_id.get(f"{key}#q{n[key]}") for key in keys]  # the planted item follows the image's questions
    assert planted == [PLANTED_RULES[k % 6] for k in range(len(keys))]
    assert set(planted) == set(PLANTED_RULES)


def test_filter_dropped_what_every_solver_solved_and_the_review_was_applied(built):
    out, stdout, _ = built
    ws = out / "workspace"
    cands = _lines(ws / "validate" / "candidates.jsonl")
    dropped = {d["item_id"] for d in _lines(ws / "filter" / "dropped.jsonl")}
    assert dropped and dropped == {c["item_id"] for c in cands if ScriptedBuild.difficulty(c["question"]) == 3}
    decisions = [r["decision"] for r in _lines(ws / "review" / "reviewed.jsonl")]
    assert decisions.count("reject") == 1 and decisions.count("edit") == 1
    meta = _lines(ws / "release" / "metadata.jsonl")
    assert len(meta) == len(cands) - len(dropped) - 1
    assert sum(m["question"].startswith("[reviewed]") for m in meta) == 1
    samples = load_bench(ws / "release" / "metadata.jsonl")  # the viewers read it as they read O3-Bench
    assert len(samples) == len(meta) and all((ws / "release" / m["file_name"]).is_file() for m in meta)
    card = json.loads((ws / "release" / "run_card.json").read_text())
    assert card["steps"]["extract"]["model"]["model"] == "vlm" and "EMPTY" not in json.dumps(card)


def test_a_printed_step_command_is_the_real_command(built):
    out, stdout, _ = built
    validate = re.search(r"^\[4/7\] validate: (.*)$", stdout, re.M)
    assert validate
    before = (out / "workspace" / "validate" / "candidates.jsonl").read_bytes()
    r = _bash(validate.group(1), out.parent.parent)  # from the directory the demo ran in (relative paths)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (out / "workspace" / "validate" / "candidates.jsonl").read_bytes() == before


def test_a_rerun_resumes_without_asking_the_models(built):
    out, _, _ = built
    r = _bash(documented_command(), out.parent.parent)
    assert r.returncode == 0, r.stderr[-2000:]
    asked = [int(n) for n in re.findall(r"\((\d+) requests, ", r.stdout)]
    assert len(asked) == len(STEPS) - 2 and not any(asked)  # review page/apply print no request count


def test_bad_arguments_exit_2():
    from insight_o3.scripts import build_o3_bench_demo

    with pytest.raises(SystemExit) as e:
        build_o3_bench_demo.main(["--num_images", "0"])
    assert e.value.code == 2
