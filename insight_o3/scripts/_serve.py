"""Keep scripted endpoints up for one's own commands until Ctrl-C or SIGTERM (``demo --serve``,
``build_o3_bench_demo --serve``).

The command's :func:`~insight_o3.scripts._shared.entry_point` passes SIGTERM to the SIGINT handler, so both end the
wait here the same way: the servers stop (:meth:`ScriptedOpenAIServer.stop` returns at once) and the command exits 0,
since a stop is how serving ends.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Sequence

from ..endpoints.scripted_server import ScriptedOpenAIServer
from ._shared import ExitCode


def keep_serving(servers: Sequence[ScriptedOpenAIServer], say: Callable[[list[str]], str], what: str) -> int:
    """Start ``servers``, print ``say(their base URLs)``, wait for Ctrl-C/SIGTERM, stop them; status 0."""
    try:
        for s in servers:
            s.start()
        print(say([s.base_url for s in servers]), flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print(f"stopped serving {what}", flush=True)
    finally:
        for s in servers:
            s.stop()
    return ExitCode.OK


def python_command() -> str:
    """How to call this interpreter in a pasted command: ``python`` when that is it (an activated venv)."""
    on_path = shutil.which("python")
    if on_path and os.path.realpath(on_path) == os.path.realpath(sys.executable):
        return "python"
    return shlex.quote(sys.executable)
