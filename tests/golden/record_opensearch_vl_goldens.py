"""Record OpenSearch-VL's goldens by RUNNING its released code (tests/golden/README.md, "OpenSearch-VL goldens");
compared by tests/test_opensearch_vl_goldens.py.

    python tests/golden/record_opensearch_vl_goldens.py --repo <git dir of shawn0728/OpenSearch-VL>

``opensearch_vl/`` and ``RL/rllm/vision_deepresearch_async_workflow/tools/python_interpreter_tool.py`` at c5c02a4 are
exported with ``git archive`` into a temporary directory and imported unchanged. Stubbed: ``requests.post`` /
``requests.get`` inside the release's ``search`` module (a scripted Serper, Jina reader and summariser that record
each request), the model (a runner replaying scripted replies), rLLM's tool base class and ``aiosqlite`` (imported by
the RL tools' ``shared.py``, unused by the interpreter). Real: PIL, OpenCV (opencv-contrib-python-headless), numpy.
No pixels are stored: an image is its size, mode and the sha256 of its RGB bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import types
from pathlib import Path

from PIL import Image

COMMIT = "c5c02a4"
OUT = Path(__file__).resolve().parent / "opensearch_vl"
RL_TOOLS = "RL/rllm/vision_deepresearch_async_workflow/tools"


def make_image(w: int, h: int, seed: int, mode: str = "RGB") -> Image.Image:
    """A deterministic image with structure (a skewed bright quadrilateral on a noisy gradient: perspective_correct
    finds it) in ``mode``."""
    from PIL import ImageDraw

    rnd = random.Random(seed)
    im = Image.new("RGB", (w, h))
    im.putdata(
        [((x * 3 + rnd.randrange(20)) % 256, (y * 2) % 256, (x + y + seed) % 128) for y in range(h) for x in range(w)]
    )
    d = ImageDraw.Draw(im)
    d.polygon([(w * 0.2, h * 0.15), (w * 0.85, h * 0.1), (w * 0.8, h * 0.9), (w * 0.15, h * 0.8)], fill=(245, 245, 240))
    d.text((w * 0.3, h * 0.4), "TOTAL 42", fill=(10, 10, 10))
    return im.convert(mode)


def digest(im: Image.Image) -> dict:
    rgb = im.convert("RGB")
    return {"size": list(rgb.size), "mode": im.mode, "sha256": hashlib.sha256(rgb.tobytes()).hexdigest()}


def export(git_dir: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "--git-dir", git_dir, "archive", COMMIT, "opensearch_vl", f"{RL_TOOLS}/python_interpreter_tool.py",
         f"{RL_TOOLS}/shared.py"], check=True, capture_output=True,
    ).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


# ------------------------------------------------------------------------------------------------ cases
def tool_call_cases() -> list[str]:
    """Replies for ``extract_tool_call`` / ``has_response_tag``."""

    def call(name: str, args: dict, sep: str = "\n") -> str:
        return f"<tool_call>{sep}{json.dumps({'name': name, 'arguments': args})}{sep}</tool_call>"

    out = [
        "<think>crop it</think>\n" + call("crop", {"image": "img_1", "x": 1, "y": 2, "width": 30, "height": 40}),
        call("text_search", {"query": "kessock bridge", "lang": "de"}),
        call("web_search", {"query": "a", "q": "b"}),
        call("local_search", {"query": "x", "top_k": 3}),
        call("image_search", {"url": "img_2"}, sep=""),
        '<tool_call>{"name": "sharpen", "parameters": {"image": "img_1", "amount": 2}}</tool_call>',
        '<tool_call>{"name": "", "arguments": {"q": "x"}}</tool_call><text_search>{"q": "fallback"}</text_search>',
        '<tool_call>{"name": "crop", "arguments": {"image": "img_1"</tool_call>',
        '<tool_call>{"name": "crop", "arguments": [["image", "img_1"]]}</tool_call>',
        '<tool_call>{"name": "crop", "arguments": "img_1"}</tool_call><crop>{"image": "img_1"}</crop>',
        '<tool_call>[1, 2]</tool_call>',
        '<tool_call> {"name": "a"} } </tool_call>',
        '<tool_call>\n{"name": "crop", "arguments": {"image": "img_1", "x": 0}}\n</tool_call> then <tool_call>{"name": "sharpen"}</tool_call>',
        '<tool_call>x</tool_call><tool_call>{"name": "sharpen", "arguments": {"image": "img_3"}}</tool_call>',
        '<tool_call>{"name": "x", "arguments": {"a": "}"}}</tool_call>',
        '<tool_call>{"a": 1}</tool_call>\n</tool_call>',
        "<web_search>{\"query\": \"q1\"}</web_search>",
        "<web_search>plain words</web_search>",
        "<lens_scan>https://x.org/a.png</lens_scan>",
        "<image_search>{\"url\": \"img_1\"}</lens_scan>",
        "<local_search>[1, 2]</local_search>",
        "<ocr>{\"image\": \"img_2\"}</ocr>",
        "<layout_parsing>img_2</layout_parsing>",
        "<crop> {\"image\": \"img_1\", \"x\": 5} </crop>",
        "<perspective_correct>{\"image\": \"img_1\"}</perspective_correct>",
        "<super_resolution>{\"image\": \"img_1\", \"scale\": 2}</super_resolution>",
        "<sharpen>{}</sharpen><crop>{\"image\": \"img_1\"}</crop>",
        "<text_search>{\"q\": \"a\"}</local_search> and <web_search>{\"q\": \"b\"}</web_search>",
        "no call at all",
        "<tool_call></tool_call>",
        "<response>The answer is 4.</response>",
        "<response>boxed{4}",
        "<response> unfinished",
        "<think>x</think><response>\\boxed{12}</response><tool_call>{\"name\": \"crop\"}</tool_call>",
        '<tool_call>\t{"name": "crop", "arguments": {"image": "img_1", "x": "10", "y": 1.5, "width": true, "height": 3}}\u00a0</tool_call>',
    ]
    rnd = random.Random(7)
    pieces = ["<tool_call>", "</tool_call>", "{", "}", '"name": "crop"', ", ", '"arguments": {}', " ", "\n", "x",
              "<crop>", "</crop>", "<ocr>", "</layout_parsing>", '{"q": 1}', "<response>", "</response>"]  # fmt: skip
    for _ in range(60):
        out.append("".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 14))))
    return out


def final_answer_cases() -> list[str]:
    rnd = random.Random(11)
    out = [
        "", "\\boxed{42}", "x \\boxed{\\text{Paris}} y \\boxed{3}", "\\boxed{a{b}c} and more", "\\boxed{unclosed",
        "\\boxed{}<answer> A </answer>", "<answer>one</answer><answer>two</answer>", "<response>\nR\n</response>",
        "<response>no close", "<think>t</think> final <tool_call>{}</tool_call> words", "<think>t</think><tool_call>x</tool_call>",
        "a" * 2500, "<think>a</think>" + "b" * 2500, "\\boxed{50\\%} \\boxed{\\#1}",
        "\\boxed{ \\text{x} \\text{y}}", "<answer></answer> \\boxed{ }",
    ]  # fmt: skip
    pieces = ["\\boxed{", "{", "}", "<answer>", "</answer>", "<response>", "</response>", "</think>", "<tool_call>",
              "</tool_call>", "text", " ", "\n", "\\text{", "\\%"]  # fmt: skip
    for _ in range(60):
        out.append("".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 16))))
    return out


JUDGE_REPLIES = ["correct: yes\nreasoning: ok", "Correct: NO", "correct:   Yes", "incorrect: yes", "correct: maybe",
                 "", "reasoning: x\ncorrect: no\ncorrect: yes", "CORRECT:yes"]  # fmt: skip

PYTHON_CASES = [
    "print(1 + 1)", "x = 5\ny = [1, 2]", "import math\nprint(math.sqrt(16))", "print('a'); print('b')",
    "raise ValueError('boom')", "import os", "open('x')", "print(__import__('json').dumps({'a': 1}))",
    "import socket", "print(sum(range(10)))", "import numpy as np\nprint(np.arange(4).sum())", "pass",
    "print(len('héllo'))", "a = 1\nprint(a)\nb = 2", "print(undefined_name)",
]  # fmt: skip

TOOL_CASES = [
    ("crop", {"image": "img_1", "x": 10, "y": 20, "width": 50, "height": 40}),
    ("crop", {"image": "img_1", "x": -20, "y": -10, "width": 60, "height": 50}),
    ("crop", {"image": "img_1", "x": 0, "y": 0, "width": 0, "height": 5}),
    ("crop", {"image": "img_7", "x": 0, "y": 0, "width": 5, "height": 5}),
    ("crop", {"x": 0, "y": 0, "width": 5, "height": 5}),
    ("crop", {"image": "img_1", "x": "3", "y": 2.7, "width": "20", "height": 10}),
    ("sharpen", {"image": "img_1"}),
    ("sharpen", {"image": "img_1", "amount": 0.5}),
    ("sharpen", {"image": "img_9"}),
    ("perspective_correct", {"image": "img_1"}),
    ("super_resolution", {"image": "img_1", "scale": 2}),
    ("super_resolution", {"image": "img_1"}),
    ("super_resolution", {}),
    ("layout_parsing", {"image": "img_5"}),
    ("layout_parsing", {}),
    ("no_such_tool", {"a": 1}),
    ("text_search", {}),
]
SIZES = [(160, 120), (90, 200)]
MODES = ["RGB", "RGBA", "L"]


# ------------------------------------------------------------------------------------------------ running
class FakeResponse:
    def __init__(self, status: int, payload: object):
        self.status_code, self._payload = status, payload
        self.text = payload if isinstance(payload, str) else json.dumps(payload)

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            raise RuntimeError(f"{self.status_code} Error")

    def json(self) -> object:
        if isinstance(self._payload, str):
            raise ValueError("not json")
        return self._payload


SEARCH_CASES = [
    # (query, top_k, serper organic, jina contents by url, summaries by title or None for a failing summariser)
    ("kessock bridge", 2, [{"link": "https://a.org/k", "title": "Kessock", "snippet": "snip k"},
                           {"link": "https://b.org/x", "title": "Other", "snippet": "snip x"}],
     {"https://a.org/k": "Kessock page " * 80}, {"Kessock": "It opened in 1982.", "Other": None}),
    ("nothing", 5, [], {}, {}),
    ("no reader", 3, [{"link": "https://c.org/c", "title": "C", "snippet": "only the snippet"}, {"title": "no link",
     "snippet": "s2"}], {}, {"C": None, "no link": "summary two"}),
]  # fmt: skip


def record_search(search_mod: types.ModuleType, config_mod: types.ModuleType) -> list[dict]:
    out = []
    for query, top_k, organic, pages, summaries in SEARCH_CASES:
        seen: list[dict] = []

        def post(
            url: str, headers: dict | None = None, json: dict | None = None, timeout: float = 0, **kw: object
        ) -> FakeResponse:
            seen.append({"method": "POST", "url": url, "headers": headers, "json": json, "timeout": timeout})  # noqa: B023 (called within this iteration)
            if url == config_mod.SERPER_SEARCH_URL:
                return FakeResponse(200, {"organic": organic})  # noqa: B023 (called within this iteration)
            title = json["messages"][0]["content"].split("Webpage Title: ", 1)[1].split("\n", 1)[0]
            s = summaries.get(title)  # noqa: B023 (called within this iteration)
            return (
                FakeResponse(200, {"choices": [{"message": {"content": f"  {s}  "}}]})
                if s
                else FakeResponse(500, "down")
            )

        def get(url: str, headers: dict | None = None, timeout: float = 0, **kw: object) -> FakeResponse:
            seen.append({"method": "GET", "url": url, "headers": headers, "timeout": timeout})  # noqa: B023 (called within this iteration)
            page = url.split("r.jina.ai/", 1)[1]
            return FakeResponse(200, {"data": {"content": pages[page]}}) if page in pages else FakeResponse(404, "no")  # noqa: B023 (called within this iteration)

        search_mod.requests = types.SimpleNamespace(post=post, get=get)  # type: ignore[attr-defined]
        config_mod.SERPER_API_KEY = "serper-test-key"
        config_mod.JINA_API_KEY = "jina-test-key"
        obs = search_mod.text_search(query=query, lang="en", top_k=top_k)
        out.append({"query": query, "top_k": top_k, "organic": organic, "pages": pages, "summaries": summaries,
                    "observation": obs, "requests": seen})  # fmt: skip
    return out


def record(git_dir: str) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="osvl_release_"))
    export(git_dir, tmp)
    sys.path.insert(0, str(tmp / "opensearch_vl"))
    os.environ.pop("SR_MODEL_PATH", None)
    for k in ("LAYOUT_PARSING_API_URL", "COS_UPLOAD_PATHS", "FVQA_IMAGE_DIR"):
        os.environ.pop(k, None)
    from opensearch_infer import config, pipeline, prompts, search, tools  # the release, unchanged

    work = tmp / "work"
    work.mkdir()
    os.chdir(work)
    rec: dict = {"commit": COMMIT, "system_prompt": prompts.SYSTEM_PROMPT, "tools_definition": tools.get_tools_definition(),
                 "max_turns": config.MAX_TURNS}  # fmt: skip
    rec["tool_calls"] = [
        {"text": t, "call": tools.extract_tool_call(t), "response": tools.has_response_tag(t)}
        for t in tool_call_cases()
    ]
    # execute_tool on files (the FVQA_IMAGE_DIR case: img_1 is a path)
    cases = []
    for (w, h), mode in [(s, m) for s in SIZES for m in MODES]:
        src = work / f"src_{w}x{h}_{mode}.png"
        make_image(w, h, w + h, mode).save(src)
        for k, (name, args) in enumerate(TOOL_CASES):
            paths = {"img_1": str(src)}
            try:
                msg, new = tools.execute_tool(
                    {"name": name, "parameters": args}, paths, "case", 3, k, "intermediate", "fvqa_test"
                )
                made = {i: digest(Image.open(p)) for i, p in new.items()}
                err = None
            except Exception as e:  # the release lets it through (the case is lost)
                msg, made, err = None, {}, f"{type(e).__name__}: {e}"
            cases.append({"size": [w, h], "mode": mode, "name": name, "arguments": args, "turn": k,
                          "message": msg, "new_images": made, "raises": err})  # fmt: skip
    rec["execute_tool"] = cases
    rec["text_search"] = record_search(search, config)
    # the loop: process_single_case with a scripted runner
    rec["episodes"] = record_episodes(pipeline, tools, work)
    rec["python"] = record_python(tmp)
    rec["judge"] = record_judge(tmp)
    return rec


EPISODES = [
    ["<think>a</think>\n<tool_call>\n{\"name\": \"crop\", \"arguments\": {\"image\": \"img_1\", \"x\": 10, \"y\": 5, \"width\": 80, \"height\": 60}}\n</tool_call>",
     "<tool_call>{\"name\": \"sharpen\", \"arguments\": {\"image\": \"img_2\", \"amount\": 1.5}}</tool_call>",
     "<tool_call>{\"name\": \"perspective_correct\", \"arguments\": {\"image\": \"img_1\"}}</tool_call>",
     "<tool_call>{\"name\": \"crop\", \"arguments\": {\"image\": \"img_7\", \"x\": 0, \"y\": 0, \"width\": 5, \"height\": 5}}</tool_call>",
     "<tool_call>{\"name\": \"super_resolution\", \"arguments\": {\"image\": \"img_3\", \"scale\": 4}}</tool_call>",
     "<tool_call>{\"name\": \"visit\", \"arguments\": {\"url\": \"x\"}}</tool_call>",
     "<think>done</think>\n<response>\nIt is 42.\n\n\\boxed{42}\n</response>", "never asked"],
    ["thinking only, no call", "never asked"],
    ["", "<tool_call>{\"name\": \"crop\", \"arguments\": {\"image\": \"img_1\", \"x\": 0, \"y\": 0, \"width\": 0, \"height\": 1}}</tool_call>"],
    ["<sharpen>{\"image\": \"img_1\"}</sharpen>", "<crop>{\"image\": \"img_2\", \"x\": 1, \"y\": 1, \"width\": 20, \"height\": 20}</crop>",
     "<response>boxed{7}", "never asked"],
]  # fmt: skip


def _parts(parts: list[dict]) -> list[dict]:
    out = []
    for p in parts:
        if "text" in p:
            out.append({"text": p["text"]})
        elif "inline_data" in p:
            import base64

            out.append({"image": digest(Image.open(io.BytesIO(base64.b64decode(p["inline_data"]["data"]))))})
        else:
            out.append({"other": sorted(p)})
    return out


def record_episodes(pipeline: types.ModuleType, tools: types.ModuleType, work: Path) -> list[dict]:
    out = []
    for n, replies in enumerate(EPISODES):
        img = make_image(140, 100, 50 + n)
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        script = list(replies)
        seen: list[list[dict]] = []

        class Runner:
            def infer(self, contents: list, system_instruction: str | None = None, cfg: object = None) -> dict:
                seen.append([{"role": c["role"], "parts": _parts(c["parts"])} for c in contents])  # noqa: B023 (called within this iteration)
                seen[-1].insert(0, {"system": system_instruction})  # noqa: B023 (called within this iteration)
                return {"candidates": [{"content": {"role": "model", "parts": [{"text": script.pop(0)}]}}]}  # noqa: B023 (called within this iteration)

        row = {"data_id": f"ep{n}", "prompt": [{"role": "user", "content": f"Question {n}: what is shown?"}],
               "images": [{"bytes": buf.getvalue()}]}  # fmt: skip
        traj = pipeline.process_single_case(row, Runner(), ".", n, dataset_type="test")
        out.append({"size": [140, 100], "seed": 50 + n, "question": row["prompt"][0]["content"], "replies": replies,
                    "requests": seen, "final_response_text": traj["final_response_text"],
                    "tool_outputs": [t.get("tool_output") for t in traj["turns"]]})  # fmt: skip
    return out


def record_python(tmp: Path) -> list[dict]:
    """``PythonInterpreterTool.call`` (its module executed unchanged; rLLM's base class and aiosqlite stubbed)."""
    aiosqlite = types.ModuleType("aiosqlite")
    aiosqlite.Connection = object  # type: ignore[attr-defined]
    sys.modules["aiosqlite"] = aiosqlite
    rllm = types.ModuleType("rllm")
    tb = types.ModuleType("rllm.tools.tool_base")

    class RLLMTool:
        def __init__(self, name: str = "", description: str = "", parameters: dict | None = None, **kw: object):
            self.name = name

    tb.Tool = RLLMTool  # type: ignore[attr-defined]
    sys.modules.update({"rllm": rllm, "rllm.tools": types.ModuleType("rllm.tools"), "rllm.tools.tool_base": tb})
    pkg = types.ModuleType("vision_deepresearch_async_workflow")
    pkg.__path__ = [str(tmp / "RL/rllm/vision_deepresearch_async_workflow")]  # type: ignore[attr-defined]
    sys.modules["vision_deepresearch_async_workflow"] = pkg
    sys.path.insert(0, str(tmp / "RL/rllm"))
    from vision_deepresearch_async_workflow.tools import python_interpreter_tool as pit

    tool = pit.PythonInterpreterTool()
    if not hasattr(tool, "executor"):
        tool.executor = None
    return [{"code": c, "result": asyncio.run(tool.call(code=c))} for c in PYTHON_CASES]


def record_judge(tmp: Path) -> dict:
    sys.path.insert(0, str(tmp / "opensearch_vl"))
    import eval_with_gpt4o as ev

    return {
        "prompt": ev.JUDGE_PROMPT,
        "final_answers": [{"text": t, "answer": ev.extract_final_answer(t)} for t in final_answer_cases()],
        "verdicts": [{"reply": r, "acc": ev.parse_judge_response(r)["acc"]} for r in JUDGE_REPLIES],
        "judge_prompt": ev.JUDGE_PROMPT.format(question="Q?", correct_answer="1982", response=("r" * 9000)[:8000]),
    }


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--repo", required=True, help="git dir of shawn0728/OpenSearch-VL")
    a = p.parse_args()
    rec = record(a.repo)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "release.json").write_text(json.dumps(rec, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print("opensearch_vl goldens:", {k: len(v) for k, v in rec.items() if isinstance(v, list)})


if __name__ == "__main__":
    main()
