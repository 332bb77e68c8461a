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
(:class:`recipe.vsearch.settings.RunSettings`) are validated and their effective values printed once, and
(5) Ray is started with the API keys / endpoints / model names of the driver's environment in the job's
runtime env (:func:`init_ray`), so every worker on every node has them, without them entering the config.
``--cfg job`` prints the composed config and exits without starting Ray.
"""

from __future__ import annotations

import os
import sys

import hydra
from verl.trainer.main_ppo import TaskRunner, run_ppo

from insight_o3.api import ENV_KEYS
from recipe.vsearch.settings import RunSettings, SettingsError

#: driver environment variables every Ray worker needs (the agent loops' API endpoints and keys, read by
#: ``recipe.vsearch.agent_loops.ApiEndpoints.from_env``; the scripts' model-name variables). Workers on other
#: nodes, or of a Ray cluster started before the driver, do not inherit the driver's environment: they get
#: these through the job's runtime env, set here and never written into the (printed, logged) config.
FORWARDED_ENV = tuple(
    dict.fromkeys(
        [name for kind in ("main", "judge") for group in ENV_KEYS[kind] for name in group]
        + ["API_MODEL_FOR_AGENT", "JUDGE_MODEL"]
    )
)
#: of those, the ones whose values are never printed
SECRET_ENV = tuple(n for n in FORWARDED_ENV if n.endswith("_KEY"))

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


def ray_init_kwargs(config, environ=None) -> tuple[dict, dict]:
    """``ray.init`` kwargs as verl's ``run_ppo`` builds them (its default runtime env merged with
    ``ray_kwargs.ray_init``), plus :data:`FORWARDED_ENV` from ``environ`` (default ``os.environ``) in
    ``runtime_env.env_vars``; values given explicitly in the config win. Returns ``(kwargs, printable)``:
    the second has the secret values replaced by ``***``. ``config`` is not modified."""
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    environ = os.environ if environ is None else environ
    init = OmegaConf.to_container(config.ray_kwargs.get("ray_init", {}), resolve=True) or {}
    runtime_env = OmegaConf.to_container(OmegaConf.merge(get_ppo_ray_runtime_env(), init.get("runtime_env") or {}))
    env_vars = dict(runtime_env.get("env_vars") or {})
    if config.transfer_queue.enable:
        env_vars["TRANSFER_QUEUE_ENABLE"] = "1"
    for name in FORWARDED_ENV:
        if environ.get(name) and name not in env_vars:
            env_vars[name] = environ[name]
    runtime_env["env_vars"] = env_vars
    kwargs = {**init, "runtime_env": runtime_env}
    shown_env = {k: ("***" if k in SECRET_ENV else v) for k, v in env_vars.items()}
    return kwargs, {**init, "runtime_env": {**runtime_env, "env_vars": shown_env}}


def init_ray(config) -> None:
    """Start (or join) Ray with the API environment forwarded to every worker (see :data:`FORWARDED_ENV`);
    verl's ``run_ppo`` then finds Ray initialised and uses it."""
    import ray

    if ray.is_initialized():
        return
    kwargs, shown = ray_init_kwargs(config)
    print(f"[vsearch] ray init kwargs: {shown}", flush=True)
    ray.init(**kwargs)


@hydra.main(config_path="config", config_name="qwen_2_5_vl_7b_async", version_base=None)
def main(config) -> None:
    import ray

    from recipe.vsearch.offline import OfflineStartupError, check_harmony_vocab

    try:
        check_settings(config)
        print(f"[vsearch] {check_harmony_vocab(str(config.actor_rollout_ref.rollout.name))}", flush=True)
    except (SettingsError, OfflineStartupError) as e:
        print(f"[vsearch] error: {e}", file=sys.stderr)
        sys.exit(2)
    import_recipe_modules()
    init_ray(config)
    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(VSearchTaskRunner))


if __name__ == "__main__":
    main()
