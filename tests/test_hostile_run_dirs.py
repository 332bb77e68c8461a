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
