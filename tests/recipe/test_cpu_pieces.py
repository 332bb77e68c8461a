"""The pieces of the CPU driver run one by one, in-process and fast: the CPU shims (``verl/recipe/vsearch/cpu``),
the rollout observers' weight comparison (``recipe.vsearch.rollout_checks``) and the trainer's metric
conversion. The whole run is ``tests/recipe/test_driver_vllm.py``."""

from __future__ import annotations

import json
import socket

import pytest

from tests.support.stacks import require_module, require_recipe

require_recipe()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from recipe.vsearch.cpu import shims  # noqa: E402
from recipe.vsearch.cpu.processor import image_only_processor  # noqa: E402
from recipe.vsearch.trainer import plain_metrics  # noqa: E402


class _FakeVllmQwen(torch.nn.Module):
    """Parameter layout of vLLM 0.12's Qwen2.5-VL (fused qkv_proj / gate_up_proj, language_model.* prefix)."""

    packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}

    def __init__(self):
        super().__init__()
        p = lambda *shape: torch.nn.Parameter(torch.zeros(*shape, dtype=torch.bfloat16))  # noqa: E731
        self.params = {
            "language_model.model.embed_tokens.weight": p(8, 4),  # vocabulary padded from 6 rows
            "language_model.model.layers.0.self_attn.qkv_proj.weight": p(8, 4),
            "language_model.model.layers.0.mlp.gate_up_proj.weight": p(6, 4),
            "visual.blocks.0.attn.qkv.weight": p(12, 4),
        }
        for i, param in enumerate(self.params.values()):
            self.register_parameter(f"p{i}", param)
        from types import SimpleNamespace

        self.hf_to_vllm_mapper = SimpleNamespace(
            _map_name=lambda n: n.replace("model.", "language_model.model.", 1) if n.startswith("model.") else n
        )

    def named_parameters(self, *a, **k):
        return iter(self.params.items())


def test_rollout_checks_compare_every_vllm_parameter_with_the_actors_tensors():
    """recipe.vsearch.rollout_checks: vLLM's fused parameters are rebuilt from the actor's q/k/v and gate/up;
    equal within bf16 rounding passes, one wrong value or a parameter no actor tensor covers fails."""
    from recipe.vsearch.rollout_checks import compare_weights

    g = torch.Generator().manual_seed(0)
    actor = {
        "model.embed_tokens.weight": torch.randn(6, 4, generator=g),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(4, 4, generator=g),
        "model.layers.0.self_attn.k_proj.weight": torch.randn(2, 4, generator=g),
        "model.layers.0.self_attn.v_proj.weight": torch.randn(2, 4, generator=g),
        "model.layers.0.mlp.gate_proj.weight": torch.randn(3, 4, generator=g),
        "model.layers.0.mlp.up_proj.weight": torch.randn(3, 4, generator=g),
        "visual.blocks.0.attn.qkv.weight": torch.randn(12, 4, generator=g),
    }
    model = _FakeVllmQwen()
    with torch.no_grad():  # what vLLM's load_weights does, in bf16
        model.params["language_model.model.embed_tokens.weight"][:6] = actor["model.embed_tokens.weight"]
        model.params["language_model.model.layers.0.self_attn.qkv_proj.weight"].copy_(
            torch.cat([actor[f"model.layers.0.self_attn.{x}_proj.weight"] for x in "qkv"])
        )
        model.params["language_model.model.layers.0.mlp.gate_up_proj.weight"].copy_(
            torch.cat([actor["model.layers.0.mlp.gate_proj.weight"], actor["model.layers.0.mlp.up_proj.weight"]])
        )
        model.params["visual.blocks.0.attn.qkv.weight"].copy_(actor["visual.blocks.0.attn.qkv.weight"])
    report = compare_weights(model, list(actor.items()), "bfloat16")
    assert report["ok"] and report["n_checked"] == report["n_params"] == 4, report
    assert 0 < report["max_abs_diff"] <= 2**-8 * max(t.abs().max().item() for t in actor.values())
    with torch.no_grad():
        model.params["language_model.model.layers.0.mlp.gate_up_proj.weight"][4, 0] += 0.5  # an up_proj value
    bad = compare_weights(model, list(actor.items()), "bfloat16")
    assert not bad["ok"] and "gate_up_proj" in bad["mismatched"][0]
    missing = compare_weights(model, [(k, v) for k, v in actor.items() if "visual" not in k], "bfloat16")
    assert not missing["ok"] and missing["unchecked"] == ["visual.blocks.0.attn.qkv.weight"]


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
