"""Every setting keeps the run-integrity kind it had when the kinds were one table keyed by flag name: the kinds now
declared on the flags (``insight_o3.scripts._shared.setting``) and on the settings records' fields
(``insight_o3.base.setting_kinds.kind_field``) are compared with a golden recorded from that table.
``setting_kinds_golden.json`` holds ``{command: {[subcommand ]dest: kind}}`` for every flag of every command that
writes a run directory, and ``library`` the settings no such flag declares (those the library's settings records
and invocation builders make: evaluate's subset, the DPO rounds' stage settings, ...).

Three names the table classified are no setting of any invocation and are not in the golden: ``max_pixels`` and
``prompt`` (hidden aliases of ``--vsearcher_max_pixels``/``--vsearcher_prompt``, whose dest is the new name) and
``separate_attempt_requests`` (the hidden alias of ``--separate_trial_requests``)."""

from __future__ import annotations

import json
from pathlib import Path

from insight_o3.base.setting_kinds import Kind, field_kinds
from insight_o3.data.collage_config import CollageConfig
from insight_o3.data.collage_jobs import RUN_KINDS, CollageSpec
from insight_o3.endpoints.endpoint import Endpoint
from insight_o3.jobs.controls import RunControls
from insight_o3.reasoning_data import engine
from insight_o3.reasoning_data.settings import (
    CheckSettings,
    ExportSettings,
    GenerateSettings,
    ModelAccess,
    ScoreSettings,
)
from insight_o3.scripts._shared import declared_kind
from insight_o3.scripts.evaluate import RECORDED_KINDS
from tests.support.commands import flag_actions, run_commands

GOLDEN = Path(__file__).with_name("setting_kinds_golden.json")


def flag_classification() -> dict[str, dict[str, str | None]]:
    """Each run-directory command's flags by dest, of the kind their declarations give them (None: none)."""
    commands = {
        cmd: {f"{sub}{a.dest}": (k.value if (k := declared_kind(a)) else None) for sub, a in flag_actions(p)}
        for cmd, p in run_commands().items()
    }
    return dict(sorted(commands.items()))


def library_declarations() -> list[tuple[str, Kind]]:
    """Every (setting, kind) a settings record or a builder of an invocation declares besides the flags."""
    from training.dpo.rounds import RoundsConfig

    sources: list[dict[str, Kind]] = [
        RECORDED_KINDS,
        field_kinds(CollageSpec),
        field_kinds(CollageConfig),
        RUN_KINDS,
        field_kinds(RunControls),
        field_kinds(Endpoint),
        ModelAccess.kinds(),
        ModelAccess.kinds("judge_"),
        ModelAccess.kinds("scorer_"),
        engine.INPUT_KINDS,
        *(field_kinds(s) for s in (GenerateSettings, CheckSettings, ScoreSettings, ExportSettings)),
        RoundsConfig.kinds(),
    ]
    return [item for kinds in sources for item in kinds.items()]


def test_every_flag_keeps_its_recorded_kind():
    golden = json.loads(GOLDEN.read_text())
    assert flag_classification() == golden["commands"]


def test_every_library_setting_keeps_its_recorded_kind():
    golden = json.loads(GOLDEN.read_text())
    declared = library_declarations()
    assert {name: kind.value for name, kind in declared if name in golden["library"]} == golden["library"]
    known = {name: kind for cmd in golden["commands"].values() for name, kind in cmd.items()}
    known = {name.rsplit(" ", 1)[-1]: kind for name, kind in known.items()} | golden["library"]
    changed = sorted({f"{n}: {known[n]} -> {k.value}" for n, k in declared if n in known and known[n] != k.value})
    assert changed == []
