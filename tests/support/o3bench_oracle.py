"""Scripted endpoints for an offline O3-Bench build on demo-bench images, whose layouts and answers are known.

* :func:`demo_inputs` draws a demo benchmark (``make_demo_bench``) and writes its layouts as the PaddleX layout
  detector's result JSON, one ``<stem>_res.json`` per image, as a real detector run would.
* :class:`Oracle` knows every image: the E.1 "VLM" recognises each request's image by the exact bytes the pipeline
  sends (the oracle encodes every view the same way beforehand), and answers with the three sections (the caption
  of the full image names it, ``DEMO-IMAGE <key>``); the E.2 "text model" finds that name in GLOBAL_CAPTION and
  answers with the demo bench's questions for the image plus one planted bad item per image (a different
  validation rule for each image); the filter's solvers answer from the known truth, each solving an item according
  to its fixed "difficulty" (:meth:`Oracle.difficulty`); the judge extracts the letter.
* Usage numbers are estimates (4 characters per token, one token per 28x28 pixels) so that token totals and costs
  of a scripted run are of a plausible order.

Faults are switched per call: ``state["e1_malformed_once"]`` (keys answered without sections once),
``state["e1_malformed_always"]``, ``state["e2_prose_once"]`` (image keys answered with prose once),
``state["e2_trailing_commas"]`` (image keys whose JSON array has trailing commas). What was asked
is kept in ``state["e1_seen"]`` (sample keys), ``state["e2_seen"]`` (image keys) and ``state["solver_seen"]``
((model, question) pairs).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import time
from pathlib import Path

from PIL import Image

from insight_o3.data.o3bench.extraction import extraction_resize
from insight_o3.data.o3bench.sources import write_paddlex_result
from insight_o3.imaging.images import ImageStore
from insight_o3.scripts import make_demo_bench
from tests.support.openai_server import Reply, error

#: PP-DocLayout_plus-L class ids (the detector's label list), for realistic result files.
CLS_ID = {"paragraph_title": 0, "image": 1, "text": 2, "figure_title": 6, "table": 8, "chart": 16}
SOLVERS = ("solver-a", "solver-b", "solver-c")
_DEMO = re.compile(r"DEMO-IMAGE (\S+?)[:.]?(?:\s|$)")


def detector_label(demo_label: str) -> str:
    """What PP-DocLayout would call a demo layout: chart/table panels, titles; legends and map places are text."""
    head = demo_label.split(":", 1)[0].strip()
    return head if head in ("chart", "table", "figure_title") else "text"


def demo_inputs(out: Path, num_images: int = 6, seed: int = 0, questions: int = 3, min_side: int = 900) -> dict:
    """Draw a demo bench under ``out/demo`` and write detector JSON under ``out/layouts/{chart,map}``; returns the
    paths and the demo records by image key."""
    demo = out / "demo"
    rc = make_demo_bench.main(
        [
            "--output_dir",
            str(demo),
            "--num_images",
            str(num_images),
            "--seed",
            str(seed),
            "--questions_per_image",
            str(questions),
            "--min_side",
            str(min_side),
            "--max_side",
            str(int(min_side * 1.4)),
        ]
    )
    assert rc == 0
    records: dict[str, list[dict]] = {}
    for line in (demo / "metadata.jsonl").read_text().splitlines():
        r = json.loads(line)
        key = f"{r['subset']}/{Path(r['file_name']).stem}"
        records.setdefault(key, []).append(r)
    for key, recs in records.items():
        subset, stem = key.split("/")
        infos = recs[0]["layout_infos"]
        boxes = [
            {
                "cls_id": CLS_ID[detector_label(i["label"])],
                "label": detector_label(i["label"]),
                "score": 0.9,
                "coordinate": [float(v) for v in i["bbox"]],
            }
            for i in sorted(infos.values(), key=lambda i: i["layout_id"])
        ]
        d = out / "layouts" / subset
        d.mkdir(parents=True, exist_ok=True)
        write_paddlex_result(d / f"{stem}_res.json", recs[0]["file_name"], boxes)
    return {
        "demo": demo,
        "chart_images": demo / "images" / "chart",
        "map_images": demo / "images" / "map",
        "chart_layouts": out / "layouts" / "chart",
        "map_layouts": out / "layouts" / "map",
        "records": records,
    }


def _body(text: str, prompt_tokens: int, model: str, finish: str = "stop") -> dict:
    return {
        "id": "chatcmpl-oracle",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(text) // 4 + 1,
            "total_tokens": prompt_tokens + len(text) // 4 + 1,
        },
    }


def _texts_and_images(request: dict) -> tuple[str, list[str]]:
    texts, urls = [], []
    for m in request.get("messages", []):
        c = m.get("content")
        if isinstance(c, str):
            texts.append(c)
            continue
        for p in c or []:
            if p.get("type") == "text":
                texts.append(p["text"])
            elif p.get("type") == "image_url":
                urls.append(p["image_url"]["url"])
    return "\n".join(texts), urls


def _image_tokens(url: str) -> int:
    raw = base64.b64decode(url.split(",", 1)[1])
    with Image.open(io.BytesIO(raw)) as im:
        return im.width * im.height // (28 * 28)


class Oracle:
    """The scripted endpoints of an offline build (see the module docstring)."""

    def __init__(self, demo_records: dict[str, list[dict]], demo_dir: Path, max_pixels: int | None = None):
        self.records = demo_records
        self.state: dict = {}
        # sha1 of the data URL -> (image key, layout id); identical crops (two charts' legends with the same series)
        # are one view: the first of them answers for all, as a real model would answer alike
        self.views: dict[str, tuple[str, int | None]] = {}
        self.alias: dict[str, str] = {}  # sample key -> the sample key of the view that answers for it
        store = ImageStore(workers=1)
        resize = extraction_resize(max_pixels)
        for key, recs in demo_records.items():
            path = str((demo_dir / recs[0]["file_name"]).resolve())
            self._view(store.get(path, resize).data_url, key, None)
            for info in recs[0]["layout_infos"].values():
                enc = store.get(path, resize, region=tuple(float(v) for v in info["bbox"]))
                self._view(enc.data_url, key, info["layout_id"])
        store.close()
        self.truth = {r["question"]: r["answer"] for recs in demo_records.values() for r in recs}

    @staticmethod
    def _sha(url: str) -> str:
        return hashlib.sha1(url.encode("ascii")).hexdigest()

    @staticmethod
    def sample_key(key: str, layout_id: int | None) -> str:
        return f"{key}#{'full' if layout_id is None else f'L{layout_id}'}"

    def _view(self, url: str, key: str, layout_id: int | None) -> None:
        view = self.views.setdefault(self._sha(url), (key, layout_id))
        self.alias[self.sample_key(key, layout_id)] = self.sample_key(*view)

    # ---------------------------------------------------------------------------------------------- E.1
    def extraction_reply(self, key: str, layout_id: int | None) -> str:
        recs = self.records[key]
        if layout_id is None:
            subset = recs[0]["subset"]
            labels = [i["label"] for i in recs[0]["layout_infos"].values()]
            return (
                f"## Image Identification\n{subset}\n## Detailed Caption\nDEMO-IMAGE {key} is a {subset} image with "
                f"{len(labels)} parts.\n## Extracted OCR (if any)\n" + "\n".join(labels)
            )
        label = recs[0]["layout_infos"][str(layout_id)]["label"]
        return (
            f"## Image Identification\nchart\n## Detailed Caption\nThe part '{label}' of DEMO-IMAGE {key} here.\n"
            f"## Extracted OCR (if any)\n{label.split(':', 1)[-1].strip()}"
        )

    def e1(self, request: dict, call) -> Reply:
        text, urls = _texts_and_images(request)
        if len(urls) != 1:
            return error(400, f"E.1 expects one image, got {len(urls)}")
        view = self.views.get(self._sha(urls[0]))
        if view is None:
            return error(400, "unknown image: not a view of the demo bench as the pipeline sends it")
        sample_key = self.sample_key(*view)
        self.state.setdefault("e1_seen", []).append(sample_key)
        tokens = len(text) // 4 + _image_tokens(urls[0])
        once = self.state.setdefault("e1_malformed_once", set())
        if sample_key in self.state.get("e1_malformed_always", set()) or sample_key in once:
            once.discard(sample_key)
            return Reply(body=_body("This image shows a chart.", tokens, request.get("model", "")))
        return Reply(body=_body(self.extraction_reply(*view), tokens, request.get("model", "")))

    # ---------------------------------------------------------------------------------------------- E.2
    @staticmethod
    def planted(index: int, recs: list[dict]) -> dict:
        """One bad item per image, each image a different rule (by its index)."""
        r = recs[0]
        item = {
            "question": r["question"],
            "options": r["options"],
            "answer": r["answer"],
            "explanation": r["explanation"],
        }
        kind = index % 6
        if kind == 0:
            item["options"] = "\n".join(r["options"].split("\n")[:4] + ["F. No right choice"])
        elif kind == 1:
            item["options"] = r["options"].replace("F. No right choice", "F. None of the above")
        elif kind == 2:
            item["answer"] = "B or C"
        elif kind == 3:
            item["question"] = "Looking at the panel on the left, " + r["question"]
        elif kind == 4:
            item["explanation"] = "Step 1: [layout 1] Step 2: [layout 9999]"
        else:
            del item["explanation"]
        return item

    def e2_items(self, key: str) -> list[dict]:
        recs = self.records[key]
        items = [
            {"question": r["question"], "options": r["options"], "answer": r["answer"], "explanation": r["explanation"]}
            for r in recs
        ]
        return items + [self.planted(sorted(self.records).index(key), recs)]

    def e2(self, request: dict, call) -> Reply:
        text, urls = _texts_and_images(request)
        if urls:
            return error(400, "the synthesizer must never see the image")
        m = _DEMO.search(text.split("2. **GLOBAL_CAPTION**", 1)[-1])
        if m is None or m.group(1) not in self.records:
            return error(400, "no DEMO-IMAGE name in GLOBAL_CAPTION")
        key = m.group(1)
        self.state.setdefault("e2_seen", []).append(key)
        once = self.state.setdefault("e2_prose_once", set())
        if key in once:
            once.discard(key)
            return Reply(body=_body("Here are some great questions about the image!", len(text) // 4, "oracle"))
        array = json.dumps(self.e2_items(key), indent=1)
        if key in self.state.get("e2_trailing_commas", set()):
            array = array.replace('"\n }', '",\n }').replace("}\n]", "},\n]")  # valid JSON but for the commas
        reply = "```json\n" + array + "\n```"
        return Reply(body=_body(reply, len(text) // 4, request.get("model", "")))

    # ------------------------------------------------------------------------------------- filter, evaluate
    @staticmethod
    def difficulty(question: str) -> int:
        """0..3: how many of the three solvers solve the question (solver i solves it when i < difficulty)."""
        return int(hashlib.sha1(question.encode("utf-8")).hexdigest(), 16) % 4

    @staticmethod
    def answer_of(text: str, truth: dict[str, str]) -> tuple[str, str] | None:
        for q, a in truth.items():
            if text.startswith(q + "\n") or text == q:
                return q, a
        return None

    def solver(self, request: dict, call, truth: dict[str, str] | None = None) -> Reply:
        text, urls = _texts_and_images(request)
        found = self.answer_of(text, truth or self.truth)
        if found is None or len(urls) != 1:
            return error(400, "unknown question")
        q, gt = found
        model = request.get("model")
        self.state.setdefault("solver_seen", []).append((model, q))
        i = SOLVERS.index(model) if model in SOLVERS else 0
        right = i < self.difficulty(q)
        letter = gt if right else ("A" if gt != "A" else "B")
        tokens = len(text) // 4 + _image_tokens(urls[0])
        reply = f"<think>comparing the options</think><answer>{letter}</answer>"
        body = _body(reply, tokens, model or "")
        body["choices"] = [
            {"index": k, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}
            for k in range(call.n)
        ]
        return Reply(body=body)

    @staticmethod
    def judge(request: dict, call) -> Reply:
        text, _ = _texts_and_images(request)
        if "Model Answer:" not in text:
            return error(400, "unexpected judge prompt")
        letter = text.split("Model Answer:", 1)[1].strip().split()[0].strip("()<>.")
        return Reply(body=_body(letter[:1], len(text) // 4, "judge"))

    def script(self, truth: dict[str, str] | None = None):
        """One endpoint for every role, routed by model name: ``vlm``, ``writer``, ``judge``, the solvers."""

        def route(request: dict, call) -> Reply:
            model = request.get("model")
            if model == "vlm":
                return self.e1(request, call)
            if model == "writer":
                return self.e2(request, call)
            if model == "judge":
                return self.judge(request, call)
            return self.solver(request, call, truth)

        return route
