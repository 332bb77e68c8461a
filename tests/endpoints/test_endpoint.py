"""``endpoints.endpoint.Endpoint``: one endpoint type whose key never shows, held whole by every record that names an
endpoint; built once by the commands (``scripts._shared.endpoint_of``)."""

from __future__ import annotations

import argparse

import pytest

from insight_o3.agents.config import InSightO3Config, ReasonerSettings, SearcherSettings
from insight_o3.data.difficulty import FilterSettings
from insight_o3.data.reliability import ReliabilitySettings
from insight_o3.endpoints.endpoint import Endpoint
from insight_o3.evaluation.vsearch_eval import VSearchEvalSettings
from insight_o3.jobs.controls import RunControls
from insight_o3.scripts._shared import endpoint_of, run_controls

SECRET = "sk-never-shown-5f1e0c"
EP = Endpoint(base_url="http://127.0.0.1:9/v1", api_key=SECRET, timeout=5.0, max_retries=1)


@pytest.mark.parametrize(
    "record",
    [
        EP,
        FilterSettings(out_dir="o", model="m", endpoint=EP, judge=EP),
        ReliabilitySettings(out_dir="o", checkers={"m": EP}, judge=EP),
        VSearchEvalSettings(model="m", output_dir="o", endpoint=EP),
        InSightO3Config(
            reasoner=ReasonerSettings(model="r"), searcher=SearcherSettings(model="s"), reasoner_api=EP, searcher_api=EP
        ),
    ],
    ids=lambda r: type(r).__name__,
)
def test_no_record_that_holds_an_endpoint_shows_its_key(record):
    assert SECRET not in repr(record) and SECRET not in str(record)
    assert "http://127.0.0.1:9/v1" in repr(record)  # the address is shown: it says which endpoint


def test_what_a_card_may_say_of_an_endpoint():
    assert EP.public() == {"api_base_url": "http://127.0.0.1:9/v1"}


def test_the_commands_build_an_endpoint_from_flags_else_the_environment(monkeypatch):
    monkeypatch.setenv("JUDGE_API_KEY", "sk-judge-from-env-0001")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env/v1")
    a = argparse.Namespace(judge_api_key=None, judge_api_base_url=None, client_timeout=7.0, max_retries=2)
    ep = endpoint_of(a, "judge", prefix="judge_")
    assert ep == Endpoint(base_url="http://env/v1", api_key="sk-judge-from-env-0001", timeout=7.0, max_retries=2)
    named = endpoint_of(argparse.Namespace(api_key=None, api_base_url="http://x/v1"), key_env="MY_KEY")
    assert (named.key_env, named.api_key, named.timeout) == ("MY_KEY", None, None)  # the check says it is unset


def test_run_controls_come_from_the_shared_flags_and_refuse_what_no_run_can_use():
    a = argparse.Namespace(concurrency=4, no_progress=True, max_failure_ratio=0.25, skip_endpoint_check=True)
    assert run_controls(a) == RunControls(concurrency=4, progress=False, max_failure_ratio=0.25, check_endpoints=False)
    assert run_controls(argparse.Namespace()) == RunControls()  # a command without a flag keeps its default
    with pytest.raises(ValueError, match="concurrency"):
        RunControls(concurrency=0)
    with pytest.raises(ValueError, match="max_failure_ratio"):
        RunControls(max_failure_ratio=0.0)
