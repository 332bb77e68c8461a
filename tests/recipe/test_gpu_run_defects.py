"""Start-up and result defects of the GPU path that a source trace found (no GPU ran), each checked without a GPU:
the NCCL timeouts at checkpoint time, settings that must reach every node, the served evaluation's decoding, the
smoke test's offline start and its budget, the padded (no flash-attn) path's memory. The dead-engine abort message
is tested in ``tests/recipe/test_trainer.py``, the served decoding with a real vLLM in
``tests/test_vllm_launcher.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.stacks import REPO, require_recipe

require_recipe()

from omegaconf import OmegaConf  # noqa: E402

from recipe.vsearch.node_checks import SDPA_OVERRIDES  # noqa: E402
from tests.support.recipe_env import run_at_once, script_env  # noqa: E402
from tests.support.recipe_loops import (  # noqa: E402
    CROPS,
    actor_config,
    expand_rows,
    loop_config,
    region_row,
    scripted_rollout,
)

VERL_DIR = REPO / "verl"
RECIPE = VERL_DIR / "recipe" / "vsearch"


#: the module's dry runs of train.sh (each composes and validates the config in two Python starts that import verl:
#: ~10 s of one core), started together by :func:`dry_runs`: name -> (arguments, extra environment). ``explicit``
#: carries two independent things, each asserted by its own test: the padded-path switch and an exported NCCL timeout.
DRY_RUNS = {
    "default": ((), {}),
    "explicit": (SDPA_OVERRIDES, {"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "7200"}),
}


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Every :data:`DRY_RUNS` entry, run at once: name -> its ``CompletedProcess``."""
    tmp = tmp_path_factory.mktemp("dry")
    commands = {
        name: (["bash", str(RECIPE / "train.sh"), *args], script_env(tmp / name, **extra), REPO)
        for name, (args, extra) in DRY_RUNS.items()
    }
    return run_at_once(commands, tmp, timeout=180)


# ----------------------------------------------------------------------------- NCCL timeouts
def test_nccl_timeouts_are_the_forks_hour(dry_runs, tmp_path):
    """A rank writing its ~12 GB shard of a 7B checkpoint, then verl's barrier: verl's 600 s process-group timeout
    (and torch's heartbeat) would kill a save on a slow shared file system; the fork set both to 3600 s
    (``_base.sh:112,141``). The composed config carries it, the variable reaches the workers, and an explicit value
    wins for both."""
    from recipe.vsearch.main import forwarded_env

    r = dry_runs["default"]
    assert r.returncode == 0, r.stderr[-3000:]
    assert OmegaConf.create(r.stdout).actor_rollout_ref.nccl_timeout == 3600
    r = dry_runs["explicit"]
    assert r.returncode == 0 and OmegaConf.create(r.stdout).actor_rollout_ref.nccl_timeout == 7200
    # refused by _base.sh before any Python starts
    r = subprocess.run(
        ["bash", str(RECIPE / "train.sh")],
        cwd=REPO,
        env=script_env(tmp_path, TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC="1h"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC must be whole seconds" in r.stderr
    # _base.sh exports the heartbeat for the driver, whose env main.py forwards to every Ray worker
    env = {k: v for k, v in script_env(tmp_path).items() if k != "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"}
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


# ----------------------------------------------------------------------------- smoke_gpu.sh: offline start, budget
#: the compile caches smoke_gpu.sh shares (an exported value wins; the test environment may set one)
CACHE_ENV = ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def _smoke(tmp_path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(RECIPE / "smoke_gpu.sh"), str(tmp_path / "w")],
        env={**{k: v for k, v in os.environ.items() if k not in CACHE_ENV}, "PYTHON": sys.executable, **env},
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_smoke_gpu_first_makes_the_venv_start_offline(tmp_path):
    """The smoke test promises "no internet needed", but ``pip install -e .[train]`` leaves a venv whose verl vLLM
    server import downloads openai_harmony's vocab: ``train`` stopped at the start-up check on an offline node. Its
    first line now makes the venv start offline (the hook, unless a vocab is staged) and checks it in a new
    interpreter; here (no GPU) that line passes and the GPU line fails after it."""
    r = _smoke(tmp_path, CUDA_VISIBLE_DEVICES="")
    lines = r.stdout.splitlines()
    assert r.returncode == 1 and lines[0].split()[:2] == ["PASS", "harmony"], r.stdout + r.stderr
    assert lines[1].split()[:2] == ["FAIL", "gpu"]
    summary = json.loads((tmp_path / "w" / "smoke_summary.json").read_text())
    assert summary["ok"] is False and [c["check"] for c in summary["checks"]][:2] == ["harmony", "gpu"]
    assert summary["checks"][0]["status"] == "PASS"


def test_ensure_harmony_installs_the_hook_only_when_nothing_else_works(tmp_path, monkeypatch):
    from recipe.vsearch import offline

    def no_network() -> None:
        raise RuntimeError("error downloading or loading vocab file")

    monkeypatch.setattr(offline, "hook_installed", lambda: False)
    for name in offline.VOCAB_ENV:
        monkeypatch.delenv(name, raising=False)
    assert "not needed" in offline.ensure_harmony("vllm", version="0.11.0", loader=no_network, site=tmp_path)
    assert (
        offline.ensure_harmony("vllm", version="0.12.0", loader=lambda: None, site=tmp_path) == "harmony vocab: loads"
    )
    assert not list(tmp_path.iterdir())
    status = offline.ensure_harmony("vllm", version="0.12.0", loader=no_network, site=tmp_path)
    assert "installed the start-up hook" in status
    assert (tmp_path / f"{offline.HOOK_MODULE}.pth").read_text() == f"import {offline.HOOK_MODULE}\n"
    # a staged vocab that does not load is the thing to fix: no hook papers over it
    monkeypatch.setenv("TIKTOKEN_RS_CACHE_DIR", str(tmp_path / "staged"))
    with pytest.raises(offline.OfflineStartupError, match="staged"):
        offline.ensure_harmony("vllm", version="0.12.0", loader=no_network, site=tmp_path / "other")


def test_the_training_venv_passes_the_smoke_tests_offline_line(train_venv_python, tmp_path):
    """The real thing: the CPU training venv (verl 0.7.0 + vLLM 0.12.0, no vocab reachable from here) passes the
    line's two commands."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{VERL_DIR}"}
    for cmd in ("ensure", "check"):
        r = subprocess.run(
            [str(train_venv_python), "-m", "recipe.vsearch.offline", cmd],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0 and "harmony vocab" in r.stdout, r.stderr


def test_smoke_gpu_reports_time_without_failing_and_shares_one_compile_cache(tmp_path):
    """A cold node spends minutes in vLLM's compile and graph capture for each of three engine starts; the smoke
    test's 600 s budget then failed a run whose functional lines all passed. Now the time line is information only
    (status 0 over budget), and every command the script runs sees one vLLM / Inductor / Triton cache."""
    r = _smoke(tmp_path, SMOKE_PLAN="1", SMOKE_BUDGET_S="0")
    assert r.returncode == 0, r.stdout + r.stderr
    time_line = r.stdout.splitlines()[-1].split()
    assert time_line[:2] == ["INFO", "time"] and "budget" in r.stdout.splitlines()[-1]
    # the environment the script's commands get (a PYTHON that records it, then runs the real interpreter)
    seen = tmp_path / "env.json"
    shim = tmp_path / "python"
    shim.write_text(
        "#!/bin/sh\n"
        f"{sys.executable} -c 'import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], \"w\"))' {seen}\n"
        f'exec {sys.executable} "$@"\n'
    )
    shim.chmod(0o755)
    r = _smoke(tmp_path, PYTHON=str(shim), SMOKE_CACHE=str(tmp_path / "cache"), CUDA_VISIBLE_DEVICES="")
    env = json.loads(seen.read_text())
    cache = tmp_path / "cache"
    assert env["VLLM_CACHE_ROOT"] == str(cache / "vllm") and env["TORCHINDUCTOR_CACHE_DIR"] == str(cache / "inductor")
    assert env["TRITON_CACHE_DIR"] == str(cache / "triton")
    from recipe.vsearch.main import forwarded_env

    assert "VLLM_CACHE_ROOT" in forwarded_env(env)  # Ray workers (vLLM's engines) on every node get it too


# ----------------------------------------------------------------------------- the padded path (no flash-attn)
def test_sdpa_switch_runs_log_prob_passes_one_row_and_start_up_says_so(dry_runs):
    """Without flash-attn the documented switch ran verl's padded path with the reference's dynamic micro-batches of
    28,672 real tokens: 3-5 rows padded to 17,408 each. The switch now runs the log-prob passes one row per
    micro-batch, the settings refuse the padded path without that, and the start-up table says what a micro-batch
    costs."""
    from hydra import compose, initialize_config_dir

    from recipe.vsearch.settings import RunSettings, SettingsError

    r = dry_runs["explicit"]  # train.sh with SDPA_OVERRIDES
    assert r.returncode == 0, r.stderr[-3000:]
    cfg = OmegaConf.create(r.stdout)
    for role in ("ref", "rollout"):
        assert cfg.actor_rollout_ref[role].log_prob_use_dynamic_bsz is False
        assert cfg.actor_rollout_ref[role].log_prob_micro_batch_size_per_gpu == 1
    line = next(ln for ln in r.stderr.splitlines() if ln.strip().startswith("attention"))
    assert "padded path (sdpa" in line and "one row (<= 17408 positions, <= 5.3 GB of bf16 logits)" in line
    assert "update micro-batches of <= 17408 real tokens" in line
    # the attention switch alone (the old documented command) is refused, naming the fix: the settings check a dry
    # run makes (a failed check's status 2: tests/recipe/test_config.py::test_bad_settings_fail_the_dry_run_with_the_key)
    agent = f"vsearch.agent_config_path={RECIPE / 'config' / 'agent_gpt-5-mini.yaml'}"
    with initialize_config_dir(config_dir=str(RECIPE / "config"), version_base=None):
        old = compose(config_name="qwen_2_5_vl_7b_async", overrides=[agent, *SDPA_OVERRIDES[:2]])
    with pytest.raises(SettingsError) as refused:
        RunSettings.from_config(old)
    assert "log_prob_use_dynamic_bsz=True with actor_rollout_ref.model.use_remove_padding" in str(refused.value)
    assert "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1" in str(refused.value)
    r = dry_runs["default"]
    line = next(ln for ln in r.stderr.splitlines() if ln.strip().startswith("attention"))
    assert "remove-padding (flash-attn varlen)" in line


def _d1_rank_batch(rows: int = 48, seed: int = 0):
    """One rank's share of a D.1 step on the padded path: ``rows`` rows padded to 8,192 + 9,216 tokens, real prompts
    of 1.3-5.2K tokens (the whole image at <= 4,096 tokens + text), real responses of 0.3-9.2K (turns, crops)."""
    import numpy as np
    import torch
    from tensordict import TensorDict

    rng = np.random.default_rng(seed)
    prompt_w, response_w = 8192, 9216
    lengths = [(int(rng.integers(1300, 5200)), int(rng.integers(300, response_w))) for _ in range(rows)]
    mask = torch.zeros(rows, prompt_w + response_w, dtype=torch.long)
    for i, (p, r) in enumerate(lengths):
        mask[i, prompt_w - p : prompt_w + r] = 1
    batch = TensorDict({"attention_mask": mask, "input_ids": mask.clone()}, batch_size=[rows])
    return batch, lengths, prompt_w + response_w


def test_padded_path_memory_arithmetic_on_verls_own_micro_batches():
    """verl's own dynamic split (``rearrange_micro_batches``, workload-balanced) of a D.1-shaped rank batch: before,
    the reference's micro-batches of 28,672 real tokens computed k x 17,408 positions each (the trace's 15-27 GB of
    bf16 logits); after, one trimmed row (<= 17,408 positions, <= 5.3 GB). The update's micro-batches (the fork's
    token-mean loss groups them, so they stay) shrink from k x 17,408 to k x their longest row."""
    from verl.utils.seqlen_balancing import rearrange_micro_batches

    from recipe.vsearch.padding import logits_gb, padded_positions

    batch, lengths, width = _d1_rank_batch()

    def worst(cap: int, trimmed: bool) -> float:
        _, parts = rearrange_micro_batches(batch, max_token_len=cap)
        return max(
            logits_gb(padded_positions([lengths[i] for i in part], None if trimmed else width)) for part in parts
        )

    ref_before = worst(28672, trimmed=False)
    ref_after = max(logits_gb(padded_positions([row])) for row in lengths)  # one trimmed row per micro-batch
    update_before, update_after = worst(17408, trimmed=False), worst(17408, trimmed=True)
    print(
        f"\nbf16 logits of the largest micro-batch: ref {ref_before:.1f} -> {ref_after:.1f} GB, "
        f"update {update_before:.1f} -> {update_after:.1f} GB"
    )
    assert 15 <= ref_before <= 30 and ref_after <= logits_gb(width) < 5.3
    # what only a GPU can tell: whether the update's largest micro-batch (its logits, their gradient) fits on 80 GB
    assert update_after < 0.75 * update_before


def test_trimmed_micro_batches_give_the_same_log_probs(policy, noisy_image, tiny_qwen_dir, gloo):  # noqa: F811
    """The tiny Qwen2.5-VL through verl's ``DataParallelPPOActor`` on the padded path (eager attention, rows padded
    to 1,024 + 2,048 tokens): with :func:`trim_padding_in` the model sees micro-batches only as wide as their rows
    need, and the response log-probs (and entropies) are those of the untrimmed forward (fp32; in bf16 the two
    shapes round differently by a few ulps, as any two kernels); the cut columns come back as 0 (masked)."""
    import copy

    import numpy as np
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    from recipe.vsearch.image_inputs import rebuild_pixels_in
    from recipe.vsearch.padding import trim_padding_in
    from verl import DataProto

    _, proc = policy
    outs = [scripted_rollout(policy, noisy_image), scripted_rollout(policy, noisy_image, CROPS[1:2])]
    cfg = loop_config(prompt_length=1024, response_length=2048)
    rows = DataProto.concat([expand_rows(policy, o, region_row(noisy_image), cfg) for o in outs])
    rows.meta_info.update({"temperature": 1.0, "micro_batch_size": 2, "use_dynamic_bsz": False})
    width = rows.batch["input_ids"].shape[-1]
    real = rows.batch["attention_mask"].sum(-1)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(tiny_qwen_dir), torch_dtype=torch.float32).eval()
    seen: list[int] = []
    model.register_forward_pre_hook(lambda m, a, kw: seen.append(kw["input_ids"].shape[-1]), with_kwargs=True)
    actor = DataParallelPPOActor(actor_config(), model)
    actor.param_dtype = torch.float32  # compare in fp32: in bf16 the two shapes round differently (a few bf16 ulps)
    rebuild_pixels_in(actor, proc)
    with torch.no_grad():
        want_ent, want = actor.compute_log_prob(copy.deepcopy(rows), calculate_entropy=True)
        trim_padding_in(actor)
        got_ent, got = actor.compute_log_prob(copy.deepcopy(rows), calculate_entropy=True)
    assert seen[0] == width == 1024 + 2048 and seen[1] < width and seen[1] <= int(real.max()) + 1024
    mask = rows.batch["attention_mask"][:, 1024:].bool()
    print(
        f"\nmax |diff| log-prob {(got - want)[mask].abs().max():.2e}, entropy {(got_ent - want_ent)[mask].abs().max():.2e}"
    )
    assert torch.allclose(got[mask], want[mask], atol=1e-5, rtol=0)
    assert torch.allclose(got_ent[mask], want_ent[mask], atol=1e-4, rtol=0)
    kept = int(mask.any(0).nonzero().max()) + 1  # response columns some row holds; the rest were cut and padded back
    assert kept < mask.shape[-1] and (got[:, kept:] == 0).all() and np.isfinite(got.numpy()).all()
