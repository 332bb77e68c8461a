"""What a first run on a GPU cluster hits before step 1, checked without a GPU: relative
paths given to train.sh from another directory, val.sh on an evaluation set smaller than a training batch,
flash-attn missing (one line, status 2, before Ray starts), what reaches every node, keys that do nothing."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.stacks import REPO, require_recipe

require_recipe()

from omegaconf import OmegaConf  # noqa: E402

from recipe.vsearch.node_checks import SDPA_OVERRIDES, check_driver, needs_flash_attn  # noqa: E402
from tests.support.recipe_env import SECRET, entry_point_recorder, script_env  # noqa: E402

VERL_DIR = REPO / "verl"
RECIPE = VERL_DIR / "recipe" / "vsearch"


def _env(**extra) -> dict:
    """The dry-run environment (:func:`tests.support.recipe_env.script_env`) without its data files and agent config unless given."""
    env = script_env(Path("/nonexistent"), **extra)
    for name in ("TRAIN_FILES", "AGENT_CONFIG", "WORK_DIR"):
        if name not in extra:
            env.pop(name, None)
    return env


def _run(script: str, cwd, *args: str, **extra) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(RECIPE / script), *args], cwd=cwd, env=_env(**extra), capture_output=True, text=True, timeout=180
    )


# ----------------------------------------------------------------------------- item 7
def test_relative_paths_from_another_directory(tmp_path):
    """Every path given relative to the caller names the same file after train.sh's ``cd`` (before: AGENT_CONFIG
    passed the check here and was "not found" there; data, work and model paths silently moved)."""
    caller = tmp_path / "caller"
    (caller / "data").mkdir(parents=True)
    (caller / "model").mkdir()
    agent = caller / "my_agent.yaml"
    agent.write_text((RECIPE / "config" / "agent_gpt-5-mini.yaml").read_text())
    r = _run(
        "train.sh",
        caller,
        VERL_PROJ_DIR=os.path.relpath(VERL_DIR, caller),
        AGENT_CONFIG="my_agent.yaml",
        WORK_DIR="./work",
        MODEL_PATH="model",
        TRAIN_FILES="[data/a.parquet,./data/b.parquet]",
        VAL_FILES="data/v.parquet",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    cfg = OmegaConf.create(r.stdout)
    assert cfg.vsearch.agent_config_path == str(agent)
    assert cfg.actor_rollout_ref.model.path == str(caller / "model")
    assert list(cfg.data.train_files) == [str(caller / "data" / "a.parquet"), str(caller / "data" / "b.parquet")]
    assert cfg.data.val_files == str(caller / "data" / "v.parquet")
    assert cfg.trainer.default_local_dir == str(caller / "work" / "ckpts" / "proj" / "exp")
    # a hub id stays a hub id: what train.sh hands the entry point (which composes it as given, as above)
    python, argv = entry_point_recorder(tmp_path)
    r = _run(
        "train.sh", caller, PYTHON=str(python), TRAIN_FILES="/d/a.parquet", VAL_FILES="/d/v.parquet", WORK_DIR="/w"
    )
    assert r.returncode == 0, r.stderr
    assert "actor_rollout_ref.model.path=Qwen/Qwen2.5-VL-7B-Instruct" in argv.read_text().splitlines()


# ----------------------------------------------------------------------------- item 6
def test_val_sh_on_an_evaluation_set_smaller_than_a_training_batch(tmp_path):
    """Without TRAIN_FILES verl builds its (never iterated) train dataloader from VAL_FILES with ``drop_last``
    (``ray_trainer.py:392-399, 413``): the batch it reads must fit a 10-row set."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    r = _run("val.sh", tmp_path, VAL_FILES="/d/v.parquet", WORK_DIR=str(tmp_path / "w"))
    assert r.returncode == 0, r.stderr[-3000:]
    cfg = OmegaConf.create(r.stdout)
    assert cfg.data.train_files == "/d/v.parquet"
    rows = list(range(10))
    # the expression of verl 0.7.0's RayPPOTrainer._create_dataloader
    loader = StatefulDataLoader(
        rows, batch_size=cfg.data.get("gen_batch_size", cfg.data.train_batch_size), drop_last=True, num_workers=0
    )
    assert len(loader) >= 1, "Train dataloader is empty!"
    # with TRAIN_FILES the training batch is untouched: val.sh hands the entry point no batch size (the recipe YAML has
    # no data.gen_batch_size: the `+data.gen_batch_size=1` above would not compose otherwise)
    python, argv = entry_point_recorder(tmp_path)
    r = _run(
        "val.sh",
        tmp_path,
        PYTHON=str(python),
        VAL_FILES="/d/v.parquet",
        TRAIN_FILES="/d/t.parquet",
        WORK_DIR=str(tmp_path / "w"),
    )
    assert r.returncode == 0, r.stderr
    args = argv.read_text().splitlines()
    assert "data.train_files=/d/t.parquet" in args
    assert not [a for a in args if "gen_batch_size" in a or "train_batch_size" in a]


# ----------------------------------------------------------------------------- item 5
def test_flash_attn_needed_by_default_and_not_by_the_sdpa_switch():
    base = {"actor_rollout_ref": {"model": {"use_remove_padding": True}}}
    assert needs_flash_attn(OmegaConf.create(base))
    sdpa = OmegaConf.create(base)
    for o in SDPA_OVERRIDES:
        key, value = o.lstrip("+").split("=")
        OmegaConf.update(sdpa, key, value == "True" if value in ("True", "False") else value, force_add=True)
    assert not needs_flash_attn(sdpa) and check_driver(sdpa) == []


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash_attn is installed here")
def test_missing_flash_attn_stops_train_sh_before_ray(tmp_path):
    """One line naming the fix, status 2, before Ray starts (no ``ray init kwargs`` printed)."""
    r = _run(
        "train.sh",
        tmp_path,
        f"hydra.run.dir={tmp_path / 'hydra'}",  # not verl/outputs/ of the checkout
        "hydra.output_subdir=null",
        DRY_RUN="0",
        WORK_DIR=str(tmp_path / "w"),
        TRAIN_FILES="/d/a.parquet",
        VAL_FILES="/d/v.parquet",
    )
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("[vsearch] error")]
    assert len(lines) == 1 and lines[0].startswith("[vsearch] error: flash_attn is not installed")
    assert "attn_implementation=sdpa" in lines[0] and "use_remove_padding=False" in lines[0]
    assert "ray init kwargs" not in r.stdout + r.stderr and SECRET not in r.stdout + r.stderr


# ----------------------------------------------------------------------------- item 8
def test_gloo_and_torch_nccl_settings_reach_every_node():
    """verl opens a ``cpu:gloo`` group next to NCCL: its interface and torch's NCCL switches are forwarded."""
    from recipe.vsearch.main import forwarded_env

    env = {"GLOO_SOCKET_IFNAME": "eth1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_SOCKET_IFNAME": "eth1"}
    assert forwarded_env({**env, "OPENAI_API_KEY": SECRET}) == env


# ----------------------------------------------------------------------------- item 9
def test_recipe_yaml_sets_no_key_that_does_nothing():
    """``rollout.multi_turn.*`` beyond ``enable`` is read only by verl's ToolAgentLoop (not run); the reference's
    ``param_offload`` is not read in the hybrid worker (FSDP2 offloads it anyway)."""
    raw = OmegaConf.load(RECIPE / "config" / "qwen_2_5_vl_7b_async.yaml")
    assert set(raw.actor_rollout_ref.rollout.multi_turn) == {"enable"}
    assert "param_offload" not in raw.actor_rollout_ref.ref.fsdp_config


# ----------------------------------------------------------------------------- item 10 (its non-GPU parts)
def test_smoke_gpu_plan_runs_train_sh_s_path_and_every_check(tmp_path):
    """``SMOKE_PLAN=1 smoke_gpu.sh`` prints what it would run, one line per check: flash-attn + remove-padding,
    2 ranks when 2 GPUs are there, checkpoint + resume, the rollout verdicts, export_hf.sh, vLLM serving it."""
    r = subprocess.run(
        ["bash", str(RECIPE / "smoke_gpu.sh"), str(tmp_path / "w")],
        env={**os.environ, "PYTHON": sys.executable, "SMOKE_PLAN": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    lines = {ln.split()[1]: ln for ln in r.stdout.splitlines()}
    assert list(lines) == ["harmony", "gpu", "flash_attn", "train", "resume", "rollout", "export", "serve", "time"]
    assert "recipe.vsearch.offline ensure" in lines["harmony"]
    assert "--ranks 2 --attn flash_attention_2" in lines["train"] and "--device cuda" in lines["train"]
    assert "export_hf.sh" in lines["export"] and "global_step_3" in lines["export"]
    assert "tests.support.smoke_serve" in lines["serve"]


def test_smoke_serve_request_is_the_longest_vsearcher_request():
    from tests.support.recipe_cpu_run import gpu_overrides
    from tests.support.smoke_serve import IMAGE_SIZES, MAX_PIXELS, request_body, server_command

    assert len(IMAGE_SIZES) == 7 and IMAGE_SIZES[0][0] * IMAGE_SIZES[0][1] >= 3_200_000 and MAX_PIXELS == 4096 * 28 * 28
    cmd = server_command("py", "/m", 8000)
    assert cmd[cmd.index("--limit-mm-per-prompt") + 1] == '{"image": 7}'
    parts = request_body("/m")["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["image_url"] * 7 + ["text"]
    assert "+actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2" in gpu_overrides()
    assert "actor_rollout_ref.model.use_remove_padding=True" in gpu_overrides()
