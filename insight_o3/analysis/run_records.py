"""The records of a finished evaluation run, for the analyses (compare, export, judge agreement).

:func:`read_run` reads through :class:`~.run_dir.RunDir` (the one reader of a run directory: format
check, records through the :class:`~.schema.EvalRecord` schema, errors naming file, line and field)
and gives the records of every trial (:meth:`~.run_dir.RunDir.trial_count`: what the summary covers) in the
annotation file's order, with the run card.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..evaluation.run_card import card_sha256
from ..evaluation.run_dir import DONE_FILE, RECORDS_FILE, RunDir, RunDirError
from ..evaluation.schema import EvalRecord


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


def run_name(path: str, card: dict | None) -> str:
    """A run's name: its ``eval_name`` (from the card's settings), else its directory's name."""
    name = ((card or {}).get("settings") or {}).get("eval_name")
    return str(name) if name else os.path.basename(os.path.normpath(path))


def read_run(eval_dir: str | os.PathLike, require_done: bool = True) -> RunRecords:
    """Read ``eval_dir`` (``<output_dir>/<eval_name>``). ``require_done``: every trial must be
    finished (its ``done`` file), since a paired analysis of a half-written trial would be wrong.
    Raises :class:`~.run_dir.RunDirError` naming the path."""
    rd = RunDir(eval_dir)
    if not rd.exists():
        raise RunDirError(f"{rd.path}: no such eval directory")
    rd.check_format().check_trials()
    n = rd.trial_count()
    if not n:
        started = rd.trials(with_records=True)
        if started:  # a run stopped before its first record
            raise RunDirError(f"{rd.trial_dir(started[0])}: trial not finished (no record yet); resume it first")
        raise RunDirError(f"{rd.path}: no trial_0 .. trial_<k> with records (is this an eval dir?)")
    trials = []
    for k in range(n):
        if not rd.trial(k).has_records():
            raise RunDirError(f"{rd.trial_dir(k)}: no {RECORDS_FILE}, but the run holds {n} trials")
        if require_done and not rd.is_done(k):
            raise RunDirError(
                f"{rd.trial_dir(k)}: trial not finished (no '{DONE_FILE}'); finish or resume the evaluation first"
            )
        recs = rd.records(k)
        trials.append(sorted(recs.values(), key=lambda r: (r.index is None, r.index or 0)))
    card = rd.run_card()
    return RunRecords(rd.path, run_name(rd.path, card), trials, card)
