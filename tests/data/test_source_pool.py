"""Visual CoT and V* annotation converters of the collage source pool (paper C.1)."""

import json

import pytest
from PIL import Image

from insight_o3.data.source_pool import PoolError, convert_viscot, convert_vstar


def test_viscot_rows_keep_size_fields_and_enclose_all_boxes(tmp_path):
    ann = tmp_path / "docvqa_cot_train.jsonl"
    ann.write_text(
        json.dumps(
            {
                "question_id": 7,
                "image": "docvqa/a.png",
                "width": 800,
                "height": 600,
                "bboxs": [[10, 20, 30, 40], [25, 5, 60, 35]],
                "question": "What is the title?",
                "answer": "Budget",
                "dataset": "docvqa",
            }
        )
        + "\n"
    )
    (item,) = convert_viscot(str(ann), str(tmp_path / "img"))  # width/height given: no file is read
    assert item.id == "viscot/docvqa/7" and item.source == "viscot/docvqa"
    assert item.image == str(tmp_path / "img" / "docvqa" / "a.png")
    assert (item.width, item.height) == (800, 600) and item.bbox == (10, 5, 60, 40)
    assert item.options is None and item.answer == "Budget"


def test_vstar_reads_the_image_size_and_shuffles_options_deterministically(tmp_path):
    Image.new("RGB", (320, 200)).save(tmp_path / "sa_1.jpg")
    rec = {
        "image": "sa_1.jpg",
        "bbox": [10, 20, 30, 40],
        "question": "What color is the cup?",
        "options": ["red", "blue", "green", "white"],
    }
    ann = tmp_path / "vstar.jsonl"
    ann.write_text(json.dumps(rec) + "\n")
    (item,) = convert_vstar(str(ann), str(tmp_path))
    assert (item.width, item.height) == (320, 200)  # from the file: the record has no size
    assert item.bbox == (10, 20, 40, 60)  # [x, y, w, h] -> [x1, y1, x2, y2]
    assert item.id == "vstar/sa_1" and sorted(item.options) == sorted(rec["options"])
    assert item.options["ABCD".index(item.answer)] == "red"  # V* lists the right option first
    assert convert_vstar(str(ann), str(tmp_path)) == [item]


def test_missing_image_names_the_line(tmp_path):
    ann = tmp_path / "vstar.jsonl"
    ann.write_text(json.dumps({"image": "gone.jpg", "bbox": [1, 2, 3, 4], "question": "q", "answer": "a"}) + "\n")
    with pytest.raises(PoolError, match=r"vstar.jsonl:1: image file not found: .*gone.jpg"):
        convert_vstar(str(ann), str(tmp_path))


def test_vstar_several_questions_on_one_image_get_distinct_ids_and_the_pool_loads(tmp_path):
    """Questions without a question_id on one V* image get distinct ids (the image's stem alone would repeat),
    so the next step (load_pool) accepts the pool."""
    from insight_o3.data.source_pool import load_pool, write_pool

    Image.new("RGB", (400, 300)).save(tmp_path / "sa_1.jpg")
    Image.new("RGB", (400, 300)).save(tmp_path / "sa_2.jpg")
    recs = [{"image": "sa_1.jpg", "bbox": [1, 2, 10, 10], "question": f"q{i}", "answer": "a"} for i in range(3)] + [
        {"image": "sa_2.jpg", "bbox": [1, 2, 10, 10], "question": "q", "answer": "a"}
    ]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps(r) + "\n" for r in recs))
    b.write_text(json.dumps(recs[0]) + "\n")  # the same image in another input file
    from insight_o3.scripts import generate_collages

    out = tmp_path / "pool.jsonl"
    rc = generate_collages.main(
        ["pool", "--format", "vstar", "--input", str(a), str(b), "--image_root", str(tmp_path), "--out", str(out)]
    )
    assert rc == 0
    items = load_pool(str(out), check_images=True)  # loads: no duplicate id
    assert [it.id for it in items] == ["vstar/sa_1", "vstar/sa_1#2", "vstar/sa_1#3", "vstar/sa_2", "vstar/sa_1#4"]
    assert [it.question for it in items[:3]] == ["q0", "q1", "q2"]
    # deterministic: the same ids on a second conversion
    write_pool(convert_vstar(str(a), str(tmp_path)), str(tmp_path / "again.jsonl"))
    assert [it.id for it in load_pool(str(tmp_path / "again.jsonl"))] == [it.id for it in items[:4]]


def test_pool_help_documents_the_input_formats(capsys):
    from insight_o3.scripts import generate_collages

    with pytest.raises(SystemExit):
        generate_collages.main(["pool", "--help"])
    text = capsys.readouterr().out
    assert "viscot" in text and "bboxs" in text and "[x, y, w, h]" in text and "question_id" in text
    with pytest.raises(SystemExit):
        generate_collages.main(["--help"])
    text = capsys.readouterr().out
    assert "pool " in text and "filter " in text  # the subcommands are named in the main --help
