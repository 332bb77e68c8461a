"""Run integrity: a directory's settings are fixed by its first run.

Every command that writes a run directory (:func:`~insight_o3.jobs.run_directory.open_run`) describes each
invocation as an :class:`Invocation`: its command, every setting (the parsed flags, keys left out) and the
values derived from its inputs that can change a result (the benchmark file's sha256, the prompts' sha256,
...). Each setting declares its kind where it is declared — a command's flag (``insight_o3.scripts._shared.setting``)
or a settings record's field (:func:`~insight_o3.base.setting_kinds.kind_field`) — and the invocation carries the
kinds of its settings:

* ``RESULT`` — can change a result (model, judge, prompts, image budget, sampling settings, seeds, ...):
  fixed by the directory's first run that writes a record (a run stopped before its first record, e.g. by the
  endpoint check, fixes nothing). A later run (resume, rerun, rejudge into it) that differs on one is
  refused with :class:`SettingsChanged` (exit status 2), naming each differing key with both values, and
  nothing is written;
* ``OPERATIONAL`` — cannot change a result (concurrency, rate limits, budgets, retries, timeouts, workers,
  progress, and paths: the directory, the inputs' locations, the endpoints' URLs — what the inputs *hold*
  is fixed through derived values such as ``benchmark_sha256``): may change between runs; each run's values
  are appended to the card's ``history``;
* ``EXTENT`` — how much of the work a directory holds (``num_trials``): a later run may raise it (an extension:
  trial_<k> directories are added, each run's value is appended to the ``history``) but not ask for less than the
  directory already holds — refused with :class:`FewerThanHeld` (exit status 2, naming both values, nothing
  written), since the run's summary covers all of it. What a directory holds comes from its store
  (``held``: :meth:`insight_o3.evaluation.run_dir.RunDir.held` counts the trials with a record);
* ``SECRET`` — API keys: never written, never compared.

:func:`settle` is the one check: it takes the stored card (None for a first run), the card a first run
would write and the invocation, and returns the card to write — the new one with ``fixed_settings`` and a
one-entry ``history``, or the stored one with this invocation appended to its ``history`` — or raises
:class:`SettingsChanged`. A card written before this check (no ``fixed_settings``) is not compared: a
warning says so, and its history grows.

A result-changing setting added after directories were written is missing from their cards: :data:`ADDED_LATER`
gives the value such a card implies (the one its run actually used), so a resume with it goes on and one with
another value is refused naming it; a card is never rewritten for it.

A setting that declares no kind is a programming error (:class:`UnclassifiedSetting`);
``tests/jobs/test_integrity.py`` walks every flag of every command that writes a run directory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..base.json_types import JSONObject
from ..base.setting_kinds import Kind

log = logging.getLogger(__name__)

FIXED_KEY = "fixed_settings"
HISTORY_KEY = "history"


#: "No value implied": the setting is compared as missing (and so refused) — see :data:`ADDED_LATER`.
NOT_IMPLIED: Any = object()


def _agent_before_plugins(old: Mapping[str, Any], now: Any) -> Any:
    """``evaluate --agent``: before it (commit 54b93a2), ``--vsearcher_model`` chose the mode; the two
    modes are the registry's built-in agents ``insight_o3`` and ``single_model``
    (:data:`insight_o3.evaluation.agent_registry.BUILTIN`)."""
    if old.get("command") != "evaluate":
        return NOT_IMPLIED
    return "insight_o3" if old.get("vsearcher_model") else "single_model"


def _no_summary_agent_before_insight_v(old: Mapping[str, Any], now: Any) -> Any:
    """``evaluate --summary_model`` (Insight-V's summary agent): runs written before it had no summary
    agent (None)."""
    return None if old.get("command") == "evaluate" else NOT_IMPLIED


def _prompt_added_later(old: Mapping[str, Any], now: Any) -> Any:
    """A prompt constant added to :mod:`insight_o3.protocol.prompts` after a run was not one it could use (a changed
    or removed one is still a difference)."""
    return now


#: Result-changing values added after run directories were written, by dotted path into the fixed settings
#: (``name.*``: each entry of a map), with ``implied(old_fixed, this_run_value)``: the value a card that lacks it
#: implies — the one its run actually used (:data:`NOT_IMPLIED`: none). Add an entry with every new result-changing
#: setting whose value older directories ran with, or resuming them is refused on it.
ADDED_LATER: dict[str, Callable[[Mapping[str, Any], Any], Any]] = {
    # evaluate's tool flags: a run before them had no tools, i.e. these defaults
    "tool_set": lambda old, now: "release",
    "retrieval": lambda old, now: "local",
    "layout_backend": lambda old, now: "tesseract",
    "agent": _agent_before_plugins,
    "summary_model": _no_summary_agent_before_insight_v,
    "prompts_sha256.*": _prompt_added_later,
}


def with_implied(first: Mapping[str, Any], now: Mapping[str, Any]) -> JSONObject:
    """A copy of the stored fixed settings ``first`` with the value it implies (:data:`ADDED_LATER`) for each
    setting it lacks and this run's ``now`` has."""
    out = _plain(dict(first))
    for path, implied in ADDED_LATER.items():
        *parents, leaf = path.split(".")
        old_node: Any = out
        new_node: Any = now
        for p in parents:
            old_node = old_node.get(p) if isinstance(old_node, dict) else None
            new_node = new_node.get(p) if isinstance(new_node, Mapping) else None
        if not isinstance(old_node, dict) or not isinstance(new_node, Mapping):
            continue
        for k in list(new_node) if leaf == "*" else [leaf] if leaf in new_node else []:
            if k not in old_node and (value := implied(first, new_node[k])) is not NOT_IMPLIED:
                name = ".".join([*parents, str(k)])
                log.info("%s: not in the first run's card (it predates it); compared as %s", name, _show(value))
                old_node[k] = value
    return out


class CardError(ValueError):
    """A stored card that cannot be read (exit status 2); the message names the file."""


class UnclassifiedSetting(KeyError):
    """A setting of an :class:`Invocation` that declares no kind (a new flag or field nobody classified)."""


class SettingsChanged(ValueError):
    """A run into a directory whose first run fixed other settings (exit status 2); nothing was written."""

    def __init__(self, where: str, differences: list[str], hint: str):
        self.where, self.differences = where, differences
        lines = "\n  ".join(differences)
        super().__init__(
            f"{where}: this directory's settings were fixed by its first run; this run differs on "
            f"{len(differences)} setting(s) that can change a result (nothing was written):\n  {lines}\n"
            f"{hint}; settings that cannot change a result (concurrency, rate limits, budgets, retries, "
            f"workers, progress, paths) may change"
        )


class FewerThanHeld(SettingsChanged):
    """A run asking for less than its directory already holds (a :data:`Kind.EXTENT` setting, e.g. fewer trials than
    the directory's; exit status 2): its summary would leave out what is there. Nothing was written."""

    def __init__(self, where: str, differences: list[str], hint: str):
        self.where, self.differences = where, differences
        lines = "\n  ".join(differences)
        ValueError.__init__(
            self,
            f"{where}: this run asks for less than the directory holds (nothing was written):\n  {lines}\n"
            f"a rerun may extend a directory (more trials), never leave out what it holds; rerun with at least "
            f"what it holds, or {hint.removeprefix('use ')}",
        )


def _plain(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples become lists, keys strings), so stored and new compare equal."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def sha256_file(path: str, chunk: int = 1 << 20) -> str | None:
    """The file's sha256 (None when it cannot be read)."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while block := f.read(chunk):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


def read_card(path: str) -> JSONObject | None:
    """A stored card (None when there is none; :class:`CardError` naming the file when it cannot be used)."""
    try:
        with open(path, encoding="utf-8") as f:
            card = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CardError(f"{path}: cannot read the run's settings card ({e})") from None
    if not isinstance(card, dict):
        raise CardError(f"{path}: expected a JSON object")
    return card


def git_commit() -> str | None:
    """The commit of the checkout the package runs from (None for an installed wheel)."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(
            ["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def sha256_path(path: str) -> str | None:
    """A file's sha256, or of a directory the sha256 of every file's name and sha256 (None when unreadable)."""
    if not os.path.isdir(path):
        return sha256_file(path)
    files = {
        os.path.relpath(os.path.join(root, name), path): sha256_file(os.path.join(root, name))
        for root, _, names in os.walk(path)
        for name in names
    }
    return sha256_json(files)


def sha256_json(value: Any) -> str:
    """sha256 of a value's canonical JSON (sorted keys): what a list of input items held."""
    return hashlib.sha256(json.dumps(_plain(value), sort_keys=True).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Invocation:
    """One run of a command: ``settings`` (every flag by name; secrets are dropped), ``derived`` (result-changing
    values computed from the inputs, compared as they are), ``provenance`` (the code that ran: recorded in the
    history, never compared) and ``kinds``: the kind each setting declares (its flag's or its field's; more names
    may be given than are set). A setting without one is refused (:class:`UnclassifiedSetting`)."""

    command: str
    settings: Mapping[str, Any]
    derived: Mapping[str, Any] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)
    kinds: Mapping[str, Kind] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unclassified = sorted(name for name in self.settings if name not in self.kinds)
        if unclassified:
            raise UnclassifiedSetting(
                f"{self.command}: setting(s) {', '.join(map(repr, unclassified))} declare no run-integrity kind "
                f"(declare it on the flag, insight_o3.scripts._shared.setting, or on the field, "
                f"insight_o3.base.setting_kinds.kind_field: result-changing or operational?)"
            )

    def _of(self, kind: Kind) -> JSONObject:
        return {k: v for k, v in self.settings.items() if self.kinds[k] is kind}

    def fixed(self) -> JSONObject:
        """What the directory's first run fixes: the command, every result-changing setting, the derived values."""
        return _plain({"command": self.command, **self._of(Kind.RESULT), **self.derived})

    def operational(self) -> JSONObject:
        """What may change between runs, recorded in each run's history entry (:data:`Kind.EXTENT` included)."""
        return _plain({**self._of(Kind.OPERATIONAL), **self._of(Kind.EXTENT)})

    def fewer_than(self, held: Mapping[str, int]) -> list[str]:
        """One line per :data:`Kind.EXTENT` setting asking for less than the directory ``held``."""
        return [
            f"{k}: the directory holds {held[k]}, this run {v}"
            for k, v in self._of(Kind.EXTENT).items()
            if k in held and isinstance(v, int) and v < held[k]
        ]

    def history_entry(self) -> JSONObject:
        return {
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": self.command,
            **_plain(dict(self.provenance)),
            "settings": self.operational(),
        }


def _show(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 200 else text[:197] + "..."


_MISSING = object()


def differences(
    first: Any, now: Any, prefix: str = "", names: tuple[str, str] = ("first run", "this run")
) -> list[str]:
    """One line per leaf on which two fixed-settings objects differ: ``key: first run X, this run Y`` (``names``:
    what the two are called)."""
    if isinstance(first, dict) and isinstance(now, dict):
        out = []
        for k in sorted(set(first) | set(now), key=str):
            out += differences(first.get(k, _MISSING), now.get(k, _MISSING), f"{prefix}{k}.", names)
        return out
    if first == now:
        return []
    shown = [("(not set)" if v is _MISSING else _show(v)) for v in (first, now)]
    return [f"{prefix.rstrip('.')}: {names[0]} {shown[0]}, {names[1]} {shown[1]}"]


def settle(
    stored: dict | None,
    card: Mapping[str, Any],
    invocation: Invocation,
    *,
    where: str,
    hint: str = "use another output directory to run with other settings",
    records_written: bool = True,
    held: Mapping[str, int] | None = None,
) -> JSONObject:
    """The card to write for this invocation: ``card`` with ``fixed_settings`` and a one-entry ``history`` when
    nothing is stored; else the stored card with this invocation appended to its ``history``. Raises
    :class:`SettingsChanged` (naming ``where`` and each differing key) when the stored fixed settings differ, and
    :class:`FewerThanHeld` when it asks for less than the directory ``held`` (its :data:`Kind.EXTENT` settings).

    Settings are fixed by the first run that writes a record: while ``records_written`` is False (every earlier
    run stopped before its first record, e.g. at the endpoint check), this run's settings replace the stored
    ones (the history keeps the earlier runs)."""
    fewer = invocation.fewer_than(held or {})
    if fewer:
        raise FewerThanHeld(where, fewer, hint)
    entry = invocation.history_entry()
    if stored is None:
        return {**card, FIXED_KEY: invocation.fixed(), HISTORY_KEY: [entry]}
    history = list(stored.get(HISTORY_KEY) or [])
    if not records_written:
        return {**stored, **card, FIXED_KEY: invocation.fixed(), HISTORY_KEY: [*history, entry]}
    first = stored.get(FIXED_KEY)
    if not isinstance(first, dict):
        log.warning(
            "%s was written before settings were fixed per directory: this run's settings are not compared with "
            "its first run's",
            where,
        )
    else:
        now = invocation.fixed()
        diffs = differences(with_implied(first, now), now)
        if diffs:
            raise SettingsChanged(where, diffs, hint)
    return {**stored, HISTORY_KEY: [*history, entry]}
