"""The offline build demo's inputs and scripted endpoints (``python -m insight_o3.scripts.build_o3_bench_demo``).

SCRIPTED: no model is called. The demo benchmark's charts and maps (:mod:`insight_o3.demo.bench`) have known
layouts, questions and answers, so every role of a build can be played by a script that knows them:

* :func:`demo_sources` draws the images and writes their layouts as the PaddleX layout detector's result JSON, one
  ``<stem>_res.json`` per image, as a real detector run would (the input of ``build_o3_bench sources``).
* :class:`ScriptedBuild` answers every role on one OpenAI-compatible endpoint, routed by model name:

  - ``vlm`` (E.1, ``extract``) recognises each request's image by the exact bytes the pipeline sends (every view is
    encoded the same way beforehand) and answers with the three sections; the caption of the full image names it,
    ``DEMO-IMAGE <key>``;
  - ``writer`` (E.2, ``synthesize``) finds that name in GLOBAL_CAPTION and answers with the demo benchmark's questions
    for the image, plus one deliberately bad item per image (a different validation rule for each image, so
    ``validate`` has something to reject);
  - ``solver-a``, ``solver-b``, ``solver-c`` (``filter``) answer from the known truth, each solving an item according
    to its fixed "difficulty" (:meth:`ScriptedBuild.difficulty`: how many of the three solve it), so the items
    every solver solves are dropped;
  - ``judge`` extracts the option letter.

  Usage numbers are estimates (4 characters per token, one token per 28x28 pixels), so token totals are of a
  plausible order; what they cost means nothing.
* :func:`scripted_review` fills in the review step's decisions files as a reviewer would (a rejection, an edit, the
  rest accepted): in a real build a person does this on the review pages.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from ..base.json_types import JSONObject
from ..demo import bench as demo_bench
from ..endpoints.scripted_server import Call, Reply, Script, error
from ..imaging.images import ImageStore
from ..storage.atomic import write_text_atomic
from .extraction import extraction_resize
from .sources import write_paddlex_result

#: The model names the scripted endpoint answers to, by role.
VLM, WRITER, JUDGE = "vlm", "writer", "judge"
SOLVERS = ("solver-a", "solver-b", "solver-c")
#: PP-DocLayout_plus-L class ids (the detector's label list), for realistic result files.
CLS_ID = {"paragraph_title": 0, "image": 1, "text": 2, "figure_title": 6, "table": 8, "chart": 16}
_DEMO = re.compile(r"DEMO-IMAGE (\S+?)[:.]?(?:\s|$)")
#: The validation rule each image's planted bad item breaks (by the image's index, in key order).
PLANTED_RULES = ("six_options", "f_last", "answer_letter", "forbidden_word", "unknown_layout", "malformed")


@dataclass
class DemoSources:
    """What :func:`demo_sources` wrote: the demo benchmark (``demo``: images + ``metadata.jsonl``), the detector JSON
    per category, and the benchmark's records by image key (``chart/chart_0001``)."""

    demo: Path
    chart_images: Path
    map_images: Path
    chart_layouts: Path
    map_layouts: Path
    records: dict[str, list[JSONObject]]


def detector_label(demo_label: str) -> str:
    """What PP-DocLayout would call a demo layout: chart/table panels, titles; legends and map places are text."""
    head = demo_label.split(":", 1)[0].strip()
    return head if head in ("chart", "table", "figure_title") else "text"


def demo_sources(out: Path, num_images: int = 6, seed: int = 0, questions: int = 3, min_side: int = 900) -> DemoSources:
    """Draw a demo benchmark under ``out/demo`` (images already there with the right size are kept) and write its
    layouts as detector JSON under ``out/layouts/{chart,map}``."""
    demo = out / "demo"
    items, _ = demo_bench.draw_demo(demo, num_images, seed=seed, questions_per_image=questions, min_side=min_side)
    records: dict[str, list[JSONObject]] = {}
    for item in items:
        for r in demo_bench.records(item):
            records.setdefault(f"{r['subset']}/{Path(str(r['file_name'])).stem}", []).append(r)
    for key, recs in records.items():
        subset, stem = key.split("/")
        infos: dict[str, dict] = recs[0]["layout_infos"]
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
        write_paddlex_result(d / f"{stem}_res.json", str(recs[0]["file_name"]), boxes)
    return DemoSources(
        demo=demo,
        chart_images=demo / "images" / "chart",
        map_images=demo / "images" / "map",
        chart_layouts=out / "layouts" / "chart",
        map_layouts=out / "layouts" / "map",
        records=records,
    )


def reply_body(text: str, prompt_tokens: int, model: str, n: int = 1) -> JSONObject:
    """A chat.completions body with ``n`` identical choices and estimated usage."""
    return {
        "id": "chatcmpl-scripted-build",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": k, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"} for k in range(n)
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(text) // 4 + 1,
            "total_tokens": prompt_tokens + len(text) // 4 + 1,
        },
    }


def texts_and_images(request: dict) -> tuple[str, list[str]]:
    """A chat request's text parts joined, and its image URLs."""
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


def image_tokens(url: str) -> int:
    """The estimated prompt tokens of an image data URL (one per 28x28 pixels)."""
    raw = base64.b64decode(url.split(",", 1)[1])
    with Image.open(io.BytesIO(raw)) as im:
        return im.width * im.height // (28 * 28)


class ScriptedBuild:
    """The scripted endpoints of an offline build over a demo benchmark's records (see the module docstring).
    ``max_pixels``: the ``extract`` step's ``--img_max_pixels`` (the views are recognised by their exact bytes)."""

    def __init__(self, demo_records: dict[str, list[JSONObject]], demo_dir: Path, max_pixels: int | None = None):
        self.records = demo_records
        # sha1 of the data URL -> (image key, layout id); identical crops (two charts' legends with the same series)
        # are one view: the first of them answers for all, as a real model would answer alike
        self.views: dict[str, tuple[str, int | None]] = {}
        self.alias: dict[str, str] = {}  # sample key -> the sample key of the view that answers for it
        store = ImageStore(workers=1)
        resize = extraction_resize(max_pixels)
        try:
            for key, recs in demo_records.items():
                path = str((demo_dir / str(recs[0]["file_name"])).resolve())
                self._view(store.get(path, resize).data_url, key, None)
                infos: dict[str, dict] = recs[0]["layout_infos"]
                for info in infos.values():
                    x1, y1, x2, y2 = (float(v) for v in info["bbox"])
                    enc = store.get(path, resize, region=(x1, y1, x2, y2))
                    self._view(enc.data_url, key, info["layout_id"])
        finally:
            store.close()
        self.truth = {str(r["question"]): str(r["answer"]) for recs in demo_records.values() for r in recs}

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
        """The E.1 reply for a view: the three sections."""
        recs = self.records[key]
        infos: dict[str, dict] = recs[0]["layout_infos"]
        if layout_id is None:
            subset = recs[0]["subset"]
            labels = [i["label"] for i in infos.values()]
            return (
                f"## Image Identification\n{subset}\n## Detailed Caption\nDEMO-IMAGE {key} is a {subset} image with "
                f"{len(labels)} parts.\n## Extracted OCR (if any)\n" + "\n".join(labels)
            )
        label = infos[str(layout_id)]["label"]
        return (
            f"## Image Identification\nchart\n## Detailed Caption\nThe part '{label}' of DEMO-IMAGE {key} here.\n"
            f"## Extracted OCR (if any)\n{label.split(':', 1)[-1].strip()}"
        )

    def e1_view(self, request: dict) -> tuple[str, int | None] | Reply:
        """The (image key, layout id) whose view an E.1 request carries, or the error reply for a request that is
        not one."""
        _, urls = texts_and_images(request)
        if len(urls) != 1:
            return error(400, f"E.1 expects one image, got {len(urls)}")
        view = self.views.get(self._sha(urls[0]))
        if view is None:
            return error(400, "unknown image: not a view of the demo bench as the pipeline sends it")
        return view

    @staticmethod
    def prompt_tokens(request: dict) -> int:
        text, urls = texts_and_images(request)
        return len(text) // 4 + sum(image_tokens(u) for u in urls)

    def e1(self, request: dict, call: Call) -> Reply:
        view = self.e1_view(request)
        if isinstance(view, Reply):
            return view
        return Reply(
            body=reply_body(self.extraction_reply(*view), self.prompt_tokens(request), request.get("model", ""))
        )

    # ---------------------------------------------------------------------------------------------- E.2
    @staticmethod
    def planted(index: int, recs: list[JSONObject]) -> JSONObject:
        """One bad item per image, breaking the rule ``PLANTED_RULES[index % 6]``."""
        r = recs[0]
        item: JSONObject = {k: r[k] for k in ("question", "options", "answer", "explanation")}
        rule = PLANTED_RULES[index % len(PLANTED_RULES)]
        options = str(r["options"])
        if rule == "six_options":
            item["options"] = "\n".join(options.split("\n")[:4] + ["F. No right choice"])
        elif rule == "f_last":
            item["options"] = options.replace("F. No right choice", "F. None of the above")
        elif rule == "answer_letter":
            item["answer"] = "B or C"
        elif rule == "forbidden_word":
            item["question"] = "Looking at the panel on the left, " + str(r["question"])
        elif rule == "unknown_layout":
            item["explanation"] = "Step 1: [layout 1] Step 2: [layout 9999]"
        else:
            del item["explanation"]
        return item

    def e2_items(self, key: str) -> list[JSONObject]:
        """The E.2 reply's items for an image: its demo questions, then the planted bad one."""
        recs = self.records[key]
        items: list[JSONObject] = [{k: r[k] for k in ("question", "options", "answer", "explanation")} for r in recs]
        return items + [self.planted(sorted(self.records).index(key), recs)]

    def e2_image(self, request: dict) -> str | Reply:
        """The image key an E.2 request is about (named in its GLOBAL_CAPTION), or the error reply."""
        text, urls = texts_and_images(request)
        if urls:
            return error(400, "the synthesizer must never see the image")
        m = _DEMO.search(text.split("2. **GLOBAL_CAPTION**", 1)[-1])
        if m is None or m.group(1) not in self.records:
            return error(400, "no DEMO-IMAGE name in GLOBAL_CAPTION")
        return m.group(1)

    def e2_reply(self, request: dict, array: str) -> Reply:
        """An E.2 reply holding ``array`` (JSON text) in a fenced block, as GPT-5 writes it."""
        reply = "```json\n" + array + "\n```"
        return Reply(body=reply_body(reply, self.prompt_tokens(request), request.get("model", "")))

    def e2(self, request: dict, call: Call) -> Reply:
        key = self.e2_image(request)
        if isinstance(key, Reply):
            return key
        return self.e2_reply(request, json.dumps(self.e2_items(key), indent=1))

    # ------------------------------------------------------------------------------------- filter, evaluate
    @staticmethod
    def difficulty(question: str) -> int:
        """0..3: how many of the three solvers solve the question (solver i solves it when i < difficulty)."""
        return int(hashlib.sha1(question.encode("utf-8")).hexdigest(), 16) % 4

    @staticmethod
    def answer_of(text: str, truth: dict[str, str]) -> tuple[str, str] | None:
        """The (question, answer) a solver's request asks (its text starts with the question)."""
        for q, a in truth.items():
            if text.startswith(q + "\n") or text == q:
                return q, a
        return None

    def solver(self, request: dict, call: Call, truth: dict[str, str] | None = None) -> Reply:
        """A solver's reply; ``truth`` (question -> answer letter): the answers after a release's option shuffle."""
        text, urls = texts_and_images(request)
        found = self.answer_of(text, truth or self.truth)
        if found is None or len(urls) != 1:
            return error(400, "unknown question")
        q, gt = found
        model = request.get("model")
        i = SOLVERS.index(model) if model in SOLVERS else 0
        letter = gt if i < self.difficulty(q) else ("A" if gt != "A" else "B")
        reply = f"<think>comparing the options</think><answer>{letter}</answer>"
        return Reply(body=reply_body(reply, self.prompt_tokens(request), model or "", n=call.n))

    @staticmethod
    def judge(request: dict, call: Call) -> Reply:
        text, _ = texts_and_images(request)
        if "Model Answer:" not in text:
            return error(400, "unexpected judge prompt")
        words = text.split("Model Answer:", 1)[1].split()
        letter = words[0].strip("()<>.") if words else ""
        return Reply(body=reply_body(letter[:1], len(text) // 4, call.model or JUDGE))

    def script(self, truth: dict[str, str] | None = None) -> Script:
        """One endpoint for every role, routed by model name: ``vlm``, ``writer``, ``judge``, the solvers."""

        def route(request: dict, call: Call) -> Reply:
            model = request.get("model")
            if model == VLM:
                return self.e1(request, call)
            if model == WRITER:
                return self.e2(request, call)
            if model == JUDGE:
                return self.judge(request, call)
            return self.solver(request, call, truth)

        return route


def scripted_review(review_dir: Path, rejects: int = 1, edits: int = 1) -> dict[str, str]:
    """Fill in every ``batch_*.decisions.txt`` under ``review_dir`` as a reviewer would: the first ``rejects`` items
    rejected (with a reason), the next ``edits`` edited (the question reworded), the rest accepted. Returns
    ``{item_id: decision}``."""
    out: dict[str, str] = {}
    for path in sorted(review_dir.glob("batch_*.decisions.txt")):
        lines = path.read_text(encoding="utf-8").splitlines()
        new = [ln for ln in lines if ln.startswith("#")]
        for ln in lines:
            if ln.startswith("#") or not ln.strip():
                continue
            item_id = ln.split()[0]
            k = len(out)
            if k < rejects:
                new.append(f"{item_id} reject the wording is ambiguous")
                out[item_id] = "reject"
            elif k < rejects + edits:
                new.append(
                    f"{item_id} edit " + json.dumps({"question": f"[reviewed] {item_id}: which option is right?"})
                )
                out[item_id] = "edit"
            else:
                new.append(f"{item_id} accept")
                out[item_id] = "accept"
        write_text_atomic(path, "\n".join(new) + "\n")
    return out
