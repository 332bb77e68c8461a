"""The run-integrity kind of every setting, as recorded before the kinds moved from
``insight_o3.jobs.integrity.SETTING_KINDS`` onto the settings' declarations (issue 39 item 3): moving them must
change no setting's kind. ``setting_kinds_golden.json`` holds ``{command: {[subcommand ]dest: kind}}`` for every
flag of every command that writes a run directory, and ``library`` the settings no such flag declares (those
built by the library's settings records: evaluate's subset, the DPO rounds' stage settings, ...)."""

from __future__ import annotations

import json
from pathlib import Path

from insight_o3.jobs.integrity import kind_of
from tests.jobs.test_integrity import _dests
from tests.support.commands import run_commands

GOLDEN = Path(__file__).with_name("setting_kinds_golden.json")


def classification() -> dict[str, dict[str, str]]:
    commands = {
        cmd: {f"{sub}{a.dest}": kind_of(a.dest).value for sub, a in _dests(p)} for cmd, p in run_commands().items()
    }
    return dict(sorted(commands.items()))


def test_every_flag_keeps_its_recorded_kind():
    golden = json.loads(GOLDEN.read_text())
    assert classification() == golden["commands"]


def test_every_library_setting_keeps_its_recorded_kind():
    golden = json.loads(GOLDEN.read_text())
    assert {name: kind_of(name).value for name in golden["library"]} == golden["library"]
