"""Defects of the GPU path that a static trace of verl 0.7.0 + vLLM 0.12.0 found, each with the test
that failed before its fix. No Ray here; the vLLM driver test (tests/recipe/test_driver_vllm.py) runs them all.

* validation batches bounded, validation rows without pixel values;
* offline start-up: the harmony vocab in every process, spawned ones included (recipe/vsearch/harmony_hook.py);
* one actor strategy (FSDP2) in the GPU config and the CPU run;
* limit_images checked against the vSearcher's crop limit at start-up;
* an episode that raises is a failed episode (masked, counted with the API failures); first prompts checked
  when the data is loaded;
* val.sh resuming a checkpoint of another world size: a clear error before Ray starts.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap

import pytest

from tests.support.stacks import REPO, require_recipe

require_recipe()

from omegaconf import OmegaConf  # noqa: E402

from recipe.vsearch.settings import RunSettings, SettingsError  # noqa: E402
from tests.support.recipe_loops import (  # noqa: E402
    ScriptedServerManager,
    expand_rows,
    inloop_row,
    loop_config,
    make_loop,
    searcher_script,
)

VERL_DIR = REPO / "verl"
CONFIG_DIR = VERL_DIR / "recipe" / "vsearch" / "config"


@pytest.fixture(scope="module")
def composed():
    """The recipe YAML as train.sh composes it (the parts these tests read)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(
            config_name="qwen_2_5_vl_7b_async",
            overrides=[
                "actor_rollout_ref.model.path=tiny",
                f"vsearch.agent_config_path={CONFIG_DIR / 'agent_gpt-5-mini.yaml'}",
            ],
        )
    return OmegaConf.to_container(cfg, resolve=True)


def _settings(composed, **edits):
    cfg = OmegaConf.create(composed)
    for key, value in edits.items():
        OmegaConf.update(cfg, key.replace("__", "."), value, force_add=True)
    return RunSettings.from_config(cfg)


# ----------------------------------------------------------------------------- strategy
def test_one_explicit_actor_strategy_fsdp2_in_the_gpu_config_and_the_cpu_run(composed):
    from recipe.vsearch.cpu.overrides import cpu_overrides

    assert composed["actor_rollout_ref"]["actor"]["strategy"] == "fsdp2"  # verl's default would be fsdp (FSDP1)
    assert composed["actor_rollout_ref"]["ref"]["strategy"] == "fsdp2"
    assert not [o for o in cpu_overrides(2) if "strategy" in o]  # the CPU run uses the config's
    _settings(composed)
    with pytest.raises(SettingsError, match=r"actor_rollout_ref.actor.strategy='fsdp' is not supported"):
        _settings(composed, actor_rollout_ref__actor__strategy="fsdp", actor_rollout_ref__ref__strategy="fsdp")


# ----------------------------------------------------------------------------- limit_images
def test_limit_images_is_checked_against_the_crop_limit(composed, tmp_path):
    assert composed["actor_rollout_ref"]["rollout"]["limit_images"] == 7  # whole image + 6 crops
    more = tmp_path / "agent_more_crops.yaml"
    more.write_text(
        (CONFIG_DIR / "agent_gpt-5-mini.yaml").read_text().replace("max_tool_calls: 6", "max_tool_calls: 8")
    )
    with pytest.raises(SettingsError, match=r"limit_images is 7, but a vSearcher trajectory sends up to 9 images"):
        _settings(composed, vsearch__agent_config_path=str(more))
    assert _settings(composed, vsearch__agent_config_path=str(more), actor_rollout_ref__rollout__limit_images=9)
    with pytest.raises(SettingsError, match="limit_images is None"):
        _settings(composed, actor_rollout_ref__rollout__limit_images=None)


# ----------------------------------------------------------------------------- validation memory
def test_validation_batches_are_bounded(composed):
    assert composed["data"]["val_batch_size"] == 64  # verl's default (None): the whole val set in one batch
    with pytest.raises(SettingsError, match="data.val_batch_size must be a positive int, got None"):
        _settings(composed, data__val_batch_size=None)


def test_validation_rows_carry_no_pixel_values(policy, image_path):
    """The worker post-processing of a validation row keeps the image grids (mrope positions) and nothing else; a
    training row also keeps the images' references (its pixel values are rebuilt where the model runs). The
    positions are the same either way."""
    tok = policy[0]
    server = ScriptedServerManager(tok, searcher_script)
    row = {**inloop_row(image_path), "extra_info": {"description": "the band", "bboxes": [[0, 0, 10, 10]]}}
    from recipe.vsearch.agent_loops import VSearcherAgentLoop

    async def go():
        return await make_loop(VSearcherAgentLoop, policy, server).run({"temperature": 0.0}, **row)

    out = asyncio.run(go())
    assert len(out.multi_modal_data["images"]) == 2
    import copy

    from recipe.vsearch.episodes import VALIDATE_KEY

    train = expand_rows(policy, copy.deepcopy(out), {**row, VALIDATE_KEY: False})
    val = expand_rows(policy, copy.deepcopy(out), {**row, VALIDATE_KEY: True})
    t_in, v_in = train.non_tensor_batch["multi_modal_inputs"][0], val.non_tensor_batch["multi_modal_inputs"][0]
    # a training row carries the images' references, rebuilt into pixel values by the actor and reference workers
    # (tests/recipe/test_image_inputs.py)
    from recipe.vsearch.image_inputs import VIEWS_KEY, rebuild

    assert set(t_in) == {"image_grid_thw", VIEWS_KEY}
    assert rebuild(policy[1], t_in)["pixel_values"].numel() > 0
    assert set(v_in) == {"image_grid_thw"} and (v_in["image_grid_thw"] == t_in["image_grid_thw"]).all()
    assert (val.batch["position_ids"] == train.batch["position_ids"]).all()


# ----------------------------------------------------------------------------- failed episodes
def test_an_episode_that_raises_is_masked_and_counted_like_an_api_failure(policy, tmp_path, capsys):
    """An out-of-loop row whose image is missing, and an in-loop episode whose vSearcher prompt is longer than
    rollout.prompt_length: each becomes one failed placeholder (no exception reaches verl's gather), dropped from
    training and counted in critical_failure_ratio, which drives the max_api_failure_ratio abort."""
    from types import SimpleNamespace

    from recipe.vsearch.agent_loops import VReasonerAgentLoop, VSearcherAgentLoop
    from recipe.vsearch.episodes import ROLE_KEY, finalize_batch
    from recipe.vsearch.protocols import PROTOCOLS
    from recipe.vsearch.reward_fn import compute_score
    from recipe.vsearch.trainer import ApiFailureAbort, check_api_failures
    from verl import DataProto

    tok = policy[0]
    server = ScriptedServerManager(tok, searcher_script)
    missing = str(tmp_path / "missing.png")
    out_row = {**inloop_row(missing), "uid": "u1", "extra_info": {"description": "the band", "bboxes": [[0, 0, 1, 1]]}}

    async def outloop():
        return await make_loop(VSearcherAgentLoop, policy, server).run({"temperature": 1.0}, **out_row)

    failed = asyncio.run(outloop())
    f = failed.extra_fields
    assert f[ROLE_KEY] == "placeholder" and f["critical_failure"] is True and f["episode_status"] == "error"
    assert sum(failed.response_mask) == 0 and "missing.png" in f["format_error"]
    assert "failed:" in capsys.readouterr().err

    # in-loop: the vReasoner's description makes the policy's first prompt longer than rollout.prompt_length
    # (the start-up check reserves 1024 text tokens) -> PromptTooLong inside the episode
    class Api:
        async def answer(self, *a, **k):  # the vReasoner asks once for a region, through the policy
            await self.searcher.locate(self.image, "the band " * 1500)  # a description past the text reservation

    loop = make_loop(VReasonerAgentLoop, policy, server, loop_config(prompt_length=1280))

    def reasoner(searcher, validate):
        api = Api()
        api.searcher, api.image = searcher, str(tmp_path / "img.png")
        return api

    from PIL import Image

    Image.new("RGB", (320, 240), (10, 20, 30)).save(tmp_path / "img.png")
    loop.reasoner = reasoner
    inloop = asyncio.run(loop.run({"temperature": 1.0}, **{**inloop_row(str(tmp_path / "img.png")), "uid": "u2"}))
    assert inloop.extra_fields["critical_failure"] is True and "PromptTooLong" in inloop.extra_fields["format_error"]

    batch = DataProto.concat(
        [
            expand_rows(policy, failed, out_row, loop_config(prompt_length=1024)),
            expand_rows(policy, inloop, {**inloop_row(str(tmp_path / "img.png")), "uid": "u2"}),
        ]
    )
    final, metrics = finalize_batch(batch, dp_size=2)
    assert metrics["vsearch/critical_failure_ratio"] == 1.0 and metrics["vsearch/episode_error_ratio"] == 1.0
    assert (final.batch["response_mask"] == 0).all() and set(final.non_tensor_batch[ROLE_KEY]) == {"padding"}
    # the reward loop scores every row before the trainer drops placeholders: a failed out-of-loop episode has
    # no image_size, which the original reward reads for a trajectory; a placeholder scores 0 under both variants
    for variant in ("original", "paper"):
        for i in range(len(batch)):
            info = {k: v[i] for k, v in batch.non_tensor_batch.items()}
            assert compute_score(info["data_source"], "", "", info, variant=variant)["score"] == 0.0
    for variant in ("original", "paper"):
        with pytest.raises(ApiFailureAbort):
            check_api_failures(
                metrics,
                SimpleNamespace(max_api_failure_ratio=0.5, variant=variant, protocol=PROTOCOLS[variant]),
                step=1,
            )


def test_a_model_that_emits_image_pads_fails_its_episode_not_the_step(policy, image_path):
    """The policy's answer turn carries ``<|vision_start|><|image_pad|><|vision_end|>`` of its own: the episode runs,
    but its row cannot be post-processed (mrope positions for one more image than it has). The worker turns the
    episode into the failed placeholder instead of raising out of verl's gather."""
    from recipe.vsearch.agent_loops import VSearcherAgentLoop
    from recipe.vsearch.episodes import ROLE_KEY, finalize_batch

    pads = "<|vision_start|><|image_pad|><|vision_end|>"
    server = ScriptedServerManager(policy[0], lambda n, prompt: searcher_script(n, prompt) + (pads if n > 1 else ""))
    row = {**inloop_row(image_path), "extra_info": {"description": "the band", "bboxes": [[0, 0, 10, 10]]}}

    async def go():
        return await make_loop(VSearcherAgentLoop, policy, server).run({"temperature": 1.0}, **row)

    out = asyncio.run(go())
    assert policy[0].convert_tokens_to_ids("<|image_pad|>") in out.response_ids[-8:]
    batch = expand_rows(policy, out, row)
    assert len(batch) == 1 and batch.non_tensor_batch[ROLE_KEY][0] == "placeholder"
    assert batch.non_tensor_batch["episode_status"][0] == "error" and batch.batch["response_mask"].sum() == 0
    _, metrics = finalize_batch(batch, dp_size=1)
    assert metrics["vsearch/critical_failure_ratio"] == 1.0


def test_first_prompts_are_checked_when_the_data_is_loaded(tmp_path, tiny_qwen_dir):
    from hydra import compose, initialize_config_dir
    from PIL import Image
    from verl.trainer.main_ppo import create_rl_dataset
    from verl.utils import hf_tokenizer

    from recipe.vsearch.create_parquet_dataset import main as pack

    Image.new("RGB", (200, 100), "red").save(tmp_path / "r.png")
    rows = [
        {"image": "r.png", "width": 200, "height": 100, "description": d, "bbox": [1, 1, 50, 50]}
        for d in ("ok", "word " * 3000)
    ]
    (tmp_path / "r.jsonl").write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    out = tmp_path / "r.parquet"
    assert (
        pack(
            [
                "region",
                "--ann_file",
                str(tmp_path / "r.jsonl"),
                "--img_dir",
                str(tmp_path),
                "--data_source",
                "src",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    tok = hf_tokenizer(str(tiny_qwen_dir))

    def load(*overrides):
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
            cfg = compose(
                config_name="qwen_2_5_vl_7b_async", overrides=[f"+data.cache_dir={tmp_path / 'c'}", *overrides]
            )
        return create_rl_dataset([str(out)], cfg.data, tokenizer=tok, processor=None)

    with pytest.raises(
        ValueError, match=r"1 vSearcher prompt\(s\) have more than the 1024 text tokens.*row 1 \(data_source='src'\)"
    ):
        load()
    assert len(load("data.filter_overlong_prompts=True")) == 1


# ----------------------------------------------------------------------------- resume with another world size
def _fake_checkpoint(root, step: int, world: int):
    actor = root / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    for r in range(world):
        (actor / f"model_world_size_{world}_rank_{r}.pt").write_bytes(b"")
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))


def test_resume_with_another_world_size_is_a_clear_error(tmp_path):
    from recipe.vsearch.resume import check_resume

    root = tmp_path / "ckpts"
    _fake_checkpoint(root, 150, world=8)
    cfg = lambda mode, gpus: OmegaConf.create(  # noqa: E731
        {"trainer": {"resume_mode": mode, "default_local_dir": str(root), "nnodes": 1, "n_gpus_per_node": gpus}}
    )
    assert "8 ranks" in check_resume(cfg("auto", 8))
    with pytest.raises(SettingsError, match=r"written by 8 GPU ranks .* this run has 2 .*export_hf.sh"):
        check_resume(cfg("auto", 2))
    assert "fresh start" in check_resume(cfg("disable", 2))


def test_val_sh_stops_before_ray_on_a_world_size_mismatch(tmp_path):
    work = tmp_path / "work"
    _fake_checkpoint(work / "ckpts" / "p" / "e", 150, world=8)
    env = {
        **os.environ,
        "VERL_PROJ_DIR": str(VERL_DIR),
        "MODEL_PATH": "Qwen/Qwen2.5-VL-7B-Instruct",
        "WORK_DIR": str(work),
        "PROJECT_NAME": "p",
        "EXP_NAME": "e",
        "API_MODEL_FOR_AGENT": "gpt-5-mini",
        "JUDGE_MODEL": "gpt-5-nano",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_API_KEY": "sk-x",
        "VAL_FILES": "/d/v.parquet",
        "N_GPUS_PER_NODE": "2",
        "PYTHON": sys.executable,
    }
    env.pop("DRY_RUN", None)
    r = subprocess.run(
        [
            "bash",
            str(VERL_DIR / "recipe" / "vsearch" / "val.sh"),
            "hydra.output_subdir=null",
            f"hydra.run.dir={tmp_path}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert "written by 8 GPU ranks" in r.stderr and "this run has 2" in r.stderr and "ray init" not in r.stdout


# ----------------------------------------------------------------------------- offline start-up
FAKE_HARMONY = '''
def get_encoding():
    raise RuntimeError("error downloading or loading vocab file: failed to download or load vocab file")
'''

CHILD = textwrap.dedent(
    """
    import multiprocessing as mp, sys

    def child(q):
        import vllm.entrypoints.harmony_utils as h
        q.put(repr(h.get_encoding()))

    if __name__ == "__main__":
        import vllm.entrypoints.harmony_utils as h
        print("parent", repr(h.get_encoding()))
        ctx = mp.get_context("spawn"); q = ctx.Queue(); p = ctx.Process(target=child, args=(q,)); p.start()
        print("spawned", q.get(timeout=60)); p.join()
    """
)


def test_harmony_hook_tolerates_a_missing_vocab_in_spawned_processes_too(tmp_path):
    """A stand-in ``vllm.entrypoints.harmony_utils`` whose ``get_encoding`` fails as offline: without the hook the
    import-time call verl makes raises; with the hook installed in the interpreter's site dir (.pth), the parent
    and a spawned child (what vLLM's EngineCore is) both get None."""
    from recipe.vsearch.offline import install_hook

    fake = tmp_path / "fake"
    (fake / "vllm" / "entrypoints").mkdir(parents=True)
    (fake / "vllm" / "__init__.py").write_text("")
    (fake / "vllm" / "entrypoints" / "__init__.py").write_text("")
    (fake / "vllm" / "entrypoints" / "harmony_utils.py").write_text(FAKE_HARMONY)
    site = tmp_path / "site"
    site.mkdir()
    (tmp_path / "child.py").write_text(CHILD)
    # a site dir processed at every interpreter start (like site-packages): sitecustomize adds it
    boot = tmp_path / "boot"
    boot.mkdir()
    (boot / "sitecustomize.py").write_text(f"import site; site.addsitedir({str(site)!r})\n")
    env = {**os.environ, "PYTHONPATH": f"{boot}{os.pathsep}{fake}"}

    def run():
        return subprocess.run(
            [sys.executable, str(tmp_path / "child.py")], env=env, capture_output=True, text=True, timeout=120
        )

    before = run()
    assert before.returncode != 0 and "error downloading or loading vocab file" in before.stderr
    install_hook(site)
    after = run()
    assert after.returncode == 0, after.stderr[-2000:]
    assert "parent None" in after.stdout and "spawned None" in after.stdout
    assert "openai_harmony vocab unavailable" in after.stderr


def test_startup_check_names_both_fixes_when_the_vocab_cannot_load(monkeypatch):
    from recipe.vsearch import offline

    def no_network():
        raise RuntimeError("error downloading or loading vocab file")

    monkeypatch.delitem(sys.modules, offline.HOOK_MODULE, raising=False)
    with pytest.raises(offline.OfflineStartupError, match="fetch-vocab.*TIKTOKEN_RS_CACHE_DIR.*install-harmony-hook"):
        offline.check_harmony_vocab("vllm", version="0.12.0+cpu", loader=no_network)
    assert "not needed" in offline.check_harmony_vocab("vllm", version="0.11.0", loader=no_network)
    assert "loads" in offline.check_harmony_vocab("vllm", version="0.12.0", loader=lambda: None)
    monkeypatch.setitem(sys.modules, offline.HOOK_MODULE, object())
    assert "tolerated" in offline.check_harmony_vocab("vllm", version="0.12.0", loader=no_network)


# ----------------------------------------------------------------------------- the single-GPU smoke script
def test_smoke_gpu_overrides_compose_and_pass_the_start_up_checks(tmp_path):
    """recipe/vsearch/smoke_gpu.sh has never run on a GPU here; what can be checked on CPU is checked: its
    overrides compose with the recipe YAML on top of train.sh's and pass the settings check, with sleep mode on.
    What train.sh hands the entry point is recorded, then composed, resolved and validated as its dry run does
    (``--cfg job --resolve``, then :mod:`recipe.vsearch.settings`); the dry run itself is tested in
    ``tests/recipe/test_config.py``."""
    from tests.support.recipe_cpu_run import gpu_overrides
    from tests.support.recipe_env import compose_dry_run, entry_point_recorder

    python, argv = entry_point_recorder(tmp_path)
    env = {
        **os.environ,
        "VERL_PROJ_DIR": str(VERL_DIR),
        "MODEL_PATH": "tiny",
        "WORK_DIR": str(tmp_path),
        "PROJECT_NAME": "p",
        "EXP_NAME": "e",
        "API_MODEL_FOR_AGENT": "gpt-5-mini",
        "JUDGE_MODEL": "j",
        "TRAIN_FILES": "[/d/a.parquet]",
        "VAL_FILES": "/d/v.parquet",
        "N_GPUS_PER_NODE": "1",
        "PYTHON": str(python),
        "DRY_RUN": "1",
    }
    r = subprocess.run(
        ["bash", str(VERL_DIR / "recipe" / "vsearch" / "train.sh"), *gpu_overrides()],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    args = argv.read_text().splitlines()
    assert args[-len(gpu_overrides()) :] == gpu_overrides()
    cfg = compose_dry_run(args)
    assert "effective settings (stage=train)" in RunSettings.from_config(cfg).describe()
    assert cfg.actor_rollout_ref.rollout.name == "vllm" and cfg.actor_rollout_ref.actor.strategy == "fsdp2"
    assert cfg.actor_rollout_ref.rollout.free_cache_engine is True  # sleep/wake around every update
    assert "enable_sleep_mode" not in cfg.actor_rollout_ref.rollout or cfg.actor_rollout_ref.rollout.enable_sleep_mode
    assert cfg.ray_kwargs.ray_init.runtime_env.worker_process_setup_hook.endswith("rollout_checks.setup_worker")


def test_smoke_gpu_refuses_to_run_without_a_gpu(tmp_path):
    r = subprocess.run(
        ["bash", str(VERL_DIR / "recipe" / "vsearch" / "smoke_gpu.sh"), str(tmp_path / "w")],
        env={**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and "no CUDA GPU visible" in r.stderr
