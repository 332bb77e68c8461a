"""Scripted models that answer every model-calling step of a build for ANY image (``build_o3_bench_demo --serve``).

SCRIPTED: no model is called and nothing here looks at what an image shows. Where the offline demo's scripts
(:mod:`.demo`) know the demo images' answers, these reply generically, so one can run every step of
``build_o3_bench`` on one's own images before paying a model: the replies are valid for each step's parser and
say in their text that they are scripted. One endpoint plays every role, routed by model name (:data:`MODELS`);
a request for another name gets vLLM's 404 and one without a key (none, or ``EMPTY``) a 401, as from a real server:

* ``scripted-vlm`` (E.1, ``extract``): the three sections for any view; its caption names the view's pixel size and
  a hash of its bytes (so each image's E.2 prompt differs) and says no model looked at it;
* ``scripted-writer`` (E.2, ``synthesize``): :data:`ITEMS_PER_IMAGE` items per image that pass ``validate``'s
  default rules: six options with ``F. No right choice`` last, an answer among A–E drawn from a hash of the prompt,
  an explanation citing the first two layouts of the prompt's ``LAYOUTS`` (an image with fewer is rejected by
  ``validate`` as ``too_few_layouts``, as it should be);
* ``scripted-solver-a`` .. ``-c`` (``filter``): ``<answer>X</answer>`` with a letter drawn from a hash of the model,
  the question and the attempt — right by chance (one in six), so the filter keeps most items;
* ``scripted-judge``: the option letter the model answer starts with (as the demo's judge).

:func:`grid_layouts` writes a 3x3 grid of boxes per image as the layout detector's JSON, for images without a
detector run (``sources`` reads it as it reads PaddleX's), labelled ``scripted_grid_cell``.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
from pathlib import Path

from PIL import Image

from ..endpoints.scripted_server import Call, Reply, Script, chat, error, refusal, request_text
from ..imaging.images import image_size
from .demo import ScriptedBuild, reply_body, texts_and_images
from .sources import list_images, write_paddlex_result

VLM, WRITER, JUDGE = "scripted-vlm", "scripted-writer", "scripted-judge"
SOLVERS = ("scripted-solver-a", "scripted-solver-b", "scripted-solver-c")
#: Every model name the endpoint serves, by role.
MODELS = {"E.1 (extract)": VLM, "E.2 (synthesize)": WRITER, "filter solvers": ", ".join(SOLVERS), "judge": JUDGE}
ITEMS_PER_IMAGE = 3
GRID = (3, 3)
GRID_LABEL = "scripted_grid_cell"
#: A layout id in the E.2 prompt's LAYOUTS (``json.dumps``'s spacing; bounded digits: linear, no backtracking).
_LAYOUT_ID = re.compile(r'"layout_id": (\d{1,18})\b')
LETTERS = "ABCDEF"


def _hash(*parts: str) -> int:
    return int(hashlib.sha1("\x00".join(parts).encode("utf-8")).hexdigest(), 16)


def _view(url: str) -> tuple[int, int, str]:
    """(width, height, short sha1 of the bytes) of an image data URL."""
    raw = base64.b64decode(url.split(",", 1)[1])
    with Image.open(io.BytesIO(raw)) as im:
        return im.width, im.height, hashlib.sha1(raw).hexdigest()[:8]


def extraction_reply(width: int, height: int, tag: str) -> str:
    """The scripted E.1 reply for a view of ``width`` x ``height`` pixels."""
    return (
        "## Image Identification\nscripted (no model looked at this image)\n"
        f"## Detailed Caption\nSCRIPTED REPLY from {VLM}: a view of {width}x{height} pixels (bytes {tag}); no model "
        "described it.\n"
        f"## Extracted OCR (if any)\nscripted text {tag}"
    )


def writer_items(prompt: str) -> list[dict]:
    """The scripted E.2 items for a filled E.2 prompt (see the module docstring)."""
    ids = list(dict.fromkeys(int(m.group(1)) for m in _LAYOUT_ID.finditer(prompt)))[:2]
    tag = f"{_hash(prompt) % 16**6:06x}"
    cites = "\n".join(f"Step {k}: a scripted step [layout {i}]" for k, i in enumerate(ids, start=1))
    options = "\n".join(f"{c}. scripted choice {c}" for c in LETTERS[:5]) + "\nF. No right choice"
    return [
        {
            "question": f"[scripted item {k} of image {tag}] Which choice did the scripted writer mark right? No model "
            "wrote this question.",
            "options": options,
            "answer": LETTERS[_hash(prompt, str(k)) % 5],
            "explanation": cites or "Step 1: a scripted step citing nothing",
        }
        for k in range(1, ITEMS_PER_IMAGE + 1)
    ]


class GenericBuild:
    """The scripted endpoint of ``build_o3_bench_demo --serve`` (see the module docstring); ``require_key``: refuse a
    request without a key, as a real server."""

    def __init__(self, require_key: bool = True):
        self.require_key = require_key

    def extract(self, request: dict, call: Call) -> Reply:
        text, urls = texts_and_images(request)
        if len(urls) != 1:
            return error(400, f"E.1 expects one image, got {len(urls)}")
        try:
            w, h, tag = _view(urls[0])
        except (ValueError, OSError, IndexError) as e:
            return error(400, f"the image could not be read: {e}")
        return Reply(body=reply_body(extraction_reply(w, h, tag), len(text) // 4 + w * h // 784, VLM))

    @staticmethod
    def write(request: dict, call: Call) -> Reply:
        text, urls = texts_and_images(request)
        if urls:
            return error(400, "the synthesizer must never see the image")
        if "LAYOUTS" not in text:
            return error(400, "not an E.2 prompt (no LAYOUTS)")
        reply = "```json\n" + json.dumps(writer_items(text), indent=1) + "\n```"
        return Reply(body=reply_body(reply, len(text) // 4, WRITER))

    @staticmethod
    def solve(request: dict, call: Call) -> Reply:
        text = request_text(request)
        model = call.model or SOLVERS[0]
        texts = [
            f"<think>scripted solver {model}: no model read this question</think>"
            f"<answer>{LETTERS[_hash(model, text, str(k)) % 6]}</answer>"
            for k in range(call.n)
        ]
        return chat(texts, model=model, prompt_tokens=len(text) // 4)

    def script(self) -> Script:
        """One endpoint for every role, routed by model name (:data:`MODELS`)."""
        roles = {VLM: self.extract, WRITER: self.write, JUDGE: ScriptedBuild.judge}
        roles.update(dict.fromkeys(SOLVERS, self.solve))

        def route(request: dict, call: Call) -> Reply:
            refused = refusal(call, "build endpoint", None, self.require_key)
            if refused is not None:
                return refused
            answer = roles.get(str(call.model))
            if answer is None:
                served = ", ".join(f"`{m}`" for m in roles)
                return error(404, f"The model `{call.model}` does not exist. (the scripted endpoint serves {served})")
            return answer(request, call)

        return route


def grid_layouts(image_dir: str | Path, out_dir: str | Path, grid: tuple[int, int] = GRID) -> int:
    """Write ``<stem>_res.json`` for every image of ``image_dir`` under ``out_dir``: a ``rows`` x ``cols`` grid of
    boxes over the image, as the layout detector's JSON. Returns how many images."""
    rows, cols = grid
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    images = list_images(str(image_dir))
    for path in images:
        w, h = image_size(path)
        boxes = [
            {
                "cls_id": 2,
                "label": GRID_LABEL,
                "score": 1.0,
                "coordinate": [c * w / cols, r * h / rows, (c + 1) * w / cols, (r + 1) * h / rows],
            }
            for r in range(rows)
            for c in range(cols)
        ]
        write_paddlex_result(out / f"{path.stem}_res.json", path.name, boxes)
    return len(images)
