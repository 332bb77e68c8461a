"""Categories of one's own and prompts of one's own in the O3-Bench build: a category is a name, its
images (``sources --category``) and its E.2 prompt file (``synthesize --synth_prompt NAME=FILE``); ``--extract_prompt``
replaces E.1's wording. Each file is recorded in the step card with its sha256, and its content is a result setting
(another content in the same workspace is refused; the path may move). Offline, against the scripted endpoints."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from insight_o3.o3bench import prompts as P
from insight_o3.o3bench.records import BuildFileError
from insight_o3.scripts import build_o3_bench
from tests.support.o3bench_oracle import Oracle, demo_inputs
from tests.support.o3bench_run import decide, step_argv

REPO = Path(__file__).resolve().parents[2]
FLOOR_PLAN = REPO / "data" / "prompts" / "floor_plan_synthesis.txt"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------------------ the parts
@pytest.mark.smoke
def test_the_shipped_prompts_are_the_chart_and_map_categories_unchanged():
    templates, files = P.synthesis_templates(None)
    assert templates == {"chart": P.CHART_SYNTHESIS_PROMPT, "map": P.MAP_SYNTHESIS_PROMPT} and files == {}
    assert P.synthesis_prompt_name("chart") == "CHART_SYNTHESIS_PROMPT"
    assert set(P.prompt_hashes()) == {"EXTRACTION_PROMPT", "CHART_SYNTHESIS_PROMPT", "MAP_SYNTHESIS_PROMPT"}
    for t in templates.values():
        assert P.template_problem(t) is None


@pytest.mark.smoke
@pytest.mark.parametrize(
    "spec, text, message",
    [
        ("floor_plan", None, "expected CATEGORY=FILE"),
        ("Floor-Plan={f}", "{LAYOUTS}", "category 'Floor-Plan' must be lower-case letters"),
        ("floor_plan={f}", '{LAYOUTS} as JSON: {"question": "..."}', 'unknown placeholder {"question"}'),
        ("floor_plan={f}", "{LAYOUTS} }", "not a str.format template"),
        ("floor_plan={f}", "{GLOBAL_OCR} only", "no {LAYOUTS} placeholder"),
        ("floor_plan={f}", "{LAYOUTS:x}", "placeholder {LAYOUTS:x} has a format spec or conversion"),
        ("floor_plan={f}", "{LAYOUTS:>30000000}", "placeholder {LAYOUTS:>30000000} has a format spec"),
        ("floor_plan={f}", "{LAYOUTS} {GLOBAL_CAPTION:{GLOBAL_OCR}}", "placeholder {GLOBAL_CAPTION:{GLOBAL_OCR}} has"),
        ("floor_plan={f}", "{LAYOUTS!r}", "placeholder {LAYOUTS!r} has a format spec or conversion"),
        ("floor_plan={f}", "  \n", "the prompt file is empty"),
        ("floor_plan={f}/missing.txt", None, "cannot read the file"),
    ],
)
def test_a_bad_synthesis_prompt_names_the_flag_and_the_file(tmp_path, spec, text, message):
    f = tmp_path / "p.txt"
    if text is not None:
        f.write_text(text)
    with pytest.raises(BuildFileError, match=message.replace("{", r"\{").replace("(", r"\(")):
        P.synthesis_templates([spec.format(f=f)])


@pytest.mark.smoke
def test_an_extraction_prompt_must_ask_for_the_three_sections(tmp_path):
    f = tmp_path / "e1.txt"
    f.write_text("Describe the image. ## Image Identification ## Detailed Caption")
    with pytest.raises(BuildFileError, match="does not ask for the section\\(s\\) 'Extracted OCR'"):
        P.extraction_prompt_file(str(f))
    f.write_text(P.EXTRACTION_PROMPT + "\nRoom names are labels.\n")
    assert P.extraction_prompt_file(str(f)).text.endswith("labels.\n")  # every byte, the newline kept


# ------------------------------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    inp = demo_inputs(tmp_path_factory.mktemp("o3bench_categories"), num_images=4, questions=2, min_side=900)
    return inp, Oracle(inp["records"], inp["demo"])


def test_a_floor_plan_category_with_its_own_prompts_end_to_end(tmp_path, demo, openai_server, capsys):
    """Charts, and the demo's maps as a category 'floor_plan' with the example prompt of data/README.md and an E.1
    of one's own: sources -> extract -> synthesize -> validate -> filter -> review -> release."""
    inp, oracle = demo
    oracle.state.clear()
    srv = openai_server(oracle.script())
    ws = tmp_path / "ws"
    category = f"floor_plan,{inp['map_images']},{inp['map_layouts']},2"
    argv = ["sources", "--output_dir", str(ws), "--chart_images", str(inp["chart_images"])]
    assert build_o3_bench.main([*argv, "--chart_layouts", str(inp["chart_layouts"]), "--category", category]) == 0
    keys = [json.loads(x)["key"] for x in (ws / "sources.jsonl").read_text().splitlines()]
    floor = [k for k in keys if k.startswith("floor_plan/")]
    assert floor and len(floor) + sum(k.startswith("chart/") for k in keys) == len(keys)

    e1 = tmp_path / "e1.txt"
    e1.write_text(P.EXTRACTION_PROMPT + "\nTreat room names and dimensions as labels.")
    assert build_o3_bench.main(step_argv("extract", ws, srv.base_url, "--extract_prompt", str(e1))) == 0
    systems = {
        m["content"] for r in srv.requests if r["model"] == "vlm" for m in r["messages"] if m["role"] == "system"
    }
    assert systems == {e1.read_text()}
    card = json.loads((ws / "extract" / "step_card.json").read_text())
    assert card["prompt_files"] == {"EXTRACTION_PROMPT": {"file": str(e1.resolve()), "sha256": sha(e1)}}
    assert card["prompts_sha256"] == {"EXTRACTION_PROMPT": sha(e1)}
    e1_sha = sha(e1)

    # a category without a prompt is refused before any request
    capsys.readouterr()
    assert build_o3_bench.main(step_argv("synthesize", ws, srv.base_url)) == 2
    err = capsys.readouterr().err
    assert "images of category 'floor_plan' but no E.2 prompt for it: pass --synth_prompt floor_plan=FILE" in err
    assert not [r for r in srv.requests if r["model"] == "writer"]

    own = tmp_path / "prompts" / "floor_plan.txt"
    own.parent.mkdir()
    shutil.copy(FLOOR_PLAN, own)
    assert build_o3_bench.main(step_argv("synthesize", ws, srv.base_url, "--synth_prompt", f"floor_plan={own}")) == 0
    sent = {r["messages"][0]["content"].split("\n", 1)[0] for r in srv.requests if r["model"] == "writer"}
    assert sent == {P.CHART_SYNTHESIS_PROMPT.split("\n", 1)[0], FLOOR_PLAN.read_text().split("\n", 1)[0]}
    card = json.loads((ws / "synthesize" / "step_card.json").read_text())
    assert card["prompts_sha256"] == {
        "CHART_SYNTHESIS_PROMPT": P.prompt_hashes()["CHART_SYNTHESIS_PROMPT"],
        "MAP_SYNTHESIS_PROMPT": P.prompt_hashes()["MAP_SYNTHESIS_PROMPT"],
        "FLOOR_PLAN_SYNTHESIS_PROMPT": sha(own),
    }
    assert card["prompt_files"] == {"FLOOR_PLAN_SYNTHESIS_PROMPT": {"file": str(own.resolve()), "sha256": sha(own)}}

    # the prompt's content is a result setting: changed, refused (nothing written); moved, accepted
    records = (ws / "synthesize" / "records.jsonl").read_bytes()
    own.write_text(own.read_text().replace("floor plans", "building plans"))
    capsys.readouterr()
    assert build_o3_bench.main(step_argv("synthesize", ws, srv.base_url, "--synth_prompt", f"floor_plan={own}")) == 2
    assert "prompts_sha256.FLOOR_PLAN_SYNTHESIS_PROMPT: first run" in capsys.readouterr().err
    assert (ws / "synthesize" / "records.jsonl").read_bytes() == records
    e1.write_text(e1.read_text() + " ")
    assert build_o3_bench.main(step_argv("extract", ws, srv.base_url, "--extract_prompt", str(e1))) == 2
    assert "prompts_sha256.EXTRACTION_PROMPT: first run" in capsys.readouterr().err
    moved = tmp_path / "moved.txt"
    shutil.copy(FLOOR_PLAN, moved)
    assert build_o3_bench.main(step_argv("synthesize", ws, srv.base_url, "--synth_prompt", f"floor_plan={moved}")) == 0

    assert build_o3_bench.main(["validate", "--output_dir", str(ws)]) == 0
    assert build_o3_bench.main(step_argv("filter", ws, srv.base_url)) == 0
    assert build_o3_bench.main(["review", "page", "--output_dir", str(ws)]) == 0
    decide(ws, rejects=0, edits=0)
    assert build_o3_bench.main(["review", "apply", "--output_dir", str(ws)]) == 0
    assert build_o3_bench.main(["release", "--output_dir", str(ws)]) == 0
    rel = ws / "release"
    meta = [json.loads(x) for x in (rel / "metadata.jsonl").read_text().splitlines()]
    plans = [m for m in meta if m["subset"] == "floor_plan"]
    assert plans and all(
        m["file_name"].startswith("images/floor_plan/") and (rel / m["file_name"]).is_file() for m in plans
    )
    run_card = json.loads((rel / "run_card.json").read_text())
    assert run_card["prompts_sha256"]["FLOOR_PLAN_SYNTHESIS_PROMPT"] == sha(FLOOR_PLAN)
    assert run_card["prompts_sha256"]["EXTRACTION_PROMPT"] == e1_sha != P.prompt_hashes()["EXTRACTION_PROMPT"]
    stats = json.loads((rel / "stats.json").read_text())
    assert stats["by_category"]["floor_plan"]["samples"] == len(plans)


@pytest.mark.smoke
def test_bad_category_flags_are_bad_input(tmp_path, capsys):
    ws = str(tmp_path / "ws")
    for spec, message in [
        ("floor plan,a,b", "category 'floor plan' must be lower-case"),
        ("floor_plan,a", "expected NAME,IMAGE_DIR,LAYOUTS[,MIN_LAYOUTS]"),
        ("floor_plan,a,b,many", "MIN_LAYOUTS must be an integer, got 'many'"),
        ("floor_plan,a,b,-5", "MIN_LAYOUTS must be at least 1, got -5"),
        ("floor_plan,a,b,0", "MIN_LAYOUTS must be at least 1, got 0"),
    ]:
        assert build_o3_bench.main(["sources", "--output_dir", ws, "--category", spec]) == 2
        assert message in capsys.readouterr().err
    twice = ["--category", "chart,a,b", "--chart_images", "a", "--chart_layouts", "b"]
    assert build_o3_bench.main(["sources", "--output_dir", ws, *twice]) == 2
    assert "--category chart: the category is given twice" in capsys.readouterr().err
