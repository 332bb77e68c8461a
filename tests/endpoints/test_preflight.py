"""Endpoints checked up front (insight_o3.endpoints.preflight): before the first sample every endpoint is asked once; an
unreachable one, a refused key or a named key variable that is unset is one line naming role and URL, status 4.
Real loopback servers and a closed port; nothing is patched."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from insight_o3.endpoints.endpoint import Endpoint
from insight_o3.endpoints.preflight import EndpointError, check_endpoints
from insight_o3.scripts import check_reliability, evaluate
from tests.support import eval_bench as eb
from tests.support.openai_server import Call, Reply, closed_port_url


@pytest.fixture
def refusing_server():
    """A loopback server whose every answer is HTTP 401 (a wrong key)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(401)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "invalid key"}}')

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


@pytest.fixture(autouse=True)
def _no_env_endpoints(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "JUDGE_API_KEY", "JUDGE_API_BASE_URL", "JUDGE_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def _argv(bench, out: Path, main_url: str, *extra: str) -> list[str]:
    return eb.evaluate_argv(*bench, out, main_url, None, *extra, max_retries=0)


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_an_unreachable_model_endpoint_stops_before_the_first_sample(tmp_path, capsys):
    bench, url = eb.make_bench(tmp_path / "bench"), closed_port_url()
    t = time.perf_counter()
    rc = evaluate.main(_argv(bench, tmp_path / "out", url))
    took = time.perf_counter() - t
    line = _one_line(capsys.readouterr().err)
    assert rc == 4 and took < 10
    assert f"model endpoint {url} is unreachable (connection refused)" in line and "--skip_endpoint_check" in line
    assert not (tmp_path / "out/m/o3_bench/trial_0/eval_records.jsonl").read_text()  # nothing asked, nothing lost


def test_an_unreachable_judge_is_named_as_the_judge(tmp_path, openai_server, capsys):
    bench, url = eb.make_bench(tmp_path / "bench"), closed_port_url()
    model = openai_server(eb.model_script())
    assert evaluate.main(_argv(bench, tmp_path / "out", model.base_url, "--judge_api_base_url", url)) == 4
    assert f"judge endpoint {url} is unreachable" in _one_line(capsys.readouterr().err)
    assert model.count == 0  # the check asks the models list only: no completion was requested


def test_the_judge_defaults_to_the_models_endpoint_and_says_so(tmp_path, openai_server, caplog):
    """With only --api_base_url, the judge is asked there (as `filter` does), never at the SDK's default."""
    model_script, judge_script = eb.model_script(), eb.judge_script()

    def both(req: dict, call: Call) -> Reply:
        return (judge_script if req.get("model") == "scripted-judge" else model_script)(req, call)

    srv = openai_server(both)
    caplog.set_level("INFO")
    assert evaluate.main(_argv(eb.make_bench(tmp_path / "bench"), tmp_path / "out", srv.base_url)) == 0
    assert {r["model"] for r in srv.requests} == {"scripted-vlm", "scripted-judge"}
    said = next(r for r in caplog.records if "the judge (scripted-judge) is asked on the model's endpoint" in r.message)
    assert said.levelname == "WARNING" and f"judge: {srv.base_url} (from the model's endpoint" in said.message


def test_a_refused_key_and_a_redacted_url(refusing_server, capsys):
    url = refusing_server.replace("http://", "http://user:pa55word@")
    with pytest.raises(EndpointError) as e:
        check_endpoints([("vSearcher", Endpoint(base_url=url, api_key="sk-secret-key-123"))])
    text = str(e.value)
    assert "vSearcher endpoint" in text and "refused the key (HTTP 401)" in text
    assert "pa55word" not in text and "sk-secret-key-123" not in text


def test_the_sdk_default_without_a_key_is_refused_up_front():
    with pytest.raises(EndpointError, match="model endpoint https://api.openai.com/v1 .*no base URL.*no key"):
        check_endpoints([("model", Endpoint(base_url=None, api_key=None))])


def test_skip_endpoint_check_asks_nothing_first(tmp_path, capsys):
    bench, url = eb.make_bench(tmp_path / "bench"), closed_port_url()
    rc = evaluate.main(_argv(bench, tmp_path / "out", url, "--skip_endpoint_check", "--concurrency", "1"))
    err = capsys.readouterr().err
    assert rc in (1, 4) and "is unreachable" not in err  # the samples themselves fail, as before


def test_check_reliability_names_a_checker_whose_key_variable_is_unset(tmp_path, openai_server, capsys, monkeypatch):
    from tests.support.reliability_bench import make_pool

    srv = openai_server(eb.judge_script())
    monkeypatch.delenv("NOPE_ENV", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)  # the judge may borrow $OPENAI_API_KEY on its host only
    argv = ["--source_pool", str(make_pool(tmp_path)), "--out_dir", str(tmp_path / "rel"), "--no_progress"]
    argv += ["--checker", f"m,{srv.base_url},NOPE_ENV", "--judge_api_base_url", srv.base_url]
    assert check_reliability.main(argv) == 4
    line = _one_line(capsys.readouterr().err)
    assert f"checker m endpoint {srv.base_url}: its key variable $NOPE_ENV is not set" in line
    assert srv.count == 0


def test_build_region_localization_needs_an_endpoint(tmp_path, capsys):
    from insight_o3.scripts import build_region_localization

    with pytest.raises(SystemExit) as e:
        build_region_localization.main(["--layouts", str(tmp_path), "--out_dir", str(tmp_path / "o")])
    assert e.value.code == 2
    assert "no default endpoint: give --api_base_url" in capsys.readouterr().err
