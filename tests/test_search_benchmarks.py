"""The SimpleVQA and InfoSeek converters on generated files of their public formats: the annotation ``evaluate``
reads, the images in place, lists of answers joined as ``eval_with_gpt4o.py`` does; a bad row names its field."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from insight_o3.evaluation.samples import load_samples
from insight_o3.scripts import convert_benchmark


def _png(color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (12, 9), color).save(buf, format="PNG")
    return buf.getvalue()


def test_simplevqa_parquet(tmp_path):
    table = pa.table({
        "data_id": [0, 1],
        "image": [{"bytes": _png((255, 0, 0)), "path": None}, {"bytes": _png((0, 0, 255)), "path": "x.png"}],
        "image_description": ["", ""], "language": ["EN", "CN"], "question": ["What color?", "什么颜色？"],
        "answer": ["red", "蓝色"], "original_category": ["art", "nature"], "source": ["s", "s"],
        "atomic_question": ["", ""], "atomic_fact": ["", ""], "vqa_category": ["", ""],
    })  # fmt: skip
    pq.write_table(table, tmp_path / "test.parquet")
    out = tmp_path / "SimpleVQA"
    assert convert_benchmark.main(["simplevqa", str(tmp_path / "test.parquet"), "--out", str(out)]) == 0
    samples = load_samples(out / "metadata.jsonl", out)
    assert [(s.key, s.question, s.answer, s.category) for s in samples] == [
        ("0", "What color?", "red", "art"),
        ("1", "什么颜色？", "蓝色", "nature"),
    ]
    assert Image.open(samples[1].image_path).getpixel((0, 0)) == (0, 0, 255)


def test_infoseek_jsonl_and_its_images(tmp_path, capsys):
    imgs = tmp_path / "oven"
    imgs.mkdir()
    (imgs / "oven_1.jpg").write_bytes(_png((0, 255, 0)))
    rows = [{"data_id": "infoseek_val_1", "image_id": "oven_1", "question": "Which bridge is this?",
             "answer": ["Kessock Bridge", "Kessock"], "answer_eng": ["Kessock Bridge"], "data_split": "val_unseen_entity"}]  # fmt: skip
    (tmp_path / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "InfoSeek"
    argv = ["infoseek", str(tmp_path / "val.jsonl"), "--images", str(imgs), "--out", str(out)]
    assert convert_benchmark.main(argv) == 0
    (s,) = load_samples(out / "metadata.jsonl", out)
    assert s.answer == "Kessock Bridge, Kessock" and s.extra["answers"] == ["Kessock Bridge", "Kessock"]
    rows[0]["image_id"] = "missing"
    (tmp_path / "val.jsonl").write_text(json.dumps(rows[0]) + "\n")
    assert convert_benchmark.main(argv) == 2
    assert "val.jsonl:1: field 'image_id': no image missing.*" in capsys.readouterr().err
