"""Writing a run to disk: records as CSV, the resolved scenario, seed and version.

Layout of a run folder::

    scenario.yaml            the fully resolved scenario (every default filled in)
    meta.yaml                seed, package version, source file, overrides, wall time
    summary.json             the summaries ``specsim run --json`` prints
    <variant>/requests.csv   one row per request record (``sim.records``)
    <variant>/iterations.csv one row per iteration record
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import yaml

from specdec.errors import UserError


def package_version() -> str:
    """The installed specdec-sim version ("unknown" when running from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specdec-sim")
    except PackageNotFoundError:
        return "unknown"


def default_run_dir(name: str, root: str | Path = "runs") -> Path:
    """``runs/<name>-<UTC timestamp>``, with ``-2``, ``-3``... if that folder exists."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base = Path(root) / f"{name}-{stamp}"
    path, k = base, 1
    while path.exists():
        k += 1
        path = base.with_name(f"{base.name}-{k}")
    return path


def make_dir(path: str | Path, flag: str) -> Path:
    """Create the folder ``path`` (and its parents) or raise a one-line UserError naming
    ``flag`` and the path: an existing file there, or a place that cannot be written."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UserError(f"{flag} {out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{flag} {out}: cannot create the folder: {e.strerror}") from None
    return out


def write_records(path: Path, records) -> None:
    """``sim.records.Records`` as CSV with a header row (plain ``csv``; pandas belongs to
    reports/): whole columns go to Python scalars at once, then rows to the writer."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(records.columns)
        w.writerows(records.rows())


def write_run(result, out_dir: str | Path, source: str, overrides: list[str],
              wall_s: float) -> Path:
    """Write ``result`` (a ``ScenarioResult``) under ``out_dir``; returns the folder."""
    out = make_dir(out_dir, "--out")
    try:
        _write_files(result, out, source, overrides, wall_s)
    except OSError as e:
        raise UserError(f"--out {out}: cannot write {e.filename or 'the run'}: {e.strerror}") \
            from None
    return out


def _write_files(result, out: Path, source: str, overrides: list[str], wall_s: float) -> None:
    sc = result.scenario
    (out / "scenario.yaml").write_text(
        yaml.safe_dump(sc.model_dump(mode="json"), sort_keys=False)
    )
    meta = {"seed": sc.run.seed, "version": package_version(), "source": source,
            "overrides": list(overrides), "wall_s": round(wall_s, 3)}
    (out / "meta.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    (out / "summary.json").write_text(json.dumps({"variants": result.summaries}, indent=2))
    for v in result.variants:
        d = out / v.name
        d.mkdir(exist_ok=True)
        write_records(d / "requests.csv", v.requests)
        write_records(d / "iterations.csv", v.iterations)
