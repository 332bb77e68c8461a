"""O3-Bench build records for the tests of its pure parts: a source image with layouts, a valid item, items."""

from __future__ import annotations

from insight_o3.o3bench.records import BenchItem, SourceImage, SourceLayout
from insight_o3.o3bench.validation import check_item


def source(n_layouts=4, subset="chart") -> SourceImage:
    """A 4000x3000 source image of ``subset`` with ``n_layouts`` text layouts (ids from 1)."""
    lays = [SourceLayout(i, (10.0 * i, 10.0, 10.0 * i + 8, 18.0), "text") for i in range(1, n_layouts + 1)]
    return SourceImage(f"{subset}/img", subset, "/data/img.png", 4000, 3000, lays)


# ------------------------------------------------------------------------------------------- validation
#: A valid E.2 item of :func:`source` (cites layouts 1 and 3).
GOOD = {
    "question": "Which city had the larger 2020 value in the Regional Statistics table?",
    "options": "A. Oslo\nB. Rome\nC. Lima\nD. Kyiv\nE. Baku\nF. No right choice",
    "answer": "C",
    "explanation": "Step 1: Lima 40 [layout 3]\nStep 2: Rome 30 [layouts 1, 3]\nStep 3: 40 > 30",
}


# ------------------------------------------------------------------------------------------- review
def items() -> list[BenchItem]:
    """Four valid items (:data:`GOOD`) of one chart image."""
    s = source(4)
    return [check_item(GOOD, s, f"chart/img#q{k}").item for k in range(4)]  # type: ignore[misc]
