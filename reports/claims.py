"""Paper claims under SpecSim's cost model: rows, verdicts, the registry and the run folder.

A claim is checked through one or more :class:`Check`\\ s: a number SpecSim computed (from a
simulation or, where the engine cannot run the setup, from the cost model and the
calibrated acceptance) next to the interval the paper states. Verdicts are *computed* from
those numbers by :func:`verdict`, never written down:

- ``inside``: every SpecSim number lies in the paper's interval;
- ``partly inside``: some do, some do not;
- ``outside``: none does;
- ``not comparable``: SpecSim has no number under the paper's definition (a ``None``).

A paper's range ("1.5–2.5×") is its interval as stated. A single figure ("3.4×") becomes
``figure × (1 ± POINT_TOLERANCE)``: papers round to two digits and measure on one machine,
and a cost model of a different machine should not be held to the third digit. A
qualitative claim is turned into an interval on a derived number and says so (e.g. "the
gain shrinks with batch size" is ``speedup(16) / speedup(1) in [0, 1]``).

The claim groups live in ``reports.claims_specinfer``, ``reports.claims_leviathan`` and
``reports.claims_batching``; :data:`GROUPS` names them for ``specsim claims --only``.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specdec.errors import UserError

__all__ = [
    "POINT_TOLERANCE",
    "VERDICTS",
    "GROUPS",
    "Check",
    "ClaimRow",
    "point",
    "verdict",
    "span",
    "run_claims",
    "format_table",
    "write_claims",
]

POINT_TOLERANCE = 0.10
VERDICTS = ("inside", "partly inside", "outside", "not comparable")

# group name -> (module, function); each function takes ``quick: bool`` and returns rows.
GROUPS: dict[str, tuple[str, str]] = {
    "specinfer-distributed": ("reports.claims_specinfer", "distributed_claims"),
    "specinfer-offload": ("reports.claims_specinfer", "offload_claims"),
    "specinfer-table2": ("reports.claims_specinfer", "table2_claims"),
    "leviathan": ("reports.claims_leviathan", "leviathan_claims"),
    "batching": ("reports.claims_batching", "batching_claims"),
    "trees-vs-load": ("reports.claims_batching", "tree_load_claims"),
}


@dataclass(frozen=True)
class Check:
    """One SpecSim number against the paper's closed interval ``[low, high]``.

    ``value`` is ``None`` where SpecSim has no number under the paper's definition.
    """

    label: str
    value: float | None
    low: float
    high: float

    def __post_init__(self) -> None:
        if not self.low <= self.high:
            raise UserError(f"check {self.label}: interval low {self.low} > high {self.high}")

    @property
    def comparable(self) -> bool:
        """Whether there is a finite SpecSim number to compare."""
        return self.value is not None and math.isfinite(self.value)

    @property
    def inside(self) -> bool:
        """``low <= value <= high`` (False when not comparable)."""
        return self.comparable and self.low <= self.value <= self.high

    def as_dict(self) -> dict:
        """JSON-ready form (infinite bounds become ``None``)."""
        return {
            "label": self.label,
            "value": self.value if self.comparable else None,
            "low": self.low if math.isfinite(self.low) else None,
            "high": self.high if math.isfinite(self.high) else None,
            "inside": self.inside,
        }


def point(figure: float, rel: float = POINT_TOLERANCE) -> tuple[float, float]:
    """The interval a single published figure stands for: ``figure × (1 ± rel)``."""
    return figure * (1.0 - rel), figure * (1.0 + rel)


def verdict(checks: Sequence[Check]) -> str:
    """The verdict the numbers give (see the module notes); one of :data:`VERDICTS`."""
    if not checks or not all(c.comparable for c in checks):
        return "not comparable"
    n_in = sum(c.inside for c in checks)
    if n_in == len(checks):
        return "inside"
    return "outside" if n_in == 0 else "partly inside"


@dataclass(frozen=True)
class ClaimRow:
    """One claim: what the paper says, what SpecSim computes, and what drives the difference.

    ``paper`` and ``specsim`` are the display strings; ``checks`` hold the numbers the
    verdict is computed from; ``method`` says how SpecSim got them (simulated, analytic).
    """

    name: str
    claim: str
    paper: str
    specsim: str
    checks: tuple[Check, ...]
    assumptions: str
    method: str
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def verdict(self) -> str:
        """Computed from ``checks`` by :func:`verdict`."""
        return verdict(self.checks)

    def as_dict(self) -> dict:
        """The ``--json`` row: claim, paper, specsim, verdict, assumptions (+ name, method,
        checks)."""
        return {
            "claim": self.claim,
            "paper": self.paper,
            "specsim": self.specsim,
            "verdict": self.verdict,
            "assumptions": self.assumptions,
            "name": self.name,
            "method": self.method,
            "checks": [c.as_dict() for c in self.checks],
        }


def span(checks: Sequence[Check], fmt: str = "{:.2f}", unit: str = "×") -> str:
    """Display string of the SpecSim numbers: one value, or ``min–max (k/n inside)``."""
    vals = [c.value for c in checks if c.comparable]
    if not vals:
        return "n/a"
    if len(checks) == 1:
        return fmt.format(vals[0]) + unit
    n_in = sum(c.inside for c in checks)
    return (f"{fmt.format(min(vals))}–{fmt.format(max(vals))}{unit} "
            f"({n_in}/{len(checks)} inside)")


def run_claims(only: Sequence[str] | None = None, quick: bool = False,
               progress: Callable[[str], None] | None = None) -> list[ClaimRow]:
    """Run the claim groups named in ``only`` (all by default), in :data:`GROUPS` order.

    ``quick`` runs fewer requests per simulated point (and the batching curves only at the
    batches their checks read), keeping every batch, width and γ a verdict depends on, so
    the verdicts are the full run's.
    ``progress(group)`` is called before each group starts.
    """
    names = list(GROUPS) if not only else list(dict.fromkeys(only))
    unknown = [n for n in names if n not in GROUPS]
    if unknown:
        raise UserError(f"--only: unknown claim group {unknown[0]!r}; known: {', '.join(GROUPS)}")
    rows: list[ClaimRow] = []
    for name in names:
        if progress is not None:
            progress(name)
        module, func = GROUPS[name]
        rows.extend(getattr(importlib.import_module(module), func)(quick=quick))
    return rows


def format_table(rows: Sequence[ClaimRow]) -> str:
    """Aligned text: one line per claim, assumptions on an indented line below."""
    head = ("claim", "paper", "specsim", "verdict")
    cells = [(r.claim, r.paper, r.specsim, r.verdict) for r in rows]
    widths = [min(max(len(x[i]) for x in [head, *cells]), 60) for i in range(4)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    for r, c in zip(rows, cells, strict=True):
        lines.append("  ".join(x.ljust(w) for x, w in zip(c, widths, strict=True)))
        lines.append(f"    [{r.method}] {r.assumptions}")
    return "\n".join(lines)


def write_claims(rows: Sequence[ClaimRow], out_dir: str | Path) -> list[Path]:
    """Write ``claims.csv``, ``claims.json``, ``report.md`` and figures under ``out_dir``."""
    import pandas as pd

    from reports.tables import make_dir

    out = make_dir(out_dir)
    df = pd.DataFrame([{k: v for k, v in r.as_dict().items() if k != "checks"} for r in rows])
    paths = [out / "claims.csv", out / "claims.json", out / "report.md"]
    df.to_csv(paths[0], index=False)
    paths[1].write_text(json.dumps([r.as_dict() for r in rows], indent=2))
    paths[2].write_text(report_markdown(rows))
    from reports.claims_figures import claim_figures

    paths.extend(claim_figures(rows, out))
    return paths


def report_markdown(rows: Sequence[ClaimRow]) -> str:
    """A short report: the table, then per claim its checks and assumptions."""
    counts = {v: sum(r.verdict == v for r in rows) for v in VERDICTS}
    lines = [
        "# Paper claims under SpecSim's cost model",
        "",
        "Verdicts are computed from the numbers: a paper's range is its interval; a single "
        f"figure stands for ±{POINT_TOLERANCE:.0%}. "
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
