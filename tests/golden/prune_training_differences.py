"""Drop from ``tests/golden/training/differences.json`` every case that now matches the fork.

A listed case is a strict ``xfail`` of ``tests/recipe/test_training_goldens.py``: once its rule is fixed it passes, which
strict mode reports as a failure (``XPASS(strict)``). This runs that test file and removes exactly those ids (and
rules left without ids); it never adds one. Failures that are not XPASS are printed: a case that stopped matching,
to fix or to attribute to a rule by hand (with the reason).

    PYTHONPATH=. .venv/bin/python tests/golden/prune_training_differences.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIFFERENCES = ROOT / "tests" / "golden" / "training" / "differences.json"
TEST = "tests/recipe/test_training_goldens.py"
LINE = re.compile(r"^FAILED \S+::\w+\[(?P<id>[^\]]+)\](?P<rest>.*)$")


def main() -> int:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", TEST, "-q", "-p", "no:cacheprovider", "-rf", "--no-header"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "100000"},  # the short summary keeps its reasons (cut to the width otherwise)
    )
    xpassed, failed = set(), []
    for line in run.stdout.splitlines():
        m = LINE.match(line)
        if m:
            (xpassed.add(m["id"]) if "XPASS(strict)" in m["rest"] else failed.append(line))
    rules = json.loads(DIFFERENCES.read_text())
    for name, rule in rules.items():
        kept = [i for i in rule["ids"] if i not in xpassed]
        if len(kept) != len(rule["ids"]):
            print(f"{name}: {len(rule['ids'])} -> {len(kept)}")
        rule["ids"] = kept
    rules = {k: v for k, v in rules.items() if v["ids"]}
    DIFFERENCES.write_text(json.dumps(rules, indent=1, sort_keys=True) + "\n")
    print(f"{len(xpassed)} case(s) now match and left the list; {len(failed)} failure(s) not listed:")
    print("\n".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
