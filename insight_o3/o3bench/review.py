"""Step ``review``: human review of the filtered items (§3.2 "human annotation" and "secondary review").

``review page`` writes, per batch of items, a self-contained HTML page (:mod:`insight_o3.viz.review_page`) and a
decisions file to fill in. ``review apply`` reads the decisions files and writes ``review/reviewed.jsonl``.

The decisions file is plain text, one line per item (``#`` lines and blank lines are ignored)::

    chart/report_07#q2 accept
    chart/report_07#q3 reject the two bars are not comparable (different units)
    map/campus#q0 edit {"answer": "C", "explanation": "Step 1: ... [layout 2]\\nStep 2: ... [layout 5]"}
    map/campus#q1 pending

``reject`` needs a reason (the rest of the line). ``edit`` takes a JSON object of the fields to change
(``question``, ``options``, ``answer``, ``explanation``; ``target_layouts`` to set the target layouts by hand, as
the paper's annotators may) on one line. An edited item is checked again by every rule of step ``validate``
(:func:`~insight_o3.o3bench.validation.check_item`, with the rules ``validate`` recorded in
``validate/rules.json``), and its target layouts are derived again from the
citations unless the edit sets them. The review page has the same choices as controls and exports this format.

``apply`` refuses the whole set of files (exit status 2; nothing is written) when a line cannot be read, names an
unknown item, decides an item twice, lacks a reason, or holds an edit with a field of the wrong type or that fails a
rule. Every problem of every file is listed at once, in file and line order, as ``<file>:<line>: <item>: <field>:
<what is wrong>``. Items without a line stay ``pending``; ``release`` takes the accepted and edited items.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.json_types import JSONObject
from ..base.untrusted import loads
from ..storage.atomic import write_jsonl_atomic
from ..storage.lock import run_lock
from .records import BenchItem, SourceImage, read_items, read_sources
from .validation import Validator
from .workspace import Workspace

DECISIONS = ("accept", "reject", "edit", "pending")
EDITABLE = ("question", "options", "answer", "explanation", "target_layouts")
ACCEPTED = ("accept", "edit")


class DecisionsError(ValueError):
    """Unusable decisions; the message lists every problem with its file and line."""


@dataclass(frozen=True)
class Decision:
    item_id: str
    decision: str
    where: str
    reason: str | None = None
    edit: dict | None = None


def batches(items: list[BenchItem], batch_size: int) -> list[list[BenchItem]]:
    """Items grouped by image (first appearance order), then cut into batches of ``batch_size``."""
    by_image: dict[str, list[BenchItem]] = {}
    for it in items:
        by_image.setdefault(it.image_key, []).append(it)
    ordered = [it for group in by_image.values() for it in group]
    return [ordered[i : i + batch_size] for i in range(0, len(ordered), batch_size)]


def template(items: list[BenchItem], batch: int, n_batches: int, page: str) -> str:
    """The decisions file of a batch, every item ``pending``."""
    head = [
        f"# O3-Bench review decisions, batch {batch} of {n_batches}: {len(items)} items (page: {page})",
        "# One line per item: '<item_id> accept', '<item_id> reject <reason>', '<item_id> edit <JSON object of the",
        "# fields to change: question, options, answer, explanation, target_layouts>' or '<item_id> pending'.",
        "# The page's 'Export decisions' button writes this file. Apply with: build-o3-bench review apply",
    ]
    return "\n".join(head + [f"{it.item_id} pending" for it in items]) + "\n"


def parse_line(line: str, where: str) -> Decision | str:
    """One decision, or a one-line description of what is wrong with the line."""
    parts = line.strip().split(None, 2)
    if len(parts) < 2:
        return f"{where}: expected '<item_id> <accept|reject|edit|pending> ...', got {line.strip()[:80]!r}"
    item_id, word = parts[0], parts[1].lower()
    rest = parts[2].strip() if len(parts) > 2 else ""
    if word not in DECISIONS:
        return f"{where}: {item_id}: unknown decision {parts[1]!r} (accept, reject, edit or pending)"
    if word == "reject":
        if not rest:
            return f"{where}: {item_id}: a rejection needs a reason after 'reject'"
        return Decision(item_id, word, where, reason=rest)
    if word == "edit":
        try:
            edit = loads(rest)
        except ValueError as e:
            return f"{where}: {item_id}: the edit must be a JSON object on the same line ({e})"
        if not isinstance(edit, dict) or not edit:
            return f"{where}: {item_id}: the edit must be a non-empty JSON object of fields to change"
        unknown = sorted(set(edit) - set(EDITABLE))
        if unknown:
            return f"{where}: {item_id}: cannot edit {', '.join(unknown)} (editable: {', '.join(EDITABLE)})"
        return Decision(item_id, word, where, edit=edit)
    if rest:
        return f"{where}: {item_id}: nothing may follow '{word}' (got {rest[:40]!r})"
    return Decision(item_id, word, where)


def read_decisions(paths: list[str]) -> tuple[list[Decision], list[str]]:
    decisions, problems = [], []
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8-sig")  # a leading byte-order mark (Windows editors) is not data
        except (OSError, UnicodeDecodeError) as e:
            problems.append(f"{path}: cannot read the decisions file ({e})")
            continue
        # lines end at \n (\r\n too) only: an edit's JSON string may hold U+2028, U+0085 ... raw (the page's export)
        for n, line in enumerate(text.replace("\r\n", "\n").split("\n"), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            d = parse_line(line, f"{path}:{n}")
            (problems.append(d) if isinstance(d, str) else decisions.append(d))
    return decisions, problems


def _is_layout_id(value: Any) -> bool:
    """An integer, not a bool (``True == 1`` would pass for layout 1 and be written as ``true``)."""
    return isinstance(value, int) and not isinstance(value, bool)


#: The field a validation rule judges (``forbidden_word``: the question or an option, said by its detail).
_RULE_FIELD = {
    "six_options": "options",
    "f_last": "options",
    "answer_letter": "answer",
    "unknown_layout": "explanation",
    "too_few_layouts": "explanation",
}


def _type_problem(name: str, value: Any) -> str | None:
    """What is wrong with the type of an edited field's value (None: nothing)."""
    if name == "target_layouts":
        if not isinstance(value, list) or not value or not all(_is_layout_id(t) for t in value):
            return "must be a non-empty list of layout ids (integers; true/false are not ids)"
        return None
    if isinstance(value, str) or (
        name in ("options", "explanation") and isinstance(value, list) and all(isinstance(x, str) for x in value)
    ):
        return None
    shown = f"{type(value).__name__} {value!r}" if isinstance(value, (int, float)) else type(value).__name__
    return f"must be text, got {shown[:60]}"


def edit_problems(
    item: BenchItem, source: SourceImage, edit: dict, validator: Validator | None = None
) -> tuple[BenchItem | None, list[str]]:
    """The item with ``edit`` applied and checked by every validation rule, or ``(None, problems)``: one
    ``"<field>: <what is wrong>"`` per field whose value has the wrong type, the validation rule that fails
    (when every text field has the right type) and every problem of ``target_layouts``."""
    problems = [f"{k}: {p}" for k in EDITABLE if k in edit and (p := _type_problem(k, edit[k])) is not None]
    targets = edit.get("target_layouts")
    if isinstance(targets, list) and _type_problem("target_layouts", targets) is None:
        unknown = [t for t in targets if t not in source.layout_ids]
        if unknown:
            problems.append(f"target_layouts: layout {unknown[0]} is not a layout of the image")
    if any(not p.startswith("target_layouts:") for p in problems):
        return None, problems  # a text field of the wrong type: the rules would only say "malformed" again
    fields = {k: getattr(item, k) for k in ("question", "options", "answer", "explanation")}
    fields.update({k: v for k, v in edit.items() if k != "target_layouts"})
    v = (validator or Validator()).check(fields, source, item.item_id, origin="edited")
    if v.item is None:
        field = _RULE_FIELD.get(v.reason or "")
        if v.reason == "forbidden_word":
            field = "question" if (v.detail or "").startswith("the question") else "options"
        problems.insert(0, f"{field + ': ' if field else ''}the edit fails validation: {v.reason}: {v.detail}")
    if problems or v.item is None:
        return None, problems
    if targets is not None:
        v.item.target_layouts = sorted(set(targets))
    return v.item, []


def check(
    items: list[BenchItem],
    sources: dict[str, SourceImage],
    decisions: list[Decision],
    validator: Validator | None = None,
) -> tuple[list[JSONObject], list[str]]:
    """The reviewed rows of ``items`` (every item, ``pending`` when undecided) and every problem of the
    decisions (``"<file>:<line>: <item>: <field>: <what>"``); the rows are only usable without problems."""
    by_id = {it.item_id: it for it in items}
    seen: dict[str, str] = {}
    problems: list[str] = []
    rows: dict[str, dict] = {}
    for d in decisions:
        item = by_id.get(d.item_id)
        if item is None:
            problems.append(f"{d.where}: unknown item {d.item_id!r} (not in filter/kept.jsonl)")
            continue
        if d.item_id in seen:
            problems.append(f"{d.where}: {d.item_id} is already decided at {seen[d.item_id]}")
            continue
        seen[d.item_id] = d.where
        final: BenchItem | None = item
        if d.decision == "edit":
            final, wrong = edit_problems(item, sources[item.image_key], d.edit or {}, validator)
            problems += [f"{d.where}: {d.item_id}: {p}" for p in wrong]
        if final is not None:
            rows[d.item_id] = {
                "item_id": d.item_id,
                "decision": d.decision,
                "reason": d.reason,
                "decided_at": d.where,
                "item": final.to_dict(),
            }
    out = [
        rows.get(it.item_id)
        or {"item_id": it.item_id, "decision": "pending", "reason": None, "decided_at": None, "item": it.to_dict()}
        for it in items
    ]
    return out, problems


def _position(problem: str) -> tuple[str, int]:
    """(file, line) of a problem, for sorting (a problem of a whole file sorts before its lines)."""
    m = re.match(r"(.*?):(\d+): ", problem)
    return (m.group(1), int(m.group(2))) if m else (problem.split(": ", 1)[0], 0)


def refusal(problems: list[str]) -> DecisionsError:
    """Every problem, in file and line order, in one error."""
    ordered = sorted(problems, key=_position)  # stable: a line's problems keep their order
    return DecisionsError(
        f"the decisions cannot be applied ({len(ordered)} problem(s); nothing was written):\n  " + "\n  ".join(ordered)
    )


def apply(items: list[BenchItem], sources: dict[str, SourceImage], decisions: list[Decision]) -> list[JSONObject]:
    """The reviewed rows of ``items`` (:func:`check`); raises :class:`DecisionsError` listing every problem."""
    rows, problems = check(items, sources, decisions)
    if problems:
        raise refusal(problems)
    return rows


def decisions_files(ws: Workspace) -> list[str]:
    d = ws.step("review")
    return sorted(str(p) for p in d.glob("batch_*.decisions.txt")) if d.is_dir() else []


def apply_workspace(ws: Workspace, paths: list[str] | None = None) -> JSONObject:
    """Apply the decisions files (default: every ``review/batch_*.decisions.txt``) to ``filter/kept.jsonl`` under
    the workspace lock and write ``review/reviewed.jsonl``; returns the counts per decision."""
    with run_lock(ws.root, "build_o3_bench review apply"):
        items = read_items(ws.require(ws.kept, "filter"), "filter/kept.jsonl")
        sources = read_sources(ws.require(ws.sources, "sources"))
        files = list(paths) if paths else decisions_files(ws)
        if not files:
            raise DecisionsError(f"no decisions files in {ws.step('review')}: run 'review page' first")
        decisions, problems = read_decisions(files)
        rows, wrong = check(items, sources, decisions, Validator.of_workspace(ws))  # the rules validate used
        if problems or wrong:
            raise refusal(problems + wrong)  # every problem of every file at once
        os.makedirs(ws.step("review"), exist_ok=True)
        write_jsonl_atomic(ws.reviewed, rows)
        counts = {d: sum(r["decision"] == d for r in rows) for d in DECISIONS}
        return {"items": len(rows), **counts, "files": files}


def read_reviewed(ws: Workspace) -> list[JSONObject]:
    from ..storage.jsonl import iter_jsonl
    from .records import BuildFileError

    rows = []
    for where, _, obj in iter_jsonl(ws.require(ws.reviewed, "review apply"), BuildFileError, what="reviewed file"):
        if obj.get("decision") not in DECISIONS or not isinstance(obj.get("item"), dict):
            raise BuildFileError(f"{where}: field 'decision'/'item' missing or invalid")
        obj["item"] = BenchItem.from_dict(obj["item"], where)
        rows.append(obj)
    return rows
