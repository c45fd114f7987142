"""A claims run on paper: the aligned text table, ``claims.csv``/``.json``, ``report.md`` and
``claims.png`` (``reports.claims_figures``), from the rows ``sim.studies.claims`` computes.

Rows are read by attribute (``claim``, ``paper``, ``specsim``, ``verdict``, ``method``,
``assumptions``, ``checks`` with ``label``/``value``/``low``/``high``/``inside``, ``extra``,
``as_dict()``); the verdict rule and its tolerance belong to the study, which passes them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from reports.claims_figures import claim_figures
from reports.tables import make_dir

__all__ = ["format_table", "write_claims", "report_markdown"]


def format_table(rows: Sequence) -> str:
    """Aligned text: one line per claim, assumptions on an indented line below."""
    head = ("claim", "paper", "specsim", "verdict")
    cells = [(r.claim, r.paper, r.specsim, r.verdict) for r in rows]
    widths = [min(max(len(x[i]) for x in [head, *cells]), 60) for i in range(4)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    for r, c in zip(rows, cells, strict=True):
        lines.append("  ".join(x.ljust(w) for x, w in zip(c, widths, strict=True)))
        lines.append(f"    [{r.method}] {r.assumptions}")
    return "\n".join(lines)


def write_claims(rows: Sequence, out_dir: str | Path, tolerance: float,
                 verdicts: Sequence[str]) -> list[Path]:
    """Write ``claims.csv``, ``claims.json``, ``report.md`` and figures under ``out_dir``
    (``tolerance``: what a single published figure stands for; ``verdicts`` in order)."""
    import pandas as pd

    out = make_dir(out_dir)
    df = pd.DataFrame([{k: v for k, v in r.as_dict().items() if k != "checks"} for r in rows])
    paths = [out / "claims.csv", out / "claims.json", out / "report.md"]
    df.to_csv(paths[0], index=False)
    paths[1].write_text(json.dumps([r.as_dict() for r in rows], indent=2))
    paths[2].write_text(report_markdown(rows, tolerance, verdicts))
    paths.extend(claim_figures(rows, out))
    return paths


def report_markdown(rows: Sequence, tolerance: float, verdicts: Sequence[str]) -> str:
    """A short report: the table, then per claim its checks and assumptions."""
    counts = {v: sum(r.verdict == v for r in rows) for v in verdicts}
    lines = [
        "# Paper claims under SpecSim's cost model",
        "",
        "Verdicts are computed from the numbers: a paper's range is its interval; a single "
        f"figure stands for ±{tolerance:.0%}. "
        + ", ".join(f"{n} {v}" for v, n in counts.items() if n) + ".",
        "",
        "| claim | paper | SpecSim | verdict | method |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {r.claim} | {r.paper} | {r.specsim} | **{r.verdict}** | {r.method} |"
              for r in rows]
    for r in rows:
        lines += ["", f"## {r.claim}", "", f"*{r.verdict}* — {r.assumptions}", ""]
        lines += [f"- {c.label}: {_fmt(c.value)} vs [{_fmt(c.low)}, {_fmt(c.high)}]"
                  f"{'' if c.inside else '  ← outside'}" for c in r.checks]
    return "\n".join(lines) + "\n"


def _fmt(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return "∞" if math.isinf(x) else f"{x:.3g}"
