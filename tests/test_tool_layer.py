"""The tool layer's parts: the registry (built-in tools, a package's tool by entry point), the call record and its
limits, the local corpus and its index command, the record/replay store, and the parsers (linear scans that
return what the release's regexes return, property-tested)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from insight_o3.agents import opensearch_vl as osv
from insight_o3.evaluation import opensearch_vl_judge as judge
from insight_o3.scripts import index_corpus
from insight_o3.tools import registry
from insight_o3.tools.backend import Retrieval, VisitRequest
from insight_o3.tools.base import BackendFailed, Observation
from insight_o3.tools.corpus import LocalCorpus
from insight_o3.tools.store import Recording, Replay, RetrievalStore
from insight_o3.tools.tool import Tool, ToolContext
from insight_o3.tools.toolkit import Toolkit

# ------------------------------------------------------------------------------------------------ registry, calls


class Echo(Tool):
    name = "echo"
    schema = {"name": "echo", "description": "say it back"}

    async def run(self, arguments, ctx: ToolContext) -> Observation:
        if arguments.get("sleep"):
            await asyncio.sleep(float(arguments["sleep"]))
        return Observation("echo: " + str(arguments.get("text", "")))


def test_registry_has_the_ten_tools_and_a_package_adds_one(monkeypatch):
    assert sorted(registry.BUILTIN) == sorted(
        ["crop", "perspective_correct", "super_resolution", "sharpen", "layout_parsing", "python_interpreter",
         "text_search", "web_search", "image_search", "visit"]
    )  # fmt: skip
    ep = SimpleNamespace(name="echo", value="pkg:Echo", load=lambda: Echo)
    monkeypatch.setattr(registry, "entry_points", lambda group: [ep] if group == registry.ENTRY_POINT_GROUP else [])
    assert "echo" in registry.tool_names()
    assert isinstance(registry.get_tool("echo"), Echo)
    with pytest.raises(registry.UnknownTool, match="no tool 'nope'"):
        registry.get_tool("nope")


def test_a_call_past_its_time_is_recorded_as_a_limit(tmp_path):
    img = tmp_path / "i.png"
    Image.new("RGB", (8, 8)).save(img)
    kit = Toolkit({"echo": Echo()}, images_dir=tmp_path)
    kit.limits = type(kit.limits)(seconds=0.2)
    ctx = kit.episode(str(img))
    ok = asyncio.run(kit.call("echo", "echo", {"text": "hi"}, ctx))
    assert ok.text == "echo: hi" and ok.error is None
    slow = asyncio.run(kit.call("echo", "echo", {"sleep": 5}, ctx))
    assert slow.error_kind == "limit" and "per-call limit" in slow.text and slow.seconds < 2
    unknown = asyncio.run(kit.call(None, 5, {}, ctx))
    assert unknown.text == "Tool execution error:\nUnknown tool: 5" and unknown.error_kind == "unknown_tool"


# ------------------------------------------------------------------------------------------------ corpus, store


def _corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    (folder / "p").mkdir(parents=True)
    (folder / "p" / "a.md").write_text("# Alpha Bridge\n\nAlpha Bridge opened in 1901.\n")
    (folder / "p" / "b.html").write_text(
        "<html><title>Beta</title><body><script>x()</script>Beta tower 1950</body></html>"
    )
    Image.new("RGB", (32, 32), (255, 0, 0)).save(folder / "red.png")
    (folder / "corpus.jsonl").write_text(json.dumps({"path": "p/a.md", "url": "https://a.org/alpha"}) + "\n")
    out = tmp_path / "c.sqlite"
    assert index_corpus.main([str(folder), "--out", str(out)]) == 0
    return out


def test_local_corpus_answers_in_the_release_formats(tmp_path):
    c = LocalCorpus(_corpus(tmp_path))
    text = asyncio.run(c.text_search("alpha bridge", "en", 5, 2**20))
    assert text.startswith(
        "Tool execution result:\n[Passage 1]\nTitle: Alpha Bridge\nURL: https://a.org/alpha\nSummary:\n"
    )
    assert "Beta" not in text
    assert (
        asyncio.run(c.text_search("zzz", "en", 5, 2**20))
        == "Tool execution result:\nNo relevant web pages found for the query."
    )
    assert asyncio.run(c.text_search('" OR * NEAR(', "en", 5, 2**20)).endswith("found for the query.")  # no FTS syntax
    page = asyncio.run(c.visit_one(VisitRequest("corpus://p/b.html", "g"), 2**20))
    assert "Beta tower 1950" in page and "x()" not in page
    red = asyncio.run(c.image_search("corpus://red.png", 2**20))
    assert json.loads(red.split("\n", 1)[1]) == [{"title": "red", "source": "corpus://red.png"}]
    c.close()


def test_index_command_names_a_bad_manifest_line(tmp_path, capsys):
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text('{"path": "a.md"}\nnot json\n')
    assert index_corpus.main([str(folder), "--out", str(tmp_path / "x.sqlite")]) == 2
    assert "corpus.jsonl:2" in capsys.readouterr().err


class Counting(Retrieval):
    name = "counting"

    def __init__(self):
        self.n = 0

    async def text_search(self, query, lang, top_k, max_bytes):
        self.n += 1
        if query == "bad":
            raise BackendFailed("Tool execution error:\nText search failed: down")
        return f"result {query} {self.n}"

    async def image_search(self, image, max_bytes):
        return "img"

    async def visit_one(self, request, max_bytes):
        return "page " + request.url


def test_store_records_and_replays_byte_for_byte(tmp_path):
    store = RetrievalStore(tmp_path / "s")
    rec = Recording(Counting(), store)
    assert asyncio.run(rec.text_search("q", "en", 5, 1)) == "result q 1"
    with pytest.raises(BackendFailed):
        asyncio.run(rec.text_search("bad", "en", 5, 1))
    store.close()
    replay = Replay(RetrievalStore(tmp_path / "s"))
    assert asyncio.run(replay.text_search("q", "en", 5, 1)) == "result q 1"
    with pytest.raises(BackendFailed, match="Text search failed: down"):  # a recorded error replays as the error
        asyncio.run(replay.text_search("bad", "en", 5, 1))
    with pytest.raises(BackendFailed, match="holds no result for this text_search"):
        asyncio.run(replay.text_search("q", "en", 4, 1))
    obj = next((tmp_path / "s" / "objects").rglob("*"))
    for o in (tmp_path / "s" / "objects").rglob("*"):
        if o.is_file():
            o.write_bytes(b"tampered")
    with pytest.raises(BackendFailed, match="corrupt"):
        asyncio.run(Replay(RetrievalStore(tmp_path / "s")).text_search("q", "en", 5, 1))
    assert obj


# ------------------------------------------------------------------------------------------------ parsers

_TOOL_CALL_RE = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)  # the release's (tools.py)
_OCR_RE = re.compile(r"<(?:layout_parsing|ocr)>\s*(\{.*?\})\s*</(?:layout_parsing|ocr)>", re.DOTALL)
PIECES = st.sampled_from(["<tool_call>", "</tool_call>", "{", "}", " ", "\n", "\u00a0", "a", '"x"', "<ocr>", "</ocr>",
                          "<layout_parsing>", "</layout_parsing>", "\\boxed{", "<answer>", "</answer>", "<response>",
                          "</response>", "</think>", "\\text{"])  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(PIECES, max_size=30).map("".join))
def test_tagged_json_is_the_released_regex(text):
    m = _TOOL_CALL_RE.search(text)
    assert osv.tagged_json(text, *osv.TOOL_CALL) == (m.group(1) if m else None)
    m = _OCR_RE.search(text)
    assert osv.tagged_json(text, *osv.FALLBACK_TAGS[4][:2]) == (m.group(1) if m else None)


def _release_final_answer(text: str) -> str:
    """``eval_with_gpt4o.extract_final_answer`` as released (its regexes), for the property below."""
    if not text:
        return ""
    boxed = judge.extract_boxed_content(text)
    if boxed:
        return boxed
    m = re.search(r"<answer>(.*?)</answer>", text, re.DOTALL)
    if m:
        return m.group(1).strip()
    m = re.search(r"<response>(.*?)</response>", text, re.DOTALL)
    if m:
        return m.group(1).strip()
    parts = text.split("</think>")
    if len(parts) > 1:
        last = re.sub(r"<tool_call>.*?</tool_call>", "", parts[-1].strip(), flags=re.DOTALL).strip()
        if last:
            return last[:2000]
    return text[-2000:] if len(text) > 2000 else text


@settings(max_examples=400, deadline=None)
@given(st.lists(PIECES, max_size=30).map("".join))
def test_final_answer_extraction_is_the_released_one(text):
    assert judge.extract_final_answer(text) == _release_final_answer(text)


def test_the_parser_is_linear_on_a_hostile_reply():
    import time

    text = "<tool_call>{" + "} " * 200_000 + "<tool_call>{" * 50_000
    t = time.perf_counter()
    osv.extract_tool_call(text)
    assert time.perf_counter() - t < 5


@pytest.mark.smoke
def test_the_opensearch_vl_demo_says_what_a_light_install_lacks(monkeypatch, tmp_path, capsys):
    from insight_o3.scripts import demo

    monkeypatch.setattr(demo, "tools_missing", lambda: "OpenCV: pip install 'insight-o3[tools]'")
    assert demo.main(["--agent", "opensearch_vl", "--output_dir", str(tmp_path)]) == 2
    assert "demo --agent opensearch_vl needs OpenCV: pip install 'insight-o3[tools]'" in capsys.readouterr().err
