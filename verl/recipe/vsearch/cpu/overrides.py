"""Hydra overrides that run ``recipe.vsearch.main`` (``train.sh`` / ``val.sh``) on CPU with real Ray and
verl's FSDP workers (see :mod:`recipe.vsearch.cpu`). Print them, one per line, for a shell::

    mapfile -t CPU < <(python -m recipe.vsearch.cpu.overrides --gpus 2)
    N_GPUS_PER_NODE=2 bash recipe/vsearch/train.sh "${CPU[@]}" <small-run overrides>
"""

from __future__ import annotations

import argparse

from .setup import ROLLOUT_NAME

SETUP_HOOK = "recipe.vsearch.cpu.setup.setup_worker"


def cpu_overrides(n_gpus: int, *, num_cpus: int = 16, object_store_mb: int = 512) -> list[str]:
    """``n_gpus`` logical GPUs = FSDP ranks (``trainer.n_gpus_per_node`` must match). ``num_cpus`` is
    logical too: verl's placement bundles ask for 3 CPUs per rank."""
    return [
        # a private local Ray instance with logical GPUs for verl's {"CPU": 3, "GPU": 1} bundles
        "+ray_kwargs.ray_init.address=local",
        f"ray_kwargs.ray_init.num_cpus={num_cpus}",
        f"+ray_kwargs.ray_init.num_gpus={n_gpus}",
        f"+ray_kwargs.ray_init.object_store_memory={object_store_mb * 1024 * 1024}",
        "+ray_kwargs.ray_init.include_dashboard=False",
        f"+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={SETUP_HOOK}",
        # HF-generate rollout replica instead of vLLM (hybrid mode: weights synced at every wake_up)
        f"actor_rollout_ref.rollout.name={ROLLOUT_NAME}",
        # FSDP2 with eager attention: no flash-attn, no remove-padding kernels on CPU
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "+actor_rollout_ref.model.override_config.attn_implementation=eager",
        "actor_rollout_ref.model.use_remove_padding=False",
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=2, help="logical GPUs = FSDP ranks (= N_GPUS_PER_NODE)")
    args = ap.parse_args(argv)
    print("\n".join(cpu_overrides(args.gpus)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
