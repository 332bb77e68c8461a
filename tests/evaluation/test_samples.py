"""Annotation loading: every real benchmark file, and every bad input with file/line/field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from insight_o3.agents.drivers import VREASONER_COMPLETION_KWARGS
from insight_o3.evaluation.benchmarks import BENCHMARKS, get_benchmark
from insight_o3.evaluation.config import SingleModelSettings
from insight_o3.evaluation.judge import gt_letter
from insight_o3.evaluation.samples import load_samples
from insight_o3.protocol.sample import AnnotationError
from insight_o3.scripts import evaluate
from tests.support import eval_bench as eb

REPO = Path(__file__).resolve().parents[2]

REAL = {
    "vstar_bench.jsonl": 191,
    "treebench.jsonl": 405,
    "hrbench_4k.jsonl": 800,
    "MME_RealWorld_Lite.jsonl": 1919,
    "visual_probe_hard.jsonl": 106,
}


def test_loads_every_shipped_benchmark_unchanged():
    files = sorted(Path(REPO, b.ann_file) for b in BENCHMARKS.values() if b.name != "o3_bench")
    assert {f.name for f in files} == set(REAL)
    for f in files:
        samples = load_samples(f, "/no/such/dir", check_images=False)
        raw = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        assert len(samples) == len(raw) == REAL.get(f.name, len(raw))
        assert len({s.key for s in samples}) == len(samples)
        for s, r in zip(samples, raw):
            assert s.question == r["question"] and s.answer == str(r["answer"])  # unstripped, as the original
            assert s.image == r.get("image", r.get("file_name"))
            assert s.category == r.get("category", r.get("subset", "unknown"))
            assert s.question_id == r.get("question_id")
            if isinstance(r.get("options"), str):
                assert s.options == r["options"] and s.prompt() == r["question"] + "\n" + r["options"]
            else:
                assert s.prompt() == r["question"]
            for k in set(r) - {
                "question_id",
                "image",
                "file_name",
                "question",
                "options",
                "answer",
                "category",
                "subset",
            }:
                assert s.extra[k] == r[k]
            if s.is_mcq:  # every MCQ's ground truth is one of its option letters
                assert gt_letter(s) in s.letters
    mme = load_samples(REPO / "data/MME-RealWorld-Lite/MME_RealWorld_Lite.jsonl", "/x", check_images=False)
    assert mme[0].key == "#0"  # its question_ids repeat: keyed by index
    vs = load_samples(REPO / "data/vstar_bench/vstar_bench.jsonl", "/x", check_images=False)
    assert vs[0].key == "0" and vs[0].image_path == "/x/direct_attributes/sa_4690.jpg"


def test_o3_bench_layout(tmp_path):
    ann, img_dir = eb.make_bench(tmp_path)
    s = load_samples(ann, img_dir)
    assert len(s) == 8 and s[0].image == "images/img0.png" and s[0].category == "chart"
    assert s[0].extra["layout_infos"]["1"]["bbox"] == [1, 2, 30, 40] and s[0].letters == "ABCDEF"
    assert s[5].options is None and not s[5].is_mcq


def test_list_and_inline_options(tmp_path):
    (tmp_path / "a.png").write_bytes(b"")
    rows = [
        {"image": "a.png", "question": "q", "answer": "B", "options": ["x", "y"]},
        {
            "image": "a.png",
            "question": "q",
            "answer": "C",
            "options": "A. Its mouth is open. B. It is missing. C. It is closed. D. Chewing.",
        },
    ]
    ann = tmp_path / "ann.jsonl"
    ann.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    a, b = load_samples(ann, tmp_path)
    assert a.options == "A. x\nB. y" and gt_letter(a) == "B"
    assert b.letters == "ABCD" and gt_letter(b) == "C"


GOOD = {"question_id": 1, "image": "a.png", "question": "What?", "answer": "A", "options": "A. x\nB. y"}


@pytest.mark.parametrize(
    "lines,needle",
    [
        (None, "annotation file not found"),
        ([json.dumps(GOOD), "{not json"], ":2: malformed JSON"),
        ([json.dumps(GOOD), "[1, 2]"], ":2: expected a JSON object"),
        ([json.dumps({k: v for k, v in GOOD.items() if k != "question"})], ":1: field 'question' is missing"),
        ([json.dumps({**GOOD, "answer": ""})], ":1: field 'answer' is empty"),
        ([json.dumps({**GOOD, "answer": None})], ":1: field 'answer' is empty or not text"),
        (
            [json.dumps({k: v for k, v in GOOD.items() if k != "image"})],
            ":1: field 'image' (or 'file_name') is missing",
        ),
        (
            [json.dumps(GOOD), json.dumps({**GOOD, "question_id": 2, "image": "gone.png"})],
            "1 image file(s) not found under",
        ),
        ([json.dumps({**GOOD, "options": 3})], ":1: field 'options' must be"),
        ([], "no samples"),
    ],
)
def test_bad_input_fails_fast_with_file_line_field(tmp_path, openai_server, capsys, lines, needle):
    from PIL import Image

    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    ann = tmp_path / "ann.jsonl"
    if lines is not None:
        ann.write_text("\n".join(lines) + ("\n" if lines else ""))
    with pytest.raises(AnnotationError) as e:
        load_samples(ann, tmp_path)
    msg = str(e.value)
    assert str(ann) in msg and needle in msg
    if "image file" in needle:
        assert "line 2 field 'image'" in msg and "gone.png" in msg
    # the CLI reports it cleanly (no traceback) before any API call
    srv = openai_server(eb.model_script())
    rc = evaluate.main(
        [
            "--eval_name",
            "x",
            "--model",
            "m",
            "--api_base_url",
            srv.base_url,
            "--api_key",
            "sk-loader-SECRET-1",
            "--ann_file",
            str(ann),
            "--img_dir",
            str(tmp_path),
            "--output_dir",
            str(tmp_path / "out"),
            "--no_progress",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err
    assert srv.count == 0 and not (tmp_path / "out").exists()


def test_missing_images_all_checked_first_few_reported(tmp_path):
    tmp_path.joinpath("imgs").mkdir()
    ann = tmp_path / "ann.jsonl"
    ann.write_text(
        "".join(
            json.dumps({**GOOD, "question_id": i, "file_name": f"m{i}.png", "image": None}).replace(
                '"image": null, ', ""
            )
            + "\n"
            for i in range(8)
        )
    )
    with pytest.raises(AnnotationError) as e:
        load_samples(ann, tmp_path / "imgs")
    msg = str(e.value)
    assert "8 image file(s) not found" in msg and "line 1 field 'file_name'" in msg and "(and 3 more)" in msg


def test_benchmark_registry():
    assert set(BENCHMARKS) == {
        "o3_bench",
        "vstar",
        "hr_bench_4k",
        "treebench",
        "visual_probe_hard",
        "mme_realworld_lite",
    }
    assert get_benchmark("o3_bench").ann_file == "data/O3-Bench/test/metadata.jsonl"
    assert get_benchmark("o3_bench").img_dir == "data/O3-Bench/test"
    with pytest.raises(ValueError, match="unknown benchmark"):
        get_benchmark("nope")
    a = evaluate.parse_args(["--benchmark", "vstar", "--model", "gpt-x"])
    assert a.run.eval_name == "gpt-x/vstar" and a.ann_file == BENCHMARKS["vstar"].ann_file
    # the paper's budget: 1280x1280 for GPT models (by name), 3500x3500 otherwise; 0 = no limit
    assert a.img_max_pixels == 1280 * 1280 and a.judge.model == "gpt-5-nano" and a.run.controls.concurrency == 128
    assert evaluate.parse_args(["--benchmark", "vstar", "--model", "gemini-2.5-flash"]).img_max_pixels == 3500 * 3500
    assert evaluate.parse_args(["--benchmark", "vstar", "--model", "x", "--img_max_pixels", "0"]).img_max_pixels == 0
    assert a.completion_kwargs == {"max_completion_tokens": 16384} and a.agent == SingleModelSettings()
    assert a.image_url_extra == {"detail": "high"} and Path(a.run.output_dir) == Path("outputs/eval")
    assert a.judge.max_answer_length == 1000 and a.run.num_trials == 1 and a.judge.flow == "extract"
    assert a.settings["reasoner_prompt"] == "infer"  # args.json keeps every flag
    assert a.settings["max_vsearch_calls"] == 6 and a.settings["vsearcher_prompt"] == "trained"
    io3 = evaluate.parse_args(["--benchmark", "vstar", "--model", "gpt-x", "--vsearcher_model", "vs"]).insight_o3
    assert io3 is not None and io3.reasoner.mode == "infer" and io3.reasoner.max_search_calls == 6
    assert io3.searcher.prompt == "trained" and io3.reasoner.completion_kwargs == VREASONER_COMPLETION_KWARGS
