"""Record the baselines' goldens by RUNNING their released evaluation code (tests/golden/README.md, "Baseline
goldens"); compared by tests/agents/test_baseline_goldens.py.

    python tests/golden/record_baseline_goldens.py --deepeyes <DeepEyes git dir> --mini_o3 <Mini-o3 git dir>

Each file is read with ``git show <commit>:<path>`` and executed unchanged; only its heavy imports are stubbed:
DeepEyes's ``eval/eval_vstar.py`` runs with ``torch``/``requests`` stubbed, its module-level ``OpenAI`` client
replaced by a scripted one (the requests it sends are recorded) and its argparse reading a fixed command line;
its ``process`` runs on generated images and annotations. Mini-o3's ``function_tools.py`` runs with ``torch`` stubbed;
``process_image`` and the method ``process_tool_call`` are cut out of ``vllm_async_engine.py`` with ``ast`` and run as
written on a stub ``self`` (a tokenizer that records the text it is given, the README's rollout settings).
No pixels are stored: an image is its size and the sha256 of its RGB bytes.
"""

from __future__ import annotations

import argparse
import ast
import base64
import hashlib
import io
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import types
from pathlib import Path

from PIL import Image

DEEPEYES_COMMIT = "6c5e79671dbff958a6f9d44848ba2ca87854f0b0"
MINI_O3_COMMIT = "8654dbf42d2ea98b9d81b6cc7179026dd0598fdf"
OUT = Path(__file__).resolve().parent / "baselines"
SIZES = [(640, 480), (300, 1200), (1999, 37), (97, 61), (28, 28)]


def make_image(w: int, h: int, seed: int) -> Image.Image:
    """A deterministic RGB image whose crops all differ (a gradient plus seeded noise)."""
    rnd = random.Random(seed)
    im = Image.new("RGB", (w, h))
    im.putdata(
        [((x * 7 + rnd.randrange(9)) % 256, (y * 5) % 256, (x + y + seed) % 256) for y in range(h) for x in range(w)]
    )
    return im


def digest(im: Image.Image) -> dict:
    rgb = im.convert("RGB")
    return {"size": list(rgb.size), "sha256": hashlib.sha256(rgb.tobytes()).hexdigest()}


def _url_digest(url: str) -> dict:
    return digest(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))))


def _show(git_dir: str, commit: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def _stub(name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


# ---------------------------------------------------------------- DeepEyes
def deepeyes_cases() -> list[dict]:
    """Per case: image size, question/options and the scripted replies (valid, out-of-range, malformed calls)."""
    call = '<think>t</think>\n<tool_call>\n{{"name": "image_zoom_in_tool", "arguments": {{"bbox_2d": {box}, "label": "x"}}}}\n</tool_call>'
    cases = []
    rnd = random.Random(35)
    for i, (w, h) in enumerate(SIZES):
        boxes = []
        for _ in range(3):  # inside the image, float coordinates
            x0, y0 = rnd.uniform(0, w * 0.6), rnd.uniform(0, h * 0.6)
            boxes.append(
                [
                    round(x0, 1),
                    round(y0, 1),
                    round(min(w, x0 + rnd.uniform(3, w * 0.4)), 1),
                    round(min(h, y0 + rnd.uniform(3, h * 0.4)), 1),
                ]
            )
        boxes.append([0, 0, w, h])
        boxes.append([2.5, 3.5, 20.5, 27.5])  # half-way values: PIL's round()
        for b in boxes:
            cases.append(
                {
                    "size": [w, h],
                    "replies": [call.format(box=b), "<think>ok</think> <answer>A</answer>"],
                    "out_of_range": False,
                }
            )
        # out of range (the release pads with black; we clamp: a known difference)
        cases.append(
            {
                "size": [w, h],
                "replies": [call.format(box=[-10, -10, w // 2, h // 2]), "<answer>B</answer>"],
                "out_of_range": True,
            }
        )
        # malformed: the episode ends, the reply is the answer
        for bad in ("[1, 2, 3]", "[5, 5, 5, 9]", "[9, 5, 2, 9]", "['a', 1, 2, 3]"):
            cases.append({"size": [w, h], "replies": [call.format(box=bad)], "out_of_range": False})
        cases.append({"size": [w, h], "replies": ["<tool_call>not a literal</tool_call>"], "out_of_range": False})
        # neither a call nor an answer: asked again (11 requests at most)
        cases.append({"size": [w, h], "replies": ["<think>hmm</think>"] * 12, "out_of_range": False})
        # a call and an answer in one reply
        cases.append(
            {
                "size": [w, h],
                "replies": [call.format(box=[0, 0, 10, 10]) + " <answer>C</answer>"],
                "out_of_range": False,
            }
        )
        for c in cases[-14:]:
            c["seed"] = i
            c["question"] = f"What is in picture {i}?"
            c["options"] = ["red", "green", "blue"] if i % 2 == 0 else ["yes", "no"]
    return cases


def record_deepeyes(git_dir: str) -> dict:
    src = _show(git_dir, DEEPEYES_COMMIT, "eval/eval_vstar.py")
    sent: list[dict] = []
    replies: list[str] = []

    class _Completions:
        def create(self, **params):
            sent.append(json.loads(json.dumps(params)))
            text = replies.pop(0)
            msg = types.SimpleNamespace(content=text)
            return types.SimpleNamespace(choices=[types.SimpleNamespace(message=msg)])

    class _OpenAI:
        def __init__(self, **kw):
            self.chat = types.SimpleNamespace(completions=_Completions())

    saved = {k: sys.modules.get(k) for k in ("torch", "requests", "openai")}
    _stub("torch")
    _stub("requests")
    _stub("openai", OpenAI=_OpenAI)
    argv = sys.argv
    out: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        sys.argv = ["eval_vstar.py", "--save_path", tmp, "--eval_model_name", "deepeyes", "--vstar_bench_path", tmp]
        try:
            g: dict = {"__name__": "eval_vstar", "__file__": "eval_vstar.py"}
            exec(compile(src, "eval/eval_vstar.py", "exec"), g)
        finally:
            sys.argv = argv
        for n, case in enumerate(deepeyes_cases()):
            img = make_image(*case["size"], case["seed"])
            name = f"c{n}.jpg"  # the release derives the annotation name from '.jpg'; the file itself is PNG
            img.save(os.path.join(tmp, name), format="PNG")
            with open(os.path.join(tmp, f"c{n}.json"), "w") as f:
                json.dump({"question": case["question"], "options": case["options"]}, f)
            sent.clear()
            replies[:] = list(case["replies"])
            info = g["process"]((name, tmp))
            reqs = []
            for p in sent:
                msgs = []
                for m in p["messages"]:
                    c = m["content"]
                    if isinstance(c, list):
                        c = [
                            {"type": "image", **_url_digest(x["image_url"]["url"])} if x["type"] == "image_url" else x
                            for x in c
                        ]
                    msgs.append({"role": m["role"], "content": c})
                reqs.append({**{k: v for k, v in p.items() if k != "messages"}, "messages": msgs})
            out.append({**case, "requests": reqs, "pred_ans": info["pred_ans"], "status": info["status"]})
    for k, v in saved.items():
        if v is None:
            sys.modules.pop(k, None)
        else:
            sys.modules[k] = v
    return {"commit": DEEPEYES_COMMIT, "file": "eval/eval_vstar.py", "cases": out}


# ---------------------------------------------------------------- DeepEyes: image files and boxes at the edges
EXIF_ORIENTATION = 0x0112


def make_file(kind: str, path: str) -> None:
    """The image file of a ``deepeyes_file_cases`` kind: a mode or a format the release handles its own way."""
    im = make_image(120, 90, 7)
    if kind == "palette":
        im.convert("P").save(path, format="PNG")
    elif kind == "rgba":
        rgba = im.convert("RGBA")
        rgba.putalpha(Image.linear_gradient("L").resize(im.size))
        rgba.save(path, format="PNG")
    elif kind == "gray_alpha":
        im.convert("LA").save(path, format="PNG")
    elif kind == "cmyk":
        im.convert("CMYK").save(path, format="JPEG", quality=90)
    elif kind == "exif_rotated":
        exif = Image.Exif()
        exif[EXIF_ORIENTATION] = 6
        im.save(path, format="JPEG", quality=90, exif=exif.tobytes())
    else:
        im.save(path, format="PNG")


def mode_digest(url: str) -> dict:
    """A sent image by its label, its file's sha256, and its pixels in their own mode (no RGB conversion)."""
    label, b64 = url.split(",", 1)
    raw = base64.b64decode(b64)
    im = Image.open(io.BytesIO(raw))
    return {
        "label": label,
        "file_sha256": hashlib.sha256(raw).hexdigest(),
        "mode": im.mode,
        "size": list(im.size),
        "sha256": hashlib.sha256(im.tobytes()).hexdigest(),
    }


def deepeyes_file_cases() -> list[dict]:
    """Image modes, formats and boxes where the release's behaviour is its own (palette/RGBA cropped in their
    mode, CMYK ends the episode, EXIF sent raw, a box outside the image or of zero size, no options)."""
    call = '<tool_call>\n{{"name": "image_zoom_in_tool", "arguments": {{"bbox_2d": {box}}}}}\n</tool_call>'
    inside = [10.4, 12.5, 70.6, 61]
    out = [
        {"kind": k, "box": inside, "options": ["red", "blue"]}
        for k in ("palette", "rgba", "gray_alpha", "cmyk", "exif_rotated")
    ]
    out += [
        {"kind": "rgb", "box": [200, 150, 260, 230], "options": ["red", "blue"]},  # wholly outside: black crop
        {"kind": "rgb", "box": [-40, -30, -5, -2], "options": ["red", "blue"]},  # wholly outside, above-left
        {"kind": "rgb", "box": [20, 0, 20, 200], "options": ["red", "blue"]},  # zero width, no division: black
        {"kind": "rgb", "box": [20, 10, 20, 40], "options": ["red", "blue"]},  # zero width: smart_resize divides by 0
        {"kind": "rgb", "box": [0, 30, 120, 30], "options": ["red", "blue"]},  # zero height, no division: black
        {"kind": "rgb", "box": inside, "options": []},  # no options: the release's row writer crashes
    ]
    for c in out:
        c["replies"] = [call.format(box=c["box"]), "<think>seen</think> <answer>A</answer>"]
        c["question"] = f"What is in the {c['kind']} picture?"
    return out


def record_deepeyes_files(git_dir: str) -> dict:
    src = _show(git_dir, DEEPEYES_COMMIT, "eval/eval_vstar.py")
    sent: list[dict] = []
    replies: list[str] = []

    class _Completions:
        def create(self, **params):
            sent.append(json.loads(json.dumps(params)))
            msg = types.SimpleNamespace(content=replies.pop(0))
            return types.SimpleNamespace(choices=[types.SimpleNamespace(message=msg)])

    class _OpenAI:
        def __init__(self, **kw):
            self.chat = types.SimpleNamespace(completions=_Completions())

    saved = {k: sys.modules.get(k) for k in ("torch", "requests", "openai")}
    _stub("torch")
    _stub("requests")
    _stub("openai", OpenAI=_OpenAI)
    argv = sys.argv
    out: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        sys.argv = ["eval_vstar.py", "--save_path", tmp, "--eval_model_name", "deepeyes", "--vstar_bench_path", tmp]
        try:
            g: dict = {"__name__": "eval_vstar", "__file__": "eval_vstar.py"}
            exec(compile(src, "eval/eval_vstar.py", "exec"), g)
        finally:
            sys.argv = argv
        for n, case in enumerate(deepeyes_file_cases()):
            name = f"f{n}.jpg"  # the release derives the annotation's name from '.jpg'
            make_file(case["kind"], os.path.join(tmp, name))
            with open(os.path.join(tmp, f"f{n}.json"), "w") as f:
                json.dump({"question": case["question"], "options": case["options"]}, f)
            sent.clear()
            replies[:] = list(case["replies"])
            try:
                info = g["process"]((name, tmp))
                result = {"pred_ans": info["pred_ans"], "status": info["status"]}
            except Exception as e:  # the release's own crash (no options: options[0] when writing the row)
                result = {"crash": f"{type(e).__name__}: {e}"}
            reqs = []
            for p in sent:
                msgs = []
                for m in p["messages"]:
                    c = m["content"]
                    if isinstance(c, list):
                        c = [
                            {"type": "image", **mode_digest(x["image_url"]["url"])} if x["type"] == "image_url" else x
                            for x in c
                        ]
                    msgs.append({"role": m["role"], "content": c})
                reqs.append({**{k: v for k, v in p.items() if k != "messages"}, "messages": msgs})
            out.append({**case, "requests": reqs, **result})
    for k, v in saved.items():
        if v is None:
            sys.modules.pop(k, None)
        else:
            sys.modules[k] = v
    return {"commit": DEEPEYES_COMMIT, "file": "eval/eval_vstar.py", "pillow": Image.__version__, "cases": out}


# ---------------------------------------------------------------- Mini-o3
def mini_o3_scoring_cases() -> list[dict]:
    """Last turns the validation scores: a tool call with an answer (the episode ends at the round limit), a turn cut
    at the length limit with an answer, and turns without one."""
    call = '<grounding>{"bbox_2d": [0.1, 0.1, 0.5, 0.5], "source": "original_image"}</grounding>'
    return [
        {"last": f"<think>look again</think> <answer>B</answer> {call}", "answer": "B"},
        {"last": f"<think>zoom</think> {call}", "answer": "B"},
        {"last": "<think>so</think> <answer>B</answer>", "answer": "B", "finish_reason": "length"},
        {"last": "<think>so it is B and the", "answer": "B", "finish_reason": "length"},
        {"last": "<think>done</think> <answer>(B) blue</answer>", "answer": "B"},
    ]


def record_mini_o3_scoring(git_dir: str) -> dict:
    """The release's validation accuracy (``inner_acc_reward``, run as written) of each case's last turn."""
    src = _show(git_dir, MINI_O3_COMMIT, "verl/utils/reward_score/general_qa_tool_mc.py")
    g: dict = {"__name__": "general_qa_tool_mc"}
    exec(compile(src, "general_qa_tool_mc.py", "exec"), g)
    cases = []
    for case in mini_o3_scoring_cases():
        score = g["inner_acc_reward"]("q", ["<think>first</think> " + "x", case["last"]], case["answer"])
        cases.append({**case, "release_acc": score})
    return {"commit": MINI_O3_COMMIT, "file": "verl/utils/reward_score/general_qa_tool_mc.py", "cases": cases}


def _cut(src: str, name: str) -> str:
    """The source of the function or method ``name`` in ``src`` (dedented)."""
    tree = ast.parse(src)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            lines = src.splitlines()[node.lineno - 1 : node.end_lineno]
            indent = len(lines[0]) - len(lines[0].lstrip())
            return "\n".join(ln[indent:] for ln in lines)
    raise KeyError(name)


def mini_o3_cases() -> list[dict]:
    rnd = random.Random(3)
    cases = []
    sources = [
        "original_image",
        "observation_1",
        "observation_2",
        "observation_0",
        "observation_9",
        "obs",
        "observation_",
    ]
    for i, (w, h) in enumerate(SIZES):
        # a chain of calls on one image: relative boxes, random sources, malformed ones in between
        replies = []
        for _ in range(10):
            kind = rnd.random()
            x0, y0 = round(rnd.uniform(0, 0.7), 3), round(rnd.uniform(0, 0.7), 3)
            x1, y1 = round(min(1.0, x0 + rnd.uniform(0.0, 0.5)), 3), round(min(1.0, y0 + rnd.uniform(0.0, 0.5)), 3)
            src = rnd.choice(sources)
            if kind < 0.6:
                body = f'{{"bbox_2d": [{x0}, {y0}, {x1}, {y1}], "source": "{src}"}}'
            elif kind < 0.7:
                body = f'{{"bbox_2d": [{x0}, {y0}, {x1}], "source": "{src}"}}'
            elif kind < 0.8:
                body = f'{{"bbox_2d": [{x0}, {y0}, {x0}, {y1}], "source": "original_image"}}'
            elif kind < 0.9:
                body = f'{{"bbox_2d": [{x0} {y0}, {x1}, {y1}], "source": "original_image"}}'
            else:
                body = f'{{"bbox_2d": [-0.2, -0.1, 1.3, 1.2], "source": \'{src}\'}}'
            replies.append(f"<think>step</think> <grounding>{body}</grounding>")
        replies.append("<grounding>nothing here</grounding>")
        cases.append({"size": [w, h], "seed": i, "replies": replies})
    return cases


def record_mini_o3(git_dir: str) -> dict:
    tools_src = _show(git_dir, MINI_O3_COMMIT, "verl/workers/rollout/vllm_rollout/function_tools.py")
    engine_src = _show(git_dir, MINI_O3_COMMIT, "verl/workers/rollout/vllm_rollout/vllm_async_engine.py")
    consts_src = _show(git_dir, MINI_O3_COMMIT, "verl/trainer/constants.py")
    dataset_src = _show(git_dir, MINI_O3_COMMIT, "verl/utils/dataset/multimodal_dataset.py")
    saved = sys.modules.get("torch")
    _stub("torch", zeros=lambda n, dtype=None, device=None: [0] * n)
    tools: dict = {"__name__": "function_tools"}
    exec(compile(tools_src, "function_tools.py", "exec"), tools)
    consts: dict = {}
    exec(compile(consts_src, "constants.py", "exec"), consts)
    engine: dict = {
        "Image": Image,
        "re": __import__("re"),
        "os": os,
        "torch": sys.modules["torch"],
        "prepare_grounding_inputs_multi_turn": tools["prepare_grounding_inputs_multi_turn"],
        "crop_image": tools["crop_image"],
        "TOOL_CALL_CROP_MULTI_TRUN_PROMPT": consts["TOOL_CALL_CROP_MULTI_TRUN_PROMPT"],
        "ERROR_INFO_MULTI_TURN_PROMPT": consts["ERROR_INFO_MULTI_TURN_PROMPT"],
        "Any": object,
        "math": math,
    }
    exec(compile(_cut(engine_src, "process_image"), "vllm_async_engine.py:process_image", "exec"), engine)
    exec(compile(_cut(engine_src, "process_tool_call"), "vllm_async_engine.py:process_tool_call", "exec"), engine)
    data: dict = {"np": __import__("numpy"), "math": math, "os": os}
    exec(compile(_cut(dataset_src, "process_image"), "multimodal_dataset.py:process_image", "exec"), data)

    texts: list[str] = []
    tokenizer = types.SimpleNamespace(encode=lambda t: texts.append(t) or [])
    rollout = types.SimpleNamespace(use_relative_coordinates=True, max_pixels=12845056, min_pixels=3136)
    this = types.SimpleNamespace(
        tokenizer=tokenizer,
        config=types.SimpleNamespace(rollout=rollout),
        max_pixels=12845056,
        min_pixels=3136,
        calculate_image_token_num=lambda im: 1,
        save_traj_and_obs=lambda *a, **k: None,
    )
    out = []
    for case in mini_o3_cases():
        original = make_image(*case["size"], case["seed"])
        first = data["process_image"](original.copy(), 2000000, 40000)
        observations, used = [original], [first.size]
        vllm_input = {"prompt_token_ids": [], "multi_modal_data": {"image": [first]}}
        turns = []
        for it, reply in enumerate(case["replies"]):
            texts.clear()
            mask = [types.SimpleNamespace(dtype=None, device=None)]
            _, tool_out = engine["process_tool_call"](
                this, vllm_input, reply, observations, used, mask, it, False, None, "d"
            )
            turn = {"text": texts[0]}
            if isinstance(tool_out, Image.Image):
                turn["observation"] = digest(tool_out)
                turn["shown"] = digest(vllm_input["multi_modal_data"]["image"][-1])
            turns.append(turn)
        out.append({**case, "first": digest(first), "turns": turns})
    if saved is None:
        sys.modules.pop("torch", None)
    else:
        sys.modules["torch"] = saved
    return {
        "commit": MINI_O3_COMMIT,
        "files": ["function_tools.py", "vllm_async_engine.py", "multimodal_dataset.py", "constants.py"],
        "cases": out,
    }


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--deepeyes", required=True, help="git dir of Visual-Agent/DeepEyes")
    p.add_argument("--mini_o3", required=True, help="git dir of Mini-o3/Mini-o3")
    p.add_argument("--only", nargs="+", default=None, help="record only these files (default: all)")
    a = p.parse_args()
    OUT.mkdir(exist_ok=True)
    recorders = {
        "deepeyes": lambda: record_deepeyes(a.deepeyes),
        "deepeyes_files": lambda: record_deepeyes_files(a.deepeyes),
        "mini_o3": lambda: record_mini_o3(a.mini_o3),
        "mini_o3_scoring": lambda: record_mini_o3_scoring(a.mini_o3),
    }
    for name in a.only or recorders:
        rec = recorders[name]()
        (OUT / f"{name}.json").write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
        print(name, len(rec["cases"]), "cases")


if __name__ == "__main__":
    main()
