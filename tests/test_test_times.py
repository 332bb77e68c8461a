"""scripts/test_times.py: per-module wall time from a pytest JUnit XML, slowest first."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "test_times.py"

XML = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="5" time="9.5">
<testcase classname="tests.test_fast" name="test_a" time="0.5"/>
<testcase classname="tests.test_slow" name="test_b" time="3.0"/>
<testcase classname="tests.test_slow.TestGroup" name="test_c" time="4.0"><failure message="x"/></testcase>
<testcase classname="tests.test_fast" name="test_d" time="0.25"><skipped message="s"/></testcase>
<testcase classname="" name="tests.test_recipe_x" time="0.000"><skipped message="collection skipped"/></testcase>
</testsuite></testsuites>"""


def _run(argv, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *argv])
    with pytest.raises(SystemExit) as e:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    return e.value.code


def test_modules_sorted_by_time(tmp_path, monkeypatch, capsys):
    xml = tmp_path / "junit.xml"
    xml.write_text(XML)
    assert _run([str(xml)], monkeypatch) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines[1:4]]
    assert [r[0] for r in rows] == ["tests/test_slow.py", "tests/test_fast.py", "tests/test_recipe_x.py"]
    assert rows[0][1:] == ["7.00", "90.3%", "2", "0", "1"]
    assert rows[1][1:] == ["0.75", "9.7%", "2", "1", "0"]
    assert rows[2][3:] == ["1", "1", "0"]  # a module skipped at collection still shows
    assert lines[-2].split()[-1] == "7.75" and lines[-1].split()[-1] == "9.50"


def test_unreadable_report_is_exit_2(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "bad.xml"
    bad.write_text("<testsuites")
    assert _run([str(bad)], monkeypatch) == 2
    assert f"cannot read {bad}" in capsys.readouterr().err


def test_reports_add_up(tmp_path, monkeypatch, capsys):
    """scripts/test.sh writes the timing tests (run after the workers) to a second report: both count."""
    xml, timing = tmp_path / "junit.xml", tmp_path / "junit.timing.xml"
    xml.write_text(XML)
    timing.write_text(
        '<testsuites><testsuite name="pytest" tests="1" time="2.5">'
        '<testcase classname="tests.test_fast" name="test_t" time="2.0"/></testsuite></testsuites>'
    )
    assert _run([str(xml), str(timing)], monkeypatch) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split()[0] == "tests/test_fast.py" and lines[2].split()[1:] == ["2.75", "28.2%", "3", "1", "0"]
    assert lines[-2].split()[-1] == "9.75" and lines[-1].split()[-1] == "12.00"
    assert _run([str(xml), str(tmp_path / "missing.xml")], monkeypatch) == 2
    assert f"cannot read {tmp_path / 'missing.xml'}" in capsys.readouterr().err
