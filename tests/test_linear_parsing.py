"""Every parser of model or server text runs in linear time and bounded memory, and each scanner that replaced a
backtracking regular expression returns exactly what the expression returned (docs/architecture.md, "Model text").

Two kinds of property tests (Hypothesis):

* **Same result.** Each scanner of :mod:`insight_o3.base.text_scan` (and Mini-o3's tool-call match, the rewritten
  multiple-choice and option-line expressions, the ``\\boxed{}`` matcher) against the expression or code it
  replaced, on short random texts made of the tokens that matter to it (short: the old expressions backtrack).
* **Bounded cost.** Each parser — every agent's ``step`` (DeepEyes, Mini-o3, Pixel-Reasoner, OpenSearch-VL, the InSight-o3
  vReasoner in both modes, the vSearcher with both prompts), the judges' span extraction and verdict reading, the
  vSearcher parser and the fork's hermes/format rules, the builder's parsers (E.1 extraction, E.2 reply, item
  validation, letter references), the key redaction every reply goes through — on replies of
  :data:`REPLY_CHARS` characters (the default ``--max_reply_chars``) that repeat a random motif of those tokens
  (periodic text is what makes a backtracking expression blow up), and on the known bombs at the reply body cap.

Bounds, per parse: at most :data:`CPU_S` seconds of CPU at :data:`REPLY_CHARS` characters and :data:`CAP_CPU_S` at
the body cap (measured on a shared 2-core machine: at most 0.15 s and 1.5 s); peak traced memory at most
:data:`MEMORY_FACTOR` times the text's size plus :data:`MEMORY_SLACK` at :data:`REPLY_CHARS` characters (measured: at
most 2.4 times). On the code these tests replaced, the
Mini-o3 bomb (:data:`BOMBS`) took 23 s per round at 7 KB, ``"<answer>" * 40000`` 57 s, unclosed ``\\boxed{`` were
quadratic in Python (300 s at 64 KB), ``answer`` + 400 spaces + ``A!`` 2.5 s (cubic).
"""

from __future__ import annotations

import asyncio
import functools
import re
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from insight_o3.agents import ReasonerSession, SearcherSession, deepeyes, mini_o3, opensearch_vl, pixel_reasoner
from insight_o3.agents.searcher_session import SimpleSearcherSession
from insight_o3.base import text_scan
from insight_o3.base.caps import DEFAULT_MAX_REPLY_CHARS, reply_body_cap
from insight_o3.base.redaction import redact
from insight_o3.evaluation import opensearch_vl_judge
from insight_o3.evaluation.judge import read_verdict
from insight_o3.imaging.images import ImageStore
from insight_o3.o3bench import extraction, letter_refs, validation
from insight_o3.o3bench.extraction import ExtractionFormatError, parse_extraction
from insight_o3.o3bench.letter_refs import remap_letter_refs
from insight_o3.o3bench.records import SourceImage, SourceLayout
from insight_o3.o3bench.synthesis import SynthesisFormatError, parse_reply
from insight_o3.o3bench.validation import check_item, cited_layouts, uncounted_mentions
from insight_o3.o3bench.validation_rules import ValidationRules
from insight_o3.protocol import parsing
from insight_o3.protocol import searcher_rules as rules

#: characters of a generated reply: what a record keeps of one (``--max_reply_chars``' default)
REPLY_CHARS = DEFAULT_MAX_REPLY_CHARS
#: characters of a reply as large as the default reply body cap lets through (ASCII: one byte a character)
CAP_CHARS = reply_body_cap(DEFAULT_MAX_REPLY_CHARS)
CPU_S = 2.0
CAP_CPU_S = 10.0
MEMORY_FACTOR = 24
MEMORY_SLACK = 8 << 20

# ----------------------------------------------------------------------------- the tokens of every grammar
TOKENS = [
    "<answer>", "</answer>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<grounding>", "</grounding>",
    '<grounding>{"bbox_2d": ', '"source": ', "}</grounding>", "'", '"', "\\boxed{", "{", "}", "[", "]", ",", ":",
    "1", "0.5", "-2e3", ".", "_", " ", "\n", "\t", "\u3000", "x", "A", "A.", "(B)", "é", "\u0661",
    "<tool_feedback>", "</tool_feedback>", "NA", "region_description=", "```", "```json\n",
    "## Image Identification", "## Detailed Caption", "## Extracted OCR (if any)", "[layout 1", "layout", "and",
    "answer", "is", "correct", "<correct>", "not", "wrong", "n't", "bearer ", "a.", "://", "@", "?api_key=", "sk-",
    "user\n", "assistant\n", "<|im_end|>", "image_zoom_in_tool", '"name": ', '"arguments": ', '"bbox_2d": ',
]  # fmt: skip


def _repeat(prefix: str, motif: str, suffix: str, size: int) -> str:
    body = motif * max(1, (size - len(prefix) - len(suffix)) // max(1, len(motif)))
    return prefix + body + suffix


# ----------------------------------------------------------------------------- same result as the old expressions
def _text(tokens: list[str], max_size: int = 40) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(tokens), max_size=max_size).map("".join)


TAGS = [("<answer>", "</answer>"), ("<think>", "</think>"), ("<a>", "</a>"), ("ab", "ba"), ("aa", "a")]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(TAGS), st.data())
def test_tag_scanners_are_the_lazy_expressions(tags, data):
    start, end = tags
    text = data.draw(_text([start, end, "a", "b", "x", "\n", start[:-1], end[1:]]))
    lazy = re.escape(start) + "(.*?)" + re.escape(end)
    assert text_scan.tagged_spans(text, start, end) == re.findall(lazy, text, re.DOTALL)
    assert text_scan.has_tagged(text, start, end) == bool(re.search(lazy, text, re.DOTALL))
    assert text_scan.without_tagged(text, start, end) == re.sub(lazy, "", text, flags=re.DOTALL)


@settings(max_examples=300, deadline=None)
@given(_text(["{", "}", "x", "\n", " "]))
def test_outer_braces_is_the_greedy_expression(text):
    m = re.search(r"\{.*\}", text, re.DOTALL)
    assert text_scan.outer_braces(text) == (m.group(0) if m else None)


_OLD_BOX_LIST = re.compile(rf"\[\s*({text_scan.NUMBER})\s*,\s*({text_scan.NUMBER})\s*,\s*({text_scan.NUMBER})\s*,"
                           rf"\s*({text_scan.NUMBER})\s*\]")  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(_text(["[", "]", ",", " ", "\u3000", "1", "23", ".", "-", "+", "e", "E", "5", "\u0661", "x"]))
def test_box_lists_is_the_expression(text):
    assert text_scan.box_lists(text) == _OLD_BOX_LIST.findall(text)
    m = _OLD_BOX_LIST.search(text)
    assert text_scan.box_lists(text, first=True) == ([m.groups()] if m else [])


def _old_boxed_contents(text: str) -> list[str]:
    """The scan the boxed matcher replaced (forward from every ``\\boxed{``: quadratic)."""
    out = []
    for m in re.finditer(r"\\boxed\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            out.append(text[m.end() : i - 1].strip())
    return out


@settings(max_examples=300, deadline=None)
@given(_text(["\\boxed{", "{", "}", "x", " ", "\\boxed", "\\"]))
def test_boxed_matcher_is_the_old_scan(text):
    old = _old_boxed_contents(text)
    assert parsing.first_boxed(text) == (old[0] if old else None)
    assert parsing.extract_boxed(text) == (old[-1] if old else None)


@settings(max_examples=1000, deadline=None)
@given(_text(['<grounding>{"bbox_2d": ', '"source": ', "}</grounding>", "'", '"', ",", "x", "<grounding>", "\n"], 16))
@example('\'}</grounding><grounding>{"bbox_2d": ,"source": "source": ')  # a search bound below 0
def test_mini_o3_call_match_is_the_release_regex(text):
    m = re.match(mini_o3.CALL_PATTERN, text, re.DOTALL)
    assert mini_o3.call_match(text) == (m.groups() if m else None)


_OLD_MCQ = re.compile(
    r"^(?:the\s+)?(?:final\s+)?(?:answer|option|choice)\s*(?:is)?\s*[:：]?\s*\(?([A-Z])\)?[.)]?$", re.I
)
_OLD_OPTION_LINE = re.compile(r"^\s*\(?([A-Z])\s*[.)\]:]", re.MULTILINE)


@settings(max_examples=300, deadline=None)
@given(_text(["the ", "final ", "answer", "option", "is", ":", "：", " ", "\n", "\u3000", "A", "b", "(", ")", "."], 12))
def test_mcq_form_is_the_old_expression(text):
    new = parsing._MCQ_FORMS[1].match(text)
    old = _OLD_MCQ.match(text)
    assert (new.group(1) if new else None) == (old.group(1) if old else None)


@settings(max_examples=300, deadline=None)
@given(_text(["A", "B", ".", ")", "(", "]", ":", " ", "\n", "\u3000", "x"], 24))
def test_option_lines_are_the_old_expression(text):
    assert parsing._OPTION_LINES.findall(text) == _OLD_OPTION_LINE.findall(text)


# ----------------------------------------------------------------------------- the parsers and their cost
@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("linear") / "img.png"
    Image.new("RGB", (640, 480), (30, 60, 90)).save(p)
    return p


@pytest.fixture(scope="module")
def store():
    s = ImageStore(fmt="PNG", workers=1)
    yield s
    s.close()


SOURCE = SourceImage(
    "chart/img", "chart", "img.png", 640, 480,
    [SourceLayout(1, (0.0, 0.0, 10.0, 10.0), "text"), SourceLayout(2, (10.0, 10.0, 30.0, 30.0), "text")],
)  # fmt: skip


def _item(text: str) -> dict:
    """An E.2 item whose every field is the hostile text (the options as six lines of it)."""
    opts = "\n".join(f"{c}. {text}" for c in "ABCDE") + "\nF. No right choice"
    return {"question": text, "options": opts, "answer": "A", "explanation": text}


def _parsers(image: Path, store: ImageStore) -> dict[str, Callable[[str], object]]:
    img = str(image)

    def searcher(cls, text):
        return cls(img, "the sign", store, 200 * 28 * 28).step(text, "stop")

    def tolerant(fn, *errors):
        def run(text):
            try:
                return fn(text)
            except errors:
                return None

        return run

    return {
        "deepeyes.step": lambda t: deepeyes.DeepEyesSession("q", "A. a", img, (640, 480)).step(t, "stop"),
        "mini_o3.step": lambda t: mini_o3.MiniO3Session("q", "A. a", img, (640, 480)).step(t, "stop"),
        "pixel_reasoner.step": lambda t: pixel_reasoner.PixelReasonerSession("q", None, img, (640, 480)).step(t),
        "opensearch_vl.step": lambda t: opensearch_vl.OpenSearchVLSession("q", None, img, (640, 480)).step(t),
        "vreasoner.step(infer)": lambda t: ReasonerSession(img, "q", store).step(t),
        "vreasoner.step(train)": lambda t: ReasonerSession(img, "q", store, mode="train").step(t),
        "vsearcher.step": functools.partial(searcher, SearcherSession),
        "vsearcher.step(simple)": functools.partial(searcher, SimpleSearcherSession),
        "judge.extract_answer_span": parsing.extract_answer_span,
        "judge.extract_verify_span": parsing.extract_verify_span,
        "judge.read_verdict": read_verdict,
        "judge.mcq_letter": lambda t: parsing.mcq_letter(t, "ABCDEF"),
        "opensearch_vl_judge.extract_final_answer": opensearch_vl_judge.extract_final_answer,
        "opensearch_vl_judge.parse_verdict": opensearch_vl_judge.parse_verdict,
        "parse_searcher_turn": parsing.parse_searcher_turn,
        "parse_searcher_turn(simple)": lambda t: parsing.parse_searcher_turn(t, simple_prompt=True),
        "parse_reasoner_turn": parsing.parse_reasoner_turn,
        "hermes_tool_calls": rules.hermes_tool_calls,
        "final_answer_box": rules.final_answer_box,
        "format_verdict": lambda t: rules.format_verdict(rules.split_responses(t), (640, 480)),
        "builder.parse_extraction": tolerant(parse_extraction, ExtractionFormatError),
        "builder.parse_reply": tolerant(lambda t: asyncio.run(parse_reply(t)), SynthesisFormatError),
        "builder.check_item": lambda t: check_item(_item(t), SOURCE, "img-0"),
        "builder.cited_layouts": cited_layouts,
        "builder.uncounted_mentions": uncounted_mentions,
        "builder.remap_letter_refs": lambda t: remap_letter_refs(t, {"A": "B", "B": "A"}),
        "redact": redact,
    }


PARSER_NAMES = list(_parsers(Path("x"), None).keys())  # type: ignore[arg-type]


def _cpu(fn: Callable[[str], object], text: str) -> float:
    """CPU seconds of one parse (CPU time: other jobs on the machine do not count)."""
    t0 = time.process_time()
    fn(text)
    return time.process_time() - t0


def _peak(fn: Callable[[str], object], text: str) -> int:
    """Peak traced bytes of one parse (a second run: tracing slows allocations, not what the time bound measures)."""
    tracemalloc.start()
    try:
        fn(text)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _check_bounds(name: str, fn: Callable[[str], object], text: str, cpu_bound: float) -> None:
    cpu = _cpu(fn, text)
    assert cpu <= cpu_bound, f"{name}: {cpu:.2f} s CPU on {len(text)} characters ({text[:80]!r}...)"
    # the builder's item check reads 7 fields of the text (question, 5 options, explanation)
    copies = 7 if name.startswith("builder.check_item") else 1
    peak, bound = _peak(fn, text), MEMORY_FACTOR * copies * sys.getsizeof(text) + MEMORY_SLACK
    assert peak <= bound, f"{name}: {peak / 2**20:.0f} MiB on {len(text)} characters ({text[:80]!r}...)"


@pytest.mark.parametrize("name", PARSER_NAMES)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prefix=st.lists(st.sampled_from(TOKENS), max_size=3).map("".join),
    motif=st.lists(st.sampled_from(TOKENS), min_size=1, max_size=6).map("".join),
    suffix=st.lists(st.sampled_from(TOKENS), max_size=3).map("".join),
)
def test_parser_is_linear_on_periodic_replies(name, image, store, prefix, motif, suffix):
    fn = _parsers(image, store)[name]
    _check_bounds(name, fn, _repeat(prefix, motif, suffix, REPLY_CHARS), CPU_S)


#: replies that were bombs for a backtracking parser, and their kin: (prefix, motif, suffix) and the parsers each was a bomb for
BOMBS = {
    "mini_o3": (("<grounding>x</grounding>", '<grounding>{"bbox_2d": ,"source": "', ""), ["mini_o3.step"]),
    "unclosed answer": (("", "<answer>", ""), ["judge.extract_answer_span", "mini_o3.step", "vsearcher.step"]),
    "unclosed boxed": (("", "\\boxed{", ""), ["judge.extract_answer_span", "judge.extract_verify_span"]),
    "braces": (("<tool_call>", "x{", "</tool_call>"), ["vsearcher.step"]),
    "digits in a box list": (("<think>a</think>[", "1", ""), ["vsearcher.step(simple)"]),
    "unclosed think": (("", "<think>", "<answer>[1, 2, 3, 4]</answer>"), ["vsearcher.step"]),
    "unclosed tool call": (("</tool_call>", "<tool_call>", ""), ["hermes_tool_calls", "vsearcher.step"]),
    "spaces after answer": (("answer", " ", "A!"), ["judge.mcq_letter"]),
    "fence of newlines": (("```\n", "\n", "x```"), ["builder.parse_extraction"]),
    "heading spaces": (("## Image Identification", " ", "x"), ["builder.parse_extraction"]),
    "layout spaces": (("[layout", " ", "x"), ["builder.cited_layouts", "builder.uncounted_mentions"]),
    # the builder's item rules and letter references read validated fields (at most 20,000 characters): bombs at
    # the reply size only
    "letter list spaces": (("option A,", " ", "x"), []),
    "labels and forms": (("", "(A) B ", ""), []),
    "allowed phrases": (("", "solar panel ", "layout"), []),
}


@pytest.mark.parametrize("bomb", list(BOMBS))
def test_known_bombs_every_parser(bomb, image, store):
    """Each bomb at the reply size, through every parser."""
    (prefix, motif, suffix), _ = BOMBS[bomb]
    text = _repeat(prefix, motif, suffix, REPLY_CHARS)
    for name, fn in _parsers(image, store).items():
        _check_bounds(f"{name} on {bomb}", fn, text, CPU_S)


@pytest.mark.parametrize("bomb, name", [(b, n) for b, (_, names) in BOMBS.items() for n in names])
def test_known_bombs_at_the_body_cap(bomb, name, image, store):
    """Each bomb at the reply body cap, through the parsers it was a bomb for: the time bound (the memory bound is
    checked at the reply size above; tracing a 5 MB parse takes ten times as long)."""
    (prefix, motif, suffix), _ = BOMBS[bomb]
    text = _repeat(prefix, motif, suffix, CAP_CHARS)
    cpu = _cpu(_parsers(image, store)[name], text)
    assert cpu <= CAP_CPU_S, f"{name} on {bomb}: {cpu:.2f} s CPU on {len(text)} characters"


# ----------------------------------------------------------------------------- the builder's rewritten expressions
_OLD_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n(.*)\n\s*```\s*$", re.DOTALL)
_OLD_HEADING = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*|__)?[ \t]*(image identification|detailed caption|extracted ocr)"
    r"(?:[ \t]*\(if any\))?[ \t]*:?[ \t]*(?:\*\*|__)?[ \t]*:?[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)


@settings(max_examples=300, deadline=None)
@given(_text(["```", "json", "x", "\n", " ", "\t", "\u3000", "`"], 14))
def test_unfenced_is_the_old_expression(text):
    text = text.strip()
    m = _OLD_FENCE.match(text)
    assert extraction.unfenced(text) == (m.group(1) if m else None)


@settings(max_examples=300, deadline=None)
@given(_text(["## ", "#", "**", "__", " ", "\t", ":", "(if any)", "(IF ANY)", "Detailed Caption", "\n", "x"], 14))
def test_heading_is_the_old_expression(text):
    assert [m.span(1) for m in extraction._HEADING.finditer(text)] == [m.span(1) for m in _OLD_HEADING.finditer(text)]


_OLD_LAYOUT = r"layouts?(?:_id)?\s*[:#]?\s*"
_OLD_CITATION = re.compile(
    rf"\[\s*((?:{_OLD_LAYOUT})\d+(?:\s*(?:,|;|&|\band\b)\s*(?:{_OLD_LAYOUT})?\d+)*)\s*\]", re.IGNORECASE
)
_OLD_MENTION = re.compile(rf"\b{_OLD_LAYOUT}\d+", re.IGNORECASE)


@settings(max_examples=300, deadline=None)
@given(_text(["[", "]", "layout", "Layouts", "_id", " ", ":", "#", "1", "23", ",", "and", "(", "x", "\n"], 16))
def test_citation_expressions_are_the_old_ones(text):
    assert [m.groups() for m in validation._CITATION.finditer(text)] == [
        m.groups() for m in _OLD_CITATION.finditer(text)
    ]
    assert [m.span() for m in validation._MENTION.finditer(text)] == [m.span() for m in _OLD_MENTION.finditer(text)]
    old: list[int] = []
    for m in _OLD_CITATION.finditer(text):
        old += [int(n) for n in re.findall(r"\d+", m.group(1)) if int(n) not in old]
    assert cited_layouts(text) == list(dict.fromkeys(old))


_OLD_SEP = r"\s*(?:,\s*(?:and\s+|or\s+)?|\band\b|\bor\b|/|&)\s*"


@settings(max_examples=300, deadline=None)
@given(
    _text(["option", "options", "answer", " ", "is", ":", ",", "and", "or", "/", "&", "A", "(B)", "C)", "-", "x"], 14)
)
def test_letter_forms_are_the_old_ones(text):
    old = re.compile("|".join(f"(?P<{n}>{p.replace(letter_refs._SEP, _OLD_SEP)})" for n, p, _ in letter_refs.FORMS))
    assert [(m.span(), m.lastgroup) for m in letter_refs._FORM.finditer(text)] == [
        (m.span(), m.lastgroup) for m in old.finditer(text)
    ]


def _old_forbidden_word(rules: ValidationRules, text: str, image_text: str) -> str | None:
    """The check :meth:`ValidationRules.forbidden_word` replaced (a scan of every allowed span per word, and of the
    text's head per word: quadratic)."""
    allowed = [m.span() for p in rules._allowed for m in p.finditer(text)]
    for m in rules._forbidden.finditer(text):  # type: ignore[union-attr]
        if any(a <= m.start() and m.end() <= b for a, b in allowed):
            continue
        pairs = []
        before = re.search(r"([\w'-]+)\s+$", text[: m.start()])
        after = re.match(r"^\s+([\w'-]+)", text[m.end() :])
        if before:
            pairs.append((before.group(1), m.group(0)))
        if after:
            pairs.append((m.group(0), after.group(1)))
        if image_text and any(
            re.search(r"(?<![\w])" + re.escape(a) + r"\s+" + re.escape(b) + r"(?![\w])", image_text, re.IGNORECASE)
            for a, b in pairs
        ):
            continue
        return m.group(0)
    return None


_RULE_TOKENS = ["layout", "Panel", "panel", "crop", "yield", "solar", " ", "-", "\n", "A", "B", "'s", "x", "\u3000"]


@settings(max_examples=300, deadline=None)
@given(_text(_RULE_TOKENS, 12), _text(_RULE_TOKENS, 12))
def test_forbidden_word_is_the_old_check(text, image_text):
    rules = ValidationRules()
    assert rules.forbidden_word(text, image_text) == _old_forbidden_word(rules, text, image_text)
