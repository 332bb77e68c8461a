"""The scripted server's own behaviour: ``block_after`` holds requests until ``release`` (the
synchronisation point of the kill-and-resume tests) and ``stop`` ends the accept loop at once."""

from __future__ import annotations

import socket
import threading

import openai
import pytest

from insight_o3.endpoints.scripted_server import ScriptedOpenAIServer, chat


def _client(srv: ScriptedOpenAIServer) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-x", base_url=srv.base_url, max_retries=0, timeout=30)


def test_block_after_holds_until_release():
    with ScriptedOpenAIServer(lambda req, call: chat(f"reply {call.index}"), block_after=2) as srv:
        client = _client(srv)
        ask = lambda: client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])  # noqa: E731
        assert [ask().choices[0].message.content for _ in range(2)] == ["reply 0", "reply 1"]
        got: list[str] = []
        held = [threading.Thread(target=lambda: got.append(ask().choices[0].message.content)) for _ in range(2)]
        for t in held:
            t.start()
        srv.wait_blocked(2, timeout=10)
        assert srv.count == 4 and got == []  # both received, neither answered
        with pytest.raises(TimeoutError, match="only 2 of 3"):
            srv.wait_blocked(3, timeout=0.1)
        srv.release()
        for t in held:
            t.join(timeout=10)
        assert sorted(got) == ["reply 2", "reply 3"]
        assert ask().choices[0].message.content == "reply 4"  # released for good


def test_stop_ends_serving_and_releases_held_requests():
    srv = ScriptedOpenAIServer(lambda req, call: chat("x"), block_after=0).start()
    client = _client(srv)
    errors: list[BaseException] = []

    def held():
        try:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        except openai.APIError as e:  # answered or cut off: either way it does not hang
            errors.append(e)

    t = threading.Thread(target=held)
    t.start()
    srv.wait_blocked(1, timeout=10)
    srv.stop()
    t.join(timeout=10)
    assert not t.is_alive() and not srv._thread.is_alive()
    host, port = srv._server.server_address[:2]
    with pytest.raises(OSError):
        socket.create_connection((host, port), timeout=2).close()


def test_a_client_that_resets_mid_request_leaves_no_traceback(capsys):
    """A cancelled request (a run stopping at a 401) resets its connection: normal for the server, so nothing
    on stderr (socketserver printed a ConnectionResetError traceback, which made stop-line tests flaky)."""
    import struct

    with ScriptedOpenAIServer(lambda req, call: chat("x")) as srv:
        handled = threading.Event()  # set once the server is done with the connection (after any error report)
        shutdown_request = srv._server.shutdown_request

        def shutdown_and_tell(request):
            shutdown_request(request)
            handled.set()

        srv._server.shutdown_request = shutdown_and_tell
        host, port = srv._server.server_address[:2]
        s = socket.create_connection((host, port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # with linger 0: a reset while the server reads the body
        assert handled.wait(10), "the server never finished the connection"
    assert capsys.readouterr().err == ""
