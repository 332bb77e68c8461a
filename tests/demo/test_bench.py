"""The demo benchmark generator: O3-Bench layout, answers consistent with the drawn data model,
evidence boxes inside the image, determinism, resume, and loading with the evaluation loader."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from insight_o3.demo import bench as db
from insight_o3.evaluation.samples import load_samples
from insight_o3.scripts import make_demo_bench

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--num_images", "4", "--questions_per_image", "3", "--min_side", "420", "--max_side", "520"]


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    assert make_demo_bench.main(["--out", str(out), "--seed", "7", *SMALL]) == 0
    recs = [json.loads(l) for l in (out / "metadata.jsonl").read_text().splitlines()]
    return out, recs


def option_texts(options: str) -> dict[str, str]:
    return {line[0]: line[3:] for line in options.splitlines()}


def test_records_follow_o3_bench_layout(bench):
    out, recs = bench
    assert len(recs) == 12
    assert {r["subset"] for r in recs} == {"chart", "map"}
    for r in recs:
        opts = option_texts(r["options"])
        assert list(opts) == list("ABCDEF") and opts["F"] == "No right choice"
        assert len(set(opts.values())) == 6, r["options"]
        assert r["answer"] in "ABCDEF"
        assert r["file_name"].startswith(f"images/{r['subset']}/")
        with Image.open(out / r["file_name"]) as im:
            assert im.size == (r["img_width"], r["img_height"])
            assert min(im.size) >= 420
        assert r["target_layouts"] and r["explanation"]
        for lid in r["target_layouts"]:
            assert str(lid) in r["layout_infos"]
        for key, info in r["layout_infos"].items():
            x1, y1, x2, y2 = info["bbox"]
            assert info["layout_id"] == int(key) and info["label"]
            assert 0 <= x1 < x2 <= r["img_width"] and 0 <= y1 < y2 <= r["img_height"], info


def test_loads_with_evaluation_loader(bench):
    out, recs = bench
    samples = load_samples(out / "metadata.jsonl", out)
    assert len(samples) == len(recs)
    assert {s.category for s in samples} == {"chart", "map"}
    assert all(s.letters == "ABCDEF" for s in samples)
    assert samples[0].extra["layout_infos"] == recs[0]["layout_infos"]


def test_deterministic_and_resumes(tmp_path, bench):
    _, recs = bench
    out = tmp_path / "again"
    assert make_demo_bench.main(["--out", str(out), "--seed", "7", *SMALL]) == 0
    assert [json.loads(l) for l in (out / "metadata.jsonl").read_text().splitlines()] == recs
    img = out / recs[0]["file_name"]
    before = img.stat().st_mtime_ns
    img2 = out / recs[-1]["file_name"]
    img2.unlink()  # as if killed before this image was drawn
    assert make_demo_bench.main(["--out", str(out), "--seed", "7", *SMALL]) == 0
    assert img.stat().st_mtime_ns == before and img2.exists()
    other = tmp_path / "other_seed"
    make_demo_bench.main(["--out", str(other), "--seed", "8", *SMALL])
    assert (other / "metadata.jsonl").read_text() != (out / "metadata.jsonl").read_text()


def _answer_text(q: db.Question) -> str | None:
    return None if q.answer == "F" else q.options["ABCDE".index(q.answer)]


@pytest.mark.parametrize("seed", range(12))
def test_chart_answers_recomputed_from_data_model(seed):
    rng = random.Random(seed)
    scene = db.build_chart_scene(rng, 900, 800)
    for maker in (db._q_max_across_panels, db._q_top_series, db._q_sum_two_panels, db._q_peak_year):
        for f_correct in (False, True):
            q = maker(rng, scene, f_correct)
            if q is None:
                continue
            if q.kind == "chart_max_across_panels":
                series, year = q.question.split("'")[1], int(q.question.rstrip("?").split()[-1])
                yi = scene.years.index(year)
                vals = {p.title: p.series[series][yi] for p in scene.panels if series in p.series}
                truth = max(vals, key=vals.get)
                assert list(vals.values()).count(vals[truth]) == 1
            elif q.kind == "chart_top_series":
                title, year = q.question.split("'")[1], int(q.question.rstrip("?").split()[-1])
                p = scene.panel(title)
                yi = scene.years.index(year)
                truth = max(p.series, key=lambda s: p.series[s][yi])
            elif q.kind == "chart_sum_two_panels":
                parts = q.question.split("'")
                series, t1, t2 = parts[1], parts[3], parts[5]
                year = int(q.question.split(" for ")[1].split()[0])
                yi = scene.years.index(year)
                truth = str(scene.panel(t1).series[series][yi] + scene.panel(t2).series[series][yi])
            else:
                title, series = q.question.split("'")[1], q.question.split("'")[3]
                vals = scene.panel(title).series[series]
                truth = str(scene.years[vals.index(max(vals))])
            correct = [t for t in q.options if t == truth]
            assert len(correct) == (0 if f_correct else 1), (q.question, q.options, truth)
            assert _answer_text(q) == (None if f_correct else truth)


@pytest.mark.parametrize("seed", range(12))
def test_map_answers_recomputed_from_data_model(seed):
    rng = random.Random(seed)
    scene = db.build_map_scene(rng, 1000, 850)
    cw, ch = scene.cell_size()
    for p in scene.places:  # the drawn position really lies in the cell the model says
        assert int((p.x - scene.map_box[0]) // cw) == p.col and int((p.y - scene.map_box[1]) // ch) == p.row
    for maker in (db._q_column_category, db._q_locate_cell, db._q_nearest, db._q_count_in_row):
        for f_correct in (False, True):
            q = maker(rng, scene, f_correct)
            if q is None:
                continue
            if q.kind == "map_column_category":
                col = ord(q.question.split("column ")[1][0]) - ord("A")
                cat = q.question.split("'")[1]
                matches = [p.name for p in scene.places if p.col == col and p.category == cat]
                assert len(matches) == 1
                truth = matches[0]
            elif q.kind == "map_locate_cell":
                truth = scene.place(q.question.split("'")[1]).cell()
            elif q.kind == "map_nearest":
                src = scene.place(q.question.split("'")[1])
                cat = q.question.split("Which ")[1].split(" is closest")[0]
                cands = [p for p in scene.places if p.category.lower() == cat]
                truth = min(cands, key=lambda p: math.hypot(p.x - src.x, p.y - src.y)).name
            else:
                cat, row = q.question.split("'")[1], int(q.question.rstrip("?").split()[-1]) - 1
                truth = str(sum(p.category == cat and p.row == row for p in scene.places))
            assert [t == truth for t in q.options].count(True) == (0 if f_correct else 1)
            assert _answer_text(q) == (None if f_correct else truth)


def test_f_answers_and_answer_positions_vary():
    recs = []
    for i in range(40):
        item = db.build_item(
            3, i, subset="chart" if i % 2 else "map", n_questions=3, size=(500, 450), min_side=0, max_side=0, f_rate=0.2
        )
        recs += db.records(item)
    letters = {r["answer"] for r in recs}
    assert letters == set("ABCDEF")
    assert len({r["question_type"] for r in recs}) == 8


def test_num_questions_spreads_over_images():
    layout = db.plan(5, seed=0, chart_fraction=0.4, questions_per_image=9, num_questions=8)
    assert sum(k for _, _, k in layout) == 8 and {k for _, _, k in layout} == {1, 2}
    assert sum(s == "chart" for _, s, _ in layout) == 2


def test_cli_rejects_bad_arguments(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "insight_o3.scripts.make_demo_bench", "--out", str(tmp_path), "--size", "12by7"],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0 and "--size must look like" in r.stderr
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "insight_o3.scripts.make_demo_bench",
            "--out",
            str(tmp_path),
            "--num_images",
            "3",
            "--num_questions",
            "2",
            "--min_side",
            "200",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0 and "num_questions" in r.stderr


def test_prepare_benchmarks_with_demo_o3_bench_and_tsv_images(tmp_path, bench):
    """data/prepare_benchmarks.py: the demo set placed as O3-Bench is ready; V* annotation copied,
    NOT READY until its images are unpacked from a (hand-made) TSV release, then ready."""
    import base64
    import io
    import shutil

    import pandas as pd

    demo, _ = bench
    root = tmp_path / "repo"
    shutil.copytree(demo, root / "data" / "O3-Bench" / "test")
    prep = [sys.executable, "data/prepare_benchmarks.py", "--root", str(root), "--benchmarks", "o3_bench", "vstar"]
    r = subprocess.run(prep, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1, r.stderr
    assert "o3_bench: ready: 12 samples, 4 images, 2 categories" in r.stdout
    assert "vstar: NOT READY" in r.stdout and "191 image file(s) not found" in r.stdout
    ann = root / "data" / "vstar_bench" / "vstar_bench.jsonl"  # the original release's layout
    ids = [json.loads(l)["question_id"] for l in ann.read_text().splitlines()]
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(buf, format="JPEG")
    b64 = base64.b64encode(buf.getvalue()).decode()
    tsv = tmp_path / "vstar.tsv"
    pd.DataFrame({"index": ids, "question": "q", "image": b64}).to_csv(tsv, sep="\t", index=False)
    r = subprocess.run(prep + ["--extract", f"vstar={tsv}"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "vstar: extracted 191 image(s)" in r.stdout and "vstar: ready: 191 samples" in r.stdout
    assert (root / "data" / "vstar_bench" / "direct_attributes" / "sa_4690.jpg").is_file()


def test_prepare_benchmarks_keeps_an_older_renamed_layout(tmp_path):
    """Images already in the renamed folders of an earlier version: the annotation goes next to them."""
    root = tmp_path / "repo"
    (root / "data" / "VStar" / "images").mkdir(parents=True)
    prep = [sys.executable, "data/prepare_benchmarks.py", "--root", str(root), "--benchmarks", "vstar"]
    r = subprocess.run(prep, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1 and (root / "data" / "VStar" / "vstar_bench.jsonl").is_file()
    assert not (root / "data" / "vstar_bench").exists() and "image file(s) not found under" in r.stdout
