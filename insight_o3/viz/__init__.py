"""Looking at benchmarks and evaluation runs: plots, redrawn crops, and a self-contained HTML report.

Notebooks (``notebooks/visualize_*.ipynb``) and ``python -m insight_o3.scripts.report`` only call
these helpers. Records hold image *references*; every picture here is redrawn from the source image.
Only numpy/pandas/matplotlib/PIL are needed (no IPython, no ipywidgets).
"""

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
    "build_report",
    "write_report",
]
