"""docs/: the scenario reference equals the schema's, examples validate, links resolve."""

from __future__ import annotations

import re
import textwrap

import pytest
import yaml

from reports.schema_doc import scenario_reference
from sim.cli import COMMANDS
from sim.loading import repo_root, validate
from sim.scenario import Scenario

DOCS = repo_root() / "docs"
PAGES = sorted(DOCS.rglob("*.md"))


def test_reference_is_generated_from_the_schema():
    committed = (DOCS / "reference" / "scenario.md").read_text()
    assert committed == scenario_reference(Scenario), (
        "docs/reference/scenario.md is stale: specsim reference > "
        "docs/reference/scenario.md")


def test_reference_names_every_field():
    from reports.schema_doc import _models

    text = (DOCS / "reference" / "scenario.md").read_text()
    for model in _models(Scenario):
        assert f"## {model.__name__}" in text
        for name in model.model_fields:
            assert f"| `{name}` |" in text, (model.__name__, name)


def _yaml_blocks():
    for page in PAGES:
        for block in re.findall(r"```yaml\n(.*?)```", page.read_text(), flags=re.S):
            yield pytest.param(page, block, id=f"{page.relative_to(DOCS)}:{block[:20]!r}")


@pytest.mark.parametrize("page, block", list(_yaml_blocks()))
def test_yaml_examples_validate(page, block):
    doc = yaml.safe_load(textwrap.dedent(block))
    assert isinstance(doc, dict)
    doc.pop("sweep", None)  # the sweep command's own block
    if "search" in doc:  # a plan's search space, checked as specsim plan reads it
        from sim.studies.plan_space import parse_search

        parse_search(doc.pop("search"), str(page))
    validate(doc, str(page))  # partial scenarios are overrides over the defaults


def test_commands_named_in_docs_exist():
    named = set()
    for page in PAGES:
        named |= set(re.findall(r"specsim (\w+)", page.read_text()))
    named -= {"COMMAND"}
    assert named and named <= set(COMMANDS), named - set(COMMANDS)


def test_relative_links_resolve():
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#:]+\.md)", page.read_text()):
            assert (page.parent / target).exists(), (page, target)


def _subcommand_flags() -> dict[str, set[str]]:
    """Each command's option strings, from the real parser."""
    import argparse

    from sim.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: {s for act in p._actions for s in act.option_strings}
            for name, p in sub.choices.items()}


def test_flags_in_doc_commands_exist():
    # Every --flag written after `specsim CMD` in a shell block is one CMD accepts.
    flags = _subcommand_flags()
    seen = 0
    for page in PAGES:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                m = re.match(r"\s*specsim (\w+)(.*)", line)
                if not m:
                    continue
                for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", m.group(2).split("#")[0]):
                    seen += 1
                    assert flag in flags[m.group(1)], (page.name, m.group(1), flag)
    assert seen > 20  # the docs do show flags


def _tutorial_grid_commands():
    text = (DOCS / "tutorial.md").read_text()
    blocks = re.findall(r"```bash\n(specsim grid .*?)```\n(?:\n```\n(.*?)```)?", text, flags=re.S)
    return [(cmd.replace("\\\n", " ").split()[1:], table) for cmd, table in blocks]


def test_tutorial_grid_commands_run_and_print_the_whole_table(tmp_path, capsys):
    """The tutorial's tree grid (no --contexts) used to fail; its chain grid table left out
    rows without marking the gap."""
    from sim.cli import main

    commands = _tutorial_grid_commands()
    assert len(commands) == 3 and any("--tree" in c for c, _ in commands)
    assert any("--method" in c for c, _ in commands)
    for i, (argv, table) in enumerate(commands):
        assert main([*argv, "--out", str(tmp_path / str(i))]) == 0, argv
        printed = capsys.readouterr().out
        if table:
            assert table.strip() == printed.split("table:")[0].strip()


def test_docs_say_where_relative_scenario_paths_start():
    for page in ("tutorial.md", "how-to/plan-capacity.md", "how-to/sweep-on-a-cluster.md"):
        assert "from the repository root" in (DOCS / page).read_text(), page


def test_the_tutorials_python_runs_on_a_run_folder(small_run, tmp_path):
    """Its snippets that rebuild a run folder's report run as written (one raised a
    TypeError: the signature it showed was not the function's)."""
    import shutil

    folder = tmp_path / "run"
    shutil.copytree(small_run, folder)
    (folder / "report.md").unlink()
    text = (DOCS / "tutorial.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S)
              if "runs/default-<timestamp>" in b]
    assert blocks
    for block in blocks:
        exec(block.replace("runs/default-<timestamp>", str(folder)), {})  # noqa: S102
    assert (folder / "report.md").exists()
