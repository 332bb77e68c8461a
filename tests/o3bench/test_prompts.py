"""The O3-Bench construction prompts (E.1, E.2) are the paper's text with only its rendering damage repaired:
each constant is rebuilt here from the paper and the listed repairs (the same list as docs/fidelity.md), and its
sha256 is pinned so any later change is a visible, deliberate one."""

from __future__ import annotations

import hashlib
import json

import pytest

from insight_o3.o3bench import prompts as P

pytestmark = pytest.mark.smoke

BT = "\u2018"  # the paper renders every backtick as a left single quote
#: (old, new, expected count) in order, per prompt: exactly the repairs docs/fidelity.md lists.
REPAIRS = {
    "EXTRACTION_PROMPT": [
        (BT, "`", 49),
        (
            "\nchart`, table`, document/text page`, diagram/flowchart`, map`, UI/screenshot`, form`, invoice/receipt`, "
            "poster/flyer`, scientific figure (multi-panel)`, natural scene`, legend`, infographic`, other (specify)`.",
            "\n`chart`, `table`, `document/text page`, `diagram/flowchart`, `map`, `UI/screenshot`, `form`, "
            "`invoice/receipt`, `poster/flyer`, `scientific figure (multi-panel)`, `natural scene`, `legend`, "
            "`infographic`, `other (specify)`.",
            1,
        ),
        ("as Table 1`, Table 2`,", "as `Table 1`, `Table 2`,", 1),
        ("write None`.", "write `None`.", 1),
        ('``a red sign above the doorway"', '"a red sign above the doorway"', 1),
    ],
    "CHART_SYNTHESIS_PROMPT": [
        (BT, "`", 23),
        ("todays", "today's", 1),
        ("or caption_or_ocr`.", "or `caption_or_ocr`.", 1),
        (
            "mention layout_id`, region`, crop`, panel`, box`,",
            "mention `layout_id`, `region`, `crop`, `panel`, `box`,",
            1,
        ),
        ("labeled A.` ... F.`", "labeled `A.` ... `F.`", 1),
        ("2. F.` must always be exactly No right choice`.", "2. `F.` must always be exactly `No right choice`.", 1),
        ("among A.`-`E.`;", "among `A.`-`E.`;", 1),
        ("chain**: Step 1: ...`, Step 2: ...`, etc.", "chain**: `Step 1: ...`, `Step 2: ...`, etc.", 1),
    ],
    "MAP_SYNTHESIS_PROMPT": [
        (BT, "`", 18),
        ("todays", "today's", 1),
        ("maps own", "map's own", 1),
        ("or caption_or_ocr`.", "or `caption_or_ocr`.", 1),
        (
            "mention layout_id`, region`, crop`, box`, panel`,",
            "mention `layout_id`, `region`, `crop`, `box`, `panel`,",
            1,
        ),
        ("labeled A.` ... F.`.", "labeled `A.` ... `F.`.", 1),
        ("2. F.` must always be No right choice`.", "2. `F.` must always be `No right choice`.", 1),
    ],
}
#: Where each prompt is in the paper's text: its first line's start and its whole last line.
SPANS = {
    "EXTRACTION_PROMPT": (
        "### System",
        '<EITHER: full Markdown tables + remaining text in reading order; OR: all non-table text in reading order; '
        'write "None" if no text>',
    ),
    "CHART_SYNTHESIS_PROMPT": ("You are an expert assessment-item author", BT * 3),
    "MAP_SYNTHESIS_PROMPT": ("You are an expert evaluation-item author", BT * 3),
}
SHA256 = {
    "EXTRACTION_PROMPT": "3fde7158480f7e162cf93e89869d9ba89c44bcef14028ebb69fe47655cff39d2",
    "CHART_SYNTHESIS_PROMPT": "3bac0d55fe8f70a2925a43d3da6698323f401f94cc820664c715f38e02db958a",
    "MAP_SYNTHESIS_PROMPT": "7fc3bcc8f0ffcbcb51e25688e56e7f5cd6a6f27adec7e8eec1bade566cbcbdae",
}


def paper_text(lines: list[str], first: str, last: str) -> str:
    start = next(i for i, ln in enumerate(lines) if ln.startswith(first))
    end = next(i for i in range(start + 1, len(lines)) if lines[i] == last)
    return "\n".join(lines[start : end + 1])


@pytest.mark.parametrize("name", sorted(REPAIRS))
def test_each_prompt_is_the_papers_text_with_only_the_listed_repairs(name, reference_text):
    paper = reference_text("seeds", "insight_o3_paper.txt")
    text = paper_text(paper.read_text(encoding="utf-8").split("\n"), *SPANS[name])
    for old, new, count in REPAIRS[name]:
        assert text.count(old) == count, (name, old)
        text = text.replace(old, new)
    assert getattr(P, name) == text


@pytest.mark.parametrize("name", sorted(SHA256))
def test_prompts_are_pinned(name):
    assert hashlib.sha256(getattr(P, name).encode("utf-8")).hexdigest() == SHA256[name]
    assert P.prompt_hashes()[name] == SHA256[name]


def test_no_rendering_damage_is_left():
    for name in SHA256:
        text = getattr(P, name)
        assert BT not in text and "todays" not in text and "``a red" not in text
        for line in text.split("\n"):  # inline code comes in pairs (the ``` fences are the exception)
            if not line.startswith("```"):
                assert line.count("`") % 2 == 0, (name, line)


def test_synthesis_prompt_fills_the_three_inputs_and_keeps_the_json_example():
    layouts = json.dumps([{"layout_id": 1, "caption_or_ocr": "a {weird} label"}])
    for subset in ("chart", "map"):
        text = P.synthesis_prompt(subset, "OCR text {x}", "A caption", layouts)
        assert "OCR text {x}" in text and "A caption" in text and "a {weird} label" in text
        assert "{GLOBAL_OCR}" not in text and "{{" not in text
        example = text.split("```json\n", 1)[1].split("\n```", 1)[0].replace(",\n...\n", "\n")
        parsed = json.loads(example)  # the example the model copies is valid JSON once filled
        assert parsed[0]["options"].endswith("F. No right choice")
    with pytest.raises(ValueError, match="no synthesis prompt"):
        P.synthesis_prompt("poster", "", "", "[]")
