"""The pieces of the CPU driver run (``verl/recipe/vsearch/cpu``) one by one, in-process and fast: the
``hf_cpu`` rollout server (generation, weight sync), its registration in verl's two rollout registries,
the CPU shims, and the trainer's metric conversion. The whole run is ``tests/test_recipe_driver_cpu.py``."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from tests.conftest import require_module, require_recipe

require_recipe()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from PIL import Image  # noqa: E402
from verl.utils.model import convert_weight_keys  # noqa: E402
from verl.workers.config import RolloutConfig  # noqa: E402
from verl.workers.rollout.replica import RolloutMode  # noqa: E402

from recipe.vsearch.cpu import setup, shims  # noqa: E402
from recipe.vsearch.cpu.processor import image_only_processor  # noqa: E402
from recipe.vsearch.cpu.rollout import HFCPUReplica, HFCPURollout, HFCPUServer, weights_digest  # noqa: E402
from recipe.vsearch.trainer import plain_metrics  # noqa: E402


@pytest.fixture(scope="module")
def server(tiny_qwen_dir):
    patch = pytest.MonkeyPatch()
    shims.patch_processor(patch.setattr)  # HFModelConfig loads the processor through verl's hf_processor
    try:
        cfg = RolloutConfig(name="hf_cpu", mode="async", prompt_length=256, response_length=16)
        srv = HFCPUServer(cfg, OmegaConf.create({"path": str(tiny_qwen_dir)}), RolloutMode.HYBRID, [], 0)
    finally:
        patch.undo()
    return srv


def _prompt(server, n_images: int = 1) -> tuple[list[int], list[Image.Image]]:
    images = [Image.new("RGB", (56 + 28 * i, 84), (40 * i, 90, 160)) for i in range(n_images)]
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": "Where is the blue box?"}]
    text = server.processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
    ids = server.processor(text=[text], images=images, return_tensors="pt")["input_ids"][0].tolist()
    return ids, images


def _generate(server, ids, images, **sp):
    return asyncio.run(server.generate(ids, {"temperature": 0.0, **sp}, "req", image_data=images))


def test_greedy_generation_equals_hf_generate_with_the_images(server):
    ids, images = _prompt(server, n_images=2)
    out = _generate(server, ids, images, logprobs=True)
    vision = server.processor.image_processor(images=images, return_tensors="pt")
    ref = server.model.generate(
        input_ids=torch.tensor([ids]),
        attention_mask=torch.ones(1, len(ids), dtype=torch.long),
        pixel_values=vision["pixel_values"],
        image_grid_thw=vision["image_grid_thw"],
        max_new_tokens=server.config.prompt_length + 16 - len(ids),
        do_sample=False,
        eos_token_id=server.eos_token_ids,
        pad_token_id=server.pad_token_id,
    )
    assert out.token_ids == ref[0, len(ids) :].tolist() and out.stop_reason == "completed"
    assert len(out.log_probs) == len(out.token_ids) and all(lp <= 0 for lp in out.log_probs)
    # the default budget is verl's: prompt_length + response_length - len(prompt); a request's max_tokens wins
    assert len(_generate(server, ids, images, max_tokens=3).token_ids) <= 3
    assert _generate(server, ids, images).log_probs is None


def test_image_pads_must_match_the_images(server):
    ids, images = _prompt(server, n_images=1)
    with pytest.raises(ValueError, match="image-pad tokens"):
        _generate(server, ids, images + [Image.new("RGB", (56, 56))])
    with pytest.raises(ValueError, match="video"):
        asyncio.run(server.generate(ids, {}, "r", image_data=images, video_data=[object()]))


def test_weight_sync_takes_checkpoint_names_and_needs_every_parameter(server):
    state = {k: v.clone() for k, v in server.model.state_dict().items()}
    named = [(k, v + 0.5) for k, v in convert_weight_keys(state, server.model).items()]
    assert any(k.startswith("visual.") for k, _ in named)  # checkpoint names, not module names
    before = weights_digest(list(state.items()))
    asyncio.run(server.update_weights(named))
    for name, value in server.model.state_dict().items():
        assert torch.equal(value, state[name] + 0.5), name
    assert weights_digest(named) != before
    with pytest.raises(KeyError, match="sent no weights"):
        asyncio.run(server.update_weights(named[1:]))
    with pytest.raises(KeyError, match="do not exist"):
        asyncio.run(server.update_weights(named + [("model.no_such.weight", torch.zeros(1))]))
    asyncio.run(server.update_weights(list(state.items())))  # module names are accepted as they are


def test_hf_cpu_is_registered_in_both_verl_rollout_registries():
    from verl.workers.rollout.base import get_rollout_class
    from verl.workers.rollout.replica import get_rollout_replica_class

    setup.register_rollout()
    assert get_rollout_replica_class(setup.ROLLOUT_NAME) is HFCPUReplica
    assert get_rollout_class(setup.ROLLOUT_NAME, "async") is HFCPURollout


def test_processor_shim_gives_verl_a_working_qwen_processor(tiny_qwen_dir, monkeypatch, tmp_path):
    from verl.utils import hf_processor

    if require_module("torch").cuda.is_available():
        pytest.skip("CUDA machine")
    assert hf_processor(str(tiny_qwen_dir)) is None  # transformers needs torchvision for the video half
    shims.patch_processor(monkeypatch.setattr)
    proc = hf_processor(str(tiny_qwen_dir), use_fast=True)
    assert type(proc).__name__ == "Qwen2_5_VLProcessor" and proc.video_processor is None
    assert callable(proc.get_rope_index)  # bound by verl (mrope position ids)
    out = proc(
        text=["<|vision_start|><|image_pad|><|vision_end|>hi"], images=[Image.new("RGB", (56, 84))], return_tensors="pt"
    )
    assert (out["input_ids"] == proc.image_token_id).sum() == int(out["image_grid_thw"][0].prod()) // 4
    # verl's checkpoints save it; it reloads the same way
    proc.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text((tiny_qwen_dir / "config.json").read_text())
    assert type(hf_processor(str(tmp_path))).__name__ == "Qwen2_5_VLProcessor"
    assert image_only_processor(str(tmp_path)).image_token_id == proc.image_token_id


def test_nccl_backend_becomes_gloo(monkeypatch):
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    shims.patch_process_group(monkeypatch.setattr)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group(backend="cpu:gloo,cpu:nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        assert dist.get_backend() == "gloo"
    finally:
        dist.destroy_process_group()


def test_metrics_are_logged_as_plain_numbers():
    m = plain_metrics({"global_seqlen/min": torch.tensor(7), "num_turns/max": np.int32(3), "x": 0.5, "s": "a"})
    assert m == {"global_seqlen/min": 7, "num_turns/max": 3, "x": 0.5, "s": "a"}
    json.dumps(m)  # what verl's file logger does
