"""Paper claims under SpecSim's cost model: rows, verdicts and the registry of claim groups.

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

The claim groups live in ``sim.studies.claims_specinfer``, ``sim.studies.claims_leviathan``
and ``sim.studies.claims_batching``; :data:`GROUPS` names them for ``specsim claims --only``.
The table, ``report.md`` and the figure of a claims run are ``reports.claims_report``'s.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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
]

POINT_TOLERANCE = 0.10
VERDICTS = ("inside", "partly inside", "outside", "not comparable")

# group name -> (module, function); each function takes ``quick: bool`` and returns rows.
GROUPS: dict[str, tuple[str, str]] = {
    "specinfer-distributed": ("sim.studies.claims_specinfer", "distributed_claims"),
    "specinfer-offload": ("sim.studies.claims_specinfer", "offload_claims"),
    "specinfer-table2": ("sim.studies.claims_specinfer", "table2_claims"),
    "leviathan": ("sim.studies.claims_leviathan", "leviathan_claims"),
    "batching": ("sim.studies.claims_batching", "batching_claims"),
    "trees-vs-load": ("sim.studies.claims_batching", "tree_load_claims"),
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
