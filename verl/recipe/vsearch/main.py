"""Entry point of the vsearch recipe: ``python -m recipe.vsearch.main [hydra overrides]`` (from verl/).

Same as ``python -m verl.trainer.main_ppo`` except that (1) the config is the recipe's
``config/qwen_2_5_vl_7b_async.yaml``, (2) the Ray TaskRunner imports the recipe's modules in its
own process first, so that ``algorithm.adv_estimator=vsearch_hybrid_grpo`` is registered where
the trainer looks it up (a registration in the driver process would not be seen there), and (3)
the TaskRunner builds :class:`recipe.vsearch.trainer.VSearchRayPPOTrainer` instead of verl's
``RayPPOTrainer`` (verl's ``TaskRunner.run`` constructs the trainer by the module-level name
``verl.trainer.main_ppo.RayPPOTrainer``; it is rebound in the TaskRunner's own process only), and
(4) the actor/rollout worker is verl's with a fully on-policy ``update_actor``
(:mod:`recipe.vsearch.on_policy`). Before Ray starts, the run's settings
(:class:`recipe.vsearch.settings.RunSettings`) are validated and their effective values printed once.
``--cfg job`` prints the composed config and exits without starting Ray.
"""
from __future__ import annotations

import sys

import hydra
from verl.trainer.main_ppo import TaskRunner, run_ppo

from recipe.vsearch.settings import RunSettings, SettingsError

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
    """verl's TaskRunner with the recipe's registrations imported, the recipe's trainer installed and
    the on-policy actor worker registered, in the Ray actor."""

    def run(self, config):
        import_recipe_modules()
        install_trainer()
        return super().run(config)

    def add_actor_rollout_worker(self, config):
        from recipe.vsearch import on_policy

        actor_rollout_cls, worker_group_cls = super().add_actor_rollout_worker(config)
        return on_policy.install(self.role_worker_mapping, actor_rollout_cls), worker_group_cls


def check_settings(config) -> RunSettings:
    """Validate the run's settings (errors name the key) and print their effective values once."""
    settings = RunSettings.from_config(config)
    print(settings.describe(), flush=True)
    return settings


@hydra.main(config_path="config", config_name="qwen_2_5_vl_7b_async", version_base=None)
def main(config) -> None:
    import ray

    try:
        check_settings(config)
    except SettingsError as e:
        print(f"[vsearch] error: {e}", file=sys.stderr)
        sys.exit(2)
    import_recipe_modules()
    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(VSearchTaskRunner))


if __name__ == "__main__":
    main()
