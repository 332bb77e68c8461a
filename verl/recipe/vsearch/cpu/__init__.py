"""Running the recipe's real driver (``python -m recipe.vsearch.main``) on a machine without GPUs.

Development and test infrastructure only: nothing here is imported by the recipe itself, and a GPU
run (``train.sh`` with the defaults) never loads it. A CPU run opts in with Hydra overrides
(:data:`recipe.vsearch.cpu.overrides.CPU_OVERRIDES`, passed by ``tests/support/recipe_cpu_run.py``):

* ``+ray_kwargs.ray_init.num_gpus=<N>`` declares *logical* GPUs, so verl's placement groups
  (``{"CPU": 3, "GPU": 1}`` bundles) and ``num_gpus`` actor options can be scheduled;
* ``+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=recipe.vsearch.cpu.setup.setup_worker``
  runs :func:`recipe.vsearch.cpu.setup.setup_worker` in every Ray worker process: the CPU shims
  (:mod:`recipe.vsearch.cpu.shims`) and the registration of the ``hf_cpu`` rollout
  (:mod:`recipe.vsearch.cpu.rollout`);
* ``actor_rollout_ref.rollout.name=hf_cpu`` replaces vLLM by a HuggingFace ``generate`` server
  registered through verl's rollout registries, in verl's hybrid mode (the actor's weights are
  synced into it at every ``wake_up``, as they are into vLLM).
"""
