"""Acceptance measured for real draft/target pairs (``workloads/data/acceptance_presets.yaml``).

A preset is published per-position rates (or a published mean acceptance length only) with
the method, target and draft they were measured for and their source. Its model is
``PositionalAcceptance`` on the *conditional* rates: vLLM's per-position counters are
unconditional, P(position i accepted) = u_i, so α_1 = u_1 and α_i = u_i / u_{i-1}
(``PositionalAcceptance.from_marginals``); the EAGLE papers' rates are conditional already.
A preset with only a mean length at a chain of k is the i.i.d. α that gives it
(``workloads.calibrate_iid``). Past the last measured position the last conditional rate
holds (``PositionalAcceptance``), an extrapolation the preset does not measure.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import yaml

from specdec.errors import UserError

PRESETS_FILE = Path(__file__).parent / "data" / "acceptance_presets.yaml"
RATE_KINDS = ("unconditional", "conditional")


@dataclass(frozen=True)
class Preset:
    """One published measurement (see the data file's header for the fields)."""

    name: str
    method: str
    target: str
    draft: str
    k: int
    mean_acceptance_length: float
    source: str
    rates: tuple[float, ...] = ()
    rate_kind: str = "unconditional"
    calibrated: bool = False
    proposal_rate: float | None = None
    target_catalog: str | None = None
    dataset: str = ""
    framework: str = ""
    temperature: float | None = None
    notes: str = ""

    def conditional_rates(self) -> np.ndarray:
        """float [k]: P(position i accepted | positions < i accepted)."""
        r = np.asarray(self.rates, dtype=np.float64)
        if self.rate_kind == "conditional":
            return r
        prev = np.concatenate([[1.0], r[:-1]])  # u_{i-1}, with u_0 = 1
        return np.divide(r, prev, out=np.zeros_like(r), where=prev > 0)

    def model(self):
        """The acceptance model of this measurement."""
        from workloads.acceptance import PositionalAcceptance
        from workloads.calibration import calibrate_iid

        if self.calibrated:
            return calibrate_iid(self.mean_acceptance_length, np.ones(self.k, dtype=np.int64))
        return PositionalAcceptance(self.conditional_rates())

    def expected_length(self) -> float:
        """Tokens per verify the preset's model gives for a chain of its own k."""
        return self.model().expected_tokens(np.ones(self.k, dtype=np.int64))


_FIELDS = set(Preset.__dataclass_fields__) - {"name"}
_REQUIRED = {"method", "target", "draft", "k", "mean_acceptance_length", "source"}


@lru_cache(maxsize=1)
def load_presets(path: Path = PRESETS_FILE) -> dict[str, Preset]:
    """Every preset by name, checked (a bad entry names the file, preset and field)."""
    doc = yaml.safe_load(path.read_text())
    out = {}
    for name, entry in (doc.get("presets") or {}).items():
        where = f"{path.name}: presets.{name}"
        if not isinstance(entry, dict):
            raise UserError(f"{where}: must be a mapping")
        unknown = set(entry) - _FIELDS
        if unknown:
            raise UserError(f"{where}.{sorted(unknown)[0]}: unknown field")
        missing = _REQUIRED - set(entry)
        if missing:
            raise UserError(f"{where}.{sorted(missing)[0]}: required field is missing")
        p = Preset(name=name, **{**entry, "rates": tuple(entry.get("rates") or ())})
        if p.rate_kind not in RATE_KINDS:
            raise UserError(f"{where}.rate_kind: must be one of {RATE_KINDS}, got "
                            f"{p.rate_kind!r}")
        if p.calibrated == bool(p.rates):
            raise UserError(f"{where}: give rates or calibrated: true, not both or neither")
        if p.rates and len(p.rates) != p.k:
            raise UserError(f"{where}.rates: {len(p.rates)} rates for k {p.k}")
        if any(not 0 <= r <= 1 for r in p.rates):
            raise UserError(f"{where}.rates: must be probabilities, got {list(p.rates)}")
        out[name] = p
    return out


def matching(method: str, target_catalog: str, k: int) -> Preset | None:
    """The preset measured for ``method`` on ``target_catalog`` closest to a chain of ``k``
    (its own k first, then the nearest larger, then the largest smaller), or None."""
    found = [p for p in load_presets().values()
             if p.method == method and p.target_catalog == target_catalog]
    if not found:
        return None
    return min(found, key=lambda p: (p.k != k, p.k < k, abs(p.k - k), p.name))


def preset(name: str) -> Preset:
    """The preset called ``name``, or a UserError listing the known ones."""
    presets = load_presets()
    if name not in presets:
        raise UserError(f"name: unknown acceptance preset {name!r}; known: "
                        f"{', '.join(sorted(presets))}")
    return presets[name]
