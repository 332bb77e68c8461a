"""``endpoints.chat``: one chat request and its first choice, read one way by every caller (the agents' drivers, the
tool loop, the single-model solver, the judge, the region describer, the O3-Bench builder steps), against a real
loopback server through the ``openai`` SDK."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from openai import AsyncOpenAI
from PIL import Image

from insight_o3.agents import deepeyes
from insight_o3.agents.tool_loop import ToolLoopSolver
from insight_o3.data.describe import BoxTask, DescribeConfig, describe_box
from insight_o3.endpoints.chat import Completion, NoChoice, chat_choices, chat_once
from insight_o3.endpoints.errors import EXPECTED_ERRORS
from insight_o3.imaging.images import ImageStore
from insight_o3.protocol.trajectory import message
from tests.support.openai_server import Reply, chat

USER = [message("user", "hi")]


def _no_choices(req, call) -> Reply:
    reply = chat("x")
    reply.body["choices"] = []  # type: ignore[index]
    return reply


def _no_message(req, call) -> Reply:
    reply = chat("x")
    del reply.body["choices"][0]["message"]  # type: ignore[index]
    return reply


def _ask(srv, fn, **request):
    async def go():
        client = AsyncOpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        try:
            return await fn(client, "m", USER, **request)
        finally:
            await client.close()

    return asyncio.run(go())


def test_chat_once_reads_the_first_choice_and_sends_the_request_as_given(openai_server):
    srv = openai_server(lambda req, call: chat(["first", "second"], ["stop", "length"]))
    got = _ask(srv, chat_once, n=2, temperature=0.5)
    assert got == Completion("first", "stop", {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    assert got.token_counts() == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    assert srv.requests[0] == {"model": "m", "messages": USER, "n": 2, "temperature": 0.5}  # nothing added


def test_chat_choices_are_every_choice_with_a_message(openai_server):
    def script(req, call):
        reply = chat(["a", "b", "c"])
        reply.body["choices"][1]["message"] = None  # type: ignore[index]
        return reply

    got = _ask(openai_server(script), chat_choices, n=3)
    assert [c.text for c in got] == ["a", "c"]  # the one without a message is a missing choice
    assert got[0].usage == got[1].usage  # usage is per request


@pytest.mark.parametrize(
    ("script", "reason"),
    [(_no_choices, "the server returned no choices"), (_no_message, "the server returned a choice without a message")],
)
def test_a_reply_without_a_first_choice_is_an_expected_error(script, reason, openai_server):
    with pytest.raises(NoChoice, match=reason) as e:
        _ask(openai_server(script), chat_once)
    assert isinstance(e.value, EXPECTED_ERRORS)  # the item fails with it; nothing crashes


def _box(tmp_path) -> BoxTask:
    path = tmp_path / "img.png"
    Image.new("RGB", (64, 48), "white").save(path)
    return BoxTask("img#0", str(path), 64, 48, (4.0, 4.0, 30.0, 20.0), "text", (), "infographicvqa")


def test_a_describer_reply_without_a_message_is_one_failed_record(tmp_path, openai_server):
    """A choice without a message was read as ``.message.content``: an AttributeError that ended the whole run."""
    srv = openai_server(_no_message)

    async def go():
        client = AsyncOpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        try:
            return await describe_box(client, _box(tmp_path), DescribeConfig(model="m"))
        finally:
            await client.close()

    rec = asyncio.run(go())
    assert rec["status"] == "failed"
    assert rec["error"].endswith("the server returned a choice without a message")


def _tool_loop(srv, tmp_path, **completion_kwargs):
    path = tmp_path / "img.png"
    Image.new("RGB", (64, 48), "white").save(path)
    sample = SimpleNamespace(question="What?", options=None, image_path=str(path))

    async def go():
        client = AsyncOpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        images = ImageStore(fmt="PNG", workers=1)
        try:
            solver = ToolLoopSolver(client, "m", images, deepeyes.DeepEyesSession, deepeyes.DEFAULTS, completion_kwargs)
            return (await solver.solve(sample, 1))[0]
        finally:
            images.close()
            await client.close()

    return asyncio.run(go())


def test_a_tool_loop_reply_without_choices_says_so(tmp_path, openai_server):
    """The tool loop read ``choices[0]`` and recorded the ``IndexError`` ("list index out of range")."""
    attempt = _tool_loop(openai_server(_no_choices), tmp_path)
    assert attempt.text is None
    assert attempt.error is not None and attempt.error.endswith("the server returned no choices")


def test_a_programming_error_in_the_tool_loop_is_a_traceback_not_a_failed_attempt(tmp_path, openai_server):
    """The tool loop caught ``TypeError``/``AttributeError``/``IndexError`` around the request, so a bug (here an
    argument the SDK does not take) became a quietly failed attempt (endpoints/errors.py: it must propagate)."""
    with pytest.raises(TypeError):
        _tool_loop(openai_server(lambda req, call: chat("x")), tmp_path, not_an_sdk_argument=1)
