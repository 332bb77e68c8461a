"""The data engine's ``dpo_pairs.jsonl`` (``insight_o3.reasoning_data.export``) as the dataset TRL's ``DPOTrainer``
reads: ``images`` (paths, loaded as images), ``prompt`` / ``chosen`` / ``rejected`` (conversational, the vision
preference format). Every row is checked before training starts: a bad one is a :class:`PairsError` naming the file,
the line and the field, not a traceback deep inside a data loader an hour in.
"""

from __future__ import annotations

import os
from typing import Any

from insight_o3.base.json_types import JSONObject
from insight_o3.storage.jsonl import iter_jsonl

#: what TRL reads of a row (the engine's bookkeeping fields — keys, tiers, scores — are dropped)
COLUMNS = ("images", "prompt", "chosen", "rejected")


class PairsError(ValueError):
    """Unusable pairs file: the message is ``<file>:<line>: <field>: <what>``."""


def _turns(where: str, name: str, value: Any, role: str) -> None:
    if not isinstance(value, list) or not value:
        raise PairsError(f"{where}: {name}: expected a non-empty list of messages")
    for i, m in enumerate(value):
        if not isinstance(m, dict) or m.get("role") != role:
            raise PairsError(f"{where}: {name}[{i}]: expected a message with role {role!r}")
        content = m.get("content")
        if isinstance(content, str):
            continue
        if not isinstance(content, list) or not all(isinstance(p, dict) and "type" in p for p in content):
            raise PairsError(f"{where}: {name}[{i}].content: expected a string or a list of typed parts")


def check_row(where: str, row: JSONObject, base_dir: str) -> JSONObject:
    """The row reduced to :data:`COLUMNS`, image paths resolved against ``base_dir``; :class:`PairsError` if unusable."""
    missing = [c for c in COLUMNS if c not in row]
    if missing:
        raise PairsError(f"{where}: missing field(s) {', '.join(missing)}")
    images = row["images"]
    if not isinstance(images, list) or not all(isinstance(p, str) and p for p in images):
        raise PairsError(f"{where}: images: expected a list of image paths")
    resolved = [p if os.path.isabs(p) else os.path.join(base_dir, p) for p in images]
    for p in resolved:
        if not os.path.isfile(p):
            raise PairsError(f"{where}: images: {p} not found")
    _turns(where, "prompt", row["prompt"], "user")
    _turns(where, "chosen", row["chosen"], "assistant")
    _turns(where, "rejected", row["rejected"], "assistant")
    placeholders = sum(
        1 for m in row["prompt"] if isinstance(m["content"], list) for p in m["content"] if p.get("type") == "image"
    )
    if placeholders != len(resolved):
        raise PairsError(f"{where}: prompt: {placeholders} image placeholder(s) for {len(resolved)} image(s)")
    return {"images": resolved, "prompt": row["prompt"], "chosen": row["chosen"], "rejected": row["rejected"]}


def read_pairs(path: str | os.PathLike) -> list[JSONObject]:
    """Every row of a pairs file, checked (relative image paths are relative to the file's directory)."""
    base = os.path.dirname(os.path.abspath(path))
    rows = [check_row(where, obj, base) for where, _, obj in iter_jsonl(path, PairsError, "DPO pairs file")]
    if not rows:
        raise PairsError(f"{path}: no DPO pairs (the round's assessment kept no chosen/rejected pair)")
    return rows


def load_dataset(path: str | os.PathLike) -> Any:
    """The pairs as a ``datasets.Dataset`` with ``images`` decoded by ``datasets.Image`` (what TRL's vision collator
    hands to the processor)."""
    from datasets import Dataset, Image, Sequence

    return Dataset.from_list(read_pairs(path)).cast_column("images", Sequence(Image()))
