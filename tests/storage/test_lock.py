"""One run per output directory: two real concurrent runs of a resumable command on one directory ->
the second exits at once naming the directory and the holder's pid, the first finishes with exact
records; a lock left by a killed run (or held on by a child it forked) never blocks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from insight_o3.endpoints.guard import EXIT_LOCKED
from insight_o3.storage.lock import LOCK_FILE, RunLockedError, acquire, run_lock
from tests.support import eval_bench as eb
from tests.support.stacks import REPO
from tests.support.waiting import wait_until

HOLD = """
import sys, time
from insight_o3.storage.lock import acquire
lock = acquire(sys.argv[1], "test-holder")
def child(started):
    started.set()
    time.sleep(60)
if len(sys.argv) > 2:   # fork a child that outlives us (a process-pool worker, say)
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    started = ctx.Event()
    ctx.Process(target=child, args=(started,), daemon=False).start()
    # the child has run its at-fork hooks once it runs Python code: the lock's copy is closed by then
    assert started.wait(30)
print("locked", flush=True)
time.sleep(60)
"""


def _holder(directory: Path, fork_child: bool = False) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(directory), *(["fork"] if fork_child else [])],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert p.stdout.readline().strip() == "locked"
    return p


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


@pytest.mark.smoke
def test_two_concurrent_evaluate_runs_one_refuses_records_exact(tmp_path, openai_server):
    bench = eb.make_bench(tmp_path / "bench")
    gate = threading.Event()  # the model answers only once the second run has come and gone

    def gated(req, call):
        gate.wait(60)
        return eb.model_reply(req)

    slow = openai_server(gated)
    judge = openai_server(eb.judge_script())
    out = tmp_path / "out"
    argv = eb.keyed_argv(*bench, out, slow.base_url, judge.base_url, "--num_trials", "3", "--concurrency", "2")
    cmd = [sys.executable, "-m", "insight_o3.scripts.evaluate", *argv]
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    first = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: slow.count >= 1, 60, "the first run's first request")
        n_at_start = slow.count
        t0 = time.time()
        second = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=45)
        refused_in = time.time() - t0
        assert first.poll() is None
    finally:
        gate.set()
        out1, err1 = first.communicate(timeout=120)
    assert second.returncode == EXIT_LOCKED, second.stderr
    last = second.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {out / 'm/o3_bench'} is in use by another run (evaluate, pid {first.pid}")
    assert "Traceback" not in second.stderr
    assert refused_in < 15 and slow.count - n_at_start <= 8  # it asked nothing: all requests are the first's
    assert first.returncode == 0, err1
    assert slow.count == 8  # 8 samples, n=3: exactly what one run needs, nothing twice
    eb.assert_expected(out, 3)  # exactly one record per (sample, trial)


def test_lock_of_a_killed_run_does_not_block(tmp_path):
    d = tmp_path / "eval"
    holder = _holder(d)
    with pytest.raises(RunLockedError) as e:
        acquire(d, "second")
    assert str(d) in str(e.value) and f"pid {holder.pid}" in str(e.value) and "test-holder" in str(e.value)
    _kill_group(holder)  # SIGKILL: no cleanup ran, the lock file stays
    assert (d / LOCK_FILE).exists()
    with run_lock(d, "after the kill") as lock:
        assert lock.held
        assert json.loads((d / LOCK_FILE).read_text())["pid"] == os.getpid()


def test_a_forked_child_does_not_keep_the_lock(tmp_path):
    d = tmp_path / "eval"
    holder = _holder(d, fork_child=True)
    try:
        os.kill(holder.pid, signal.SIGKILL)  # the holder dies, its forked child lives on
        holder.wait()
        with run_lock(d, "after the holder died"):
            pass
    finally:
        _kill_group(holder)


def test_the_same_process_cannot_take_a_held_lock_twice(tmp_path):
    with run_lock(tmp_path, "one"):
        with pytest.raises(RunLockedError, match=f"pid {os.getpid()}"):
            acquire(tmp_path, "two")
    with run_lock(tmp_path, "three"):  # released on exit
        pass


# ----------------------------------------------------------------------------- the other commands
def test_every_resumable_command_refuses_a_held_directory(tmp_path):
    """evaluate_vsearch, generate_collages (generate and filter) and build_region_localization exit
    at once (status 5, one line) while another process holds their output directory."""
    out = tmp_path / "out"
    holder = _holder(out)
    missing = str(tmp_path / "nothing-here")  # inputs are not even read before the lock
    pool = tmp_path / "pool.jsonl"
    pool.write_text(
        json.dumps(
            {
                "id": "a",
                "image": "a.png",
                "width": 100,
                "height": 100,
                "bbox": [1, 1, 2, 2],
                "question": "q",
                "answer": "a",
            }
        )
        + "\n"
    )
    (out / "collages.jsonl").write_text(
        json.dumps({"sample_key": "k", "image": "i.png", "question": "q", "answer": "a"}) + "\n"
    )
    (tmp_path / "ann.jsonl").write_text(json.dumps({"image": "x.png", "description": "d", "bbox": [0, 0, 1, 1]}) + "\n")
    (tmp_path / "x.png").write_bytes(b"")
    cmds = {
        "evaluate_vsearch": [
            "insight_o3.scripts.evaluate_vsearch",
            "--ann_file",
            str(tmp_path / "ann.jsonl"),
            "--img_dir",
            str(tmp_path),
            "--model",
            "m",
            "--api_base_url",
            "http://127.0.0.1:9/v1",
            "--output_dir",
            str(out),
        ],
        "generate_collages": [
            "insight_o3.scripts.generate_collages",
            "--source_pool",
            str(pool),
            "--out_dir",
            str(out),
            "--num_collages",
            "2",
            "--skip_image_check",
            "--no_progress",
        ],
        "generate_collages filter": [
            "insight_o3.scripts.generate_collages",
            "filter",
            "--out_dir",
            str(out),
            "--model",
            "m",
            "--base_url",
            "http://127.0.0.1:9/v1",
            "--no_progress",
        ],
        "build_region_localization": [
            "insight_o3.scripts.build_region_localization",
            "--layouts",
            missing,
            "--out_dir",
            str(out),
            "--model",
            "m",
            "--api_base_url",
            "http://127.0.0.1:9/v1",
            "--no_progress",
        ],
    }
    try:
        for name, cmd in cmds.items():
            r = subprocess.run([sys.executable, "-m", *cmd], cwd=REPO, capture_output=True, text=True, timeout=60)
            assert r.returncode == EXIT_LOCKED, (name, r.stderr)
            last = r.stderr.strip().splitlines()[-1]
            assert last.startswith(f"error: {out} is in use by another run (test-holder, pid {holder.pid}"), name
            assert "Traceback" not in r.stderr, name
        assert sorted(p.name for p in out.iterdir()) == sorted([LOCK_FILE, "collages.jsonl"])  # nothing written
    finally:
        _kill_group(holder)
