"""A reply or an image a baseline protocol cannot use is the sample's outcome, never a lost request: a DeepEyes box
that floors a side to 0 or holds a 400-digit number ends the episode as the release's ``except`` does; an image of
aspect ratio past 200 is no answer for Pixel-Reasoner and Mini-o3 (their releases raise before the first request);
Pixel-Reasoner's answer carries the ``finish_reason`` of the reply it is; a string coordinate (Mini-o3) or a huge
tool call (DeepEyes) takes no more memory than a few times the reply."""

from __future__ import annotations

import asyncio
import tracemalloc
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from insight_o3.agents import deepeyes, mini_o3, pixel_reasoner
from insight_o3.agents.tool_loop import ToolLoopSolver
from insight_o3.endpoints.client import make_client
from insight_o3.endpoints.endpoint import Endpoint
from insight_o3.imaging.images import ImageStore
from insight_o3.protocol.attempt_stats import ToolLoopStats
from insight_o3.protocol.statuses import EpisodeStatus
from insight_o3.scripts import evaluate
from tests.support import eval_bench as eb
from tests.support.openai_server import Call, Reply, ScriptedOpenAIServer, chat

AGENTS = {
    "deepeyes": (deepeyes.DeepEyesSession, deepeyes.DEFAULTS),
    "mini_o3": (mini_o3.MiniO3Session, mini_o3.DEFAULTS),
    "pixel_reasoner": (pixel_reasoner.PixelReasonerSession, pixel_reasoner.DEFAULTS),
}


def _zoom(bbox: str) -> str:
    return f'<tool_call>{{"name": "image_zoom_in_tool", "arguments": {{"bbox_2d": {bbox}}}}}</tool_call>'


def _solve(agent: str, image, replies: list[tuple[str, str]]):
    """One episode of ``agent`` on ``image`` against a server answering ``replies`` (text, finish_reason) in
    order: the attempt and the requests."""
    session, defaults = AGENTS[agent]
    queue = list(replies)

    def script(req: dict, call: Call) -> Reply:
        text, finish = queue.pop(0) if queue else ("<answer>A</answer>", "stop")
        return chat(text, finish_reason=finish)

    with ScriptedOpenAIServer(script) as srv:

        async def run():
            client = make_client(Endpoint(base_url=srv.base_url, api_key="k", max_retries=0))
            store = ImageStore(fmt="PNG", workers=1)
            try:
                solver = ToolLoopSolver(client, "m", store, session, defaults)
                sample = SimpleNamespace(question="q", options="A. a\nB. b", image_path=str(image))
                return (await solver.solve(sample, 1))[0]
            finally:
                await client.close()
                store.close()

        return asyncio.run(run()), srv.requests


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("outcome_images")
    made = {}
    for name, size in {"plain": (96, 64), "wide": (8000, 30)}.items():
        made[name] = root / f"{name}.png"
        Image.new("RGB", size, (20, 90, 160)).save(made[name])
    return made


@pytest.mark.parametrize(
    "bbox, why",
    [
        ("[0, 0, 1e9, 1]", "smart_resize gives a"),  # the height floors to 0 (main: PIL's ValueError escaped)
        ("[0, 0, " + "9" * 400 + ", 40]", "past the float range"),  # main: OverflowError in math.isfinite
        ("[0, 0, 0x" + "f" * 4000 + ", 40]", "past the float range"),  # an int past the digit limit: repr raises
    ],
)
def test_deepeyes_box_the_release_cannot_crop_ends_the_episode(images, bbox, why):
    reply = "<think>zoom</think>" + _zoom(bbox)
    attempt, requests = _solve("deepeyes", images["plain"], [(reply, "stop")])
    assert attempt.error is None, attempt.error
    assert attempt.text == reply  # the release's output_text: the whole last reply
    assert isinstance(attempt.stats, ToolLoopStats) and attempt.stats.stop_reason is not None
    assert attempt.stats.stop_reason.startswith("tool call error") and why in attempt.stats.stop_reason
    assert len(requests) == 1


def test_deepeyes_tool_call_past_the_literal_cap_is_not_parsed(images):
    """A 2.4 MB call: main parsed it (1.24 GB); now it is refused unread, within a few times the reply's memory."""
    reply = _zoom("[" + "1, " * 800_000 + "1]")
    tracemalloc.start()
    try:
        with pytest.raises(deepeyes.ToolCallError, match="at most 16384"):
            deepeyes.parse_zoom(reply, (96, 64))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(reply) + (1 << 20), peak


@pytest.mark.parametrize("agent", ["pixel_reasoner", "mini_o3"])
def test_image_past_aspect_200_is_no_answer_not_a_failure(images, agent):
    attempt, requests = _solve(agent, images["wide"], [])
    assert attempt.error is None
    assert isinstance(attempt.stats, ToolLoopStats) and attempt.stats.status == EpisodeStatus.IMAGE_REFUSED
    assert "8000x30" in (attempt.stats.protocol_error or "")
    assert attempt.stats.no_answer_reason() == attempt.stats.protocol_error
    assert attempt.stats.to_dict() == {
        "requests": 0,
        "zooms": 0,
        "status": "image_refused",
        "protocol_error": attempt.stats.protocol_error,
    }
    assert requests == []


def _pr_script(req: dict, call: Call) -> Reply:
    """Pixel-Reasoner: any question gets a crop call holding ``\\boxed{C}``, then a reply cut at the token limit."""
    turns = sum(m["role"] == "assistant" for m in req["messages"])
    if turns == 0:
        call_json = '{"name": "crop_image_normalized", "arguments": {"bbox_2d": [0, 0, 1, 1], "target_image": 1}}'
        return chat(f"I think it is \\boxed{{C}}, but let me look.\n<tool_call>\n{call_json}\n</tool_call>")
    return chat("Looking at the crop, the answer", finish_reason="length")


def test_pixel_reasoner_boxed_answer_of_an_earlier_turn_is_judged(tmp_path, openai_server):
    """Main recorded ``incomplete`` (the cut-off last reply's finish_reason with turn 0's text); the answer is
    judged, with the finish_reason of the reply it is."""
    bench = eb.make_bench(tmp_path / "bench")
    srv, judge = openai_server(_pr_script), openai_server(eb.judge_script())
    argv = eb.evaluate_argv(*bench, tmp_path / "out", srv.base_url, judge.base_url, "--agent", "pixel_reasoner")
    assert evaluate.main(argv) == 0
    recs = {r["sample_key"]: r["eval_result"] for r in eb.read_records(tmp_path / "out" / "m/o3_bench", 0)}
    er = recs["q0"]  # ground truth C
    assert er["finish_reason"] == "stop"
    assert er["status"] == "correct", er


def _de_script(req: dict, call: Call) -> Reply:
    return chat("<think>zoom</think>" + _zoom("[0, 0, 1e9, 1]"))


def test_deepeyes_crash_cases_leave_the_run_healthy(tmp_path, openai_server):
    """Every sample's reply is the 1e9-wide box: main exited 1 with every record failed (solver raised ValueError,
    tripping --max_failure_ratio); now each is a judged answer and the run exits 0."""
    bench = eb.make_bench(tmp_path / "bench")
    srv, judge = openai_server(_de_script), openai_server(eb.judge_script())
    argv = eb.evaluate_argv(*bench, tmp_path / "out", srv.base_url, judge.base_url, "--agent", "deepeyes")
    assert evaluate.main([*argv, "--max_failure_ratio", "0.1"]) == 0
    recs = eb.read_records(tmp_path / "out" / "m/o3_bench", 0)
    assert {r["eval_result"]["status"] for r in recs} <= {"correct", "wrong"}


# ----------------------------------------------------------------------------- Mini-o3's string coordinates
def _int_outcome(fn):
    try:
        return ("value", fn())
    except Exception as e:  # noqa: BLE001 - the exception and its message are what is compared
        return (type(e).__name__, str(e))


_PIECES = ["1", "7", "0", "_", " ", "\u3000", "\n", "+", "-", "x", "\u0661", "é", "'", '"']


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(_PIECES), min_size=1, max_size=9).map("".join),
    st.integers(min_value=1, max_value=2500),
    st.booleans(),
)
def test_int_of_product_is_the_release_arithmetic(piece, factor, as_bytes):
    """``int(value * factor)`` (the release's ``int(bbox[0] * w)``) and :func:`mini_o3.int_of_product` forced onto
    its bounded path (``max_chars=0``) give the same value or the same exception and message."""
    value: str | bytes = piece.encode("utf-8") if as_bytes else piece
    assert _int_outcome(lambda: mini_o3.int_of_product(value, factor, max_chars=0)) == _int_outcome(
        lambda: int(value * factor)
    )


@pytest.mark.parametrize(
    "coord, width, message",
    [
        # a 240 KB coordinate (main: 1.14 GB RSS): past the literal cap, not read
        ("1" * 120_000 + "x" * 120_000, 1000, "the bbox_2d text has 240013 characters; at most 16384 are read"),
        # within the cap, times a 30000-px side: a 480 MB product in the release; the release's message here
        (
            "1" * 8000 + "x" * 8000,
            30_000,
            "Exceeds the limit (4300 digits) for integer string conversion: value has 8000",
        ),
        ("x" * 16000, 30_000, "invalid literal for int() with base 10: 'xxxx"),
    ],
)
def test_mini_o3_string_coordinate_takes_bounded_memory(coord, width, message):
    reply = f'<grounding>{{"bbox_2d": ["{coord}", 0, 1, 1], "source": "original_image"}}</grounding>'
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as got:
            mini_o3.ground(reply, [(width, 800)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(got.value).startswith(message), str(got.value)[:200]
    assert peak < 64 * len(reply) + (16 << 20), peak


def test_mini_o3_short_string_coordinate_is_the_release_arithmetic():
    with pytest.raises(ValueError) as short:
        mini_o3.ground('<grounding>{"bbox_2d": ["0.5", 0, 1, 1], "source": "original_image"}</grounding>', [(9, 9)])
    assert str(short.value) == f"invalid literal for int() with base 10: {'0.5' * 9!r}"
