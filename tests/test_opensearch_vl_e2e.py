"""OpenSearch-VL end to end, offline: ``evaluate --agent opensearch_vl`` with a scripted model (crop -> sharpen ->
layout_parsing -> text_search on a local corpus -> answer), the real tools (OpenCV, Tesseract, SQLite FTS5) and a
scripted judge records every sample and every tool call; a second run with ``--retrieval replay`` and the network
unreachable gives the same observations byte for byte and the same verdicts; hostile tool arguments give a clear
observation and the episode goes on."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

from openai import AsyncOpenAI
from PIL import Image

from insight_o3.agents import opensearch_vl as osv
from insight_o3.agents.tool_loop import ToolLoopSolver
from insight_o3.demo.opensearch_vl import ScriptedInvestigator, judge_script, make_demo
from insight_o3.endpoints.endpoint import Endpoint
from insight_o3.imaging.images import ImageStore
from insight_o3.protocol.attempt_stats import ToolLoopStats
from insight_o3.scripts import evaluate, report
from insight_o3.tools import http as tool_http
from insight_o3.tools.layout import tesseract_version
from insight_o3.tools.setup import TOOL_SETS
from insight_o3.tools.toolkit import Toolkit
from insight_o3.tools.web import WebChain, WebSettings
from tests.support import eval_bench as eb
from tests.support.openai_server import ScriptedOpenAIServer, chat
from tests.support.stacks import require, require_module

require_module("cv2")  # the tools extra (opencv-contrib-python-headless)
require(tesseract_version() is not None, "Tesseract (apt-get install tesseract-ocr tesseract-ocr-eng) and pytesseract")


def _argv(files, model, judge, out, name, *extra):
    return ["--agent", "opensearch_vl", "--model", "scripted", "--api_base_url", model.base_url, "--api_key", "EMPTY",
            "--judge_model", "scripted-judge", "--judge_api_base_url", judge.base_url, "--judge_api_key", "EMPTY",
            "--ann_file", str(files.bench / "metadata.jsonl"), "--img_dir", str(files.bench), "--output_dir", str(out),
            "--eval_name", name, "--no_progress", "--image_workers", "0", *extra]  # fmt: skip


def test_offline_run_then_replay_without_network(tmp_path, monkeypatch):
    files = make_demo(tmp_path / "demo", n=2)
    out = tmp_path / "eval"
    with ScriptedOpenAIServer(ScriptedInvestigator()) as model, ScriptedOpenAIServer(judge_script) as judge:
        assert evaluate.main(_argv(files, model, judge, out, "recorded", "--corpus", str(files.index))) == 0

        # the network is unreachable: no tool may open an HTTP request, no socket may leave the loopback
        def no_http(*a, **k):
            raise AssertionError("a replayed run made an HTTP request")

        real_connect = socket.socket.connect

        def loopback_only(self, address):
            if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1", "localhost"):
                raise OSError(101, "Network is unreachable (test)")
            return real_connect(self, address)

        monkeypatch.setattr(tool_http, "request", no_http)
        monkeypatch.setattr(socket.socket, "connect", loopback_only)
        replay = ["--retrieval", "replay", "--retrieval_replay_from", str(out / "recorded")]
        assert evaluate.main(_argv(files, model, judge, out, "replayed", *replay)) == 0
    rec, rep = eb.records_by_key(out / "recorded"), eb.records_by_key(out / "replayed")
    assert sorted(rec) == sorted(rep) == ["sign_0", "sign_1"]
    for key in rec:
        a, b = rec[key]["eval_result"], rep[key]["eval_result"]
        assert a["status"] == b["status"] == "correct"
        calls_a, calls_b = a["stats"]["tool_calls"], b["stats"]["tool_calls"]
        assert [c["name"] for c in calls_a] == ["crop", "sharpen", "layout_parsing", "text_search"]
        assert [c["observation"] for c in calls_a] == [c["observation"] for c in calls_b]  # byte for byte
        assert all(c["error"] is None for c in calls_a)
        assert "Kessock" in calls_a[3]["observation"] or "Forth" in calls_a[3]["observation"]
        made = [i for c in calls_a for i in c["new_images"]]
        assert [i["id"] for i in made] == ["img_2", "img_3"] and all(Path(i["path"]).is_file() for i in made)
        assert a["extracted_answer"] == b["extracted_answer"] and a["judge_outputs"] == b["judge_outputs"]
    card = json.loads((out / "recorded" / "run_card.json").read_text())
    tools = card["tools"]
    assert tools["retrieval"]["backend"] == "local" and tools["layout_parsing"]["backend"] == "tesseract"
    assert tools["layout_parsing"]["version"] and tools["super_resolution"]["fallback"]
    assert json.loads((out / "replayed" / "run_card.json").read_text())["tools"]["retrieval"]["backend"] == "replay"
    assert (out / "replayed" / "retrieval" / "index.jsonl").exists()  # a replayed run replays in turn
    # the report shows every tool call with the images it read and made (caption and alt text), and the text it retrieved
    page = tmp_path / "report.html"
    assert report.main([str(out / "recorded"), "--out", str(page), "--max_samples", "0", "--thumb_px", "128"]) == 0
    html = page.read_text()
    assert html.count("tool call: ") == 8 and html.count("made img_") == 2 * 4 and "input img_1" in html
    assert "ALL RECOGNIZED TEXT:" in html and "[Passage 1]" in html


class _BigPage(BaseHTTPRequestHandler):
    """A reader answering any page with 200 MB (streamed, never held)."""

    def log_message(self, *a):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", str(200 * 2**20))
        self.end_headers()
        chunk = b"w" * 2**20
        try:
            for _ in range(200):
                self.wfile.write(chunk)
        except OSError:
            pass


def test_hostile_tool_arguments_get_clear_observations(tmp_path):
    img = tmp_path / "img.png"
    Image.new("RGB", (120, 80), (200, 10, 10)).save(img)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _BigPage)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    calls = [
        ("super_resolution", {"image": "img_1", "scale": 1000}),
        ("crop", {"image": "img_1", "x": 500, "y": 500, "width": 10, "height": 10}),
        ("crop", {"image": "img_1", "x": 0, "y": 0, "width": 10**6, "height": 10**6}),
        ("crop", {"image": "img_7", "x": 0, "y": 0, "width": 5, "height": 5}),
        ("crop", {"image": "img_1", "x": "left", "y": 0, "width": 5, "height": 5}),
        ("visit", {"url": "https://example.org/huge", "goal": "g"}),
        ("crop", {"image": "img_1", "x": 10, "y": 10, "width": 30, "height": 20}),
    ]
    replies = [f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>" for n, a in calls]
    replies.append("<response>\\boxed{done}</response>")
    try:
        with ScriptedOpenAIServer(lambda req, call: chat(replies.pop(0))) as model:

            async def run():
                client = AsyncOpenAI(base_url=model.base_url, api_key="k", max_retries=0)
                store = ImageStore(fmt="PNG", workers=1)
                chain = WebChain(
                    WebSettings(reader=Endpoint(base_url=f"http://127.0.0.1:{srv.server_port}/"), reader_attempts=1)
                )
                kit = Toolkit.of(TOOL_SETS["all"], images_dir=tmp_path / "made", retrieval=chain)
                try:
                    session = lambda *a: osv.OpenSearchVLSession(*a, tool_set="all")  # noqa: E731
                    solver = ToolLoopSolver(client, "m", store, session, osv.DEFAULTS, toolkit=kit)
                    return (
                        await solver.solve(SimpleNamespace(question="q", options=None, image_path=str(img), index=0), 1)
                    )[0]
                finally:
                    store.close()
                    await client.close()

            attempt = asyncio.run(run())
    finally:
        srv.shutdown()
    assert attempt.error is None and attempt.text.endswith("<response>\\boxed{done}</response>")
    assert isinstance(attempt.stats, ToolLoopStats)
    rec = attempt.stats.tool_calls
    assert len(rec) == len(calls)  # nothing lost: every call recorded, the episode went on to its answer
    obs = [c["observation"] for c in rec]
    assert "scale must be one of [2, 3, 4]" in obs[0] and rec[0]["error_kind"] == "bad_arguments"
    assert "lies outside the image (120x80)" in obs[1]
    assert "per-call cap" in obs[2] and rec[2]["error_kind"] == "limit"
    assert obs[3] == "Tool execution error:\nFailed to load image 'img_7'."
    assert "invalid argument 'x' for crop" in obs[4]
    assert obs[5].endswith("Summary: \nSummary service unavailable. Returning raw content.\n\n")
    assert "[Content truncated...]" in obs[5] and len(obs[5]) < 121_000
    assert obs[6].startswith("Image cropped successfully. New image ID: img_2.")  # the failed calls made no image
