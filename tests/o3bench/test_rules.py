"""The validation rules of the O3-Bench build as configuration: forbidden words matched on whole
words with an allow-list and the image's own labels, citation forms, option label forms, and a rules file (JSON or
TOML) passed to ``validate`` and recorded with its sha256 where ``review apply`` and the release read it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from insight_o3.o3bench.records import BuildFileError, SourceImage, SourceLayout
from insight_o3.o3bench.review import edit_problems
from insight_o3.o3bench.validation import Validator, check_item, cited_layouts
from insight_o3.o3bench.validation_rules import ValidationRules, load_rules
from insight_o3.o3bench.workspace import Workspace
from insight_o3.scripts import build_o3_bench

pytestmark = pytest.mark.smoke

GOOD = {
    "question": "Which city had the larger 2020 value in the Regional Statistics table?",
    "options": "A. Oslo\nB. Rome\nC. Lima\nD. Kyiv\nE. Baku\nF. No right choice",
    "answer": "C",
    "explanation": "Step 1: Lima 40 [layout 3]\nStep 2: Rome 30 [layouts 1, 3]\nStep 3: 40 > 30",
}


def source(n_layouts: int = 4, subset: str = "chart", stem: str = "img") -> SourceImage:
    lays = [SourceLayout(i, (10.0 * i, 10.0, 10.0 * i + 8, 18.0), "text") for i in range(1, n_layouts + 1)]
    return SourceImage(f"{subset}/{stem}", subset, "/data/img.png", 4000, 3000, lays)


def asked(question: str, rules: ValidationRules | None = None, image_text: str = "") -> tuple[str | None, str | None]:
    v = check_item({**GOOD, "question": question}, source(), "x", rules=rules, image_text=image_text)
    return v.reason, v.detail


# ------------------------------------------------------------------------------------------- forbidden words
def test_natural_labels_pass_and_layout_talk_does_not():
    # today's false rejections: natural phrases of charts and maps
    assert asked("Which state had the highest crop yield in 2020?") == (None, None)
    assert asked("How many solar panels were installed in 2021?") == (None, None)
    assert asked("Which city in the Northeast region is largest?", image_text="NORTHEAST REGION\nBoston 1.2") == (
        None,
        None,
    )
    # the same words about the image's parts are still rejected, naming the word
    assert asked("Which city in the Northeast region is largest?") == (
        "forbidden_word",
        "the question mentions 'region'",
    )
    assert asked("Which crops grow in the left panel?", image_text="Crops\nWheat") == (
        "forbidden_word",
        "the question mentions 'crops'",
    )
    assert asked("What does the top-left panel show?", image_text="top left") == (
        "forbidden_word",
        "the question mentions 'panel'",
    )
    assert asked("In region 2 of the figure, which value is largest?", image_text="Northeast Region") == (
        "forbidden_word",
        "the question mentions 'region'",
    )
    # whole words only; "box" is not in the default list (the paper's prompt names it: a config can add it)
    assert asked("Which regional office has the highest box office revenue?") == (None, None)
    assert asked("Which LAYOUT_IDS show it?")[0] == "forbidden_word"


def test_a_configured_list_and_allow_list():
    paper = ValidationRules(
        forbidden_words=("layout_id", "layout", "region", "crop", "panel", "box"), allowed_phrases=("box plot",)
    )
    assert asked("Which box has the highest median?", paper) == ("forbidden_word", "the question mentions 'box'")
    assert asked("Which series of the box plots has the highest median?", paper) == (None, None)
    assert asked("How many solar panels were installed in 2021?", paper)[0] == "forbidden_word"  # no default phrases
    no_labels = ValidationRules(allow_image_labels=False)
    assert asked("Which city in the Northeast region?", no_labels, "Northeast region")[0] == "forbidden_word"
    assert asked("Which crops grow in the left panel?", ValidationRules(forbidden_words=())) == (None, None)
    # "crops" on its own is how a model names the layout crops: allowed only when a config says so
    assert asked("Which crops had the highest 2020 yield?", ValidationRules(allowed_phrases=("crops",))) == (None, None)


# ------------------------------------------------------------------------------------------- citations
def test_citation_forms_counted_and_the_uncounted_ones_named():
    assert cited_layouts("Step 1 [Layout 1, Layout 2] Step 2 [layout 3; layout 4] [Layouts 5 & layout 6]") == [
        1,
        2,
        3,
        4,
        5,
        6,
    ]
    v = check_item({**GOOD, "explanation": "Step 1: Lima 40 [Layout 1, Layout 2]\nStep 2: 40 > 30"}, source(), "x")
    assert v.ok and v.item.target_layouts == [1, 2]
    v = check_item({**GOOD, "explanation": "Step 1: Lima (layout 3)\nStep 2: Rome, layout 4 [layout 1]"}, source(), "x")
    assert (v.reason, v.detail) == (
        "too_few_layouts",
        "the explanation cites 1 distinct layout(s), needs 2 (not counted: '(layout 3)', 'layout 4': a citation is "
        "written [layout X])",
    )
    three = ValidationRules(min_cited_layouts=3)
    assert check_item(GOOD, source(), "x", rules=three).detail == "the explanation cites 2 distinct layout(s), needs 3"


# ------------------------------------------------------------------------------------------- option labels
PAREN = "A) Oslo\nB) Rome\nC) Lima\nD) Kyiv\nE) Baku\nF) No right choice"


def test_options_written_a_paren_are_rejected_naming_the_form_or_accepted_by_config():
    v = check_item({**GOOD, "options": PAREN}, source(), "x")
    assert (v.reason, v.detail) == (
        "six_options",
        "option line 1 is labelled in the form 'A)' ('A) Oslo'); accepted: 'A.' (option_label_forms in the "
        "validation config)",
    )
    loose = ValidationRules(option_label_forms=("A.", "A)", "(A)"))
    v = check_item({**GOOD, "options": PAREN}, source(), "x", rules=loose)
    assert v.ok and v.item.options == GOOD["options"]  # rewritten in the prompt's form
    mixed = "(A) Oslo\nB. Rome\nC) Lima\nD. Kyiv\nE. Baku\nF) No right choice"
    assert check_item({**GOOD, "options": mixed}, source(), "x", rules=loose).item.options == GOOD["options"]
    assert check_item({**GOOD, "options": PAREN.replace("C)", "X)")}, source(), "x", rules=loose).detail == (
        "option line 3 is not labelled 'C. ': 'X) Lima'"
    )


def test_review_edits_are_checked_by_the_workspaces_rules():
    from insight_o3.o3bench.records import BenchItem

    item = BenchItem("chart/img#q0", "chart/img", "chart", GOOD["question"], GOOD["options"], "C", GOOD["explanation"])
    _, problems = edit_problems(item, source(), {"options": PAREN})
    assert problems and "'A)'" in problems[0]
    fixed, problems = edit_problems(
        item, source(), {"options": PAREN}, Validator(ValidationRules(option_label_forms=("A.", "A)")))
    )
    assert problems == [] and fixed.options == GOOD["options"] and fixed.origin == "edited"


# ------------------------------------------------------------------------------------------- the rules file
@pytest.mark.parametrize(
    "name, text, message",
    [
        ("r.json", '{"forbidden_word": []}', "r.json: unknown key 'forbidden_word' \\(known: allow_image_labels, "),
        ("r.json", '{"forbidden_words": "box"}', "'forbidden_words' must be a list of non-empty strings"),
        ("r.json", '{"forbidden_words": ["box plot"]}', "'box plot' is not one word"),
        ("r.json", '{"option_label_forms": ["A-"]}', "'A-' is not one of 'A.', 'A\\)', '\\(A\\)', 'A:'"),
        ("r.json", '{"min_cited_layouts": 0}', "'min_cited_layouts' must be an integer of at least 1"),
        ("r.json", '{"f_share_limit": 2}', "'f_share_limit' must be a number from 0 to 1"),
        ("r.json", '{"allow_image_labels": "yes"}', "'allow_image_labels' must be true or false"),
        ("r.json", "[1, 2,]", "r.json: not valid JSON"),
        ("r.toml", "forbidden_words = [", "r.toml: not valid TOML"),
        ("r.json", "[]", "must be an object"),
    ],
)
def test_a_bad_rules_file_names_the_file_and_the_key(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(BuildFileError, match=message):
        load_rules(str(tmp_path / name))


def workspace(tmp_path: Path) -> Path:
    """A workspace after ``synthesize`` (written by hand): one image, its E.1 OCR and four synthesized items."""
    ws = tmp_path / "ws"
    (ws / "synthesize").mkdir(parents=True)
    (ws / "extract").mkdir()
    src = source(stem="us_map", subset="map")
    (ws / "sources.jsonl").write_text(json.dumps(src.to_dict()) + "\n")
    ext = [
        {"sample_key": "map/us_map#full", "image_key": "map/us_map", "layout_id": None, "status": "ok"}
        | {"identification": "map", "caption": "A map.", "ocr": "NORTHEAST REGION"},
    ]
    (ws / "extract" / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ext))
    items = [
        {**GOOD, "question": "Which city in the Northeast region is largest?"},  # a label of the image
        {**GOOD, "options": PAREN},  # A) labels
        {**GOOD, "question": "Which box has the highest median?"},  # box
        {**GOOD, "explanation": "Step 1 [Layout 1, Layout 2]"},  # the repeated form
    ]
    rec = {"sample_key": "map/us_map", "subset": "map", "status": "ok", "items": items}
    (ws / "synthesize" / "records.jsonl").write_text(json.dumps(rec) + "\n")
    return ws


def test_validate_with_a_rules_file_records_it_with_its_sha256(tmp_path, capsys):
    ws = workspace(tmp_path)
    assert build_o3_bench.main(["validate", "--output_dir", str(ws)]) == 0
    report = json.loads((ws / "validate" / "report.json").read_text())
    rejected = {r["item_id"]: r["reason"] for r in map(json.loads, (ws / "validate/rejected.jsonl").open())}
    assert rejected == {"map/us_map#q1": "six_options"} and report["accepted"] == 3
    default = json.loads((ws / "validate" / "rules.json").read_text())
    assert default["rules"] == ValidationRules().to_dict() and "file" not in default
    assert report["rules_sha256"] == default["rules_sha256"] == ValidationRules().sha256

    toml = tmp_path / "rules.toml"
    toml.write_text(
        'forbidden_words = ["layout_id", "layout", "region", "crop", "panel", "box"]\n'
        'option_label_forms = ["A.", "A)"]\nf_share_limit = 0.2\n'
    )
    assert build_o3_bench.main(["validate", "--output_dir", str(ws), "--validation_config", str(toml)]) == 0
    rejected = {r["item_id"]: r["detail"] for r in map(json.loads, (ws / "validate/rejected.jsonl").open())}
    assert rejected == {"map/us_map#q2": "the question mentions 'box'"}
    recorded = json.loads((ws / "validate" / "rules.json").read_text())
    assert recorded["file"] == str(toml.resolve())
    assert recorded["file_sha256"] == hashlib.sha256(toml.read_bytes()).hexdigest()
    assert recorded["rules"]["option_label_forms"] == ["A.", "A)"] and recorded["rules"]["f_share_limit"] == 0.2
    report = json.loads((ws / "validate" / "report.json").read_text())
    assert report["rules_sha256"] == recorded["rules_sha256"] != ValidationRules().sha256
    assert report["f_share"]["limit"] == 0.2
    # review apply checks edits by the recorded rules
    assert Validator.of_workspace(Workspace.at(ws)).rules.option_label_forms == ("A.", "A)")

    capsys.readouterr()
    bad = tmp_path / "bad.json"
    bad.write_text('{"forbiden_words": []}')
    assert build_o3_bench.main(["validate", "--output_dir", str(ws), "--validation_config", str(bad)]) == 2
    assert "bad.json: unknown key 'forbiden_words'" in capsys.readouterr().err
    assert json.loads((ws / "validate" / "rules.json").read_text()) == recorded  # nothing rewritten
