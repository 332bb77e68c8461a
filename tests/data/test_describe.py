"""Region descriptions against a real local OpenAI-compatible server; kill (SIGKILL) and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from insight_o3.data.describe import parse_description
from insight_o3.protocol.prompts import REGION_DESCRIPTION_SYSTEM_PROMPT, REGION_DESCRIPTION_USER_PROMPT
from insight_o3.scripts._shared import ExitCode
from tests.support.layout_bench import N_IMAGES, command, make_inputs
from tests.support.openai_server import chat, error
from tests.support.waiting import wait_for_lines

REPO = Path(__file__).resolve().parents[2]


def _box_of(request) -> str:
    """The image data URL identifies the box (the red rectangle differs per box)."""
    user = request["messages"][1]["content"]
    return next(p["image_url"]["url"] for p in user if p["type"] == "image_url")


def test_parse_description():
    assert (
        parse_description("ok.\nregion_description={the bar chart at the top-left}") == "the bar chart at the top-left"
    )
    assert parse_description("no format") is None


def test_describe_kill_and_resume(openai_server, tmp_path):
    img_dir, lay_dir = make_inputs(tmp_path)
    out = tmp_path / "out"
    seen: list[str] = []

    def slow(req, call):
        assert req["messages"][0]["content"] == REGION_DESCRIPTION_SYSTEM_PROMPT
        assert req["messages"][1]["content"][1]["text"] == REGION_DESCRIPTION_USER_PROMPT
        seen.append(_box_of(req))
        return chat(f"region_description={{region number {call.index}}}")

    srv = openai_server(slow, block_after=3)  # three boxes described, then every request held
    proc = subprocess.Popen(
        command(img_dir, lay_dir, out, srv.base_url), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    log = out / "descriptions.jsonl"
    srv.wait_blocked(1, timeout=30)
    wait_for_lines(3, log, timeout=30)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = [json.loads(x) for x in log.read_text().splitlines() if x.endswith("}")]
    assert 3 <= len(done_before) < 9
    n_before = srv.count

    # the rerun: one failure injected (HTTP 400, no retry) then fixed by a third run
    fast_calls: list[str] = []

    def fast(req, call):
        fast_calls.append(_box_of(req))
        if len(fast_calls) == 1:
            return error(400, "scripted bad request")
        return chat(f"thinking...\nregion_description={{region again {call.index}}}")

    srv2 = openai_server(fast)
    r = subprocess.run(
        command(img_dir, lay_dir, out, srv2.base_url), cwd=REPO, capture_output=True, text=True, timeout=60
    )
    # exit 1 = incomplete work (one box lost to the scripted 400; was 0 before the shared exit-code contract)
    assert r.returncode == ExitCode.INCOMPLETE, r.stderr
    assert "sk-test-secret-123" not in r.stderr + r.stdout + log.read_text()
    # exactly the unfinished boxes were asked again
    assert len(fast_calls) == 9 - len(done_before)
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(recs) == 9 and len({x["sample_key"] for x in recs}) == 9
    failed = [x for x in recs if x["status"] == "failed"]
    assert len(failed) == 1 and "400" in failed[0]["error"]
    rows = [json.loads(x) for x in (out / "regions.jsonl").read_text().splitlines()]
    assert len(rows) == 8
    r = subprocess.run(
        command(img_dir, lay_dir, out, srv2.base_url), cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert len(fast_calls) == 9 - len(done_before) + 1  # only the failed box re-queried
    rows = [json.loads(x) for x in (out / "regions.jsonl").read_text().splitlines()]
    assert len(rows) == 9
    assert {x["sample_key"] for x in rows} == {f"info{i}#{k}" for i in range(N_IMAGES) for k in range(3)}
    for row in rows:
        assert row["description"].startswith("region")
        assert row["label"] == "chart" and row["width"] == 600 and row["height"] == 800
        assert set(row) >= {"image", "width", "height", "description", "bbox", "label", "source"}
    kept_before = {x["sample_key"]: x["description"] for x in done_before}
    by_key = {x["sample_key"]: x["description"] for x in rows}
    assert all(by_key[k] == d for k, d in kept_before.items()), "finished boxes were redone"
    assert n_before >= len(done_before)


def test_missing_image_is_a_clear_error(tmp_path):
    img_dir, lay_dir = make_inputs(tmp_path)
    os.remove(img_dir / "info1.png")
    r = subprocess.run(
        command(img_dir, lay_dir, tmp_path / "o", "http://127.0.0.1:9/v1"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == ExitCode.BAD_INPUT
    assert "info1.json" in r.stderr and "image file not found" in r.stderr and "Traceback" not in r.stderr
