"""Fixtures of the recipe's tests: the tiny Qwen2.5-VL's tokenizer and image processor, a test image, and a
one-process gloo group for verl's actor, an odd-sized noisy image. They import verl only when used (a light install skips the modules)."""

from __future__ import annotations

import socket

import pytest
from PIL import Image

from tests.support.stacks import require_recipe


@pytest.fixture(scope="module")
def policy(tiny_qwen_dir):
    """(tokenizer, image processor) of the tiny Qwen2.5-VL; the processor is Qwen2.5-VL's without its video half:
    transformers' video processor needs torchvision, which the CPU environment must not have (verl's hf_processor
    returns None here); on GPU verl loads the full one."""
    require_recipe()
    from verl.utils import hf_tokenizer

    from recipe.vsearch.cpu.processor import image_only_processor

    tok = hf_tokenizer(str(tiny_qwen_dir))
    return tok, image_only_processor(str(tiny_qwen_dir), tok)


@pytest.fixture
def image_path(tmp_path):
    """A 640x480 PNG with a striped band (its path)."""
    img = Image.new("RGB", (640, 480), (30, 60, 90))
    for x in range(0, 640, 40):
        img.paste((200, x % 255, 40), (x, 100, x + 20, 300))
    p = tmp_path / "img.png"
    img.save(p)
    return str(p)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gloo():
    """A single-process gloo group (verl's actor calls torch.distributed), destroyed after the module."""
    require_recipe()
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def noisy_image(tmp_path):
    """An odd-sized image whose every pixel differs (a resampling or normalisation slip changes the bytes)."""
    import numpy as np

    rng = np.random.default_rng(0)
    path = tmp_path / "noisy.png"
    Image.fromarray(rng.integers(0, 256, (771, 1013, 3), dtype=np.uint8)).save(path)
    return str(path)
