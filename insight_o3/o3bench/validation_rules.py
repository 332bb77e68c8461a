"""The rules of the ``validate`` step as configuration: ``validate --validation_config rules.json`` (or ``.toml``).

Every key is optional; a missing key keeps its default (the values below), an unknown key or a value of the wrong
type is bad input naming the file and the key:

======================  =========================================================================================
key                     meaning (default)
======================  =========================================================================================
``forbidden_words``     words the question and the options must not use, matched as whole words in any case, a
                        plural ``s``/``es`` included (``["layout_id", "layout", "region", "crop", "panel"]``)
``allowed_phrases``     phrases in which a forbidden word is a natural label, matched as whole words in any case,
                        the last word's plural included (``["crop yield", "crop production", "cash crop",
                        "solar panel", "panel data"]``)
``allow_image_labels``  a forbidden word is also allowed where it and the word next to it (before or after) appear
                        together in the image's own text (the E.1 OCR of the full image or of a layout), e.g.
                        "Northeast region" on a map that prints it (``true``)
``option_label_forms``  how options may be labelled: any of ``"A."``, ``"A)"``, ``"(A)"``, ``"A:"``; accepted forms
                        are rewritten ``A.`` (``["A."]``: the E.2 prompt's form; another form is rejected as
                        ``six_options`` with a detail naming it)
``min_cited_layouts``   distinct layouts the explanation must cite (``2``)
``f_share_limit``       the share of F answers reported against (``0.1``)
======================  =========================================================================================

For example, the paper's literal list (the E.2 prompt also names ``box``) and options written ``A)``::

    {"forbidden_words": ["layout_id", "layout", "region", "crop", "panel", "box"],
     "allowed_phrases": ["crop yield", "solar panel", "box plot"],
     "option_label_forms": ["A.", "A)"]}

The rules a workspace was validated with are written to ``validate/rules.json`` (with the file's path and sha256,
and the rules' own sha256); ``review apply`` checks edits by them, and the release's run card records them.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import re
from dataclasses import asdict, dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any

from ..base.json_types import JSONObject
from ..base.untrusted import loads
from .records import BuildFileError, read_text_file

#: Option label forms a config may accept: the form's name and its pattern (group 1: the letter).
LABEL_FORMS = {"A.": r"([A-Z])\.", "A)": r"([A-Z])\)", "(A)": r"\(([A-Z])\)", "A:": r"([A-Z]):"}
_WORD = re.compile(r"^[\w-]+$")


def _words_pattern(words: tuple[str, ...] | list[str], plural_last: bool = True) -> str:
    """A whole-word pattern of a phrase: words separated by spaces or hyphens, the last one's plural allowed."""
    parts = [re.escape(w) for w in words]
    return r"\b" + r"[\s-]+".join(parts) + (r"(?:e?s)?" if plural_last else "") + r"\b"


@dataclass(frozen=True)
class ValidationRules:
    """The configurable rules (see the module docstring); the defaults are the checks of the paper's E.2 rules."""

    forbidden_words: tuple[str, ...] = ("layout_id", "layout", "region", "crop", "panel")
    allowed_phrases: tuple[str, ...] = ("crop yield", "crop production", "cash crop", "solar panel", "panel data")
    allow_image_labels: bool = True
    option_label_forms: tuple[str, ...] = ("A.",)
    min_cited_layouts: int = 2
    f_share_limit: float = 0.10

    def to_dict(self) -> JSONObject:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @property
    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode("utf-8")).hexdigest()

    @classmethod
    def from_dict(cls, obj: Any, where: str) -> ValidationRules:
        if not isinstance(obj, dict):
            raise BuildFileError(f"{where}: the validation rules must be an object (a table in TOML)")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(obj) - known)
        if unknown:
            raise BuildFileError(f"{where}: unknown key '{unknown[0]}' (known: {', '.join(sorted(known))})")
        out: dict[str, Any] = {}
        for name in ("forbidden_words", "allowed_phrases", "option_label_forms"):
            if name in obj:
                v = obj[name]
                if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
                    raise BuildFileError(f"{where}: '{name}' must be a list of non-empty strings")
                out[name] = tuple(x.strip() for x in v)
        for w in out.get("forbidden_words", ()):
            if not _WORD.match(w):
                raise BuildFileError(f"{where}: 'forbidden_words': {w!r} is not one word (letters, digits, _ or -)")
        for form in out.get("option_label_forms", ()):
            if form not in LABEL_FORMS:
                raise BuildFileError(
                    f"{where}: 'option_label_forms': {form!r} is not one of {', '.join(map(repr, LABEL_FORMS))}"
                )
        if "option_label_forms" in out and not out["option_label_forms"]:
            raise BuildFileError(f"{where}: 'option_label_forms' must name at least one form")
        if "allow_image_labels" in obj:
            if not isinstance(obj["allow_image_labels"], bool):
                raise BuildFileError(f"{where}: 'allow_image_labels' must be true or false")
            out["allow_image_labels"] = obj["allow_image_labels"]
        if "min_cited_layouts" in obj:
            v = obj["min_cited_layouts"]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise BuildFileError(f"{where}: 'min_cited_layouts' must be an integer of at least 1")
            out["min_cited_layouts"] = v
        if "f_share_limit" in obj:
            v = obj["f_share_limit"]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
                raise BuildFileError(f"{where}: 'f_share_limit' must be a number from 0 to 1")
            out["f_share_limit"] = float(v)
        return cls(**out)

    # -- the checks
    @cached_property
    def _forbidden(self) -> re.Pattern | None:
        if not self.forbidden_words:
            return None
        words = sorted(self.forbidden_words, key=len, reverse=True)
        return re.compile("|".join(_words_pattern([w]) for w in words), re.IGNORECASE)

    @cached_property
    def _allowed(self) -> list[re.Pattern]:
        return [re.compile(_words_pattern(p.split()), re.IGNORECASE) for p in self.allowed_phrases]

    def forbidden_word(self, text: str, image_text: str = "") -> str | None:
        """The first forbidden word of ``text`` that is neither inside an allowed phrase nor (with
        ``allow_image_labels``) a label of ``image_text`` together with a neighbouring word; None when there is
        none."""
        if self._forbidden is None:
            return None
        allowed = sorted(m.span() for p in self._allowed for m in p.finditer(text))
        starts = [a for a, _ in allowed]
        reach = list(itertools.accumulate((b for _, b in allowed), max))  # the furthest end of the spans so far
        labels = _LabelCheck(image_text) if self.allow_image_labels and image_text else None
        for m in self._forbidden.finditer(text):
            i = bisect.bisect_right(starts, m.start()) - 1  # the allowed spans starting at or before the word
            if i >= 0 and reach[i] >= m.end():
                continue
            if labels is not None and labels.excuses(text, m):
                continue
            return m.group(0)
        return None

    def option_label(self, line: str) -> tuple[str, str] | str:
        """``(letter, text)`` of an option line in an accepted form; else the name of the known form it is written
        in (``"A)"``), or ``""`` when it is in none."""
        for form in self.option_label_forms:
            m = re.match(LABEL_FORMS[form] + r"\s+(\S.*)$", line)
            if m:
                return m.group(1), m.group(2)
        for form, pattern in LABEL_FORMS.items():
            if re.match(pattern + r"\s+\S", line):
                return form
        return ""


_NEXT = re.compile(r"\s+([\w'-]+)")
#: distinct word pairs one text may look up in the image's text (each a search of it): far more forbidden words than
#: a question has; past it a forbidden word is not excused (so a text of thousands costs a bounded time)
MAX_LABEL_LOOKUPS = 64


def _word_before(text: str, i: int) -> str | None:
    """The word (``[\\w'-]+``) that ends right before the run of spaces ending at ``i`` (``([\\w'-]+)\\s+$`` on
    ``text[:i]``, without copying it)."""
    j = i
    while j > 0 and text[j - 1].isspace():
        j -= 1
    k = j
    while k > 0 and (text[k - 1].isalnum() or text[k - 1] in "_'-"):
        k -= 1
    return text[k:j] if j < i and k < j else None


class _LabelCheck:
    """Whether a forbidden word and the word before or after it in a text appear together in the image's text
    (``allow_image_labels``); each distinct pair is searched once, at most :data:`MAX_LABEL_LOOKUPS` pairs."""

    def __init__(self, image_text: str) -> None:
        self.image_text = image_text
        self.found: dict[tuple[str, str], bool] = {}

    def _together(self, a: str, b: str) -> bool:
        if (a, b) not in self.found:
            if len(self.found) >= MAX_LABEL_LOOKUPS:
                return False
            pattern = r"(?<![\w])" + re.escape(a) + r"\s+" + re.escape(b) + r"(?![\w])"
            self.found[(a, b)] = re.search(pattern, self.image_text, re.IGNORECASE) is not None
        return self.found[(a, b)]

    def excuses(self, text: str, m: re.Match) -> bool:
        before = _word_before(text, m.start())
        if before is not None and self._together(before, m.group(0)):
            return True
        after = _NEXT.match(text, m.end())
        return after is not None and self._together(m.group(0), after.group(1))


def load_rules(path: str | None) -> tuple[ValidationRules, JSONObject]:
    """The rules of ``path`` (JSON, or TOML by its ``.toml`` suffix; None: the defaults) and where they come from
    (``{"file", "file_sha256"}``, empty for the defaults)."""
    if path is None:
        return ValidationRules(), {}
    text, raw = read_text_file(path, "--validation_config")
    toml = str(path).lower().endswith(".toml")
    if toml:
        try:
            import tomllib
        except ImportError:  # Python 3.10
            raise BuildFileError(f"{path}: reading TOML needs Python 3.11 or later; write the rules as JSON") from None
    try:
        obj = tomllib.loads(text) if toml else loads(text)
    except ValueError as e:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        raise BuildFileError(f"{path}: not valid {'TOML' if toml else 'JSON'}: {e}") from None
    rules = ValidationRules.from_dict(obj, str(path))
    return rules, {"file": str(Path(path).resolve()), "file_sha256": hashlib.sha256(raw).hexdigest()}


def rules_record(rules: ValidationRules, source: dict) -> JSONObject:
    """What ``validate/rules.json`` holds: the rules, their sha256 and the file they came from (if any)."""
    return {"rules": rules.to_dict(), "rules_sha256": rules.sha256, **source}


def recorded_rules(path: Path) -> JSONObject | None:
    """What ``validate/rules.json`` holds (None when there is none; :class:`BuildFileError` when unreadable)."""
    if not path.exists():
        return None
    try:
        obj = loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise BuildFileError(f"{path}: cannot read the validation rules ({e})") from None
    if not isinstance(obj, dict):
        raise BuildFileError(f"{path}: expected a JSON object")
    return obj


def read_rules_record(path: Path) -> ValidationRules:
    """The rules a workspace was validated with (``validate/rules.json``; the defaults when there is none)."""
    record = recorded_rules(path)
    if record is None:
        return ValidationRules()
    return ValidationRules.from_dict(record.get("rules"), f"{path}: field 'rules'")
