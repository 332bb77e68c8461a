"""The standalone vSearcher evaluation CLI against a real scripted server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.support.openai_server import request_text
from tests.support.records import by_key
from tests.support.vsearch_bench import BUDGET, GT, KEY, H, W, run, script
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def data(tmp_path):
    img_dir = tmp_path / "images"
    img_dir.mkdir()
    Image.new("RGB", (W, H), (200, 40, 40)).save(img_dir / "one.png")
    ann = tmp_path / "regions.jsonl"
    rows = [
        {"id": "a", "image": "one.png", "description": "the a region", "bbox": GT["a"]},
        {"file_name": "one.png", "region_description": "the b region", "bbox": GT["b"]},
        {"image": "one.png", "target": "the c region", "bbox": GT["c"]},
    ]
    ann.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(ann), str(img_dir), tmp_path / "out"


def test_metrics_records_and_no_secrets(openai_server, data):
    ann, img_dir, out = data
    srv = openai_server(script())
    assert run(ann, img_dir, out, srv.base_url) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["n_samples"] == 3 and m["n_failed"] == 0
    assert m["mean_iou"] == pytest.approx(1 / 3, abs=0.01) and m["acc_iou_0.5"] == pytest.approx(1 / 3)
    assert m["not_found_rate"] == pytest.approx(1 / 3) and m["invalid_rate"] == pytest.approx(1 / 3)
    assert m["format_valid_rate"] == pytest.approx(2 / 3) and m["mean_tool_calls"] == pytest.approx(1 / 3)
    recs = [json.loads(l) for l in (out / "records.jsonl").read_text().splitlines()]
    assert [r["sample_key"] for r in recs] == ["a", "#2", "#3"]
    assert recs[0]["pred_bbox"] == pytest.approx(GT["a"], abs=1) and recs[0]["n_tool_calls"] == 1  # whole pixels
    assert srv.requests[0]["temperature"] == 0.0
    for f in os.listdir(out):
        body = (out / f).read_text()
        assert KEY not in body and "base64" not in body


def test_resume_retries_only_failed_and_drops_torn_line(openai_server, data):
    ann, img_dir, out = data
    assert run(ann, img_dir, out, openai_server(script(fail_b=True)).base_url) == 1
    recs = {json.loads(l)["sample_key"]: json.loads(l) for l in (out / "records.jsonl").read_text().splitlines()}
    assert recs["#2"]["status"] == "failed" and "500" in recs["#2"]["error"]
    with open(out / "records.jsonl", "a") as f:
        f.write('{"sample_key": "#3", "status": "fou')  # a torn line, as after SIGKILL
    srv = openai_server(script())
    assert run(ann, img_dir, out, srv.base_url) == 0
    assert srv.count == 1 and "the b region" in request_text(srv.requests[0])
    m = json.loads((out / "metrics.json").read_text())
    assert m["n_failed"] == 0 and m["not_found_rate"] == pytest.approx(1 / 3)
    assert len((out / "records.jsonl").read_text().splitlines()) == 3


@pytest.mark.parametrize(
    "row,msg",
    [
        ('{"image": "one.png", "description": "x"}', "field 'bbox'"),
        ('{"image": "one.png", "description": "x", "bbox": [5, 5, 1, 9]}', "x1 < x2"),
        ('{"image": "one.png", "description": "x", "bbox": [1, 2, "3", 4]}', "field 'bbox'"),
        ('{"image": "one.png", "bbox": [1, 2, 3, 4]}', "'description' / 'region_description' / 'target'"),
        ('{"image": "nope.png", "description": "x", "bbox": [1, 2, 3, 4]}', "image file not found"),
        ('{"image": "one.png", "description": "x", "bbox": [1, 2, 3, 4]', "malformed JSON"),
    ],
)
def test_bad_annotations_name_file_line_field(data, capsys, row, msg):
    ann, img_dir, out = data
    with open(ann, "a") as f:
        f.write(row + "\n")
    assert run(ann, img_dir, out, "http://127.0.0.1:9/v1") == 2
    err = capsys.readouterr().err
    assert f"{ann}:4" in err and msg in err


def _desc_keys(reqs: list[dict]) -> list[str]:
    """The sample of each request (its description names it: "the <kind> region <i>")."""
    return [re.search(r"the [abc] region (\d+)", request_text(r)).group(1) for r in reqs]


def test_sigkill_then_resume_queries_only_unfinished(openai_server, tmp_path):
    img_dir = tmp_path / "images"
    img_dir.mkdir()
    Image.new("RGB", (W, H), (200, 40, 40)).save(img_dir / "one.png")
    ann = tmp_path / "regions.jsonl"
    kinds = "abcabcab"
    ann.write_text(
        "".join(
            json.dumps({"id": f"s{i}", "image": "one.png", "description": f"the {k} region {i}", "bbox": GT[k]}) + "\n"
            for i, k in enumerate(kinds)
        )
    )
    ref_out, out = tmp_path / "uninterrupted", tmp_path / "out"
    assert run(str(ann), str(img_dir), ref_out, openai_server(script()).base_url) == 0

    # answers s0 (two turns: "a" zooms once) and s1, then holds s2's request until released
    srv = openai_server(script(), block_after=3)
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    cmd = [
        sys.executable,
        "-m",
        "insight_o3.scripts.evaluate_vsearch",
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
        "--max_pixels",
        str(BUDGET),
        "--output_dir",
        str(out),
        "--max_retries",
        "0",
        "--concurrency",
        "1",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        srv.wait_blocked(1, timeout=30)
        wait_until(lambda: len(by_key(out / "records.jsonl")) >= 2, 30, "2 records")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done = {r["sample_key"] for r in by_key(out / "records.jsonl").values()}
    assert 2 <= len(done) < len(kinds), done
    assert not (out / "metrics.json").exists()

    srv.release()
    first = srv.count
    assert run(str(ann), str(img_dir), out, srv.base_url, "--concurrency", "3") == 0
    again = _desc_keys(srv.requests[first:])
    unfinished = sorted(str(i) for i in range(len(kinds)) if f"s{i}" not in done)
    assert sorted(set(again)) == unfinished  # only the unfinished samples were queried
    assert len(again) == sum(2 if kinds[int(i)] == "a" else 1 for i in unfinished)  # once each ("a" zooms once)
    lines = [json.loads(l) for l in (out / "records.jsonl").read_text().splitlines()]
    assert [r["sample_key"] for r in lines] == [f"s{i}" for i in range(len(kinds))]  # one record per sample
    assert json.loads((out / "metrics.json").read_text()) == json.loads((ref_out / "metrics.json").read_text())
