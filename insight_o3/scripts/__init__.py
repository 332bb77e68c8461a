"""The commands: one module per console script of ``[project.scripts]`` (each also ``python -m
insight_o3.scripts.NAME``), their shared flags and entry-point wrapper in :mod:`._shared`."""

__all__ = [
    "build_o3_bench",
    "build_o3_bench_demo",
    "build_reasoning_data",
    "build_reasoning_data_demo",
    "build_region_localization",
    "check_reliability",
    "compare",
    "convert_benchmark",
    "demo",
    "download_benchmarks",
    "evaluate",
    "evaluate_vsearch",
    "export",
    "filter_difficulty",
    "gather_eval_results",
    "generate_collages",
    "index_corpus",
    "make_demo_bench",
    "rejudge",
    "report",
]
