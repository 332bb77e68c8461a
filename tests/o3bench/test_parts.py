"""The pure parts of the O3-Bench build: the PaddleX layout reader, the E.1 section parser, the E.2 input and
array parser, the validator (one case per rejection reason), the decisions file, the option shuffle and the
release statistics."""

from __future__ import annotations

import asyncio
import json

import pytest
from PIL import Image

from insight_o3.base.untrusted import UntrustedJSONError, loads_repaired
from insight_o3.o3bench import review, sources, synthesis
from insight_o3.o3bench.extraction import Extraction, ExtractionFormatError, parse_extraction, tasks_for
from insight_o3.o3bench.letter_refs import remap_letter_refs
from insight_o3.o3bench.records import BenchItem, SourceImage
from insight_o3.o3bench.release import release_stats, shuffle_options
from insight_o3.o3bench.validation import REASONS, check_item, cited_layouts, f_share
from insight_o3.scripts import build_o3_bench
from tests.support.o3bench_items import GOOD, items, source

pytestmark = pytest.mark.smoke

# ------------------------------------------------------------------------------------------- layouts
#: PaddleOCR's documented output of LayoutDetection(model_name="PP-DocLayout_plus-L") on its layout.jpg (first 3)
DOC_EXAMPLE = {
    "input_path": "layout.jpg",
    "page_index": None,
    "boxes": [
        {
            "cls_id": 2,
            "label": "text",
            "score": 0.9870226979255676,
            "coordinate": [34.101906, 349.85275, 358.59213, 611.0772],
        },
        {
            "cls_id": 8,
            "label": "table",
            "score": 0.984126091003418,
            "coordinate": [73.76879, 105.94899, 321.95303, 298.84888],
        },
        {
            "cls_id": 6,
            "label": "figure_title",
            "score": 0.9577341079711914,
            "coordinate": [34.421448, 20.055151, 358.71283, 76.53663],
        },
    ],
}


def image(path, size=(720, 900)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (250, 250, 250)).save(path)
    return path


def test_reads_the_detectors_result_json_as_saved(tmp_path):
    image(tmp_path / "img" / "layout.jpg")
    (tmp_path / "lay").mkdir()
    (tmp_path / "lay" / "layout_res.json").write_text(json.dumps(DOC_EXAMPLE, indent=4))
    kept, skipped = sources.collect(sources.SourceSpec("chart", str(tmp_path / "img"), str(tmp_path / "lay"), 3))
    assert skipped == [] and len(kept) == 1
    s = kept[0]
    assert s.key == "chart/layout" and (s.width, s.height) == (720, 900)
    assert [lay.layout_id for lay in s.layouts] == [1, 2, 3]  # the file's order
    assert [lay.label for lay in s.layouts] == ["text", "table", "figure_title"]
    assert s.layouts[1].bbox == pytest.approx((73.76879, 105.94899, 321.95303, 298.84888))
    assert s.layout_infos()["2"] == {"layout_id": 2, "bbox": [73.77, 105.95, 321.95, 298.85], "label": "table"}


@pytest.mark.parametrize(
    "wrap",
    [
        lambda r: {"res": r},  # res.json / the printed form
        lambda r: {"input_path": r["input_path"], "page_index": None, "layout_det_res": {**r, "input_path": None}},
    ],
    ids=["res", "pp_structure_v3"],
)
def test_reads_the_wrapped_forms(tmp_path, wrap):
    image(tmp_path / "img" / "layout.jpg")
    (tmp_path / "one.json").write_text(json.dumps(wrap(DOC_EXAMPLE)))
    kept, _ = sources.collect(sources.SourceSpec("map", str(tmp_path / "img"), str(tmp_path / "one.json"), 2))
    assert [lay.label for lay in kept[0].layouts] == ["text", "table", "figure_title"]


def test_rotated_boxes_become_their_bounds_and_min_score_filters(tmp_path):
    image(tmp_path / "img" / "a.png")
    rot = {"cls_id": 16, "label": "chart", "score": 0.3, "coordinate": [10, 20, 110, 25, 105, 90, 5, 85]}
    res = {"input_path": "/elsewhere/a.png", "page_index": None, "boxes": [*DOC_EXAMPLE["boxes"], rot]}
    (tmp_path / "a.jsonl").write_text(json.dumps(res) + "\n")
    spec = sources.SourceSpec("chart", str(tmp_path / "img"), str(tmp_path / "a.jsonl"), 1)
    kept, _ = sources.collect(spec)
    assert kept[0].layouts[-1].bbox == (5.0, 20.0, 110.0, 90.0)
    kept, _ = sources.collect(spec, min_score=0.5)
    assert [lay.label for lay in kept[0].layouts] == ["text", "table", "figure_title"]


def test_images_are_skipped_with_a_reason(tmp_path):
    image(tmp_path / "img" / "few.png")
    image(tmp_path / "img" / "none.png")
    (tmp_path / "lay").mkdir()
    (tmp_path / "lay" / "few_res.json").write_text(json.dumps({**DOC_EXAMPLE, "input_path": "few.png"}))
    kept, skipped = sources.collect(sources.SourceSpec("chart", str(tmp_path / "img"), str(tmp_path / "lay"), 8))
    assert kept == []
    assert {s["image"].rsplit("/", 1)[1]: s["reason"] for s in skipped} == {
        "few.png": "3 layouts < 8 (--min_layouts)",
        "none.png": "no layout result",
    }


@pytest.mark.parametrize(
    "change, message",
    [
        ({"page_index": 3}, "page 3 of a PDF"),
        ({"boxes": None}, "no 'boxes' list"),
        ({"input_path": None}, "field 'input_path' is missing"),
        ({"boxes": [{"label": "text", "score": 1, "coordinate": [0, 0, 2000, 10]}]}, "boxes[0]: box"),
        ({"boxes": [{"label": "text", "score": 1, "coordinate": [5, 5, 2]}]}, "must be 4 numbers"),
    ],
)
def test_bad_layout_files_are_bad_input_naming_file_and_box(tmp_path, capsys, change, message):
    image(tmp_path / "img" / "layout.jpg")
    (tmp_path / "lay").mkdir()
    (tmp_path / "lay" / "layout_res.json").write_text(json.dumps({**DOC_EXAMPLE, **change}))
    argv = ["sources", "--output_dir", str(tmp_path / "ws"), "--chart_images", str(tmp_path / "img")]
    rc = build_o3_bench.main([*argv, "--chart_layouts", str(tmp_path / "lay")])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "layout_res.json" in err, err


def test_detect_without_paddleocr_is_a_clear_error(tmp_path, capsys):
    image(tmp_path / "img" / "a.png")
    rc = build_o3_bench.main(
        ["sources", "--output_dir", str(tmp_path), "--chart_images", str(tmp_path / "img"), "--detect"]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "--detect: the layout detector needs PaddleOCR" in err and "'layout' extra" in err


# ------------------------------------------------------------------------------------------- E.1
E1_REPLY = """## Image Identification
`chart`, `legend`
## Detailed Caption
A bar chart titled "Sales".
## Extracted OCR (if any)
| Year | Sales |
|---|---|
| 2020 | 3 |
## Detailed Caption
(a heading-like line inside the OCR text stays OCR)"""


def test_e1_reply_is_split_into_its_three_sections():
    ex = parse_extraction(E1_REPLY)
    assert ex.identification == "`chart`, `legend`"
    assert ex.caption == 'A bar chart titled "Sales".'
    assert ex.ocr.startswith("| Year | Sales |") and ex.ocr.endswith("stays OCR)")
    assert ex.has_text


@pytest.mark.parametrize(
    "reply",
    [
        "**Image Identification:**\nmap\n\n### Detailed Caption\nA map.\n\n# Extracted OCR\nNone",
        "```markdown\n## Image Identification\nmap\n## Detailed Caption\nA map.\n## Extracted OCR (if any)\nNone\n```",
        "## IMAGE IDENTIFICATION\nmap\n## detailed caption:\nA map.\n## Extracted OCR (if any)\n",
    ],
)
def test_e1_heading_variants(reply):
    ex = parse_extraction(reply)
    assert (ex.identification, ex.caption, ex.ocr, ex.has_text) == ("map", "A map.", "None", False)


@pytest.mark.parametrize(
    "reply, message",
    [
        ("A chart with bars.", "missing section(s): '## Image Identification', '## Detailed Caption'"),
        ("## Image Identification\nchart\n## Extracted OCR (if any)\nx", "missing section(s): '## Detailed Caption'"),
        ("## Detailed Caption\nx\n## Image Identification\nchart\n## Extracted OCR\nx", "out of order"),
        ("## Image Identification\nchart\n## Detailed Caption\n\n## Extracted OCR\nx", "empty section '## Detailed"),
        (None, "missing section"),
    ],
)
def test_e1_replies_without_the_sections_are_errors(reply, message):
    with pytest.raises(ExtractionFormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_extraction(reply)


def test_e1_tasks_are_the_full_image_then_each_layout():
    keys = [t.sample_key for t in tasks_for([source(2)])]
    assert keys == ["chart/img#full", "chart/img#L1", "chart/img#L2"]


# ------------------------------------------------------------------------------------------- E.2
def test_e2_inputs_never_include_the_image_and_carry_every_layout():
    full = Extraction("chart", "Four panels.", "Title 2020")
    per = {
        1: Extraction("chart", "Bars.", "A 1"),
        2: Extraction("chart", "Blank.", "None"),
        3: Extraction("t", "c", "x"),
    }
    s = source(3)
    text = synthesis.build_prompt(s, full, per, "both")
    layouts = json.loads(text.split("caption of the cropped region.\n", 1)[1].split("\n> **Important", 1)[0])
    assert layouts == [
        {"layout_id": 1, "caption_or_ocr": "Bars.\nOCR: A 1"},
        {"layout_id": 2, "caption_or_ocr": "Blank."},
        {"layout_id": 3, "caption_or_ocr": "c\nOCR: x"},
    ]
    assert "Title 2020" in text and "Four panels." in text and "data:image" not in text
    assert synthesis.layout_text(per[1], "ocr") == "A 1" and synthesis.layout_text(per[2], "ocr") == "Blank."
    assert synthesis.layout_text(per[1], "caption") == "Bars."
    with pytest.raises(ValueError, match=r"no extraction for layout\(s\) \[3\]"):
        synthesis.build_prompt(s, full, {1: per[1], 2: per[2]})


@pytest.mark.parametrize(
    "reply",
    [
        '```json\n[{"question": "q"}]\n```',
        '[{"question": "q"}]',
        'Here you go:\n[{"question": "q"}]\nGood luck!',
        'Notes first.\n```\n[{"question": "q"}]\n```',
    ],
)
def test_e2_reply_array_is_found(reply):
    assert asyncio.run(synthesis.parse_items(reply)) == [{"question": "q"}]


@pytest.mark.parametrize(
    "reply, message",
    [("", "empty reply"), ("no json here", "no JSON array"), ("[]", "empty"), ('{"question": "q"}', "no JSON array")],
)
def test_e2_reply_without_an_array_is_an_error(reply, message):
    with pytest.raises(synthesis.SynthesisFormatError, match=message):
        asyncio.run(synthesis.parse_items(reply))


TRAILING = '```json\n[\n {"question": "q", "answer": "C",},\n {"question": "r",},\n]\n```'


def _parse(reply: str) -> synthesis.ParsedReply:
    return asyncio.run(synthesis.parse_reply(reply))


def test_e2_reply_valid_but_for_trailing_commas_is_repaired_and_the_repair_is_said():
    assert _parse('[{"question": "q"}]').repair is None
    parsed = _parse(TRAILING)
    assert parsed.items == [{"question": "q", "answer": "C"}, {"question": "r"}]
    rep = parsed.repair.to_dict()
    assert rep["error"] == "Expecting property name enclosed in double quotes at line 2 column 34"
    assert rep["library"].startswith("json-repair 0.") and isinstance(rep["actions"], list)
    # other benign damage: single quotes, a comment, a missing comma between objects
    for damaged in ("[{'question': 'q'}]", '[{"question": "q"} // one\n]', '[{"question": "q"} {"question": "r"}]'):
        assert _parse(damaged).items[0] == {"question": "q"}, damaged
        assert _parse(damaged).repair is not None


@pytest.mark.parametrize(
    "reply, message",
    [
        ('[{"question": "q", "options": "A. x', "no JSON array"),  # cut off: asked again, never completed
        ("I cannot write questions about [layout 3], sorry.", "no JSON array"),  # prose in brackets: asked again
        ("Here: ['a', 'b',]", "no JSON array"),  # repaired, but not an array of objects
        ('[{"b": 1,}, ' + "[" * 5000 + "1" + "]" * 5000 + "]", "no JSON array"),  # a bomb stays a failure
        ('[{"a": ' + "[" * 150 + "1" + "]" * 150 + ",}]", "no JSON array"),  # repaired, but nested past the bound
        ("[" * 150 + "1" + "]" * 150, "no JSON array"),  # valid JSON beyond the bound: not repaired either
        ('[{"b": 1,}, {"a": 1' + "0" * 400 + "}]", "no JSON array"),  # an integer past the bound
        ("[" + '{"q": 1,},' * 30_000 + "]", "no JSON array"),  # too long to repair
    ],
)
def test_a_repair_stays_bounded(reply, message):
    with pytest.raises(synthesis.SynthesisFormatError, match=message):
        _parse(reply)


@pytest.mark.parametrize(
    "text, why",
    [
        ('[{"b": 1,}, ' + "[" * 5000 + "1" + "]" * 5000 + "]", "cannot be repaired"),
        ('[{"a": ' + "[" * 150 + "1" + "]" * 150 + ",}]", "the repaired value is out of bounds: nested more than 100"),
        ("[" * 150 + "1" + "]" * 150, "^nested more than 100 levels deep"),
        ('[{"b": 1,}, {"a": 1' + "0" * 400 + "}]", "out of bounds: an integer of 401 digits"),
        ("[" + '{"q": 1,},' * 30_000 + "]", "not repaired: longer than 200000 characters"),
    ],
)
def test_repaired_json_is_held_to_the_bounds_of_strict_json(text, why):
    with pytest.raises(UntrustedJSONError, match=why):
        loads_repaired(text)


#: one item per rejection reason, in the order of REASONS
BAD = {
    "malformed": {k: v for k, v in GOOD.items() if k != "answer"},
    "six_options": {**GOOD, "options": "A. Oslo\nB. Rome\nC. Lima\nD. Kyiv\nF. No right choice"},
    "f_last": {**GOOD, "options": GOOD["options"].replace("No right choice", "None of the above")},
    "answer_letter": {**GOOD, "answer": "C."},
    "forbidden_word": {**GOOD, "question": "In the top-left panel, which city is larger?"},
    "unknown_layout": {**GOOD, "explanation": "Step 1 [layout 3] Step 2 [layout 7]"},
    "too_few_layouts": {**GOOD, "explanation": "Step 1 [layout 3] Step 2 [layout 3]"},
}


def test_a_valid_item_gets_its_target_layouts_from_the_citations():
    v = check_item(GOOD, source(4), "chart/img#q0")
    assert v.ok and v.item is not None
    assert v.item.target_layouts == [1, 3] and v.item.item_id == "chart/img#q0" and v.item.image_key == "chart/img"
    assert v.item.options == GOOD["options"] and v.item.origin == "synthesized"


@pytest.mark.parametrize("reason", REASONS)
def test_one_case_per_rejection_reason(reason):
    v = check_item(BAD[reason], source(4), "x")
    assert (v.ok, v.reason) == (False, reason)
    assert v.detail and "\n" not in v.detail


def test_rejection_details_name_what_is_wrong():
    details = {r: check_item(BAD[r], source(4), "x").detail for r in REASONS}
    assert details["malformed"] == "field 'answer' is missing, empty or not text"
    assert details["six_options"] == "5 options, not six (A-F, one per line)"
    assert "None of the above" in details["f_last"]
    assert details["answer_letter"] == "the answer must be one letter A-F, got 'C.'"
    assert details["forbidden_word"] == "the question mentions 'panel'"
    assert details["unknown_layout"] == "the explanation cites layout 7, not one of 1, 2, 3, 4"
    assert details["too_few_layouts"] == "the explanation cites 1 distinct layout(s), needs 2"
    assert check_item("a string", source(), "x").reason == "malformed"
    opt = check_item({**GOOD, "options": GOOD["options"].replace("C. Lima", "C. the crop on the left")}, source(4), "x")
    assert (opt.reason, opt.detail) == ("forbidden_word", "option C mentions 'crop'")
    assert check_item(
        {**GOOD, "options": "A. a\nB. b\nX. c\nD. d\nE. e\nF. No right choice"}, source(4), "x"
    ).detail == ("option line 3 is not labelled 'C. ': 'X. c'")


def test_normalisation_before_the_rules():
    lst = {**GOOD, "options": GOOD["options"].split("\n")}
    escaped = {**GOOD, "options": GOOD["options"].replace("\n", "\\n"), "answer": " C "}
    for raw in (lst, escaped):
        v = check_item(raw, source(4), "x")
        assert v.ok and v.item.options == GOOD["options"] and v.item.answer == "C"
    assert check_item({**GOOD, "question": "Which layouts_table value?"}, source(4), "x").ok  # not a whole word
    assert not check_item({**GOOD, "question": "Which LAYOUT_ID shows it?"}, source(4), "x").ok


def test_citation_forms():
    text = "a [layout 3] b [Layout 1] c [layouts 2, 5 and 7] d [layout 3] [layout_id 9] [layout4]"
    assert cited_layouts(text) == [3, 1, 2, 5, 7, 9, 4]
    assert cited_layouts("layout 3 (no brackets), [layout X]") == []


def test_f_share_per_image_and_overall():
    def it(image, answer):
        return BenchItem(f"{image}#q{answer}", image, "chart", "q", "o", answer, "e", [1, 2])

    rep = f_share([it("a", "F"), it("a", "B"), it("b", "C"), it("b", "D"), it("b", "E")])
    assert rep["overall"] == {"items": 5, "f": 1, "share": 0.2} and rep["within_limit"] is False
    assert rep["per_image"]["a"] == {"items": 2, "f": 1, "share": 0.5} and rep["images_over_limit"] == ["a"]
    assert f_share([])["within_limit"] is True


def write(tmp_path, text):
    p = tmp_path / "batch_001.decisions.txt"
    p.write_text(text)
    return str(p)


def test_decisions_apply_accept_reject_edit_and_pending(tmp_path):
    text = review.template(items(), 1, 1, "batch_001.html")
    assert text.count(" pending\n") == 4
    lines = [
        "chart/img#q0 accept",
        "chart/img#q1 reject two options are the same city",
        'chart/img#q2 edit {"answer": "B", "explanation": "Rome [layout 2] beats Lima [layout 4]"}',
        "# a comment",
        "",
    ]
    decisions, problems = review.read_decisions([write(tmp_path, "\n".join(lines))])
    assert problems == []
    rows = review.apply(items(), {"chart/img": source(4)}, decisions)
    assert [r["decision"] for r in rows] == ["accept", "reject", "edit", "pending"]
    assert rows[1]["reason"] == "two options are the same city"
    edited = rows[2]["item"]
    assert (edited["answer"], edited["target_layouts"], edited["origin"]) == ("B", [2, 4], "edited")
    assert rows[2]["decided_at"].endswith("batch_001.decisions.txt:3")


def test_edits_are_validated_again_and_every_problem_is_listed(tmp_path):
    lines = [
        'chart/img#q0 edit {"options": "A. x\\nB. y\\nF. No right choice"}',
        'chart/img#q1 edit {"explanation": "only [layout 2]"}',
        'chart/img#q2 edit {"target_layouts": [2, 9]}',
        "chart/img#q3 accept",
        "chart/img#q3 reject changed my mind",
        "chart/img#q9 accept",
    ]
    decisions, problems = review.read_decisions([write(tmp_path, "\n".join(lines))])
    assert problems == []
    with pytest.raises(review.DecisionsError) as e:
        review.apply(items(), {"chart/img": source(4)}, decisions)
    msg = str(e.value)
    assert ":1: chart/img#q0: options: the edit fails validation: six_options: 3 options, not six" in msg
    assert ":2: chart/img#q1: explanation: the edit fails validation: too_few_layouts" in msg
    assert ":3: chart/img#q2: target_layouts: layout 9 is not a layout of the image" in msg
    assert ":5: chart/img#q3 is already decided at" in msg
    assert ":6: unknown item 'chart/img#q9'" in msg
    ok = review.parse_line('chart/img#q2 edit {"target_layouts": [4, 2]}', "f:1")
    rows = review.apply(items(), {"chart/img": source(4)}, [ok])
    assert rows[2]["item"]["target_layouts"] == [2, 4]


def test_review_apply_reports_every_problem_of_every_file_at_once(tmp_path, capsys):
    """Parse errors, type errors of every field of an edit, validation failures, unknown and twice-decided items
    of every decisions file: one report, each problem with its file, line and field; status 2, nothing written
    (the reader's problems and the edits' problems in one pass, not two)."""
    ws = tmp_path / "ws"
    (ws / "filter").mkdir(parents=True)
    (ws / "review").mkdir()
    (ws / "sources.jsonl").write_text(json.dumps(source(4).to_dict()) + "\n")
    (ws / "filter" / "kept.jsonl").write_text("".join(json.dumps(it.to_dict()) + "\n" for it in items()))
    first, second = ws / "review" / "batch_001.decisions.txt", ws / "review" / "batch_002.decisions.txt"
    first.write_text(
        "# comment\n"
        "chart/img#q0 maybe\n"
        'chart/img#q1 edit {"target_layouts": [true], "question": 5, "answer": ["C"]}\n'
        "chart/img#q9 accept\n"
    )
    second.write_text(
        "chart/img#q2 reject\n"
        'chart/img#q3 edit {"options": "A. x\\nF. No right choice", "target_layouts": [2, 9]}\n'
        "chart/img#q1 accept\n"
    )
    assert build_o3_bench.main(["review", "apply", "--output_dir", str(ws)]) == 2
    err = capsys.readouterr().err
    expected = [
        f"{first}:2: chart/img#q0: unknown decision 'maybe'",
        f"{first}:3: chart/img#q1: question: must be text, got int 5",
        f"{first}:3: chart/img#q1: answer: must be text, got list",
        f"{first}:3: chart/img#q1: target_layouts: must be a non-empty list of layout ids",
        f"{first}:4: unknown item 'chart/img#q9'",
        f"{second}:1: chart/img#q2: a rejection needs a reason",
        f"{second}:2: chart/img#q3: options: the edit fails validation: six_options: 2 options, not six",
        f"{second}:2: chart/img#q3: target_layouts: layout 9 is not a layout of the image",
        f"{second}:3: chart/img#q1 is already decided at {first}:3",
    ]
    missing = [e for e in expected if e not in err]
    assert not missing, err
    positions = [err.index(e) for e in expected]
    assert positions == sorted(positions)  # in file and line order
    assert "9 problem(s)" in err and "nothing was written" in err
    assert not (ws / "review" / "reviewed.jsonl").exists()


@pytest.mark.parametrize(
    "line, message",
    [
        ("chart/img#q0", "expected '<item_id>"),
        ("chart/img#q0 maybe", "unknown decision 'maybe'"),
        ("chart/img#q0 reject", "a rejection needs a reason"),
        ("chart/img#q0 edit answer=B", "must be a JSON object"),
        ('chart/img#q0 edit {"image": "x.png"}', "cannot edit image"),
        ("chart/img#q0 accept because", "nothing may follow 'accept'"),
    ],
)
def test_bad_decision_lines_name_file_and_line(line, message):
    out = review.parse_line(line, "d.txt:7")
    assert isinstance(out, str) and out.startswith("d.txt:7: ") and message in out


# ------------------------------------------------------------------------------------------- release
def test_shuffle_keeps_f_last_moves_the_answer_with_its_option_and_is_seeded():
    base = check_item(GOOD, source(4), "chart/img#q0").item
    assert base is not None
    seen = set()
    for seed in range(12):
        out, _ = shuffle_options(base, seed)
        lines = out.options.split("\n")
        assert lines[5] == "F. No right choice" and [ln[0] for ln in lines] == list("ABCDEF")
        assert sorted(ln[3:] for ln in lines[:5]) == ["Baku", "Kyiv", "Lima", "Oslo", "Rome"]
        assert dict(ln.split(". ", 1) for ln in lines)[out.answer] == "Lima"  # the answer follows its text
        assert shuffle_options(base, seed)[0] == out  # the same seed, the same order
        seen.add(out.answer)
    assert len(seen) >= 4  # the correct answer lands in different places
    f_item = BenchItem(**{**base.to_dict(), "answer": "F"})
    assert shuffle_options(f_item, 3)[0].answer == "F"


def test_shuffle_renames_letter_references_in_the_explanation():
    base = check_item(
        {**GOOD, "explanation": GOOD["explanation"] + "\nSo the answer is C, not option (A)."}, source(4), "q"
    )
    out, refs = shuffle_options(base.item, 1)  # type: ignore[union-attr]
    new = dict(ln.split(". ", 1) for ln in out.options.split("\n"))
    lima = next(k for k, v in new.items() if v == "Lima")
    oslo = next(k for k, v in new.items() if v == "Oslo")
    assert out.explanation.endswith(f"So the answer is {lima}, not option ({oslo}).") and refs.renamed == 2


def test_shuffle_keeps_every_reference_to_an_option_pointing_at_it():
    """A shuffle that moves option B to C turns "Hence option B ... (B) is right" into "Hence option C ... (C) is
    right", never "option C ... (B) is right": every form names the same option text before and after the shuffle."""
    expl = GOOD["explanation"] + "\nRome beats Oslo, hence option C, not options A and B; so (C) is right. C) Lima."
    base = check_item({**GOOD, "explanation": expl}, source(4), "chart/img#q0").item
    assert base is not None
    old = dict(ln.split(". ", 1) for ln in base.options.split("\n"))
    for seed in range(6):
        out, refs = shuffle_options(base, seed)
        new = {v: k for k, v in (ln.split(". ", 1) for ln in out.options.split("\n"))}
        at = {letter: new[old[letter]] for letter in "ABC"}
        tail = out.explanation.split("\n")[-1]
        assert tail == (
            f"Rome beats Oslo, hence option {at['C']}, not options {at['A']} and {at['B']}; so ({at['C']}) is right. "
            f"{at['C']}) Lima."
        )
        assert refs.renamed == 5 and refs.left == []


#: old -> new letters of the form tests (F stays)
MOVE = dict(zip("ABCDEF", "CAEBDF"))


@pytest.mark.parametrize(
    "text, expected",
    [
        # keyword: option(s) / choice(s) and a letter or a list of letters
        ("Hence option B is right.", "Hence option A is right."),
        ("Option (B) is right.", "Option (A) is right."),
        ("Options A and C are too small.", "Options C and E are too small."),
        ("options A, C, or E", "options C, E, or D"),
        ("Choices B/D fail; choice E holds.", "Choices A/B fail; choice D holds."),
        # answer: "answer is", "answer:", "answer =", with an optional "option"
        ("So the answer is B.", "So the answer is A."),
        ("Answer: (C)", "Answer: (E)"),
        ("answer = D", "answer = B"),
        ("The answer is option E.", "The answer is option D."),
        # bare forms, in an item that uses no letter as a name
        ("(B) is right", "(A) is right"),
        ("B) Rome\nC) Lima", "A) Rome\nE) Lima"),
        # F stays; words and codes are not letters
        ("option F", "option F"),
        ("A value of 40 beats Berlin's B2 road, so option A.", "A value of 40 beats Berlin's B2 road, so option C."),
    ],
)
def test_letter_reference_forms(text, expected):
    out = remap_letter_refs(text, MOVE)
    assert out.text == expected and out.left == []
    assert out.renamed == sum(a != b for a, b in zip(text, expected)) or text == expected  # one per letter moved


@pytest.mark.parametrize(
    "text, context, kept",
    [
        ("Building B is north of the gate, so (B) holds.", "", ["'B' in", "'(B)' (a letter is also used"]),
        ("(B) holds.", "Which gate is next to Plan A?", ["'(B)' (a letter is also used"]),
        ("Exit E is closer. D) is wrong", "", ["'E' in", "'D)' (a letter is also used"]),
        ("so options A-C fail", "", ["'options A-C' (a range of letters)"]),
        ("so C.", "", ["'C' in 'so C.'"]),
    ],
)
def test_letters_that_may_be_names_are_left_and_reported(text, context, kept):
    """A letter used as a name ("Building B", "Plan A") is never rewritten, and then the bare forms "(B)"/"B)" are
    ambiguous: left as written and reported, as are ranges and letters in no known form."""
    out = remap_letter_refs(text, MOVE, context=context)
    assert out.text == text and out.renamed == 0
    assert len(out.left) == len(kept) and all(k in line for k, line in zip(kept, out.left))
    both = remap_letter_refs("Building B, hence option B", MOVE)
    assert both.text == "Building B, hence option A"  # a keyword form is renamed all the same


def test_release_statistics():
    s1, s2 = source(8, "chart"), SourceImage("map/m", "map", "/m.png", 5200, 2000, source(3).layouts)
    its = [
        BenchItem("chart/img#q0", "chart/img", "chart", "q", "o", "A", "e", [1, 2]),
        BenchItem("chart/img#q1", "chart/img", "chart", "q", "o", "F", "e", [1, 2, 3, 4]),
        BenchItem("map/m#q0", "map/m", "map", "q", "o", "C", "e", [2, 3]),
    ]
    st = release_stats(its, {"chart/img": s1, "map/m": s2})
    assert (st["samples"], st["images"], st["f_share"]) == (3, 2, 0.3333)
    assert st["layouts_per_sample"] == round((8 + 8 + 3) / 3, 3)
    assert st["target_layouts_per_sample"] == round(8 / 3, 3)
    assert st["by_category"]["chart"] == {
        "samples": 2,
        "images": 1,
        "layouts_per_sample": 8.0,
        "target_layouts_per_sample": 3.0,
    }
    assert st["answer_positions"] == {"A": 1, "B": 0, "C": 1, "D": 0, "E": 0, "F": 1}
    assert st["resolution"]["mean_width"] == 4600.0 and st["resolution"]["max_long_side"] == 5200
    assert st["resolution"]["long_side_histogram"]["4K-5K"] == 1 and st["paper"]["samples"] == 345


def test_decisions_with_a_byte_order_mark_and_raw_line_separators_in_an_edit(tmp_path):
    """What the review page's export (and a Windows editor) writes: a UTF-8 BOM, CRLF line ends, and an edit whose
    JSON string holds U+2028 / U+0085 raw (JSON allows them): read as written, lines split at line feeds only."""
    lines = [
        "chart/img#q0 accept",
        'chart/img#q2 edit {"answer": "B", "explanation": "Rome [layout 2]\u2028beats\u0085Lima [layout 4]"}',
        "chart/img#q1 reject same\u2028city",
    ]
    path = tmp_path / "batch_001.decisions.txt"
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode("utf-8"))
    decisions, problems = review.read_decisions([str(path)])
    assert problems == []
    assert [(d.item_id, d.decision) for d in decisions] == [
        ("chart/img#q0", "accept"), ("chart/img#q2", "edit"), ("chart/img#q1", "reject"),
    ]  # fmt: skip
    assert decisions[1].edit == {"answer": "B", "explanation": "Rome [layout 2]\u2028beats\u0085Lima [layout 4]"}
    assert decisions[2].reason == "same\u2028city"
