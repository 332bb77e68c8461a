"""Start-up and result defects of the GPU path that a source trace found (no GPU ran), each checked without a GPU:
the NCCL timeouts at checkpoint time, settings that must reach every node, the served evaluation's decoding, the
smoke test's offline start and its budget, the padded (no flash-attn) path's memory. The dead-engine abort message
is tested in ``tests/test_recipe_trainer.py``, the served decoding with a real vLLM in
``tests/test_vllm_served_decoding.py``."""

from __future__ import annotations

import subprocess

from tests.conftest import REPO, require_recipe

require_recipe()

from omegaconf import OmegaConf  # noqa: E402

from tests.test_recipe_config import _env as config_env  # noqa: E402

VERL_DIR = REPO / "verl"
RECIPE = VERL_DIR / "recipe" / "vsearch"


def _dry_run(tmp_path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(RECIPE / "train.sh"), *args],
        cwd=REPO,
        env=config_env(tmp_path, **extra),
        capture_output=True,
        text=True,
        timeout=180,
    )


# ----------------------------------------------------------------------------- NCCL timeouts
def test_nccl_timeouts_are_the_forks_hour(tmp_path):
    """A rank writing its ~12 GB shard of a 7B checkpoint, then verl's barrier: verl's 600 s process-group timeout
    (and torch's heartbeat) would kill a save on a slow shared file system; the fork set both to 3600 s
    (``_base.sh:112,141``). The composed config carries it, the variable reaches the workers, and an explicit value
    wins for both."""
    from recipe.vsearch.main import forwarded_env

    r = _dry_run(tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert OmegaConf.create(r.stdout).actor_rollout_ref.nccl_timeout == 3600
    r = _dry_run(tmp_path, TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC="7200")
    assert r.returncode == 0 and OmegaConf.create(r.stdout).actor_rollout_ref.nccl_timeout == 7200
    r = _dry_run(tmp_path, TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC="1h")
    assert r.returncode == 2 and "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC must be whole seconds" in r.stderr
    # _base.sh exports the heartbeat for the driver, whose env main.py forwards to every Ray worker
    env = {k: v for k, v in config_env(tmp_path).items() if k != "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"}
    shown = subprocess.run(
        ["bash", "-c", f'source "{RECIPE}/_base.sh" && printenv TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC'],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.stdout.strip() == "3600", shown.stderr
    assert forwarded_env({"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "3600"}) == {"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "3600"}


def test_the_recipes_own_variables_reach_every_node():
    """``VSEARCH_PIXEL_CACHE_MB`` is read by the actor workers of every node (``image_inputs.pixel_cache``); the
    driver's value goes into the job's runtime env like the NCCL / HF / vLLM ones."""
    from recipe.vsearch.main import forwarded_env

    assert forwarded_env({"VSEARCH_PIXEL_CACHE_MB": "4096", "PATH": "/bin"}) == {"VSEARCH_PIXEL_CACHE_MB": "4096"}
