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
    assert committed == scenario_reference(), (
        "docs/reference/scenario.md is stale: python -m reports.schema_doc > "
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
