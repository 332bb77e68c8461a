"""An evaluation run directory, read and written in one place.

Layout of ``<output_dir>/<eval_name>/`` (format version :data:`FORMAT_VERSION`)::

    args.json             every setting of the last run (never a key)
    run_card.json         what the numbers depend on (evaluation.run_card), with "format_version"
    summary_metrics.json  mean/std over trials and the run totals
    trial_<k>/            k = 0, 1, ...
        eval_records.jsonl  one EvalRecord per line, appended as samples finish (the last line of a key wins)
        eval_metrics.json   the trial's metrics, once it is complete
        done                written last: the trial is complete
        run_stamp.json      the run's fixed settings (the card's ``fixed_settings``), written when the trial opens

:class:`RunDir` is the only code that knows these names: the runner writes through it, and every reader —
resume, ``rejudge``, the viewer and report, ``gather_eval_results``, ``scripts/bench_eval.py`` — reads
through it, and counts the run's trials with :meth:`RunDir.trial_count` (``summary_metrics.json`` covers exactly
those; a run may add trials, never ask for fewer: :meth:`RunDir.held`). Reading never modifies the directory (a torn last line left by a killed run is skipped here;
the writer's :class:`~insight_o3.storage.record_log.RecordLog` truncates it when the run resumes).

``format_version`` is written into ``run_card.json``. A directory without it was written before versioning:
format 1, the same layout. Format 2 stores each reply once: the trajectory's copy of ``response`` is
a reference (:data:`~insight_o3.evaluation.schema.RESPONSE_REF`) that :class:`~.schema.EvalResult` resolves, so
this code reads both; a directory resumed by this code gets format-2 records appended to format-1 ones, which
read the same. A directory of a newer format is
refused with :class:`NewerFormatError` (naming the file, its version and what this code reads) instead of
being misread or overwritten.

Trials belong to their run: each trial a run opens is stamped (``run_stamp.json``, written atomically) with the
settings its directory's first run fixed, and :meth:`RunDir.check_trials` — run by a resume before it writes
anything, and by every reader of results (:meth:`RunDir.summary`, :func:`~insight_o3.analysis.run_records.read_run`)
— refuses a trial holding records whose stamp names other settings (a ``trial_<k>`` copied from a run with another
``--model``), naming the trial and each differing setting (:class:`ForeignTrial`, exit status 2). A card whose run
stamps its trials says so (:data:`STAMPED_KEY`); there, a trial holding records without a stamp is foreign too. A
directory written before stamps reads as before; the next resume stamps its trials and marks its card (upgrade).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

from ..base.json_types import JSONObject
from ..jobs.integrity import FIXED_KEY, differences, sha256_json
from ..storage.atomic import OutputError, refuse_link, write_json_atomic
from ..storage.record_log import has_lines, touch_atomic
from .schema import EvalRecord

#: The layout this code writes and the newest it reads. 2: a record's reply is stored once (``response``; the
#: trajectory's last assistant message refers to it, see :mod:`.schema`), and cut to ``--max_reply_chars``.
FORMAT_VERSION = 2
RECORDS_FILE = "eval_records.jsonl"
METRICS_FILE = "eval_metrics.json"
DONE_FILE = "done"
SUMMARY_FILE = "summary_metrics.json"
ARGS_FILE = "args.json"
RUN_CARD_FILE = "run_card.json"
STAMP_FILE = "run_stamp.json"
#: The run card's mark of a directory whose run stamps every trial it opens (absent: written before stamps).
STAMPED_KEY = "stamped_trials"
_TRIAL_DIR = re.compile(r"^trial_(\d+)$")

log = logging.getLogger(__name__)


class RunDirError(ValueError):
    """A run directory (or one of its files) that cannot be read; the message names the path."""


class NewerFormatError(RunDirError):
    """The directory was written by a newer version of this package."""


class ForeignTrial(RunDirError):
    """A trial holding records that another run wrote (its stamp names other fixed settings, or it has none in a
    directory whose run stamps its trials); the message names the trial and what differs."""


class ImageChanged(RunDirError):
    """A record made on an image whose file has changed since (its ``image_sha256``); the message names the records
    file, the sample and both sha256 values."""


class StaleSummary(RunDirError):
    """``summary_metrics.json`` covers another number of trials than the directory holds (a run extended or
    stopped since it was written): not the run's numbers until a run with all its trials rewrites it."""


def trial_index(name: str) -> int | None:
    """``k`` of a ``trial_<k>`` directory name (None for any other name)."""
    m = _TRIAL_DIR.match(name)
    return int(m.group(1)) if m else None


def read_json_object(path: str) -> JSONObject | None:
    """A JSON object file of a run (None when missing; :class:`RunDirError` naming it when unusable)."""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as e:
        raise RunDirError(f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except UnicodeDecodeError as e:
        raise RunDirError(f"{path}: not valid UTF-8 ({e.reason})") from None
    except OSError as e:
        raise RunDirError(f"{path}: cannot read ({e.strerror or e})") from None
    if not isinstance(obj, dict):
        raise RunDirError(f"{path}: expected a JSON object, got {type(obj).__name__}")
    return obj


class TrialDir:
    """One ``trial_<k>`` directory (any directory holding an ``eval_records.jsonl`` reads the same)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self.records_path = os.path.join(self.path, RECORDS_FILE)
        self.metrics_path = os.path.join(self.path, METRICS_FILE)
        self.done_path = os.path.join(self.path, DONE_FILE)
        self.stamp_path = os.path.join(self.path, STAMP_FILE)

    @property
    def index(self) -> int | None:
        return trial_index(os.path.basename(os.path.normpath(self.path)))

    def has_records(self) -> bool:
        return os.path.isfile(self.records_path)

    def is_done(self) -> bool:
        return os.path.exists(self.done_path)

    def is_held(self) -> bool:
        """Whether the trial holds results: a record line, or its ``done``."""
        return self.is_done() or has_lines(self.records_path)

    def stamp(self) -> JSONObject | None:
        """The fixed settings of the run that opened the trial (None: not stamped)."""
        obj = read_json_object(self.stamp_path)
        if obj is None:
            return None
        fixed = obj.get(FIXED_KEY)
        if not isinstance(fixed, dict):
            raise RunDirError(f"{self.stamp_path}: no '{FIXED_KEY}' object")
        return fixed

    def write_stamp(self, fixed: JSONObject) -> None:
        write_json_atomic(self.stamp_path, {"fixed_settings_sha256": sha256_json(fixed), FIXED_KEY: fixed})

    def metrics(self) -> JSONObject | None:
        return read_json_object(self.metrics_path)

    def record_lines(self) -> Iterator[tuple[int, JSONObject]]:
        """``(line number, object)`` of every record line, read only. A torn last line (a killed run) is
        skipped; any other malformed line is a :class:`RunDirError` naming file and line."""
        path = self.records_path
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
        except FileNotFoundError:
            raise RunDirError(f"{self.path}: no {RECORDS_FILE}") from None
        except UnicodeDecodeError as e:
            raise RunDirError(f"{path}: not valid UTF-8 ({e.reason})") from None
        for i, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                if i == len(lines):  # no newline after it: torn by an interrupted run
                    break
                raise RunDirError(f"{path}:{i}: malformed JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise RunDirError(f"{path}:{i}: expected a JSON object")
            yield i, obj

    def records(self, parse: Callable[[dict, str], Any] = EvalRecord.from_dict) -> dict[str, Any]:
        """The records by ``sample_key`` (the last of a key wins), each through ``parse(obj, "<file>:<line>")``."""
        out: dict[str, Any] = {}
        for i, obj in self.record_lines():
            rec = parse(obj, f"{self.records_path}:{i}")
            out[str(rec["sample_key"] if isinstance(rec, dict) else rec.sample_key)] = rec
        return out


class RunDir:
    """``RunDir(path)`` or ``RunDir.at(output_dir, eval_name)``; nothing is read or written until asked."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)

    @classmethod
    def at(cls, output_dir: str, eval_name: str) -> RunDir:
        return cls(os.path.join(output_dir, eval_name))

    def __repr__(self) -> str:
        return f"RunDir({self.path!r})"

    # ------------------------------------------------------------------------------------------ layout
    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def tool_images_dir(self) -> str:
        """Where an agent's tools write the images they make (PNG files named by their sha256)."""
        return self.file("tool_images")

    def retrieval_store_dir(self) -> str:
        """The run's record of every retrieval result (:mod:`insight_o3.tools.store`), what ``--retrieval replay``
        reads."""
        return self.file("retrieval")

    def trial(self, k: int) -> TrialDir:
        return TrialDir(os.path.join(self.path, f"trial_{k}"))

    def trial_dir(self, k: int) -> str:
        return self.trial(k).path

    def records_path(self, k: int) -> str:
        return self.trial(k).records_path

    def exists(self) -> bool:
        return os.path.isdir(self.path)

    def trials(self, with_records: bool = False) -> list[int]:
        """Indices of the ``trial_<k>`` directories, ascending (``with_records``: only those with records)."""
        if not self.exists():
            return []
        ks = [k for name in os.listdir(self.path) if (k := trial_index(name)) is not None]
        ks = [k for k in ks if os.path.isdir(self.trial_dir(k))]
        if with_records:
            ks = [k for k in ks if self.trial(k).has_records()]
        return sorted(ks)

    def trial_count(self) -> int:
        """How many trials the run holds: ``trial_0 .. trial_<n-1>``, ``n`` one more than the highest ``k`` whose
        records file holds a line or that is done (0: none). A trial directory that a run made but wrote no record
        into (one stopped at the endpoint check) is no trial. The runner and every reader — the summary, resume,
        ``gather_eval_results``, the report, ``compare``/``export`` (:func:`~.run_records.read_run`), ``rejudge`` —
        count trials with this; a reader that needs a trial below ``n`` that is missing names it."""
        ks = [k for k in self.trials() if self.trial(k).is_held()]
        return ks[-1] + 1 if ks else 0

    def wrote_records(self) -> bool:
        """Whether a run wrote a record here (the card store's ``wrote_records``: until one has, settings are not
        fixed)."""
        return self.trial_count() > 0

    def held(self) -> dict[str, int]:
        """What the directory holds (the card store's ``held``): its :meth:`trial_count`. A run asking for fewer
        trials is refused (:class:`~insight_o3.jobs.integrity.FewerThanHeld`): its summary would leave some out."""
        return {"num_trials": self.trial_count()}

    def is_done(self, k: int) -> bool:
        return self.trial(k).is_done()

    # ------------------------------------------------------------------------------------------ reading
    def args(self) -> JSONObject | None:
        return read_json_object(self.file(ARGS_FILE))

    def run_card(self) -> JSONObject | None:
        """``run_card.json``, or None when missing or unreadable (a card is informative, never required)."""
        try:
            return read_json_object(self.file(RUN_CARD_FILE))
        except RunDirError:
            return None

    def stored_run_card(self) -> JSONObject | None:
        """``run_card.json`` for a writer that must not overwrite it unread: None only when missing
        (:class:`RunDirError` naming it when unusable)."""
        return read_json_object(self.file(RUN_CARD_FILE))

    def summary(self) -> JSONObject | None:
        """``summary_metrics.json`` (None when missing). :class:`StaleSummary` when its ``num_trials`` is not the
        directory's :meth:`trial_count` (a run extended, or stopped, since it was written); a directory holding a
        summary and no trials (results copied without their records) is read as it is. :class:`ForeignTrial` when a
        trial is another run's (:meth:`check_trials`)."""
        self.check_trials()
        path = self.file(SUMMARY_FILE)
        summary = read_json_object(path)
        n = summary.get("num_trials") if summary is not None else None
        held = self.trial_count() if isinstance(n, int) else 0
        if held and n != held:
            raise StaleSummary(
                f"{path} covers {n} trial(s); the directory holds {held} (trial_0 .. trial_{held - 1}): a run "
                f"extended or stopped since. Resume it with num_trials {held} to rewrite the summary"
            )
        return summary

    def trial_metrics(self, k: int) -> JSONObject | None:
        return self.trial(k).metrics()

    def records(self, k: int, parse: Callable[[dict, str], Any] = EvalRecord.from_dict) -> dict[str, Any]:
        """Trial ``k``'s records by ``sample_key`` (see :meth:`TrialDir.records`)."""
        return self.trial(k).records(parse)

    def check_trials(self) -> None:
        """Raise :class:`ForeignTrial` for a trial holding records that another run wrote: its stamp names other
        fixed settings than the card's, or it has no stamp and the card says its run stamps every trial. A
        directory without fixed settings, or written before stamps (no :data:`STAMPED_KEY`), has its unstamped
        trials read as they are."""
        card = self.run_card() or {}
        fixed = card.get(FIXED_KEY)
        if not isinstance(fixed, dict):
            return
        for k in self.trials():
            t = self.trial(k)
            if not t.is_held():
                continue
            stamp = t.stamp()
            if stamp is None:
                if card.get(STAMPED_KEY) is True:
                    raise ForeignTrial(
                        f"{t.path}: holds records but no {STAMP_FILE}, and this run stamps every trial it opens: "
                        f"it was copied in from another run (or from one written before trial stamps). Move it out "
                        f"of {self.path}; a run adds the trial again"
                    )
                continue
            diffs = differences(stamp, fixed, names=("this trial", "the run"))
            if diffs:
                lines = "\n  ".join(diffs)
                raise ForeignTrial(
                    f"{t.path}: written by another run (its {STAMP_FILE} differs from {self.file(RUN_CARD_FILE)} "
                    f"on {len(diffs)} setting(s) that can change a result):\n  {lines}\nmove it out of {self.path} "
                    f"(a run adds the trial again), or put it back in the run directory it came from"
                )

    def stamp_trials(self, ks: list[int]) -> None:
        """Stamp trials ``ks`` with the card's fixed settings where they have no stamp or hold nothing (a trial
        holding records with another stamp is refused before, by :meth:`check_trials`); then mark the card
        (:data:`STAMPED_KEY`). Unstamped trials holding records are those of a directory written before stamps:
        stamping them is its upgrade, logged."""
        card = self.stored_run_card()
        fixed = (card or {}).get(FIXED_KEY)
        if card is None or not isinstance(fixed, dict):
            return
        for k in ks:
            t = self.trial(k)
            if not os.path.isdir(t.path):
                continue
            stamp = t.stamp()
            if stamp == fixed:
                continue
            if stamp is None and t.is_held():
                log.info("%s: written before trial stamps; stamped with this run's fixed settings", t.path)
            t.write_stamp(fixed)
        if card.get(STAMPED_KEY) is not True:
            self.write_run_card({**card, STAMPED_KEY: True})

    # ----------------------------------------- the card store of jobs.card_store.CardStore (and wrote_records, held above)
    def card_path(self) -> str:
        return self.file(RUN_CARD_FILE)

    def check(self) -> None:
        """A directory this code can read (:meth:`check_format`) whose trials are its own run's
        (:meth:`check_trials`): a trial another run wrote is refused before anything is written."""
        self.check_format().check_trials()

    def read_card(self) -> JSONObject | None:
        """The stored ``run_card.json`` of a directory this code can read (see :meth:`check_format`)."""
        return self.check_format().stored_run_card()

    def write_card(self, card: dict) -> None:
        self.write_run_card(card)

    def format_version(self) -> int:
        """The directory's format (1 when its card does not say: written before versioning)."""
        v = (self.run_card() or {}).get("format_version", 1)
        return v if isinstance(v, int) and not isinstance(v, bool) else 1

    def check_format(self) -> RunDir:
        """Raise :class:`NewerFormatError` for a directory this code cannot read; return self."""
        v = self.format_version()
        if v > FORMAT_VERSION:
            raise NewerFormatError(
                f"{self.file(RUN_CARD_FILE)}: format_version {v} was written by a newer insight_o3; this one "
                f"reads up to {FORMAT_VERSION}. Upgrade insight_o3 (pip install -U insight-o3) to read or resume it"
            )
        return self

    # ------------------------------------------------------------------------------------------ writing
    def write_args(self, args: dict) -> None:
        write_json_atomic(self.file(ARGS_FILE), args)

    def write_run_card(self, card: dict) -> None:
        """``run_card.json`` with this code's ``format_version`` first."""
        rest = {k: v for k, v in card.items() if k != "format_version"}  # a card carried over from another run
        write_json_atomic(self.file(RUN_CARD_FILE), {"format_version": FORMAT_VERSION, **rest})

    def reopen_trial(self, k: int) -> None:
        """Trial ``k`` ready to take records: its directory made, a ``done`` of an earlier run removed
        (``--retry_failed`` reopens a trial). Its records are appended through a
        :class:`~insight_o3.storage.record_log.RecordLog` on :meth:`records_path`."""
        t = self.trial(k)
        d = t.path
        refuse_link(d)  # a linked trial directory (a copied run) would take this run's writes elsewhere
        try:
            os.makedirs(d, exist_ok=True)
            if os.path.exists(t.done_path):
                os.remove(t.done_path)
        except OSError as e:
            raise OutputError.from_os_error(e.filename or d, e, "prepare") from None

    def finish_trial(self, k: int, metrics: dict) -> None:
        """Write trial ``k``'s metrics, then its ``done`` marker (in that order: ``done`` means complete)."""
        write_json_atomic(self.trial(k).metrics_path, metrics)
        touch_atomic(self.trial(k).done_path)

    def write_summary(self, summary: dict) -> None:
        write_json_atomic(self.file(SUMMARY_FILE), summary)
