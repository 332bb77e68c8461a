"""The pairs file the trainer reads (the data engine's ``dpo_pairs.jsonl``): every row checked before training, a bad
one named by file, line and field (exit status 2 from the trainer, no traceback)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.training.support import env, python, write_pairs
from training.dpo.pairs import PairsError, read_pairs


def test_the_engine_format_is_read_and_reduced_to_what_trl_reads(tmp_path):
    pairs = write_pairs(tmp_path, n=2)
    rows = read_pairs(pairs)
    assert [sorted(r) for r in rows] == [["chosen", "images", "prompt", "rejected"]] * 2
    assert rows[0]["images"] == [str(tmp_path / "img0.png")]


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda r: r.pop("chosen"), ":1: missing field(s) chosen"),
        (lambda r: r.update(images="a.png"), ":1: images: expected a list of image paths"),
        (lambda r: r.update(images=["missing.png"]), "missing.png not found"),
        (lambda r: r["prompt"][0]["content"].pop(0), ":1: prompt: 0 image placeholder(s) for 1 image(s)"),
        (lambda r: r.update(rejected=[]), ":1: rejected: expected a non-empty list of messages"),
        (lambda r: r["chosen"][0].update(content=[{"text": "x"}]), ":1: chosen[0].content: expected a string"),
    ],
)
def test_a_bad_row_is_named(tmp_path, change, says):
    pairs = write_pairs(tmp_path, n=1)
    row = json.loads(pairs.read_text())
    change(row)
    pairs.write_text(json.dumps(row) + "\n")
    with pytest.raises(PairsError) as e:
        read_pairs(pairs)
    assert str(pairs) in str(e.value) and says in str(e.value)


def test_no_pairs_is_an_error_that_says_why(tmp_path):
    path = tmp_path / "dpo_pairs.jsonl"
    path.write_text("")
    with pytest.raises(PairsError, match="no DPO pairs"):
        read_pairs(path)


def test_the_trainer_names_a_bad_row_and_exits_2(tmp_path):
    pairs = write_pairs(tmp_path / "data", n=2)
    lines = pairs.read_text().splitlines()
    row = json.loads(lines[1])
    row["rejected"][0]["role"] = "user"
    pairs.write_text(lines[0] + "\n" + json.dumps(row) + "\n")
    r = subprocess.run(
        [python(), "-m", "training.dpo.train", "--model", str(tmp_path / "no-model"), "--pairs", str(pairs)]
        + ["--output_dir", str(tmp_path / "o"), "--export_dir", str(tmp_path / "m"), "--cpu"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"{pairs}:2: rejected[0]: expected a message with role 'assistant'" in r.stderr
    assert "Traceback" not in r.stderr
