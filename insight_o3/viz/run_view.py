"""Browse an evaluation run: ``outputs/eval/<eval_name>/trial_<k>/eval_records.jsonl``.

Each record is the sample's fields plus ``eval_result`` (``status``, ``extracted_answer``, the
response text, ``finish_reason``, ``trajectory``, ``stats``, ``fail_reason`` …). Trajectories hold
messages whose image parts are :class:`~insight_o3.imaging.images.ImageRef` dicts; InSight-o3 runs add a
``search`` entry to each vReasoner message that called the vSearcher (description, returned box in
original pixels, the vSearcher's own sub-trajectory). Every crop shown here is cut again from the
source image at the referenced region, so nothing depends on pixels stored in records.

The directory is read through :class:`~insight_o3.evaluation.run_dir.RunDir` and records through
:class:`~insight_o3.evaluation.schema.EvalRecord` (tolerant of missing optional keys: older runs,
single-model runs without trajectory; a malformed record is a :class:`RunError` naming file, line and
field), and the run directories of the original release's harness are read too (:mod:`.original_run`).
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
from PIL import Image

from ..base.caps import cut_messages, cut_middle
from ..base.json_types import JSONObject
from ..evaluation.attribution import is_insight_o3, n_search_calls
from ..evaluation.metrics import TRIAL_STD_DDOF
from ..evaluation.run_dir import RunDir, RunDirError, StaleSummary, TrialDir
from ..evaluation.schema import STATUSES, EvalRecord, RecordError
from ..imaging.images import ImageError, ImageRef, image_size
from ..protocol import prompts
from ..protocol.attempt_stats import AttemptStats, InSightO3Stats
from ..protocol.questions import question_text
from ..protocol.statuses import LocateStatus, VerdictStatus
from .draw import CROP_COLORS, TARGET_COLOR, DrawBox, ImageResolver, draw_boxes, image_data_url, placeholder
from .original_run import convert_record, is_original_record, original_keys
from .templating import render

log = logging.getLogger(__name__)

#: An evaluation directory that cannot be read; the message names the path (the viewer's name for
#: :class:`~insight_o3.evaluation.run_dir.RunDirError`).
RunError = RunDirError


@dataclass
class SampleResult:
    """One (sample, trial) record for browsing: the schema's :class:`~insight_o3.evaluation.schema.EvalRecord` (its
    fields are declared there once; the viewer reads them through it) and the raw JSON (``record``)."""

    rec: EvalRecord
    trial: int
    record: dict = field(repr=False, default_factory=dict)

    @property
    def key(self) -> str:
        return self.rec.sample_key

    @property
    def category(self) -> str:
        return self.rec.category

    @property
    def question(self) -> str:
        return self.rec.question

    @property
    def options(self) -> str | None:
        return self.rec.options

    @property
    def answer(self) -> str:
        return self.rec.answer

    @property
    def image_path(self) -> str:
        return self.rec.image_path

    @property
    def status(self) -> str:
        return self.rec.eval_result.status

    @property
    def extracted_answer(self) -> str | None:
        return self.rec.eval_result.extracted_answer

    @property
    def text(self) -> str | None:
        return self.rec.eval_result.response

    @property
    def finish_reason(self) -> str | None:
        return self.rec.eval_result.finish_reason

    @property
    def fail_reason(self) -> str | None:
        return self.rec.eval_result.fail_reason

    @property
    def trajectory(self) -> list[JSONObject] | None:
        return self.rec.eval_result.trajectory

    @property
    def stats(self) -> AttemptStats:
        return self.rec.eval_result.stats

    @property
    def is_episode(self) -> bool:
        """An InSight-o3 episode (it reports vSearcher calls); a single-model attempt has none to show."""
        return is_insight_o3(self.rec.eval_result)

    @property
    def n_search_calls(self) -> int:
        return n_search_calls(self.rec.eval_result)

    @property
    def n_search_not_found(self) -> int:
        if isinstance(self.stats, InSightO3Stats):
            return self.stats.n_search_not_found
        return sum(1 for c in search_calls(self) if not c.get("found", True))

    @property
    def is_correct(self) -> bool:
        return self.status == VerdictStatus.CORRECT

    def capped(self, limit: int | None) -> SampleResult:
        """This result with every server text (reply, assistant turns, extracted answer, failure reason) cut to
        ``limit`` characters (:func:`insight_o3.base.caps.cut_middle`, marked ``report --max_text_chars``)."""
        if limit is None:
            return self
        flag = "--max_text_chars"

        def cut(text: str | None) -> str | None:
            return None if text is None else cut_middle(text, limit, flag)

        er = self.rec.eval_result.model_copy(
            update={
                "response": cut(self.text),
                "extracted_answer": cut(self.extracted_answer),
                "fail_reason": cut(self.fail_reason),
                "trajectory": cut_messages(self.trajectory, limit, flag),
            }
        )
        return replace(self, rec=self.rec.model_copy(update={"eval_result": er}))


@dataclass
class Trial:
    path: Path
    index: int
    results: list[SampleResult]
    metrics: dict
    done: bool

    def by_key(self) -> dict[str, SampleResult]:
        return {r.key: r for r in self.results}


@dataclass
class EvalRun:
    """An evaluation (``<eval_name>`` dir) with its trials, ``args.json``, ``summary_metrics.json`` and
    ``run_card.json`` (None when the run has none)."""

    path: Path
    name: str
    trials: list[Trial]
    args: dict
    summary: dict
    card: dict | None = None

    def trial(self, k: int | None = None) -> Trial:
        if k is None:
            return self.trials[0]
        for t in self.trials:
            if t.index == k:
                return t
        raise RunError(f"{self.path}: no trial_{k} (have: {[t.index for t in self.trials]})")

    def image_roots(self) -> list[str]:
        """Where the run's image paths may live (see :func:`image_roots`)."""
        return image_roots(self.args, self.card)


def image_roots(args: dict, card: dict | None = None) -> list[str]:
    """Where a run's image paths may live, from any working directory: each invocation's ``img_dir`` (and the
    annotation file's folder), joined with the directory it ran in (``working_dir``, recorded in ``args.json``
    and in every ``history`` entry of ``run_card.json``) when relative, that directory itself (records keep
    image paths as ``--img_dir`` made them, relative to it), and last the current directory (runs of the
    original release record neither)."""
    history = (card or {}).get("history")
    entries = (
        [args] + [h.get("settings") or {} for h in history if isinstance(h, dict)]
        if isinstance(history, list)
        else [args]
    )
    roots: list[str] = []
    for e in entries:
        wd = e.get("working_dir") if isinstance(e.get("working_dir"), str) else None
        for k in ("img_dir", "ann_file"):
            v = e.get(k)
            if isinstance(v, str) and v:
                base = v if k == "img_dir" else str(Path(v).parent)
                roots.append(os.path.join(wd, base) if wd and not os.path.isabs(base) else base)
        if wd:
            roots.append(wd)
    roots.append(os.getcwd())
    return list(dict.fromkeys(roots))


def _result(rec: dict, trial: int, where: str) -> SampleResult:
    try:
        r = EvalRecord.from_dict(rec, where)
    except RecordError as e:
        raise RunError(str(e)) from None
    return SampleResult(rec=r, trial=trial, record=rec)


def load_trial(
    trial_dir: str | os.PathLike,
    index: int | None = None,
    size_of: Callable[[str], tuple[int, int] | None] | None = None,
) -> Trial:
    """Read ``trial_dir/eval_records.jsonl`` (a torn last line, left by a killed run, is skipped).
    Records written by the original release's harness are converted (:mod:`.original_run`);
    ``size_of(path)`` gives a source image's size for their image references."""
    td = TrialDir(trial_dir)
    if not td.has_records():
        raise RunError(f"{trial_dir}: no eval_records.jsonl (not a trial directory of an evaluation run)")
    if index is None:
        index = td.index or 0
    parsed = list(td.record_lines())
    originals = [rec for _, rec in parsed if is_original_record(rec)]
    if originals:
        keys = iter(original_keys(originals))
        parsed = [
            (i, convert_record(rec, next(keys), size_of, f"{td.records_path}:{i}") if is_original_record(rec) else rec)
            for i, rec in parsed
        ]
    results: dict[str, SampleResult] = {}
    for i, rec in parsed:
        r = _result(rec, index, f"{td.records_path}:{i}")
        results[r.key] = r  # the last record of a key wins (retried failures are appended)
    return Trial(Path(td.path), index, list(results.values()), td.metrics() or {}, td.is_done())


def _public_args(args: dict) -> JSONObject:
    """``args.json`` without secrets (the original harness wrote its API keys there)."""
    return {k: v for k, v in args.items() if not any(h in k.lower() for h in ("key", "token", "secret", "password"))}


def _image_sizes(roots: list[str]) -> Callable[[str], tuple[int, int] | None]:
    resolver = ImageResolver(roots)
    cache: dict[str, tuple[int, int] | None] = {}

    def size_of(image: str) -> tuple[int, int] | None:
        if image not in cache:
            found = resolver.resolve(image)
            try:
                cache[image] = image_size(found) if found is not None else None
            except ImageError:
                cache[image] = None
        return cache[image]

    return size_of


def load_run(path: str | os.PathLike) -> EvalRun:
    """An eval directory (``<eval_name>`` with ``trial_<k>/``) or a single trial directory, written by
    this project or by the original release's harness."""
    path = Path(path)
    if not path.exists():
        raise RunError(f"{path}: evaluation directory not found")
    if not path.is_dir():
        raise RunError(f"{path}: not a directory")
    single = TrialDir(path).has_records()
    root = path.parent if single else path
    rd = RunDir(root).check_format()
    args = _public_args(rd.args() or {})
    card = rd.run_card()
    size_of = _image_sizes(image_roots(args, card))
    if single:
        trials = [load_trial(path, size_of=size_of)]
    else:
        ks = list(range(rd.trial_count())) or rd.trials(with_records=True)  # (started, without a record yet)
        if not ks:
            raise RunError(
                f"{path}: no trial_<k>/eval_records.jsonl found (is this an outputs/eval/<eval_name> "
                f"directory of a run that has started?)"
            )
        trials = [load_trial(rd.trial_dir(k), size_of=size_of) for k in ks]
    if not any(t.results for t in trials):
        raise RunError(f"{path}: the evaluation has no records yet")
    name = str(args.get("eval_name") or root.name)
    try:
        summary = rd.summary() or {}
    except StaleSummary as e:  # the trials are shown; numbers over fewer of them are not the run's
        log.warning("%s", e)
        summary = {}
    return EvalRun(root, name, trials, args, summary, card)


# ---------------------------------------------------------------------------- tables and filters
def results_frame(trial: Trial) -> pd.DataFrame:
    """One row per sample of a trial: key, category, status, answer, extracted, search calls."""
    return pd.DataFrame(
        [
            {
                "key": r.key,
                "category": r.category,
                "status": r.status,
                "answer": r.answer,
                "extracted_answer": r.extracted_answer,
                "n_search_calls": r.n_search_calls,
                "n_search_not_found": r.n_search_not_found,
                "finish_reason": r.finish_reason,
                "fail_reason": r.fail_reason,
            }
            for r in trial.results
        ],
        columns=[
            "key",
            "category",
            "status",
            "answer",
            "extracted_answer",
            "n_search_calls",
            "n_search_not_found",
            "finish_reason",
            "fail_reason",
        ],
    )


def filter_results(
    results: Iterable[SampleResult],
    status: str | Iterable[str] | None = None,
    category: str | Iterable[str] | None = None,
) -> list[SampleResult]:
    """Keep results whose status/category match. ``status="wrong"`` also matches ``incomplete`` and
    ``invalid`` (every judged-or-truncated non-correct answer); use ``"wrong_only"`` for exact."""

    def norm(v: str | Iterable[str] | None) -> set[str] | None:
        return None if v is None else ({v} if isinstance(v, str) else set(v))

    st, cat = norm(status), norm(category)
    if st is not None:
        unknown = st - set(STATUSES) - {"wrong_only"}
        if unknown:
            raise ValueError(f"unknown status filter {sorted(unknown)}; use one of {STATUSES}")
        if VerdictStatus.WRONG in st:
            st |= {VerdictStatus.INCOMPLETE, VerdictStatus.INVALID}
        if "wrong_only" in st:
            st |= {VerdictStatus.WRONG}
    return [r for r in results if (st is None or r.status in st) and (cat is None or r.category in cat)]


def accuracy_by_category(run: EvalRun) -> pd.DataFrame:
    """Accuracy (%) per category (rows, plus "overall") and trial (columns), with the mean and the std over trials
    (:func:`~insight_o3.evaluation.metrics.std_over_trials`)."""
    rows: dict[str, dict] = {}
    for t in run.trials:
        for cat, group in _group(t.results).items():
            rows.setdefault(cat, {})[f"trial_{t.index}"] = 100.0 * sum(r.is_correct for r in group) / len(group)
        if t.results:
            rows.setdefault("overall", {})[f"trial_{t.index}"] = (
                100.0 * sum(r.is_correct for r in t.results) / len(t.results)
            )
    df = pd.DataFrame.from_dict(rows, orient="index")
    df = df[[f"trial_{t.index}" for t in run.trials if f"trial_{t.index}" in df.columns]]
    order = sorted(i for i in df.index if i != "overall") + (["overall"] if "overall" in df.index else [])
    df = df.loc[order]
    df["mean"] = df.mean(axis=1)
    df["std"] = df[[c for c in df.columns if c.startswith("trial_")]].std(axis=1, ddof=TRIAL_STD_DDOF)
    n = Counter(r.category for r in run.trials[0].results)
    df.insert(0, "n", [n.get(i, sum(n.values())) if i != "overall" else sum(n.values()) for i in df.index])
    return df.round(2)


def _group(results: list[SampleResult]) -> dict[str, list[SampleResult]]:
    out: dict[str, list[SampleResult]] = {}
    for r in results:
        out.setdefault(r.category, []).append(r)
    return out


def failure_table(run: EvalRun) -> pd.DataFrame:
    """Non-correct outcomes by status and reason (failed queries, truncations, judge problems)."""
    c: Counter = Counter()
    for t in run.trials:
        for r in t.results:
            if r.status == VerdictStatus.CORRECT:
                continue
            if r.status == VerdictStatus.WRONG:
                reason = "wrong answer" if r.extracted_answer not in (None, "") else "no answer extracted"
            elif r.status == VerdictStatus.INCOMPLETE:
                reason = f"truncated (finish_reason={r.finish_reason})"
            else:
                reason = (r.fail_reason or "unknown").splitlines()[0][:160]
            c[(r.status, reason)] += 1
    df = pd.DataFrame(
        [{"status": s, "reason": reason, "count": n} for (s, reason), n in c.most_common()],
        columns=["status", "reason", "count"],
    )
    return df


# ---------------------------------------------------------------------------- conversations
@dataclass
class Turn:
    """One message of a conversation, text expanded and images as references."""

    index: int
    role: str
    text: str
    images: list[ImageRef]
    search: dict | None = None
    tool: dict | None = None  # the tool call this message answers (the tool layer's record)
    #: the agent a message belongs to where a system has several on one conversation (its ``name``: Insight-V's
    #: ``reasoner`` and ``summary``)
    agent: str | None = None


def _part_text(p: dict) -> str:
    if "text" in p:
        return str(p["text"])
    name = p.get("prompt")
    if isinstance(name, str):
        v = getattr(prompts, name, None)
        if not isinstance(v, str):
            return f"[prompt {name}]"
        fill = p.get("fill")
        if isinstance(fill, dict) and fill:
            try:
                return prompts.fill(v, **{k: str(x) for k, x in fill.items()})
            except KeyError:
                return v + "\n" + json.dumps(fill)
        return v
    return ""


def turns(messages: list[dict]) -> list[Turn]:
    """Messages (compact records or full) as :class:`Turn` s."""
    out = []
    for i, m in enumerate(messages):
        c = m.get("content")
        texts, refs = [], []
        if isinstance(c, str):
            texts.append(c)
        elif isinstance(c, list):
            for p in c:
                if not isinstance(p, dict):
                    continue
                if p.get("type") == "image" and isinstance(p.get("image"), dict):
                    try:
                        refs.append(ImageRef.from_dict(p["image"]))
                    except (KeyError, TypeError):
                        texts.append("[unreadable image reference]")
                else:
                    texts.append(_part_text(p))
        search = m.get("search") if isinstance(m.get("search"), dict) else None
        tool = m.get("tool_call") if isinstance(m.get("tool_call"), dict) else None
        agent = m.get("name") if isinstance(m.get("name"), str) else None
        out.append(Turn(i, str(m.get("role", "?")), "".join(texts), refs, search, tool, agent))
    return out


def conversation(result: SampleResult) -> list[Turn]:
    """The vReasoner conversation of a result; without a recorded trajectory, the question (with
    the whole image) and the final response."""
    if result.trajectory:
        return turns(result.trajectory)
    q = question_text(result.question, result.options)
    out = [Turn(0, "user", q, [])]
    if result.text is not None:
        out.append(Turn(1, "assistant", result.text, []))
    return out


def search_calls(result: SampleResult) -> list[JSONObject]:
    """The vSearcher calls of a result: ``description``, ``status``, ``box`` (original px or None),
    ``found``, ``trajectory`` (the vSearcher's own messages, may be empty)."""
    out = []
    for m in result.trajectory or []:
        s = m.get("search")
        if not isinstance(s, dict):
            continue
        box = s.get("box_original", s.get("box"))
        box = tuple(float(v) for v in box) if isinstance(box, (list, tuple)) and len(box) == 4 else None
        found = s.get("found", box is not None and s.get("status") not in (LocateStatus.NOT_FOUND, LocateStatus.FAILED))
        out.append(
            {
                "description": s.get("description", ""),
                "status": s.get("status"),
                "box": box,
                "found": bool(found),
                "trajectory": s.get("trajectory") or [],
                "error": s.get("error"),
            }
        )
    return out


def crop_refs(result: SampleResult, resolver: ImageResolver | None = None) -> list[ImageRef]:
    """Image references of the conversation that are crops (not the whole source image)."""
    refs = [ref for t in conversation(result) for ref in t.images]
    if not refs:
        return []
    full = _full_region(result, refs, resolver)
    return [r for r in refs if full is None or tuple(round(v) for v in r.region) != full]


def _full_region(result: SampleResult, refs: list[ImageRef], resolver: ImageResolver | None) -> tuple[int, ...]:
    w = h = None
    try:
        if resolver is not None:
            w, h = resolver.open(result.image_path).size
    except ImageError:
        pass
    if w is None or h is None:  # the first image of a conversation is the whole image
        return tuple(round(v) for v in refs[0].region)
    return (0, 0, w, h)


def draw_result(
    result: SampleResult, resolver: ImageResolver | None = None, max_px: int = 1024, show_targets: bool = True
) -> Image.Image:
    """The source image with every crop the vReasoner saw (numbered in order) and, for O3-Bench-like
    records, the annotated target layouts (red)."""
    resolver = resolver or ImageResolver()
    try:
        img = resolver.open(result.image_path)
    except ImageError as e:
        return placeholder(str(e))
    boxes = []
    if show_targets:
        boxes += [DrawBox(b, f"target {lid}", TARGET_COLOR, dashed=True) for lid, b in _target_boxes(result.record)]
    for k, ref in enumerate(crop_refs(result, resolver), start=1):
        boxes.append(DrawBox(ref.region, f"crop {k}", CROP_COLORS[(k - 1) % len(CROP_COLORS)]))
    return draw_boxes(img, boxes, max_px)


def _target_boxes(record: dict) -> list[tuple[str, tuple]]:
    infos = record.get("layout_infos")
    targets = {str(t) for t in record.get("target_layouts") or [] if not isinstance(t, dict)}
    if not isinstance(infos, dict) or not targets:
        return []
    out = []
    for k, info in infos.items():
        if not isinstance(info, dict):
            continue
        lid = str(info.get("layout_id", k))
        b = info.get("bbox")
        if (lid in targets or str(k) in targets) and isinstance(b, (list, tuple)) and len(b) == 4:
            out.append((lid, tuple(float(v) for v in b)))
    return out


# ---------------------------------------------------------------------------- HTML
# Views (plain dataclasses) are prepared here; the markup is in templates/conversation.html.j2.
@dataclass
class CropView:
    cls: str
    region: str
    src: str
    caption: str
    whole: bool = False


@dataclass
class WholeImageView:
    size: str
    whole: bool = True


@dataclass
class SearchView:
    line: str
    n_messages: int
    turns: list[TurnView]


@dataclass
class ToolView:
    """A tool call: its name and arguments, how long it took, its error, the images it read and made."""

    line: str
    error: str | None
    inputs: list[CropView]
    outputs: list[CropView]


@dataclass
class TurnView:
    role: str
    text: str
    items: list[CropView | WholeImageView]
    search: SearchView | None
    collapse: bool
    tool: ToolView | None = None
    label: str = ""  # what the turn is headed with (the role, and its agent where named)


def _tool_view(record: dict, resolver: ImageResolver, thumb_px: int) -> ToolView:
    def views(images: object, caption: str) -> list[CropView]:
        out = []
        for im in images if isinstance(images, list) else []:
            if isinstance(im, dict) and isinstance(im.get("path"), str) and isinstance(im.get("size"), list):
                w, h = (int(v) for v in im["size"][:2])
                ref = ImageRef(im["path"], (0.0, 0.0, float(w), float(h)), (w, h))
                out.append(_crop_view(ref, resolver, thumb_px, f"{caption} {im.get('id', '')}", "crop"))
        return out

    args = json.dumps(record.get("arguments"), ensure_ascii=False)[:300]
    secs = record.get("seconds")
    line = f"tool call: {record.get('name')} {args}" + (f" ({secs:.2f} s)" if isinstance(secs, (int, float)) else "")
    err = record.get("error")
    if err:
        err = f"{record.get('error_kind') or 'error'}: {err}"
    return ToolView(line, err, views(record.get("input_images"), "input"), views(record.get("new_images"), "made"))


def _crop_view(ref: ImageRef, resolver: ImageResolver, thumb_px: int, caption: str, cls: str = "crop") -> CropView:
    try:
        img = resolver.crop(ref, thumb_px)
    except ImageError as e:
        img = placeholder(str(e))
    box = ", ".join(f"{v:.0f}" for v in ref.region)
    return CropView(cls, box, image_data_url(img), f"{caption} [{box}] sent at {ref.size[0]}x{ref.size[1]}")


def _turn_view(
    t: Turn,
    resolver: ImageResolver,
    thumb_px: int,
    full: tuple | None,
    crop_no: list[int],
    collapse_system: bool = True,
    crop_label: str = "crop",
) -> TurnView:
    items: list[CropView | WholeImageView] = []
    for ref in t.images:
        if full is not None and tuple(round(v) for v in ref.region) == full:
            items.append(WholeImageView(f"{ref.size[0]}x{ref.size[1]}"))
        else:
            crop_no[0] += 1
            items.append(
                _crop_view(
                    ref,
                    resolver,
                    thumb_px,
                    f"{crop_label} {crop_no[0]}",
                    "crop" if crop_label == "crop" else "crop zoom",
                )
            )
    search = None
    if t.search is not None:
        s = t.search
        box = s.get("box_original", s.get("box"))
        status = s.get("status", "")
        line = (
            f"vSearcher call: \u201c{s.get('description', '')}\u201d \u2192 {status or ''} {box if box else '(no box)'}"
        )
        sub = s.get("trajectory") or []
        zoom_no = [0]
        sub_views = [
            _turn_view(st, resolver, max(128, thumb_px // 2), full, zoom_no, crop_label="vSearcher zoom")
            for st in turns(sub)
        ]
        search = SearchView(line, len(sub), sub_views)
    tool = _tool_view(t.tool, resolver, thumb_px) if t.tool is not None else None
    if tool is not None:  # the made images are shown with the call
        items = [i for i in items if not (isinstance(i, CropView) and any(o.src == i.src for o in tool.outputs))]
    label = f"{t.role} · {t.agent}" if t.agent else t.role
    return TurnView(t.role, t.text, items, search, collapse_system and t.role == "system", tool, label)


def conversation_html(
    result: SampleResult, resolver: ImageResolver | None = None, thumb_px: int = 512, overview_px: int | None = None
) -> str:
    """A sample's header, the overview image (crops drawn) and the conversation turn by turn with
    every crop redrawn from the source image."""
    resolver = resolver or ImageResolver()
    conv = conversation(result)
    refs = [r for t in conv for r in t.images]
    full = _full_region(result, refs, resolver) if refs else None
    overview = draw_result(result, resolver, overview_px or max(thumb_px, 512))
    calls = search_calls(result)
    crop_no = [0]
    return render(
        "conversation.html.j2",
        r=result,
        overview_src=image_data_url(overview),
        image_name=os.path.basename(result.image_path),
        has_targets=bool(_target_boxes(result.record)),
        n_calls_note=len(calls) if calls and not result.trajectory else 0,
        turns=[_turn_view(t, resolver, thumb_px, full, crop_no) for t in conv],
    )


def compare_frame(a: Trial, b: Trial) -> pd.DataFrame:
    """Samples of two trials (e.g. two runs) side by side, with ``change`` (fixed/broken/same, or lost: an
    item lost to API errors in either, which is no flip)."""
    ra, rb = a.by_key(), b.by_key()
    rows = []
    for key in list(ra) + [k for k in rb if k not in ra]:
        x, y = ra.get(key), rb.get(key)
        sa, sb = (x.status if x else None), (y.status if y else None)
        change = (
            "lost"  # lost to API errors in one run: no answer of that system to compare
            if VerdictStatus.FAILED in (sa, sb)
            else "fixed"
            if sb == VerdictStatus.CORRECT and sa != VerdictStatus.CORRECT
            else "broken"
            if sa == VerdictStatus.CORRECT and sb != VerdictStatus.CORRECT
            else "same"
        )
        either = x or y
        assert either is not None  # the key comes from one of the two runs
        rows.append(
            {
                "key": key,
                "category": either.category,
                "answer": either.answer,
                "status_a": sa,
                "status_b": sb,
                "extracted_a": x.extracted_answer if x else None,
                "extracted_b": y.extracted_answer if y else None,
                "calls_a": x.n_search_calls if x else None,
                "calls_b": y.n_search_calls if y else None,
                "change": change,
            }
        )
    return pd.DataFrame(rows)


def compare_html(
    a: SampleResult | None,
    b: SampleResult | None,
    resolver: ImageResolver | None = None,
    thumb_px: int = 384,
    labels: tuple[str, str] = ("A", "B"),
) -> str:
    """The same sample in two runs, side by side."""
    resolver = resolver or ImageResolver()
    columns = [
        (label, conversation_html(r, resolver, thumb_px) if r is not None else None)
        for r, label in ((a, labels[0]), (b, labels[1]))
    ]
    return render("compare.html.j2", columns=columns)


#: CSS shared by the notebooks' HTML output and the report.
VIEW_CSS = """
.sample-view{font-family:system-ui,sans-serif;font-size:14px}
.sample-head{margin:4px 0}
.status{padding:1px 6px;border-radius:4px;color:#fff;font-size:12px}
.status-correct{background:#2a9d55}.status-wrong{background:#d64545}.status-incomplete{background:#c98a00}
.status-invalid{background:#8a5ad6}.status-failed{background:#555}
.question pre,.msg-text{white-space:pre-wrap;word-break:break-word;background:#f6f6f6;padding:6px;margin:4px 0;max-height:360px;overflow:auto}
.turn{display:flex;gap:8px;border-top:1px solid #ddd;padding:6px 0}
.turn .role{min-width:72px;font-weight:bold;color:#555}
.turn .body{flex:1;min-width:0}
.role-assistant .role{color:#1f5fbf}
.crop{display:inline-block;margin:4px;vertical-align:top}
.crop img{max-width:100%;border:2px solid #1e6ee6}
.overview img{max-width:100%}
figcaption{font-size:12px;color:#555}
.search{background:#eef4ff;padding:4px 6px;margin:4px 0;border-left:3px solid #1e6ee6}
.fail{color:#a00}
.note{color:#777;font-style:italic}
"""


def pick_result(results: list[SampleResult], key: str | None = None) -> SampleResult:
    """The result with ``key``, else the first one that called the vSearcher, else the first."""
    if not results:
        raise RunError("no results to pick from (check the filters)")
    if key is not None:
        for r in results:
            if r.key == str(key):
                return r
        raise RunError(f"no sample with key {key!r} among {len(results)} results")
    return next((r for r in results if r.n_search_calls), results[0])


def style_html() -> str:
    """The ``<style>`` for showing :func:`conversation_html` output in a notebook."""
    return f"<style>{VIEW_CSS}</style>"
