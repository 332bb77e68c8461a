"""The round driver's serving (training/dpo/serve.py) around scripts/vllm_serve_bg.sh, the script itself replaced by
a recorder: the port a server gets, and the stale servers stopped before it starts."""

from __future__ import annotations

import socket
import subprocess

import pytest

from training.dpo import serve
from training.dpo.serve import ServeError, ServeSettings, served


@pytest.fixture
def calls(monkeypatch):
    got: list[list[str]] = []

    def script(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        got.append(list(args))
        return subprocess.CompletedProcess(["bash"], 1 if "--model" in args and "fail" in args else 0, "", "")

    monkeypatch.setattr(serve, "_script", script)
    return got


def _port(args: list[str]) -> int:
    return int(args[args.index("--port") + 1])


def test_port_0_picks_a_free_port_as_the_server_starts_and_stops_that_server(calls, tmp_path):
    run_dir = tmp_path / "vllm"
    with served("model", "policy-round-1", ServeSettings(port=0), str(run_dir)) as url:
        (start,) = [c for c in calls if c[0] == "start"]
        port = _port(start)
        assert port > 0 and url == f"http://127.0.0.1:{port}/v1"
        with socket.socket() as s:  # nothing holds it: the server binds it
            s.bind(("127.0.0.1", port))
    assert calls[-1] == ["stop", "--port", str(port), "--run-dir", str(run_dir)]


def test_a_fixed_port_is_kept(calls, tmp_path):
    with served("model", "policy-round-1", ServeSettings(port=8123), str(tmp_path)) as url:
        assert url == "http://127.0.0.1:8123/v1"
    assert [_port(c) for c in calls] == [8123, 8123]  # start, stop


def test_every_server_a_killed_driver_left_in_the_run_dir_is_stopped_first(calls, tmp_path):
    run_dir = tmp_path / "vllm"
    run_dir.mkdir()
    for port in (40001, 40002):
        (run_dir / f"vllm_{port}.pid").write_text("12345\n")
    (run_dir / "vllm_40001.log").write_text("")
    with served("model", "policy-round-2", ServeSettings(port=0), str(run_dir)):
        pass
    assert calls[0] == ["stop", "--port", "40001", "--run-dir", str(run_dir)]
    assert calls[1] == ["stop", "--port", "40002", "--run-dir", str(run_dir)]
    assert calls[2][0] == "start"
    assert len(calls) == 4


def test_a_failed_start_stops_its_server_and_names_the_script_exit(calls, tmp_path):
    with pytest.raises(ServeError, match="vllm_serve_bg.sh exit 1"):
        with served("fail", "policy-round-1", ServeSettings(port=0), str(tmp_path)):
            pass
    start, stop = calls
    assert start[0] == "start" and stop == ["stop", "--port", str(_port(start)), "--run-dir", str(tmp_path)]
