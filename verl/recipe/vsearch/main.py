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
(5) Ray is started with the driver's non-secret settings (endpoints, model names, PYTHONPATH, NCCL_* / HF_* /
TIKTOKEN_* / VLLM_* ...) in the job's runtime env (:func:`init_ray`), so every worker on every node has them;
API keys never go through Ray (it records runtime envs in its job table): workers inherit them from the
environment their node's Ray was started in, which :func:`check_worker_secrets` verifies on every node.
``--cfg job`` prints the composed config and exits without starting Ray.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import hydra
from verl.trainer.main_ppo import TaskRunner, run_ppo

from insight_o3.base.json_types import JSONObject
from insight_o3.endpoints.endpoint import ENV_KEYS
from recipe.vsearch.node_checks import check_driver, check_nodes
from recipe.vsearch.settings import RunSettings, SettingsError

#: API environment of the agent loops (``recipe.vsearch.agent_loops.endpoints_from_env``) and the scripts'
#: model-name variables
API_ENV = tuple(
    dict.fromkeys(
        [name for kind in ("main", "judge") for group in ENV_KEYS[kind] for name in group]
        + ["API_MODEL_FOR_AGENT", "JUDGE_MODEL"]
    )
)
#: of those, the secrets. They are NEVER put in Ray's runtime env: Ray records a job's runtime env in its job
#: table, which ``ray list jobs`` and the dashboard show. Workers get them from the environment of the process
#: that started their node's raylet: the driver itself for a Ray it starts (single node), or ``ray start`` on
#: each node of a multi-node cluster (export them there); :func:`check_worker_secrets` verifies every node.
SECRET_ENV = tuple(n for n in API_ENV if n.endswith("_KEY"))
#: the non-secret variables copied from the driver into the job's runtime env, so that workers on other nodes
#: (and of a Ray cluster started before the driver) see the driver's values
FORWARDED_ENV = tuple(n for n in API_ENV if n not in SECRET_ENV) + ("PYTHONPATH", "TOKENIZERS_PARALLELISM")
#: ... and every variable with one of these prefixes: NCCL tuning (``NCCL_*``, torch's ``TORCH_NCCL_*``), the
#: network interface of verl's ``cpu:gloo`` group (``GLOO_SOCKET_IFNAME``), the Hugging Face hub / cache and
#: offline switches, the harmony vocab location (``recipe.vsearch.offline``), vLLM's settings, the recipe's own
#: (``VSEARCH_PIXEL_CACHE_MB`` of ``recipe.vsearch.image_inputs``, read in the actor workers of every node)
FORWARDED_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_", "HF_", "TRANSFORMERS_", "TIKTOKEN_", "VLLM_", "VSEARCH_")
#: never forwarded even if a prefix matches: per-node / per-process values
NOT_FORWARDED = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def forwarded_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The driver variables that go into the job's runtime env (see :data:`FORWARDED_ENV`)."""
    out = {}
    for name, value in environ.items():
        if not value or name in NOT_FORWARDED or name in SECRET_ENV or name.endswith("_KEY"):
            continue
        if name in FORWARDED_ENV or name.startswith(FORWARDED_ENV_PREFIXES):
            out[name] = value
    return out


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

    def run(self, config: Any) -> Any:
        import_recipe_modules()
        install_trainer()
        return super().run(config)

    def add_actor_rollout_worker(self, config: Any) -> tuple[Any, Any]:
        from recipe.vsearch import on_policy

        actor_rollout_cls, worker_group_cls = super().add_actor_rollout_worker(config)
        return on_policy.install(self.role_worker_mapping, actor_rollout_cls), worker_group_cls


def check_settings(config: Any) -> RunSettings:
    """Validate the run's settings (errors name the key) and print their effective values once."""
    settings = RunSettings.from_config(config)
    print(settings.describe(), flush=True)
    return settings


def ray_init_kwargs(config: Any, environ: Mapping[str, str] | None = None) -> JSONObject:
    """``ray.init`` kwargs as verl's ``run_ppo`` builds them (its default runtime env merged with
    ``ray_kwargs.ray_init``), plus :func:`forwarded_env` of ``environ`` (default ``os.environ``) in
    ``runtime_env.env_vars``; values given explicitly in the config win. No secret goes in (:data:`SECRET_ENV`),
    so the kwargs can be printed. ``config`` is not modified."""
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    environ = os.environ if environ is None else environ
    init = OmegaConf.to_container(config.ray_kwargs.get("ray_init", {}), resolve=True) or {}
    runtime_env = OmegaConf.to_container(OmegaConf.merge(get_ppo_ray_runtime_env(), init.get("runtime_env") or {}))
    env_vars = dict(runtime_env.get("env_vars") or {})
    if config.transfer_queue.enable:
        env_vars["TRANSFER_QUEUE_ENABLE"] = "1"
    for name, value in forwarded_env(environ).items():
        env_vars.setdefault(name, value)
    secret = sorted(n for n in env_vars if n in SECRET_ENV or n.endswith("_KEY"))
    if secret:
        raise ValueError(
            f"ray_kwargs.ray_init.runtime_env.env_vars sets {secret}: Ray would record the secret in its job table "
            "(ray list jobs, the dashboard). Export it in the environment of train.sh (single node) or of "
            "`ray start` on every node instead."
        )
    runtime_env["env_vars"] = env_vars
    return {**init, "runtime_env": runtime_env}


def init_ray(config: Any) -> None:
    """Start (or join) Ray with :func:`ray_init_kwargs`; verl's ``run_ppo`` then finds Ray initialised and uses
    it. Then check that the workers of every node see the API keys the driver has (:func:`check_worker_secrets`),
    have flash-attn when the config needs it and the harmony vocab (:func:`recipe.vsearch.node_checks.check_nodes`)."""
    import ray

    if ray.is_initialized():
        return
    kwargs = ray_init_kwargs(config)
    print(f"[vsearch] ray init kwargs: {kwargs}", flush=True)
    ray.init(**kwargs)
    check_worker_secrets([n for n in SECRET_ENV if os.environ.get(n)])
    check_nodes(config)


def _present_env(keys: list[str]) -> list[str]:
    return [k for k in keys if os.environ.get(k)]


def check_worker_secrets(names: list[str], timeout: float = 300) -> None:
    """Every alive node's workers see each variable in ``names`` (set, non-empty; values are never read back).
    A node whose raylet was started without them (``ray start`` in a shell without the keys) fails here with
    the node's address, instead of as API failures in the middle of training."""
    from recipe.vsearch.node_checks import check_every_node

    if not names:
        return
    missing = []
    for addr, seen in check_every_node(_present_env, names, timeout=timeout):
        lacking = sorted(set(names) - set(seen))
        if lacking:
            missing.append(f"{addr}: {lacking}")
    if missing:
        raise SystemExit(
            "[vsearch] error: Ray workers on these nodes do not see the API key(s): "
            + "; ".join(missing)
            + ". Keys are not sent through Ray (its job table would show them): export them in the shell that runs "
            "`ray start` on each node, then restart Ray there (see recipe/vsearch/README.md, Multi-node)."
        )


@hydra.main(config_path="config", config_name="qwen_2_5_vl_7b_async", version_base=None)
def main(config: Any) -> None:
    import ray
    from omegaconf import OmegaConf

    from recipe.vsearch.offline import OfflineStartupError, check_harmony_vocab
    from recipe.vsearch.resume import check_resume

    try:
        check_settings(config)
        OmegaConf.resolve(config)  # the variant's values (${vsearch_protocol:...}) fixed once, in the driver
        print(f"[vsearch] {check_resume(config)}", flush=True)
        print(f"[vsearch] {check_harmony_vocab(str(config.actor_rollout_ref.rollout.name))}", flush=True)
    except (SettingsError, OfflineStartupError) as e:
        print(f"[vsearch] error: {e}", file=sys.stderr)
        sys.exit(2)
    problems = check_driver(config)
    for problem in problems:
        print(f"[vsearch] error: {problem}", file=sys.stderr)
    if problems:
        sys.exit(2)
    import_recipe_modules()
    init_ray(config)
    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(VSearchTaskRunner))


if __name__ == "__main__":
    main()
