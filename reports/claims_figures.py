"""Figures for ``specsim claims``: SpecSim's curves against the papers' bands.

A claim row that carries ``extra["series"]`` (``{label: [(x, y), ...]}``) and optionally
``extra["band"]`` (the paper's ``(low, high)``) and ``extra["xlabel"]``/``["ylabel"]`` gets
one panel in ``claims.png``: its curves, with the paper's range shaded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

__all__ = ["claim_figures"]


def claim_figures(rows: Sequence, out_dir: Path) -> list[Path]:
    """Write ``claims.png`` with one panel per row that has a series; [] if none has."""
    panels = [r for r in rows if r.extra.get("series")]
    if not panels:
        return []
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    cols = min(len(panels), 3)
    n_rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(n_rows, cols, figsize=(5.2 * cols, 3.8 * n_rows), squeeze=False)
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
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
        ax.set_title(row.name, fontsize=9)
        ax.set_xlabel(row.extra.get("xlabel", "batch size"))
        ax.set_ylabel(row.extra.get("ylabel", "speedup (×)"))
        ax.legend(fontsize=7)
    for ax in axes.ravel()[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    path = out_dir / "claims.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
