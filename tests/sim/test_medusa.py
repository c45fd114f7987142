"""Medusa heads: what they hold, that one pass drafts every position, and how they run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hardware.catalog import ModelSpec, load_catalog
from hardware.deployment import Deployment
from hardware.draft import chain_draft_seconds, one_pass_seconds, tree_draft_seconds
from hardware.models import ModelConfig, model_shape
from sim.build import setups
from sim.drafters import medusa_config
from sim.engines.vllm import parse_vllm_serve, serve_command
from sim.loading import load_scenario
from sim.runner import run_scenario
from sim.studies.grid import make_pair
from specdec.errors import UserError

CAT = load_catalog()
VICUNA = CAT.model("vicuna-7b").config


def test_the_heads_are_residual_blocks_and_an_lm_head_each_with_no_kv():
    shape = model_shape(medusa_config(VICUNA, heads=5))
    # FasterDecoding's medusa-vicuna-7b-v1.3: 5 heads of Linear(4096, 4096) + bias and
    # Linear(4096, 32000) without: 739.3M parameters (its 1.48 GB fp16 head file)
    per_head = 4096 * 4096 + 4096 + 4096 * 32000
    assert shape.total_params == shape.streamed_params == 5 * per_head
    assert shape.kv_values_per_token == 0 and shape.n_heads == 0
    assert shape.head_params > 0.85 * shape.total_params  # the lm_heads dominate
    two_blocks = model_shape(medusa_config(VICUNA, heads=5, layers=2))
    assert two_blocks.total_params - shape.total_params == 5 * (4096 * 4096 + 4096)


@pytest.mark.parametrize("timing", ["paper", "roofline", "measured"])
def test_a_medusa_draft_is_one_pass_whatever_the_chain_or_tree(timing):
    medusa = make_pair("vicuna-7b", None, "a100-80gb", method="medusa", timing=timing,
                       heads=5).draft
    eagle = make_pair("vicuna-7b", None, "a100-80gb", method="eagle", timing=timing).draft
    for batch in (1, 16):
        ctx = np.full(batch, 700)
        one = one_pass_seconds(medusa, batch)
        assert one > 0
        assert [chain_draft_seconds(medusa, g, ctx) for g in (1, 3, 5)] == [one] * 3
        assert tree_draft_seconds(medusa, [3, 2, 1], ctx) == one
        assert chain_draft_seconds(medusa, 0, ctx) == 0.0
        # the pass is the heads' weights over one row per sequence, no attention: context
        # changes nothing, unlike an autoregressive head whose passes add up
        assert chain_draft_seconds(medusa, 3, np.full(batch, 4000)) == one
        assert chain_draft_seconds(eagle, 3, ctx) > 2 * chain_draft_seconds(eagle, 1, ctx)
    target = make_pair("vicuna-7b", None, "a100-80gb", method="medusa", timing=timing,
                       heads=5).target
    # ~0.74B parameters of heads against a 6.7B target: a small share of a decode step
    assert one_pass_seconds(medusa, 1) < 0.2 * target.pass_seconds(np.array([1]),
                                                                   np.array([700]))


SCENARIO = ["models.target=vicuna-7b", "models.method=medusa", "models.draft=null",
            "deployment.gpu=a100-80gb",
            "run.requests=40", "workload.rate_per_s=4", "acceptance={kind: iid, alpha: 0.6}",
            "workload.prompt.max_tokens=1500", "workload.output.max_tokens=500"]


def test_in_a_run_each_iteration_drafts_with_one_heads_pass_and_verifies_once():
    sc = load_scenario(None, [*SCENARIO, "variants=[{name: g4, policy: {kind: fixed, gamma: 4}},"
                              " {name: tree, policy: {kind: tree, expansion: [3, 2, 1]}}]"])
    res = run_scenario(sc)
    ((_, setup), _) = setups(sc)
    assert not setup.drafter.lookahead  # vLLM reserves no lookahead slots for Medusa
    for v in res.variants:
        it = v.iterations.columns
        spec = (it["decode_seqs"] > 0) & (it["drafted_tokens"] > 0)
        assert spec.sum() > 20
        # the heads' one pass, and vLLM's work around a speculative round (one pass, a
        # tree for the tree variant: hardware.spec_cost)
        tree = v.name == "tree"
        want = [one_pass_seconds(setup.draft, int(n)) + setup.spec.seconds(int(d), 1, tree)
                for n, d in zip(it["batch_size"][spec], it["decode_seqs"][spec],
                                strict=True)]
        assert setup.spec.step_s > 0
        assert np.array_equal(it["draft_s"][spec], want)
        assert (it["draft_s"][~spec] == 0).all()
        np.testing.assert_allclose(it["duration_s"], it["draft_s"] + it["verify_s"],
                                   rtol=1e-12)


def test_more_positions_than_heads_and_heads_off_the_targets_gpus_are_refused():
    with pytest.raises(UserError, match=r"models: heads: 5 Medusa heads propose at most 5 "
                                        r"positions, but variant 'g6' drafts 6 deep"):
        setups(load_scenario(None, [*SCENARIO, "variants=[{name: g6, policy: "
                                                     "{kind: fixed, gamma: 6}}]"]))
    sc = load_scenario(None, [*SCENARIO, "variants=[{name: g6, policy: {kind: fixed, "
                                         "gamma: 6}, drafter: {method: medusa, heads: 6}}]"])
    setups(sc)  # six heads serve six positions
    with pytest.raises(UserError, match="the heads read the target's hidden states"):
        setups(load_scenario(None, [*SCENARIO, "deployment.draft_placement=separate"]))


def test_a_medusa_config_must_be_one():
    with pytest.raises(ValueError, match="medusa heads need num_heads"):
        ModelConfig(model_type="medusa", hidden_size=64, num_hidden_layers=1,
                    vocab_size=100, max_position_embeddings=64)
    with pytest.raises(ValueError, match="num_heads: only medusa heads have it"):
        ModelConfig(model_type="llama", hidden_size=64, num_hidden_layers=1,
                    num_attention_heads=4, intermediate_size=128, num_heads=3,
                    vocab_size=100, max_position_embeddings=64)
    with pytest.raises(ValueError, match="llama models need num_attention_heads"):
        ModelConfig(model_type="llama", hidden_size=64, num_hidden_layers=1,
                    intermediate_size=128, vocab_size=100, max_position_embeddings=64)
    spec = ModelSpec(id="heads", source="test", config=medusa_config(VICUNA, heads=3))
    with pytest.raises(UserError, match="Medusa heads run whole on one GPU"):
        Deployment(model=spec, gpu=CAT.gpu("h100"), tp=2)


def test_vllm_medusa_flags_round_trip():
    p = parse_vllm_serve("vllm serve lmsys/vicuna-7b-v1.3 --speculative-config "
                         "'{\"method\": \"medusa\", \"model\": \"FasterDecoding/medusa-vicuna-"
                         "7b-v1.3\", \"num_speculative_tokens\": 3}'", lambda m: "vicuna-7b")
    sets = {k: json.loads(v) for k, v in (t.split("=", 1) for t in p.sets)}
    spec = sets["variants"][1]
    assert spec["drafter"] == {"method": "medusa", "heads": 3}
    assert spec["policy"] == {"kind": "fixed", "gamma": 3}
    sc = load_scenario(None, [*SCENARIO, "variants=" + json.dumps(sets["variants"])])
    command, _ = serve_command(sc, sc.variants[1], CAT)
    got = json.loads(command.split("--speculative-config ", 1)[1].strip("'"))
    assert (got["method"], got["num_speculative_tokens"]) == ("medusa", 3)


@pytest.mark.parametrize("method", ["eagle3", "medusa", "ngram"])
def test_a_scenario_drafting_by_another_method_survives_its_own_dump(method):
    # the reports re-read the dumped scenario: the default draft model must not reappear
    from sim.scenario import Scenario

    sc = Scenario.model_validate({"models": {"target": "vicuna-7b", "method": method}})
    assert sc.models.draft is None
    assert Scenario.model_validate(sc.model_dump()) == sc


def test_medusa_heads_are_no_model_to_serve_and_vllm_has_no_medusa_trees(tmp_path, capsys):
    from sim.cli import main

    cat = tmp_path / "cat.yaml"
    cat.write_text("models:\n  heads-7b:\n    source: test\n    config: {model_type: medusa, "
                   "hidden_size: 4096, num_hidden_layers: 1, num_heads: 5, vocab_size: 32000, "
                   "max_position_embeddings: 2048}\n")
    for argv in (["hw", "step", "--model", "heads-7b", "--gpu", "a100-80gb", "--batch", "1",
                  "--context", "100", "--catalog", str(cat)],
                 ["speedup", "--target", "vicuna-7b", "--draft", "heads-7b", "--gpu",
                  "a100-80gb", "--batch", "1", "--context", "100", "--alpha", "0.7",
                  "--catalog", str(cat)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "heads-7b is a set of Medusa heads, not a model" in err[0]
    with pytest.raises(UserError, match="draft_vocab: 64000 exceeds the target's vocab_size"):
        setups(load_scenario(None, [*SCENARIO, "variants=[{name: g3, policy: {kind: fixed, "
                                               "gamma: 3}, drafter: {method: medusa, "
                                               "draft_vocab: 64000}}]"]))
    with pytest.raises(UserError, match="Medusa proposes top-1 chains, not trees"):
        parse_vllm_serve("vllm serve lmsys/vicuna-7b-v1.3 --speculative-config '" + json.dumps(
            {"method": "medusa", "num_speculative_tokens": 2,
             "speculative_token_tree": "[(0,), (1,)]"}) + "'", lambda m: "vicuna-7b")
    sc = load_scenario(None, [*SCENARIO, "variants=[{name: t, policy: {kind: tree, "
                                         "expansion: [2, 2]}}]"])
    command, notes = serve_command(sc, sc.variants[0], CAT)
    got = json.loads(command.split("--speculative-config ", 1)[1].strip("'"))
    assert got["num_speculative_tokens"] == 2 and "speculative_token_tree" not in got
    assert any("top-1 chains" in n for n in notes)
