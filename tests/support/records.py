"""Reading the JSON-lines files a run wrote, as a test checks them."""

from __future__ import annotations

import json
from pathlib import Path


def jsonl(path: Path) -> list[dict]:
    """Every non-blank line of ``path``, parsed, in file order."""
    return [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]


def by_key(path: Path) -> dict[str, dict]:
    """The records of a log by ``sample_key`` (the last line of a key wins); a line that does not parse — the torn
    last line a killed run leaves — is skipped, and a missing file holds none."""
    out: dict[str, dict] = {}
    path = Path(path)
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        out[rec["sample_key"]] = rec
    return out
