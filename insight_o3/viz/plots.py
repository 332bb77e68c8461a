"""Figures without pyplot's global state (no backend switching, nothing to close), and their
inline encodings for HTML pages."""

from __future__ import annotations

import io
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure


def new_figure(nrows: int = 1, ncols: int = 1, figsize: tuple[float, float] = (6, 3.5)) -> tuple[Figure, Any]:
    """``(fig, axes)`` like ``plt.subplots`` but detached from pyplot; notebooks ``display(fig)``."""
    fig = Figure(figsize=figsize)
    axes = fig.subplots(nrows, ncols)
    return fig, axes


def figure_svg(fig: Figure) -> str:
    """The figure as an inline ``<svg>`` element whose texts stay text (searchable, selectable)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    svg = buf.getvalue()
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


def legend_below(ax: Axes, ncol: int) -> None:
    """The legend under the axes, outside the plotting area, so it can never cover a bar (the figure is
    saved with ``bbox_inches="tight"``, which keeps it)."""
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=max(1, ncol), frameon=False)
