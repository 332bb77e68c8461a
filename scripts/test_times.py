"""Wall time per test module from a pytest JUnit XML report, slowest first.

    .venv/bin/python -m pytest -q -p no:cacheprovider --junitxml=/tmp/junit.xml
    .venv/bin/python scripts/test_times.py /tmp/junit.xml [/tmp/junit.timing.xml ...] [--top N]

A module's time is the sum of its test cases' ``time`` attributes (set-up, call and tear-down of each
test; session fixtures are charged to the first test that uses them). Skipped tests count as skipped. Several
reports add up (``scripts/test.sh`` writes the timing tests, run after the workers, to ``X.timing.xml``).
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def module_of(case: ET.Element) -> str:
    """``tests/test_x.py`` from a test case's ``file`` attribute or its dotted ``classname``."""
    if case.get("file"):
        return case.get("file", "")
    # a module skipped at collection: empty classname, the module's dotted name as the test name
    parts = (case.get("classname") or case.get("name", "")).split(".")
    mods = [i for i, p in enumerate(parts) if p.startswith("test_")]
    return "/".join(parts[: mods[0] + 1]) + ".py" if mods else case.get("classname", "?")


def module_times(*xml_paths: Path) -> tuple[dict[str, dict], float]:
    """Per module: {"time", "tests", "skipped", "failed"}; plus the suites' reported total time, over the reports."""
    stats: dict[str, dict] = defaultdict(lambda: {"time": 0.0, "tests": 0, "skipped": 0, "failed": 0})
    total = 0.0
    for xml_path in xml_paths:
        try:
            root = ET.parse(xml_path).getroot()
        except (OSError, ET.ParseError) as e:
            raise OSError(f"cannot read {xml_path}: {e}") from e
        suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
        for case in root.iter("testcase"):
            s = stats[module_of(case)]
            s["time"] += float(case.get("time") or 0.0)
            s["tests"] += 1
            s["skipped"] += case.find("skipped") is not None
            s["failed"] += case.find("failure") is not None or case.find("error") is not None
        total += sum(float(s.get("time") or 0.0) for s in suites)
    return dict(stats), total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("junit_xml", type=Path, nargs="+")
    ap.add_argument("--top", type=int, default=0, help="print only the N slowest modules")
    a = ap.parse_args(argv)
    try:
        stats, total = module_times(*a.junit_xml)
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = sorted(stats.items(), key=lambda kv: -kv[1]["time"])
    if a.top:
        rows = rows[: a.top]
    width = max([len(m) for m, _ in rows] + [6])
    print(f"{'module':<{width}}  {'seconds':>8}  {'share':>6}  tests  skipped  failed")
    summed = sum(s["time"] for s in stats.values()) or 1.0
    for mod, s in rows:
        print(
            f"{mod:<{width}}  {s['time']:8.2f}  {100 * s['time'] / summed:5.1f}%  {s['tests']:5d}  "
            f"{s['skipped']:7d}  {s['failed']:6d}"
        )
    print(f"{'sum of test cases':<{width}}  {sum(s['time'] for s in stats.values()):8.2f}")
    print(f"{'session wall time':<{width}}  {total:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
