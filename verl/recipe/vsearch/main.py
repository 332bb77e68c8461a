"""Entry point of the vsearch recipe: ``python -m recipe.vsearch.main [hydra overrides]`` (from verl/).

Same as ``python -m verl.trainer.main_ppo`` except that (1) the config is the recipe's
``config/qwen_2_5_vl_7b_async.yaml``, (2) the Ray TaskRunner imports the recipe's modules in its
own process first, so that ``algorithm.adv_estimator=vsearch_hybrid_grpo`` is registered where
the trainer looks it up (a registration in the driver process would not be seen there), and (3)
the TaskRunner builds :class:`recipe.vsearch.trainer.VSearchRayPPOTrainer` instead of verl's
``RayPPOTrainer`` (verl's ``TaskRunner.run`` constructs the trainer by the module-level name
``verl.trainer.main_ppo.RayPPOTrainer``; it is rebound in the TaskRunner's own process only).
``--cfg job`` prints the composed config and exits without starting Ray.
"""
from __future__ import annotations

import hydra
from verl.trainer.main_ppo import TaskRunner, run_ppo

#: Modules whose import has a side effect the TaskRunner process needs (registrations).
RECIPE_REGISTRATIONS = ("recipe.vsearch.hybrid_advantage", "recipe.vsearch.trainer")


def import_recipe_modules() -> None:
    import importlib

    for name in RECIPE_REGISTRATIONS:
        importlib.import_module(name)


def install_trainer() -> type:
    """Make verl's ``TaskRunner.run`` build the recipe's trainer (in the calling process)."""
    import verl.trainer.main_ppo as main_ppo

    from recipe.vsearch.trainer import VSearchRayPPOTrainer

    main_ppo.RayPPOTrainer = VSearchRayPPOTrainer
    return VSearchRayPPOTrainer


class VSearchTaskRunner(TaskRunner):
    """verl's TaskRunner with the recipe's registrations imported and the recipe's trainer installed
    in the Ray actor."""

    def run(self, config):
        import_recipe_modules()
        install_trainer()
        return super().run(config)


@hydra.main(config_path="config", config_name="qwen_2_5_vl_7b_async", version_base=None)
def main(config) -> None:
    import ray

    import_recipe_modules()
    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(VSearchTaskRunner))


if __name__ == "__main__":
    main()
