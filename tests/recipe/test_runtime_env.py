"""What reaches the Ray workers of a run and what Ray records (``recipe.vsearch.main.init_ray``).

* Non-secret settings (endpoints, model names, PYTHONPATH, NCCL_* / HF_* / TIKTOKEN_* / VLLM_* ...) go into the
  job's runtime env, so workers on every node get the driver's values; never into the config verl prints.
* API keys never go through Ray: Ray records a job's runtime env in its job table (``ray list jobs``, the
  dashboard). Workers inherit them from the environment their node's Ray was started in; a node whose workers
  lack them fails at start-up with its address.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from tests.support.stacks import REPO, require_module, require_recipe

require_recipe()
require_module("ray")

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from recipe.vsearch.main import FORWARDED_ENV, SECRET_ENV, forwarded_env, ray_init_kwargs  # noqa: E402
from recipe.vsearch.node_checks import SDPA_OVERRIDES  # noqa: E402

CONFIG_DIR = REPO / "verl" / "recipe" / "vsearch" / "config"
KEY, JUDGE_KEY = "sk-runtime-env-secret-1234", "sk-judge-secret-5678"
ENV = {
    "OPENAI_API_KEY": KEY,
    "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
    "JUDGE_API_KEY": JUDGE_KEY,
    "API_MODEL_FOR_AGENT": "gpt-5-mini",
    "JUDGE_MODEL": "gpt-5-nano",
    "PYTHONPATH": "/proj/verl:/proj",
    "NCCL_SOCKET_IFNAME": "eth0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TIKTOKEN_RS_CACHE_DIR": "/shared/tiktoken",
    "VLLM_ATTENTION_BACKEND": "FLASH_ATTN",
    "HF_TOKEN": "hf_secret_token",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "UNRELATED": "x",
}


def _config(*overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="qwen_2_5_vl_7b_async", overrides=["actor_rollout_ref.model.path=tiny", *overrides])


def test_settings_are_forwarded_and_secrets_are_not():
    cfg = _config("+ray_kwargs.ray_init.runtime_env.env_vars.JUDGE_MODEL=from-config")
    before = OmegaConf.to_yaml(cfg)
    kwargs = ray_init_kwargs(cfg, ENV)
    env_vars = kwargs["runtime_env"]["env_vars"]
    for name in (
        "OPENAI_BASE_URL",
        "API_MODEL_FOR_AGENT",
        "PYTHONPATH",
        "NCCL_SOCKET_IFNAME",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "TIKTOKEN_RS_CACHE_DIR",
        "VLLM_ATTENTION_BACKEND",
    ):
        assert env_vars[name] == ENV[name], name
    assert env_vars["JUDGE_MODEL"] == "from-config"  # an explicit config value wins
    for name in ("OPENAI_API_KEY", "JUDGE_API_KEY", "HF_TOKEN", "CUDA_VISIBLE_DEVICES", "UNRELATED"):
        assert name not in env_vars, name
    assert KEY not in repr(kwargs) and JUDGE_KEY not in repr(kwargs) and "hf_secret_token" not in repr(kwargs)
    assert env_vars["TOKENIZERS_PARALLELISM"] == "true"  # verl's default runtime env is kept
    assert OmegaConf.to_yaml(cfg) == before and KEY not in before
    assert set(SECRET_ENV) >= {"OPENAI_API_KEY", "JUDGE_API_KEY"} and not set(SECRET_ENV) & set(FORWARDED_ENV)
    assert forwarded_env({"OPENAI_API_KEY": KEY}) == {}


def test_a_secret_put_in_the_runtime_env_by_config_is_refused():
    cfg = _config(f"+ray_kwargs.ray_init.runtime_env.env_vars.OPENAI_API_KEY={KEY}")
    with pytest.raises(ValueError, match="job table"):
        ray_init_kwargs(cfg, {})


def test_keys_reach_the_workers_but_not_rays_job_table(monkeypatch, capsys):
    """A real local Ray started by ``init_ray``: a worker reads the keys (inherited from the driver's
    environment, as every worker of a node inherits its raylet's), and nothing Ray records about the job
    (GCS job table: runtime env, entrypoint, config) contains them, while it does hold the forwarded settings."""
    import ray

    from recipe.vsearch import main as recipe_main
    from recipe.vsearch.agent_loops import endpoints_from_env

    for name, value in ENV.items():
        if name not in ("PYTHONPATH", "CUDA_VISIBLE_DEVICES"):
            monkeypatch.setenv(name, value)
    cfg = _config(
        "ray_kwargs.ray_init.num_cpus=1",
        "+ray_kwargs.ray_init.include_dashboard=False",
        "+ray_kwargs.ray_init.address=local",
        f"+ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH={REPO / 'verl'}:{REPO}",
        *SDPA_OVERRIDES,  # no flash-attn on this machine
    )
    recipe_main.init_ray(cfg)  # includes check_worker_secrets and check_nodes on every node
    try:
        assert KEY not in capsys.readouterr().out  # the printed ray init kwargs

        @ray.remote(num_cpus=0)
        def endpoints():
            reasoner, judge = endpoints_from_env()
            return reasoner.api_key, reasoner.base_url, judge.api_key, os.environ.get("TIKTOKEN_RS_CACHE_DIR")

        assert ray.get(endpoints.remote(), timeout=120) == (KEY, ENV["OPENAI_BASE_URL"], JUDGE_KEY, "/shared/tiktoken")
        recorded = " ".join(
            str(info) for info in ray._private.worker.global_worker.gcs_client.get_all_job_info().values()
        )
        assert "TIKTOKEN_RS_CACHE_DIR" in recorded and ENV["OPENAI_BASE_URL"] in recorded  # the right record
        assert KEY not in recorded and JUDGE_KEY not in recorded and "hf_secret_token" not in recorded
        # a node whose workers lack a key the driver has: a clear error naming the node, at start-up
        with pytest.raises(SystemExit, match="do not see the API key"):
            recipe_main.check_worker_secrets(["VSEARCH_TEST_KEY_NOT_ON_NODES"])
        # the per-node start-up checks: flash-attn where the config needs it (one line naming the node and the fix)
        if importlib.util.find_spec("flash_attn") is None:
            with pytest.raises(
                SystemExit, match=r"on these nodes: .*flash_attn is not installed.*attn_implementation=sdpa"
            ):
                recipe_main.check_nodes(_config())
        else:
            recipe_main.check_nodes(_config())
    finally:
        ray.shutdown()
