"""Benchmark evaluation: loading annotations, running a solver over (sample, trial) pairs with
resumable per-sample records, answer checking with a judge, and metrics."""
