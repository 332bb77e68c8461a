"""Where a run directory keeps its card — the settings its first run fixed and the history of its runs
(:mod:`insight_o3.jobs.integrity`) — and what it holds: :class:`CardStore`, and :class:`CardFile`, a card in a JSON
file of its own (an evaluation's :class:`~insight_o3.evaluation.run_dir.RunDir` is another store)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from ..base.json_types import JSONObject
from ..storage.atomic import write_json_atomic
from ..storage.record_log import has_lines
from .integrity import read_card


class CardStore(Protocol):
    """Where a run keeps its card and what its directory holds (:class:`CardFile` is the default; an evaluation's
    :class:`~insight_o3.evaluation.run_dir.RunDir` is another: its ``run_card.json``, format-checked; its trials)."""

    def card_path(self) -> str: ...

    def check(self) -> None:
        """Raise for a directory this run must not write into (what it holds is another run's); called once, before
        the card is read and anything is written."""
        ...

    def read_card(self) -> JSONObject | None:
        """The stored card (None: the directory's first run)."""
        ...

    def write_card(self, card: dict) -> None: ...

    def held(self) -> dict[str, int]:
        """What the directory already holds of each :data:`~insight_o3.jobs.integrity.Kind.EXTENT` setting
        (a run asking for less is refused), e.g. ``{"num_trials": 3}``."""
        ...

    def wrote_records(self) -> bool:
        """Whether an earlier run wrote a record (until one has, the next run's settings are the fixed ones)."""
        ...


class CardFile:
    """A card in a JSON file of its own (its directory made on the first write), beside the record logs at
    ``logs``. ``fixes``: which records fix the directory's settings (default: any; a builder step's: a succeeded
    one, so a run whose every item failed — a wrong model name — leaves the next run free to change them)."""

    def __init__(self, path: str, logs: Iterable[str] = (), fixes: Callable[[Any], bool] | None = None):
        self.path = path
        self.logs = list(logs)
        self.fixes = fixes

    @classmethod
    def under(
        cls, directory: str, card: str, logs: Iterable[str], fixes: Callable[[Any], bool] | None = None
    ) -> CardFile:
        """The card file ``card`` of ``directory`` beside its record logs ``logs`` (names relative to it)."""
        return cls(os.path.join(directory, card), [os.path.join(directory, f) for f in logs], fixes)

    def card_path(self) -> str:
        return self.path

    def check(self) -> None:
        """Nothing to check: the card's settings check (:func:`~insight_o3.jobs.integrity.settle`) is all."""

    def read_card(self) -> JSONObject | None:
        return read_card(self.path)

    def write_card(self, card: dict) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)  # a card in a subdirectory (build_o3_bench)
        write_json_atomic(self.path, card)

    def held(self) -> dict[str, int]:
        return {}

    def wrote_records(self) -> bool:
        if self.fixes is None:
            return any(has_lines(f) for f in self.logs)
        return any(self.fixes(rec) for f in self.logs for rec in _stored_records(f))


def _stored_records(path: str) -> Iterator[Any]:
    """The whole JSON lines of a record log (a torn or unreadable line skipped: it fixes nothing)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    yield json.loads(line)
                except ValueError:
                    continue
    except OSError:
        return
