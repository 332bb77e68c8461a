"""Record Pixel-Reasoner's goldens by RUNNING its released evaluation code (tests/golden/README.md, "Baseline
goldens"); compared by tests/agents/test_baseline_goldens.py.

    python tests/golden/record_pixel_reasoner_goldens.py --repo <git dir of TIGER-AI-Lab/Pixel-Reasoner> \\
        --chat_template <a Qwen2.5-VL chat_template.json>

Run it in a scratch venv with ``qwen-agent==0.0.20``, ``qwen-vl-utils==0.0.11``, ``jinja2``, ``numpy`` and
``pillow`` (the release imports them; it pins neither). From ``curiosity_driven_rl/openrlhf`` at
:data:`COMMIT`, read with ``git show``: the tool classes, ``parse_last_tool``, ``execute_tool``,
``get_required_messages``, ``get_prompt_from_messages``, ``resize_cropped`` and the method
``RemoteExperienceMaker._generate_vllm`` (the evaluation's multi-turn loop) are cut out of
``trainer/ppo_utils/experience_maker.py`` with ``ast`` and executed as written; ``datasets/prompts_dataset.py`` is
executed whole (its ``torch`` import stubbed) and ``PromptDataset.preprocess_data`` builds each question's prompt with
``--system_prompt vcot``; ``Qwen2VLDataProcessor.obtain_conv_images_from_conversations`` is cut out of
``trainer/ppo_utils/data_processor.py``. Stubbed: ray/torch.distributed (one rank), the vLLM engine (it records each
request's rendered prompt and images, and answers the case's scripted reply), the tokenizer (a reply's "tokens" are
its text plus ``<|im_end|>``, padded to the case's token counts so the loop's context budget can be reached) and
the processor's ``apply_chat_template`` (the given chat template rendered with jinja2, as transformers does).
The environment is the README's evaluation command: ``MIN_PIXELS=401408``, ``MAX_PIXELS=4014080``.
No pixels are stored: an image is its size and the sha256 of its RGB bytes.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import random
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
from PIL import Image

COMMIT = "a3a6c3a557a87d89ffaec825bd8c8d09b719fb97"
ROOT = "curiosity_driven_rl/openrlhf"
EM = f"{ROOT}/trainer/ppo_utils/experience_maker.py"
DP = f"{ROOT}/trainer/ppo_utils/data_processor.py"
PD = f"{ROOT}/datasets/prompts_dataset.py"
OUT = Path(__file__).resolve().parent / "baselines" / "pixel_reasoner.json"
#: (w, h): a big one the loop's first resize shrinks (> 8000*28*28 pixels), small ones it enlarges, odd ratios
SIZES = [(3000, 2200), (640, 480), (300, 1200), (1999, 37), (97, 61)]


def make_image(w: int, h: int, seed: int) -> Image.Image:
    """A deterministic RGB image whose crops all differ (gradients plus seeded noise; numpy: the big one is fast)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    px = np.stack([(x * 7 + rng.integers(0, 9, (h, w))) % 256, (y * 5) % 256, (x + y + seed) % 256], axis=-1)
    return Image.fromarray(px.astype(np.uint8), "RGB")


def digest(im: Image.Image) -> dict:
    import hashlib

    rgb = im.convert("RGB")
    return {"size": list(rgb.size), "sha256": hashlib.sha256(rgb.tobytes()).hexdigest()}


def _call(box, target=1, name="crop_image_normalized") -> str:
    args = json.dumps({"bbox_2d": box, "target_image": target})
    return f'Let me look closer.\n\n<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def cases() -> list[dict]:
    """Per case: image size/seed, question/options, the scripted replies and each request's token counts."""
    rnd = random.Random(35)
    out = []
    for i, (w, h) in enumerate(SIZES):
        rel = []
        for _ in range(3):
            x0, y0 = round(rnd.uniform(0, 0.7), 3), round(rnd.uniform(0, 0.7), 3)
            rel.append(
                [
                    x0,
                    y0,
                    round(min(0.99, x0 + rnd.uniform(0.05, 0.3)), 3),
                    round(min(0.99, y0 + rnd.uniform(0.05, 0.3)), 3),
                ]
            )
        ab = [round(rnd.uniform(1, w * 0.5)), round(rnd.uniform(1, h * 0.5))]
        ab += [ab[0] + round(rnd.uniform(20, w * 0.4)), ab[1] + round(rnd.uniform(20, h * 0.4))]
        answer = "The answer is \\boxed{B}."
        chains = [
            # valid relative calls, a crop of a crop, then an answer
            [_call(rel[0]), _call(rel[1], 2), answer],
            # absolute pixels (a value >= 1), target 0 (index -1: the input image), then out of range
            [_call(ab), _call(rel[2], 0), _call(rel[0], 9), answer],
            # malformed calls: each answered with the release's execution error, the loop goes on
            [
                "<tool_call>\n{not json}\n</tool_call>",
                '<tool_call>\n{"arguments": {"bbox_2d": [0.1, 0.1, 0.5, 0.5], "target_image": 1}}\n</tool_call>',
                _call(rel[0], 1, name="zoom_in"),
                '<tool_call>\n{"name": "select_frames", "arguments": {"target_frames": [1, 2]}}\n</tool_call>',
                answer,
            ],
            [
                _call([0.1, 0.2, 0.3]),
                _call(["a", 0.2, 0.3, 0.4]),
                _call([0.5, 0.5, 0.5, 0.5]),  # padded to 0.2 of a side: too small on a small image
                _call([0.8, 0.1, 0.2, 0.5]),  # right < left after padding
                answer,
            ],
            [_call(rel[1], 1.0), _call(rel[1], "1"), _call(rel[1], -1), "no box here"],
            # a fifth call ends the loop (num_toolcalls > 3); the reply is the answer
            [_call(rel[0]), _call(rel[1]), _call(rel[2]), _call(rel[0], 2), _call(rel[1], 3)],
            # a trailing newline after </tool_call>: not a call (the reply is the answer)
            [_call(rel[2]) + "\n"],
            # </tool_call> without <tool_call> in the reply: the last <tool_call> before it is parsed
            ["I will zoom.</tool_call>", answer],
            # two calls in one reply: the last one runs
            [_call(rel[0]) + "\n" + _call(rel[1]), answer],
            # a \boxed{} in an earlier turn only: the reward reads from the last "boxed" of the whole response
            ["I think \\boxed{A}. " + _call(rel[1]), "no box here"],
        ]
        for replies in chains:
            usage = [[1500 + 10 * k, 100] for k in range(len(replies))]
            out.append({"size": [w, h], "seed": i, "replies": replies, "usage": usage})
        # the context budget: a call whose request went past 12*1024-200 tokens ends the loop
        out.append(
            {
                "size": [w, h],
                "seed": i,
                "replies": [_call(rel[0]), _call(rel[1]), answer],
                "usage": [[1500, 100], [11900, 189], [13000, 50]],
            }
        )
        out.append(
            {
                "size": [w, h],
                "seed": i,
                "replies": [_call(rel[0]), _call(rel[1]), answer],
                "usage": [[1500, 100], [11900, 188], [13000, 50]],
            }
        )
    for n, c in enumerate(out):
        c["question"] = f"What colour is object {n}?"
        c["options"] = None if n % 3 == 0 else ["red", "green", "blue"][: 2 + n % 2]
    return out


def question_text(question: str, options: list[str] | None) -> str:
    """The dataset's ``question`` field (ours: the question, then the options block; the release's V* parquet is
    not in the repository, docs/fidelity.md)."""
    if not options:
        return question
    return question + "\n" + "\n".join(f"{'ABCDEF'[k]}. {o}" for k, o in enumerate(options))


# ---------------------------------------------------------------- running the release
def _show(git_dir: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"{COMMIT}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def _cut(src: str, name: str, cls: str | None = None) -> str:
    """The source of the def/class ``name`` (inside class ``cls``), decorators included, dedented."""
    tree = ast.parse(src)
    scope = tree.body
    if cls is not None:
        scope = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    for node in scope:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            lines = src.splitlines()[start - 1 : node.end_lineno]
            indent = len(lines[0]) - len(lines[0].lstrip())
            return "\n".join(ln[indent:] for ln in lines)
    raise KeyError(name)


def _assigns(src: str, names: set[str]) -> str:
    tree = ast.parse(src)
    lines = src.splitlines()
    return "\n".join(
        "\n".join(lines[n.lineno - 1 : n.end_lineno])
        for n in tree.body
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in n.targets)
    )


class _Done(Exception):
    """Raised where the loop hands its texts to the reward (the end of what the evaluation's rollout does)."""

    def __init__(self, texts):
        self.texts = texts


def load(git_dir: str, template: str):
    import jinja2
    from qwen_agent.llm.fncall_prompts.nous_fncall_prompt import ContentItem, Message, NousFnCallPrompt
    from qwen_agent.tools.base import BaseTool, register_tool
    from qwen_vl_utils import extract_vision_info, fetch_image, process_vision_info, smart_resize

    os.environ["MIN_PIXELS"], os.environ["MAX_PIXELS"] = "401408", "4014080"
    em_src, dp_src, pd_src = _show(git_dir, EM), _show(git_dir, DP), _show(git_dir, PD)
    ns: dict = {
        "__name__": "experience_maker",
        "json": json, "os": os, "np": np, "copy": copy.copy, "deepcopy": copy.deepcopy, "Image": Image,
        "smart_resize": smart_resize, "process_vision_info": process_vision_info,
        "extract_vision_info": extract_vision_info, "fetch_image": fetch_image, "BaseTool": BaseTool,
        "register_tool": register_tool, "NousFnCallPrompt": NousFnCallPrompt, "Message": Message,
        "ContentItem": ContentItem, "List": list, "Samples": object,
    }  # fmt: skip
    code = [_assigns(em_src, {"tool_end", "tool_start", "do_controlled_rectify", "DEFAULT_MIN_PIXELS",
                              "DEFAULT_MAX_PIXELS", "IMAGE_FACTOR", "endstr"})]  # fmt: skip
    for name in ("to_rgb", "SelectFrames", "CropImageNormalized", "parse_last_tool", "crop_image_normalized",
                 "execute_tool", "get_required_messages", "get_prompt_from_messages", "resize_cropped",
                 "extract_qwen_query_and_response", "normalize_answer", "handle_boxed"):  # fmt: skip
        code.append(_cut(em_src, name))
    exec(compile("\n\n".join(code), EM, "exec"), ns)
    exec(compile(_cut(em_src, "_generate_vllm", "RemoteExperienceMaker"), EM + ":_generate_vllm", "exec"), ns)
    dp: dict = {"process_vision_info": process_vision_info, "os": os}
    exec(compile(_assigns(dp_src, {"DEFAULT_MIN_PIXELS", "DEFAULT_MAX_PIXELS"}), DP, "exec"), dp)
    exec(compile(_cut(dp_src, "obtain_conv_images_from_conversations", "Qwen2VLDataProcessor"), DP, "exec"), dp)
    saved = {k: sys.modules.get(k) for k in ("torch", "torch.utils", "torch.utils.data")}
    sys.modules["torch"] = types.ModuleType("torch")
    sys.modules["torch.utils"] = types.ModuleType("torch.utils")
    sys.modules["torch.utils.data"] = types.ModuleType("torch.utils.data")
    sys.modules["torch.utils.data"].Dataset = object  # type: ignore[attr-defined]
    pd: dict = {"__name__": "prompts_dataset"}
    try:
        exec(compile(pd_src, PD, "exec"), pd)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)  # transformers' settings
    tmpl = env.from_string(template)
    return ns, dp, pd, tmpl


def normalize(conv: list[dict]) -> list[dict]:
    """A conversation as the chat template sees it: role + parts, adjacent texts joined, images as markers."""
    out = []
    for m in conv:
        c = m["content"]
        parts: list = []
        for p in [{"text": c}] if isinstance(c, str) else c:
            if "image" in p or p.get("type") == "image":
                parts.append({"image": True})
            elif parts and "text" in parts[-1]:
                parts[-1] = {"text": parts[-1]["text"] + p["text"]}
            else:
                parts.append({"text": p["text"]})
        out.append({"role": m["role"], "content": parts})
    return out


def record_case(
    ns: dict, dp: dict, pd: dict, render, tok, texts: list[str], n: int, case: dict, sampling: list[dict]
) -> dict:
    """Run the release's loop on one case (one prompt): its requests, its answer, the replies it left."""
    requests: list[dict] = []
    replies = list(case["replies"])
    usage = list(case["usage"])
    seen_convs: list = []

    class Proc:
        def apply_chat_template(self, convs, tokenize=False, add_generation_prompt=True):
            seen_convs.append(copy.deepcopy(convs[0]))
            return [render(c) for c in convs]

    class Engine:
        class add_requests_vlm:  # noqa: N801  (the release calls .remote on it)
            @staticmethod
            def remote(rank, *, sampling_params, vllm_vision_input):
                (inp,) = vllm_vision_input
                reply = replies.pop(0)
                p, c = usage.pop(0)
                assert inp["prompt"] == render(seen_convs[-1])
                conv = normalize(seen_convs[-1])
                before = sum(len(r["new_messages"]) for r in requests)
                assert [m for r in requests for m in r["new_messages"]] == conv[:before]  # append-only
                requests.append(
                    {
                        "new_messages": conv[before:],
                        "images": [digest(im) for im in inp["multi_modal_data"]["image"]],
                        "tokens": [p, c],
                    }
                )
                sampling.append({k: getattr(sampling_params, k) for k in sorted(vars(sampling_params))})
                out = types.SimpleNamespace(
                    prompt_token_ids=tok(inp["prompt"], p),
                    outputs=[types.SimpleNamespace(token_ids=tok(reply + "<|im_end|>", c))],
                )
                Engine.pending = [out]
                return None

        class get_responses:  # noqa: N801
            @staticmethod
            def remote(rank):
                return Engine.pending

    class SamplingParams:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    sys.modules["vllm"] = types.SimpleNamespace(SamplingParams=SamplingParams)  # type: ignore[assignment]
    ns["ray"] = types.SimpleNamespace(get=lambda x: x)
    ns["torch"] = types.SimpleNamespace(
        distributed=types.SimpleNamespace(get_rank=lambda: 0, get_world_size=lambda: 1, barrier=lambda: None)
    )
    with tempfile.TemporaryDirectory() as tmp:
        img_path = os.path.join(tmp, "image.png")
        make_image(*case["size"], case["seed"]).save(img_path)
        data = {"question": question_text(case["question"], case["options"]), "image": [img_path], "qid": f"q{n}"}
        args = types.SimpleNamespace(
            train_vlm=True, data_version="none", training_mode="eval_only", ckpt_path=tmp,
            n_samples_per_prompt=1, system_prompt="vcot", perf=False,
        )  # fmt: skip
        prompt = pd["PromptDataset"].preprocess_data(
            types.SimpleNamespace(processor=object()), data, None, "question", None, "vcot"
        )
        this = types.SimpleNamespace(
            strategy=types.SimpleNamespace(args=args),
            vllm_engines=[Engine],
            eval_step=0,
            tokenizer=types.SimpleNamespace(
                batch_decode=lambda ids, skip_special_tokens=False: [texts[x[0]] for x in ids]
            ),
            data_processor=types.SimpleNamespace(
                processor=Proc(),
                obtain_conv_images_from_conversations=types.MethodType(
                    dp["obtain_conv_images_from_conversations"], object()
                ),
            ),
            # RemoteExperienceMaker.__init__ (experience_maker.py l. 1450-1454), sys != notool
            operations=dict(crop_image_normalized=ns["CropImageNormalized"](), select_frames=ns["SelectFrames"]()),
            prompt_maker=ns["NousFnCallPrompt"](),
        )
        this.tools = [this.operations[k].function for k in ["crop_image_normalized", "select_frames"]]

        def done(qa_texts, qids):
            raise _Done(qa_texts)

        this.convenient_get_batch_rewards_from_queries = done
        try:
            ns["_generate_vllm"](this, [prompt], is_eval=True)
            raise AssertionError("the loop did not reach the reward")
        except _Done as d:
            final = d.texts[0]
        conv = json.load(open(os.path.join(tmp, "logs/dumps_iter0", f"q{n}", "conv.json")))[0]
    # normalisation keeps what the template renders: the same text from the release's messages and from ours
    assert all(render(seen) == render(normalize_for_render(seen)) for seen in seen_convs)
    last = normalize(conv)[-1]
    assert last["role"] == "assistant" and final.endswith(last["content"][0]["text"] + "<|im_end|>")
    # what the reward scores (rule_reward l. 936-948 -> handle_boxed, requires_box): the response after the first
    # generation prompt, lowercased, from its last "boxed"; math-verify stubbed: the span handed to do_verify is kept
    _, response = ns["extract_qwen_query_and_response"](final)
    spans: list[str] = []
    ns["parse"] = lambda text: [text]
    ns["do_verify"] = lambda nsol, b: spans.append(nsol) or 0.0
    try:
        ns["handle_boxed"](response.lower(), "b", "<|im_end|>", None, requires_box=True)
        scored = spans[0]
    except ValueError:  # no "boxed" in the response: its sol.rindex("boxed") raises (the evaluation would stop)
        scored = None
    return {
        **case,
        "requests": requests,
        "answer": last["content"][0]["text"],
        "scored": scored,
        "unanswered": replies,
    }


def record(git_dir: str, template: str) -> dict:
    ns, dp, pd, tmpl = load(git_dir, template)

    def render(conv):
        return tmpl.render(messages=conv, add_generation_prompt=True)

    texts: list[str] = []

    def tok(text: str, n: int) -> list[int]:
        texts.append(text)
        return [len(texts) - 1] + [-1] * (n - 1)

    sampling: list[dict] = []
    out_cases = [record_case(ns, dp, pd, render, tok, texts, n, case, sampling) for n, case in enumerate(cases())]
    system = out_cases[0]["requests"][0]["new_messages"][0]
    assert all(c["requests"][0]["new_messages"][0] == system for c in out_cases)
    for c in out_cases:
        c["requests"][0]["new_messages"][0] = "SYSTEM"
    assert all(s == sampling[0] for s in sampling)
    return {
        "commit": COMMIT,
        "files": [EM, DP, PD],
        "system_prompt": system["content"][0]["text"],
        "user_suffix": "\n\n" + pd["templates"]["vcot"],
        "sampling": sampling[0],
        "cases": out_cases,
    }


def normalize_for_render(conv: list[dict]) -> list[dict]:
    """:func:`normalize`'s result in the template's input shape (string contents for text-only messages)."""
    out = []
    for m in normalize(conv):
        parts = m["content"]
        if len(parts) == 1 and "text" in parts[0] and m["role"] != "user":
            out.append({"role": m["role"], "content": parts[0]["text"]})
        else:
            out.append(
                {
                    "role": m["role"],
                    "content": [
                        {"type": "image"} if "image" in p else {"type": "text", "text": p["text"]} for p in parts
                    ],
                }
            )
    return out


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--repo", required=True, help="git dir of TIGER-AI-Lab/Pixel-Reasoner")
    p.add_argument("--chat_template", required=True, help="a chat_template.json of Qwen2.5-VL")
    a = p.parse_args()
    template = json.loads(Path(a.chat_template).read_text())["chat_template"]
    rec = record(a.repo, template)
    OUT.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    print("pixel_reasoner", len(rec["cases"]), "cases")


if __name__ == "__main__":
    main()
