"""Looking at benchmarks and evaluation runs: plots, redrawn crops, and a self-contained HTML report.

Notebooks (``notebooks/visualize_*.ipynb``) and ``python -m insight_o3.scripts.report`` only call
these helpers. Records hold image *references*; every picture here is redrawn from the source image.
Only numpy/pandas/matplotlib/PIL are needed (no IPython, no ipywidgets).

The names below are the package's (``from insight_o3.viz import load_run``); each loads its module when first
asked for, so importing one module of the package (``viz.review_page`` for ``build_o3_bench``'s review page,
``viz.run_view`` in a notebook) does not load the others (pandas and matplotlib for the benchmark views, the report).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names for type checkers and editors; at run time each loads on first use (_LAZY)
    from .bench_view import BenchLayout, bench_table, draw_sample, layouts, load_bench, sample_html
    from .draw import ImageResolver, image_data_url, thumbnail
    from .report import build_report, write_report
    from .run_view import (
        EvalRun,
        RunError,
        SampleResult,
        Trial,
        Turn,
        compare_frame,
        compare_html,
        conversation,
        conversation_html,
        draw_result,
        filter_results,
        load_run,
        load_trial,
        pick_result,
        style_html,
    )

#: each public name and the module of this package that defines it, loaded when the name is first asked for
_LAZY = {
    "BenchLayout": "bench_view",
    "bench_table": "bench_view",
    "draw_sample": "bench_view",
    "layouts": "bench_view",
    "load_bench": "bench_view",
    "sample_html": "bench_view",
    "ImageResolver": "draw",
    "image_data_url": "draw",
    "thumbnail": "draw",
    "build_report": "report",
    "write_report": "report",
    "EvalRun": "run_view",
    "RunError": "run_view",
    "SampleResult": "run_view",
    "Trial": "run_view",
    "Turn": "run_view",
    "compare_frame": "run_view",
    "compare_html": "run_view",
    "conversation": "run_view",
    "conversation_html": "run_view",
    "draw_result": "run_view",
    "filter_results": "run_view",
    "load_run": "run_view",
    "load_trial": "run_view",
    "pick_result": "run_view",
    "style_html": "run_view",
}

__all__ = [
    "BenchLayout",
    "bench_table",
    "draw_sample",
    "layouts",
    "load_bench",
    "sample_html",
    "ImageResolver",
    "image_data_url",
    "thumbnail",
    "build_report",
    "write_report",
    "EvalRun",
    "RunError",
    "SampleResult",
    "Trial",
    "Turn",
    "compare_frame",
    "compare_html",
    "conversation",
    "conversation_html",
    "draw_result",
    "filter_results",
    "load_run",
    "load_trial",
    "pick_result",
    "style_html",
]


def __getattr__(name: str) -> Any:
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{home}", __name__), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
