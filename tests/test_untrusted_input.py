"""Untrusted input files and servers, against real loopback HTTP servers.

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
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from PIL import Image

from insight_o3.evaluation.run_dir import FORMAT_VERSION
from insight_o3.evaluation.schema import RESPONSE_REF, EvalRecord
from insight_o3.protocol.trajectory import message, message_text
from insight_o3.scripts import evaluate, report
from insight_o3.scripts import evaluate_vsearch as ev
from tests.support import eval_bench as eb
from tests.support.openai_server import Reply, chat, error, last_user_text

MAIN_KEY = "sk-main-SECRET-4242abcd"


def _argv(ann, img_dir, out, main_url, judge_url, *extra) -> list[str]:
    return eb.evaluate_argv(ann, img_dir, out, main_url, judge_url, "--image_workers", "0", *extra, max_retries=0)


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


# ------------------------------------------------------------------------------------- a 200 with an error body
def test_a_200_reply_with_an_error_body_is_recorded_with_the_servers_message(bench, tmp_path, openai_server):
    def script(req, call):
        if eb.marker(last_user_text(req)) == "q0":
            return Reply(status=200, body={"error": {"message": "model overloaded,  try again later", "code": 503}})
        return eb.model_reply(req)

    main_srv, judge_srv = openai_server(script), openai_server(eb.judge_script())
    out = tmp_path / "out"
    assert evaluate.main(_argv(*bench, out, main_srv.base_url, judge_srv.base_url)) == 1  # one sample failed
    rec = {r["sample_key"]: r["eval_result"] for r in eb.read_records(out / "m/o3_bench", 0)}["q0"]
    assert rec["status"] == "failed"
    assert rec["fail_reason"] == "ErrorReply: the server replied 200 with an error: model overloaded, try again later"


# ------------------------------------------------------------------------------------ item 6: URL credentials
URL_PASSWORD = "pw-SECRET-7d1e"
QUERY_KEY = "qk-SECRET-55aa"


def _url_with_secrets(base_url: str) -> str:
    """``http://user:<password>@127.0.0.1:<port>/v1?api-key=<key>`` for a scripted server's base URL."""
    return base_url.replace("http://", f"http://user:{URL_PASSWORD}@") + f"?api-key={QUERY_KEY}"


def _echo_401(req, call):
    """A server that refuses with the request's Authorization header and path in its message."""
    return error(401, f"Incorrect credentials {call.headers.get('authorization', '')} for {call.path}")


def _assert_no_url_secrets(text: str, where: str) -> None:
    b64 = base64.b64encode(f"user:{URL_PASSWORD}".encode()).decode()
    for secret in (URL_PASSWORD, QUERY_KEY, b64, MAIN_KEY):
        assert secret not in text, f"{secret} in {where}"


def test_url_credentials_never_reach_a_file_or_stderr(bench, tmp_path, openai_server, capsys, caplog):
    main_srv, judge_srv = openai_server(eb.model_script()), openai_server(eb.judge_script())
    out = tmp_path / "out"
    url, judge_url = _url_with_secrets(main_srv.base_url), _url_with_secrets(judge_srv.base_url)
    assert evaluate.main(_argv(*bench, out, url, judge_url, "--api_key", MAIN_KEY)) == 0
    err = capsys.readouterr().err + caplog.text
    assert "--api_key on the command line is visible to other users" in err  # the ps warning
    run = out / "m/o3_bench"
    args = json.loads((run / "args.json").read_text())
    assert args["api_base_url"] == main_srv.base_url.replace("http://", "http://***@") + "?api-key=***"
    page = tmp_path / "report.html"
    assert report.main([str(run), "--out", str(page)]) == 0
    err += capsys.readouterr().err + caplog.text
    for p in [*run.rglob("*"), page]:
        if p.is_file():
            _assert_no_url_secrets(p.read_text(errors="replace"), str(p))
    _assert_no_url_secrets(err, "stderr and the log")
    # the 401 stop line: URL and the server's echo of the credentials (the base64 of user:password) masked
    refusing = openai_server(_echo_401)
    argv = _argv(*bench, tmp_path / "out2", _url_with_secrets(refusing.base_url), judge_url)
    assert evaluate.main(argv) == 4
    err = capsys.readouterr().err
    assert "401" in err and "***" in err
    _assert_no_url_secrets(err + caplog.text, "the 401 stop line")


# ------------------------------------------------------------------------------------ item 7: caps
BIG_REPLY = "I look at the chart. " * 2500 + "So the answer is <answer>C</answer>"  # 52.5K chars, q0's answer C


def _big_q0(req, call):
    if eb.marker(last_user_text(req)) == "q0":
        return chat([BIG_REPLY] * int(req.get("n") or 1))
    return eb.model_reply(req)


def test_a_long_reply_is_stored_once_and_cut_with_a_marker(bench, tmp_path, openai_server):
    main_srv, judge_srv = openai_server(_big_q0), openai_server(eb.judge_script())
    out = tmp_path / "out"
    argv = _argv(*bench, out, main_srv.base_url, judge_srv.base_url, "--max_reply_chars", "2000")
    assert evaluate.main(argv) == 0
    run = out / "m/o3_bench"
    raw = {r["sample_key"]: r for r in eb.read_records(run, 0)}["q0"]
    er = raw["eval_result"]
    assert er["status"] == "correct"  # judged on the whole reply (the rule: <answer>C</answer> in its tail)
    cut = len(BIG_REPLY) - 2000
    assert er["response"].startswith("I look at the chart.") and er["response"].endswith("<answer>C</answer>")
    assert f"[… {cut} characters cut here (--max_reply_chars 2000) …]" in er["response"]
    assert len(er["response"]) < 2100
    # on disk the reply is not repeated in the trajectory; read back, the trajectory is whole again
    assert er["trajectory"][-1] == {"role": "assistant", "content": [RESPONSE_REF]}
    line = (run / "trial_0" / "eval_records.jsonl").read_text().splitlines()[0]
    assert line.count("characters cut here") == 1
    rec = EvalRecord.from_dict(raw)
    assert message_text(rec.eval_result.trajectory[-1]) == er["response"]
    assert rec.to_dict()["eval_result"]["trajectory"] == er["trajectory"]
    assert json.loads((run / "run_card.json").read_text())["format_version"] == FORMAT_VERSION == 2
    # the report shows each text cut to --max_text_chars
    page = tmp_path / "report.html"
    assert report.main([str(run), "--out", str(page), "--max_text_chars", "500"]) == 0
    html = page.read_text()
    assert "characters cut here (--max_text_chars 500)" in html and er["response"][:1000] not in html


def test_records_of_format_1_read_as_before(tmp_path):
    traj = [{"role": "user", "content": [{"type": "text", "text": "q"}]}, message("assistant", "the reply")]
    old = {"sample_key": "a", "eval_result": {"status": "wrong", "response": "the reply", "trajectory": traj}}
    assert EvalRecord.from_dict(old).eval_result.trajectory == traj


def test_an_image_over_max_decode_values_is_refused_from_its_header(tmp_path):
    """A 16384x16384 RGBA PNG (4.7 MB, 1.9e9 values to decode) is refused before any pixel is decoded: the
    decoding process stays small (it peaked at 2.07 GB before the cap)."""
    png = tmp_path / "huge.png"
    _write_blank_png(png, 16384, 16384)
    code = (
        "import re, sys\n"
        "from insight_o3.imaging.images import ImageError, open_image\n"
        "try:\n    open_image(sys.argv[1]); print('decoded')\n"
        "except ImageError as e:\n    print(e)\n"
        # VmHWM belongs to this process's own address space; ru_maxrss would carry over the forking
        # pytest process's peak across exec and measure the test runner instead
        "print(int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) // 1024)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    res = subprocess.run([sys.executable, "-c", code, str(png)], capture_output=True, text=True, env=env, timeout=120)
    message, peak_mb = res.stdout.strip().splitlines()
    assert "16384x16384 px, mode RGBA: 1879048192 values > max_decode_values 600000000" in message, res.stderr
    assert int(peak_mb) < 300


def test_max_decode_values_is_a_flag_of_evaluate(bench, tmp_path, openai_server):
    main_srv, judge_srv = openai_server(eb.model_script()), openai_server(eb.judge_script())
    out = tmp_path / "out"
    assert evaluate.main(_argv(*bench, out, main_srv.base_url, judge_srv.base_url, "--max_decode_values", "100")) == 1
    recs = eb.read_records(out / "m/o3_bench", 0)
    assert main_srv.count == 0 and all("> max_decode_values 100" in r["eval_result"]["fail_reason"] for r in recs)


def _write_blank_png(path: Path, w: int, h: int) -> None:
    """A valid all-zero RGBA PNG of ``w`` x ``h`` written without holding its pixels (zlib level 1)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0)))
        z = zlib.compressobj(1)
        rows = 256
        block = (b"\x00" + bytes(w * 4)) * rows
        for _ in range(0, h, rows):
            f.write(chunk(b"IDAT", z.compress(block)))
        f.write(chunk(b"IDAT", z.flush()) + chunk(b"IEND", b""))


def test_evaluate_vsearch_cuts_the_vsearchers_replies(tmp_path, openai_server):
    img_dir = tmp_path / "images"
    img_dir.mkdir()
    Image.new("RGB", (120, 90)).save(img_dir / "one.png")
    ann = tmp_path / "regions.jsonl"
    ann.write_text(json.dumps({"id": "a", "image": "one.png", "description": "x", "bbox": [1, 1, 9, 9]}) + "\n")
    srv = openai_server(lambda req, call: chat("<think>" + "hmm " * 20000 + "</think><answer>[0, 0, 0, 0]</answer>"))
    out = tmp_path / "out"
    argv = ["--ann_file", str(ann), "--img_dir", str(img_dir), "--model", "m", "--api_base_url", srv.base_url]
    assert ev.main([*argv, "--output_dir", str(out), "--no_progress", "--max_reply_chars", "1000"]) == 0
    rec = json.loads((out / "records.jsonl").read_text())
    assert rec["status"] == "not_found"  # parsed from the whole reply
    reply = message_text([m for m in rec["trajectory"] if m["role"] == "assistant"][-1])
    assert "characters cut here (--max_reply_chars 1000)" in reply and reply.endswith("<answer>[0, 0, 0, 0]</answer>")
    assert len(reply) < 1100


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("http://u:pw@h:1/v1?x=1&api-key=K1&y=2", "http://***@h:1/v1?x=1&api-key=***&y=2"),
        ("https://h/v1?access_token=T&sig=S", "https://h/v1?access_token=***&sig=***"),
        ("<a href='https://h/?a=1&amp;token=T'>", "<a href='https://h/?a=1&amp;token=***'>"),
        ("Basic " + base64.b64encode(b"user:pw").decode(), "Basic ***"),
        ("a basic understanding of bearer bonds", "a basic understanding of bearer bonds"),
        ("https://github.com/m-Just/InSight-o3@21acec8", "https://github.com/m-Just/InSight-o3@21acec8"),
    ],
)
def test_redact_masks_url_credentials_and_nothing_else(text, want):
    from insight_o3.base.redaction import redact

    assert redact(text) == want
