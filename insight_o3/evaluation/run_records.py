"""The records of a finished evaluation run, for the analyses (compare, export, judge agreement).

:func:`read_run` is the one place the analysis commands read a run directory
(``<eval_dir>/trial_<k>/eval_records.jsonl`` and ``run_card.json``); it reads through the runner's own
:class:`~insight_o3.storage.record_log.RecordLog` with the :class:`~.schema.EvalRecord` schema, so a
malformed record is an error naming its file, line and field.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..storage.record_log import RecordFileError, RecordLog
from .run_card import card_sha256, load_run_card
from .runner import DONE_FILE, RECORDS_FILE
from .schema import EvalRecord

_TRIAL = re.compile(r"trial_(\d+)")


class RunReadError(RecordFileError):
    """An eval directory that cannot be analysed; the message names the path."""


@dataclass
class RunRecords:
    """A run's records per trial (each in the annotation file's order) and its run card."""

    path: str
    name: str
    trials: list[list[EvalRecord]]
    card: dict | None

    @property
    def card_sha256(self) -> str | None:
        return card_sha256(self.card) if self.card is not None else None

    @property
    def keys(self) -> list[str]:
        return [r.sample_key for r in self.trials[0]] if self.trials else []

    def records(self) -> list[EvalRecord]:
        return [r for t in self.trials for r in t]


def _name(eval_dir: str, card: dict | None) -> str:
    settings = (card or {}).get("settings") or {}
    name = settings.get("eval_name")
    return str(name) if name else os.path.basename(os.path.normpath(eval_dir))


def read_run(eval_dir: str | os.PathLike, require_done: bool = True) -> RunRecords:
    """Read ``eval_dir`` (``<output_dir>/<eval_name>``). ``require_done``: every trial must be
    finished (its ``done`` file), as a paired analysis of a half-written trial would be wrong."""
    eval_dir = str(eval_dir)
    if not os.path.isdir(eval_dir):
        raise RunReadError(f"{eval_dir}: no such eval directory")
    found = sorted(int(m.group(1)) for d in os.listdir(eval_dir) if (m := _TRIAL.fullmatch(d)))
    if not found or found != list(range(len(found))):
        raise RunReadError(f"{eval_dir}: no trial_0 .. trial_<k> directories (is this an eval dir?)")
    trials = []
    for k in found:
        tdir = os.path.join(eval_dir, f"trial_{k}")
        if require_done and not os.path.exists(os.path.join(tdir, DONE_FILE)):
            raise RunReadError(f"{tdir}: trial not finished (no '{DONE_FILE}'); finish or resume the evaluation first")
        path = os.path.join(tdir, RECORDS_FILE)
        if not os.path.isfile(path):
            raise RunReadError(f"{tdir}: no {RECORDS_FILE}")
        log = RecordLog.open(path, parse=EvalRecord.from_dict)
        log.close()
        trials.append(sorted(log.records.values(), key=lambda r: (r.index is None, r.index or 0)))
    card = load_run_card(eval_dir)
    return RunRecords(eval_dir, _name(eval_dir, card), trials, card)
