"""Golden request payloads: a small fixed benchmark, scripted model/judge/vSearcher replies, and the
reduction of recorded requests to a comparable form (images as size + JPEG quantisation, no base64).

The goldens under ``tests/golden/`` were recorded from the *original* code on this benchmark and these
scripts (see ``tests/golden/README.md``); ``tests/test_golden_payloads.py`` records ours the same way
and compares request by request, naming every difference.
"""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
from PIL import Image

from tests.support.openai_server import Call, Reply, chat, error, request_text, user_message_text

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
_MARK = re.compile(r"\[([geo]\d+)\]")

# ----------------------------------------------------------------------------- the benchmark
IMAGES = {"images/wide.png": (2400, 1800), "images/small.png": (300, 200)}
OPTIONS = "A. one\nB. two\nC. three"
#: baseline questions: marker -> (image, options?, answer, model reply, finish_reason)
BASELINE = {
    "g0": ("images/wide.png", True, "B", "<think>the second bar</think><answer>B</answer>", "stop"),
    "g1": ("images/wide.png", True, "C", "I think it is (A).", "stop"),
    "g2": ("images/small.png", False, "7 km", "<answer>about seven kilometres</answer>", "stop"),
    "g3": ("images/small.png", False, "red", "Let me look at every patch in turn: first", "length"),
}
#: InSight-o3 questions: marker -> (image, options?, answer)
EPISODES = {
    "e0": ("images/wide.png", True, "B"),
    "e1": ("images/wide.png", True, "C"),
}
#: vReasoner turns per episode (turn k answers the request with k assistant messages)
REASONER_TURNS = {
    "e0": [
        "<think>need the legend</think>\n<tool_call>region_description={the legend of [e0]}</tool_call>",
        "I should look more.",
        "<think>and the title</think>\n<tool_call>region_description={the title of [e0]}</tool_call>",
        "<think>enough</think>\nAnswer: \\boxed{B. two}",
    ],
    "e1": [
        "<think>a</think><tool_call>region_description={the top bar of [e1]}</tool_call>",
        "<think>b</think><tool_call>region_description={the bottom bar of [e1]}</tool_call>",
        "still thinking",
        "<think>c</think>Answer: \\boxed{C}",
    ],
}
#: vSearcher turns per description (model-frame pixels of the 16384*28*28 frame)
SEARCHER_TURNS = {
    "the legend of [e0]": [
        '<think>zoom</think> <tool_call>{"name": "image_zoom_in_tool", "arguments": '
        '{"bbox_2d": [100, 80, 900, 700]}}</tool_call>',
        "<think>it is here</think> <answer>[400, 300, 430, 520]</answer>",
    ],
    "the title of [e0]": ["<think>not visible</think> <answer>[0, 0, 0, 0]</answer>"],
    "the top bar of [e1]": ["<think>top</think> <answer>[1200, 50, 3000, 800]</answer>"],
    "the bottom bar of [e1]": ["<think>bottom</think> <answer>[10, 1500, 600, 2300]</answer>"],
}
JUDGE_REPLIES = {"mcq": {"g1": "A"}, "open": {"g2": "seven kilometres"}, "verify": "<correct>"}
#: Table 6 oracle questions (``--oracle_crops target_layouts``): marker -> (image, options?, answer,
#: target layout ids, model reply). Layout 2 is tiny (enlarged to the vReasoner's crop minimum),
#: layout 1 is larger than the budget allows for one image (resized), layout 3 is not a target.
ORACLE_LAYOUTS = {
    "1": {"layout_id": 1, "bbox": [100, 80, 1700, 1380], "label": "chart"},
    "2": {"layout_id": 2, "bbox": [2000, 1500, 2030, 1520], "label": "legend"},
    "3": {"layout_id": 3, "bbox": [0, 0, 50, 50], "label": "title"},
}
ORACLE = {
    "o0": ("images/wide.png", True, "B", [2, 1], "<answer>B</answer>"),
    "o1": ("images/small.png", False, "7 km", [3], "<answer>7 km</answer>"),
}


def _pixels(w: int, h: int, seed: int) -> np.ndarray:
    """A deterministic picture with structure at every scale (resampling filters differ on it)."""
    y, x = np.mgrid[0:h, 0:w]
    rng = np.random.default_rng(seed)
    base = np.stack([(x * 255 // max(1, w - 1)), (y * 255 // max(1, h - 1)), ((x // 7 + y // 5) % 2) * 255], -1)
    return np.clip(base + rng.integers(-20, 21, (h, w, 3)), 0, 255).astype(np.uint8)


def make_bench(root: Path) -> tuple[dict[str, Path], Path]:
    """Images and three annotation files; returns ({"mcq", "open", "episodes"}: ann_file, img_dir).

    Multiple-choice and open questions are in separate files, as in every benchmark of the paper
    (the original reads a file with pandas, so in a mixed file the open questions would get
    ``options`` NaN, i.e. the text "nan" and the multiple-choice judge prompt)."""
    img_dir = root / "bench"
    for i, (name, (w, h)) in enumerate(IMAGES.items()):
        (img_dir / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(_pixels(w, h, i)).save(img_dir / name)

    def row(q: str, image: str, mcq: bool, answer: str) -> dict:
        r = {
            "question_id": q,
            "file_name": image,
            "subset": "chart",
            "question": f"[{q}] What does the figure show?",
            "answer": answer,
        }
        if mcq:
            r["options"] = OPTIONS
        return r

    files = {
        "mcq": [row(q, im, mcq, a) for q, (im, mcq, a, _, _) in BASELINE.items() if mcq],
        "open": [row(q, im, mcq, a) for q, (im, mcq, a, _, _) in BASELINE.items() if not mcq],
        "episodes": [row(q, im, mcq, a) for q, (im, mcq, a) in EPISODES.items()],
        "oracle": [
            {**row(q, im, mcq, a), "target_layouts": t, "layout_infos": ORACLE_LAYOUTS}
            for q, (im, mcq, a, t, _) in ORACLE.items()
        ],
    }
    out = {}
    for name, rows in files.items():
        out[name] = img_dir / f"{name}.jsonl"
        out[name].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out, img_dir


def marker(text: str) -> str:
    m = _MARK.search(text)
    return m.group(1) if m else ""


# ----------------------------------------------------------------------------- scripts
def model_script():
    def script(req: dict, call: Call) -> Reply:
        _, _, _, text, finish = BASELINE[marker(request_text(req))]
        return chat([text] * call.n, finish_reason=finish)

    return script


def oracle_model_script():
    def script(req: dict, call: Call) -> Reply:
        reply = ORACLE[marker(request_text(req))][4]
        return chat([reply] * call.n)

    return script


def judge_script():
    def script(req: dict, call: Call) -> Reply:
        prompt = request_text(req)
        q = marker(prompt)
        if prompt.startswith("You are given a multiple-choice question"):
            return chat(JUDGE_REPLIES["mcq"].get(q, "none"))
        if prompt.startswith("You are given a question and a model-generated response"):
            return chat(JUDGE_REPLIES["open"].get(q, "none"))
        if "GT Answer:" in prompt:
            return chat(JUDGE_REPLIES["verify"])
        return error(400, "unexpected judge prompt")

    return script


def reasoner_script():
    def script(req: dict, call: Call) -> Reply:
        q = marker(request_text(req))
        turn = sum(m["role"] == "assistant" for m in req["messages"])
        return chat(REASONER_TURNS[q][turn])

    return script


def searcher_script():
    def script(req: dict, call: Call) -> Reply:
        first = user_message_text(req, 0)
        desc = next(d for d in SEARCHER_TURNS if f"Locate {d}." in first)
        turn = sum(m["role"] == "assistant" for m in req["messages"])
        return chat(SEARCHER_TURNS[desc][turn])

    return script


def combined_script():
    """One endpoint for everything, dispatched on the request's model name (for the CLI run)."""
    scripts = {
        "golden-vlm": model_script(),
        "golden-oracle-vlm": oracle_model_script(),
        "golden-judge": judge_script(),
        "golden-reasoner": reasoner_script(),
        "golden-searcher": searcher_script(),
    }
    return lambda req, call: scripts[req["model"]](req, call)


# ----------------------------------------------------------------------------- reduction
def reduce_image_url(url: str) -> dict:
    """An image data URL as what matters for the protocol: size, format, JPEG quantisation."""
    head, _, data = url.partition(",")
    im = Image.open(io.BytesIO(base64.b64decode(data)))
    out = {"size": list(im.size), "mime": head[len("data:") :].split(";")[0], "mode": im.mode}
    if im.format == "JPEG":
        out["jpeg_qtable0_sum"] = int(sum(im.quantization[0]))  # pins the JPEG quality (PIL default: 75)
    return out


def _reduce(value):
    if isinstance(value, dict):
        if value.get("type") == "image_url" and isinstance(value.get("image_url"), dict):
            iu = dict(value["image_url"])
            iu["url"] = reduce_image_url(iu["url"])
            return {"type": "image_url", "image_url": iu}
        return {k: _reduce(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_reduce(v) for v in value]
    return value


def reduce_request(body: dict) -> dict:
    """A request body with every image replaced by its :func:`reduce_image_url` summary."""
    return _reduce(body)


def label(req: dict) -> str:
    """A stable name for a request: model, question marker, turn (messages so far) and prompt kind."""
    text = request_text(req)
    kind = {
        "You are given a multiple-choice": "mcq-extraction",
        "You are given a question and": "open-extraction",
        "You are given an image-based": "verification",
        "\nYou are given an image-based": "verification",
    }
    k = next((v for p, v in kind.items() if text.startswith(p)), "chat")
    if k == "chat":
        first = user_message_text(req, 0)
        k = f"turn{sum(m['role'] == 'assistant' for m in req['messages'])}"
        desc = re.search(r"Locate (.*?)\.\n", first)
        if desc:
            k += f" search '{desc.group(1)}'"
    return f"{req.get('model')} [{marker(text)}] {k}"


def canonical(reqs: list[dict]) -> list[dict]:
    """Reduced requests in a stable order (servers see concurrent requests in any order)."""
    red = [reduce_request(r) for r in reqs]
    return sorted(red, key=lambda r: (label(r), json.dumps(r, sort_keys=True)))


def _paths(a, b, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(dict.fromkeys([*a, *b])):
            if k not in b:
                out.append(f"{path}.{k}: expected {json.dumps(a[k])[:200]}, missing")
            elif k not in a:
                out.append(f"{path}.{k}: unexpected {json.dumps(b[k])[:200]}")
            else:
                out += _paths(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: expected {len(a)} items, got {len(b)}: {json.dumps(b)[:300]}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _paths(x, y, f"{path}[{i}]")]
    if a != b:
        if isinstance(a, str) and isinstance(b, str):
            i = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return [
                f"{path}: strings differ at char {i}: expected ...{a[max(0, i - 40) : i + 40]!r}..., "
                f"got ...{b[max(0, i - 40) : i + 40]!r}..."
            ]
        return [f"{path}: expected {json.dumps(a)}, got {json.dumps(b)}"]
    return []


def differences(expected: list[dict], got: list[dict]) -> list[str]:
    """Every difference between two canonical request lists, named by request label and field path."""
    exp_by, got_by = {}, {}
    for r in expected:
        exp_by.setdefault(label(r), []).append(r)
    for r in got:
        got_by.setdefault(label(r), []).append(r)
    out = []
    for lab in dict.fromkeys([*exp_by, *got_by]):
        e, g = exp_by.get(lab, []), got_by.get(lab, [])
        if len(e) != len(g):
            out.append(f"{lab}: expected {len(e)} request(s), got {len(g)}")
        for x, y in zip(e, g):
            out += [f"{lab}: {d}" for d in _paths(x, y, "request")]
    return out


def load(name: str) -> list[dict]:
    return json.loads((GOLDEN_DIR / name).read_text(encoding="utf-8"))
