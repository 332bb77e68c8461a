"""Why an episode failed, from its record alone (no model call, no image decoding).

Every (sample, trial) record gets one **bucket**, decided in this order:

=====================  ==============================================================================
``correct``            judged correct
``summary_rescued``    Insight-V: judged correct although the reasoning chain named a wrong answer
                       (the summary agent overruled a wrong chain)
``lost``               ``failed``: lost to API errors or an unusable image (rerun ``--retry_failed``)
``format_failure``     no answer to judge because of the answering model: a truncated reply
                       (``incomplete``), an InSight-o3 episode that ran out of format retries or called
                       the tool past the limit, or a reply in which no answer could be found
``summary_overruled``  Insight-V: the reasoning chain's own answer was judged correct, the summary agent's
                       answer wrong (it overruled a right chain)
``not_found``          InSight-o3: the vSearcher delivered no crop (every call "not found"), or an
                       answer without a valid box ended the episode
``no_search``          InSight-o3: the vReasoner answered without calling the vSearcher, and was wrong
``crop_missed``        crops were shown, but they cover less of the annotated evidence than
                       ``coverage_threshold``
``crop_hit_wrong``     the crops covered the evidence, and the answer is still wrong
``crops_unannotated``  crops were shown and the answer is wrong; the sample has no evidence annotation
``wrong_answer``       a single model that saw no crop answered wrong
=====================  ==============================================================================

**Evidence coverage** (the automatic counterpart of the paper's D.3 crop quality levels). The crops
are the image references of the conversation other than the whole image: the vReasoner's crops in
InSight-o3 mode, the target-layout crops of ``--oracle_crops``. A target layout (see
:mod:`.evidence`) is *seen* when one crop contains at least ``contain`` (95 %) of its area — the
fork's "covered" rule for the IoU reward (``intersection / area(gt) > 0.95``); D.3 calls a crop that
truncates a target low quality, so a target split over two crops is not seen. The episode's
coverage is the share of its target layouts seen; below ``coverage_threshold`` (default 1.0: every
target layout seen, as the fork's reward takes the minimum over GT boxes) the crops *missed the
evidence*. Each crop also gets its D.3 level: ``low`` (contains no target), ``high`` (contains
targets whose joint bounding box fills at least ``tight`` = 25 % of the crop), else ``medium``
(the targets with too much context).

**The D.4 split** of the errors of InSight-o3 episodes (``lost`` and ``correct`` excluded): the
*vReasoner*'s (``format_failure``, ``no_search``, ``crop_hit_wrong``: it broke the protocol, did not
look, or saw the evidence and reasoned wrong), the *vSearcher*'s (``not_found``, ``crop_missed``:
it did not deliver the evidence asked for), and ``unattributed`` (``crops_unannotated``). From the
records alone a crop that misses the evidence cannot be told apart from a region description that
asked for the wrong place; both count as the vSearcher's, so the vSearcher's share is an upper bound.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..base.json_types import JSONObject
from ..imaging.geometry import Box, box_area
from ..protocol.attempt_stats import InSightO3Stats, InsightVStats
from ..protocol.evidence import evidence_boxes
from ..protocol.statuses import EpisodeStatus, VerdictStatus
from ..protocol.trajectory import image_refs
from .schema import EvalRecord, EvalResult

BUCKETS = (
    "correct",
    "summary_rescued",
    "lost",
    "format_failure",
    "summary_overruled",
    "not_found",
    "no_search",
    "crop_missed",
    "crop_hit_wrong",
    "crops_unannotated",
    "wrong_answer",
)
#: One line per bucket, for tables and the report.
BUCKET_LABELS = {
    "correct": "correct",
    "summary_rescued": "correct: summary overruled a wrong chain",
    "lost": "lost to API errors",
    "format_failure": "format failure / no answer",
    "summary_overruled": "summary overruled a right chain",
    "not_found": "vSearcher found nothing",
    "no_search": "no search",
    "crop_missed": "crop missed the evidence",
    "crop_hit_wrong": "crop hit, answer wrong",
    "crops_unannotated": "crops shown, evidence not annotated",
    "wrong_answer": "wrong answer (no crops)",
}
#: D.4: whose error each bucket is, for InSight-o3 episodes.
BLAME = {
    "format_failure": "vreasoner",
    "no_search": "vreasoner",
    "crop_hit_wrong": "vreasoner",
    "not_found": "vsearcher",
    "crop_missed": "vsearcher",
    "crops_unannotated": "unattributed",
}
SPLIT = ("vreasoner", "vsearcher", "unattributed")
#: The buckets of records judged correct.
CORRECT_BUCKETS = ("correct", "summary_rescued")
QUALITY_LEVELS = ("high", "medium", "low")
#: A target is inside a crop when this share of its area is (the fork's ``covered`` threshold).
CONTAIN = 0.95
#: A crop is D.3 "high" quality when its contained targets' bounding box fills this share of it.
TIGHT = 0.25
DEFAULT_COVERAGE_THRESHOLD = 1.0
#: Episode statuses (``eval_result.stats.episode_status``) of each kind.
_FORMAT_STATUSES = (EpisodeStatus.FORMAT_FAILED, EpisodeStatus.SEARCH_AFTER_LIMIT)
_SEARCHER_STATUSES = (EpisodeStatus.SEARCH_INVALID,)


@dataclass
class Attribution:
    """The attribution of one record."""

    bucket: str
    blame: str | None  # "vreasoner" | "vsearcher" | "unattributed"; None: correct, lost, or no vSearcher
    insight_o3: bool  # an InSight-o3 episode (vReasoner + vSearcher)
    n_crops: int = 0
    evidence_coverage: float | None = None  # share of target layouts seen; None: no crops or no annotation
    target_coverage: dict[str, float] = field(default_factory=dict)  # per target: best share inside one crop
    crop_quality: list[str] = field(default_factory=list)  # D.3 level of each crop (annotated samples)

    def to_dict(self) -> JSONObject:
        return {
            "bucket": self.bucket,
            "blame": self.blame,
            "insight_o3": self.insight_o3,
            "n_crops": self.n_crops,
            "evidence_coverage": self.evidence_coverage,
            "target_coverage": dict(self.target_coverage),
            "crop_quality": list(self.crop_quality),
        }


def _inside(target: Box, crop: Box) -> float:
    """Share of ``target``'s area inside ``crop``."""
    ix = (max(target[0], crop[0]), max(target[1], crop[1]), min(target[2], crop[2]), min(target[3], crop[3]))
    a = box_area(target)
    return box_area(ix) / a if a > 0 else 0.0


def crop_regions(record: EvalRecord) -> list[Box]:
    """The distinct crops the answering model was shown: image references of the conversation (its
    top-level messages, not the vSearcher's own) other than the whole image, which comes first."""
    refs = image_refs(record.eval_result.trajectory or [])
    if not refs:
        return []
    whole = tuple(round(v, 2) for v in refs[0].region)
    seen: dict[tuple, Box] = {}
    for r in refs[1:]:
        key = tuple(round(v, 2) for v in r.region)
        if r.path == refs[0].path and key != whole:
            seen.setdefault(key, r.region)
    return list(seen.values())


def crop_quality(crop: Box, targets: list[Box], contain: float = CONTAIN, tight: float = TIGHT) -> str:
    """The D.3 level of one crop against the sample's target layouts."""
    inside = [t for t in targets if _inside(t, crop) >= contain]
    if not inside:
        return "low"
    union = (min(t[0] for t in inside), min(t[1] for t in inside), max(t[2] for t in inside), max(t[3] for t in inside))
    area = box_area(crop)
    return "high" if area > 0 and box_area(union) / area >= tight else "medium"


def _searches(er: EvalResult) -> list[JSONObject]:
    """The vSearcher calls of the trajectory (its messages with a ``search`` record)."""
    return [m for m in er.trajectory or [] if isinstance(m, dict) and isinstance(m.get("search"), dict)]


def is_insight_o3(er: EvalResult) -> bool:
    """An InSight-o3 episode: its stats are (or, for a record without them, its trajectory has vSearcher calls)."""
    return isinstance(er.stats, InSightO3Stats) or bool(_searches(er))


def n_search_calls(er: EvalResult) -> int:
    """The episode's vSearcher calls: as its stats count them, else as its trajectory has them."""
    return er.stats.n_search_calls if isinstance(er.stats, InSightO3Stats) else len(_searches(er))


def chain_status(record: EvalRecord) -> VerdictStatus | None:
    """Insight-V: the judge's verdict on the reasoning chain's own answer (``stats.judged["chain"]``): ``correct``,
    ``wrong`` (it names a wrong answer), else None (no chain, no answer in it, cut off, not judged)."""
    stats = record.eval_result.stats
    chain = stats.judged.get("chain") if isinstance(stats, InsightVStats) else None
    if chain is None:
        return None
    if chain.status == VerdictStatus.CORRECT or (chain.status == VerdictStatus.WRONG and chain.has_answer):
        return chain.status
    return None


def attribute(
    record: EvalRecord,
    coverage_threshold: float = DEFAULT_COVERAGE_THRESHOLD,
    contain: float = CONTAIN,
    tight: float = TIGHT,
) -> Attribution:
    """The bucket of one record (see the module docstring), with its evidence coverage."""
    er = record.eval_result
    io3 = is_insight_o3(er)
    crops = crop_regions(record)
    evidence = evidence_boxes(record.fields, strict=False)
    targets = [e.box for e in evidence or []]
    cov: dict[str, float] = {}
    coverage = None
    quality: list[str] = []
    if evidence and crops:
        cov = {e.id: max(_inside(e.box, c) for c in crops) for e in evidence}
        coverage = sum(v >= contain for v in cov.values()) / len(cov)
        quality = [crop_quality(c, targets, contain, tight) for c in crops]

    def done(bucket: str) -> Attribution:
        blame = BLAME.get(bucket) if io3 else None
        return Attribution(bucket, blame, io3, len(crops), coverage, cov, quality)

    status = er.status
    chain = chain_status(record)
    if status == VerdictStatus.CORRECT:
        return done("summary_rescued" if chain == VerdictStatus.WRONG else "correct")
    if status == VerdictStatus.FAILED:
        return done("lost")
    episode = er.stats.episode_status
    if status == VerdictStatus.INCOMPLETE or episode in _FORMAT_STATUSES:
        return done("format_failure")
    if status == VerdictStatus.WRONG and er.has_answer and chain == VerdictStatus.CORRECT:
        return done("summary_overruled")
    if io3 and episode in _SEARCHER_STATUSES:
        return done("not_found")
    if status == VerdictStatus.INVALID or (status == VerdictStatus.WRONG and not er.has_answer):
        return done("format_failure")
    if io3 and not crops:
        return done("no_search" if n_search_calls(er) == 0 else "not_found")
    if not crops:
        return done("wrong_answer")
    if coverage is None:
        return done("crops_unannotated")
    return done("crop_missed" if coverage < coverage_threshold else "crop_hit_wrong")


def _counts(atts: list[Attribution]) -> dict[str, int]:
    c = Counter(a.bucket for a in atts)
    return {b: c.get(b, 0) for b in BUCKETS}


def attribution_metrics(
    records: Iterable[EvalRecord], coverage_threshold: float = DEFAULT_COVERAGE_THRESHOLD
) -> JSONObject:
    """The attribution numbers of one trial's records, for ``eval_metrics.json``:

    * ``attribution`` — records per bucket (every bucket listed), ``attribution_ratio`` — the same / total;
    * ``category_attribution`` — records per bucket per category;
    * InSight-o3 records: ``error_split`` — the D.4 split of their errors (``vreasoner``,
      ``vsearcher``, ``unattributed``, ``errors``) and ``error_split_ratio`` (shares of the errors);
    * with annotated evidence and crops: ``evidence_coverage`` (mean over those episodes, and ``n``)
      and ``crop_quality`` (crops per D.3 level)."""
    recs = list(records)
    atts = [attribute(r, coverage_threshold) for r in recs]
    n = len(atts)
    counts = _counts(atts)
    out: dict = {
        "attribution": counts,
        "attribution_ratio": {b: (v / n if n else 0.0) for b, v in counts.items()},
    }
    by_cat: dict[str, list[Attribution]] = defaultdict(list)
    for r, a in zip(recs, atts):
        by_cat[r.category].append(a)
    out["category_attribution"] = {cat: _counts(v) for cat, v in sorted(by_cat.items())}
    split = error_split(atts)
    if split is not None:
        out["error_split"] = split
        errors = split["errors"]
        out["error_split_ratio"] = {k: (split[k] / errors if errors else 0.0) for k in SPLIT}
    covs = [a.evidence_coverage for a in atts if a.evidence_coverage is not None]
    if covs:
        out["evidence_coverage"] = {"mean": sum(covs) / len(covs), "n": len(covs)}
        q = Counter(level for a in atts for level in a.crop_quality)
        out["crop_quality"] = {level: q.get(level, 0) for level in QUALITY_LEVELS}
    return out


def error_split(atts: list[Attribution]) -> JSONObject | None:
    """The D.4 split of the InSight-o3 episodes' errors, or None without InSight-o3 episodes."""
    io3 = [a for a in atts if a.insight_o3]
    if not io3:
        return None
    c = Counter(a.blame for a in io3 if a.blame is not None)
    out = {k: c.get(k, 0) for k in SPLIT}
    out["errors"] = sum(out.values())
    return out
