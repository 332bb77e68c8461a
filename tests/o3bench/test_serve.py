"""``build_o3_bench_demo --serve``: a keyless route through every step of ``build_o3_bench`` on one's own images.

One subprocess serves the generic scripted endpoint for two images of different sizes that are not the demo's; the
commands it prints are run as printed (the build steps in-process through ``build_o3_bench.main``, the one shell
line through bash), and each step writes its records; the replies say they are scripted; SIGINT then ends the
server at once with status 0."""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from openai import AuthenticationError, NotFoundError, OpenAI
from PIL import Image, ImageDraw

from insight_o3.endpoints.endpoint import DEMO_KEY
from insight_o3.endpoints.scripted_server import ScriptedOpenAIServer
from insight_o3.o3bench import generic
from insight_o3.o3bench.extraction import parse_extraction
from insight_o3.scripts import build_o3_bench, build_o3_bench_demo
from tests.support.waiting import read_until

ROOT = Path(__file__).resolve().parents[2]
SIZES = {"shop floor": (640, 480), "route_map": (900, 1300)}  # a space in a name: sources keys it shop_floor
PROG = "-m insight_o3.scripts.build_o3_bench "


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _own_images(d: Path) -> Path:
    d.mkdir(parents=True)
    for name, (w, h) in SIZES.items():
        im = Image.new("RGB", (w, h), "white")
        ImageDraw.Draw(im).rectangle([w // 8, h // 8, w // 2, h // 3], outline="black", width=3)
        im.save(d / f"{name}.png")
    return d


@pytest.fixture
def served(tmp_path):
    """The ``--serve`` process (its printed text so far, the process, the queue of its later lines)."""
    imgs = _own_images(tmp_path / "my images")
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    argv = [sys.executable, "-m", "insight_o3.scripts.build_o3_bench_demo", "--serve", "--img_dir", str(imgs)]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines: queue.Queue[str] = queue.Queue()
        yield read_until(proc, "Ctrl-C (or SIGTERM) stops", 120, lines), proc, lines, tmp_path
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_every_step_runs_on_ones_own_images_and_sigint_stops_the_server(served):
    out, proc, lines, tmp_path = served
    assert out.startswith("SCRIPTED BUILD ENDPOINT for your own images")
    assert "layouts: SCRIPTED 3x3 grids (not a detector's" in out
    url = re.search(r"serving the scripted build endpoint (http://127\.0\.0\.1:\d+/v1)", out).group(1)
    commands = [ln for ln in out.split("(paste):\n", 1)[1].splitlines() if ln and not ln.startswith(("#", "Ctrl-C"))]
    steps = [ln.split(PROG, 1)[1].split(" --", 1)[0] if PROG in ln else ln.split()[0] for ln in commands]
    assert steps == [
        "sources", "extract", "synthesize", "validate", "filter", "review page", "sed", "review apply", "release"
    ]  # fmt: skip
    assert all(url in ln for ln in commands if any(s in ln for s in ("extract ", "synthesize ", "filter ")))
    for line in commands:
        if PROG in line:
            rc = build_o3_bench.main(shlex.split(line.split(PROG, 1)[1]))
        else:
            rc = subprocess.run(["bash", "-c", line], cwd=tmp_path, timeout=30).returncode
        assert rc == 0, line

    ws = tmp_path / "outputs" / "o3bench_demo" / "own_images" / "workspace"
    sources = {s["key"]: (s["width"], s["height"]) for s in _lines(ws / "sources.jsonl")}
    assert sources == {"chart/shop_floor": (640, 480), "chart/route_map": (900, 1300)}
    extracted = _lines(ws / "extract" / "records.jsonl")
    assert len(extracted) == 2 * 10 and all(r["status"] == "ok" for r in extracted)  # 2 full images + 9 cells each
    assert all(r["caption"].startswith("SCRIPTED REPLY from scripted-vlm") for r in extracted)
    synthesized = _lines(ws / "synthesize" / "records.jsonl")
    assert [len(r["items"]) for r in synthesized] == [generic.ITEMS_PER_IMAGE] * 2
    candidates = _lines(ws / "validate" / "candidates.jsonl")
    assert len(candidates) == 2 * generic.ITEMS_PER_IMAGE and not _lines(ws / "validate" / "rejected.jsonl")
    assert all(c["question"].startswith("[scripted item") for c in candidates)
    assert len({c["question"] for c in candidates}) == len(candidates)  # each image's items its own
    decided = _lines(ws / "filter" / "records.jsonl")
    assert len(decided) == len(candidates) and all(r["status"] == "ok" for r in decided)
    kept = _lines(ws / "filter" / "kept.jsonl")
    assert kept and len(kept) + len(_lines(ws / "filter" / "dropped.jsonl")) == len(candidates)
    assert [r["decision"] for r in _lines(ws / "review" / "reviewed.jsonl")] == ["accept"] * len(kept)
    released = _lines(ws / "release" / "metadata.jsonl")
    assert len(released) == len(kept) and {r["img_width"] for r in released} <= {640, 900}

    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    # the same bound as demo --serve's: the server's threads wind down in 1-5 s, more on a loaded machine
    assert proc.wait(timeout=20) == 0 and time.monotonic() - t0 < 10
    assert "Traceback" not in proc.stderr.read()
    assert "".join(iter(lambda: lines.get(timeout=10), "")) == "stopped serving the scripted build endpoint\n"


def test_the_endpoint_refuses_a_wrong_model_or_no_key_and_labels_its_replies():
    with ScriptedOpenAIServer(generic.GenericBuild().script(), keep_bodies=False) as srv:
        ok = OpenAI(base_url=srv.base_url, api_key=DEMO_KEY, max_retries=0)
        with pytest.raises(NotFoundError, match="scripted-writer"):
            ok.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "LAYOUTS"}])
        with pytest.raises(AuthenticationError, match="missing API key"):
            OpenAI(base_url=srv.base_url, api_key="EMPTY", max_retries=0).chat.completions.create(
                model=generic.WRITER, messages=[{"role": "user", "content": "LAYOUTS"}]
            )
        reply = ok.chat.completions.create(
            model=generic.SOLVERS[1], messages=[{"role": "user", "content": "Which? A. x\nF. No right choice"}], n=2
        )
        assert [c.message.content.startswith("<think>scripted solver") for c in reply.choices] == [True, True]


@pytest.mark.parametrize("size", [(1, 1), (37, 3001), (800, 600)])
def test_the_e1_reply_parses_for_any_view(size):
    ex = parse_extraction(generic.extraction_reply(*size, "0123abcd"))
    assert f"{size[0]}x{size[1]} pixels" in ex.caption and ex.caption.startswith("SCRIPTED REPLY")


def test_an_image_with_one_layout_gets_items_that_cite_the_one_it_has():
    items = generic.writer_items('[\n  {\n    "layout_id": 7,\n    "caption_or_ocr": "x"\n  }\n] LAYOUTS')
    assert all(i["explanation"] == "Step 1: a scripted step [layout 7]" for i in items)


def test_serve_flags_are_checked(tmp_path, capsys):
    for argv in (["--serve"], ["--img_dir", str(tmp_path)], ["--serve", "--img_dir", "x", "--port", "70000"]):
        with pytest.raises(SystemExit) as e:
            build_o3_bench_demo.main(argv)
        assert e.value.code == 2, argv
    assert build_o3_bench_demo.main(["--serve", "--img_dir", str(tmp_path)]) == 2  # a directory without images
    assert "no images there" in capsys.readouterr().err
