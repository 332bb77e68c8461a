"""The baseline agents against goldens recorded by running the released code (tests/golden/README.md, "Baseline
goldens"; tests/golden/record_baseline_goldens.py, tests/golden/record_pixel_reasoner_goldens.py): DeepEyes's and
Pixel-Reasoner's requests byte for byte (texts; images by size and pixel hash) through the real driver and a local
HTTP server, Mini-o3's tool-call rules turn by turn."""

from __future__ import annotations

import asyncio
import base64
import functools
import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image

from insight_o3.agents import deepeyes, mini_o3, pixel_reasoner
from insight_o3.agents.tool_agents import Finish
from insight_o3.agents.tool_loop import ToolLoopSolver
from insight_o3.endpoints.client import make_client
from insight_o3.endpoints.endpoint import Endpoint
from insight_o3.imaging.images import ImageRef, ImageStore, Resize
from insight_o3.imaging.view_ops import ResizeTo
from insight_o3.protocol.attempt_stats import ToolLoopStats
from insight_o3.protocol.parsing import extract_boxed, first_boxed
from insight_o3.protocol.trajectory import part_view
from tests.golden import record_pixel_reasoner_goldens as pr_rec
from tests.golden.record_baseline_goldens import digest, make_file, make_image, mode_digest
from tests.support.openai_server import ScriptedOpenAIServer, chat

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "baselines"
DEEPEYES = json.loads((GOLDEN / "deepeyes.json").read_text())
MINI_O3 = json.loads((GOLDEN / "mini_o3.json").read_text())
DEEPEYES_FILES = json.loads((GOLDEN / "deepeyes_files.json").read_text())
MINI_O3_SCORING = json.loads((GOLDEN / "mini_o3_scoring.json").read_text())
PIXEL_REASONER = json.loads((GOLDEN / "pixel_reasoner.json").read_text())


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    """The generated image of (size, seed) by ``make`` (a recorder's generator), written once per module."""
    root, made = tmp_path_factory.mktemp("baseline_images"), {}

    def get(size, seed, make=make_image) -> Path:
        key = (tuple(size), seed, make.__module__)
        if key not in made:
            made[key] = root / f"{size[0]}x{size[1]}_{seed}_{len(made)}.png"
            make(*size, seed).save(made[key], compress_level=1)  # lossless; fast for the big noisy image
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


@pytest.mark.parametrize("n", range(len(DEEPEYES["cases"])))
def test_deepeyes_requests_match_the_release(n, image_file, store):
    case = DEEPEYES["cases"][n]
    path = image_file(case["size"], case["seed"])
    replies = list(case["replies"])
    with ScriptedOpenAIServer(lambda req, call: chat(replies.pop(0))) as srv:

        async def run():
            client = make_client(Endpoint(base_url=srv.base_url, api_key="k", max_retries=0))
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
    assert got == want  # a box past the image too: black padding, as the release's PIL crop
    assert attempt.text == case["pred_ans"]
    assert isinstance(attempt.stats, ToolLoopStats)
    assert (attempt.stats.stop_reason or "").startswith("tool call error") == (case["status"] == "error")


def _texts(msg: dict) -> str:
    return "".join(p["text"] if p["type"] == "text" else mini_o3.IMAGE_PLACEHOLDER for p in msg["content"])


def _run_deepeyes(case: dict, path: Path, images: ImageStore, options: str | None):
    replies = list(case["replies"])
    with ScriptedOpenAIServer(lambda req, call: chat(replies.pop(0))) as srv:

        async def run():
            client = make_client(Endpoint(base_url=srv.base_url, api_key="k", max_retries=0))
            try:
                solver = ToolLoopSolver(client, "deepeyes", images, deepeyes.DeepEyesSession, deepeyes.DEFAULTS)
                sample = SimpleNamespace(question=case["question"], options=options, image_path=str(path))
                return (await solver.solve(sample, 1))[0]
            finally:
                await client.close()

        return asyncio.run(run()), list(srv.requests)


@pytest.mark.parametrize("n", range(len(DEEPEYES_FILES["cases"])))
def test_deepeyes_image_files_and_edge_boxes_match_the_release(n, tmp_path):
    """Palette, RGBA and gray+alpha images cropped and resized in their own mode; a CMYK crop (PNG cannot hold it)
    ends the episode; an EXIF-rotated file sent as its bytes; a box wholly outside the image, or of zero width or
    height where smart_resize does not divide by zero, a black crop and the loop goes on; a question without options
    (the release crashes writing its row: here the row is written)."""
    case = DEEPEYES_FILES["cases"][n]
    path = tmp_path / f"f{n}.jpg"
    make_file(case["kind"], str(path))
    options = "\n".join(f"{'AB'[i]}. {o}" for i, o in enumerate(case["options"])) or None
    images = ImageStore(fmt="PNG", workers=1, alpha="keep")
    try:
        attempt, sent = _run_deepeyes(case, path, images, options)
    finally:
        images.close()
    got = []
    for req in sent:
        msgs = []
        for m in req["messages"]:
            c = m["content"]
            if isinstance(c, list):
                c = [
                    {"type": "image", **mode_digest(p["image_url"]["url"])} if p["type"] == "image_url" else p
                    for p in c
                ]
            msgs.append({"role": m["role"], "content": c})
        got.append({**{k: v for k, v in req.items() if k not in ("messages", "model", "n")}, "messages": msgs})
    want = [{k: v for k, v in r.items() if k != "model"} for r in case["requests"]]
    assert got == want
    if "crash" in case:  # the release wrote no row; this one is recorded with the episode's answer
        assert case["crash"].startswith("IndexError") and attempt.text == "A" and attempt.error is None
    else:
        assert attempt.text == case["pred_ans"] and attempt.error is None
        assert isinstance(attempt.stats, ToolLoopStats)
        assert (attempt.stats.stop_reason or "").startswith("tool call error") == (case["status"] == "error")


@pytest.mark.parametrize("n", range(len(MINI_O3_SCORING["cases"])))
def test_mini_o3_last_turn_is_scored_as_the_release_validation_scores_it(n):
    """A tool call in the last round with an <answer> in the same reply, and a turn cut at the length limit: the
    release's validation scores their <answer> span; so the episode's answer here is that span."""
    case = MINI_O3_SCORING["cases"][n]
    s = mini_o3.MiniO3Session("q", "A. x\nB. y", "/x.png", (640, 480))
    s.round = mini_o3.MAX_ROUNDS - 1  # the last round: a tool call ends the episode
    step = s.step(case["last"], case.get("finish_reason", "stop"))
    assert isinstance(step, Finish)
    scored = (step.text or "").strip()
    if case["release_acc"] == 1.0:
        assert scored.startswith(case["answer"]) or scored.startswith(f"({case['answer']})"), step
    else:
        assert scored == "", step
    if case.get("finish_reason") == "length" and scored:
        assert "scored 0" not in (step.reason or "")


@pytest.mark.parametrize("n", range(len(MINI_O3["cases"])))
def test_mini_o3_tool_rules_match_the_release(n, image_file, store):
    case = MINI_O3["cases"][n]
    path = image_file(case["size"], case["seed"])
    s = mini_o3.MiniO3Session("q", None, str(path), tuple(case["size"]))
    first = s.messages[1]["content"][0]
    assert digest(store.view(str(path), part_view(first), None)[0]) == case["first"]
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
            assert digest(store.view(str(path), Resize((ResizeTo(native),)), ref.region)[0]) == turn["observation"]
            shown = store.view(str(path), part_view(views[0]), None)[0]
            assert digest(shown) == turn["shown"]


# ---------------------------------------------------------------- Pixel-Reasoner
def test_pixel_reasoner_prompts_are_the_recorded_ones():
    assert pixel_reasoner.SYSTEM_PROMPT == PIXEL_REASONER["system_prompt"]
    assert pixel_reasoner.USER_SUFFIX == PIXEL_REASONER["user_suffix"]
    want = dict(PIXEL_REASONER["sampling"])
    extra = pixel_reasoner.COMPLETION_KWARGS["extra_body"]
    got = {k: v for k, v in pixel_reasoner.COMPLETION_KWARGS.items() if k != "extra_body"} | extra
    assert got == want


@functools.lru_cache(maxsize=64)
def _url_digest(url: str) -> dict:
    """An image URL's size and pixel hash (the same image is sent again with every request: decoded once)."""
    return digest(Image.open(io.BytesIO(base64.b64decode(url.split(",")[1]))))


def _normalize_request(req: dict) -> tuple[list[dict], list[dict]]:
    """A request as the chat template sees it (role + parts, adjacent texts joined, image markers) and its images."""
    msgs, images = [], []
    for m in req["messages"]:
        c = m["content"]
        parts: list[dict] = []
        for p in [{"type": "text", "text": c}] if isinstance(c, str) else c:
            if p["type"] == "image_url":
                parts.append({"image": True})
                images.append(_url_digest(p["image_url"]["url"]))
            elif parts and "text" in parts[-1]:
                parts[-1] = {"text": parts[-1]["text"] + p["text"]}
            else:
                parts.append({"text": p["text"]})
        msgs.append({"role": m["role"], "content": parts})
    return msgs, images


@pytest.mark.parametrize("n", range(len(PIXEL_REASONER["cases"])))
def test_pixel_reasoner_requests_match_the_release(n, image_file, store):
    case = PIXEL_REASONER["cases"][n]
    path = image_file(case["size"], case["seed"], pr_rec.make_image)
    replies = list(zip(case["replies"], case["usage"]))

    def reply(req, call):
        text, (prompt, completion) = replies.pop(0)
        return chat(text, prompt_tokens=prompt + completion - 5)  # the scripted usage adds 5 completion tokens

    with ScriptedOpenAIServer(reply) as srv:

        async def run():
            client = make_client(Endpoint(base_url=srv.base_url, api_key="k", max_retries=0))
            try:
                solver = ToolLoopSolver(
                    client, "pr", store, pixel_reasoner.PixelReasonerSession, pixel_reasoner.DEFAULTS
                )
                opts = case["options"]
                options = "\n".join(f"{'ABCDEF'[i]}. {o}" for i, o in enumerate(opts)) if opts else None
                sample = SimpleNamespace(question=case["question"], options=options, image_path=str(path))
                return (await solver.solve(sample, 1))[0]
            finally:
                await client.close()

        attempt = asyncio.run(run())
        sent = list(srv.requests)
    assert len(sent) == len(case["requests"])
    conversation: list[dict] = []
    system = {"role": "system", "content": [{"text": PIXEL_REASONER["system_prompt"]}]}
    for req, want in zip(sent, case["requests"]):
        conversation += [system if m == "SYSTEM" else m for m in want["new_messages"]]
        msgs, images = _normalize_request(req)
        assert msgs == conversation
        assert images == want["images"]
        assert {k: req[k] for k in ("temperature", "top_p", "max_tokens", "stop", "top_k", "min_tokens")} == {
            k: PIXEL_REASONER["sampling"][k]
            for k in ("temperature", "top_p", "max_tokens", "stop", "top_k", "min_tokens")
        }
    if case["scored"] is None:  # no "boxed" anywhere: the release's reward raises; ours: the last reply is judged
        assert attempt.text == case["answer"]
    else:  # the judge reads the last \boxed{} of our answer: the one the release's reward scores
        assert extract_boxed(attempt.text.lower()) == first_boxed(case["scored"])
    assert len(replies) == len(case["unanswered"])
