"""The authors' verl fork (926d137) rules that are not the searcher's protocol: the vReasoner question
(``questions``), RGBA images on the InSight-o3 path (``images.to_rgb``), the vReasoner and vSearcher token caps."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from PIL import Image

from insight_o3.imaging.images import ImageStore, open_image, to_rgb
from insight_o3.protocol.limits import LIMITS
from insight_o3.protocol.questions import insight_o3_question, question_text, vreasoner_question

REPO = Path(__file__).resolve().parents[2]


def fork_get_question(example: dict) -> str:
    """``O3Bench.get_question`` of the fork's recipe/vsearch/create_parquet_dataset.py:97-100, verbatim."""
    question = f"{example['question']}\n{example['options']}"
    question = question.replace("\\n", "\n")
    return question


@pytest.mark.parametrize(
    "question, options",
    [
        ("Which?", "A. x\\nB. y"),
        ("Which\\nnow?", "A. x\\nB. y\\nC. \\\\n"),
        ("Q", "(A) one\n(B) two"),
        ("Q\\n", "A. a\\n\\nB. b"),
    ],
)
def test_vreasoner_question_is_the_forks_get_question(question, options):
    assert vreasoner_question(question, options) == fork_get_question({"question": question, "options": options})
    # the single-model text keeps the annotation's bytes
    assert question_text(question, options) == f"{question}\n{options}"


def test_open_questions_are_unchanged():
    # the fork's VisualProbeHard / collage get_question return the question as it is (lines 194-195, 231-232)
    assert vreasoner_question("Why\\n?", None) == "Why\\n?" == question_text("Why\\n?", "")

    class S:
        question, options = "Which\\nnow?", "A. x\\nB. y"

    assert insight_o3_question(S()) == "Which\nnow?\nA. x\nB. y"


def _rgba(tmp_path) -> Path:
    im = Image.new("RGBA", (8, 4), (10, 20, 30, 255))
    im.putpixel((0, 0), (200, 100, 50, 0))  # fully transparent: white under to_rgb, (200,100,50) when dropped
    im.putpixel((1, 0), (0, 0, 0, 128))  # half transparent black: mid grey on white
    p = tmp_path / "a.png"
    im.save(p)
    return p


def test_to_rgb_composites_rgba_on_white_as_qwen_vl_utils(tmp_path):
    p = _rgba(tmp_path)
    white, drop = open_image(p, alpha="white"), open_image(p, alpha="drop")
    assert white.mode == drop.mode == "RGB"
    assert white.getpixel((0, 0)) == (255, 255, 255) and drop.getpixel((0, 0)) == (200, 100, 50)
    assert white.getpixel((1, 0)) == (127, 127, 127) and drop.getpixel((1, 0)) == (0, 0, 0)
    assert white.getpixel((2, 0)) == drop.getpixel((2, 0)) == (10, 20, 30)
    # other modes convert as PIL does (qwen_vl_utils' to_rgb composites only RGBA)
    la = Image.new("LA", (2, 2), (100, 0))
    assert to_rgb(la, "white").getpixel((0, 0)) == la.convert("RGB").getpixel((0, 0)) == (100, 100, 100)
    with pytest.raises(ValueError, match="alpha"):
        ImageStore(alpha="black")
    try:
        from qwen_vl_utils.vision_process import to_rgb as qwen_to_rgb  # the train venv has it
    except ImportError:
        return
    with Image.open(p) as im:
        im.load()
        assert list(qwen_to_rgb(im).getdata()) == list(white.getdata())


def test_image_store_alpha_reaches_worker_processes(tmp_path):
    p = str(_rgba(tmp_path))
    store = ImageStore(workers=1, processes=True, alpha="white", fmt="PNG")
    try:
        import asyncio
        import base64
        import io

        enc = asyncio.run(store.aget(p))  # rendered in a worker process
        with Image.open(io.BytesIO(base64.b64decode(enc.data_url.split(",", 1)[1]))) as sent:
            assert sent.convert("RGB").getpixel((0, 0)) == (255, 255, 255)
    finally:
        store.close()
    assert ImageStore().view(p)[0].getpixel((0, 0)) == (200, 100, 50)  # default: the released harness


def test_token_caps_are_the_forks():
    # VSearcherLoop.MAX_TOKENS_PER_TURN = 1024 (insight_o3_agent_loop.py:54)
    assert LIMITS.vsearcher_max_tokens_per_turn == 1024
    # the fork's agent YAMLs: max_completion_tokens 2048 for the vReasoner, in training and validation
    for path in (REPO / "verl" / "recipe" / "vsearch" / "config").glob("agent_*.yaml"):
        if path.name == "agent_loops.yaml":
            continue
        assert yaml.safe_load(path.read_text())["vreasoner"]["max_completion_tokens"] == 2048, path.name
