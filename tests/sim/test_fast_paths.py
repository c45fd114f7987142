"""The engine's shortcuts give the floats and records of the long way round.

``IterationPricer.decode_chain_seconds`` prices every chain depth of an iteration for the
adaptive policy from one chain's passes, and the compiled kernels price a pass as the
measured timing does; each must give exactly what the reference computes (the
record-for-record comparisons over every shipped scenario are in
``tests/sim/test_golden.py``); here, the pieces.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.build import setups
from sim.loading import load_scenario, repo_root
from sim.policies import chain
from sim.pricing import IterationPricer

_EMPTY = np.zeros(0, dtype=np.int64)
_SHORT = ["workload.prompt.max_tokens=1024", "workload.output.max_tokens=512"]
DRAFTS = {  # one draft replica; one per GPU of a TP-4 target; heads in one pass; none
    "draft-model": ("default", []),
    "colocated-tp4": ("plan-llama70b", ["variants=[{name: c, policy: {kind: fixed, gamma: 4}}]"]),
    "medusa": ("default", ['models.target="vicuna-7b"', "models.draft=null", *_SHORT,
                           'variants=[{name: m, drafter: {method: medusa, heads: 5}, '
                           'policy: {kind: fixed, gamma: 4}}]']),
    "ngram": ("default", ['variants=[{name: n, drafter: {method: ngram, proposal_rate: 0.5}, '
                          'policy: {kind: fixed, gamma: 4}}]']),
    "paper-timing": ("default", ["deployment.timing=paper"]),
    "roofline-tree-draft": ("specinfer-tree", ["deployment.timing=roofline"]),
}


@pytest.mark.parametrize("case", sorted(DRAFTS))
def test_every_chain_depth_at_once_is_each_depth_priced_alone(case):
    name, sets = DRAFTS[case]
    sc = load_scenario(repo_root() / "scenarios" / f"{name}.yaml", ["run.requests=4", *sets])
    _, setup = setups(sc)[-1]
    assert (setup.draft is None) == (case == "ngram")
    if case == "colocated-tp4":
        assert setup.draft.replicas == 4
    rng = np.random.default_rng(7)
    for overlap in (False, True):  # (a pricer that may draft ahead prices these the same)
        pricer = IterationPricer(setup.target_cost, setup.draft, setup.record_bound, overlap)
        for n in (1, 3, 17, 64):
            ctx = rng.integers(1, 900, n).astype(np.int64)
            for depth in (1, 4, 7):
                alone = [sum(pricer.price(chain(g, depth), ctx, _EMPTY, _EMPTY,
                                          bound=False)[:2]) for g in range(depth + 1)]
                assert pricer.decode_chain_seconds(ctx, depth) == alone  # exactly


def test_best_chains_expectations_are_specdecs_expected_tokens():
    """``best_chain`` weighs each γ by E(α, γ) from its Horner's rule: every chain but γ
    priced at infinite seconds, γ's rate is its E(α, γ), the very float specdec sums."""
    from sim.policies import best_chain
    from specdec import expected_tokens

    alphas = [0.0, 1.0, 1 - 2**-52, 5e-324, *np.random.default_rng(3).random(300)]
    for a in alphas:
        for g in range(65):
            seconds = [float("inf")] * g + [1.0]
            assert best_chain(1, float(a), seconds) == (g, float(expected_tokens(a, g)))


def test_a_trees_level_prefixes_are_its_shallower_trees():
    """``tree_draft_prefix_seconds`` (draft replicas of uneven groups, one-pass heads): entry
    j is exactly ``tree_draft_seconds`` of the first j widths."""
    from hardware.draft import tree_draft_prefix_seconds, tree_draft_seconds

    rng = np.random.default_rng(5)
    for case in ("colocated-tp4", "medusa"):
        name, sets = DRAFTS[case]
        sets = [*sets, "deployment.tp=2"] if case == "medusa" else sets
        sc = load_scenario(repo_root() / "scenarios" / f"{name}.yaml", ["run.requests=4", *sets])
        draft = setups(sc)[-1][1].draft
        assert draft.replicas > 1
        for n in (1, 3, 6, 13):
            ctx = rng.integers(0, 700, n).astype(np.int64)
            widths = rng.integers(1, 4, rng.integers(1, 6)).tolist()
            prefix = tree_draft_prefix_seconds(draft, widths, ctx)
            assert prefix == [tree_draft_seconds(draft, widths[:j], ctx)
                              for j in range(len(widths) + 1)]


_OFFLOADED = ["models.target=llama-2-7b", "models.draft=null", "deployment.gpu=a100-80gb",
              "deployment.offload_fraction=0.5", "variants=[{name: n, policy: {kind: none}}]"]
TIMINGS = {  # a decode-attention table; TP 4 (all-reduces); MoE with MLA (no decode table)
    "llama-3-8b-h100": ("default", []),
    "llama-3-70b-tp4": ("plan-llama70b", []),
    "deepseek-v3-mtp": ("deepseek-v3-mtp", []),
    "llama-2-7b-offloaded": ("default", _OFFLOADED),
    # the analytic timings: a dense model, TP 4, MoE (routed experts), offloaded weights
    # (a framework that does not overlap them: host + GPU), the lecture's paper GPU
    "roofline-8b": ("default", ["deployment.timing=roofline"]),
    "roofline-70b-tp4": ("plan-llama70b", ["deployment.timing=roofline"]),
    "roofline-moe": ("deepseek-v3-mtp", ["deployment.timing=roofline"]),
    "roofline-offloaded": ("default", [*_OFFLOADED, "deployment.timing=roofline"]),
    "paper": ("default", ["deployment.timing=paper"]),
    "paper-moe": ("deepseek-v3-mtp", ["deployment.timing=paper"]),
    "paper-offloaded": ("default", [*_OFFLOADED, "deployment.timing=paper"]),
}


@pytest.mark.parametrize("case", sorted(TIMINGS))
def test_the_compiled_stretch_prices_a_pass_as_the_timing(case):
    """``sim.steady_kernel``'s pricer (as Python and, where numba is installed, compiled)
    gives the timing's ``seconds_bound`` floats and bound for one-stage passes: the
    measured timing's tables, the roofline's and the paper GPU's formula."""
    from sim import steady_kernel

    name, sets = TIMINGS[case]
    if not case.startswith(("roofline", "paper")):
        pytest.importorskip("aiconfigurator_core", reason="the measured timing reads its tables")
    sc = load_scenario(repo_root() / "scenarios" / f"{name}.yaml", ["run.requests=4", *sets])
    timing = setups(sc)[0][1].target_cost.timing
    assert timing.name == case.split("-")[0] if case.startswith(("roofline", "paper")) \
        else timing.name == "measured"
    params = timing.kernel_params()
    assert params is not None
    from sim.kernels import base

    compiled = steady_kernel.compiled()
    kinds = [base.pass_seconds]
    if compiled is not None:
        kinds.append(steady_kernel.compiled_helper("pass_seconds"))  # the jitted copy
    rng = np.random.default_rng(11)
    names = ("compute", "memory", "comm", "host")
    ns = [1.0, 2.0, 3.0, 7.0, 64.0, 128.0, 129.0, 255.0, 256.0, 257.0, 600.0,
          *rng.integers(1, 700, 40).tolist()]
    for n in ns:
        n = float(n)
        for ctx in (0.0, 15.0 * n, float(rng.integers(1, 2_000_000)), 200_000.0 * n):
            for new in (n, 4 * n, n + 512.0):
                kv, keys = ctx + new, ctx + 0.5 * (new + new)
                want = timing.seconds_bound(new, kv, keys, n)
                for f in kinds:
                    got, code = f(new, kv, keys, n, params, True)
                    assert (got, names[code]) == want, (f, new, kv, n)
                    assert f(new, kv, keys, n, params, False) == (want[0], -1)


class _Numba:
    """A stand-in for numba whose ``njit`` fails when asked to cache (as numba does where no
    cache folder is writable) or always; otherwise it leaves the functions as Python."""

    def __init__(self, fails_without_cache: bool):
        from types import SimpleNamespace

        self.asked: list[bool] = []
        self.fails_without_cache = fails_without_cache
        self.config = SimpleNamespace(CACHE_DIR="")  # numba.config, where the cache goes

    def njit(self, cache: bool, nogil: bool):
        self.asked.append(cache)
        if cache or self.fails_without_cache:
            def fail(fn):
                raise RuntimeError(f"cannot cache function {fn.__name__!r}")
            return fail
        return lambda fn: fn


@pytest.mark.parametrize("fails_without_cache", [False, True])
def test_a_kernel_numba_cannot_build_falls_back(fails_without_cache, monkeypatch):
    """Where numba cannot cache a kernel it is compiled without a cache (and run once on a
    one-row stretch or a one-request walk); where it cannot compile it at all,
    ``compiled()`` is None and the reference scheduler forms every iteration.
    ``SPECSIM_NUMBA=0`` asks for no kernels without trying numba."""
    import sys

    from sim import steady_kernel

    monkeypatch.setattr(steady_kernel, "_JITTED", {})  # compiled afresh, forgotten after
    fake = _Numba(fails_without_cache)
    monkeypatch.setitem(sys.modules, "numba", fake)
    monkeypatch.setenv("SPECSIM_NUMBA", "1")
    monkeypatch.setattr(steady_kernel, "_BUILT", {})
    got = steady_kernel.compiled()
    assert fake.asked == [True, False]
    code = None if got is None else got.__code__  # a Python copy: the fake compiles nothing
    assert code is (None if fails_without_cache else steady_kernel.stretch.__code__)
    assert steady_kernel.compiled() is got and fake.asked == [True, False]  # looked for once
    for spec in (False, True):  # each kind of walk on its first use, once
        walk = steady_kernel.compiled_walk(spec)
        code = None if walk is None else walk.__code__
        assert code is (None if fails_without_cache else steady_kernel.walk.__code__)
        assert steady_kernel.compiled_walk(spec) is walk
    assert fake.asked == [True, False] * 3
    monkeypatch.setenv("SPECSIM_NUMBA", "0")
    monkeypatch.setattr(steady_kernel, "_BUILT", {})
    assert steady_kernel.compiled() is None and steady_kernel.compiled_walk(True) is None
    assert fake.asked == [True, False] * 3


def test_the_kernels_are_cached_in_a_folder_per_version_of_their_source(tmp_path,
                                                                        monkeypatch):
    """numba keys its cache on a function's own file: the kernels get a cache folder named
    after the hash of every ``sim.kernels`` file, set while they are jitted and put back
    after (an earlier version's folder beside it is removed); without a writable folder
    next to them, one under the user's cache; with none writable, or once the files on
    disk are no longer the ones this process imported, no cache at all. The hash covers
    the other files whose functions the kernels call too (the pass formulas, the draft's
    passes, the adaptive choice, the round's overheads)."""
    import hashlib
    from pathlib import Path
    from types import SimpleNamespace

    from hardware import cost, draft, spec_cost
    from hardware.timing import analytic, measured
    from sim import draft_pricing, kernels, policies, steady_kernel

    here = Path(kernels.__file__).parent
    digest = hashlib.sha256()
    for path in [*sorted(here.glob("*.py")), Path(cost.__file__), Path(draft.__file__),
                 Path(spec_cost.__file__), Path(analytic.__file__), Path(measured.__file__),
                 Path(draft_pricing.__file__), Path(policies.__file__)]:
        digest.update(path.read_bytes())
    name = f"numba-{digest.hexdigest()[:16]}"
    stale = here / "__pycache__" / "numba-0000000000000000"
    stale.mkdir(parents=True, exist_ok=True)
    legacy = Path(steady_kernel.__file__).parent / "__pycache__" / "steady_kernel.walk-1.nbi"
    legacy.parent.mkdir(exist_ok=True)
    legacy.write_bytes(b"")  # cached per file before the kernels moved to sim/kernels
    fake = SimpleNamespace(config=SimpleNamespace(CACHE_DIR="before"))
    with steady_kernel._cache_dir(fake, True) as folder:
        assert fake.config.CACHE_DIR == str(here / "__pycache__" / name) == str(folder)
    assert fake.config.CACHE_DIR == "before" and not stale.exists() and not legacy.exists()
    with steady_kernel._cache_dir(fake, False) as folder:  # without a cache: nothing set
        assert fake.config.CACHE_DIR == "before" and folder is None
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(steady_kernel.os, "access", lambda path, mode: "specsim" in str(path))
    with steady_kernel._cache_dir(fake, True) as folder:
        assert fake.config.CACHE_DIR == str(tmp_path / "specsim" / name) == str(folder)
    assert fake.config.CACHE_DIR == "before"
    monkeypatch.setattr(steady_kernel.os, "access", lambda path, mode: False)
    with steady_kernel._cache_dir(fake, True) as folder:  # numba's default: not versioned
        assert fake.config.CACHE_DIR == "before" and folder is None
    monkeypatch.undo()
    # the files changed under a process that imported older ones: its code is not theirs
    monkeypatch.setattr(steady_kernel, "_IMPORTED", "0" * 16)
    with steady_kernel._cache_dir(fake, True) as folder:
        assert fake.config.CACHE_DIR == "before" and folder is None


def test_a_kernel_compiled_afresh_says_so_on_a_terminal(tmp_path, monkeypatch, capsys):
    """A kernel not in the cache (here: a cache folder of its own, empty) is announced in
    one line on a terminal's stderr before numba compiles it; one read from the cache is
    not, and nothing is printed where stderr is not a terminal."""
    import sys

    from sim import steady_kernel

    pytest.importorskip("numba")
    monkeypatch.setattr(steady_kernel, "_BUILT", {})
    monkeypatch.setattr(steady_kernel, "_JITTED", {})  # compiled afresh, forgotten after
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    # a cache folder of its own: the kernels' sources copied, their version taken from them
    import shutil
    from pathlib import Path

    for source in Path(steady_kernel.kernels.__file__).parent.glob("*.py"):
        shutil.copy(source, tmp_path / source.name)
    monkeypatch.setattr(steady_kernel.kernels, "__file__", str(tmp_path / "__init__.py"))
    monkeypatch.setattr(steady_kernel, "_IMPORTED", steady_kernel._source_version())
    monkeypatch.setattr(steady_kernel, "COMPILED", [])
    assert steady_kernel.compiled() is not None
    err = capsys.readouterr().err.splitlines()
    assert err == ["specsim: compiling the engine's stretch kernel (first run only: then "
                   "cached; up to a minute)"]
    assert steady_kernel.COMPILED == ["stretch"]  # what specsim bench reports
    monkeypatch.setattr(steady_kernel, "_BUILT", {})
    assert steady_kernel.compiled() is not None  # now read from tmp_path's cache
    assert capsys.readouterr().err == ""
    assert steady_kernel.COMPILED == ["stretch"]


def test_every_kernel_compiles_where_numba_is_installed(monkeypatch):
    """A kernel numba cannot compile falls back to the reference path with the same
    records, silently; so where numba is installed, each must compile (a helper named like
    one of the kernel's locals, or a rule numba cannot type, fails here)."""
    pytest.importorskip("numba")
    from sim import steady_kernel

    monkeypatch.setenv("SPECSIM_NUMBA", "1")
    assert steady_kernel.compiled() is not None
    assert steady_kernel.compiled_walk(False) is not None
    assert steady_kernel.compiled_walk(True) is not None


def test_a_run_that_starts_at_time_zero_compiles_no_second_walk():
    """SimPy's clock is the int 0 until the first timeout: a replay whose first request
    arrives at 0 passed it as the walk's start and compiled a second specialisation of the
    walk (about 7 CPU-seconds) besides the float one."""
    pytest.importorskip("numba")
    from sim import steady_kernel
    from sim.build import setups
    from sim.engine_path import PATHS
    from sim.runner import simulate_variants

    for name in ("mooncake-trace", "default"):  # the first arrives at 0, the second later
        sc = load_scenario(repo_root() / "scenarios" / f"{name}.yaml", ["run.requests=30"])
        simulate_variants(setups(sc), sc.run.horizon_s, path=PATHS["compiled"])
    built = [k for key, k in steady_kernel._BUILT.items() if key.startswith("walk") and k]
    assert built
    for k in built:  # (the kinds share one compiled walk: they differ in the generator only)
        for one in k.signatures:
            for other in k.signatures:
                differ = {str(a) + "|" + str(b) for a, b in zip(one, other, strict=True)
                          if a != b}
                assert differ <= {"none|NumPyRandomGeneratorType",
                                  "NumPyRandomGeneratorType|none"}, differ


def test_the_reference_prefix_cache_calls_the_walks_compiled_helpers_as_compiled():
    # on a path that may take the kernels, sim.prefix_cache and sim.offload call their
    # kernel helpers through steady_kernel.fast (on the reference path as they are, so the
    # differential tests still check the compiled helpers against Python's): only helpers
    # the walk itself calls, on the walk's argument types, so that no other specialisation
    # is compiled (silently, mid-run)
    import re
    from pathlib import Path

    import simpy

    from sim import steady_kernel
    from sim.bench import bench_scenario, run_bench
    from sim.cluster import wire
    from sim.engine_path import PATHS
    from sim.prefix_cache import _as_is

    if not steady_kernel.available():
        pytest.skip("no compiled kernels here")
    root = Path(steady_kernel.__file__).parent
    used = set()
    for name in ("prefix_cache.py", "offload.py"):
        used |= set(re.findall(r"helpers\((?:tier\.)?(\w+)\)", (root / name).read_text()))
    assert used == set(steady_kernel.FAST_HELPERS)
    assert used <= set(steady_kernel._PYTHON)  # each one a helper the kernels call
    run_bench(300, 0, "cpu-offload", path=PATHS["compiled"])  # tier loads: reference steps
    from numba.core.types import Literal

    for name in used:
        jit = steady_kernel.compiled_helper(name)
        # (a kernel compiled afresh in this process also tried its helpers on constant
        # arguments as it inferred its types: literal signatures, made with it, not by a call)
        sigs = [s for s in jit.signatures if not any(isinstance(a, Literal) for a in s)] \
            if jit is not None else None
        assert sigs is not None and len(sigs) <= 1, (name, jit.signatures)
    # which each replica takes, by its engine path
    setup = setups(bench_scenario(50, 0, "cpu-offload"), "bench")[0][1]
    for path, helpers in (("reference", _as_is), ("compiled", steady_kernel.fast),
                          ("auto", steady_kernel.fast)):
        (r,) = wire(simpy.Environment(), setup, PATHS[path]).replicas
        assert r.prefix.helpers is helpers, path
