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


def _taken(monkeypatch, sc, path):
    """{variant: {fast path: times it formed iterations}} of a run of ``sc`` on ``path``,
    and {variant: the gate's reasons}."""
    from sim import decode_step, replica, spec_stretch, steady, steady_walk
    from sim.build import setups
    from sim.cluster import fast_paths
    from sim.runner import simulate

    counts = {}

    def counted(name, fn, ran=lambda got: got is not None):
        def wrapper(*args):
            got = fn(*args)
            counts[name] += bool(ran(got))
            return got
        return wrapper

    monkeypatch.setattr(replica.decode_step, "plan", counted("decode_step", decode_step.plan))
    monkeypatch.setattr(steady, "plan", counted("steady", steady.plan))
    monkeypatch.setattr(steady_walk, "plan", counted("walk", steady_walk.plan))
    real_stretch = spec_stretch.run

    def stretch(r):  # a generator: count the stretches that ran iterations
        ran = yield from real_stretch(r)
        counts["spec_stretch"] += bool(ran)
        return ran

    monkeypatch.setattr(spec_stretch, "run", stretch)
    taken, reasons = {}, {}
    for name, setup in setups(sc):
        counts.update(decode_step=0, steady=0, spec_stretch=0, walk=0)
        reasons[name] = fast_paths(setup, path)
        simulate(setup, sc.run.horizon_s, path=path)
        taken[name] = dict(counts)
    return taken, reasons


INHERENT = {"none": "spec_stretch", "fixed-g4": "steady"}  # a path a variant never needs


@pytest.mark.parametrize("sets, needle", [
    ([], None),
    (["scheduler.prefix_caching=true"], "prefix caching"),
    (["scheduler.order=decode_first"], "scheduler.order decode_first"),
])
def test_the_gate_says_which_fast_paths_a_run_takes(sets, needle, monkeypatch):
    """Every path the gate opens forms iterations, every path it closes forms none (on the
    numpy path for the numpy ones, on the compiled path for the walk, which takes all the
    iterations it can); the default scenario's variants take every path they can, and a
    setting that closes them is named in each reason."""
    sc = load_scenario(DEFAULT, [*SMALL, *sets])
    for engine, paths in (("numpy", ("decode_step", "steady", "spec_stretch")),
                          ("compiled", ("walk",))):
        taken, reasons = _taken(monkeypatch, sc, PATHS[engine])
        for name in taken:
            for path in paths:
                why = reasons[name][path]
                assert (taken[name][path] > 0) == (why is None), (engine, name, path, why)
    assert reasons["none"]["spec_stretch"] == "no speculation"
    assert reasons["fixed-g4"]["steady"].startswith("speculation")
    for name in reasons:
        for path, why in reasons[name].items():
            if path != INHERENT[name]:
                assert (why is None) == (needle is None), (name, path, why)
                assert needle is None or needle in why, (name, path, why)


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
    assert got["fast_paths"]["walk"].startswith("prefix caching")
    assert main(["bench", "--requests", "30"]) == 0
    out = capsys.readouterr().out
    assert "walk              taken" in out
    assert "steady            not taken: speculation" in out
    assert main(["bench", "--requests", "30", "--set", "scheduler.colour=red"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "scheduler.colour" in err[0], err
