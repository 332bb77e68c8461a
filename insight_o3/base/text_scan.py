"""Linear-time scanners for text a model or a server wrote: each one returns exactly what a regular expression of a
release returned, in time linear in the text.

Python's ``re`` backtracks: ``<answer>(.*?)</answer>`` over a reply of 40,000 unclosed ``<answer>`` tags tries every
start against every later position (57 s of CPU), and a parse runs in the event loop, so one reply stalls every
sample of a run. The scanners here find the same matches with ``str.find``/``str.rfind`` (and ``re`` only for
anchored runs that cannot backtrack: ``\\s*``, a number), each position of the text read a bounded number of times.
Every scanner names the expression it replaces; ``tests/test_linear_parsing.py`` checks them against it on random
texts (Hypothesis) and bounds their time and memory on texts of the reply body's size.
"""

from __future__ import annotations

import re
from array import array

#: ``\\s*`` and the number of a box list, matched at one position only (``match``): a greedy run, or a number whose
#: optional parts are taken or not at once, so neither backtracks past its own first try.
_SPACE_RUN = re.compile(r"\s*")
NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_NUMBER = re.compile(NUMBER)


def tagged_spans(text: str, start: str, end: str) -> list[str]:
    """``re.findall(re.escape(start) + "(.*?)" + re.escape(end), text, re.DOTALL)``: the text between each ``start``
    and the next ``end`` after it, left to right, without overlaps."""
    out: list[str] = []
    pos = 0
    while True:
        i = text.find(start, pos)
        if i < 0:
            return out
        j = text.find(end, i + len(start))
        if j < 0:  # no later start has an end after it either
            return out
        out.append(text[i + len(start) : j])
        pos = j + len(end)


def has_tagged(text: str, start: str, end: str) -> bool:
    """``re.search(re.escape(start) + ".*?" + re.escape(end), text, re.DOTALL) is not None``."""
    i = text.find(start)
    return i >= 0 and text.find(end, i + len(start)) >= 0


def without_tagged(text: str, start: str, end: str) -> str:
    """``re.sub(re.escape(start) + ".*?" + re.escape(end), "", text, flags=re.DOTALL)``."""
    pieces: list[str] = []
    pos = 0
    while True:
        i = text.find(start, pos)
        j = text.find(end, i + len(start)) if i >= 0 else -1
        if j < 0:
            pieces.append(text[pos:])
            return "".join(pieces)
        pieces.append(text[pos:i])
        pos = j + len(end)


def outer_braces(text: str) -> str | None:
    """``re.search(r"\\{.*\\}", text, re.DOTALL).group(0)``: from the first ``{`` to the last ``}`` after it."""
    i = text.find("{")
    j = text.rfind("}")
    return text[i : j + 1] if 0 <= i < j else None


def _box_at(text: str, i: int) -> tuple[tuple[str, str, str, str], int] | None:
    """The match of :func:`box_lists`' expression at ``text[i] == "["``: its four numbers and its end."""
    j = i + 1
    nums: list[str] = []
    for closing in (",", ",", ",", "]"):
        j = _SPACE_RUN.match(text, j).end()  # type: ignore[union-attr]  # \s* always matches
        m = _NUMBER.match(text, j)
        if m is None:
            return None
        nums.append(m.group())
        j = _SPACE_RUN.match(text, m.end()).end()  # type: ignore[union-attr]
        if not text.startswith(closing, j):
            return None
        j += 1
    return (nums[0], nums[1], nums[2], nums[3]), j


def box_lists(text: str, first: bool = False) -> list[tuple[str, str, str, str]]:
    """``re.findall(rf"\\[\\s*({NUMBER})\\s*,\\s*({NUMBER})\\s*,\\s*({NUMBER})\\s*,\\s*({NUMBER})\\s*\\]", text)``
    (only the first match with ``first``). A number's characters are never a space, a comma or a bracket, so the
    greedy number is the only one after which the rest can match: no backtracking finds another; an attempt at one
    ``[`` fails before the next ``[``, so each character is read at most twice."""
    out: list[tuple[str, str, str, str]] = []
    pos = 0
    while True:
        i = text.find("[", pos)
        if i < 0:
            return out
        found = _box_at(text, i)
        if found is None:
            pos = i + 1
            continue
        out.append(found[0])
        if first:
            return out
        pos = found[1]


_BOXED_OR_BRACE = re.compile(r"\\boxed\{|[{}]")


def boxed_bounds(text: str) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """The content bounds ``(start, end)`` of the first and of the last *closed* ``\\boxed{...}`` (by where each
    starts; nested braces balanced: the content ends at the ``}`` that brings the brace depth below the opening
    one), None when there is none. One pass over the braces keeping the depth and a stack of the open
    ``\\boxed{`` only (start and depth, 16 bytes each), so a reply of unclosed ``\\boxed{`` is read once (scanning
    forward from each of them was quadratic) in memory a fraction of its own."""
    if "\\boxed{" not in text:
        return None, None
    starts, depths = array("q"), array("q")  # the open \boxed{: content start, depth outside it
    depth = 0
    first: tuple[int, int] | None = None
    last: tuple[int, int] | None = None
    for m in _BOXED_OR_BRACE.finditer(text):
        if m.group() != "}":
            if m.group() != "{":
                starts.append(m.end())
                depths.append(depth)
            depth += 1
        elif depth:  # a "}" with nothing open closes nothing
            depth -= 1
            if depths and depths[-1] == depth:  # it closes the innermost open \boxed{
                span = (starts.pop(), m.start())
                depths.pop()
                if first is None or span[0] < first[0]:
                    first = span
                if last is None or span[0] > last[0]:
                    last = span
    return first, last
