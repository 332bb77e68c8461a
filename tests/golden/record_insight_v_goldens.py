"""Record Insight-V's goldens by RUNNING its released code (tests/golden/README.md, "Insight-V goldens"); compared by
tests/agents/test_insight_v_goldens.py.

    python tests/golden/record_insight_v_goldens.py --repo <git dir of dongyh20/Insight-V>

Three files of the release at :data:`COMMIT`, read with ``git show`` and executed as written, their heavy imports
stubbed (no model is loaded, nothing is downloaded):

* ``infer_two_models.py`` (the two-agent inference): executed whole, once per case, with its example question
  (the assignment ``origin_question = "..."``, found with ``ast``) given the case's question instead, and
  ``example.png`` a generated image in a scratch directory. Stubbed: torch, transformers, ``llava.*`` (the model
  loader returns a tokenizer that records what ``preprocess_llama3`` hands the chat template, and a model whose
  ``generate`` records its settings), ``batch_decode`` (returns the case's scripted reasoner reply, then a scripted
  summary). Recorded per case: the messages each agent's chat template was given (system, user; the assistant
  header), the generation settings, the decode setting and the reasoner reply.
* ``data_generation/data_generation.py`` (the progressive reasoning generator): executed whole with vllm,
  transformers and ``vision_process`` stubbed; the released ``make_api_call`` runs, its ``processor`` recording the
  messages it is given and its ``llm.generate`` answering the case's scripted replies; ``inference`` (and the
  generator ``generate_response`` it drives) run per case. Recorded: every request's messages, the sampling
  settings, the generator's final steps and what ``inference`` returns.
* ``data_check.py`` (the tier-1 answer check): executed whole in a scratch directory holding the case lines as
  ``data.json``, with the tokenizer and vllm stubbed (the LLM answers scripted judge replies); ``meta`` (undefined
  in the release: a ``NameError``) is given as a one-element list — one model answer per line, which is what its
  f-string reads (``response[0]``); ``save_path = ""`` fails at the end (``open("")``), after everything recorded.
  Recorded: the messages per line, the sampling settings, the parsed verdicts, ``bad_count``.

Seeded: re-running on the same commit writes the same file.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import copy
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from PIL import Image

COMMIT = "5e9c6f934c1929e351dbff17a6c6c7bc2d8143b1"
OUT = Path(__file__).resolve().parent / "insight_v.json"
STUBBED = (
    "torch",
    "torch.nn",
    "transformers",
    "transformers.hf_argparser",
    "vllm",
    "vision_process",
    "requests",
    "pandas",
)
STUBBED += tuple(f"llava{m}" for m in ("", ".model", ".model.builder", ".mm_utils", ".constants", ".conversation"))


def make_image(w: int, h: int, seed: int) -> Image.Image:
    """A small deterministic RGB image (its pixels never reach a recorded value: only its size does)."""
    rnd = random.Random(seed)
    im = Image.new("RGB", (w, h))
    im.putdata([(rnd.randrange(256), (x * 3) % 256, (y * 5) % 256) for y in range(h) for x in range(w)])
    return im


def _show(git_dir: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"{COMMIT}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def _stub(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


@contextlib.contextmanager
def _stubs(**mods: dict[str, Any]) -> Iterator[None]:
    saved = {k: sys.modules.get(k) for k in STUBBED}
    try:
        for name in STUBBED:
            _stub(name, **mods.get(name, {}))
        for name in STUBBED:  # a submodule is its parent's attribute too (``import torch.nn as nn``)
            parent, _, child = name.rpartition(".")
            if parent and not hasattr(sys.modules[parent], child):
                setattr(sys.modules[parent], child, sys.modules[name])
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


@contextlib.contextmanager
def _cwd(path: str) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


@contextlib.contextmanager
def _quiet() -> Iterator[list]:
    """``print`` recorded instead of shown (the release prints every reply)."""
    printed: list = []
    real = builtins.print
    builtins.print = lambda *a, **k: printed.append(a)  # type: ignore[assignment]
    try:
        yield printed
    finally:
        builtins.print = real


# ----------------------------------------------------------------------------- cases
QUESTIONS = [
    ("Which method is best among the benchmarks?", ["Baseline.", "Chain-of-Thought.", "Insight-V."]),
    ("What is the value of the tallest bar?", None),
    ("Which region has the largest population?", ["North", "South", "East", "West"]),
    ("How many unique colours does the legend list?", None),
    ("Quelle est l'année la plus élevée ? «café» — 2019", ["2017", "2018", "2019", "2020", "None of the above"]),
    ("What does the sign say?\nRead it carefully.", None),
]

#: The reasoner's reply, as the API returns it (vLLM with ``skip_special_tokens`` off returns the ``<thoughts>``
#: tokens; it never returns the end-of-turn token). Each case runs on every question of :data:`QUESTIONS` in turn.
REASONER_REPLIES = [
    (
        "thoughts",
        "<thoughts>\nIdentifying Key Information: The chart has three bars.\nComparing: C is tallest.\n</thoughts>",
    ),
    ("text_before_thoughts", "Let me think.\n<thoughts>Step one: read the axis.\nStep two: compare.</thoughts>"),
    ("no_thoughts_span", "The bars show that option C is the highest, so the answer is C."),
    ("cut_by_token_limit", "<thoughts>\nIdentifying Key Information: the first bar is 12, the second"),
    ("two_spans", "<thoughts>first try</thoughts>\n<thoughts>second try: C</thoughts> trailing"),
    ("close_without_open", "reasoning without an opening tag</thoughts> after"),
    ("empty_reply", ""),
    ("span_with_image_token", "<thoughts>The <image> shows bars; {braces} and \\n stay.</thoughts>"),
]


def question_text(question: str, options: list[str] | None) -> str:
    """The harness's question text for the release's ``origin_question`` (ours, docs/fidelity.md IV2): the
    ``<image>`` marker and a newline, the question, then for a multiple-choice question the option lines and the
    release example's instruction; an open question gets the instruction of the release's data-check example."""
    if options:
        block = "\n".join(f"{'ABCDEF'[k]}. {o}" for k, o in enumerate(options))
        return f"<image>\n{question}\n{block}\nAnswer the question with the options provided."
    return f"<image>\n{question}\nAnswer the question using a single word or phrase."


def two_model_cases() -> list[dict]:
    out = []
    for n, (name, reply) in enumerate(REASONER_REPLIES):
        for k in (n % len(QUESTIONS), (n + 3) % len(QUESTIONS)):
            q, opts = QUESTIONS[k]
            out.append(
                {
                    "name": f"{name}/{'mcq' if opts else 'open'}{k}",
                    "question": q,
                    "options": opts,
                    "origin_question": question_text(q, opts),
                    "size": [64 + 16 * k, 48 + 8 * n],
                    "reasoner_reply": reply,
                    "summary_reply": f"The answer is {'C' if opts else '12'}.",
                }
            )
    return out


def _step(title: str, content: Any, action: str, **extra: Any) -> str:
    return json.dumps({"title": title, "content": content, "next_action": action, **extra})


FINAL = json.dumps({"title": "FINAL ANSWER", "content": "C"})


def generation_cases() -> list[dict]:
    """Scripted step replies (in order; the generator asks until it stops)."""
    s1, s2 = (
        _step("Identifying Key Information", "The chart shows bars.", "continue"),
        _step("Comparing", "C is tallest.", "final_answer"),
    )
    cases = [
        ("two_steps", [s1, s2, FINAL]),
        ("broken_json_once", [s1, '{"title": "Comparing", "content": "C is', s2, FINAL]),
        ("three_failures", [s1, "not json", "```json\n" + s2 + "\n```", '{"title": "x"}', FINAL]),
        ("missing_key_then_ok", ['{"title": "t", "content": "c"}', s1, s2, FINAL]),
        ("not_an_object", ["[1, 2, 3]", '"a string"', s1, s2, FINAL]),
        ("empty_content", [_step("Empty", "", "continue"), s2, FINAL]),
        ("extra_keys_unicode", [_step("Café", "naïve — 100 %", "continue", confidence=0.9), s2, "not json final"]),
        ("unknown_action", [_step("A", "a", "summary"), _step("B", "b", "final_answer"), FINAL]),
        ("first_step_final", [s2, FINAL]),
        ("leading_whitespace", ["  \n" + s1, s2 + "\n", FINAL]),
        ("trailing_text", [s1 + " and more", s1, s2, FINAL]),
        ("content_not_a_string", [_step("Numbers", 42, "continue"), _step("List", ["a", 1], "final_answer"), FINAL]),
        ("endless_continue", [_step(f"Step {k}", f"thinking {k}", "continue") for k in range(1, 20)] + [FINAL]),
        ("failures_then_cap", ["bad", "bad"] + [_step(f"S{k}", f"c{k}", "continue") for k in range(1, 20)] + [FINAL]),
    ]
    out = []
    for n, (name, replies) in enumerate(cases):
        q, opts = QUESTIONS[n % len(QUESTIONS)]
        block = "" if not opts else "\n" + "\n".join(f"{'ABCDEF'[k]}. {o}" for k, o in enumerate(opts))
        out.append({"name": name, "prompt": q + block, "image": f"images/img_{n}.png", "replies": replies})
    return out


JUDGE_REPLIES = ["[1]", "[0]", " [1]\n", "[1, 0]", "1", "The answer is [1]", "[1] because it matches", "", "[true]"]
JUDGE_REPLIES += ['["1"]', "[[1]]", "[1]]", "[ 1 ]", "[0] [1]", "[2]"]


def check_cases() -> list[dict]:
    """Data lines as the generator's output would be saved (``steps`` ending with the final answer) with a scripted
    judge reply each."""
    out = []
    finals = [FINAL, json.dumps({"title": "FINAL ANSWER", "content": "Samsung"}), "not json", '{"title": "F"}']
    finals += [json.dumps({"title": "FINAL ANSWER", "content": "Ünïcode — «B»"}), json.dumps(["C"])]
    for n, reply in enumerate(JUDGE_REPLIES):
        q, opts = QUESTIONS[n % len(QUESTIONS)]
        block = "" if not opts else "\n" + "\n".join(f"{'ABCDEF'[k]}. {o}" for k, o in enumerate(opts))
        final = finals[n % len(finals)]
        out.append(
            {
                "question": q + block,
                "ground_truth": "C" if opts else "12",
                "final": final,
                "judge_reply": reply,
            }
        )
    return out


# ----------------------------------------------------------------------------- infer_two_models.py
class _Recorder:
    def __init__(self) -> None:
        self.events: list = []


class _Tokenizer:
    """Records what ``preprocess_llama3`` hands the chat template; decodes to the scripted replies."""

    pad_token_id = 0
    eos_token_id = 1

    def __init__(self, role: str, rec: _Recorder, replies: dict[str, str]):
        self.role, self.rec, self.replies = role, rec, replies

    def __deepcopy__(self, memo: dict) -> _Tokenizer:
        return self  # preprocess_llama3 deep-copies its tokenizer; the copy must record into the same log

    def add_tokens(self, tokens: list, special_tokens: bool = False) -> int:
        return len(tokens)

    def convert_tokens_to_ids(self, token: str) -> int:
        return 100 + len(token)

    def __call__(self, text: str) -> Any:
        return types.SimpleNamespace(input_ids=[2, 3])

    def apply_chat_template(self, conv: list) -> list[int]:
        self.rec.events.append({"agent": self.role, "chat_template": copy.deepcopy(conv)})
        return [2, 3, 4]

    def encode(self, text: str) -> list[int]:
        self.rec.events.append({"agent": self.role, "encode": text})
        return [5]

    def batch_decode(self, cont: Any, skip_special_tokens: bool) -> list[str]:
        self.rec.events.append({"agent": self.role, "skip_special_tokens": skip_special_tokens})
        return [self.replies[self.role]]


class _Model:
    def __init__(self, role: str, rec: _Recorder):
        self.role, self.rec = role, rec
        self.config = types.SimpleNamespace()

    def eval(self) -> None:
        return None

    def generate(self, input_ids: Any, **kw: Any) -> str:
        keep = ("do_sample", "temperature", "top_p", "num_beams", "max_new_tokens", "use_cache", "image_sizes")
        self.rec.events.append({"agent": self.role, "generate": {k: kw[k] for k in keep if k in kw}})
        return "generated"


class _Tensor:
    def cuda(self) -> _Tensor:
        return self

    def ne(self, other: Any) -> _Tensor:
        return self

    def to(self, *a: Any, **k: Any) -> _Tensor:
        return self


def _torch_stub() -> dict[str, Any]:
    class Module:
        def __init__(self) -> None:
            return None

    matmul = types.SimpleNamespace(allow_tf32=False)
    return {
        "backends": types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=matmul)),
        "nn": types.SimpleNamespace(Module=Module),
        "tensor": lambda data, dtype=None: _Tensor(),
        "long": "long",
        "bfloat16": "bfloat16",
        "dtype": type("dtype", (), {}),
    }


def _with_question(src: str) -> str:
    """The release's source with its example question (``origin_question = "..."``) replaced by ``CASE_QUESTION``
    (a name the run's globals hold): the one line changed, found with ``ast``."""
    tree = ast.parse(src)
    (node,) = [
        n
        for n in tree.body
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "origin_question" for t in n.targets)
    ]
    lines = src.splitlines()
    assert node.lineno == node.end_lineno, "origin_question spans several lines"
    lines[node.lineno - 1] = "origin_question = CASE_QUESTION"
    return "\n".join(lines) + "\n"


def _two_models_case(code: Any, case: dict, seed: int) -> dict:
    """Run ``infer_two_models.py`` once on ``case``."""
    rec = _Recorder()
    replies = {"reasoner": case["reasoner_reply"], "summary": case["summary_reply"]}
    loads = iter(["reasoner", "summary"])

    def load_pretrained_model(*a: Any, **k: Any) -> tuple:
        role = next(loads)  # the two models load in order: reason_model, then summary_model
        return _Tokenizer(role, rec, replies), _Model(role, rec), object(), 4096

    def process_images(images: list, processor: Any, config: Any) -> _Tensor:
        rec.events.append({"image_sizes": [list(im.size) for im in images]})
        return _Tensor()

    mods = {
        "torch": _torch_stub(),
        "torch.nn": {"Module": _torch_stub()["nn"].Module},
        "transformers": {"PreTrainedTokenizer": object, "AutoTokenizer": object, "AutoProcessor": object},
        "llava.model.builder": {"load_pretrained_model": load_pretrained_model},
        "llava.mm_utils": {
            "get_model_name_from_path": lambda p: os.path.basename(p),
            "process_images": process_images,
            "tokenizer_image_token": None,
        },
        "llava.constants": {
            "IMAGE_TOKEN_INDEX": -200,
            "DEFAULT_IMAGE_TOKEN": "<image>",
            "DEFAULT_IM_START_TOKEN": "<im_start>",
            "DEFAULT_IM_END_TOKEN": "<im_end>",
            "IGNORE_INDEX": -100,
        },
        "llava.conversation": {"conv_templates": {}, "SeparatorStyle": None},
    }
    with tempfile.TemporaryDirectory() as tmp, _stubs(**mods), _cwd(tmp), _quiet() as printed:
        make_image(*case["size"], seed=seed).save("example.png")
        ns: dict[str, Any] = {"__name__": "infer_two_models", "CASE_QUESTION": case["origin_question"]}
        exec(code, ns)
        system_default = ns["preprocess_llama3"].__defaults__[-1]
    return {
        **case,
        "events": rec.events,
        "reason_question": ns["reason_question"],
        "reason_chain": ns["reason_chain"],
        "summary_question": ns["summary_question"],
        "printed": [list(map(str, a)) for a in printed],
        "system_message_default": system_default,
    }


def record_two_models(git_dir: str) -> dict:
    src = _with_question(_show(git_dir, "infer_two_models.py"))
    code = compile(src, "infer_two_models.py", "exec")
    return {"cases": [_two_models_case(code, case, n) for n, case in enumerate(two_model_cases())]}


# ----------------------------------------------------------------------------- data_generation.py
class _SamplingParams:
    def __init__(self, **kw: Any):
        self.kw = kw


def _generation_case(code: Any, case: dict) -> dict:
    """Run ``data_generation.py``'s generator, then ``inference``, on ``case``."""
    requests: list = []
    replies = list(case["replies"])
    settings: list = []

    class LLM:
        def __init__(self, **kw: Any):
            settings.append({"LLM": {k: v for k, v in kw.items() if k != "model"}})

        def generate(self, inputs: list, sampling_params: Any) -> list:
            settings.append({"sampling": dict(sampling_params.kw)})
            text = replies.pop(0) if replies else "<no scripted reply left>"
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text=text)])]

    class Processor:
        def apply_chat_template(self, messages: list, tokenize: bool, add_generation_prompt: bool) -> str:
            requests.append({"messages": copy.deepcopy(messages), "add_generation_prompt": add_generation_prompt})
            return "<prompt>"

    mods = {
        "vllm": {"LLM": LLM, "SamplingParams": _SamplingParams},
        "transformers": {"AutoProcessor": types.SimpleNamespace(from_pretrained=lambda path: Processor())},
        "transformers.hf_argparser": {"HfArgumentParser": object},
        "vision_process": {"process_vision_info": lambda messages: (["image"], None)},
    }
    with _stubs(**mods), _quiet():
        ns: dict[str, Any] = {"__name__": "data_generation"}
        exec(code, ns)
        ns["time"] = types.SimpleNamespace(time=lambda: 0.0)  # the thinking times: 0, so a rerun writes the same
        final_steps: list = []
        for steps, _total in ns["generate_response"](case["prompt"], case["image"]):
            final_steps = copy.deepcopy(steps)
        replies[:] = list(case["replies"])  # the same replies again, for inference()
        n_requests = len(requests)
        _, inferred = ns["inference"](case["prompt"], case["image"])
    return {
        **case,
        "requests": requests[:n_requests],
        "settings": settings[: 1 + n_requests],
        "steps": [list(s) if isinstance(s, tuple) else s for s in final_steps],
        "inference_steps": [list(s) if isinstance(s, tuple) else s for s in inferred],
        "replies_used": n_requests,
    }


def record_generation(git_dir: str) -> dict:
    src = _show(git_dir, "data_generation/data_generation.py")
    code = compile(src, "data_generation/data_generation.py", "exec")
    return {"cases": [_generation_case(code, case) for case in generation_cases()]}


# ----------------------------------------------------------------------------- data_check.py
def record_check(git_dir: str) -> dict:
    src = _show(git_dir, "data_check.py")
    code = compile(src, "data_check.py", "exec")
    cases = check_cases()
    requests: list = []
    settings: list = []
    judge = [c["judge_reply"] for c in cases]

    class Tokenizer:
        def apply_chat_template(self, messages: list, tokenize: bool, add_generation_prompt: bool) -> str:
            requests.append({"messages": copy.deepcopy(messages), "add_generation_prompt": add_generation_prompt})
            return "<prompt>"

    class LLM:
        def __init__(self, model: str, tensor_parallel_size: int):
            settings.append({"tensor_parallel_size": tensor_parallel_size})

        def generate(self, conversations: list, sampling_params: Any, use_tqdm: bool) -> list:
            out = [types.SimpleNamespace(outputs=[types.SimpleNamespace(text=judge.pop(0))]) for _ in conversations]
            settings.append({"sampling": dict(sampling_params.kw), "batch": len(conversations)})
            return out

    lines = [
        {
            "question": c["question"],
            "conversations": [
                {"from": "human", "value": "<image>\n" + c["question"]},
                {"from": "gpt", "value": c["ground_truth"]},
            ],
            "steps": [
                {"count": 1, "title": "t", "content": "c", "next_action": "final_answer"},
                ["Final Answer", c["final"], 0.1],
            ],
        }
        for c in cases
    ]
    mods = {
        "vllm": {"LLM": LLM, "SamplingParams": _SamplingParams},
        "transformers": {"AutoTokenizer": types.SimpleNamespace(from_pretrained=lambda path: Tokenizer())},
        "tqdm": {"tqdm": lambda it: it},
    }
    saved_tqdm = sys.modules.get("tqdm")
    ns: dict[str, Any] = {"__name__": "data_check", "meta": [0]}
    with tempfile.TemporaryDirectory() as tmp, _stubs(**mods), _cwd(tmp), _quiet() as printed:
        _stub("tqdm", **mods["tqdm"])
        Path("data.json").write_text(json.dumps(lines))
        try:
            exec(code, ns)
            ended = None
        except FileNotFoundError as e:  # save_path = "": open("") after everything is computed
            ended = f"{type(e).__name__}: {e}"
        finally:
            if saved_tqdm is not None:
                sys.modules["tqdm"] = saved_tqdm
    all_inputs = ns["all_inputs"]
    return {
        "prompt": ns["prompt"],
        "settings": settings,
        "bad_count": ns["bad_count"],
        "printed": [list(map(str, a)) for a in printed],
        "ended": ended,
        "cases": [
            {**c, "messages": r["messages"], "add_generation_prompt": r["add_generation_prompt"], "answer": x["answer"]}
            for c, r, x in zip(cases, requests, all_inputs)
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--repo", required=True, help="git dir of dongyh20/Insight-V")
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args()
    files = {
        p: hashlib.sha256(_show(a.repo, p).encode()).hexdigest()
        for p in ("infer_two_models.py", "data_generation/data_generation.py", "data_check.py")
    }
    data = {
        "commit": COMMIT,
        "source_sha256": files,
        "two_models": record_two_models(a.repo),
        "generation": record_generation(a.repo),
        "check": record_check(a.repo),
    }
    Path(a.out).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(
        f"wrote {a.out}: {len(data['two_models']['cases'])} inference, {len(data['generation']['cases'])} generation, "
        f"{len(data['check']['cases'])} check cases"
    )


if __name__ == "__main__":
    main()
