"""``run_card.json``: what a run's numbers depend on, written by every evaluate/rejudge run.

It holds the package version and git commit, every effective setting (keys never), the resolved
image budget per model, the sha256 of every prompt constant, the judge, seeds, the benchmark file's
sha256 and the subset. :func:`differences` names the settings two cards disagree on;
``gather_eval_results`` uses it to refuse mixing runs that are not comparable. The file is written and
read by :class:`~insight_o3.evaluation.run_dir.RunDir` (which adds ``format_version``).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Iterable, Mapping
from typing import Any

from .. import __version__
from ..base.json_types import JSONObject
from ..base.setting_kinds import Kind
from ..jobs.integrity import FIXED_KEY, Invocation, git_commit, sha256_file
from ..protocol import prompts
from .judge_settings import default_flow

#: Values of a run card derived from the inputs that can change a result (fixed by the directory's first run).
DERIVED_KEYS = ("benchmark_sha256", "prompts_sha256")

#: Settings on which two runs' verdicts can depend: ``compare`` refuses runs that differ on them, and
#: ``gather_eval_results`` runs that share a column (one benchmark, several systems); see
#: :func:`verdict_conflicts`. Not ``judge.cache``: it asks an identical judge prompt once instead of
#: again, which cannot change what the judge is asked.
VERDICT_KEYS = (
    "benchmark_sha256",
    "subset",
    "judge.model",
    "judge.flow",
    "judge.max_answer_length",
    "prompts_sha256",
)
#: Settings that must agree for runs to share a row (one setting, several benchmarks).
ROW_KEYS = (
    "model",
    "image_budget",
    "settings.sys_prompt",
    "settings.chat_completion_kwargs",
    "settings.image_url_extra_settings",
    "settings.vsearcher_model",
    "settings.vsearcher_prompt",
    "settings.max_vsearch_calls",
    "settings.reasoner_prompt",
    "settings.vsearcher_chat_completion_kwargs",
    "settings.oracle_crops",
    "judge.model",
    "judge.flow",
    "prompts_sha256",
)


def prompt_hashes() -> dict[str, str]:
    """sha256 of every prompt constant of :mod:`insight_o3.protocol.prompts` (first 16 hex digits)."""
    return {
        name: hashlib.sha256(value.encode("utf-8")).hexdigest()[:16]
        for name, value in sorted(vars(prompts).items())
        if name.isupper() and "PROMPT" in name and isinstance(value, str)
    }


def build_run_card(
    settings: dict,
    *,
    ann_file: str,
    subset: dict | None,
    num_samples: int,
    image_budget: dict,
    judge: dict,
    seeds: dict,
    extra: JSONObject | None = None,
) -> JSONObject:
    import openai

    card = {
        "package": "insight_o3",
        "version": __version__,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "openai": openai.__version__,
        "model": settings.get("model"),
        "benchmark_file": os.path.abspath(ann_file),
        "benchmark_sha256": sha256_file(ann_file),
        "subset": subset,
        "num_samples": num_samples,
        "image_budget": image_budget,
        "judge": judge,
        "seeds": seeds,
        "prompts_sha256": prompt_hashes(),
        "settings": settings,
    }
    if extra:
        card.update(extra)
    return card


def card_invocation(
    command: str, settings: JSONObject, kinds: Mapping[str, Kind], card: JSONObject, **derived: Any
) -> Invocation:
    """The invocation of an evaluate/rejudge run whose card is ``card``: its settings (of the ``kinds`` they
    declare), the card's :data:`DERIVED_KEYS` (plus ``derived``), and its version and commit as provenance."""
    return Invocation(
        command,
        settings,
        derived={**{k: card.get(k) for k in DERIVED_KEYS}, **derived},
        provenance={"version": card.get("version"), "git_commit": card.get("git_commit")},
        kinds=kinds,
    )


def fixed_settings(card: JSONObject) -> JSONObject:
    """The settings a run's first invocation fixed (a card written before they were recorded: its settings)."""
    fixed = card.get(FIXED_KEY)
    return fixed if isinstance(fixed, dict) else {"settings": card.get("settings"), "judge": card.get("judge")}


def card_sha256(card: dict) -> str:
    """sha256 of a run card's canonical JSON (sorted keys, no spaces): what a leaderboard entry cites."""
    text = json.dumps(card, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _get(card: JSONObject, dotted: str) -> Any:
    v: Any = card
    for part in dotted.split("."):
        if not isinstance(v, dict):
            return None
        v = v.get(part)
    return v


def differences(cards: dict[str, JSONObject], keys: Iterable[str] = VERDICT_KEYS) -> list[str]:
    """One line per key on which the named cards disagree: ``key: a=…, b=…``."""
    out = []
    for key in keys:
        values = {name: json.dumps(_get(c, key), sort_keys=True) for name, c in cards.items()}
        if len(set(values.values())) > 1:
            if key == "prompts_sha256":  # name the prompts, not two walls of hashes
                names = sorted({p for c in cards.values() for p in (_get(c, key) or {})})
                changed = [
                    p for p in names if len({json.dumps((_get(c, key) or {}).get(p)) for c in cards.values()}) > 1
                ]
                out.append(f"{key}: differs for {', '.join(changed)}")
            else:
                shown = ", ".join(f"{n}={v}" for n, v in values.items())
                out.append(f"{key}: {shown}")
    return out


def verdict_conflicts(cards: dict[str, dict]) -> tuple[list[str], list[str]]:
    """``(conflicts, notes)``: the :data:`VERDICT_KEYS` the named cards disagree on, and what differs but
    is accepted. A ``judge.flow`` difference is accepted (as a note) when every run uses its own mode's
    default flow (:func:`~.judge.default_flow`: a single model judged as the released ``evaluate.py``
    judges, InSight-o3 as the fork's in-loop check), which is how the paper compares them."""
    conflicts = differences(cards, tuple(k for k in VERDICT_KEYS if k != "judge.flow"))
    notes = []
    flows = differences(cards, ("judge.flow",))
    own = all(_get(c, "judge.flow") == default_flow(_get(c, "settings.vsearcher_model")) for c in cards.values())
    if flows and own:
        notes.append(f"{flows[0]} (each run judged with its mode's own flow)")
    else:
        conflicts += flows
    return conflicts, notes
