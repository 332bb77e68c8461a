"""Hostile replies: whatever a server sends becomes a typed reply or one failed record, at the one
boundary (:mod:`insight_o3.base.untrusted`, :class:`insight_o3.endpoints.client.GuardedAsyncOpenAI`), against real
loopback HTTP servers:

* content that is a list of parts is read as its text; content that is a number or a dict, ``choices: ["…"]``,
  JSON nested 100k deep (model or judge) are each one failed record — every other record is written;
* usage that is a list or counts 10^30 tokens is invalid usage (unreported), never a budget that blocks the run;
* a reply echoing an API key is stored, shown and forwarded to the judge with the key masked;
* a gzip bomb is refused while it is read; a trickling models list cannot hold the endpoint check past its
  deadline, and SIGTERM ends a command stuck in it at once.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

from insight_o3.base.caps import reply_body_cap
from insight_o3.base.untrusted import MalformedReply
from insight_o3.data.layout import MAX_LAYOUT_BOXES, LayoutError, iter_layout_files, parse_layout
from insight_o3.endpoints.client import make_client
from insight_o3.endpoints.endpoint import Endpoint
from insight_o3.endpoints.preflight import EndpointError, check_endpoints
from insight_o3.evaluation.judge import AmbiguousVerdict, AnswerJudge, judged_correct, read_verdict
from insight_o3.o3bench import review
from insight_o3.protocol.attempt import Attempt
from insight_o3.protocol.sample import Sample
from insight_o3.scripts import _shared as cli
from insight_o3.scripts import evaluate, evaluate_vsearch, report
from tests.support import eval_bench as eb
from tests.support.o3bench_items import items, source
from tests.support.openai_server import Call, Reply, chat, last_user_text
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[1]
MODEL_KEY = "sk-model-ECHOED-7f3a9c1e5b2d"
JUDGE_KEY = "sk-judge-ECHOED-0b1c2d3e4f5a"
DEEP = 100_000


@pytest.fixture
def bench(tmp_path):
    return eb.make_bench(tmp_path / "bench")


def _argv(bench, out, model_url, judge_url, *extra, **keys) -> list[str]:
    return eb.evaluate_argv(*bench, out, model_url, judge_url, "--image_workers", "0", *extra, max_retries=0, **keys)


def _deep_body() -> str:
    return '{"choices": ' + "[" * DEEP + "]" * DEEP + "}"


# ------------------------------------------------------------------------------- items 1, 2, 6, 12: shapes
def _set_content(value):
    def mutate(body: dict) -> dict | str:
        body["choices"][0]["message"]["content"] = value
        return body

    return mutate


def _set(key: str, value):
    def mutate(body: dict) -> dict | str:
        body[key] = value
        return body

    return mutate


#: name -> (how q0's model reply is changed, q0's expected status)
MODEL_CASES: dict[str, tuple[Callable, str]] = {
    "content parts": (
        _set_content([{"type": "text", "text": "Looking closely... "}, {"type": "text", "text": "<answer>C</answer>"}]),
        "correct",
    ),
    "content a number": (_set_content(42), "failed"),
    "content a dict": (_set_content({"text": "<answer>C</answer>"}), "failed"),
    "content parts without text": (_set_content([{"type": "text", "text": 7}]), "failed"),
    "choices of strings": (_set("choices", ["hello"]), "failed"),
    "finish_reason a number": (lambda b: {**b, "choices": [{**b["choices"][0], "finish_reason": 5}]}, "failed"),
    "JSON 100k deep": (lambda b: _deep_body(), "failed"),
    "usage a list": (_set("usage", [1, 2]), "correct"),
}


def _hostile_model(mutate: Callable, q: str = "q0"):
    def script(req: dict, call: Call) -> Reply:
        reply = eb.model_reply(req)
        if eb.marker(last_user_text(req)) == q:
            assert isinstance(reply.body, dict)
            reply.body = mutate(reply.body)
        return reply

    return script


@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_a_hostile_model_reply_is_one_record_and_the_run_finishes(case, bench, tmp_path, openai_server, capsys):
    mutate, status = MODEL_CASES[case]
    model, judge = openai_server(_hostile_model(mutate)), openai_server(eb.judge_script())
    out = tmp_path / "out"
    rc = evaluate.main(_argv(bench, out, model.base_url, judge.base_url))
    assert rc == (cli.ExitCode.INCOMPLETE if status == "failed" else 0)  # a failed sample-trial, not a crash
    assert "Traceback" not in capsys.readouterr().err
    recs = eb.records_by_key(out / eb.EVAL)
    assert list(recs) == list(eb.QUESTIONS)  # every answer already paid for is kept
    er = recs["q0"]["eval_result"]
    assert er["status"] == status, er
    if status == "failed":
        assert er["fail_reason"].startswith("MalformedReply: "), er["fail_reason"]
    assert all(r["eval_result"]["status"] != "failed" for k, r in recs.items() if k != "q0")


#: name -> (how q5's judge reply is changed); q5 is the open question whose extraction is judged twice
JUDGE_CASES: dict[str, Callable] = {
    "content a list of numbers": _set_content([1, 2]),
    "content a number": _set_content(3),
    "choices of strings": _set("choices", ["<correct>"]),
    "JSON 100k deep": lambda b: _deep_body(),
}


@pytest.mark.parametrize("case", list(JUDGE_CASES))
def test_a_hostile_judge_reply_is_a_judge_failure_of_one_record(case, bench, tmp_path, openai_server, capsys):
    def judge_script(req: dict, call: Call) -> Reply:
        reply = eb.judge_script()(req, call)
        if eb.marker(last_user_text(req)) == "q5":
            assert isinstance(reply.body, dict)
            reply.body = JUDGE_CASES[case](reply.body)
        return reply

    model, judge = openai_server(eb.model_script()), openai_server(judge_script)
    out = tmp_path / "out"
    assert evaluate.main(_argv(bench, out, model.base_url, judge.base_url)) == cli.ExitCode.INCOMPLETE
    assert "Traceback" not in capsys.readouterr().err
    recs = eb.records_by_key(out / eb.EVAL)
    assert list(recs) == list(eb.QUESTIONS)
    er = recs["q5"]["eval_result"]
    assert (er["status"], er["fail_stage"]) == ("failed", "judge"), er
    assert "MalformedReply" in er["fail_reason"]
    # the rerun asks the judge again and nothing of the model: the run can finish
    sent = model.count
    asked = judge.count
    assert evaluate.main(_argv(bench, out, model.base_url, judge.base_url, "--retry_failed")) == cli.ExitCode.INCOMPLETE
    assert model.count == sent and judge.count > asked


@pytest.mark.parametrize("counter", ["prompt_tokens", "completion_tokens"])
def test_usage_of_1e30_tokens_is_invalid_usage_not_a_blocked_run(counter, bench, tmp_path, openai_server):
    def script(req: dict, call: Call) -> Reply:
        reply = eb.model_reply(req)
        if eb.marker(last_user_text(req)) == "q0":
            assert isinstance(reply.body, dict)
            reply.body["usage"][counter] = 10**30
        return reply

    model, judge = openai_server(script), openai_server(eb.judge_script())
    out = tmp_path / "out"
    argv = _argv(bench, out, model.base_url, judge.base_url, "--max_tokens_total", "100000")
    assert evaluate.main(argv) == 0
    recs = eb.records_by_key(out / eb.EVAL)
    assert list(recs) == list(eb.QUESTIONS)
    assert recs["q0"]["usage"]["model"]["unreported_requests"] == 1
    assert recs["q0"]["usage"]["model"][counter] == 0
    endpoints = json.loads((out / eb.EVAL / "run_card.json").read_text())["history"][-1]["endpoints"]
    assert endpoints["model"]["invalid_usage"] == 1


# ------------------------------------------------------------------------------- item 3: echoed keys
def test_echoed_keys_are_masked_before_anything_stores_shows_or_forwards_them(bench, tmp_path, openai_server):
    def model_script(req: dict, call: Call) -> Reply:
        reply = eb.model_reply(req)
        bare = call.headers.get("authorization", "").split()[-1]
        assert isinstance(reply.body, dict)
        msg = reply.body["choices"][0]["message"]
        msg["content"] = f"debug: auth={bare} " + msg["content"]
        return reply

    def judge_script(req: dict, call: Call) -> Reply:
        reply = eb.judge_script()(req, call)
        bare = call.headers.get("authorization", "").split()[-1]
        assert isinstance(reply.body, dict)
        reply.body["choices"][0]["message"]["content"] += f"\n(judge key {bare})"
        return reply

    model, judge = openai_server(model_script), openai_server(judge_script)
    out = tmp_path / "out"
    argv = _argv(bench, out, model.base_url, judge.base_url, api_key=MODEL_KEY, judge_api_key=JUDGE_KEY)
    assert evaluate.main(argv) == 0
    assert report.main([str(out / eb.EVAL), "--out", str(tmp_path / "report.html"), "--thumb_px", "64"]) == 0
    for req in judge.requests:  # the model's key is never forwarded to the judge
        assert MODEL_KEY not in json.dumps(req)
    recs = eb.records_by_key(out / eb.EVAL)
    assert "debug: auth=***" in recs["q0"]["eval_result"]["response"]
    assert any("(judge key ***)" in o for r in recs.values() for o in r["eval_result"]["judge_outputs"])
    for path in [*out.rglob("*"), tmp_path / "report.html"]:
        if path.is_file():
            data = path.read_bytes()
            assert MODEL_KEY.encode() not in data and JUDGE_KEY.encode() not in data, path


# ------------------------------------------------------------------------------- item 5: gzip bomb
def test_a_gzip_bomb_is_refused_while_it_is_read(openai_server):
    inflated = 80 * 2**20  # past the default cap (4.9 MB); the 4 GB bomb of the report is the same shape
    pad = b" " * inflated
    body = gzip.compress(
        b'{"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}], "pad": "' + pad + b'"}'
    )
    assert len(body) < 200_000
    srv = openai_server(lambda req, call: Reply(body=body, headers={"content-encoding": "gzip"}))

    async def ask():
        client = make_client(Endpoint(base_url=srv.base_url, timeout=30, max_retries=0))
        try:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        finally:
            await client.close()

    with pytest.raises(MalformedReply, match="larger than"):
        asyncio.run(ask())


def _gzip_bomb(inflated: int) -> bytes:
    """A chat completion whose padding inflates to ``inflated`` bytes, gzipped (~1000:1)."""
    return gzip.compress(
        b'{"choices": [{"message": {"content": "<answer>C</answer>"}, "finish_reason": "stop"}], "pad": "'
        + b" " * inflated
        + b'"}'
    )


def _ask_once(client) -> str:
    async def ask():
        try:
            r = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            return r.choices[0].message.content
        finally:
            await client.close()

    return asyncio.run(ask())


def test_the_body_cap_is_the_reply_cap_in_bytes_of_the_worst_encoding(openai_server):
    """``--max_reply_chars`` M, replies of n choices: a body of n choices whose content and reasoning_content are
    each M characters in the costliest JSON encoding (a non-BMP code point as a \\uXXXX\\uXXXX pair, 12 bytes)
    is read; a body one byte past the cap is refused."""
    m, n = 20_000, 3
    cap = reply_body_cap(m, n)
    assert cap == n * 2 * m * 12 + 256 * 2**10 and reply_body_cap(None) == 64 * 2**20
    text = "\U0001f600" * m
    choice = {"message": {"role": "assistant", "content": text, "reasoning_content": text}, "finish_reason": "stop"}
    worst = json.dumps({"choices": [dict(choice, index=i) for i in range(n)]}).encode()  # ensure_ascii: 12 B/char
    assert len(worst) > n * 2 * m * 12
    srv = openai_server(lambda req, call: Reply(body=worst))
    assert _ask_once(make_client(Endpoint(base_url=srv.base_url, max_retries=0), max_reply_chars=m, choices=n)) == text
    over = json.dumps({"choices": [choice], "pad": " " * (cap - 100)}).encode()
    srv = openai_server(lambda req, call: Reply(body=over))
    with pytest.raises(MalformedReply, match=f"larger than {cap} bytes"):
        _ask_once(make_client(Endpoint(base_url=srv.base_url, max_retries=0), max_reply_chars=m, choices=n))


def test_a_gzip_bomb_is_refused_while_it_is_inflated(openai_server):
    """At --max_reply_chars 1000 the cap is ~280 KB: a 64 MiB bomb is refused with the memory it takes bounded by
    that cap, not by what one network chunk of it inflates to (the HTTP package's decoder: ~64 MiB at once)."""
    import tracemalloc

    body = _gzip_bomb(64 * 2**20)
    srv = openai_server(lambda req, call: Reply(body=body, headers={"content-encoding": "gzip"}))
    client = make_client(Endpoint(base_url=srv.base_url, timeout=30, max_retries=0), max_reply_chars=1000)
    tracemalloc.start()
    try:
        with pytest.raises(MalformedReply, match=f"larger than {reply_body_cap(1000)} bytes"):
            _ask_once(client)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB while refusing a bomb at a 0.3 MB cap"
    ok = gzip.compress(json.dumps(chat("<answer>C</answer>").body).encode())  # a gzipped reply is read whole
    srv = openai_server(lambda req, call: Reply(body=ok, headers={"content-encoding": "gzip"}))
    assert (
        _ask_once(make_client(Endpoint(base_url=srv.base_url, max_retries=0), max_reply_chars=1000))
        == "<answer>C</answer>"
    )


def test_a_gzip_bomb_at_a_small_max_reply_chars_is_one_failed_record(bench, tmp_path, openai_server, capsys):
    """evaluate --max_reply_chars 1000: q0's reply is a 16 MiB gzip bomb (under the old fixed 64 MiB cap, read and
    scored): one failed record naming the cap; every other record is written."""
    bomb = _gzip_bomb(16 * 2**20)

    def script(req: dict, call: Call) -> Reply:
        if eb.marker(last_user_text(req)) == "q0":
            return Reply(body=bomb, headers={"content-encoding": "gzip"})
        return eb.model_reply(req)

    model, judge = openai_server(script), openai_server(eb.judge_script())
    out = tmp_path / "out"
    rc = evaluate.main(_argv(bench, out, model.base_url, judge.base_url, "--max_reply_chars", "1000"))
    assert rc == cli.ExitCode.INCOMPLETE
    assert "Traceback" not in capsys.readouterr().err
    recs = eb.records_by_key(out / eb.EVAL)
    assert list(recs) == list(eb.QUESTIONS)
    er = recs["q0"]["eval_result"]
    assert er["status"] == "failed"
    assert er["fail_reason"] == (
        f"MalformedReply: the reply body is larger than {reply_body_cap(1000)} bytes (decoded); refused while reading"
    )
    assert all(r["eval_result"]["status"] != "failed" for k, r in recs.items() if k != "q0")


# ------------------------------------------------------------------------------- item 4: trickling checks
class TricklingModels:
    """A loopback server whose every answer (``GET /v1/models``) announces 10 kB and sends one byte per
    ``every`` seconds: each read sees a byte, so only a total deadline ends the wait."""

    def __init__(self, every: float = 0.3):
        self.every = every
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.accepted = threading.Event()
        self.sent = 0  # bytes of the body sent so far (to every client)
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                self.accepted.set()
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 10000\r\n\r\n")
                while not self.stop.is_set():
                    conn.sendall(b" ")
                    self.sent += 1
                    time.sleep(self.every)
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture
def trickling():
    srv = TricklingModels()
    yield srv
    srv.close()


@pytest.mark.timing
def test_the_endpoint_check_has_a_total_deadline(trickling):
    outcome: list = []

    def check():
        try:
            check_endpoints([("model", Endpoint(base_url=trickling.base_url, api_key="k"))], timeout=1.0)
            outcome.append("reachable")
        except EndpointError as e:
            outcome.append(str(e))

    t = threading.Thread(target=check, daemon=True)
    t0 = time.monotonic()
    t.start()
    t.join(6.0)
    assert not t.is_alive(), "the check was still waiting after 6 s (a 1 s deadline)"
    assert time.monotonic() - t0 < 4.0
    assert outcome and "unreachable (no answer in time)" in outcome[0], outcome


@pytest.mark.timing
def test_sigterm_ends_a_command_stuck_in_the_endpoint_check(bench, tmp_path, trickling, openai_server):
    judge = openai_server(eb.judge_script())
    argv = _argv(bench, tmp_path / "out", trickling.base_url, judge.base_url)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "insight_o3.scripts.evaluate", *argv],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert trickling.accepted.wait(60), "the endpoint check never connected"
        wait_until(lambda: trickling.sent >= 2, 10, "the check reading the trickling body")
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        rc = proc.wait(timeout=8)
        assert time.monotonic() - t0 < 3.0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    assert rc == 4 and "stopped by SIGTERM" in err, err
    assert "Traceback" not in err, err


# ------------------------------------------------------------------------------- items 8-11, 13: hostile files
def _edit_row(ann: Path, line: int, change: Callable[[str], str]) -> None:
    lines = ann.read_text().splitlines()
    lines[line - 1] = change(lines[line - 1])
    ann.write_text("\n".join(lines) + "\n")


def _add_field(name: str, value: str) -> Callable[[str], str]:
    return lambda row: row[:-1] + f', "{name}": {value}}}'


def _box(value: str) -> Callable[[str], str]:
    return lambda row: row.replace('"bbox": [1, 2, 30, 40]', f'"bbox": [1, 2, {value}, 40]')


#: name -> (how line 3 of the annotation file is changed, what the one error line must say)
BAD_ROWS: dict[str, tuple[Callable[[str], str], str]] = {
    "JSON 100k deep": (_add_field("deep", "[" * DEEP + "]" * DEEP), "nested more than 100 levels deep"),
    "a NaN box": (_box("NaN"), "field 'layout_infos.1.bbox[2]' is nan (not a finite number)"),
    "an Infinity box": (_box("Infinity"), "field 'layout_infos.1.bbox[2]' is inf (not a finite number)"),
    "a 1e999 box": (_box("1e999"), "field 'layout_infos.1.bbox[2]' is inf (not a finite number)"),
    "a 400-digit integer": (_box("9" * 400), "an integer of 400 digits"),
}


@pytest.mark.parametrize("case", list(BAD_ROWS))
def test_a_hostile_annotation_row_is_bad_input_naming_line_and_field(case, bench, tmp_path, openai_server, capsys):
    change, message = BAD_ROWS[case]
    ann, _ = bench
    _edit_row(ann, 3, change)
    model, judge = openai_server(eb.model_script()), openai_server(eb.judge_script())
    assert evaluate.main(_argv(bench, tmp_path / "out", model.base_url, judge.base_url)) == 2
    err = capsys.readouterr().err
    assert f"{ann}:3: {message}" in err, err
    assert "Traceback" not in err and model.count == 0


def test_an_annotation_file_with_a_byte_order_mark_is_read(bench, tmp_path, openai_server):
    ann, _ = bench
    ann.write_bytes(b"\xef\xbb\xbf" + ann.read_bytes())
    model, judge = openai_server(eb.model_script()), openai_server(eb.judge_script())
    out = tmp_path / "out"
    assert evaluate.main(_argv(bench, out, model.base_url, judge.base_url)) == 0
    assert list(eb.records_by_key(out / eb.EVAL)) == list(eb.QUESTIONS)


#: name -> the vSearcher's reply; each is one episode without a box, never a traceback
SEARCHER_REPLIES = {
    "an <answer> 100k deep": "<answer>" + "[" * DEEP + "]" * DEEP + "</answer>",
    "a <tool_call> 100k deep": '<tool_call>{"name": "image_zoom_in_tool", "arguments": '
    + "[" * DEEP
    + "]" * DEEP
    + "}</tool_call>",
    "a 400-digit coordinate": f"<answer>[0, 0, {'9' * 400}, 5]</answer>",
    "a NaN coordinate": "<answer>[0, 0, NaN, 5]</answer>",
}


@pytest.mark.parametrize("case", list(SEARCHER_REPLIES))
def test_a_hostile_vsearcher_reply_is_one_record(case, tmp_path, openai_server, capsys):
    img_dir = tmp_path / "images"
    img_dir.mkdir()
    Image.new("RGB", (120, 90)).save(img_dir / "one.png")
    ann = tmp_path / "regions.jsonl"
    rows = [{"id": k, "image": "one.png", "description": "x", "bbox": [1, 1, 9, 9]} for k in ("a", "b")]
    ann.write_text("".join(json.dumps(r) + "\n" for r in rows))
    srv = openai_server(lambda req, call: Reply(body=chat(SEARCHER_REPLIES[case]).body))
    out = tmp_path / "out"
    argv = ["--ann_file", str(ann), "--img_dir", str(img_dir), "--model", "m", "--api_base_url", srv.base_url]
    evaluate_vsearch.main([*argv, "--output_dir", str(out), "--no_progress", "--max_retries", "0"])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    recs = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 2 and all(r["status"] == "invalid" for r in recs), recs


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        ('{"answer": ' + "[" * DEEP + "]" * DEEP + "}", "the edit must be a JSON object on the same line"),
        ('{"target_layouts": [true]}', "target_layouts: must be a non-empty list of layout ids"),
    ],
)
def test_a_hostile_review_edit_is_refused_on_apply(edit, problem, tmp_path):
    path = tmp_path / "batch_001.decisions.txt"
    path.write_text(f"chart/img#q0 edit {edit}\n")
    decisions, problems = review.read_decisions([str(path)])
    if problems:
        assert problem in problems[0] and len(problems[0]) < 300
        return
    with pytest.raises(review.DecisionsError, match=problem):
        review.apply(items(), {"chart/img": source(4)}, decisions)


# ------------------------------------------------------------------------------- item 12: extreme aspect ratios
@pytest.mark.parametrize("size", [(1, 100_000), (100_000, 1)])
def test_a_1_by_100000_png_is_refused_with_a_reason(size, bench, tmp_path, openai_server, caplog):
    ann, img_dir = bench
    Image.new("RGB", size, (9, 9, 9)).save(img_dir / "images" / "img0.png")  # q0, q1, q7
    model, judge = openai_server(eb.model_script()), openai_server(eb.judge_script())
    out = tmp_path / "out"
    assert evaluate.main(_argv(bench, out, model.base_url, judge.base_url)) == cli.ExitCode.INCOMPLETE
    recs = eb.records_by_key(out / eb.EVAL)
    assert list(recs) == list(eb.QUESTIONS)
    for q in ("q0", "q1", "q7"):
        er = recs[q]["eval_result"]
        assert er["status"] == "failed" and "at most 65535 px a side" in er["fail_reason"], er
    assert "solver raised" not in caplog.text
    assert all(recs[q]["eval_result"]["status"] != "failed" for q in recs if q not in ("q0", "q1", "q7"))


# ------------------------------------------------------------------------------- item 7: ambiguous verdicts
GOLDEN_VERDICTS = json.loads((REPO / "tests/golden/judge_verdicts.json").read_text())["cases"]
AMBIGUOUS = [
    "Correct? No.",
    "Is it correct? The model says 12 but the GT is 21, so no.",
    "correct (not really)",
    "<wrong> (not <correct>)",
    "Not <correct>.",
    "<correct> or <wrong>",
    "",
]
#: where the released rule is the documented bug ("correct" in "incorrect")
FIXED = ["Incorrect", "The answer is not correct."]


@pytest.mark.parametrize("case", GOLDEN_VERDICTS, ids=lambda c: repr(c["reply"]))
def test_judge_verdicts_against_the_released_rule(case):
    reply, released = case["reply"], case["released_is_correct"]
    if reply in AMBIGUOUS:
        assert read_verdict(reply) is None
        with pytest.raises(AmbiguousVerdict):
            judged_correct(reply)
    elif reply in FIXED:
        assert released is True and read_verdict(reply) is False
    else:  # the released rule decides: the same verdict
        assert read_verdict(reply) is released
    assert judged_correct(reply, "fork") is ("<correct>" in reply)  # the fork's in-loop rule, as it is


@pytest.mark.parametrize("reply", AMBIGUOUS)
def test_an_ambiguous_verdict_is_a_judge_failure_not_a_score(reply, bench, tmp_path, openai_server):
    def judge_script(req: dict, call: Call) -> Reply:
        prompt = last_user_text(req)
        if eb.marker(prompt) == "q5" and "GT Answer:" in prompt:
            return chat(reply)
        return eb.judge_script()(req, call)

    model, judge = openai_server(eb.model_script()), openai_server(judge_script)
    out = tmp_path / "out"
    assert evaluate.main(_argv(bench, out, model.base_url, judge.base_url)) == cli.ExitCode.INCOMPLETE
    er = eb.records_by_key(out / eb.EVAL)["q5"]["eval_result"]
    assert (er["status"], er["fail_stage"]) == ("failed", "judge"), er
    assert "ambiguous judge verdict" in er["fail_reason"] and er["judge_outputs"][-1] == reply


#: How the judge's first verdict on q5 goes wrong (an ambiguous reply, a malformed one); asked again it is clear.
FIRST_VERDICT_FAULTS: dict[str, Callable[[], Reply]] = {
    "ambiguous": lambda: chat("Correct? No."),
    "malformed": lambda: Reply(body=_set_content(7)(chat("<correct>").body)),
}


@pytest.mark.parametrize("cache", [False, True], ids=["no cache", "judge cache"])
@pytest.mark.parametrize("fault", list(FIRST_VERDICT_FAULTS))
def test_a_judge_failure_is_judged_again_within_the_run(fault, cache, bench, tmp_path, openai_server):
    """q5's first verdict is ambiguous or malformed, the second clear: the run judges the attempt again, fresh
    (past the judge cache, which kept the first reply), and q5 is scored — one more extraction and verdict.
    With --judge_retries 0 it is a failed record, as before, which --retry_failed judges again."""
    verdicts = {"n": 0}

    def judge_script(req: dict, call: Call) -> Reply:
        prompt = last_user_text(req)
        if eb.marker(prompt) == "q5" and "GT Answer:" in prompt:
            verdicts["n"] += 1
            if verdicts["n"] == 1:
                return FIRST_VERDICT_FAULTS[fault]()
        return eb.judge_script()(req, call)

    model, judge = openai_server(eb.model_script()), openai_server(judge_script)
    extra = ["--judge_cache"] if cache else []
    out = tmp_path / "out"
    assert evaluate.main(_argv(bench, out, model.base_url, judge.base_url, *extra)) == 0
    er = eb.records_by_key(out / eb.EVAL)["q5"]["eval_result"]
    assert (er["status"], er["judge_outputs"]) == ("correct", ["white", "<correct>"]), er
    assert verdicts["n"] == 2
    q5_asks = [r for r in judge.requests if eb.marker(last_user_text(r)) == "q5"]
    assert len(q5_asks) == 4  # extraction + verdict, twice

    verdicts["n"] = 0
    out0 = tmp_path / "out0"
    argv = _argv(bench, out0, model.base_url, judge.base_url, *extra, "--judge_retries", "0")
    assert evaluate.main(argv) == cli.ExitCode.INCOMPLETE
    er = eb.records_by_key(out0 / eb.EVAL)["q5"]["eval_result"]
    assert (er["status"], er["fail_stage"]) == ("failed", "judge"), er
    assert evaluate.main([*argv, "--retry_failed"]) == 0
    assert eb.records_by_key(out0 / eb.EVAL)["q5"]["eval_result"]["status"] == "correct"


@pytest.mark.parametrize("reply", ["<wrong> (not <correct>)", "Not <correct>.", "<correct> or <wrong>"])
def test_the_verify_flow_fails_an_ambiguous_verdict_and_the_fork_rule_keeps_its_own(reply, openai_server):
    srv = openai_server(lambda req, call: chat(reply))
    sample = Sample(0, "q", "i.png", "/i.png", "How many?", None, "7", key="q")

    async def check(verdicts: str):
        client = make_client(Endpoint(base_url=srv.base_url, timeout=10, max_retries=0))
        try:
            judge = AnswerJudge(client, "j", flow="verify", verdicts=verdicts)
            return await judge.check(sample, Attempt("<answer>seven</answer>", "stop"))
        finally:
            await client.close()

    strict = asyncio.run(check("strict"))
    assert (strict.status, strict.fail_stage) == ("failed", "judge") and strict.judge_outputs == [reply]
    assert asyncio.run(check("fork")).status == "correct"  # training under vsearch.variant=original


# ------------------------------------------------------------------------------- also seen: redirects
@pytest.mark.parametrize("status", [307, 308])
def test_a_redirect_is_refused_and_nothing_is_sent_elsewhere(status, openai_server):
    elsewhere = openai_server(lambda req, call: chat("an answer from another host"))
    srv = openai_server(lambda req, call: Reply(status=status, body=b"", headers={"location": elsewhere.base_url}))

    async def ask():
        client = make_client(
            Endpoint(api_key="sk-redirected-0123456789", base_url=srv.base_url, timeout=10, max_retries=0)
        )
        try:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        finally:
            await client.close()

    with pytest.raises(MalformedReply, match=f"redirected the request \\(HTTP {status}"):
        asyncio.run(ask())
    assert elsewhere.count == 0 and srv.count == 1


# ------------------------------------------------------------------------------- also seen: layout sources
def test_layout_sources_cap_their_boxes_and_refuse_nan_naming_the_field(tmp_path):
    box = {"cls_id": 2, "label": "text", "score": 0.9, "coordinate": [1, 1, 9, 9]}
    many = {"input_path": "a.png", "boxes": [box] * (MAX_LAYOUT_BOXES + 1)}
    with pytest.raises(LayoutError, match=f"holds {MAX_LAYOUT_BOXES + 1} boxes"):
        parse_layout(many, "a.json", (100, 100))
    rotated = tmp_path / "page.json"
    rotated.write_text(
        '{"input_path": "a.png", "boxes": [{"label": "text", "coordinate": [1, 1, 9, 1, 9, NaN, 1, 9]}]}'
    )
    with pytest.raises(LayoutError, match=r"field 'boxes\[0\]\.coordinate\[5\]' is nan"):
        list(iter_layout_files(str(rotated)))
