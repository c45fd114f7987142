"""Where SpecSim's own files are: the repository root and the data files scenarios name."""

from __future__ import annotations

from pathlib import Path


def repo_root() -> Path:
    """The repository (package) root: the folder holding ``scenarios/`` and ``sim/``."""
    return Path(__file__).resolve().parent.parent


def resolve_file(name: str) -> Path:
    """A data file named in a scenario: absolute, relative to the working directory, or
    relative to the repository root (so shipped scenarios run from anywhere)."""
    p = Path(name)
    if p.is_absolute() or p.exists():
        return p
    return repo_root() / p
