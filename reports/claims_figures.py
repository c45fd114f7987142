"""Figures for ``specsim claims``: SpecSim's curves against the papers' bands.

A claim row that carries ``extra["series"]`` (``{label: [(x, y), ...]}``) and optionally
``extra["band"]`` (the paper's ``(low, high)``) and ``extra["xlabel"]``/``["ylabel"]`` gets
one panel in ``claims.png``: its curves, with the paper's range shaded, titled with the
claim itself (wrapped), under a figure title and a caption that say how to read them.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

__all__ = ["claims_figure", "claim_figures"]


def claim_figures(rows: Sequence, out_dir: Path) -> list[Path]:
    """Write ``claims.png`` with one panel per row that has a series; [] if none has."""
    from reports.figures import save

    fig = claims_figure(rows)
    return [] if fig is None else [save(fig, Path(out_dir) / "claims.png")]


def claims_figure(rows: Sequence):
    """The claims figure (a matplotlib Figure, not saved), or None when no row has a series."""
    panels = [r for r in rows if r.extra.get("series")]
    if not panels:
        return None
    from matplotlib.ticker import FormatStrFormatter

    from reports.figures import plt  # pyplot after the Agg backend is selected (files only)

    cols = min(len(panels), 3)
    n_rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(n_rows, cols, figsize=(5.2 * cols, 4.2 * n_rows), squeeze=False)
    for ax, row in zip(axes.ravel(), panels, strict=False):
        band = row.extra.get("band")
        if band is not None:
            low, high = band
            ax.axhspan(low, high, color="tab:green", alpha=0.15, label="paper")
        for label, pts in row.extra["series"].items():
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, marker="o", label=label)
        if row.extra.get("logx"):
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))  # 1, 2, 4, not 2^0
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
        ax.set_title(textwrap.fill(f"{row.claim} [{row.verdict}]", 58), fontsize=8)
        ax.set_xlabel(row.extra.get("xlabel", "batch size (sequences)"))
        ax.set_ylabel(row.extra.get("ylabel", "speedup (×)"))
        ax.legend(fontsize=7)
    for ax in axes.ravel()[len(panels):]:
        ax.set_visible(False)
    width_in, height_in = fig.get_size_inches()
    # Wrap to the figure's width (~11 characters per inch at the title's size, ~19 at 7.5 pt).
    title = textwrap.fill("Paper claims: SpecSim's numbers (lines) against the paper's range "
                          "(green band)", int(11 * width_in))
    note = textwrap.fill("Speedup = per-token latency (or decode rate) without speculation "
                         "over with it, same requests; dotted line = 1× (no gain). Verdicts "
                         "are computed from every checked point (report.md lists each).",
                         int(19 * width_in))
    fig.suptitle(title)
    fig.text(0.01, 0.005, note, fontsize=7.5, ha="left", va="bottom")
    top = 1 - 0.25 * (title.count("\n") + 1) / height_in
    bottom = 0.14 * (note.count("\n") + 1) / height_in
    fig.tight_layout(rect=(0, bottom, 1, top))
    return fig
