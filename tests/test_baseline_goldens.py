"""The baseline agents against goldens recorded by running the released code (tests/golden/README.md, "Baseline
goldens"; tests/golden/record_baseline_goldens.py): DeepEyes's requests byte for byte (texts; images by size and
pixel hash) through the real driver and a local HTTP server, Mini-o3's tool-call rules turn by turn."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from openai import AsyncOpenAI
from PIL import Image

from insight_o3.agents import deepeyes, mini_o3
from insight_o3.agents.tool_loop import ToolLoopSolver
from insight_o3.imaging.images import ImageRef, ImageStore, Resize
from tests.golden.record_baseline_goldens import digest, make_image
from tests.support.openai_server import ScriptedOpenAIServer, chat

GOLDEN = Path(__file__).resolve().parent / "golden" / "baselines"
DEEPEYES = json.loads((GOLDEN / "deepeyes.json").read_text())
MINI_O3 = json.loads((GOLDEN / "mini_o3.json").read_text())


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    """The generated image of (size, seed), written once per module."""
    root, made = tmp_path_factory.mktemp("baseline_images"), {}

    def get(size, seed) -> Path:
        key = (tuple(size), seed)
        if key not in made:
            made[key] = root / f"{size[0]}x{size[1]}_{seed}.png"
            make_image(*size, seed).save(made[key])
        return made[key]

    return get


@pytest.fixture(scope="module")
def store():
    """One PNG image store for the module (each view rendered once)."""
    images = ImageStore(fmt="PNG", workers=1)
    yield images
    images.close()


def _reduce(req: dict) -> dict:
    msgs = []
    for m in req["messages"]:
        c = m["content"]
        if isinstance(c, list):
            c = [
                {
                    "type": "image",
                    **digest(Image.open(io.BytesIO(base64.b64decode(p["image_url"]["url"].split(",")[1])))),
                }
                if p["type"] == "image_url"
                else p
                for p in c
            ]
        msgs.append({"role": m["role"], "content": c})
    return {**{k: v for k, v in req.items() if k not in ("messages", "model", "n")}, "messages": msgs}


def _strip_crops(req: dict) -> dict:
    """A request with the crops' pixel hashes left out (a box past the image: the release pads with black)."""
    out = json.loads(json.dumps(req))
    for m in out["messages"][2:]:
        for p in m["content"] if isinstance(m["content"], list) else []:
            p.pop("sha256", None)
    return out


@pytest.mark.parametrize("n", range(len(DEEPEYES["cases"])))
def test_deepeyes_requests_match_the_release(n, image_file, store):
    case = DEEPEYES["cases"][n]
    path = image_file(case["size"], case["seed"])
    replies = list(case["replies"])
    with ScriptedOpenAIServer(lambda req, call: chat(replies.pop(0))) as srv:

        async def run():
            client = AsyncOpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
            try:
                solver = ToolLoopSolver(client, "deepeyes", store, deepeyes.DeepEyesSession, deepeyes.DEFAULTS)
                options = "\n".join(f"{'ABCDEF'[i]}. {o}" for i, o in enumerate(case["options"]))
                sample = SimpleNamespace(question=case["question"], options=options, image_path=str(path))
                return (await solver.solve(sample, 1))[0]
            finally:
                await client.close()

        attempt = asyncio.run(run())
        got = [_reduce(r) for r in srv.requests]
    want = [{k: v for k, v in r.items() if k != "model"} for r in case["requests"]]
    assert all(r["model"] == "deepeyes" for r in case["requests"])
    if case["out_of_range"]:
        got, want = [_strip_crops(r) for r in got], [_strip_crops(r) for r in want]
    assert got == want
    assert attempt.text == case["pred_ans"]
    assert (attempt.stats.get("stop_reason", "").startswith("tool call error")) == (case["status"] == "error")


def _texts(msg: dict) -> str:
    return "".join(p["text"] if p["type"] == "text" else mini_o3.IMAGE_PLACEHOLDER for p in msg["content"])


@pytest.mark.parametrize("n", range(len(MINI_O3["cases"])))
def test_mini_o3_tool_rules_match_the_release(n, image_file, store):
    case = MINI_O3["cases"][n]
    path = image_file(case["size"], case["seed"])
    s = mini_o3.MiniO3Session("q", None, str(path), tuple(case["size"]))
    first = ImageRef.from_dict(s.messages[1]["content"][0]["image"])
    assert digest(store.view(str(path), Resize(size=first.size), None)[0]) == case["first"]
    wrap = ("<|im_end|>\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")
    for reply, turn in zip(case["replies"], case["turns"]):
        step = s.step(reply, "stop")
        assert isinstance(step, mini_o3.Ask)
        assert wrap[0] + _texts(s.messages[-1]) + wrap[1] == turn["text"]
        views = [p for p in s.messages[-1]["content"] if p["type"] == "image"]
        assert bool(views) == ("observation" in turn)
        if views:
            ref = ImageRef.from_dict(views[0]["image"])
            native = (int(ref.region[2] - ref.region[0]), int(ref.region[3] - ref.region[1]))
            assert digest(store.view(str(path), Resize(size=native), ref.region)[0]) == turn["observation"]
            chain = tuple(tuple(st) for st in views[0].get("steps", ()))
            shown = store.view(str(path), Resize(size=ref.size, nearest=True, chain=chain), ref.region)[0]
            assert digest(shown) == turn["shown"]
