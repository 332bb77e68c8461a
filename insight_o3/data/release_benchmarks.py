"""Converters of the five other benchmarks OpenSearch-VL reports (FVQA, VDR-Bench, MMSearch, LiveVQA, BrowseComp-VL)
into this harness's annotation format, from the format the release reads them in.

The release (``shawn0728/OpenSearch-VL`` at c5c02a4) evaluates every benchmark from one kind of file: ``run_infer.py``
reads an "FVQA-style parquet" (MMSearch-R1's format, as ``lmms-lab/FVQA`` ships it) and ``pipeline.process_single_case``
takes from each row ``data_id`` (else ``case_<row index>``), ``category``, ``data_source``, the question as the first
``prompt`` message's ``content`` and the image from ``images`` (a ``{bytes, path}`` struct, raw bytes, or a URL);
``eval_with_gpt4o.py`` takes the reference answer from ``answers`` (a list joined by ``", "``), else from the
``--answer_file`` parquet of ``id``/``answer`` columns keyed by that case id (VDR-Bench's answer file). FVQA's own
rows hold the answer in ``reward_model.ground_truth`` (with ``candidate_answers``, JSON text); a plain ``answer``
column is read too. MMSearch is also read in its own Hugging Face format (``CaraJ/MMSearch``, ``end2end``:
``sample_id``, ``query``, ``query_image``, ``gt_answer``, ``alternative_gt_answers``, ``area``, ``subfield``); its
queries without an image are left out and counted (the harness asks about an image).

The same JSONL rows (``convert_parquet2jsonl.py`` of the release's RL code writes ``images`` as file paths) are read
too. A row that cannot be converted is an error naming the file, the row and the field.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.json_types import JSONObject
from ..storage.atomic import write_jsonl_atomic
from .search_benchmarks import ConvertError, _answer, _field, _image_bytes, _rows_of, _suffix

#: The benchmark names of the release's own judge script where it has one (``bc_vl``, ``vdr``), else the paper's.
RELEASE_BENCHMARKS = ("fvqa", "vdr", "mmsearch", "livevqa", "bc_vl")


@dataclass(frozen=True)
class ConvertedRelease:
    ann_file: Path
    img_dir: Path
    rows: int
    skipped: int  # rows left out (MMSearch's queries without an image)


def load_answer_file(path: str | os.PathLike) -> dict[str, str]:
    """The release's ``load_answer_map``: ``str(id) -> str(answer)`` from a parquet (or JSONL) of those columns."""
    src = Path(path)
    mapping: dict[str, str] = {}
    for i, row in _rows_of(src):
        where = f"{src}:{i}"
        mapping[str(_field(row, "id", where))] = str(_field(row, "answer", where))
    if not mapping:
        raise ConvertError(f"{src}: no rows")
    return mapping


def _question(row: JSONObject, where: str) -> str:
    prompt = _field(row, "prompt", where)
    if isinstance(prompt, list) and prompt:
        first = prompt[0]
        text = first.get("content", "") if isinstance(first, dict) else str(first)
    else:
        text = str(prompt) if prompt else ""  # as the release: an empty list is no text
    if not isinstance(text, str) or not text.strip():
        raise ConvertError(f"{where}: field 'prompt': the first message has no text content")
    return text


def _release_image(row: JSONObject, where: str, base: Path) -> bytes:
    images = _field(row, "images", where)
    if not isinstance(images, list) or not images:
        raise ConvertError(f"{where}: field 'images': a list of one image, got {images!r}"[:300])
    if len(images) > 1:
        raise ConvertError(
            f"{where}: field 'images': {len(images)} images; the annotation format holds one per question"
        )
    entry = images[0]
    url = (entry.get("url") or entry.get("image_url")) if isinstance(entry, dict) else entry
    if isinstance(url, str) and url.startswith(("http://", "https://")):
        raise ConvertError(f"{where}: field 'images[0]': a URL ({url[:120]}); the converter works offline: "
                           "download the image and give its bytes or its file path")  # fmt: skip
    if isinstance(entry, str):
        path = Path(entry) if os.path.isabs(entry) else base / entry
        if not path.is_file():
            raise ConvertError(f"{where}: field 'images[0]': no file {path}")
        return path.read_bytes()
    return _image_bytes(entry, where, "images[0]")


def _reward_answer(value: Any, where: str) -> tuple[str, list[str]]:
    """``reward_model.ground_truth``: a string, a list, or ``{"target": [...]}``."""
    if isinstance(value, dict):
        value = value.get("target")
    return _answer(value, where, "reward_model.ground_truth")


def _candidates(reward: dict) -> list[str] | None:
    raw = reward.get("candidate_answers")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return [raw]
    return [str(c) for c in raw] if isinstance(raw, list) else None


def _release_answer(row: JSONObject, case_id: str, answers: dict[str, str] | None, where: str) -> JSONObject:
    """The reference answer in the release judge's order (``answers``, then the answer file), then FVQA's
    ``reward_model.ground_truth``, then an ``answer`` column."""
    if row.get("answers"):
        answer, listed = _answer(row["answers"], where, "answers")
        return {"answer": answer, "answers": listed}
    if answers is not None and case_id in answers:
        return {"answer": answers[case_id], "answers": [answers[case_id]]}
    reward = row.get("reward_model")
    if isinstance(reward, dict) and reward.get("ground_truth") not in (None, ""):
        answer, listed = _reward_answer(reward["ground_truth"], where)
        return {"answer": answer, "answers": listed, "candidate_answers": _candidates(reward)}
    if row.get("answer") not in (None, ""):
        answer, listed = _answer(row["answer"], where)
        return {"answer": answer, "answers": listed}
    extra = f" or id {case_id!r} in the answer file" if answers is not None else ""
    raise ConvertError(
        f"{where}: no answer: fields 'answers', 'reward_model.ground_truth' and 'answer' are missing{extra}"
    )


#: One converted row: its question id, its image's bytes, its annotation fields.
Row = tuple[str, bytes, JSONObject]


def _release_row(row: JSONObject, index0: int, answers: dict[str, str] | None, where: str, base: Path) -> Row:
    case_id = row.get("data_id")
    case_id = str(case_id) if case_id not in (None, "") else f"case_{index0}"
    question = _question(row, where)
    data = _release_image(row, where, base)
    fields = {
        "question_id": case_id, "question": question, **_release_answer(row, case_id, answers, where),
        "category": str(row.get("category") or "unknown"), "data_source": row.get("data_source"),
    }  # fmt: skip
    return case_id, data, fields


def _mmsearch_row(row: JSONObject, where: str) -> Row | None:
    """One row of MMSearch's ``end2end`` split, or None for a query without an image."""
    image = row.get("query_image")
    if image in (None, "", b"") or (isinstance(image, dict) and not image.get("bytes")):
        return None
    qid = str(_field(row, "sample_id", where))
    data = _image_bytes(image, where, "query_image")
    answer, _ = _answer(_field(row, "gt_answer", where), where, "gt_answer")
    alternatives = row.get("alternative_gt_answers") or []
    fields = {
        "question_id": qid, "question": str(_field(row, "query", where)), "answer": answer,
        "answers": [answer, *[str(a) for a in alternatives]], "category": str(row.get("area") or "unknown"),
        "subfield": row.get("subfield"), "timestamp": row.get("timestamp"),
    }  # fmt: skip
    return qid, data, fields


def convert_release(
    benchmark: str,
    source: str | os.PathLike,
    out: str | os.PathLike,
    answer_file: str | os.PathLike | None = None,
) -> ConvertedRelease:
    """One of :data:`RELEASE_BENCHMARKS` from the release's input format (MMSearch also from its own) ->
    ``out/metadata.jsonl`` and ``out/images/``."""
    if benchmark not in RELEASE_BENCHMARKS:
        raise ConvertError(f"unknown benchmark {benchmark!r} (one of {', '.join(RELEASE_BENCHMARKS)})")
    src, root = Path(source), Path(out)
    answers = load_answer_file(answer_file) if answer_file else None
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    rows: list[JSONObject] = []
    skipped, seen = 0, set()
    for i, row in _rows_of(src):
        where = f"{src}:{i}"
        native = benchmark == "mmsearch" and "query" in row and "gt_answer" in row
        got = _mmsearch_row(row, where) if native else _release_row(row, i - 1, answers, where, src.parent)
        if got is None:
            skipped += 1
            continue
        qid, data, fields = got
        if qid in seen:
            raise ConvertError(f"{where}: field 'question_id': {qid!r} repeats an earlier row's")
        seen.add(qid)
        name = f"{len(rows):06d}{_suffix(data)}"  # ids may hold '/' or be long: the file name is the row's position
        (images / name).write_bytes(data)
        rows.append({"question_id": qid, "image": f"images/{name}", **fields, "benchmark": benchmark})
    if not rows:
        raise ConvertError(f"{src}: no row with an image to convert")
    ann = root / "metadata.jsonl"
    write_jsonl_atomic(ann, rows)
    return ConvertedRelease(ann, root, len(rows), skipped)
