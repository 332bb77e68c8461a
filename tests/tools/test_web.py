"""The released web chain's endpoints (``insight_o3.tools.web.WebSettings``): each service an ``Endpoint``, its key
never in a ``repr`` nor on the run card, and the Jina key — which the release sends to both Jina addresses — sent
to ``visit``'s reader only on the search reader's host unless ``--allow_key_to_other_host``, as every borrowed key."""

from __future__ import annotations

import json
import logging

import pytest

from insight_o3.endpoints.endpoint import KeyHostError
from insight_o3.scripts import evaluate
from insight_o3.tools.web import JINA_READER_URL, READER_URL, SERPER_SEARCH_URL, WebSettings

SERPER = "serper-secret-0123456789"
JINA = "jina-secret-9876543210"
VARS = ("SERPER_API_KEY", "SERPER_SEARCH_URL", "JINA_API_KEY", "JINA_READER_URL", "READER_URL", "QWEN_API_BASE")


@pytest.fixture
def env(monkeypatch):
    for name in (*VARS, "OPENAI_API_KEY", "OPENAI_BASE_URL", "JUDGE_API_KEY", "JUDGE_API_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_release_defaults_send_each_key_to_its_own_service():
    s = WebSettings.from_env({"SERPER_API_KEY": SERPER, "JINA_API_KEY": JINA})
    assert (s.serper.base_url, s.serper.api_key) == (SERPER_SEARCH_URL, SERPER)
    assert (s.jina.base_url, s.jina.api_key) == (JINA_READER_URL, JINA)
    assert (s.reader.base_url, s.reader.api_key) == (READER_URL, JINA)  # r.jina.ai both: the release's pairing
    assert s.summarizer.api_key is None  # the summariser is asked without a key, as released
    shown = repr(s) + json.dumps(s.public())
    assert SERPER not in shown and JINA not in shown
    assert s.public()["serper_key_set"] is True and s.public()["reader_url"] == READER_URL


def test_the_jina_key_goes_to_another_readers_host_only_when_allowed():
    e = {"JINA_API_KEY": JINA, "READER_URL": "https://reader.example.org/v4/reader"}
    with pytest.raises(KeyHostError, match="allow_key_to_other_host") as err:
        WebSettings.from_env(e)
    assert JINA not in str(err.value) and "reader.example.org" in str(err.value)
    assert WebSettings.from_env(e, allow_key_to_other_host=True).reader.api_key == JINA
    # no Jina key: nothing is borrowed, nothing refused
    assert WebSettings.from_env({"READER_URL": "https://reader.example.org"}).reader.api_key is None
    # the search reader moved with it (one host): the key follows
    moved = {**e, "JINA_READER_URL": "https://reader.example.org/"}
    assert WebSettings.from_env(moved).reader.api_key == JINA


def test_each_web_endpoint_is_stated_without_its_key(caplog):
    with caplog.at_level(logging.INFO, logger="insight_o3.tools.web"):
        WebSettings.from_env({"SERPER_API_KEY": SERPER, "JINA_API_KEY": JINA})
    text = caplog.text
    assert "web search: https://google.serper.dev/search" in text and "$SERPER_API_KEY" in text
    assert "visit reader" in text and "the Jina reader's key" in text
    assert SERPER not in text and JINA not in text


def _argv(*extra: str) -> list[str]:
    return ["--benchmark", "vstar", "--model", "m", "--api_base_url", "http://127.0.0.1:8000/v1", "--agent",
            "opensearch_vl", "--retrieval", "web", *extra]  # fmt: skip


def test_evaluate_builds_the_web_endpoints_once_and_refuses_a_key_to_another_host(env, capsys):
    env.setenv("JINA_API_KEY", JINA)
    env.setenv("SERPER_API_KEY", SERPER)
    c = evaluate.parse_args(_argv())
    web = c.agent.tools.web  # type: ignore[union-attr]
    assert web.serper.api_key == SERPER and web.reader.api_key == JINA
    env.setenv("READER_URL", "https://reader.example.org")
    with pytest.raises(SystemExit) as e:
        evaluate.parse_args(_argv())
    err = capsys.readouterr().err
    assert e.value.code == 2 and "allow_key_to_other_host" in err and JINA not in err
    c = evaluate.parse_args(_argv("--allow_key_to_other_host"))
    assert c.agent.tools.web.reader.api_key == JINA  # type: ignore[union-attr]
