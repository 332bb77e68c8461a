"""The Table 6 oracle (``evaluate --oracle_crops target_layouts``): a single model gets the crops of the
sample's annotated target layouts together with the full image (paper B.3, the "+ target layouts" rows).

The request is the baseline's (docs/fidelity.md rows 14-19) with the crops added as image parts
after the full image and before the text: ``[full image, crop_1, …, crop_k, question]``, the crops
in the order of ``target_layouts``, no text of our own. Each crop is cut from the original image at
the layout's box, enlarged like the InSight-o3 vReasoner's crops (short side >= 56 px, area >= 112x112,
the fork's rule) and held to the same per-image budget as the full image; see docs/fidelity.md
("Table 6 oracle") for why this layout.
"""

from __future__ import annotations

from ..imaging.geometry import Box
from ..imaging.images import Resize
from ..protocol.evidence import evidence_boxes
from ..protocol.sample import AnnotationError, Sample
from .reasoner_session import vreasoner_resize


def oracle_regions(sample: Sample, where: str = "") -> list[Box]:
    """The target layouts' boxes of a sample, in annotation order (identical boxes once). A sample
    without target layouts, or with a malformed one, is an :class:`AnnotationError` naming the field."""
    where = where or f"line {sample.line}"
    if sample.extra.get("target_layouts") in (None, "", []):
        raise AnnotationError(
            f"{where}: field 'target_layouts' is missing or empty; oracle_crops target_layouts needs "
            f"O3-Bench's target layout annotation for every sample"
        )
    try:
        boxes = evidence_boxes(sample.extra, where, strict=True) or []
    except ValueError as e:
        raise AnnotationError(str(e)) from None
    return list(dict.fromkeys(e.box for e in boxes))


def check_oracle_samples(samples: list[Sample], ann_file: str) -> None:
    """Every sample has usable target layouts (checked before any request; the error names the line)."""
    for s in samples:
        oracle_regions(s, f"{ann_file}:{s.line}")


def oracle_crop_resize(max_pixels: int | None) -> Resize:
    """How the oracle's crops are sized: the InSight-o3 vReasoner's crop rule at the run's image budget."""
    return vreasoner_resize(max_pixels)
