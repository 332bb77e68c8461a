"""The scripted OpenAI-compatible server lives in the package, :mod:`insight_o3.endpoints.scripted_server` (demos and
``scripts/bench_eval.py`` use it); this module re-exports it for the tests and keeps
``python -m tests.support.openai_server`` working."""

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

if __name__ == "__main__":
    main()
