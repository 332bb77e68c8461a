"""Hostile replies, dead endpoints and signals, against real loopback
HTTP servers, real signals and real subprocesses:

* a reply with a lone surrogate and negative or missing usage is stored (text escaped, usage flagged as
  unreported), the run finishes and resumes; the record log's backstop writes such a record escaped;
* SIGTERM, SIGKILL and Ctrl-C of ``evaluate | cat`` with image worker processes: the pipe closes within
  seconds, no process of the group is left, SIGTERM/SIGINT end with one line and status 4, records intact
  and the resume exact;
* the failure guard counts per endpoint and names the one that tripped it;
* ``--client_timeout`` is a total deadline per attempt (a trickling server), the SDK's retries kept.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest

from insight_o3.endpoints.client import make_client
from insight_o3.endpoints.endpoint import Endpoint
from insight_o3.endpoints.guard import FailureRatioError, RunGuard
from insight_o3.scripts import _shared as cli
from insight_o3.scripts import evaluate
from insight_o3.storage.record_log import ESCAPED_MARK, RecordLog
from tests.support import eval_bench as eb
from tests.support.commands import console_scripts
from tests.support.openai_server import Call, Reply, chat, refuse
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def bench(tmp_path):
    return eb.make_bench(tmp_path / "bench")


# ----------------------------------------------------------------------------------- item 1: replies
def hostile_model_script():
    """q0: a lone surrogate in the text and a negative prompt_tokens; q2: no usage at all; others as usual."""

    def script(req: dict, call: Call) -> Reply:
        reply = eb.model_reply(req)
        q = eb.marker(eb.last_user_text(req))
        body = reply.body
        assert isinstance(body, dict)
        if q == "q0":
            body["choices"][0]["message"]["content"] = "Looking \ud800closely... <answer>C</answer>"
            body["usage"]["prompt_tokens"] = -1000
        elif q == "q2":
            del body["usage"]
        return reply

    return script


def test_a_lone_surrogate_and_bad_usage_are_stored_flagged_and_the_run_resumes(bench, tmp_path, openai_server):
    model = openai_server(hostile_model_script())
    judge = openai_server(eb.judge_script())
    out = tmp_path / "out"
    argv = eb.keyed_argv(*bench, out, model.base_url, judge.base_url)
    assert evaluate.main(argv) == 0
    eb.assert_expected(out, 1)  # the hostile replies changed no verdict
    recs = eb.records_by_key(out / eb.EVAL)
    er = recs["q0"]["eval_result"]
    assert "Looking \\ud800closely" in er["response"]  # escaped: six visible characters, valid UTF-8
    assert er["usage"] is None  # the invalid usage object was dropped at the boundary ...
    assert recs["q0"]["usage"]["model"]["unreported_requests"] == 1  # ... and the request flagged
    assert recs["q2"]["usage"]["model"]["unreported_requests"] == 1
    assert recs["q0"]["usage"]["model"]["prompt_tokens"] == 0  # never -1000
    assert all("unreported_requests" not in r["usage"]["model"] for k, r in recs.items() if k not in ("q0", "q2"))
    summary = json.loads((out / eb.EVAL / "summary_metrics.json").read_text())
    assert summary["run_totals"]["usage"]["model"]["unreported_requests"] == 2
    # the run card's entry of this run counts them per endpoint
    endpoints = json.loads((out / eb.EVAL / "run_card.json").read_text())["history"][-1]["endpoints"]
    assert endpoints["model"] == {
        "url": model.base_url + "/",
        "ok": 8,
        "failed": 0,
        "escaped_replies": 1,
        "invalid_usage": 1,
        "missing_usage": 2,
    }
    assert endpoints["judge"]["escaped_replies"] == endpoints["judge"]["missing_usage"] == 0
    # the same command again: every record loads, nothing is asked again
    sent = model.count
    assert evaluate.main(argv) == 0
    assert model.count == sent


def test_the_record_log_writes_unencodable_text_escaped_instead_of_failing(tmp_path):
    path = tmp_path / "records.jsonl"
    lg = RecordLog.open(str(path))
    bad = {"sample_key": "a", "response": "x\udcffy", "nested": [{"t": "\ud800"}]}
    lg.append(bad)
    lg.append({"sample_key": "b", "response": "fine"})
    assert bad["response"] == "x\udcffy"  # the caller's record is not changed
    lg.close()
    again = RecordLog.open(str(path))
    assert again.records["a"]["response"] == "x\\udcffy" and again.records["a"]["nested"] == [{"t": "\\ud800"}]
    assert again.records["a"][ESCAPED_MARK] is True and ESCAPED_MARK not in again.records["b"]
    again.compact(["a", "b"])  # and compaction rewrites it
    again.close()
    assert len(path.read_text(encoding="utf-8").splitlines()) == 2


# ----------------------------------------------------------------------------------- item 3: per endpoint
def test_a_dead_judge_trips_the_guard_and_is_named(bench, tmp_path, openai_server, capsys):
    model = openai_server(eb.model_script())
    judge = openai_server(refuse(500))
    out = tmp_path / "out"
    argv = eb.keyed_argv(
        *bench,
        out,
        model.base_url,
        judge.base_url,
        "--num_trials",
        "6",
        "--separate_trial_requests",
        "--concurrency",
        "2",
    )
    argv[argv.index("--max_retries") + 1] = "0"
    # the model's 48 successes would dilute the judge's failures below any pooled ratio
    assert evaluate.main(argv) == cli.ExitCode.STOPPED
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err)
    line = err[-1]
    assert f"the judge endpoint at {judge.base_url}/ failed 20 of its 20 requests of this run" in line, line
    assert "--max_failure_ratio 0.5" in line and "last failure: InternalServerError" in line
    assert 20 <= judge.count <= 22  # and those in flight when it tripped; then nothing more


def test_the_guard_counts_each_endpoint_alone():
    g = RunGuard(0.5, min_requests=20)
    for _ in range(100):
        g.request_done("model", None, "http://m/v1")
    for _ in range(19):
        g.request_done("judge", "APIConnectionError: refused", "http://j/v1")
    assert not g.tripped  # 19 < min_requests of the judge's own
    g.request_done("judge", "APIConnectionError: refused", "http://j/v1")
    assert isinstance(g.error, FailureRatioError)
    assert (g.error.role, g.error.url, g.error.failed, g.error.total) == ("judge", "http://j/v1", 20, 20)
    assert g.ledger()["model"]["ok"] == 100 and g.ledger()["judge"]["failed"] == 20


# ----------------------------------------------------------------------------------- item 4: deadline
@pytest.mark.timing
def test_client_timeout_is_a_total_deadline_per_attempt_with_the_sdk_retries(openai_server):
    def trickle(req: dict, call: Call) -> Reply:
        r = chat("a reply long enough to take a while, one byte at a time")
        r.trickle = 0.05  # each read sees a byte within 0.05 s: a read timeout alone never fires
        return r

    srv = openai_server(trickle)

    async def ask() -> float:
        client = make_client(Endpoint(base_url=srv.base_url, timeout=1.0, max_retries=1))
        t0 = time.monotonic()
        try:
            with pytest.raises(openai.APITimeoutError):
                await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            return time.monotonic() - t0
        finally:
            await client.close()

    elapsed = asyncio.run(ask())
    assert srv.count == 2  # the SDK's retry is kept, with a fresh deadline
    assert elapsed < 4.0, elapsed  # two 1 s attempts and the SDK's backoff, not the ~15 s of the trickle


def test_client_timeout_help_says_deadline(capsys):
    with pytest.raises(SystemExit):
        evaluate.main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "total deadline in seconds of each HTTP attempt" in help_text


# ----------------------------------------------------------------------------------- item 2: signals
def test_every_command_main_is_wrapped_for_signals():
    unwrapped = []
    for name, target in console_scripts().items():
        module, func = target.split(":")
        fn = getattr(__import__(module, fromlist=[func]), func)
        if not getattr(fn, cli.ENTRY_POINT_ATTR, False):
            unwrapped.append(name)
    assert not unwrapped, f"console scripts whose main lacks @cli.entry_point: {unwrapped}"


def _group_alive(pgid: int) -> list[str]:
    """Live (non-zombie) processes of process group ``pgid``: 'pid command' each."""
    alive = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(f"{d.name} {stat[stat.index('(') + 1 : stat.rindex(')')]}")
    return alive


def _start_piped(argv: list[str]) -> tuple[subprocess.Popen, subprocess.Popen]:
    """``python -m insight_o3.scripts.evaluate ARGV | cat`` in a new process group (its id: evaluate's pid)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    ev = subprocess.Popen(
        [sys.executable, "-m", "insight_o3.scripts.evaluate", *argv],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        process_group=0,
    )
    cat = subprocess.Popen(["cat"], stdin=ev.stdout, stdout=subprocess.PIPE, process_group=ev.pid)
    assert ev.stdout is not None
    ev.stdout.close()  # only cat reads it now
    return ev, cat


def _wait_for_workers(pgid: int, n: int, timeout: float = 60.0) -> None:
    # evaluate and cat, the forkserver or workers
    wait_until(lambda: len(_group_alive(pgid)) >= 2 + n, timeout, f"{n} image workers in process group {pgid}")


def _stop_and_check(how: str, bench, tmp_path, openai_server) -> tuple[int, str]:
    """Run evaluate | cat with 2 image workers against a model server that holds every request after
    the second, stop it ``how``; the pipe must close within seconds and the group be empty."""
    slow = openai_server(eb.model_script(), block_after=2)
    judge = openai_server(eb.judge_script())
    out = tmp_path / "out"
    argv = eb.keyed_argv(*bench, out, slow.base_url, judge.base_url, "--image_workers", "2", "--concurrency", "2")
    ev, cat = _start_piped(argv)
    pgid = ev.pid
    try:
        slow.wait_blocked(2)
        _wait_for_workers(pgid, 2)
        if how == "SIGINT":  # a terminal's Ctrl-C: the whole foreground group
            os.killpg(pgid, signal.SIGINT)
        elif how == "SIGTERM to the group":  # kill -TERM -PGID, a container stopping: workers get it too
            os.killpg(pgid, signal.SIGTERM)
        else:  # kill / timeout: the command only
            os.kill(ev.pid, getattr(signal, how))
        t0 = time.monotonic()
        cat_out, _ = cat.communicate(timeout=10)  # EOF: nobody holds the pipe any more
        closed_after = time.monotonic() - t0
        assert ev.stderr is not None
        err = ev.stderr.read().decode()
        rc = ev.wait(timeout=10)
    finally:
        slow.release()
        for p in (ev, cat):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert closed_after < 5.0, closed_after
    wait_until(lambda: _group_alive(pgid) == [], 5, "no process of the run left behind")
    # records intact: every line parses, and the resume is exact
    for line in (out / eb.EVAL / "trial_0" / "eval_records.jsonl").read_text().splitlines():
        json.loads(line)
    fast = openai_server(eb.model_script())
    assert evaluate.main(eb.keyed_argv(*bench, out, fast.base_url, judge.base_url)) == 0
    eb.assert_expected(out, 1)
    assert "Traceback" not in err + cat_out.decode(), err
    return rc, err


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGTERM to the group"])
def test_sigterm_and_ctrl_c_stop_with_one_line_and_leave_nothing(how, bench, tmp_path, openai_server):
    rc, err = _stop_and_check(how, bench, tmp_path, openai_server)
    assert rc == cli.ExitCode.STOPPED
    last = err.strip().splitlines()[-1]
    assert last == f"stopped by {how.split()[0]}; what finished is kept — rerun the same command to resume", err


def test_sigkill_of_the_command_leaves_no_worker_holding_the_pipe(bench, tmp_path, openai_server):
    rc, _ = _stop_and_check("SIGKILL", bench, tmp_path, openai_server)
    assert rc == -signal.SIGKILL
