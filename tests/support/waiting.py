"""Waiting for something a test can observe (a file's lines, a held request, a process), never for a fixed time.

A fixed sleep before a signal or an assertion is either too short on a loaded machine (a flaky test) or longer than
needed everywhere else; :func:`wait_until` polls the condition the test actually needs and fails naming it.
"""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_until(cond: Callable[[], T], timeout: float, what: str = "the condition", interval: float = 0.02) -> T:
    """Poll ``cond`` every ``interval`` seconds until it returns a true value, and return that value; after
    ``timeout`` seconds an ``AssertionError`` names ``what`` (and the last value seen)."""
    end = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {value!r:.200})")
        time.sleep(interval)


def complete_lines(*paths: Path) -> int:
    """Complete lines (ending in a newline) the files hold together; a missing file holds none."""
    return sum(p.read_bytes().count(b"\n") for p in paths if p.exists())


def wait_for_lines(n: int, *paths: Path, timeout: float = 60.0) -> int:
    """Wait until ``paths`` together hold ``n`` complete lines (the records a held run has finished); returns
    how many they hold then."""
    return wait_until(
        lambda: (c := complete_lines(*paths)) >= n and c, timeout, f"{n} lines in {list(map(str, paths))}"
    )


def read_until(proc: subprocess.Popen, marker: str, timeout: float, lines: queue.Queue[str]) -> str:
    """The subprocess's stdout up to and including the line that starts with ``marker`` (fails after ``timeout``).
    Lines come from a thread (``select`` on a buffered text pipe misses lines already in the buffer) into ``lines``;
    an empty string follows the last one."""

    def pump() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    out = ""
    while not any(line.startswith(marker) for line in out.splitlines()):
        try:
            out += lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no {marker!r} in {timeout} s; stdout so far:\n{out}") from None
    return out
