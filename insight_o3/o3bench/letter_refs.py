"""Option-letter references in an explanation, renamed with the release's option shuffle (:mod:`.release`).

An explanation written before the shuffle says "Hence option B ... (B) is right"; after B moved to C it must say
C in both places. :func:`remap_letter_refs` is the one place that rewrites those references, form by form
(:data:`FORMS`); every other uppercase letter is left as it is. The forms:

==============  =============================================  ====================================================
form            examples                                       rewritten
==============  =============================================  ====================================================
``keyword``     "option B", "Option (B)", "options A and C",   always: a letter (list) after ``option(s)`` /
                "options A, C, or E", "choices B/D"            ``choice(s)`` is an option reference
``answer``      "answer is B", "Answer: (C)", "answer = D",    always (an ``option``/``choice`` between them is
                "the answer is option B"                       part of the form)
``range``       "options A-C", "options A to C"                never: a range means nothing once the options are
                                                               shuffled; the item is reported (``left``)
``paren``       "(B) is right"                                 only when the item uses no letter as a label
``close_paren`` "B) Rome"                                      only when the item uses no letter as a label
==============  =============================================  ====================================================

The bare forms ("(B)", "B)") are ambiguous where a letter is also a name: a map's "Building B", "Plan A", "Exit
(C)". So when the question, an option's text or the explanation outside the forms above holds a standalone A-F
(the article "A" before a lowercase word excepted), the bare forms are left as written and reported (``left``), for
the reviewer to check; a label letter is never rewritten. F is not shuffled (it stays last), so "option F" stays.
The paper says only "we randomly shuffle options A-E" (B.1); renaming the explanation's references is ours
(``docs/fidelity.md``).
"""

from __future__ import annotations

import bisect
import re
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

_L = r"[A-F]"
_ONE = rf"\(?{_L}\)?(?![A-Za-z0-9])"  # a letter, perhaps in parentheses, not the start of a word ("Berlin", "B2")
#: a separator of a letter list: ``, `` ``, and `` `` or `` ``/`` ``&``; every run of spaces belongs to one ``\s*`` (a
#: ``,\s*`` then ``\s*`` split a long run every way before failing: quadratic)
_SEP = r"\s*(?:,\s*(?:and\s+|or\s+)?|\band\b\s*|\bor\b\s*|/\s*|&\s*)"
_KEYWORD = r"\b(?i:options?|choices?)"

#: (name, pattern, bare) per form, tried in this order at each position; a bare form is rewritten only when the item
#: uses no letter as a label. The letters a match rewrites are its standalone A-F.
FORMS: tuple[tuple[str, str, bool], ...] = (
    ("range", rf"{_KEYWORD}\s+\(?{_L}\)?\s*(?:-|–|—|\bto\b|\bthrough\b)\s*\(?{_L}\)?(?![A-Za-z0-9])", False),
    ("answer", rf"\b(?i:answer)(?:\s+is|\s*[:=])?\s*(?:{_KEYWORD}\s+)?{_ONE}", False),
    ("keyword", rf"{_KEYWORD}\s+{_ONE}(?:{_SEP}{_ONE})*", False),
    ("paren", rf"\({_L}\)", True),
    ("close_paren", rf"(?<![A-Za-z0-9(]){_L}\)", True),
)
_FORM = re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern, _ in FORMS))
_BARE = {name for name, _, bare in FORMS if bare}
_LETTER = re.compile(rf"(?<![A-Za-z0-9]){_L}(?![A-Za-z0-9])")
#: A standalone capital A-F used as a name ("Building B"), not the article "A" before a lowercase word.
_LABEL = re.compile(r"(?<![A-Za-z0-9])(?:[B-F]|A(?!\s+[a-z]))(?![A-Za-z0-9])")


@dataclass
class Remapped:
    """The rewritten text, how many references were rewritten, and the references left as written (each with
    why), for the release's report."""

    text: str
    renamed: int = 0
    left: list[str] = field(default_factory=list)


#: Entries of ``left`` one explanation reports; the rest are counted in a last entry (a reviewer reads a few).
MAX_LEFT = 50


def _stray_letters(explanation: str) -> Iterator[re.Match]:
    """Standalone capitals A-F of the explanation outside every form (a name, or a reference in no known form)."""
    starts, ends = array("q"), array("q")  # the forms' spans: in order, without overlaps
    for m in _FORM.finditer(explanation):
        starts.append(m.start())
        ends.append(m.end())
    for x in _LABEL.finditer(explanation):
        i = bisect.bisect_right(starts, x.start()) - 1  # the last form starting at or before the letter
        if i < 0 or x.start() >= ends[i]:
            yield x


def remap_letter_refs(explanation: str, new_letter: Mapping[str, str], context: str = "") -> Remapped:
    """``explanation`` with every option-letter reference of :data:`FORMS` renamed by ``new_letter`` (old -> new;
    letters it lacks stay), in one pass (so B->C and C->A never chain). ``context`` is the item's other text (its
    question and option texts without their labels), where a letter used as a name makes the bare forms
    ambiguous. ``left`` lists what was not rewritten and may be a stale reference: ranges, bare forms in an item
    that uses letters as names, and standalone letters in no form (at most :data:`MAX_LEFT`, then a count)."""
    out = Remapped(explanation)
    more = 0

    def note(text: str) -> None:
        nonlocal more
        if len(out.left) < MAX_LEFT:
            out.left.append(text)
        else:
            more += 1

    labels = bool(_LABEL.search(context))
    for x in _stray_letters(explanation):
        labels = True
        around = explanation[max(0, x.start() - 20) : x.end() + 20].replace("\n", " ")
        note(f"{x.group(0)!r} in {around!r} (a standalone letter: a name, or a reference in no known form)")

    def rewrite(m: re.Match) -> str:
        form = m.lastgroup or ""
        if form == "range":
            note(f"{m.group(0)!r} (a range of letters)")
            return m.group(0)
        if form in _BARE and labels:
            note(f"{m.group(0)!r} (a letter is also used as a name in this item)")
            return m.group(0)
        out.renamed += sum(x != "F" for x in _LETTER.findall(m.group(0)))
        return _LETTER.sub(lambda x: new_letter.get(x.group(0), x.group(0)), m.group(0))

    out.text = _FORM.sub(rewrite, explanation)
    if more:
        out.left.append(f"… and {more} more")
    return out
