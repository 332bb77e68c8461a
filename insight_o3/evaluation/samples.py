"""Benchmark annotations: one JSON object per line, validated before any API call.

Accepted layouts (all real files in ``shared/benchmarks/`` and O3-Bench's ``metadata.jsonl``):
the image under ``image`` or ``file_name`` (relative to ``img_dir``), ``category`` or ``subset``,
optional ``options`` (text kept as is; lists/dicts formatted), ``question_id`` int or str, and any
other fields (``target_layouts``, ``layout_infos``, ``explanation`` …) kept in ``extra``. Any column name works: a
field named like a key the harness writes into every record (``index``, ``sample_key`` …:
:data:`~insight_o3.protocol.sample.HARNESS_KEYS`) is kept under the record's ``row`` key instead of replacing it.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..base.json_types import JSONObject
from ..base.paths import OutsideImageDir, outside_message, resolve_image_path
from ..protocol.parsing import format_options
from ..protocol.sample import AnnotationError, Sample
from ..storage.jsonl import iter_jsonl

IMAGE_FIELDS = ("image", "file_name")
CATEGORY_FIELDS = ("category", "subset")
_KNOWN = {"question_id", "question", "options", "answer", *IMAGE_FIELDS, *CATEGORY_FIELDS}
#: How many missing images are listed in the error message.
MAX_REPORTED = 5


def _text_field(obj: dict, name: str, where: str) -> str:
    v = obj.get(name)
    if isinstance(v, bool) or not isinstance(v, (str, int, float)) or str(v).strip() == "":
        got = "missing" if name not in obj else f"empty or not text ({type(v).__name__})"
        raise AnnotationError(f"{where}: field '{name}' is {got}")
    return str(v)


def _parse_line(obj: dict, where: str, index: int, line: int, img_dir: str, allow_outside: bool = False) -> Sample:
    question = _text_field(obj, "question", where)
    answer = _text_field(obj, "answer", where)
    image_field = next((f for f in IMAGE_FIELDS if f in obj), None)
    image = obj.get(image_field) if image_field else None
    if image_field is None or not isinstance(image, str) or not image.strip():
        raise AnnotationError(
            f"{where}: field 'image' (or 'file_name') is "
            f"{'missing' if image_field is None else 'empty or not a string'}"
        )
    try:
        image_path = resolve_image_path(img_dir, image, allow_outside=allow_outside)
    except OutsideImageDir as e:
        raise AnnotationError(outside_message(where, image_field, e)) from None
    options = obj.get("options")
    if options is not None and not isinstance(options, (str, list, dict)):
        raise AnnotationError(
            f"{where}: field 'options' must be text, a list or an object, not {type(options).__name__}"
        )
    qid = obj.get("question_id")
    if qid is not None and (isinstance(qid, bool) or not isinstance(qid, (int, str))):
        raise AnnotationError(f"{where}: field 'question_id' must be an integer or a string")
    cat_field = next((f for f in CATEGORY_FIELDS if obj.get(f) not in (None, "")), None)
    extra = {k: v for k, v in obj.items() if k not in _KNOWN}
    # keep the secondary image/category field names if both were present
    for f in (*IMAGE_FIELDS, *CATEGORY_FIELDS):
        if f in obj and f not in (image_field, cat_field, "image", "category"):
            extra[f] = obj[f]
    return Sample(
        index=index,
        question_id=qid,
        image=image,
        image_path=image_path,
        question=question,
        options=format_options(options),
        answer=answer,  # as written: the original matches and judges it unstripped
        category=str(obj[cat_field]) if cat_field else "unknown",
        extra=extra,
        line=line,
        image_field=image_field,
        category_field=cat_field,
    )


def load_samples(
    ann_file: str | os.PathLike, img_dir: str | os.PathLike, check_images: bool = True, allow_outside: bool = False
) -> list[Sample]:
    """Read and validate an annotation file; raise :class:`AnnotationError` on the first problem
    (all missing images are checked, the first few reported). Image names must stay inside ``img_dir``
    (:func:`insight_o3.base.paths.resolve_image_path`) unless ``allow_outside``."""
    ann_file, img_dir = str(ann_file), str(img_dir)
    samples: list[Sample] = []
    for where, line_no, obj in iter_jsonl(ann_file, AnnotationError):
        samples.append(_parse_line(obj, where, len(samples), line_no, img_dir, allow_outside))
    if not samples:
        raise AnnotationError(f"{ann_file}: no samples (the file is empty)")
    _assign_keys(samples)
    if check_images:
        _check_images(samples, ann_file, img_dir)
    return samples


def _assign_keys(samples: list[Sample]) -> None:
    ids = [s.question_id for s in samples]
    unique = None not in ids and len({str(i) for i in ids}) == len(ids)
    for s in samples:
        s.key = str(s.question_id) if unique else f"#{s.index}"


def _check_images(samples: list[Sample], ann_file: str, img_dir: str) -> None:
    if not os.path.isdir(img_dir):
        raise AnnotationError(f"{ann_file}: image directory not found: {img_dir}")
    checked: dict[str, bool] = {}
    missing = []
    for s in samples:
        if s.image_path not in checked:
            checked[s.image_path] = Path(s.image_path).is_file()
        if not checked[s.image_path]:
            missing.append(s)
    if missing:
        listed = "; ".join(f"line {s.line} field '{s.image_field}': {s.image_path}" for s in missing[:MAX_REPORTED])
        more = f" (and {len(missing) - MAX_REPORTED} more)" if len(missing) > MAX_REPORTED else ""
        raise AnnotationError(f"{ann_file}: {len(missing)} image file(s) not found under {img_dir}: {listed}{more}")


def subset_spec(
    limit: int | None = None, sample_ids: list[str] | None = None, categories: list[str] | None = None
) -> JSONObject | None:
    """The subset a run asked for (None: the whole file), as stored in ``run_card.json``."""
    if limit is None and not sample_ids and not categories:
        return None
    return {
        "limit": limit,
        "sample_ids": list(sample_ids) if sample_ids else None,
        "categories": list(categories) if categories else None,
    }


def select_subset(samples: list[Sample], spec: dict | None, ann_file: str = "") -> list[Sample]:
    """The samples of ``spec`` (see :func:`subset_spec`), in file order: those of ``categories``, then of
    ``sample_ids`` (a sample key or question_id), then the first ``limit``. Unknown ids or categories
    are an :class:`AnnotationError` naming them."""
    if not spec:
        return samples
    out = samples
    if spec.get("categories"):
        known = {s.category for s in samples}
        unknown = [c for c in spec["categories"] if c not in known]
        if unknown:
            raise AnnotationError(
                f"{ann_file}: categories {', '.join(unknown)} not in the file (it has: {', '.join(sorted(known))})"
            )
        want = set(spec["categories"])
        out = [s for s in out if s.category in want]
    if spec.get("sample_ids"):
        by_id: dict[str, Sample] = {}
        for s in samples:
            by_id.setdefault(s.key, s)
            if s.question_id is not None:
                by_id.setdefault(str(s.question_id), s)
        unknown = [i for i in spec["sample_ids"] if i not in by_id]
        if unknown:
            shown = ", ".join(unknown[:MAX_REPORTED]) + (" …" if len(unknown) > MAX_REPORTED else "")
            raise AnnotationError(
                f"{ann_file}: sample_ids {shown} not in the file (ids are question_id values, "
                f"or #<0-based line index> when question_ids are missing or repeated)"
            )
        want_keys = {by_id[i].key for i in spec["sample_ids"]}
        out = [s for s in out if s.key in want_keys]
    if spec.get("limit") is not None:
        out = out[: spec["limit"]]
    if not out:
        raise AnnotationError(f"{ann_file}: the subset {spec} selects no sample")
    return out
