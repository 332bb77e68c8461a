"""Both notebooks execute top to bottom (nbclient, the venv's ``python3`` kernel) on a real
InSight-o3 run made by the scripted local servers and on the demo benchmark; any cell error fails."""

from __future__ import annotations

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
