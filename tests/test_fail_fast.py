"""Fail fast: a 401/403/404 from the model, judge or vSearcher endpoint stops a run after the first such
response, with one line naming the role, URL and status (key redacted); a run whose requests mostly
fail stops at ``--max_failure_ratio``. Real local servers in status-code mode, no patching."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest

from insight_o3.endpoints.client import make_client
from insight_o3.endpoints.endpoint import Endpoint
from insight_o3.endpoints.guard import EXIT_API_STOP, FailureRatioError, FatalAPIError, RunGuard, gather_or_stop
from insight_o3.scripts import evaluate
from tests.support import eval_bench as eb
from tests.support import insight_o3_bench as io3
from tests.support.openai_server import refuse


@pytest.fixture
def bench(tmp_path):
    return eb.make_bench(tmp_path / "bench")


def _stop_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "no message on stderr"
    line = err[-1]
    assert "Traceback" not in "\n".join(err)
    return line


@pytest.mark.smoke
def test_401_from_the_model_stops_at_the_first_response(bench, tmp_path, openai_server, capsys):
    model = openai_server(refuse(401))
    judge = openai_server(eb.judge_script())
    out = tmp_path / "out"
    argv = eb.keyed_argv(*bench, out, model.base_url, judge.base_url, "--num_trials", "3", "--concurrency", "2")
    assert evaluate.main(argv) == EXIT_API_STOP
    assert model.count <= 2  # the requests already in flight, nothing after the first 401
    line = _stop_line(capsys)
    assert line.startswith(f"error: the model endpoint answered HTTP 401 for POST {model.base_url}/chat/completions")
    assert "Incorrect API key provided: ***" in line and eb.MAIN_KEY not in line
    assert "rerun the same command to resume" in line
    assert eb.all_records(out / eb.EVAL) == []  # no sample was recorded as failed
    assert not list((out / eb.EVAL).glob("trial_*/done"))
    eb.assert_no_secrets(out)
    # a rerun with a working endpoint resumes: every sample asked exactly once
    good = openai_server(eb.model_script())
    argv = eb.keyed_argv(*bench, out, good.base_url, judge.base_url, "--num_trials", "3", "--concurrency", "2")
    assert evaluate.main(argv) == 0
    assert good.count == 8
    eb.assert_expected(out, 3)


def test_404_from_the_judge_stops_the_run(bench, tmp_path, openai_server, capsys):
    model = openai_server(eb.model_script())
    judge = openai_server(refuse(404))
    out = tmp_path / "out"
    argv = eb.keyed_argv(*bench, out, model.base_url, judge.base_url, "--concurrency", "1")
    assert evaluate.main(argv) == EXIT_API_STOP
    assert judge.count == 1
    line = _stop_line(capsys)
    assert f"the judge endpoint answered HTTP 404 for POST {judge.base_url}/chat/completions" in line
    assert "The model `scripted-judge` does not exist" in line
    # samples decided by the rules before the stop are kept; none is recorded as failed
    recs = eb.all_records(out / eb.EVAL)
    assert all(r["eval_result"]["status"] != "failed" for r in recs)
    assert len(recs) < 8
    n_model = model.count
    fixed = openai_server(eb.judge_script())
    assert evaluate.main(eb.keyed_argv(*bench, out, model.base_url, fixed.base_url)) == 0
    assert model.count == n_model + 8 - len(recs)  # only the unrecorded samples asked again
    eb.assert_expected(out, 1)


def test_403_from_the_vsearcher_stops_an_insight_o3_run(bench, tmp_path, openai_server, capsys):
    reasoner = openai_server(io3.reasoner_script())
    searcher = openai_server(refuse(403))
    judge = openai_server(eb.judge_script())
    out = tmp_path / "out"
    argv = io3.argv(out, *bench, reasoner.base_url, searcher.base_url, judge.base_url, "--concurrency", "1")
    assert evaluate.main(argv) == EXIT_API_STOP
    assert searcher.count == 1 and reasoner.count == 1
    line = _stop_line(capsys)
    assert f"the vSearcher endpoint answered HTTP 403 for POST {searcher.base_url}/chat/completions" in line
    assert io3.SEARCH_KEY not in line and "***" in line
    # the episode whose search was refused is not recorded as an answer
    assert eb.all_records(out / eb.EVAL) == []


def test_failure_ratio_stops_a_run_whose_requests_mostly_fail(bench, tmp_path, openai_server, capsys):
    model = openai_server(refuse(500))
    judge = openai_server(eb.judge_script())
    out = tmp_path / "out"
    base = eb.keyed_argv(
        *bench,
        out,
        model.base_url,
        judge.base_url,
        "--num_trials",
        "3",
        "--separate_trial_requests",
        "--concurrency",
        "2",
    )
    base[base.index("--max_retries") + 1] = "0"
    assert evaluate.main(base) == EXIT_API_STOP  # default: 0.5 after 20 requests
    assert 20 <= model.count <= 21  # 24 needed; stopped at the 20th failure
    line = _stop_line(capsys)
    assert f"the model endpoint at {model.base_url}/ failed 20 of its 20 requests of this run" in line
    assert "--max_failure_ratio 0.5" in line and "last failure: InternalServerError" in line
    # the failures before the stop are ordinary failed records (retried with --retry_failed)
    recs = eb.all_records(out / eb.EVAL)
    assert 0 < len(recs) < 24 and all(r["eval_result"]["status"] == "failed" for r in recs)
    # --max_failure_ratio 1 never stops: the run records every failure and ends normally
    out2 = tmp_path / "out2"
    argv = [str(out2) if x == str(out) else x for x in base] + ["--max_failure_ratio", "1"]
    assert evaluate.main(argv) == 1  # INCOMPLETE: some sample-trials failed
    assert len(eb.all_records(out2 / eb.EVAL)) == 24


def test_run_guard_ratio_is_judged_only_after_min_requests():
    g = RunGuard(0.5, min_requests=4)
    for _ in range(3):
        g.request_done("model", "boom")
    assert not g.tripped  # 3 of 3 failed, but fewer than 4 requests so far
    g.request_done("model", None)
    assert not g.tripped  # 3 of 4 > 0.5: judged now ...
    g.request_done("model", "boom")
    assert isinstance(g.error, FailureRatioError) and (g.error.failed, g.error.total) == (4, 5)
    g2 = RunGuard(0.5, min_requests=2)
    g2.request_done("judge", "x")
    g2.request_done("judge", None)
    assert not g2.tripped  # exactly half is not "more than" half


def test_gather_or_stop_cancels_the_rest_on_a_trip():
    async def go():
        g = RunGuard()
        cancelled = []

        async def slow(i):
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(i)
                raise

        async def tripper():
            await asyncio.sleep(0.01)
            g.fatal("judge", "http://x/v1/chat/completions", 401, "no")

        with pytest.raises(FatalAPIError, match="judge endpoint answered HTTP 401"):
            await gather_or_stop([slow(0), slow(1), tripper()], g)
        return cancelled

    assert sorted(asyncio.run(go())) == [0, 1]


def test_a_client_reports_fatal_status_and_sends_nothing_after(openai_server):
    srv = openai_server(refuse(404))

    async def go():
        g = RunGuard()
        c = make_client(
            Endpoint(api_key="sk-whatever-1234", base_url=srv.base_url, timeout=5, max_retries=3),
            role="vSearcher",
            guard=g,
        )
        try:
            with pytest.raises(openai.NotFoundError):
                await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            assert isinstance(g.error, FatalAPIError) and g.error.status == 404
            with pytest.raises(FatalAPIError):  # refused locally: no second request
                await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        finally:
            await c.close()

    asyncio.run(go())
    assert srv.count == 1  # 404 is not retried by the SDK, and nothing followed it


# ----------------------------------------------------------------------------- the other commands
def test_evaluate_vsearch_stops_on_401(tmp_path, openai_server, capsys):
    from PIL import Image

    from insight_o3.scripts import evaluate_vsearch as ev
    from tests.support.vsearch_bench import KEY

    img_dir = tmp_path / "images"
    img_dir.mkdir()
    Image.new("RGB", (64, 48)).save(img_dir / "one.png")
    ann = tmp_path / "regions.jsonl"
    ann.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "image": "one.png", "description": f"region {i}", "bbox": [1, 1, 20, 20]}) + "\n"
            for i in range(6)
        )
    )
    srv = openai_server(refuse(401))
    out = tmp_path / "out"
    rc = ev.main(
        [
            "--ann_file",
            str(ann),
            "--img_dir",
            str(img_dir),
            "--model",
            "vs",
            "--api_base_url",
            srv.base_url,
            "--api_key",
            KEY,
            "--output_dir",
            str(out),
            "--concurrency",
            "1",
            "--max_retries",
            "2",
        ]
    )
    assert rc == EXIT_API_STOP and srv.count == 1
    line = _stop_line(capsys)
    assert f"the vSearcher endpoint answered HTTP 401 for POST {srv.base_url}/chat/completions" in line
    assert KEY not in line
    assert (out / "records.jsonl").read_text() == ""


def test_difficulty_filter_stops_on_401(tmp_path, openai_server, capsys):
    from insight_o3.scripts import filter_difficulty as difficulty
    from tests.support.difficulty_bench import ITEMS, KEY, make_collages

    out = tmp_path / "collages"
    make_collages(out, ITEMS)
    srv = openai_server(refuse(401))
    rc = difficulty.main(
        [
            "--out_dir",
            str(out),
            "--model",
            "vr",
            "--base_url",
            srv.base_url,
            "--api_key",
            KEY,
            "--concurrency",
            "1",
            "--no_progress",
        ]
    )
    assert rc == EXIT_API_STOP and srv.count == 1
    line = _stop_line(capsys)
    assert f"the vReasoner endpoint answered HTTP 401 for POST {srv.base_url}/chat/completions" in line
    assert KEY not in line
    assert (out / "difficulty.jsonl").read_text() == ""


def test_region_descriptions_stop_on_404(tmp_path, openai_server):
    import subprocess

    from tests.support.layout_bench import command, make_inputs
    from tests.support.stacks import REPO

    img_dir, lay_dir = make_inputs(tmp_path)
    srv = openai_server(refuse(404))
    out = tmp_path / "out"
    r = subprocess.run(
        command(img_dir, lay_dir, out, srv.base_url, concurrency=1),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == EXIT_API_STOP, r.stderr
    assert srv.count == 1
    last = r.stderr.strip().splitlines()[-1]
    assert f"the describer endpoint answered HTTP 404 for POST {srv.base_url}/chat/completions" in last
    assert "Traceback" not in r.stderr
    assert (out / "descriptions.jsonl").read_text() == ""
