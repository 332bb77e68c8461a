"""Output errors (disk full, read-only file system, the output directory removed) end a run with one
clear line — what failed, which file, that finished samples are safe, that a rerun resumes — and never
leave a corrupt complete line. Injected errors (always) and a real small tmpfs (where mounting is
permitted, as root on CI)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from insight_o3.base.exit_codes import ExitCode
from insight_o3.endpoints.guard import EXIT_OUTPUT_ERROR
from insight_o3.scripts import evaluate
from insight_o3.storage.atomic import OutputError, write_json_atomic
from insight_o3.storage.record_log import RecordLog
from tests.support import eval_bench as eb
from tests.support.stacks import REPO
from tests.support.waiting import wait_for_lines


def _rec(key: str, pad: int = 200) -> dict:
    return {"sample_key": key, "payload": "x" * pad}


def _is_records_fd(fd: int, suffix: str) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").endswith(suffix)
    except OSError:
        return False


def _inject(monkeypatch, name: str, fake, suffix: str) -> None:
    """Replace ``os.<name>`` for descriptors of files ending in ``suffix`` only (pipes, sockets and
    every other file of the process keep the real call)."""
    real = getattr(os, name)

    def call(fd, *args):
        return fake(real, fd, *args) if _is_records_fd(fd, suffix) else real(fd, *args)

    monkeypatch.setattr(os, name, call)


# ----------------------------------------------------------------------------- injected errors
@pytest.mark.smoke
def test_partial_write_then_enospc_is_truncated_back(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    lg = RecordLog.open(str(path))
    lg.append(_rec("a"))
    before = path.read_bytes()
    calls = {"n": 0}

    def half_then_full(real_write, fd, data):
        calls["n"] += 1
        if calls["n"] == 1:  # the kernel takes half of the line ...
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")  # ... then the disk is full

    _inject(monkeypatch, "write", half_then_full, "r.jsonl")
    with pytest.raises(OutputError) as e:
        lg.append(_rec("b"))
    monkeypatch.undo()
    assert str(e.value) == f"cannot append to {path}: No space left on device [ENOSPC]"
    assert e.value.advice == "free some disk space" and not e.value.lost_dir
    assert path.read_bytes() == before  # the half line is gone
    assert "b" not in lg.records
    lg.append(_rec("c"))  # space freed: the next line starts clean
    lg.close()
    again = RecordLog.open(str(path))  # every line complete and parseable
    assert list(again.records) == ["a", "c"] and again.n_lines == 2
    again.close()


def test_fsync_failure_is_truncated_back(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    lg = RecordLog.open(str(path))
    lg.append(_rec("a"))
    before = path.read_bytes()

    def eio(real, fd):
        raise OSError(errno.EIO, "I/O error")

    _inject(monkeypatch, "fsync", eio, "r.jsonl")
    with pytest.raises(OutputError, match=r"I/O error \[EIO\]"):
        lg.append(_rec("b"))
    monkeypatch.undo()
    assert path.read_bytes() == before
    lg.close()


def test_deleted_records_file_is_detected(tmp_path):
    d = tmp_path / "eval"
    d.mkdir()
    lg = RecordLog.open(str(d / "r.jsonl"))
    lg.append(_rec("a"))
    shutil.rmtree(d)  # the output directory vanishes under the run
    with pytest.raises(OutputError) as e:
        lg.append(_rec("b"))
    assert e.value.lost_dir and "was deleted" in str(e.value)
    lg.close()


def test_atomic_writer_error_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "m.json"
    write_json_atomic(target, {"old": True})

    def full(real, fd):
        raise OSError(errno.ENOSPC, "full")

    _inject(monkeypatch, "fsync", full, ".tmp")
    with pytest.raises(OutputError, match=rf"cannot write {target}: full \[ENOSPC\]"):
        write_json_atomic(target, {"new": True})
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"old": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]  # no temporary file left


@pytest.mark.smoke
def test_evaluate_stops_with_one_line_on_injected_enospc_and_resumes(tmp_path, openai_server, capsys, monkeypatch):
    bench = eb.make_bench(tmp_path / "bench")
    model = openai_server(eb.model_script())
    judge = openai_server(eb.judge_script())
    out = tmp_path / "out"
    argv = eb.keyed_argv(
        *bench,
        out,
        model.base_url,
        judge.base_url,
        "--num_trials",
        "2",
        "--separate_trial_requests",
        "--concurrency",
        "1",
    )
    n = {"lines": 0}

    def full_after_five(real_write, fd, data):
        n["lines"] += 1
        if n["lines"] == 6:  # 7 bytes of the sixth line fit, then the disk is full
            return real_write(fd, bytes(data[:7]))
        if n["lines"] > 6:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    _inject(monkeypatch, "write", full_after_five, "eval_records.jsonl")
    assert evaluate.main(argv) == EXIT_OUTPUT_ERROR
    monkeypatch.undo()
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err)
    line = err[-1]
    assert line.startswith(f"error: cannot append to {out / 'm/o3_bench/trial_'}")
    assert (
        "No space left on device [ENOSPC] — free some disk space. Samples finished before this are safe in "
        f"{out / 'm/o3_bench'}; rerun the same command to resume"
    ) in line
    lines = [
        x for k in range(2) for x in (out / f"m/o3_bench/trial_{k}/eval_records.jsonl").read_bytes().splitlines(True)
    ]
    assert len(lines) == 5 and all(x.endswith(b"\n") and json.loads(x) for x in lines)
    n_before = model.count
    assert evaluate.main(argv) == 0  # the disk has space again: resume
    assert model.count - n_before == 16 - 5  # only the unrecorded pairs
    eb.assert_expected(out, 2)


# ----------------------------------------------------------------------------- a real small tmpfs
@pytest.fixture
def small_tmpfs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=28k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}); the injected-error tests cover this")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _remount(mnt: Path, opts: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{opts}", str(mnt)], check=True, capture_output=True)


def _run(argv, timeout=120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "insight_o3.scripts.evaluate", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_full_disk_then_resume_exact_on_a_real_tmpfs(small_tmpfs, tmp_path, openai_server):
    bench = eb.make_bench(tmp_path / "bench")
    model = openai_server(eb.model_script())
    judge = openai_server(eb.judge_script())
    out = small_tmpfs / "out"
    argv = eb.keyed_argv(
        *bench,
        out,
        model.base_url,
        judge.base_url,
        "--num_trials",
        "3",
        "--separate_trial_requests",
        "--concurrency",
        "1",
    )
    r = _run(argv)
    assert r.returncode == EXIT_OUTPUT_ERROR, r.stderr
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cannot ") and str(out) in last and "No space left on device [ENOSPC]" in last
    assert "rerun the same command to resume" in last
    recs = 0
    for p in (out / "m/o3_bench").glob("trial_*/eval_records.jsonl"):
        data = p.read_bytes()
        assert not data or data.endswith(b"\n")  # no torn or glued line
        recs += sum(1 for x in data.splitlines() if json.loads(x))
    assert recs < 24
    n_before = model.count
    _remount(small_tmpfs, "size=4m")  # space freed
    r = _run(argv)
    assert r.returncode == 0, r.stderr
    assert model.count - n_before == 24 - recs  # only what was not recorded is asked again
    eb.assert_expected(out, 3)


def test_read_only_output_is_one_line(small_tmpfs, tmp_path, openai_server):
    bench = eb.make_bench(tmp_path / "bench")
    model = openai_server(eb.model_script())
    judge = openai_server(eb.judge_script())
    _remount(small_tmpfs, "ro")
    r = _run(eb.keyed_argv(*bench, small_tmpfs / "out", model.base_url, judge.base_url))
    assert r.returncode == EXIT_OUTPUT_ERROR, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: cannot create the lock file {small_tmpfs / 'out/m/o3_bench'}")
    assert "Read-only file system [EROFS] — use an output directory on a writable file system" in last
    assert "Traceback" not in r.stderr and model.count == 0


def test_removed_output_directory_is_one_line(tmp_path, openai_server):
    bench = eb.make_bench(tmp_path / "bench")
    model = openai_server(eb.model_script(), block_after=1)  # holds the run after its first record
    judge = openai_server(eb.judge_script())
    out = tmp_path / "out"
    argv = eb.keyed_argv(*bench, out, model.base_url, judge.base_url, "--concurrency", "1")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "insight_o3.scripts.evaluate", *argv],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_lines(1, out / "m/o3_bench/trial_0/eval_records.jsonl", timeout=60)
        model.wait_blocked(1)
        shutil.rmtree(out)
        model.release()  # the run goes on and finds its directory gone
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_OUTPUT_ERROR, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        f"error: cannot append to {out / 'm/o3_bench/trial_0/eval_records.jsonl'}: "
        "the file was deleted while the run was writing it"
    )
    assert "the output directory was removed while the run was using it; what was written there is gone" in last
    assert "Traceback" not in err
    assert not out.exists()  # the run did not silently recreate part of it


def test_collage_worker_output_error_is_one_line(small_tmpfs, tmp_path):
    from tests.support.collage_config import CFG_FLAGS

    rows = []
    src = tmp_path / "src"
    src.mkdir()
    from PIL import Image

    for i in range(12):
        Image.effect_noise((300, 300), 60).convert("RGB").save(src / f"s{i}.png")
        rows.append(
            {
                "id": f"s{i}",
                "image": f"s{i}.png",
                "width": 300,
                "height": 300,
                "bbox": [10, 10, 40, 40],
                "question": f"q{i}",
                "answer": "a",
            }
        )
    pool = src / "pool.jsonl"
    pool.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = small_tmpfs / "collages"
    cmd = [
        sys.executable,
        "-m",
        "insight_o3.scripts.generate_collages",
        "--source_pool",
        str(pool),
        "--out_dir",
        str(out),
        "--num_collages",
        "12",
        "--num_workers",
        "2",
        "--chunk_size",
        "2",
        "--image_format",
        "png",
        "--no_progress",
        *CFG_FLAGS,
    ]
    t0 = time.time()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == EXIT_OUTPUT_ERROR, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cannot ") and str(out) in last and "[ENOSPC]" in last, last
    assert "Traceback" not in r.stderr and time.time() - t0 < 120


# ----------------------------------------------------------------------------- output dirs that can never hold files
@pytest.mark.parametrize(
    "where, reason",
    [
        ("/proc/insight_o3_out", "/proc is the kernel's proc file system, which cannot hold files"),
        ("/proc/self", "/proc is the kernel's proc file system, which cannot hold files"),
        ("/sys/insight_o3_out", "/sys is the kernel's sysfs file system, which cannot hold files"),
        ("FILE/out", "FILE is not a directory"),
    ],
)
def test_output_dir_that_cannot_hold_files_is_bad_input(tmp_path, openai_server, capsys, where, reason):
    """/proc, /sys or a path through a file: refused before anything is created or sent, status 2, naming the path
    and why — not "the output directory was removed while the run was using it"."""
    if where.startswith("/") and not os.path.isdir("/" + where.split("/")[1]):
        pytest.skip(f"no {where.split('/')[1]} file system here")
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    out = where.replace("FILE", str(a_file))
    reason = reason.replace("FILE", str(a_file))
    bench = eb.make_bench(tmp_path / "bench")
    model = openai_server(eb.model_script())
    judge = openai_server(eb.judge_script())
    assert evaluate.main(eb.keyed_argv(*bench, Path(out), model.base_url, judge.base_url)) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"error: cannot use {out}/m/o3_bench as an output directory: {reason}; choose a directory on a disk"
    ), err[-3:]
    assert "removed" not in "\n".join(err) and "Traceback" not in "\n".join(err)
    assert model.count == 0 and judge.count == 0
    assert not os.path.exists(f"{out}/m")


def test_make_demo_bench_refuses_a_proc_output_dir(capsys):
    from insight_o3.scripts import make_demo_bench

    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc here")
    assert make_demo_bench.main(["--out", "/proc/self/bench", "--num_images", "1"]) == ExitCode.BAD_INPUT
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: cannot use /proc/self/bench as an output directory: /proc is the kernel's proc")
