"""Step ``validate``: deterministic checks of synthesized items, one clear reason per rejected item.

The rules, checked in this order (the first that fails is the item's reason):

===================  ==========================================================================================
reason               rule
===================  ==========================================================================================
``malformed``        the item is an object with text fields ``question``, ``options``, ``answer``, ``explanation``
``six_options``      exactly six options, one per line, labelled ``A.`` to ``F.`` in order
``f_last``           the last option is exactly ``F. No right choice``
``answer_letter``    the answer is one option letter, ``A``-``F``
``forbidden_word``   neither the question nor the options mention ``layout``, ``region``, ``crop`` or ``panel``
                     (whole words, any case, plurals and ``layout_id`` included)
``unknown_layout``   every ``[layout X]`` the explanation cites is a layout of the image
``too_few_layouts``  the explanation cites at least two distinct layouts
===================  ==========================================================================================

Normalisation before the checks (never a reason): surrounding whitespace; options given as a list of strings are
joined with newlines; an options text without a newline but with literal ``\\n`` sequences (a doubly escaped JSON
string) is split on them; blank option lines are dropped. Citations are ``[layout 3]``, also ``[layouts 3, 5]`` and
``[layout 3 and 5]``; the item's ``target_layouts`` are the cited ids, sorted. The F share (answers ``F`` among the
accepted items, per image and overall) is reported against the paper's limit (E.2: at most 10%).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass

from ...storage.atomic import write_json_atomic, write_jsonl_atomic
from ...storage.lock import run_lock
from .records import BenchItem, SourceImage, read_sources
from .steps import InputNotReady, read_log, step_command
from .workspace import Workspace

NO_RIGHT_CHOICE = "F. No right choice"
LETTERS = "ABCDEF"
#: The paper's limit on the share of F answers (E.2 answer-option rule 3).
F_SHARE_LIMIT = 0.10
REASONS = (
    "malformed",
    "six_options",
    "f_last",
    "answer_letter",
    "forbidden_word",
    "unknown_layout",
    "too_few_layouts",
)
_FIELDS = ("question", "options", "answer", "explanation")
_OPTION = re.compile(r"^([A-Z])\.\s+\S")
_FORBIDDEN = re.compile(r"\b(layout_ids?|layouts?|regions?|crops?|panels?)\b", re.IGNORECASE)
_CITATION = re.compile(r"\[\s*layouts?(?:_id)?\s*[:#]?\s*(\d+(?:\s*(?:,|&|\band\b)\s*\d+)*)\s*\]", re.IGNORECASE)


@dataclass(frozen=True)
class ValidationVerdict:
    """``item`` when the checks pass; else ``reason`` (one of :data:`REASONS`) and ``detail`` (one line)."""

    item: BenchItem | None
    reason: str | None = None
    detail: str | None = None

    @property
    def ok(self) -> bool:
        return self.item is not None


def cited_layouts(explanation: str) -> list[int]:
    """Layout ids cited as ``[layout X]`` (or ``[layouts X, Y]``) in order of first citation, without repeats."""
    out: list[int] = []
    for m in _CITATION.finditer(explanation or ""):
        for n in re.findall(r"\d+", m.group(1)):
            if int(n) not in out:
                out.append(int(n))
    return out


def option_lines(options) -> list[str]:
    """The options as stripped non-blank lines (a list is taken line per element)."""
    if isinstance(options, (list, tuple)):
        text = "\n".join(str(o) for o in options)
    else:
        text = str(options)
    if "\n" not in text and "\\n" in text:
        text = text.replace("\\n", "\n")
    return [line.strip() for line in text.strip().split("\n") if line.strip()]


def _text(raw: dict, name: str) -> str | None:
    v = raw.get(name)
    if name in ("options", "explanation") and isinstance(v, list) and all(isinstance(x, str) for x in v):
        return "\n".join(v)
    return v.strip() if isinstance(v, str) and v.strip() else None


def check_item(raw: object, source: SourceImage, item_id: str, origin: str = "synthesized") -> ValidationVerdict:
    """Apply the rules to one synthesized (or edited) item of ``source``'s image."""
    if not isinstance(raw, dict):
        return ValidationVerdict(None, "malformed", f"not a JSON object but {type(raw).__name__}")
    fields = {n: _text(raw, n) for n in _FIELDS}
    bad = [n for n in _FIELDS if fields[n] is None]
    if bad:
        return ValidationVerdict(None, "malformed", f"field '{bad[0]}' is missing, empty or not text")
    question, answer, explanation = fields["question"], fields["answer"], fields["explanation"]
    assert question is not None and answer is not None and explanation is not None
    lines = option_lines(raw["options"])
    if len(lines) != 6:
        return ValidationVerdict(None, "six_options", f"{len(lines)} options, not six (A-F, one per line)")
    for k, line in enumerate(lines):
        m = _OPTION.match(line)
        if not m or m.group(1) != LETTERS[k]:
            return ValidationVerdict(
                None, "six_options", f"option line {k + 1} is not labelled '{LETTERS[k]}. ': {line[:60]!r}"
            )
    if lines[5] != NO_RIGHT_CHOICE:
        return ValidationVerdict(
            None, "f_last", f"the last option must be exactly {NO_RIGHT_CHOICE!r}, got {lines[5][:60]!r}"
        )
    if len(answer) != 1 or answer not in LETTERS:
        return ValidationVerdict(None, "answer_letter", f"the answer must be one letter A-F, got {answer[:40]!r}")
    for where, text in [("the question", question)] + [(f"option {ln[0]}", ln) for ln in lines]:
        m = _FORBIDDEN.search(text)
        if m:
            return ValidationVerdict(None, "forbidden_word", f"{where} mentions {m.group(0)!r}")
    cited = cited_layouts(explanation)
    unknown = [c for c in cited if c not in source.layout_ids]
    if unknown:
        have = ", ".join(str(i) for i in sorted(source.layout_ids))
        return ValidationVerdict(
            None, "unknown_layout", f"the explanation cites layout {unknown[0]}, not one of {have}"
        )
    if len(cited) < 2:
        return ValidationVerdict(
            None, "too_few_layouts", f"the explanation cites {len(cited)} distinct layout(s), needs 2"
        )
    item = BenchItem(
        item_id=item_id,
        image_key=source.key,
        subset=source.subset,
        question=question,
        options="\n".join(lines),
        answer=answer,
        explanation=explanation,
        target_layouts=sorted(cited),
        origin=origin,
    )
    return ValidationVerdict(item)


def f_share(items: list[BenchItem]) -> dict:
    """The share of items whose answer is F, overall and per image, against :data:`F_SHARE_LIMIT`."""
    per: dict[str, Counter] = {}
    for it in items:
        c = per.setdefault(it.image_key, Counter())
        c["items"] += 1
        c["f"] += it.answer == "F"
    total, f = len(items), sum(it.answer == "F" for it in items)
    per_image = {k: {"items": c["items"], "f": c["f"], "share": round(c["f"] / c["items"], 4)} for k, c in per.items()}
    over = sorted(k for k, v in per_image.items() if v["share"] > F_SHARE_LIMIT)
    return {
        "limit": F_SHARE_LIMIT,
        "overall": {"items": total, "f": f, "share": round(f / total, 4) if total else 0.0},
        "within_limit": (f / total if total else 0.0) <= F_SHARE_LIMIT,
        "images_over_limit": over,
        "per_image": per_image,
    }


# ----------------------------------------------------------------------------- the step
def validate_workspace(ws: Workspace) -> dict:
    """Check every item of every ok synthesis record, under the workspace lock; rewrite ``candidates.jsonl``,
    ``rejected.jsonl`` and ``report.json`` (the step is deterministic and cheap: it is redone as a whole)."""
    with run_lock(ws.root, "build_o3_bench validate"):
        sources = read_sources(ws.require(ws.sources, "sources"))
        synth = read_log(ws.require(ws.records("synthesize"), "synthesize"))
        accepted: list[BenchItem] = []
        rejected: list[dict] = []
        failed, missing = [], []
        for key, src in sources.items():
            rec = synth.get(key)
            if rec is None:
                missing.append(key)
                continue
            if rec.get("status") != "ok":
                failed.append(key)
                continue
            for k, raw in enumerate(rec.get("items") or []):
                v = check_item(raw, src, f"{key}#q{k}")
                if v.item is not None:
                    accepted.append(v.item)
                else:
                    rejected.append(
                        {
                            "item_id": f"{key}#q{k}",
                            "image_key": key,
                            "reason": v.reason,
                            "detail": v.detail,
                            "item": raw,
                        }
                    )
        if sources and len(failed) + len(missing) == len(sources):
            raise InputNotReady(
                f"no image is synthesized yet ({len(missing)} not synthesized, {len(failed)} failed): run "
                f"'{step_command(ws, 'synthesize')}' first"
            )
        counts = Counter(r["reason"] for r in rejected)
        report = {
            "images": len(sources),
            "images_synthesized": len(sources) - len(failed) - len(missing),
            "images_synthesis_failed": failed,
            "images_not_synthesized": missing,
            "items": len(accepted) + len(rejected),
            "accepted": len(accepted),
            "rejected": len(rejected),
            "rejected_by_reason": {r: counts.get(r, 0) for r in REASONS},
            "target_layouts_per_item": round(sum(len(i.target_layouts) for i in accepted) / len(accepted), 3)
            if accepted
            else None,
            "f_share": f_share(accepted),
        }
        os.makedirs(ws.step("validate"), exist_ok=True)
        write_jsonl_atomic(ws.candidates, [i.to_dict() for i in accepted])
        write_jsonl_atomic(ws.rejected, rejected)
        write_json_atomic(ws.validation_report, report)
        return report
