"""A run directory's files cannot redirect a run's writes: a symbolic link where a run writes, appends or truncates
(a records file, a trial directory, the lock file, an atomic write's temporary file) is refused with status 2 and
the link's target is left as it was."""

from __future__ import annotations

import os
import shutil
import threading

import pytest

from insight_o3.scripts import evaluate
from insight_o3.storage.atomic import LinkedOutput, write_json_atomic
from insight_o3.storage.lock import LOCK_FILE, acquire
from insight_o3.storage.record_log import RecordLog
from tests.support import eval_bench as eb


def _run(tmp_path, srv, judge, *extra: str) -> int:
    ann, img_dir = eb.make_bench(tmp_path / "bench")
    return evaluate.main(eb.evaluate_argv(ann, img_dir, tmp_path / "out", srv.base_url, judge.base_url, *extra))


@pytest.fixture
def servers(openai_server):
    return openai_server(eb.model_script()), openai_server(eb.judge_script())


def test_records_file_linked_outside_is_refused_and_its_target_untouched(tmp_path, servers):
    """Main followed the link: it truncated the target ("dropping a torn last line") and appended to it."""
    assert _run(tmp_path, *servers) in (0, 1)
    records = tmp_path / "out" / "m/o3_bench" / "trial_0" / "eval_records.jsonl"
    outside = tmp_path / "precious.jsonl"
    outside.write_bytes(records.read_bytes() + b'{"sample_key": "torn')  # ends in what reads as a torn line
    before = outside.read_bytes()
    records.unlink()
    records.symlink_to(outside)
    (records.parent / "done").unlink()  # the trial is resumed (a killed run)
    assert _run(tmp_path, *servers) == 2
    assert outside.read_bytes() == before


def test_trial_directory_linked_outside_is_refused(tmp_path, servers):
    assert _run(tmp_path, *servers) in (0, 1)
    trial = tmp_path / "out" / "m/o3_bench" / "trial_0"
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(trial), elsewhere)
    (elsewhere / "done").unlink()
    before = {p.name: p.read_bytes() for p in elsewhere.iterdir()}
    trial.symlink_to(elsewhere, target_is_directory=True)
    assert _run(tmp_path, *servers) == 2
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before


def test_record_log_never_opens_a_link(tmp_path):
    target = tmp_path / "target.jsonl"
    target.write_text('{"sample_key": "a"}\n{"sample_key": "b')
    link = tmp_path / "log.jsonl"
    link.symlink_to(target)
    with pytest.raises(LinkedOutput, match="symbolic link"):
        RecordLog.open(str(link))
    assert target.read_text() == '{"sample_key": "a"}\n{"sample_key": "b'
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "nowhere.jsonl")  # O_CREAT would create the link's target
    with pytest.raises(LinkedOutput):
        RecordLog.open(str(dangling))
    assert not (tmp_path / "nowhere.jsonl").exists()


def test_lock_file_link_is_refused(tmp_path):
    target = tmp_path / "target"
    target.write_text("keep me")
    run = tmp_path / "run"
    run.mkdir()
    (run / LOCK_FILE).symlink_to(target)
    with pytest.raises(LinkedOutput):
        acquire(run, "test")
    assert target.read_text() == "keep me"


def test_atomic_write_never_writes_through_a_planted_temporary_link(tmp_path):
    target = tmp_path / "target"
    target.write_text("keep me")
    out = tmp_path / "card.json"
    (tmp_path / f".card.json.{os.getpid()}.{threading.get_ident()}.tmp").symlink_to(target)  # the writer's own name
    with pytest.raises(LinkedOutput):
        write_json_atomic(out, {"a": 1})
    assert target.read_text() == "keep me" and not out.exists()
    # a link at the final name is replaced, never written through
    out.symlink_to(target)
    write_json_atomic(out, {"a": 1})
    assert target.read_text() == "keep me" and not out.is_symlink()


def _snapshot(run) -> dict:
    return {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != LOCK_FILE}


def _copy_in_foreign_trial(tmp_path, servers) -> tuple:
    """A run of 2 trials with ``scripted-vlm`` whose trial_1 is replaced by the trial_1 of a run with another model."""
    srv, judge = servers
    assert _run(tmp_path, srv, judge, "--num_trials", "2") in (0, 1)
    ann, img_dir = eb.make_bench(tmp_path / "bench")
    other = tmp_path / "other"
    argv = eb.evaluate_argv(ann, img_dir, other, srv.base_url, judge.base_url, "--num_trials", "2")
    assert evaluate.main([*argv, "--model", "another-vlm"]) in (0, 1)
    run = tmp_path / "out" / eb.EVAL
    shutil.rmtree(run / "trial_1")
    shutil.copytree(other / eb.EVAL / "trial_1", run / "trial_1")
    return run, srv


def test_a_trial_copied_from_a_run_with_another_model_is_refused(tmp_path, servers, capsys):
    """Main took the copied trial_1 as done (0 requests) and mixed it into the summary and the exports."""
    run, srv = _copy_in_foreign_trial(tmp_path, servers)
    before, asked = _snapshot(run), srv.count
    capsys.readouterr()
    assert _run(tmp_path, *servers, "--num_trials", "2") == 2
    err = capsys.readouterr().err
    assert "trial_1: written by another run" in err and 'model: this trial "another-vlm", the run "scripted-vlm"' in err
    assert _snapshot(run) == before and srv.count == asked  # nothing written, nothing asked
    # the readers refuse it too: the summary (gather_eval_results) and the records (export, compare, report)
    from insight_o3.analysis.run_records import read_run
    from insight_o3.evaluation.run_dir import ForeignTrial, RunDir
    from insight_o3.scripts import gather_eval_results

    with pytest.raises(ForeignTrial, match="trial_1"):
        RunDir(run).summary()
    with pytest.raises(ForeignTrial, match="trial_1"):
        read_run(run)
    settings, dataset = eb.EVAL.split("/")
    argv = ["--settings", settings, "--datasets", dataset, "--output_dir", str(tmp_path / "out")]
    assert gather_eval_results.main(argv) == 2
    assert "trial_1: written by another run" in capsys.readouterr().err


def test_an_unstamped_trial_in_a_stamped_run_is_refused(tmp_path, servers, capsys):
    run, _ = _copy_in_foreign_trial(tmp_path, servers)
    (run / "trial_1" / "run_stamp.json").unlink()  # copied from a run written before stamps
    capsys.readouterr()
    assert _run(tmp_path, *servers, "--num_trials", "2") == 2
    assert "trial_1: holds records but no run_stamp.json" in capsys.readouterr().err


def test_a_run_written_before_stamps_resumes_and_is_stamped(tmp_path, servers):
    """The upgrade path: a directory without stamps (nor the card's mark) reads and resumes as before; its resume
    stamps its trials, which are checked from then on."""
    import json

    from insight_o3.analysis.run_records import read_run
    from insight_o3.evaluation.run_dir import STAMPED_KEY, RunDir

    assert _run(tmp_path, *servers, "--num_trials", "2") in (0, 1)
    run = tmp_path / "out" / eb.EVAL
    for k in (0, 1):
        (run / f"trial_{k}" / "run_stamp.json").unlink()
    card = json.loads((run / "run_card.json").read_text())
    del card[STAMPED_KEY]
    write_json_atomic(run / "run_card.json", card)
    assert len(read_run(run).trials) == 2 and RunDir(run).summary() is not None
    assert _run(tmp_path, *servers, "--num_trials", "3") in (0, 1)
    card = json.loads((run / "run_card.json").read_text())
    assert card[STAMPED_KEY] is True
    for k in (0, 1, 2):
        stamp = json.loads((run / f"trial_{k}" / "run_stamp.json").read_text())
        assert stamp["fixed_settings"] == card["fixed_settings"]


def test_a_replaced_image_is_refused_on_resume(tmp_path, servers, capsys):
    """Main judged the run's next trial on the replaced image (an 800x600 image swapped for a 50x50 one) beside the
    trial answered on the original."""
    import hashlib
    import json

    from PIL import Image

    srv, _ = servers
    assert _run(tmp_path, *servers) in (0, 1)
    run, image = tmp_path / "out" / eb.EVAL, tmp_path / "bench" / "test" / "images" / "img0.png"
    original = hashlib.sha256(image.read_bytes()).hexdigest()
    before, asked = (run / "trial_0" / "eval_records.jsonl").read_bytes(), srv.count
    Image.new("RGB", (50, 50), (1, 2, 3)).save(image)  # make_bench below writes it again: keep this one
    capsys.readouterr()
    ann = tmp_path / "bench" / "test" / "metadata.jsonl"
    argv = eb.evaluate_argv(ann, ann.parent, tmp_path / "out", srv.base_url, servers[1].base_url, "--num_trials", "2")
    assert evaluate.main(argv) == 2
    err = capsys.readouterr().err
    assert "trial_0/eval_records.jsonl: sample_key" in err and "img0.png" in err and "the image was replaced" in err
    assert srv.count == asked and (run / "trial_0" / "eval_records.jsonl").read_bytes() == before
    records = [json.loads(line) for line in before.decode().splitlines()]
    of_image = [r for r in records if r["file_name"] == "images/img0.png"]
    assert of_image and {r["image_sha256"] for r in of_image} == {original}
