"""Drafting methods are one module each (``sim.methods``), registered by their name in
``hardware.catalog.DRAFT_METHODS``: nothing else in the engine lists them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hardware.catalog import DRAFT_METHODS

ROOT = Path(__file__).resolve().parents[2]


def test_every_registered_method_is_a_module_of_its_own():
    from sim.kinds.base import tags_of
    from sim.kinds.drafters import DRAFTER_KINDS
    from sim.methods import DEFAULT_DRAFTERS, MODULES, TRAITS

    assert tuple(MODULES) == tuple(TRAITS) == tuple(DEFAULT_DRAFTERS) == DRAFT_METHODS
    for name, module in MODULES.items():
        assert Path(module.__file__).name == f"{name}.py"
        assert DEFAULT_DRAFTERS[name].method == name
        assert name in tags_of(module.Kind, "method")
    # every kind once, in the methods' order
    assert DRAFTER_KINDS == tuple(dict.fromkeys(m.Kind for m in MODULES.values()))


_TOY = '''
"""``toy``: a one-layer head on the target's hidden states, as EAGLE's (a test's method)."""

from __future__ import annotations

from typing import Literal

from sim.kinds.base import Gamma, Strict
from sim.methods.base import MethodTraits, colocated_or_separate


class ToyDrafter(Strict):
    method: Literal["toy"]
    layers: Gamma = 1

    def build(self, target, draft_model, make_cost, placement):
        from hardware.catalog import ModelSpec
        from sim.drafters import Drafter, head_config

        cfg = head_config(target.dep.model.config, "eagle", self.layers)
        spec = ModelSpec(id="toy-head", config=cfg, source="a test's head")
        return Drafter("toy", colocated_or_separate(make_cost(spec, 1), target, placement))


Kind = ToyDrafter
TRAITS = MethodTraits(vllm=("toy",))
DEFAULT = ToyDrafter(method="toy")
'''

# run in a fresh interpreter: the method's file (found where sim.methods looks for it) and
# its name appended to DRAFT_METHODS before the engine is imported, and nothing else
_RUN = '''
import importlib.util, sys
import hardware.catalog as catalog

catalog.DRAFT_METHODS = (*catalog.DRAFT_METHODS, "toy")
catalog.SPEC_METHODS = ("default", *catalog.DRAFT_METHODS)


class Finder:
    def find_spec(self, name, path=None, target=None):
        if name == "sim.methods.toy":
            return importlib.util.spec_from_file_location(name, sys.argv[1])
        return None


sys.meta_path.insert(0, Finder())
from sim.engines.vllm import parse_vllm_serve
from sim.runner import run

result, _ = run(None, ["models.method=toy", "models.draft=null", "run.requests=40",
                       "variants=[{name: toy, policy: {kind: fixed, gamma: 3}}]"], write=False)
print("TOKENS_PER_VERIFY", result.summaries[0]["tokens_per_verify"])
parsed = parse_vllm_serve("vllm serve meta-llama/Meta-Llama-3-8B-Instruct --speculative-config "
                    "'{\\"method\\": \\"toy\\", \\"num_speculative_tokens\\": 2}'",
                    lambda m: "llama-3-8b")
print("PARSED", [s for s in parsed.sets if s.startswith("variants")])
'''


@pytest.mark.timeout(120)
def test_a_new_method_is_its_file_and_its_name(tmp_path):
    toy = tmp_path / "toy.py"
    toy.write_text(textwrap.dedent(_TOY))
    script = tmp_path / "run.py"
    script.write_text(_RUN)
    out = subprocess.run([sys.executable, str(script), str(toy)], cwd=ROOT,
                         capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert float(lines["TOKENS_PER_VERIFY"]) > 1.0  # it drafted and was verified
    assert '"method": "toy"' in lines["PARSED"]  # vLLM's name for it read back
