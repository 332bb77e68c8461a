"""Untrusted input files and servers (issue 22, items 5-7 and 9), against real loopback HTTP servers.

* image names that leave ``--img_dir`` (absolute, ``..``, a symlink out) are bad input, nothing is sent;
* credentials in base URLs never reach a file or stderr (and the base64 of ``user:SECRET`` a server echoes);
* caps on stored replies, the report and decoded image values;
* a 200 reply whose body is an error object is recorded with the server's message.
"""

from __future__ import annotations

import base64
import io
import json
import os
from pathlib import Path

import pytest
from PIL import Image

from insight_o3.scripts import evaluate
from insight_o3.scripts import evaluate_vsearch as ev
from tests.support import eval_bench as eb

MAIN_KEY = "sk-main-SECRET-4242abcd"


def _argv(ann, img_dir, out, main_url, judge_url, *extra) -> list[str]:
    return [
        "--eval_name",
        "m/o3_bench",
        "--model",
        "scripted-vlm",
        "--api_base_url",
        main_url,
        "--judge_model",
        "scripted-judge",
        "--judge_api_base_url",
        judge_url,
        "--ann_file",
        str(ann),
        "--img_dir",
        str(img_dir),
        "--output_dir",
        str(out),
        "--no_progress",
        "--max_retries",
        "0",
        "--image_workers",
        "0",
        *extra,
    ]


@pytest.fixture
def bench(tmp_path):
    return eb.make_bench(tmp_path / "bench")


# ------------------------------------------------------------------------------------ item 5: --img_dir
def _plant(ann: Path, img_dir: Path, how: str) -> tuple[int, str]:
    """Point the annotation's 3rd line at an image outside ``img_dir``; returns (line, the name written)."""
    outside = img_dir.parent.parent / "outside"
    outside.mkdir(exist_ok=True)
    secret = outside / "secret.png"
    Image.new("RGB", (32, 32), (255, 0, 0)).save(secret)
    if how == "absolute":
        name = str(secret)
    elif how == "dotdot":
        name = os.path.relpath(secret, img_dir)  # ../../outside/secret.png
        assert name.startswith("..")
    else:  # a symlink inside img_dir whose target is outside
        os.symlink(secret, img_dir / "images" / "link.png")
        name = "images/link.png"
    lines = ann.read_text().splitlines()
    row = json.loads(lines[2])
    row["file_name"] = name
    lines[2] = json.dumps(row)
    ann.write_text("\n".join(lines) + "\n")
    return 3, name


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_image_outside_img_dir_is_bad_input_and_nothing_is_sent(bench, tmp_path, openai_server, capsys, how):
    ann, img_dir = bench
    line, name = _plant(ann, img_dir, how)
    main_srv, judge_srv = openai_server(eb.model_script()), openai_server(eb.judge_script())
    argv = _argv(ann, img_dir, tmp_path / "out", main_srv.base_url, judge_srv.base_url)
    assert evaluate.main(argv) == 2
    err = capsys.readouterr().err
    assert f"{ann}:{line}: field 'file_name'" in err and "outside the image directory" in err
    assert "--allow_outside_img_dir" in err
    assert main_srv.count == 0 and judge_srv.count == 0
    # the flag restores the old behaviour: the image is read and sent
    assert evaluate.main(argv + ["--allow_outside_img_dir"]) == 0
    assert main_srv.count == 8 and (32, 32) in {_sent_size(r) for r in main_srv.requests}


def _sent_size(request: dict) -> tuple[int, int]:
    url = next(
        p for m in request["messages"] if isinstance(m["content"], list) for p in m["content"] if "image_url" in p
    )
    return Image.open(io.BytesIO(base64.b64decode(url["image_url"]["url"].split(",", 1)[1]))).size


def test_dotdot_that_stays_inside_is_fine(bench, tmp_path, openai_server):
    ann, img_dir = bench
    lines = ann.read_text().splitlines()
    row = json.loads(lines[0])
    row["file_name"] = "images/../images/img0.png"
    lines[0] = json.dumps(row)
    ann.write_text("\n".join(lines) + "\n")
    main_srv, judge_srv = openai_server(eb.model_script()), openai_server(eb.judge_script())
    assert evaluate.main(_argv(ann, img_dir, tmp_path / "out", main_srv.base_url, judge_srv.base_url)) == 0


def test_evaluate_vsearch_refuses_a_symlink_out(tmp_path, openai_server, capsys):
    img_dir = tmp_path / "images"
    img_dir.mkdir()
    secret = tmp_path / "secret.png"
    Image.new("RGB", (40, 30)).save(secret)
    os.symlink(secret, img_dir / "one.png")
    ann = tmp_path / "regions.jsonl"
    ann.write_text(json.dumps({"id": "a", "image": "one.png", "description": "x", "bbox": [1, 1, 9, 9]}) + "\n")
    srv = openai_server(eb.model_script())
    argv = ["--ann_file", str(ann), "--img_dir", str(img_dir), "--model", "m", "--api_base_url", srv.base_url]
    assert ev.main([*argv, "--output_dir", str(tmp_path / "out"), "--no_progress"]) == 2
    err = capsys.readouterr().err
    assert f"{ann}:1: field 'image'" in err and "symlink" in err and srv.count == 0
