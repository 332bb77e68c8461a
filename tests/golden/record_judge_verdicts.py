"""Record ``judge_verdicts.json``: the released harness's verdict rule run on judge replies.

The rule is cut out of the released ``insight_o3/scripts/evaluate.py`` (m-Just/InSight-o3 at ``21acec8``) with ``ast``
— the ``is_correct=`` keyword of the ``EvalResult`` its open-question branch builds, ``"correct" in
judge_content.lower()`` — and evaluated as written with ``judge_content`` bound to each reply. Run from the repo root
with a checkout of the release::

    git -C <InSight-o3 clone> show 21acec8:insight_o3/scripts/evaluate.py > /tmp/released_evaluate.py
    PYTHONPATH=. .venv/bin/python tests/golden/record_judge_verdicts.py /tmp/released_evaluate.py
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

OUT = Path(__file__).with_name("judge_verdicts.json")
#: Judge replies: clear ones and the ambiguous ones the hold-out audit found scored correct.
REPLIES = [
    "<correct>",
    "<wrong>",
    "Correct",
    "correct.",
    "Incorrect",
    "Wrong.",
    "The answer is not correct.",
    "<correct> it matches",
    "I think <wrong>",
    "**<correct>**",
    "Correct? No.",
    "Is it correct? The model says 12 but the GT is 21, so no.",
    "correct (not really)",
    "<wrong> (not <correct>)",
    "Not <correct>.",
    "<correct> or <wrong>",
    "",
]


def released_rule(source: str) -> ast.expr:
    """The expression the released ``process_sample`` passes as ``is_correct=`` with the judge's reply."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.keyword) and node.arg == "is_correct":
            names = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            if "judge_content" in names:
                return node.value
    raise SystemExit("no is_correct=... over judge_content in the released evaluate.py")


def main(path: str) -> None:
    expr = released_rule(Path(path).read_text())
    code = compile(ast.Expression(expr), "<released evaluate.py>", "eval")
    cases = [{"reply": r, "released_is_correct": bool(eval(code, {}, {"judge_content": r}))} for r in REPLIES]
    doc = {
        "source": "m-Just/InSight-o3 21acec8 insight_o3/scripts/evaluate.py: is_correct=" + ast.unparse(expr),
        "cases": cases,
    }
    OUT.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(cases)} cases -> {OUT}")


if __name__ == "__main__":
    main(sys.argv[1])
