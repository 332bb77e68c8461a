"""Both notebooks execute top to bottom (nbclient, the venv's ``python3`` kernel) on a real
InSight-o3 run made by the scripted local servers and on the demo benchmark; any cell error fails."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def _execute(name: str, env: dict[str, str], monkeypatch) -> nbformat.NotebookNode:
    for k, v in env.items():
        monkeypatch.setenv(k, v)  # the kernel inherits the environment; the first cell reads it
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(
        nb, timeout=120, kernel_name="python3", allow_errors=False, resources={"metadata": {"path": str(NOTEBOOKS)}}
    ).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    return nb


def _outputs(nb, mime: str) -> list[str]:
    return [
        o["data"][mime]
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.output_type in ("display_data", "execute_result") and mime in o.get("data", {})
    ]


def test_visualize_o3_bench_notebook(demo_eval_run, monkeypatch):
    nb = _execute(
        "visualize_o3_bench.ipynb",
        {"INSIGHT_O3_BENCH_ANN": str(demo_eval_run.ann_file), "INSIGHT_O3_N_BROWSE": "2", "INSIGHT_O3_MAX_PX": "384"},
        monkeypatch,
    )
    assert len(_outputs(nb, "image/png")) >= 3  # the three statistics figures
    pages = "".join(_outputs(nb, "text/html"))
    first = demo_eval_run.samples[0]
    assert first["question_id"] in pages and "Target layouts." in pages and "data:image/jpeg;base64," in pages


def test_visualize_output_notebook(demo_eval_run, monkeypatch):
    key = next(k for k, v in demo_eval_run.plan.items() if v == "search_right")
    nb = _execute(
        "visualize_output.ipynb",
        {
            "INSIGHT_O3_EVAL_DIR": str(demo_eval_run.eval_dir),
            "INSIGHT_O3_STATUS": "correct",
            "INSIGHT_O3_THUMB_PX": "256",
        },
        monkeypatch,
    )
    pages = "".join(_outputs(nb, "text/html"))
    assert f"<b>{key}</b>" in pages  # the first correct sample that searched
    assert "class='crop'" in pages and "vSearcher call" in pages and "compare-col" in pages
    assert _outputs(nb, "image/png")  # the overview image with crops drawn


def test_visualize_output_notebook_compare_runs(demo_eval_run, monkeypatch):
    key = next(k for k, v in demo_eval_run.plan.items() if v == "search_twice_wrong")
    nb = _execute(
        "visualize_output.ipynb",
        {
            "INSIGHT_O3_EVAL_DIR": str(demo_eval_run.eval_dir / "trial_0"),
            "INSIGHT_O3_COMPARE_DIR": str(demo_eval_run.eval_dir),
            "INSIGHT_O3_SAMPLE_KEY": key,
            "INSIGHT_O3_THUMB_PX": "192",
        },
        monkeypatch,
    )
    pages = "".join(_outputs(nb, "text/html"))
    assert f"<b>{key}</b>" in pages and pages.count("compare-col") == 2


def test_notebooks_hold_no_logic():
    """Notebook code only sets parameters and calls insight_o3.viz (no function/class definitions)."""
    for name in ("visualize_o3_bench.ipynb", "visualize_output.ipynb"):
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        assert "def " not in code and "class " not in code, name
        assert "insight_o3.viz" in code and "ipywidgets" not in code, name
        assert "os.environ.get(" in nb.cells[1].source, name  # parameters first, env-overridable


def test_visualize_output_notebook_reads_an_original_run(demo_eval_run, tmp_path, monkeypatch):
    """A run directory written by the original release's harness, compared with a run of ours."""
    from tests.support.original_run import ORIGINAL_KEY, write_original_run

    n = len(demo_eval_run.samples)
    old = write_original_run(
        tmp_path / "old",
        "old/demo_bench",
        demo_eval_run.ann_file,
        demo_eval_run.bench_dir,
        [["correct"] * (n - 1) + ["wrong"]],
    )
    key = demo_eval_run.samples[0]["question_id"]
    nb = _execute(
        "visualize_output.ipynb",
        {
            "INSIGHT_O3_EVAL_DIR": str(old),
            "INSIGHT_O3_COMPARE_DIR": str(demo_eval_run.eval_dir),
            "INSIGHT_O3_SAMPLE_KEY": key,
            "INSIGHT_O3_THUMB_PX": "192",
        },
        monkeypatch,
    )
    pages = "".join(_outputs(nb, "text/html"))
    assert f"<b>{key}</b>" in pages and pages.count("compare-col") == 2 and ORIGINAL_KEY not in pages


def test_notebooks_and_report_find_images_of_a_run_made_from_the_repo_root_with_a_relative_img_dir(
    monkeypatch, tmp_path
):
    """The notebooks (run in notebooks/) find the images of a run evaluated from the repository root with a
    relative --img_dir, whose records keep relative image paths: the run records the directory it ran in (args.json and the run card's history: ``working_dir``) and the viewers join the two. Here the keyless
    demo runs from the repository root with a relative --output_dir (so evaluate gets --img_dir outputs/.../bench),
    then both notebooks run with their default relative paths, and the report is written from elsewhere."""
    import json
    import shutil
    import subprocess
    import sys

    from insight_o3.scripts import report

    repo = NOTEBOOKS.parent
    rel = Path("outputs") / f"test-notebook-paths-{os.getpid()}"
    try:
        demo = subprocess.run(
            [sys.executable, "-m", "insight_o3.scripts.demo", "--output_dir", str(rel), "--num_images", "2"]
            + ["--num_trials", "1"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert demo.returncode == 0, demo.stderr[-3000:]
        run = rel / "eval" / "scripted-demo" / "insight-o3"
        args = json.loads((repo / run / "args.json").read_text())
        assert args["img_dir"] == str(rel / "bench") and args["working_dir"] == str(repo)  # relative, and where
        card = json.loads((repo / run / "run_card.json").read_text())
        assert card["history"][-1]["settings"]["working_dir"] == str(repo)
        record = json.loads((repo / run / "trial_0" / "eval_records.jsonl").read_text().splitlines()[0])
        assert not os.path.isabs(record["image_path"])  # as --img_dir made it

        nb = _execute(
            "visualize_output.ipynb", {"INSIGHT_O3_EVAL_DIR": str(run), "INSIGHT_O3_THUMB_PX": "192"}, monkeypatch
        )
        pages = "".join(_outputs(nb, "text/html"))
        assert "class='crop'" in pages and "data:image/jpeg;base64," in pages  # crops cut from the source image
        assert _outputs(nb, "image/png")  # the overview, drawn from the source image
        nb = _execute(
            "visualize_o3_bench.ipynb",
            {"INSIGHT_O3_BENCH_ANN": str(rel / "bench" / "metadata.jsonl"), "INSIGHT_O3_N_BROWSE": "1"},
            monkeypatch,
        )
        assert "data:image/jpeg;base64," in "".join(_outputs(nb, "text/html"))

        # what the notebook (cwd notebooks/) and the report (cwd elsewhere) resolve images with; a missing image
        # would only be a placeholder picture in their output, so the resolution itself is checked
        from insight_o3.viz import run_view
        from insight_o3.viz.draw import ImageResolver

        for cwd in (NOTEBOOKS, tmp_path):
            monkeypatch.chdir(cwd)
            loaded = run_view.load_run(repo / run)
            resolver = ImageResolver(loaded.image_roots())
            paths = {r.image_path for t in loaded.trials for r in t.results}
            assert paths and all(resolver.resolve(p) for p in paths), (cwd, loaded.image_roots())

        monkeypatch.chdir(tmp_path)  # the report from another directory
        assert report.main([str(repo / run), "--out", "r.html", "--max_samples", "0", "--thumb_px", "64"]) == 0
        page = (tmp_path / "r.html").read_text()
        assert "source image not found" not in page and "data:image/jpeg;base64," in page
    finally:
        shutil.rmtree(repo / rel, ignore_errors=True)
