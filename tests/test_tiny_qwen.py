"""The tiny random-weight Qwen2.5-VL the test-suite builds: reproducible bytes, loads and runs with
transformers (no torchvision), and has the config vLLM needs."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from tests.support.stacks import REPO, require_module


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_build_is_byte_reproducible(tiny_qwen_dir, tmp_path):
    from tests.support.tiny_qwen import build_tiny_qwen

    again = build_tiny_qwen(tmp_path / "again")
    files = sorted(p.name for p in tiny_qwen_dir.iterdir())
    assert files == sorted(p.name for p in again.iterdir())
    for name in ("tokenizer.json", "model.safetensors", "config.json", "preprocessor_config.json"):
        assert _sha(tiny_qwen_dir / name) == _sha(again / name), name
    # a different seed gives different weights but the same tokenizer
    other = build_tiny_qwen(tmp_path / "seed1", seed=1)
    assert _sha(other / "model.safetensors") != _sha(tiny_qwen_dir / "model.safetensors")
    assert _sha(other / "tokenizer.json") == _sha(tiny_qwen_dir / "tokenizer.json")


def test_build_does_not_depend_on_the_interpreter_stdlib():
    """The corpus is shipped with the repository, so nothing of the running Python feeds the tokenizer."""
    from tests.support import tiny_qwen

    assert tiny_qwen.CORPUS.is_file() and tiny_qwen.CORPUS.stat().st_size > 200_000
    assert str(tiny_qwen.CORPUS).startswith(str(REPO / "tests" / "support"))


def test_config_has_top_level_architecture_and_budget(tiny_qwen_dir):
    cfg = json.loads((tiny_qwen_dir / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen2_5_VLForConditionalGeneration"]
    pre = json.loads((tiny_qwen_dir / "preprocessor_config.json").read_text())
    assert pre["image_processor_type"] == "Qwen2VLImageProcessor"
    assert pre["max_pixels"] >= 200704 and pre["min_pixels"] == 3136
    assert pre["size"] == {"shortest_edge": pre["min_pixels"], "longest_edge": pre["max_pixels"]}


def test_loads_and_generates_with_transformers(tiny_qwen_dir):
    torch = require_module("torch")
    from PIL import Image
    from transformers import AutoImageProcessor, AutoTokenizer, Qwen2_5_VLForConditionalGeneration

    tok = AutoTokenizer.from_pretrained(tiny_qwen_dir)
    improc = AutoImageProcessor.from_pretrained(tiny_qwen_dir, use_fast=False)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(tiny_qwen_dir).eval()
    assert type(improc).__name__ == "Qwen2VLImageProcessor"
    assert model.config.vocab_size >= len(tok)

    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Locate the red car."}]}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text.count("<|vision_start|><|image_pad|><|vision_end|>") == 1
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")

    # a 448x280 image is already on the 28-px grid and under the budget: 16x10 merged tokens
    pix = improc(images=[Image.new("RGB", (448, 280), (200, 30, 30))], return_tensors="pt")
    assert pix["image_grid_thw"].tolist() == [[1, 20, 32]]
    n_image_tokens = int(pix["image_grid_thw"].prod()) // 4
    assert n_image_tokens == (448 // 28) * (280 // 28)
    enc = tok(text.replace("<|image_pad|>", "<|image_pad|>" * n_image_tokens), return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **enc,
            pixel_values=pix["pixel_values"],
            image_grid_thw=pix["image_grid_thw"],
            max_new_tokens=8,
            do_sample=False,
        )
    assert out.shape[1] > enc["input_ids"].shape[1]

    # the vSearcher's tool-call markers are single, non-special tokens (kept when decoding)
    ids = tok("<tool_call>x</tool_call>")["input_ids"]
    assert ids[0] == tok.convert_tokens_to_ids("<tool_call>") and ids[-1] == tok.convert_tokens_to_ids("</tool_call>")
    assert tok.decode(ids, skip_special_tokens=True) == "<tool_call>x</tool_call>"


def test_cli_wrapper(tmp_path):
    require_module("torch")
    out = tmp_path / "cli"
    r = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_tiny_qwen2_5_vl.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    info = json.loads(r.stdout)
    assert info["path"] == str(out) and (out / "model.safetensors").is_file()
    assert info["params"] > 100_000


def test_package_import_is_torch_free():
    code = (
        "import sys, insight_o3, tests.support.tiny_qwen, tests.support.vllm_server; "
        "bad = [m for m in ('torch', 'transformers', 'vllm') if m in sys.modules]; "
        "assert not bad, bad"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("name", ["<|image_pad|>", "<|im_end|>", "<|vision_start|>"])
def test_special_token_ids_match_config(tiny_qwen_dir, name):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_qwen_dir)
    cfg = json.loads((tiny_qwen_dir / "config.json").read_text())
    key = {
        "<|image_pad|>": "image_token_id",
        "<|im_end|>": "eos_token_id",
        "<|vision_start|>": "vision_start_token_id",
    }[name]
    value = cfg.get(key, cfg.get("text_config", {}).get(key))
    assert tok.convert_tokens_to_ids(name) == value
