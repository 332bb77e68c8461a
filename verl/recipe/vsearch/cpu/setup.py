"""``worker_process_setup_hook`` of CPU runs: ``+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=
recipe.vsearch.cpu.setup.setup_worker``. Ray runs :func:`setup_worker` in every worker process it starts
(TaskRunner, FSDP workers, rollout servers, agent-loop and reward workers) before any task."""

from __future__ import annotations

from . import shims

#: ``actor_rollout_ref.rollout.name`` of the CPU rollout (:mod:`recipe.vsearch.cpu.rollout`)
ROLLOUT_NAME = "hf_cpu"


def _register_replica(replica_module) -> None:
    def load():
        from .rollout import HFCPUReplica

        return HFCPUReplica

    replica_module.RolloutReplicaRegistry.register(ROLLOUT_NAME, load)


def _register_worker_rollout(base_module) -> None:
    # a dotted path: verl imports the class only when a worker builds its rollout
    base_module._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = "recipe.vsearch.cpu.rollout.HFCPURollout"


def register_rollout() -> None:
    """Register ``hf_cpu`` in verl's two rollout registries (replica side and worker side), as soon as
    verl's registry modules are imported in this process."""
    shims.after_import("verl.workers.rollout.replica", _register_replica)
    shims.after_import("verl.workers.rollout.base", _register_worker_rollout)


def setup_worker() -> None:
    shims.install()
    register_rollout()
    from .. import rollout_checks

    rollout_checks.install()  # only with VSEARCH_ROLLOUT_CHECKS_DIR set (tests)
