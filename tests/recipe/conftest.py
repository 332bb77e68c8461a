"""Fixtures of the recipe's tests: a test image and a one-process gloo group for verl's actor. They import verl only
when used (a light install skips the modules). The tiny policy and the noisy image, shared with tests/gpu, are in
the root conftest."""

from __future__ import annotations

import socket

import pytest
from PIL import Image

from tests.support.stacks import require_recipe


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
