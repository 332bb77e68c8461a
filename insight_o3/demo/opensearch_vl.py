"""The keyless OpenSearch-VL demo: a small benchmark of photographed signs, a local corpus that knows the facts
behind them, a scripted model that investigates the way OpenSearch-VL's prompt asks — crop the sign, sharpen it,
read it with ``layout_parsing``, ``text_search`` what it read in the corpus, answer — and a scripted judge.

Nothing here knows an answer by heart: the scripted model reads the sign only through the tools' observations
(the OCR's text) and takes the answer from the retrieved passage, so a wrong tool shows as a wrong answer. It
knows where each sign is (the benchmark's box), as a model would see it.
"""

from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter, ImageFont

from ..base.json_types import JSONObject
from ..endpoints.scripted_server import Call, Reply, chat, last_user_text

#: (entity on the sign, the question, the fact page's text with the answer, the answer)
FACTS = (
    ("KESSOCK BRIDGE", "In what year did this bridge open?", "The Kessock Bridge is a cable-stayed road bridge in "
     "Scotland crossing the Beauly Firth. The Kessock Bridge opened in 1982 and carries the A9 road.", "1982"),
    ("FORTH RAIL BRIDGE", "In what year did this bridge open?", "The Forth Rail Bridge is a cantilever railway "
     "bridge east of Edinburgh. The Forth Rail Bridge opened in 1890 after seven years of construction.", "1890"),
    ("MILLAU VIADUCT", "In what year did this bridge open?", "The Millau Viaduct is a multi-span cable-stayed "
     "bridge in southern France. The Millau Viaduct opened in 2004 and is among the tallest bridges.", "2004"),
    ("TOWER BRIDGE", "In what year did this bridge open?", "Tower Bridge is a combined bascule and suspension "
     "bridge in London. Tower Bridge opened in 1894 and crosses the River Thames.", "1894"),
)  # fmt: skip
DISTRACTORS = (
    ("Bridges of Scotland", "Scotland has many bridges, from stone arches to modern cable-stayed spans."),
    ("Road signs", "Road signs name places and structures; their letters are designed to be read at speed."),
)


def font_path() -> str:
    import matplotlib

    return os.path.join(matplotlib.get_data_path(), "fonts", "ttf", "DejaVuSans-Bold.ttf")


def sign_image(text: str, seed: int, size: tuple[int, int] = (900, 600)) -> tuple[Image.Image, list[int]]:
    """A scene (a sky and a road gradient with noise) with a green sign carrying ``text``, slightly blurred;
    returns the image and the sign's box ``[x, y, w, h]``."""
    rng = random.Random(seed)
    w, h = size
    img = Image.new("RGB", size)
    d = ImageDraw.Draw(img)
    for y in range(h):
        t = y / h
        d.line([(0, y), (w, y)], fill=(int(120 + 80 * t), int(160 + 40 * t), int(220 - 120 * t)))
    font = ImageFont.truetype(font_path(), 44)
    tw = int(d.textlength(text, font=font))
    sw, sh = tw + 60, 110
    x, y = rng.randint(20, max(21, w - sw - 20)), rng.randint(40, h - sh - 40)
    d.rectangle([x, y, x + sw, y + sh], fill=(0, 110, 60), outline=(255, 255, 255), width=5)
    d.text((x + 30, y + 28), text, font=font, fill=(255, 255, 255))
    img = img.filter(ImageFilter.GaussianBlur(1.2))
    return img, [x, y, sw, sh]


@dataclass(frozen=True)
class DemoFiles:
    bench: Path  # images + metadata.jsonl
    corpus: Path  # pages (corpus.jsonl gives their URLs)
    index: Path  # the SQLite index of the corpus


def make_demo(folder: str | os.PathLike, n: int = 4, seed: int = 0) -> DemoFiles:
    """Write the demo benchmark (``n`` signs, at most len(FACTS)) and corpus under ``folder`` and index it."""
    from ..tools.corpus import index_corpus

    root = Path(folder)
    bench, corpus = root / "bench", root / "corpus"
    for p in (bench, corpus / "pages"):
        p.mkdir(parents=True, exist_ok=True)
    rows, manifest = [], []
    for k, (entity, question, page, answer) in enumerate(FACTS[: max(1, min(n, len(FACTS)))]):
        img, box = sign_image(entity, seed * 100 + k)
        name = f"sign_{k}.png"
        img.save(bench / name)
        rows.append({"question_id": f"sign_{k}", "image": name, "question": question, "answer": answer,
                     "category": "bridges", "sign_box": box})  # fmt: skip
        slug = entity.lower().replace(" ", "_")
        (corpus / "pages" / f"{slug}.md").write_text(f"# {entity.title()}\n\n{page}\n", encoding="utf-8")
        manifest.append(
            {"path": f"pages/{slug}.md", "url": f"https://en.wikipedia.org/wiki/{entity.title().replace(' ', '_')}"}
        )
    for k, (title, text) in enumerate(DISTRACTORS):
        (corpus / "pages" / f"other_{k}.md").write_text(f"# {title}\n\n{text}\n", encoding="utf-8")
    (bench / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (corpus / "corpus.jsonl").write_text("".join(json.dumps(m) + "\n" for m in manifest), encoding="utf-8")
    index = root / "corpus.sqlite"
    index_corpus(corpus, index)
    return DemoFiles(bench, corpus, index)


def _call(name: str, arguments: JSONObject, thought: str) -> str:
    return (
        f"<think>\n{thought}\n</think>\n<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"
    )


_YEAR = re.compile(r"\b(1[5-9][0-9]{2}|20[0-9]{2})\b")


def sign_box_of(data_url: str) -> list[int]:
    """Where the green sign is in an image sent as a data URL: the bounding box ``[x, y, w, h]`` of its green
    pixels (the scripted model's eyes); the whole image when there is none."""
    import base64
    import io

    import numpy as np

    img = Image.open(io.BytesIO(base64.b64decode(data_url.split(",", 1)[1]))).convert("RGB")
    a = np.asarray(img).astype(int)
    mask = (a[..., 1] > 80) & (a[..., 0] < 60) & (a[..., 2] < 110)
    ys, xs = np.nonzero(mask)
    if len(xs) == 0:
        return [0, 0, img.width, img.height]
    return [int(xs.min()), int(ys.min()), int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)]


class ScriptedInvestigator:
    """The scripted model: turn k of an episode is the k-th step of crop -> sharpen -> layout_parsing ->
    text_search -> answer."""

    def sign_box(self, request: JSONObject) -> list[int]:
        for p in request["messages"][0]["content"]:
            if isinstance(p, dict) and p.get("type") == "image_url":
                return sign_box_of(p["image_url"]["url"])
        return [0, 0, 1, 1]

    def __call__(self, request: JSONObject, call: Call) -> Reply:
        msgs = request.get("messages", [])
        turn = sum(1 for m in msgs if m.get("role") == "assistant")
        last = last_user_text(request)
        if turn == 0:
            x, y, w, h = self.sign_box(request)
            return chat(_call("crop", {"image": "img_1", "x": x, "y": y, "width": w, "height": h},
                              "The sign is small in the scene; I crop it (img_1 -> img_2)."))  # fmt: skip
        if turn == 1:
            return chat(_call("sharpen", {"image": "img_2", "amount": 1.5}, "The crop is soft; I sharpen it."))
        if turn == 2:
            return chat(_call("layout_parsing", {"image": "img_3"}, "I read the sign with layout parsing."))
        if turn == 3:
            text = last.split("ALL RECOGNIZED TEXT:\n", 1)[-1].split("\n</observation>")[0].strip()
            query = text.split("\n")[0] if text and text != "(no text detected)" else "bridge"
            return chat(
                _call("text_search", {"q": query, "hl": "en", "top_k": 3}, f"The sign says {query!r}; I search it.")
            )
        m = _YEAR.search(last.split("[Passage 2]")[0])
        answer = m.group(1) if m else "unknown"
        return chat(
            f"<think>\nThe first passage says when it opened: {answer}.\n</think>\n<response>\n"
            f"According to the retrieved passage, it opened in {answer}.\n\n\\boxed{{{answer}}}\n</response>"
        )


def judge_script(request: JSONObject, call: Call) -> Reply:
    """The scripted judge of ``eval_with_gpt4o.py``'s prompt: yes iff the correct answer is in the report."""
    text = last_user_text(request)
    correct = text.split("[Correct Answer]\n", 1)[-1].split("\n\n[Deep Research Report]", 1)[0].strip()
    report = text.split("[Deep Research Report]\n", 1)[-1].split("\n\nTask:", 1)[0]
    ok = bool(correct) and correct.lower() in report.lower()
    return chat(f"correct: {'yes' if ok else 'no'}\nreasoning: the report {'states' if ok else 'does not state'} it.")
