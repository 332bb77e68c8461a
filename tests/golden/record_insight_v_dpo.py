"""Record ``tests/golden/insight_v_dpo.json``: the DPO stage of dongyh20/Insight-V at 5e9c6f9 as released.

    python tests/golden/record_insight_v_dpo.py /path/to/Insight-V.git   # a clone (bare is fine) holding 5e9c6f9

Read from the release with ``git show`` (nothing of it is committed here): the flags of
``scripts/insight-v/llava_dpo.sh`` (its ``torchrun ... llava/train/train_dpo.py`` command, split with ``shlex`` as
the shell does), the defaults of ``train_dpo.py``'s argument dataclasses (``ast``: each ``field(default=...)``
evaluated with ``ast.literal_eval``) and ``scripts/zero3.json`` (the DeepSpeed config the script passes).
``tests/training/test_dpo_settings.py`` compares the trainer's defaults and configs with it.
"""

from __future__ import annotations

import ast
import json
import shlex
import subprocess
import sys
from pathlib import Path

COMMIT = "5e9c6f9"
OUT = Path(__file__).with_name("insight_v_dpo.json")


def show(repo: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", repo, "show", f"{COMMIT}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def script_flags(text: str) -> dict[str, object]:
    """The flags of the script's torchrun command: ``--name value`` (``--name`` alone: True)."""
    joined = text.replace("\\\n", " ")
    command = next(line for line in joined.splitlines() if line.strip().startswith("torchrun"))
    words = shlex.split(command)
    start = next(i for i, w in enumerate(words) if w.endswith("train_dpo.py")) + 1
    flags: dict[str, object] = {}
    i = start
    while i < len(words):
        name = words[i].lstrip("-")
        if "=" in name:
            name, value = name.split("=", 1)
            flags[name] = value
            i += 1
        elif i + 1 < len(words) and not words[i + 1].startswith("--"):
            flags[name] = words[i + 1]
            i += 2
        else:
            flags[name] = True
            i += 1
    return flags


def dataclass_defaults(text: str) -> dict[str, dict[str, object]]:
    """``{class: {field: default}}`` of every dataclass field with a literal default."""
    out: dict[str, dict[str, object]] = {}
    for node in ast.parse(text).body:
        if not isinstance(node, ast.ClassDef):
            continue
        fields: dict[str, object] = {}
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None):
                continue
            value = stmt.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "field":
                value = next((k.value for k in value.keywords if k.arg == "default"), None)
            if value is None:
                continue
            try:
                fields[stmt.target.id] = ast.literal_eval(value)
            except ValueError:
                continue
        if fields:
            out[node.name] = fields
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    repo = argv[0]
    golden = {
        "source": f"dongyh20/Insight-V@{COMMIT}",
        "llava_dpo_sh": script_flags(show(repo, "scripts/insight-v/llava_dpo.sh")),
        "train_dpo_defaults": dataclass_defaults(show(repo, "llava/train/train_dpo.py")),
        "zero3_json": json.loads(show(repo, "scripts/zero3.json")),
    }
    OUT.write_text(json.dumps(golden, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
