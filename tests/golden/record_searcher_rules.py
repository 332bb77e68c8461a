"""Record ``tests/golden/searcher_rules.json`` by running the authors' verl fork's own functions, unchanged.

The files are extracted with ``git show <commit>:<path>`` from a repository holding the fork's history (the
authors' ``m-Just/InSight-doc``; ``926d137`` is the commit ``m-Just/InSight-o3`` pins as its ``verl`` submodule)
into a temporary directory: ``verl/utils/vsearch.py`` (``parse_bbox``, ``resize_bbox``),
``verl/utils/reward_score/vsearch_batch.py`` (``parse_response``, ``compute_score_single_vsearch_base``: the format
verdict, the tool boxes, the extracted answer, ``n_valid_tool_calls``) and ``verl/tools/image_zoom_in_tool.py``
(``ImageZoomInTool._validate_bbox`` / ``_maybe_resize_bbox``, cut out with ``ast``). Stubbed: ``requests``,
``openai.AsyncOpenAI``, ``qwen_vl_utils.vision_process.to_rgb`` (not called), the released
``insight_o3.utils.api`` (no API call is made) and the role-play prompt module. Deterministic; needs only Pillow::

    .venv/bin/python tests/golden/record_searcher_rules.py --repo /path/to/InSight-doc.git --commit 926d137 \\
        --out tests/golden/searcher_rules.json
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import importlib.util
import json
import logging
import subprocess
import sys
import tempfile
import textwrap
import types
from pathlib import Path

FILES = ("verl/utils/vsearch.py", "verl/utils/reward_score/vsearch_batch.py", "verl/tools/image_zoom_in_tool.py")


def load_fork(repo: str, commit: str, root: Path):
    for f in FILES:
        dst = root / f
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(
            subprocess.run(["git", "-C", repo, "show", f"{commit}:{f}"], check=True, capture_output=True).stdout
        )
    stubs = {
        "requests": {},
        "openai": {"AsyncOpenAI": type("AsyncOpenAI", (), {})},
        "qwen_vl_utils": {},
        "qwen_vl_utils.vision_process": {"to_rgb": lambda im: im},
        "insight_o3": {},
        "insight_o3.utils": {},
        "insight_o3.utils.api": {"create_async_openai_client": lambda *a, **k: None, "query_api": None},
        "verl": {},
        "verl.utils": {},
        "verl.utils.reward_score": {},
        "verl.utils.vsearch_role_play_prompt": {"qa_verify": "{question}{gt_answer}{model_answer}"},
    }
    saved = {k: sys.modules.get(k) for k in stubs}
    for name, attrs in stubs.items():
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m

    def load(name: str, path: Path):
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        m = importlib.util.module_from_spec(spec)
        sys.modules[name] = m
        spec.loader.exec_module(m)
        return m

    vsearch = load("verl.utils.vsearch", root / FILES[0])
    batch = load("verl.utils.reward_score.vsearch_batch", root / FILES[1])
    src = (root / FILES[2]).read_text()
    cls = next(n for n in ast.parse(src).body if isinstance(n, ast.ClassDef) and n.name == "ImageZoomInTool")
    meths = [
        n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in ("_validate_bbox", "_maybe_resize_bbox")
    ]
    code = (
        "import logging\nfrom math import ceil, floor\nfrom typing import Optional\nlogger = logging.getLogger('t')\n"
    )
    code += "class Tool:\n    MIN_DIMENSION = 28\n" + "\n".join(
        textwrap.indent(ast.get_source_segment(src, m) or "", "    ") for m in meths
    )
    ns: dict = {}
    exec(code, ns)
    for k, v in saved.items():  # leave this interpreter's own modules as they were
        if v is None:
            sys.modules.pop(k, None)
        else:
            sys.modules[k] = v
    return vsearch, batch, ns["Tool"]()


def record(vsearch, batch, tool) -> dict:
    out: dict = {}
    # parse_response
    resp = [
        "<think>a</think><tool_call>x</tool_call>",
        " \n<think>a</think>\n<tool_call>x</tool_call>\n ",
        "Sure <think>a</think><tool_call>x</tool_call>",
        "<think>a</think><tool_call>x</tool_call> ok",
        "<think>a</think><tool_call>x</tool_call><answer>y</answer>",
        "<think>a<tool_call>b</think><tool_call>x</tool_call>",
        "<think>a</think><tool_call>x",
        "<tool_call>x</tool_call>",
        "<think>a</think><tool_call>x</tool_call><tool_call>y</tool_call>",
        "<think></think><tool_call></tool_call>",
    ]
    pr = []
    for r in resp:
        try:
            pr.append([r, batch.parse_response(r, required_tags=["think", "tool_call"], excluded_tags=["answer"])])
        except batch.ParseError:
            pr.append([r, None])
    out["parse_response"] = pr
    # parse_bbox
    pb = []
    for t in [
        "[1, 2, 3, 4]",
        "[0,0,0,0]",
        "[0.0, 0, 0, 0]",
        "[1.0, 2, 3, 4]",
        "[-1, 2, 3, 4]",
        "[3, 2, 1, 4]",
        "[1, 2, 3]",
        "[true, 2, 3, 4]",
        "1234",
        "[1, 2, 3, 4] x",
        " [5, 6, 70, 80] ",
        "[1, 1, 1, 2]",
        "{\"a\": 1, \"b\": 2, \"c\": 3, \"d\": 4}",
        "\"abcd\"",
    ]:
        try:
            b = vsearch.parse_bbox(t)
            pb.append([t, list(b)])
        except Exception:
            pb.append([t, None])
    out["parse_bbox"] = pb
    # resize_bbox
    rb = []
    for b, s, t in [
        ((10, 20, 200, 150), (462, 336), (700, 500)),
        ((1, 1, 3, 3), (100, 100), (150, 150)),
        ((5, 5, 15, 15), (10, 10), (25, 25)),
        ((0, 0, 1, 1), (56, 56), (20, 20)),
        ((7, 3, 9, 11), (14, 6), (21, 9)),
    ]:
        try:
            rb.append([list(b), list(s), list(t), list(vsearch.resize_bbox(b, s, t))])
        except ValueError:
            rb.append([list(b), list(s), list(t), None])
    out["resize_bbox"] = rb
    # zoom box

    zb = []
    for box, iw, ih, rw, rh in [
        ([10, 20, 200, 150], 700, 504, 462, 336),
        ([100, 100, 110, 105], 700, 504, 462, 336),
        ([0, 0, 3, 300], 700, 504, 462, 336),
        ([-50, -50, 10000, 10000], 700, 504, 462, 336),
        ([300, 300, 10, 10], 700, 504, 462, 336),
        ([0, 0, 300, 2], 700, 504, 462, 336),
        ([455, 330, 462, 336], 700, 504, 462, 336),
        ([10.5, 20.25, 30.75, 40.5], 1000, 1000, 1000, 1000),
        ([1, 1, 2, 2], 30, 30, 30, 30),
    ]:
        zb.append([box, iw, ih, rw, rh, tool._maybe_resize_bbox(list(box), iw, ih, rw, rh)])
    out["zoom_box"] = zb
    # format verdicts (out-of-loop and in-loop)
    T = '<think>t</think>\n<tool_call>\n{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": %s}}\n</tool_call>'
    A = '<think>t</think>\n<answer>%s</answer>'
    R = "user\n<tool_response></tool_response>\nThink first\nassistant\n"
    sols = [
        A % "[1, 2, 30, 40]" + "\n",
        A % "[0, 0, 0, 0]",
        T % "[1, 2, 30, 40]" + "\n" + R + A % "[1, 2, 30, 40]",
        T % "[1, 2, 30, 40]" + "\n" + R + A % "top left",
        T % "[1.0, 2, 30, 40]" + "\n" + R + A % "[1, 2, 30, 40]",
        T % "[-1, 2, 30, 40]" + "\n" + R + A % "[1, 2, 30, 40]",
        T % "[500, 500, 600, 600]" + "\n" + R + A % "[1, 2, 30, 40]",
        T % "[1, 2, 30, 40]",
        "x " + A % "[1, 2, 30, 40]",
        A % "[1, 2, 30, 40]" + A % "[1, 2, 30, 40]",
        "<think>a user\nb</think><answer>[1, 2, 30, 40]</answer>",
        "<think>a assistant\n<answer>[1, 2, 30, 40]</answer></think>",
        A % "[1, 2, 30, 40]" + " done",
        T % "[1, 2, 30, 40]" + "\n" + R + T % "[3, 4, 50, 60]" + "\n" + R + A % "[0, 0, 0, 0]",
        "<answer>[1, 2, 30, 40]</answer>",
    ]
    fv = []
    extra = {"image_processed_wh": [(100, 80)], "image_ori_wh": [(200, 160)]}
    kw = {
        "reward_type": "conditioned_on_tool_reward",
        "reward_weights": {"format": 0.2, "accuracy": 0.8, "iou": 0.8, "tool": 1.0},
        "format_reward": {"must_have_answer": True, "skip_last_response_if_empty": False},
        "tool_reward": {"max_consecutive_iou": 0.6},
    }

    def cef(a):
        try:
            return vsearch.parse_bbox(a)
        except Exception:
            return None

    for sol in sols:
        row = [sol]
        for fn in (cef, None):
            score, info = asyncio.run(
                batch.compute_score_single_vsearch_base(sol, extra, core_answer_extraction_fn=fn, **kw)
            )
            ans = score.extracted_answer
            row.append(
                [
                    score.format_reward,
                    [list(b) for b in info.get("bboxes", [])],
                    list(ans) if isinstance(ans, tuple) else ans,
                    score.n_valid_tool_calls,
                ]
            )
        fv.append(row)
    out["format_verdict"] = {"frame_wh": [100, 80], "cases": fv}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--repo", required=True)
    ap.add_argument("--commit", default="926d137")
    ap.add_argument("--out", default=str(Path(__file__).parent / "searcher_rules.json"))
    a = ap.parse_args()
    logging.disable(logging.CRITICAL)
    with tempfile.TemporaryDirectory() as tmp:
        vsearch, batch, tool = load_fork(a.repo, a.commit, Path(tmp))
        out = record(vsearch, batch, tool)
    meta = json.loads(Path(a.out).read_text())["meta"] if Path(a.out).exists() else {}
    Path(a.out).write_text(json.dumps({"meta": meta, **out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
