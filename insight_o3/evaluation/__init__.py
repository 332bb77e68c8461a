"""Benchmark evaluation: loading annotations, running a solver over (sample, trial) pairs with
resumable per-sample records, answer checking with a judge, and metrics."""

__all__ = [
    "agent_listing",
    "agent_registry",
    "attribution",
    "benchmark_download",
    "benchmark_files",
    "benchmarks",
    "config",
    "judge",
    "judge_settings",
    "metrics",
    "opensearch_vl_judge",
    "run_card",
    "run_dir",
    "runner",
    "samples",
    "schema",
    "stored_attempts",
    "vsearch_eval",
]
