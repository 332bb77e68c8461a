"""API keys, endpoints and model names reach every Ray worker through the job's runtime env
(``recipe.vsearch.main.init_ray``), not through the config that verl prints and logs."""

from __future__ import annotations

import os

import pytest

from tests.conftest import REPO, require_module, require_recipe

require_recipe()
require_module("ray")

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from recipe.vsearch.main import FORWARDED_ENV, ray_init_kwargs  # noqa: E402

CONFIG_DIR = REPO / "verl" / "recipe" / "vsearch" / "config"
KEY, JUDGE_KEY = "sk-runtime-env-secret-1234", "sk-judge-secret-5678"
ENV = {
    "OPENAI_API_KEY": KEY,
    "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
    "JUDGE_API_KEY": JUDGE_KEY,
    "API_MODEL_FOR_AGENT": "gpt-5-mini",
    "JUDGE_MODEL": "gpt-5-nano",
    "UNRELATED": "x",
}


def _config(*overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="qwen_2_5_vl_7b_async", overrides=["actor_rollout_ref.model.path=tiny", *overrides])


def test_forwarded_env_goes_into_runtime_env_not_into_the_config():
    cfg = _config(
        "+ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH=/p",
        "+ray_kwargs.ray_init.runtime_env.env_vars.JUDGE_MODEL=from-config",
    )
    before = OmegaConf.to_yaml(cfg)
    kwargs, shown = ray_init_kwargs(cfg, ENV)
    env_vars = kwargs["runtime_env"]["env_vars"]
    assert env_vars["OPENAI_API_KEY"] == KEY and env_vars["JUDGE_API_KEY"] == JUDGE_KEY
    assert env_vars["OPENAI_BASE_URL"] == ENV["OPENAI_BASE_URL"] and env_vars["API_MODEL_FOR_AGENT"] == "gpt-5-mini"
    assert env_vars["JUDGE_MODEL"] == "from-config"  # an explicit config value wins
    assert env_vars["PYTHONPATH"] == "/p" and "UNRELATED" not in env_vars
    assert env_vars["TOKENIZERS_PARALLELISM"] == "true"  # verl's default runtime env is kept
    assert kwargs["num_cpus"] is None or isinstance(kwargs["num_cpus"], int)
    # what is printed has no secret; the config (printed by verl's TaskRunner, logged by Tracking) is unchanged
    assert (
        KEY not in repr(shown)
        and JUDGE_KEY not in repr(shown)
        and shown["runtime_env"]["env_vars"]["OPENAI_API_KEY"] == "***"
    )
    assert OmegaConf.to_yaml(cfg) == before and KEY not in before
    assert set(FORWARDED_ENV) >= {"OPENAI_API_KEY", "OPENAI_BASE_URL", "JUDGE_API_KEY", "JUDGE_API_BASE_URL"}


def test_a_ray_worker_without_the_drivers_env_gets_the_keys(monkeypatch):
    """A real local Ray whose processes do NOT inherit the key from the driver's environment (as on another
    node or a pre-started cluster): the worker sees it only through the runtime env."""
    import ray

    from recipe.vsearch.agent_loops import ApiEndpoints

    for name in FORWARDED_ENV:
        monkeypatch.delenv(name, raising=False)
    kwargs, _ = ray_init_kwargs(
        _config(
            "ray_kwargs.ray_init.num_cpus=1",
            "+ray_kwargs.ray_init.include_dashboard=False",
            "+ray_kwargs.ray_init.address=local",
            f"+ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH={REPO / 'verl'}:{REPO}",
        ),
        ENV,
    )
    assert "OPENAI_API_KEY" not in os.environ
    ray.init(**kwargs)
    try:

        @ray.remote(num_cpus=0)
        def endpoints():
            ep = ApiEndpoints.from_env()
            return ep.api_key, ep.base_url, ep.judge_api_key, os.environ.get("JUDGE_MODEL")

        assert ray.get(endpoints.remote(), timeout=120) == (KEY, ENV["OPENAI_BASE_URL"], JUDGE_KEY, "gpt-5-nano")
    finally:
        ray.shutdown()


@pytest.mark.parametrize("missing", ["OPENAI_API_KEY"])
def test_without_the_env_nothing_is_invented(missing):
    env = {k: v for k, v in ENV.items() if k != missing}
    kwargs, _ = ray_init_kwargs(_config(), env)
    assert missing not in kwargs["runtime_env"]["env_vars"]
