"""Run integrity: a directory's settings are fixed by its first run.

Every command that writes a run directory (:func:`~insight_o3.jobs.run_directory.open_run`) describes each
invocation as an :class:`Invocation`: its command, every setting (the parsed flags, keys left out) and the
values derived from its inputs that can change a result (the benchmark file's sha256, the prompts' sha256,
...). :data:`SETTING_KINDS` classifies every setting of every such command:

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

A setting missing from :data:`SETTING_KINDS` is a programming error (:class:`UnclassifiedSetting`);
``tests/jobs/test_integrity.py`` walks every flag of every command that writes a run directory.
"""

from __future__ import annotations

import enum
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

log = logging.getLogger(__name__)

FIXED_KEY = "fixed_settings"
HISTORY_KEY = "history"


class Kind(enum.Enum):
    RESULT = "result"
    OPERATIONAL = "operational"
    EXTENT = "extent"
    SECRET = "secret"


R, O, E, S = Kind.RESULT, Kind.OPERATIONAL, Kind.EXTENT, Kind.SECRET

#: Every setting of every command that writes a run directory, by its name (the flag's ``dest``; one name
#: means one thing in every command). Add a new flag here with its kind.
SETTING_KINDS: dict[str, Kind] = {
    # --- keys: never written, never compared
    "api_key": S,
    "judge_api_key": S,
    "vsearcher_api_key": S,
    "summary_api_key": S,
    "scorer_api_key": S,  # build_reasoning_data score
    # --- models and endpoints (the URL is where a model is served, not what it is)
    "model": R,
    "judge_model": R,
    "vsearcher_model": R,
    "summary_model": R,  # evaluate --agent insight_v's summary agent
    "agent": R,  # evaluate --agent (insight_o3.evaluation.agent_registry)
    # evaluate's tool-layer agents (opensearch_vl): which tools, which retrieval, which OCR change what the model
    # reads; where the corpus, the replayed store and the model file are is a path (what they hold: the run card)
    "tool_set": R,
    "retrieval": R,
    "layout_backend": R,
    "corpus": O,
    "retrieval_replay_from": O,
    "layout_api_url": O,
    "sr_model_path": O,
    "tool_seconds": O,
    "solver": R,  # build_o3_bench filter's solver model
    "checker": O,  # check_reliability's "model,url,ENV" specs: the models are fixed through checker_models
    "api_base_url": O,
    "judge_api_base_url": O,
    "vsearcher_api_base_url": O,
    "scorer_model": R,  # build_reasoning_data score: the tier-2 MLLM
    "scorer_api_base_url": O,
    "summary_api_base_url": O,
    "judge_api_key_env": O,  # the name of a variable holding a key
    "skip_endpoint_check": O,
    "allow_key_to_other_host": O,
    # --- what is asked and how it is judged
    "sys_prompt": R,
    "chat_completion_kwargs": R,
    "image_url_extra_settings": R,
    "img_max_pixels": R,
    "max_pixels": R,
    "judge_flow": R,
    "max_answer_length": R,
    "judge_cache": R,
    "no_judge_cache": R,
    "vsearcher_max_pixels": R,
    "vsearcher_prompt": R,
    "max_vsearch_calls": R,
    "vsearcher_chat_completion_kwargs": R,
    "reasoner_prompt": R,
    "oracle_crops": R,
    "prompt": R,
    "max_tool_calls": R,
    "attempts": R,
    "drop_when": R,
    "extract_prompt_role": R,
    # build_o3_bench's prompt files of one's own: paths; their content is fixed through the derived prompts_sha256
    "extract_prompt": O,
    "synth_prompt": O,
    "layout_text": R,
    "all_sources": R,
    "max_tokens": R,
    "temperature": R,
    "source": R,
    "subset": R,  # evaluate's --limit/--sample_ids/--categories, resolved (its directory name carries its hash)
    # --- collage generation and layout rules (generate_collages, build_region_localization)
    "seed": R,
    "chunk_size": R,  # the generator's random stream is per chunk
    "target_retries": R,
    "max_bbox_ratio": R,
    "question_template": R,
    "image_format": R,
    "jpeg_quality": R,
    "grid": R,
    "min_short_edge": R,
    "canvas_area": R,
    "canvas_aspect": R,
    "target_scale": R,
    "target_aspect_jitter": R,
    "fill_aspect_jitter": R,
    "fill_scale": R,
    "panel_aspect": R,
    "min_panel_side": R,
    "max_panel_area": R,
    "max_effective_area": R,
    "bbox_cap": R,
    "placement_retries": R,
    "shrink_factor": R,
    "max_attempts": R,
    "canvas_enlarge": R,
    "extra_pass_jitter_mult": R,
    "usage_power": R,
    "split_range": R,
    "max_area_ratio": R,
    "chart_max_area_ratio": R,
    "merge_threshold": R,
    "title_merge_threshold": R,
    "merge_max_area_ratio": R,
    "max_aspect": R,
    "min_area_ratio": R,
    "contain_ratio": R,
    "min_score": R,
    # --- build_reasoning_data (Insight-V's data engine)
    "num_chains": R,
    "chain_retries": R,
    "keep_top": R,
    "flawed_ratio": R,
    "pairs_per_question": R,
    "dpo_min_margin": R,
    # --- iterative DPO (training/dpo/rounds.py): what it starts from and each stage's settings, fixed by round 1
    "base_model": R,
    "generate_settings": R,
    "check_settings": R,
    "score_settings": R,
    "export_settings": R,
    "dpo_settings": R,
    "train_on_cpu": R,  # fp32 on the CPU vs bf16 on GPUs
    "launcher": O,
    "serve": O,
    "eval_steps": O,
    # --- how much is done, and in what order (not how an item is made)
    "num_trials": E,  # more trials add trial_<k> directories (each trial's settings the same); fewer are refused
    "rounds": E,  # training.dpo.rounds: more rounds continue the run; fewer than it finished are refused
    "num_collages": O,
    "limit": O,  # build_o3_bench / build_region_localization: the first N items (evaluate: see "subset")
    "sample_ids": O,  # evaluate: resolved into "subset"
    "categories": O,  # evaluate: resolved into "subset"
    "retry_failed": O,
    "no_retry_failed": O,
    "layout_only": O,
    "separate_trial_requests": O,  # n=k in one request or k requests: the same question, batched differently
    "separate_attempt_requests": O,
    # --- how fast, how robust, how much money
    "concurrency": O,
    "rpm": O,
    "tpm": O,
    "judge_rpm": O,
    "judge_tpm": O,
    "no_adaptive_concurrency": O,
    "max_retries": O,
    "parse_retries": O,
    "judge_retries": O,  # asks again only where the judging would otherwise be a failure
    "client_timeout": O,
    "max_failure_ratio": O,
    "price_file": O,
    "max_cost": O,
    "max_tokens_total": O,
    "image_workers": O,
    "image_cache_mb": O,
    "image_cache": O,  # the same bytes either way (keyed by everything they depend on)
    "num_workers": O,
    "workers": O,  # download_benchmarks: files fetched at once
    "no_progress": O,
    "progress": O,
    "skip_image_check": O,
    "allow_outside_img_dir": O,
    # caps on untrusted sizes: a reply is judged whole before its record keeps --max_reply_chars of it;
    # an image over --max_decode_values is a failed sample (as a timeout), recovered by --retry_failed
    "max_reply_chars": O,
    "max_decode_values": O,  # lets image names point outside --img_dir; which images they are is the data's
    # --- paths (what the inputs hold is fixed through derived sha256 values)
    "output_dir": O,
    "out_dir": O,
    "eval_name": O,
    "eval_dir": O,
    "benchmark": O,
    "data_root": O,
    # download_benchmarks: which benchmarks (extent), which revision of their files (result), where from (paths)
    "benchmarks": E,
    "revision": R,
    "check_only": O,
    "extract": O,
    "source_dir": O,  # where --benchmark looks (the annotation file's content is what counts)
    "ann_file": O,
    "img_dir": O,
    "image_dir": O,
    "image_root": O,
    "source_pool": O,
    "layouts": O,
    "agreement_out": O,
    "working_dir": O,  # where the command ran: relative paths above are relative to it (evaluate's args.json)
}


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
    """A setting not in :data:`SETTING_KINDS` (a new flag nobody classified)."""


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


def kind_of(name: str) -> Kind:
    try:
        return SETTING_KINDS[name]
    except KeyError:
        raise UnclassifiedSetting(
            f"setting {name!r} is not classified in insight_o3.jobs.integrity.SETTING_KINDS "
            f"(result-changing or operational?)"
        ) from None


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
    values computed from the inputs, compared as they are) and ``provenance`` (the code that ran: recorded in the
    history, never compared)."""

    command: str
    settings: Mapping[str, Any]
    derived: Mapping[str, Any] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.settings:
            kind_of(name)  # UnclassifiedSetting for a flag nobody classified

    def _of(self, kind: Kind) -> JSONObject:
        return {k: v for k, v in self.settings.items() if SETTING_KINDS[k] is kind}

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
