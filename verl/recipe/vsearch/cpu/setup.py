"""``worker_process_setup_hook`` of CPU runs: ``+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=
recipe.vsearch.cpu.setup.setup_worker``. Ray runs :func:`setup_worker` in every worker process it starts
(TaskRunner, FSDP workers, vLLM servers, agent-loop and reward workers) before any task."""

from __future__ import annotations

from . import shims


def setup_worker() -> None:
    shims.install()
    from .. import rollout_checks

    rollout_checks.install()  # only with VSEARCH_ROLLOUT_CHECKS_DIR set (tests)
