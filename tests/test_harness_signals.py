"""The test process passes Ctrl-C on to the commands its tests start, however pytest itself was started
(``pytest_configure`` in tests/conftest.py): run with SIGINT ignored and SIGINT/SIGTERM blocked — a background job of
a non-interactive shell, ``nohup``, a CI runner — it still starts every command with SIGINT at its default and
unblocked. Otherwise the Ctrl-C tests (``build_o3_bench_demo --serve``, ``evaluate | cat``) see their command, and
``cat``, ignore the signal they send: an ignored disposition and the signal mask survive exec."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: run the rest of the command line with SIGINT ignored and SIGINT/SIGTERM blocked, as such a start leaves them
STARTED_IGNORING = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM}); os.execvp(sys.argv[1], sys.argv[1:])"
)


def _sigint(status: str) -> dict[str, bool]:
    """Whether SIGINT is ignored and whether it is blocked, from a ``/proc/PID/status`` text."""
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    bit = 1 << (signal.SIGINT - 1)
    return {k: bool(int(fields[k], 16) & bit) for k in ("SigIgn", "SigBlk")}


def test_a_command_a_test_starts_takes_ctrl_c():
    status = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True, check=True).stdout
    assert _sigint(status) == {"SigIgn": False, "SigBlk": False}


def test_pytest_started_ignoring_ctrl_c_still_starts_commands_that_take_it():
    ignoring = [sys.executable, "-c", STARTED_IGNORING]
    # what such a start passes on by itself (so the run below has something to undo)
    inherited = subprocess.run([*ignoring, "cat", "/proc/self/status"], capture_output=True, text=True, check=True)
    assert _sigint(inherited.stdout) == {"SigIgn": True, "SigBlk": True}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    test = f"{Path(__file__).relative_to(REPO)}::test_a_command_a_test_starts_takes_ctrl_c"
    run = subprocess.run(
        [*ignoring, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout + run.stderr
