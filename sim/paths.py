"""Where SpecSim's own files are: the repository root and the data files scenarios name."""

from __future__ import annotations

from pathlib import Path


def repo_root() -> Path:
    """The repository (package) root: the folder holding ``scenarios/`` and ``sim/``."""
    return Path(__file__).resolve().parent.parent


def resolve_file(name: str) -> Path:
    """A data file named in a scenario. A scenario file's own paths arrive absolute
    (``sim.loading.anchor_files``: from its folder, else the repository root); one given
    with ``--set`` is relative to the working directory, else to the repository root."""
    p = Path(name)
    if p.is_absolute() or p.exists():
        return p
    return repo_root() / p
