"""Step ``validate``: deterministic checks of synthesized items, one clear reason per rejected item.

The rules, checked in this order (the first that fails is the item's reason); the words, phrases, label forms,
layout count and F limit are configuration (:mod:`.validation_rules`, ``--validation_config``; defaults shown):

===================  ==========================================================================================
reason               rule
===================  ==========================================================================================
``malformed``        the item is an object with text fields ``question``, ``options``, ``answer``, ``explanation``
``six_options``      exactly six options, one per line, labelled ``A.`` to ``F.`` in order (another label form,
                     ``A)``, is named in the detail; ``option_label_forms`` may accept it)
``f_last``           the last option is exactly ``F. No right choice``
``answer_letter``    the answer is one option letter, ``A``-``F``
``forbidden_word``   neither the question nor the options mention ``layout``, ``region``, ``crop`` or ``panel``
                     (whole words, any case, plurals and ``layout_id`` included), except inside an allowed phrase
                     ("crop yield", "solar panels") or a label of the image's own OCR text ("Northeast region")
``unknown_layout``   every ``[layout X]`` the explanation cites is a layout of the image
``too_few_layouts``  the explanation cites at least two distinct layouts (the detail names a mention that was not
                     counted, such as ``(layout 5)`` or a bare ``layout 5``)
===================  ==========================================================================================

Normalisation before the checks (never a reason): surrounding whitespace; options given as a list of strings are
joined with newlines; an options text without a newline but with literal ``\\n`` sequences (a doubly escaped JSON
string) is split on them; blank option lines are dropped; option labels of an accepted form are rewritten ``A.``.
Citations are ``[layout 3]``, also ``[layouts 3, 5]``, ``[layout 3 and 5]``, ``[Layout 1, Layout 2]`` and
``[layout 1; layout 2]``; the item's ``target_layouts`` are the cited ids, sorted. The F share (answers ``F`` among
the accepted items, per image and overall) is reported against the paper's limit (E.2: at most 10%).
"""

from __future__ import annotations

import bisect
import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..base.json_types import JSONObject
from ..storage.atomic import write_json_atomic, write_jsonl_atomic
from ..storage.lock import run_lock
from .extraction import extractions_by_image
from .records import BenchItem, SourceImage, read_sources
from .steps import InputNotReady, read_log, step_command
from .validation_rules import ValidationRules, read_rules_record, rules_record
from .workspace import Workspace

NO_RIGHT_CHOICE = "F. No right choice"
LETTERS = "ABCDEF"
#: The paper's limit on the share of F answers (E.2 answer-option rule 3).
F_SHARE_LIMIT = ValidationRules.f_share_limit
DEFAULT_RULES = ValidationRules()
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
#: "layout", "layouts", "layout_id", then spaces and a ':' or '#'; each run of spaces belongs to one \s* (two in a row
#: around the optional mark split a long run every way before failing: quadratic)
_LAYOUT = r"layouts?(?:_id)?\s*(?:[:#]\s*)?"
#: Characters an item's field may have: a question, its options or its explanation is a few hundred; a longer one
#: is a runaway reply (and every rule reads every field)
MAX_FIELD_CHARS = 20_000
#: digits of a layout id: a longer number names no layout (and ``int()`` refuses one past 4300 digits)
MAX_ID_DIGITS = 18
_CITATION = re.compile(rf"\[\s*((?:{_LAYOUT})\d+(?:\s*(?:,|;|&|\band\b)\s*(?:{_LAYOUT})?\d+)*)\s*\]", re.IGNORECASE)
_MENTION = re.compile(rf"\b{_LAYOUT}\d+", re.IGNORECASE)


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
    """Layout ids cited as ``[layout X]`` (or ``[layouts X, Y]``, ``[Layout X, Layout Y]``) in order of first
    citation, without repeats."""
    out: dict[int, None] = {}
    for m in _CITATION.finditer(explanation or ""):
        for n in re.findall(r"\d+", m.group(1)):
            if len(n.lstrip("0")) <= MAX_ID_DIGITS:  # a longer number names no layout: not a citation
                out.setdefault(int(n))
    return list(out)


def uncounted_mentions(explanation: str) -> list[str]:
    """Mentions of a layout that are not citations (``(layout 5)``, ``layout 5``), as written, without repeats."""
    starts, ends = [], []  # the citations' spans: in order, without overlaps
    for c in _CITATION.finditer(explanation):
        starts.append(c.start())
        ends.append(c.end())
    out: dict[str, None] = {}
    for m in _MENTION.finditer(explanation):
        i = bisect.bisect_right(starts, m.start()) - 1  # the last citation starting at or before the mention
        if i >= 0 and m.start() < ends[i]:
            continue
        s, e = m.span()
        left = explanation[s - 1] if s > 0 and explanation[s - 1] in "({<" else ""
        right = explanation[e] if e < len(explanation) and explanation[e] in ")}>" else ""
        out.setdefault(left + m.group(0) + right)
    return list(out)


def option_lines(options: Any) -> list[str]:
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


def _label_options(lines: list[str], rules: ValidationRules) -> ValidationVerdict | None:
    """Rewrite each option line to its canonical ``"X. text"`` in place; the verdict of the first line that is
    not labelled with its own letter in an accepted form, else None."""
    for k, line in enumerate(lines):
        label = rules.option_label(line)
        if isinstance(label, tuple) and label[0] == LETTERS[k]:
            lines[k] = f"{label[0]}. {label[1]}"
            continue
        if label and not isinstance(label, tuple):
            accepted = ", ".join(f"'{f}'" for f in rules.option_label_forms)
            return ValidationVerdict(
                None,
                "six_options",
                f"option line {k + 1} is labelled in the form '{label}' ({line[:20]!r}); accepted: {accepted} "
                f"(option_label_forms in the validation config)",
            )
        return ValidationVerdict(
            None, "six_options", f"option line {k + 1} is not labelled '{LETTERS[k]}. ': {line[:60]!r}"
        )
    return None


def check_item(
    raw: object,
    source: SourceImage,
    item_id: str,
    origin: str = "synthesized",
    rules: ValidationRules | None = None,
    image_text: str = "",
) -> ValidationVerdict:
    """Apply the rules (default: :class:`~.validation_rules.ValidationRules`'s defaults) to one synthesized (or
    edited) item of ``source``'s image; ``image_text`` is the image's OCR text (for ``allow_image_labels``)."""
    rules = rules or DEFAULT_RULES
    if not isinstance(raw, dict):
        return ValidationVerdict(None, "malformed", f"not a JSON object but {type(raw).__name__}")
    fields = {n: _text(raw, n) for n in _FIELDS}
    bad = [n for n in _FIELDS if fields[n] is None]
    if bad:
        return ValidationVerdict(None, "malformed", f"field '{bad[0]}' is missing, empty or not text")
    long = [(n, len(v)) for n, v in fields.items() if v is not None and len(v) > MAX_FIELD_CHARS]
    if long:
        return ValidationVerdict(
            None, "malformed", f"field '{long[0][0]}' has {long[0][1]} characters (at most {MAX_FIELD_CHARS})"
        )
    question, answer, explanation = fields["question"], fields["answer"], fields["explanation"]
    assert question is not None and answer is not None and explanation is not None
    lines = option_lines(raw["options"])
    if len(lines) != 6:
        return ValidationVerdict(None, "six_options", f"{len(lines)} options, not six (A-F, one per line)")
    bad_label = _label_options(lines, rules)
    if bad_label is not None:
        return bad_label
    if lines[5] != NO_RIGHT_CHOICE:
        return ValidationVerdict(
            None, "f_last", f"the last option must be exactly {NO_RIGHT_CHOICE!r}, got {lines[5][:60]!r}"
        )
    if len(answer) != 1 or answer not in LETTERS:
        return ValidationVerdict(None, "answer_letter", f"the answer must be one letter A-F, got {answer[:40]!r}")
    for where, text in [("the question", question)] + [(f"option {ln[0]}", ln) for ln in lines]:
        word = rules.forbidden_word(text, image_text)
        if word is not None:
            return ValidationVerdict(None, "forbidden_word", f"{where} mentions {word!r}")
    cited = cited_layouts(explanation)
    unknown = [c for c in cited if c not in source.layout_ids]
    if unknown:
        have = ", ".join(str(i) for i in sorted(source.layout_ids))
        return ValidationVerdict(
            None, "unknown_layout", f"the explanation cites layout {unknown[0]}, not one of {have}"
        )
    if len(cited) < rules.min_cited_layouts:
        loose = uncounted_mentions(explanation)
        hint = (
            f" (not counted: {', '.join(repr(x) for x in loose[:3])}: a citation is written [layout X])"
            if loose
            else ""
        )
        return ValidationVerdict(
            None,
            "too_few_layouts",
            f"the explanation cites {len(cited)} distinct layout(s), needs {rules.min_cited_layouts}{hint}",
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


@dataclass(frozen=True)
class Validator:
    """:func:`check_item` with a workspace's rules and its images' OCR text (``image_texts`` by image key)."""

    rules: ValidationRules = DEFAULT_RULES
    image_texts: Mapping[str, str] = field(default_factory=dict)

    def check(self, raw: object, source: SourceImage, item_id: str, origin: str = "synthesized") -> ValidationVerdict:
        return check_item(raw, source, item_id, origin, self.rules, self.image_texts.get(source.key, ""))

    @classmethod
    def of_workspace(cls, ws: Workspace, rules: ValidationRules | None = None) -> Validator:
        """The workspace's validator: ``rules`` (default: those ``validate`` recorded) and the E.1 OCR text."""
        return cls(rules or read_rules_record(ws.validation_rules), image_texts(ws))


def image_texts(ws: Workspace) -> dict[str, str]:
    """Each image's own text: the E.1 OCR sections of the full image and of its layouts that have text."""
    out = {}
    for key, slot in extractions_by_image(read_log(ws.records("extract"))).items():
        parts = [slot["full"], *slot["layouts"].values()]
        out[key] = "\n".join(e.ocr for e in parts if e is not None and e.has_text)
    return out


def f_share(items: list[BenchItem], limit: float = F_SHARE_LIMIT) -> JSONObject:
    """The share of items whose answer is F, overall and per image, against ``limit`` (the paper's 10%)."""
    per: dict[str, Counter] = {}
    for it in items:
        c = per.setdefault(it.image_key, Counter())
        c["items"] += 1
        c["f"] += it.answer == "F"
    total, f = len(items), sum(it.answer == "F" for it in items)
    per_image = {k: {"items": c["items"], "f": c["f"], "share": round(c["f"] / c["items"], 4)} for k, c in per.items()}
    over = sorted(k for k, v in per_image.items() if v["share"] > limit)
    return {
        "limit": limit,
        "overall": {"items": total, "f": f, "share": round(f / total, 4) if total else 0.0},
        "within_limit": (f / total if total else 0.0) <= limit,
        "images_over_limit": over,
        "per_image": per_image,
    }


# ----------------------------------------------------------------------------- the step
def validate_workspace(
    ws: Workspace, rules: ValidationRules | None = None, rules_source: dict | None = None
) -> JSONObject:
    """Check every item of every ok synthesis record by ``rules`` (default: the defaults) under the workspace lock;
    rewrite ``candidates.jsonl``, ``rejected.jsonl``, ``rules.json`` (the rules, their sha256 and ``rules_source``,
    the config file's path and sha256) and ``report.json`` (the step is deterministic and cheap: it is redone as a
    whole)."""
    rules = rules or DEFAULT_RULES
    with run_lock(ws.root, "build_o3_bench validate"):
        sources = read_sources(ws.require(ws.sources, "sources"))
        synth = read_log(ws.require(ws.records("synthesize"), "synthesize"))
        validator = Validator(rules, image_texts(ws))
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
                v = validator.check(raw, src, f"{key}#q{k}")
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
            "f_share": f_share(accepted, rules.f_share_limit),
            "rules_sha256": rules.sha256,
        }
        os.makedirs(ws.step("validate"), exist_ok=True)
        write_json_atomic(ws.validation_rules, rules_record(rules, rules_source or {}))
        write_jsonl_atomic(ws.candidates, [i.to_dict() for i in accepted])
        write_jsonl_atomic(ws.rejected, rejected)
        write_json_atomic(ws.validation_report, report)
        return report
