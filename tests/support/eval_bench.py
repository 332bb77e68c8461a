"""A tiny O3-Bench-layout benchmark with scripted model and judge answers whose metrics are known.

Each question carries a marker ``[qN]``; the model script answers by marker (the same text for
every choice/trial), the judge script replies by marker and prompt kind. Per trial the expected
outcome is: correct q0 q2 q5 q6, wrong q1 q4 q7, incomplete q3.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from PIL import Image

from tests.support.openai_server import Call, Reply, chat, error, last_user_text, malformed

OPTIONS = "A. one\nB. two\nC. three\nD. four\nE. five\nF. No right choice"
# marker: (image, subset, options?, answer, model reply, finish_reason)
QUESTIONS = {
    "q0": ("img0.png", "chart", True, "C", "Looking closely... <answer>C</answer>", "stop"),
    "q1": ("img0.png", "chart", True, "B", "So the result is \\boxed{(D)}.", "stop"),
    "q2": ("img1.png", "map", True, "A", "The first option seems right since the road bends north.", "stop"),
    "q3": ("img1.png", "map", True, "E", "Let me count the stations one by one: 1, 2, 3, 4", "length"),
    "q4": ("img2.png", "map", True, "F", "I cannot tell from this image.", "stop"),
    "q5": ("img2.png", "map", False, "White.", "<answer>white</answer>", "stop"),
    "q6": ("img2.png", "chart", False, "42 km", "The distance is about forty-two kilometres.", "stop"),
    "q7": ("img0.png", "chart", False, "red", "<answer>blue</answer>", "stop"),
}
JUDGE = {  # marker: reply to the extraction prompt, reply to the correctness prompt
    "q1": ("D", None),
    "q2": ("A", "<correct>"),  # the verdict is asked only by the in-loop check (InSight-o3 mode)
    "q4": ("none", None),
    "q5": ("white", "<correct>"),
    "q6": ("forty-two kilometres", "<correct>"),
    "q7": ("blue", "<wrong>"),
}
#: The keys of the scripted endpoints in the end-to-end tests (no file a run writes may hold one).
MAIN_KEY = "sk-main-SECRET-4242abcd"
JUDGE_KEY = "sk-judge-SECRET-9191efgh"
#: The eval_name of :func:`evaluate_argv`: a run's directory is ``<output_dir>/m/o3_bench``.
EVAL = "m/o3_bench"
EXPECTED_STATS = {"correct": 4, "wrong": 3, "incomplete": 1, "invalid": 0, "failed": 0, "total": 8}
EXPECTED_CATEGORY_ACC = {"chart": 2 / 4, "map": 2 / 4}
_MARK = re.compile(r"\[(q\d+)\]")


def make_bench(root: Path, n_images: int = 3) -> tuple[Path, Path]:
    """Write images and ``metadata.jsonl``; returns (ann_file, img_dir)."""
    img_dir = root / "test"
    (img_dir / "images").mkdir(parents=True, exist_ok=True)
    for i in range(n_images):
        im = Image.new("RGB", (96 + 8 * i, 64), (40 * i, 120, 200 - 30 * i))
        im.save(img_dir / "images" / f"img{i}.png")
    ann = img_dir / "metadata.jsonl"
    with open(ann, "w") as f:
        for qid, (img, subset, mcq, answer, _, _) in QUESTIONS.items():
            row = {
                "question_id": qid,
                "file_name": f"images/{img}",
                "subset": subset,
                "question": f"[{qid}] What does the figure show?",
                "answer": answer,
                "explanation": "by construction",
                "target_layouts": [1],
                "layout_infos": {"1": {"layout_id": 1, "bbox": [1, 2, 30, 40]}},
                "img_width": 96,
                "img_height": 64,
            }
            if mcq:
                row["options"] = OPTIONS
            f.write(json.dumps(row) + "\n")
    return ann, img_dir


def marker(text: str) -> str:
    m = _MARK.search(text)
    return m.group(1) if m else ""


def model_reply(req: dict, n: int | None = None) -> Reply:
    q = marker(last_user_text(req))
    _, _, _, _, text, finish = QUESTIONS[q]
    n = n or int(req.get("n") or 1)
    return chat([text] * n, finish_reason=finish)


def model_script():
    def script(req: dict, call: Call) -> Reply:
        return model_reply(req)

    return script


def judge_script():
    def script(req: dict, call: Call) -> Reply:
        prompt = last_user_text(req)
        q = marker(prompt)
        extraction, verdict = JUDGE.get(q, ("none", "<wrong>"))
        return chat((verdict or "<wrong>") if "GT Answer:" in prompt else extraction)

    return script


def first_request_fault(q: str, call: Call, server_ref: dict) -> Reply | None:
    """The fault the first request for question ``q`` gets (None: answer normally). q3 (a reply slower
    than --client_timeout) and q5 (fewer choices than n) depend on the script, so they are not here."""
    if q == "q0":
        return error(429, "slow down", retry_after=0.1)
    if q == "q1":
        return error(500, "internal")
    if q == "q2":
        return error(503, "overloaded", retry_after=0.1)
    if q == "q4":
        return malformed()  # not retried by the SDK: recorded, fixed by --retry_failed
    if q == "q6":
        hdrs = {k.lower(): v for k, v in server_ref["srv"].headers[call.index].items()}
        auth = hdrs.get("authorization", "")
        return error(400, f"Incorrect API key provided: {auth.split()[-1]}")  # echoes the key
    return None


def faulty_model_script(server_ref: dict):
    """First request per question fails in a question-specific way; later requests answer."""
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def script(req: dict, call: Call) -> Reply:
        q = marker(last_user_text(req))
        with lock:
            k = seen[q] = seen.get(q, 0) + 1
        if k == 1:
            if q == "q3":
                r = model_reply(req)
                r.delay = 2.5  # longer than --client_timeout
                return r
            if q == "q5":
                return model_reply(req, n=1)  # fewer choices than n
            fault = first_request_fault(q, call, server_ref)
            if fault is not None:
                return fault
        return model_reply(req)

    return script


def read_records(eval_dir: Path, trial: int = 0) -> list[dict]:
    """The records of ``<eval_dir>/trial_<trial>/eval_records.jsonl``, in file order."""
    path = eval_dir / f"trial_{trial}" / "eval_records.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def records_by_key(eval_dir: Path, trial: int = 0) -> dict[str, dict]:
    """The records of one trial by ``sample_key``."""
    return {r["sample_key"]: r for r in read_records(eval_dir, trial)}


def all_records(eval_dir: Path) -> list[dict]:
    """The records of every trial of ``eval_dir``, trial by trial."""
    paths = sorted(eval_dir.glob("trial_*/eval_records.jsonl"), key=lambda p: int(p.parent.name.split("_")[1]))
    return [json.loads(line) for p in paths for line in p.read_text().splitlines()]


def read_metrics(eval_dir: Path, trial: int = 0) -> dict:
    """``<eval_dir>/trial_<trial>/eval_metrics.json``."""
    return json.loads((eval_dir / f"trial_{trial}" / "eval_metrics.json").read_text())


def assert_expected(out: Path, trials: int) -> None:
    """Every trial of the single-model run under ``out`` finished with this benchmark's known metrics, one record
    per question in annotation order."""
    for k in range(trials):
        m = read_metrics(out / EVAL, k)
        assert m["overall_stats"] == EXPECTED_STATS
        assert m["overall_accuracy"] == pytest.approx(0.5)
        assert m["overall_success_rate"] == pytest.approx(7 / 8)
        assert m["overall_completion_rate"] == pytest.approx(7 / 8)
        assert m["critical_failure_ratio"] == 0
        assert m["has_answer"] == pytest.approx(6 / 8)
        assert m["category_accuracy"] == pytest.approx(EXPECTED_CATEGORY_ACC)
        recs = read_records(out / EVAL, k)
        assert [r["sample_key"] for r in recs] == list(QUESTIONS)
        assert (out / EVAL / f"trial_{k}" / "done").exists()


def assert_no_secrets(out: Path, *keys: str) -> None:
    """No file under ``out`` holds a key (:data:`MAIN_KEY`, :data:`JUDGE_KEY` and ``keys``) or image bytes."""
    secrets = [k.encode() for k in (MAIN_KEY, JUDGE_KEY, *keys)]
    for p in out.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            assert not any(k in data for k in secrets), p
            assert b"base64" not in data, p


def evaluate_argv(
    ann,
    img_dir,
    out,
    main_url: str,
    judge_url: str | None = None,
    *extra: str,
    api_key: str | None = None,
    judge_api_key: str | None = None,
    max_retries: int = 3,
) -> list[str]:
    """``evaluate``'s command line for this benchmark: scripted model (and judge) at the given URLs."""
    keys = [
        *(["--api_key", api_key] if api_key else []),
        *(["--judge_api_key", judge_api_key] if judge_api_key else []),
    ]
    judge = ["--judge_api_base_url", judge_url] if judge_url else []
    return [
        *("--eval_name", EVAL, "--model", "scripted-vlm", "--api_base_url", main_url),
        *("--judge_model", "scripted-judge", *judge, *keys),
        *("--ann_file", str(ann), "--img_dir", str(img_dir), "--output_dir", str(out)),
        *("--no_progress", "--max_retries", str(max_retries), *extra),
    ]


def keyed_argv(ann, img_dir, out, main_url: str, judge_url: str | None, *extra: str) -> list[str]:
    """:func:`evaluate_argv` with the keys :data:`MAIN_KEY` and :data:`JUDGE_KEY` on the command line."""
    return evaluate_argv(ann, img_dir, out, main_url, judge_url, *extra, api_key=MAIN_KEY, judge_api_key=JUDGE_KEY)


def make_demo_bench_cli(out: Path, *, min_side: int, max_side: int) -> Path:
    """Two images, one question each, drawn by ``python -m insight_o3.scripts.make_demo_bench`` as a user runs it
    (the benchmark of the tiny-vLLM tests)."""
    argv = ["--out", str(out), "--num_images", "2", "--questions_per_image", "1"]
    argv += ["--min_side", str(min_side), "--max_side", str(max_side)]
    repo = Path(__file__).resolve().parents[2]
    r = subprocess.run(
        [sys.executable, "-m", "insight_o3.scripts.make_demo_bench", *argv],
        capture_output=True,
        text=True,
        cwd=repo,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return out
