"""Step ``release``: the reviewed items as a benchmark in O3-Bench's own layout (B.1).

* Options A-E of every accepted (or edited) item are shuffled with a fixed seed (``--seed``; each item's order
  depends only on the seed and its id, so adding items never reshuffles the others); F (``No right choice``) stays
  last and the answer letter follows its option. References to option letters in the explanation are renamed with
  it (:mod:`.letter_refs`: "option C", "options A and C", "answer is C", and "(C)" / "C)" unless the item uses a
  letter as a name); what is left as written is listed per item in the run card (``explanation_letter_refs_left``)
  and counted in a note.
* ``release/metadata.jsonl`` holds one O3-Bench record per item (``file_name`` relative to ``release/``, ``subset``,
  ``question``, ``options``, ``answer``, ``explanation``, ``target_layouts``, ``layout_infos``, ``img_width``,
  ``img_height``, plus ``question_id``); images are copied, byte for byte, to ``release/images/<subset>/``. So
  ``evaluate --ann_file release/metadata.jsonl --img_dir release`` and the viewers read it as they read O3-Bench.
* ``release/stats.json``: the statistics the paper reports for O3-Bench (samples and images per category, layouts
  and target layouts per sample, F share, answer positions, resolution), next to the paper's numbers.
* ``release/run_card.json``: package version and commit, every step's model, settings, tokens and cost (from the
  step cards), the prompts' sha256, the validation rules (with their sha256 and the config file's), the seed and
  the metadata file's sha256.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from .. import __version__
from ..base.json_types import JSONObject
from ..evaluation.run_card import git_commit, sha256_file
from ..protocol import prompts as eval_prompts
from ..storage.atomic import write_json_atomic, write_jsonl_atomic
from ..storage.lock import run_lock
from .filtering import filter_coverage
from .letter_refs import Remapped, remap_letter_refs
from .prompts import prompt_hashes
from .records import BenchItem, BuildFileError, SourceImage, read_items, read_sources
from .review import ACCEPTED, read_reviewed
from .steps import read_step_card, step_command
from .validation import LETTERS, NO_RIGHT_CHOICE
from .validation_rules import recorded_rules
from .workspace import STEPS, Workspace

#: What the paper reports for O3-Bench (§3, B.1), for comparison in ``stats.json``.
PAPER_STATS = {
    "samples": 345,
    "images": 204,
    "samples_by_category": {"chart": 163, "map": 182},
    "images_by_category": {"chart": 117, "map": 87},
    "layouts_per_sample": 8.7,
    "target_layouts_per_sample": 2.4,
    "f_share": 0.072,
    "mean_height": 3967,
    "mean_width": 4602,
}


def shuffle_options(item: BenchItem, seed: int) -> tuple[BenchItem, Remapped]:
    """``item`` with options A-E in a seeded random order (F last) and the answer and the explanation's letter
    references (:func:`~.letter_refs.remap_letter_refs`) renamed; returns it and what the renaming did."""
    lines = item.options.split("\n")
    texts = [ln.split(".", 1)[1].strip() for ln in lines[:5]]
    perm = list(range(5))
    random.Random(f"o3bench-release:{seed}:{item.item_id}").shuffle(perm)  # new position k shows old option perm[k]
    new_letter = {LETTERS[old]: LETTERS[k] for k, old in enumerate(perm)}
    options = "\n".join([f"{LETTERS[k]}. {texts[old]}" for k, old in enumerate(perm)] + [NO_RIGHT_CHOICE])
    answer = new_letter.get(item.answer, item.answer)
    refs = remap_letter_refs(item.explanation, new_letter, context="\n".join([item.question, *texts]))
    out = BenchItem(**{**item.to_dict(), "options": options, "answer": answer, "explanation": refs.text})
    return out, refs


def image_file_name(source: SourceImage) -> str:
    """``images/<subset>/<key's stem><suffix>``, relative to the release directory."""
    stem = source.key.split("/", 1)[1]
    return f"images/{source.subset}/{stem}{Path(source.image).suffix.lower()}"


def copy_image(src: str, dst: Path) -> bool:
    """Copy unless an identical-size file is there (a rerun); atomic (temporary file, then rename)."""
    if dst.exists() and dst.stat().st_size == os.path.getsize(src):
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)
    return True


def metadata_record(item: BenchItem, source: SourceImage) -> JSONObject:
    return {
        "question_id": item.item_id,
        "file_name": image_file_name(source),
        "subset": item.subset,
        "question": item.question,
        "options": item.options,
        "answer": item.answer,
        "explanation": item.explanation,
        "target_layouts": item.target_layouts,
        "layout_infos": source.layout_infos(),
        "img_width": source.width,
        "img_height": source.height,
    }


def _mean(xs: Sequence[float]) -> float | None:
    return round(statistics.fmean(xs), 3) if xs else None


def release_stats(items: list[BenchItem], sources: dict[str, SourceImage]) -> JSONObject:
    """The B.1 statistics of a release."""
    cats = sorted({it.subset for it in items})
    imgs = {it.image_key for it in items}
    per_cat = {
        c: {
            "samples": sum(it.subset == c for it in items),
            "images": len({it.image_key for it in items if it.subset == c}),
            "layouts_per_sample": _mean([len(sources[it.image_key].layouts) for it in items if it.subset == c]),
            "target_layouts_per_sample": _mean([len(it.target_layouts) for it in items if it.subset == c]),
        }
        for c in cats
    }
    heights = [sources[k].height for k in imgs]
    widths = [sources[k].width for k in imgs]
    long_sides = [max(sources[k].width, sources[k].height) for k in imgs]
    bins = [(0, 2000), (2000, 3000), (3000, 4000), (4000, 5000), (5000, 10**9)]
    answers = Counter(it.answer for it in items)
    return {
        "samples": len(items),
        "images": len(imgs),
        "by_category": per_cat,
        "layouts_per_sample": _mean([len(sources[it.image_key].layouts) for it in items]),
        "target_layouts_per_sample": _mean([len(it.target_layouts) for it in items]),
        "f_share": round(answers.get("F", 0) / len(items), 4) if items else None,
        "answer_positions": {letter: answers.get(letter, 0) for letter in LETTERS},
        "resolution": {
            "mean_height": _mean(heights),
            "mean_width": _mean(widths),
            "max_long_side": max(long_sides) if long_sides else None,
            "long_side_histogram": {
                (f"{lo // 1000}K-{hi // 1000}K" if hi < 10**9 else f">={lo // 1000}K"): sum(
                    lo <= s < hi for s in long_sides
                )
                for lo, hi in bins
            },
        },
        "paper": PAPER_STATS,
    }


def run_card(
    ws: Workspace, seed: int, metadata: Path, stats: dict, renamed: int, left: dict[str, list[str]]
) -> JSONObject:
    steps = {s: read_step_card(ws, s) for s in STEPS}
    costs = [c["totals"].get("cost_usd") for c in steps.values() if c and c.get("totals")]
    tokens = sum(int(c["totals"].get("tokens_total") or 0) for c in steps.values() if c and c.get("totals"))
    return {
        "package": "insight_o3",
        "version": __version__,
        "git_commit": git_commit(),
        "seeds": {"option_shuffle": seed},
        "prompts_sha256": {
            **prompt_hashes(),
            # the prompts the steps ran with (one's own, from --extract_prompt / --synth_prompt, replace the shipped)
            **{k: v for c in steps.values() if c for k, v in (c.get("prompts_sha256") or {}).items()},
            # the difficulty filter asks as ``evaluate`` does: the judge's letter-extraction prompt
            "MCQ_EXTRACTION_PROMPT": hashlib.sha256(eval_prompts.MCQ_EXTRACTION_PROMPT.encode("utf-8")).hexdigest(),
        },
        "steps": {s: c for s, c in steps.items() if c},
        "validation": recorded_rules(ws.validation_rules),  # the rules, their sha256, the config file's
        "totals": {
            "tokens_total": tokens,
            "cost_usd": round(sum(costs), 6) if any(c is not None for c in costs) else None,
        },
        "metadata_sha256": sha256_file(str(metadata)),
        "samples": stats["samples"],
        "images": stats["images"],
        "explanation_letter_refs_renamed": renamed,
        "explanation_letter_refs_left": left,
    }


def undecided(ws: Workspace, rows: list[dict]) -> tuple[dict[str, int], list[str]]:
    """What keeps the reviewed set from being the whole benchmark: candidates the difficulty filter has not
    decided, items the filter kept after the last ``review apply`` (no row in ``reviewed.jsonl``) and items still
    pending review. Returns the counts and one line per kind that is not zero, saying what to run."""
    cov = filter_coverage(ws)
    reviewed = {r["item_id"] for r in rows}
    late = [it.item_id for it in read_items(ws.require(ws.kept, "filter"), "filter/kept.jsonl")]
    late = [k for k in late if k not in reviewed]
    pending = [r["item_id"] for r in rows if r["decision"] == "pending"]
    lines = []
    if cov.unfiltered:
        lines.append(f"{cov.describe()}: run '{step_command(ws, 'filter')}', then review the new kept items")
    if late:
        lines.append(
            f"{len(late)} kept item(s) have no review decision (first: {late[0]}; the filter kept them after the "
            f"last 'review apply'): run 'review page' and 'review apply' again"
        )
    if pending:
        lines.append(f"{len(pending)} item(s) still pending review (first: {pending[0]}) are not in the release")
    return {"unfiltered": cov.unfiltered, "not_reviewed": len(late), "pending": len(pending)}, lines


def release_workspace(ws: Workspace, seed: int = 0, require_all_decided: bool = False) -> JSONObject:
    """Write the release under the workspace lock; returns the stats, the counts of :func:`undecided` and its
    lines as ``notes``. With ``require_all_decided``, any of those refuses the release (nothing written)."""
    with run_lock(ws.root, "build_o3_bench release"):
        rows = read_reviewed(ws)
        counts, notes = undecided(ws, rows)
        if notes and require_all_decided:
            raise BuildFileError("require_all_decided: " + "; ".join(notes))
        sources = read_sources(ws.require(ws.sources, "sources"))
        accepted = [r["item"] for r in rows if r["decision"] in ACCEPTED]
        accepted.sort(key=lambda it: (it.subset, it.image_key, it.item_id))
        out, renamed, left = [], 0, {}
        for it in accepted:
            shuffled, refs = shuffle_options(it, seed)
            out.append(shuffled)
            renamed += refs.renamed
            if refs.left:
                left[it.item_id] = refs.left
        if left:
            notes.append(
                f"{len(left)} released item(s) have letters in their explanation that were not renamed with the "
                f"option shuffle (a letter used as a name, a range, a letter in no known form; first: "
                f"{next(iter(left))}): check them, listed in release/run_card.json under "
                f"explanation_letter_refs_left"
            )
        rel = ws.release
        rel.mkdir(parents=True, exist_ok=True)
        copied = 0
        for key in dict.fromkeys(it.image_key for it in out):
            copied += copy_image(sources[key].image, rel / image_file_name(sources[key]))
        metadata = rel / "metadata.jsonl"
        write_jsonl_atomic(metadata, [metadata_record(it, sources[it.image_key]) for it in out])
        stats = release_stats(out, sources)
        write_json_atomic(rel / "stats.json", stats)
        write_json_atomic(rel / "run_card.json", run_card(ws, seed, metadata, stats, renamed, left))
        return {
            "samples": len(out),
            "images": stats["images"],
            "images_copied": copied,
            **counts,
            "explanation_refs_left": len(left),
            "notes": notes,
        }
