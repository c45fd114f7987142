"""The one gate (``sim.gate``): the fast paths a replica can take, the reason for each it
cannot, and ``specsim bench`` printing them. A path the gate opens is the one the run
takes, and one it closes is never taken."""

from __future__ import annotations

import json

import pytest

from sim.engine_path import PATHS
from sim.loading import load_scenario, repo_root

DEFAULT = repo_root() / "scenarios" / "default.yaml"
SMALL = ["run.requests=40"]
BURSTY = "acceptance={kind: bursty, easy_alpha: 0.9, hard_alpha: 0.3}"


def _taken(monkeypatch, sc, path):
    """{variant: {fast path: times it formed iterations}} of a run of ``sc`` on ``path``,
    and {variant: the gate's reasons}."""
    from sim import steady, steady_walk
    from sim.build import setups
    from sim.cluster import fast_paths
    from sim.runner import simulate

    counts = {}

    def counted(name, fn):
        def wrapper(*args):
            got = fn(*args)
            counts[name] += got is not None
            return got
        return wrapper

    monkeypatch.setattr(steady, "plan", counted("steady", steady.plan))
    monkeypatch.setattr(steady_walk, "plan", counted("walk", steady_walk.plan))
    taken, reasons = {}, {}
    for name, setup in setups(sc):
        counts.update(steady=0, walk=0)
        reasons[name] = fast_paths(setup, path)
        simulate(setup, sc.run.horizon_s, path=path)
        taken[name] = dict(counts)
    return taken, reasons


@pytest.mark.parametrize("sets, needle, steady_needle", [
    ([], None, None),
    # Dynamo's KV router reads the pool mid-iteration: the walk stops before an iteration
    # an arrival comes in (Replica.strict_walk), the steady stretch is closed
    (["deployment.replicas=2", "deployment.router=kv_aware"], None, "kv_aware router"),
    (["scheduler.order=decode_first"], "scheduler.order decode_first",
     "scheduler.order decode_first"),
])
def test_the_gate_says_which_fast_paths_a_run_takes(sets, needle, steady_needle,
                                                    monkeypatch):
    """On the compiled path every fast path the gate opens forms iterations and every one
    it closes forms none. The walk takes every iteration it can, so the steady stretch is
    never looked for where the walk is open; it is checked with the walk kept off (by the
    gate's own switch, which the reasons then name)."""
    from sim import gate

    sc = load_scenario(DEFAULT, [*SMALL, *sets])
    taken, reasons = _taken(monkeypatch, sc, PATHS["compiled"])
    for name in taken:
        why = reasons[name]["walk"]
        assert (taken[name]["walk"] > 0) == (why is None), (name, why)
        assert (why is None) == (needle is None), (name, why)
        assert needle is None or needle in why, (name, why)
    assert reasons["fixed-g4"]["steady"].startswith("speculation")
    steady_why = reasons["none"]["steady"]
    assert (steady_why is None) == (steady_needle is None), steady_why
    assert steady_needle is None or steady_needle in steady_why, steady_why
    needle = steady_needle
    # the steady stretch alone: the walk closed for every replica
    monkeypatch.setattr(gate, "walk", lambda r: "closed by the test")
    taken, reasons = _taken(monkeypatch, sc, PATHS["compiled"])
    for name in taken:
        why = reasons[name]["steady"]
        assert (taken[name]["steady"] > 0) == (why is None), (name, why)
        assert reasons[name]["walk"] == "closed by the test"
        if name == "none":
            assert (why is None) == (needle is None), why
            assert needle is None or needle in why, why


@pytest.mark.parametrize("policy, sets, needle", [
    ("{kind: fixed, gamma: 4}", [], None),
    ("{kind: tree, expansion: [2, 1]}", ["acceptance={kind: iid, alpha: 0.7}"], None),
    ("{kind: adaptive, max_gamma: 4}", [], "a lookup drafter with a shape that varies"),
    ("{kind: batch_ladder, ladder: [[1, 8, 3], [9, 256, 0]], key: running}", [],
     "a lookup drafter with a shape that varies"),
    ("{kind: fixed, gamma: 4}", ["scheduler.draft_sync=catch_up"],
     "draft_sync catch_up with a lookup drafter"),
])
def test_a_lookup_drafter_walks_with_a_static_shape(policy, sets, needle, monkeypatch):
    """An n-gram drafter (matches on half the steps, host seconds per sequence) walks
    under a static policy, a chain or a tree; a shape that varies, or catch_up, keeps it
    on the reference path with the reason; never the steady stretch (it speculates)."""
    sc = load_scenario(DEFAULT, [*SMALL, *sets, "variants=[{name: n, drafter: {method: ngram, "
                                 f"proposal_rate: 0.5, cpu_s_per_seq: 1e-4}}, policy: {policy}}}]"])
    taken, reasons = _taken(monkeypatch, sc, PATHS["compiled"])
    why = reasons["n"]["walk"]
    assert (taken["n"]["walk"] > 0) == (needle is None), why
    assert why is None if needle is None else needle in why, why
    assert reasons["n"]["steady"].startswith("speculation")


LADDER = "ladder: [[1, 8, 3], [9, 256, 0]]"


@pytest.mark.parametrize("policy, sets, needle", [
    (f"{{kind: batch_ladder, {LADDER}}}", [], None),  # key: scheduled, vLLM 0.33's
    (f"{{kind: batch_ladder, {LADDER}, key: running}}", [], None),
    (f"{{kind: batch_ladder, {LADDER}, key: decoding}}", [], None),
    (f"{{kind: batch_ladder, {LADDER}, sticky: true}}", [], None),  # vLLM v0's
    (f"{{kind: batch_ladder, {LADDER}, key: running, sticky: true}}", [], None),
    (f"{{kind: batch_ladder, {LADDER}}}", ["scheduler.draft_sync=catch_up"],
     "draft_sync catch_up with a shape that varies"),
])
def test_a_batch_ladder_walks_whatever_its_key(policy, sets, needle, monkeypatch):
    """A batch ladder with a draft model walks keyed on any size -- the step that last
    scheduled each sequence (a γ per sequence), the running or the decoding requests,
    sticky or not; one whose drafts catch up keeps to the reference path with the
    reason."""
    sc = load_scenario(DEFAULT, [*SMALL, *sets, f"variants=[{{name: l, policy: {policy}}}]"])
    taken, reasons = _taken(monkeypatch, sc, PATHS["compiled"])
    why = reasons["l"]["walk"]
    assert (taken["l"]["walk"] > 0) == (needle is None), why
    assert why is None if needle is None else needle in why, why


def test_prefix_caching_walks_and_keeps_off_the_steady_stretch(monkeypatch):
    """A prefix-caching replica walks, speculating or not (the walk drives the cache's own
    functions, ``sim.kernels.prefix``); the steady stretch, which does not hold the
    cache, stays closed, with the reason."""
    sc = load_scenario(DEFAULT, [*SMALL, "scheduler.prefix_caching=true",
                                 "workload.shared_prefix_tokens=200",
                                 "workload.shared_prefix_groups=2"])
    taken, reasons = _taken(monkeypatch, sc, PATHS["compiled"])
    for name in taken:
        assert reasons[name]["walk"] is None and taken[name]["walk"] > 0, (name, reasons)
        assert taken[name]["steady"] == 0
    assert reasons["none"]["steady"].startswith("prefix caching")


def test_the_reference_path_takes_no_fast_path(monkeypatch):
    sc = load_scenario(DEFAULT, SMALL)
    taken, reasons = _taken(monkeypatch, sc, PATHS["reference"])
    for name in taken:
        assert not any(taken[name].values()), taken
        assert all(why == "off on this engine path" for why in reasons[name].values())


def test_bench_prints_the_fast_paths_and_takes_overrides(capsys):
    from sim.cli import main

    assert main(["bench", "--requests", "30", "--json",
                 "--set", "scheduler.prefix_caching=true"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["sets"] == ["scheduler.prefix_caching=true"]
    assert got["fast_paths"]["walk"] is None, got  # prefix caching walks
    assert main(["bench", "--requests", "30"]) == 0
    out = capsys.readouterr().out
    assert "walk              taken" in out
    assert "steady            not taken: speculation" in out
    assert main(["bench", "--requests", "30", "--set", "scheduler.colour=red"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "scheduler.colour" in err[0], err


def test_bench_help_gives_the_run_size_that_takes_the_kernels_at_once():
    from sim import steady
    from sim.commands.bench import _HELP as doc

    assert f"of {steady.KERNEL_REQUESTS:,} requests or more" in " ".join(doc.split())


@pytest.mark.parametrize("policy, sets, needle", [
    ("{kind: adaptive, max_gamma: 4}", [], None),
    ("{kind: adaptive, max_gamma: 4, per_sequence: true}", [], None),
    ("{kind: adaptive, max_gamma: 4, per_sequence: true}", ["scheduler.draft_sync=catch_up"],
     "draft_sync catch_up with a shape that varies"),
    ("{kind: adaptive, max_gamma: 4, max_width: 2}", [BURSTY], None),
    ("{kind: adaptive, max_gamma: 4, max_width: 3}", [BURSTY, "scheduler.draft_sync=catch_up"],
     "draft_sync catch_up with a shape that varies"),
    # the default's greedy trace replays chains in the walk, not trees
    ("{kind: adaptive, max_gamma: 4, max_width: 2}", [],
     "an acceptance model without kernel tables (TraceAcceptance)"),
])
def test_an_adaptive_policy_walks(policy, sets, needle, monkeypatch):
    """An adaptive policy walks, one γ for the batch (a chain, or with ``max_width`` > 1
    perhaps a tree widened at its root, where the acceptance model draws trees in the
    kernels) or each sequence its own (``per_sequence``); one whose drafts catch up, or
    whose trees only the reference path draws, keeps to it with the reason."""
    sc = load_scenario(DEFAULT, [*SMALL, *sets, f"variants=[{{name: a, policy: {policy}}}]"])
    taken, reasons = _taken(monkeypatch, sc, PATHS["compiled"])
    why = reasons["a"]["walk"]
    assert (taken["a"]["walk"] > 0) == (needle is None), why
    assert why is None if needle is None else needle in why, why
