"""The import graph points one way (DESIGN.md, STYLE.md §14).

Layers, bottom up: ``specdec`` ← ``hardware``, ``workloads`` ← the engine (``sim`` without
its studies and command line) ← ``sim.studies`` ← ``sim.commands`` (with ``sim.cli``);
``reports`` sits beside the engine and is used by studies and commands only. Every import
counts, at module level or inside a function (a function-local import does not make an
upward dependency go away), and so do the lazy ``_EXPORTS`` tables of the packages.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("specdec", "hardware", "workloads", "sim", "reports")

# layer -> the layers it may import (besides itself)
ALLOWED = {
    "specdec": set(),
    "hardware": {"specdec"},
    "workloads": {"specdec"},
    "reports": {"specdec", "hardware", "workloads"},
    "engine": {"specdec", "hardware", "workloads"},
    "studies": {"specdec", "hardware", "workloads", "engine", "reports"},
    "commands": {"specdec", "hardware", "workloads", "engine", "reports", "studies"},
}


def layer(module: str) -> str:
    """The layer of a dotted module name of the project."""
    top = module.split(".")[0]
    if top != "sim":
        return top
    if module.startswith("sim.studies"):
        return "studies"
    if module.startswith(("sim.commands", "sim.cli", "sim.__main__")):
        return "commands"
    return "engine"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Project modules ``path`` imports anywhere in it (incl. lazy ``_EXPORTS`` targets)."""
    tree = ast.parse(path.read_text(), str(path))
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # ``from pkg import module``
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1
              and getattr(node.targets[0], "id", None) == "_EXPORTS"
              and isinstance(node.value, ast.Dict)):
            out.update(v.value for v in node.value.values if isinstance(v, ast.Constant))
    return {m for m in out if m.split(".")[0] in PACKAGES}


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (names that are not modules dropped)."""
    files = sources()
    known = {module_name(p) for p in files}
    edges = {}
    for p in files:
        edges[module_name(p)] = {m for m in imports(p) if m in known} - {module_name(p)}
    return edges


def test_no_import_runs_upward():
    bad = [f"{src} ({layer(src)}) imports {dst} ({layer(dst)})"
           for src, dsts in graph().items() for dst in sorted(dsts)
           if layer(dst) != layer(src) and layer(dst) not in ALLOWED[layer(src)]]
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_reports_never_import_the_engine():
    for p in (ROOT / "reports").rglob("*.py"):
        assert not {m for m in imports(p) if m == "sim" or m.startswith("sim.")}, p


def test_no_import_cycles():
    edges = graph()
    # a package's __init__ that re-exports its modules is a cycle in name only
    edges = {m: {d for d in ds if not m.startswith(d + ".")} for m, ds in edges.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(edges.get(m, ())):
            if state.get(d) == 1:
                cycle = stack[stack.index(d):] + [d]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)


@pytest.mark.parametrize("src, dst, ok", [
    ("reports.tables", "sim.records", False),
    ("sim.replica", "reports.tables", False),
    ("sim.studies.plan", "sim.runner", True),
    ("sim.commands.run", "sim.studies.run_report", True),
    ("sim.build", "sim.studies.sweep", False),
    ("workloads.acceptance", "hardware.cost", False),
])
def test_the_rule_itself(src, dst, ok):
    assert (layer(dst) == layer(src) or layer(dst) in ALLOWED[layer(src)]) is ok
