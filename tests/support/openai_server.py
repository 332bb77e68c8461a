"""The scripted OpenAI-compatible server lives in the package, :mod:`insight_o3.endpoints.scripted_server` (demos and
``scripts/bench_eval.py`` use it); this module re-exports it for the tests and keeps
``python -m tests.support.openai_server`` working."""

import socket

from insight_o3.endpoints.scripted_server import (  # noqa: F401
    Call,
    Reply,
    ScriptedOpenAIServer,
    chat,
    error,
    last_user_text,
    main,
    malformed,
    refuse,
    request_text,
    user_message_text,
)


def closed_port_url() -> str:
    """A loopback URL on a port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens there now


if __name__ == "__main__":
    main()
