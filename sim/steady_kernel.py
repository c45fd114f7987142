"""The compiled kernels: many iterations of a replica in one call, the same records.

``sim.kernels`` holds them as plain Python: ``stretch`` runs a steady stretch of plain
decoding (``sim.steady``: price each iteration as ``hardware.timing.measured`` prices a
one-stage pass, grant, roll back, emit, release);
``walk`` does what the reference path does for any iteration it can form as vLLM v1's
scheduler would (``sim.steady_walk``): the budget walk, admissions, the target's and the
draft's passes, the verifies' accepted depths, the advance. Here they are compiled with
numba when numba is installed (``SPECSIM_NUMBA=0`` turns that off), each kind on its first
use; without numba every iteration takes the reference path, and tests check that both
give the same records (running the kernels as Python where numba is missing).

numba's disk cache is keyed on a function's own file, so a kernel would keep a stale copy
of a helper changed in another file; the kernels are therefore cached in a folder of their
own per version of ``sim.kernels``'s source (``_cache_dir``), next to it where that is
writable (else under the user's cache), and a change to any of them compiles them afresh.
The version is the one this process imported: a process whose ``sim.kernels`` files
changed on disk after it imported them compiles its kernels without a cache, so that it
never files the code it holds under the new source's name.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import sys
import types
from pathlib import Path

import numpy as np

from hardware import spec_cost
from sim import kernels
from sim.kernels import base, rules
from sim.kernels import stretch as _stretch_module
from sim.kernels import walk as _walk_module
from sim.kernels.base import (
    ADAPTIVE,
    ADAPTIVE_SEQ,
    LADDER,
    LADDER_KEYS,
    OUTPUT,
    PARAM_NAMES,
    TARGET,
)
from workloads import acceptance

__all__ = ["ADAPTIVE", "ADAPTIVE_SEQ", "LADDER", "NO_LOOP", "NO_PREFIX", "PARAM_NAMES", "available",
           "compiled", "compiled_walk", "stretch", "walk", "walk_shape"]

stretch = _stretch_module.stretch
walk = _walk_module.walk
_PROJECT = ("sim.", "hardware.", "workloads.")  # whose functions the kernels may call


def _callees(fn) -> dict:
    """{name: function} of the project's plain functions ``fn`` names as globals."""
    out = {}
    for name in fn.__code__.co_names:
        value = fn.__globals__.get(name)
        if isinstance(value, types.FunctionType) and value.__module__.startswith(_PROJECT):
            out[name] = value
    return out


def _helpers() -> dict:
    """{name: function} of every function the kernels call, directly or through another:
    each compiled once per process (``_jitted``) into the globals of compiled copies of
    its callers, so that the modules themselves stay Python (the reference path calls
    ``sim.draft_pricing.draft_passes`` too)."""
    out: dict = {}
    todo = [stretch, walk]
    while todo:
        for name, fn in _callees(todo.pop()).items():
            if name not in out:
                todo.append(fn)
            elif out[name] is not fn:
                raise ImportError(f"sim.steady_kernel: two helpers named {name!r}")
            out[name] = fn
    return out


_PYTHON = _helpers()
# (Python function, cached?) -> its compiled copy, shared by every kernel of the process
_JITTED: dict = {}
COMPILED: list[str] = []  # the kernels this process compiled rather than read from the cache
_FAST: dict = {}  # helper -> its compiled copy, called on arrays (fast)


def _source_version() -> str:
    """The hash of ``sim.kernels``'s files, and of the other files whose functions they
    call (``hardware.spec_cost``, ``hardware.timing.analytic``), as they are on disk now."""
    here = Path(kernels.__file__).parent
    called = {Path(sys.modules[fn.__module__].__file__) for fn in _PYTHON.values()}
    digest = hashlib.sha256()
    for path in [*sorted(here.glob("*.py")),
                 *sorted(p for p in called if p.parent != here)]:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


# the version of the kernels' source this process imported (just above)
_IMPORTED = _source_version()


def compiled():
    """``stretch`` compiled by numba (cached on disk where a cache folder is writable), or
    None without numba, with ``SPECSIM_NUMBA=0`` or when numba cannot compile it (the same
    ``stretch`` each call: compiled once per process, on a one-row stretch here, so that
    a failure shows before any record depends on it)."""
    if "stretch" not in _BUILT:
        _BUILT["stretch"] = _build(_jit_stretch)
    return _BUILT["stretch"]


def compiled_walk(draws: bool = False):
    """``walk`` compiled for a replica whose acceptance is drawn from its generator
    (``draws``: ``rng`` a generator) or that draws nothing (``rng`` None: no speculation,
    or replayed runs), as ``compiled`` compiles ``stretch`` -- each kind on its first use
    (up to a minute the first time, then read from numba's cache) -- or None where that
    is."""
    key = "walk+rng" if draws else "walk"
    if key not in _BUILT:
        _BUILT[key] = _build(lambda numba, cache: _jit_walk(numba, cache, draws))
    return _BUILT[key]


def available() -> bool:
    """Whether numba is installed and not turned off (``SPECSIM_NUMBA=0``): the kernels can
    be had, unless numba fails to compile them (known when one is built)."""
    return (os.environ.get("SPECSIM_NUMBA", "1") != "0"
            and importlib.util.find_spec("numba") is not None)


def _build(jit_one):
    """``jit_one(numba, cache)``'s kernel, compiled without a cache where it cannot be
    cached, or None (no numba, ``SPECSIM_NUMBA=0``, or numba cannot compile it)."""
    if os.environ.get("SPECSIM_NUMBA", "1") == "0":
        return None
    try:
        import numba
    except ImportError:
        return None
    for cache in (True, False):
        try:
            return jit_one(numba, cache)
        except Exception:  # noqa: BLE001 -- numba's errors have no common base
            continue  # no writable cache: compile again without one
    return None


def _jitted(numba, cache: bool, fn):
    """``fn`` jitted: a copy of it whose globals name the compiled copies of the helpers it
    calls (``_PYTHON``, each jitted the same way, once per process), so that Python callers
    of the same functions -- the reference path calls ``draft_passes`` too -- keep the
    Python ones."""
    with _cache_dir(numba, cache) as folder:
        if folder is None or not any(folder.rglob(f"*.{fn.__name__}-*.nbi")):
            _say_compiling(fn.__name__)
            COMPILED.append(fn.__name__)
        jit = numba.njit(cache=folder is not None, nogil=True)

        def build(f):
            key = (f, folder is not None)
            if key not in _JITTED:
                names = dict(f.__globals__)
                for name, helper in _callees(f).items():
                    names[name] = build(helper)
                _JITTED[key] = jit(types.FunctionType(f.__code__, names, f.__name__,
                                                      f.__defaults__, f.__closure__))
            return _JITTED[key]

        return build(fn)


def fast(fn):
    """Helper ``fn`` of the kernels (``sim.kernels.prefix``, ``sim.kernels.tier``) as the
    kernels this process compiled call it, or ``fn`` itself where none has been compiled
    (or none calls it): the same integer arithmetic, so the reference path's prefix cache
    and CPU tier call this rather than loop in Python. The compiled copy takes its
    memoryview arguments (what the Python one indexes fastest) as the arrays they view,
    the types the kernels compiled it for: no other specialisation is compiled."""
    got = _FAST.get(fn)
    if got is None:
        jit = _JITTED.get((fn, True)) or _JITTED.get((fn, False))
        if jit is None or fn.__name__ not in FAST_HELPERS:
            return fn
        got = _FAST[fn] = _on_arrays(jit)
    return got


# the helpers the reference path calls through ``fast``: those the walk calls, with the
# same argument types (so their compiled copies are the walk's, read from its cache), no
# other (one the walk does not call would be compiled anew, without a word, on first use)
FAST_HELPERS = ("pc_pop", "pc_free_slot", "pc_lookup", "pc_attach", "pc_cache",
                "pc_keep_committed", "tier_idents", "tier_offer_slot", "tier_finished",
                "tier_lookup")


def _on_arrays(jit):
    def call(*args):
        return jit(*[np.asarray(a) if type(a) is memoryview else a for a in args])

    return call


def compiled_helper(name: str):
    """The compiled copy of the kernels' helper ``name`` (``_PYTHON``), or None where no
    kernel has been compiled in this process."""
    helper = _PYTHON[name]
    return _JITTED.get((helper, True)) or _JITTED.get((helper, False))


def _say_compiling(kind: str) -> None:
    """One line on a terminal's stderr before a kernel is compiled rather than read from
    the cache (the first run after an install or an upgrade, or without a writable cache):
    several seconds of silence otherwise."""
    if sys.stderr.isatty():
        print(f"specsim: compiling the engine's {kind} kernel (first run only: then "
              "cached; up to a minute)", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _cache_dir(numba, cache: bool):
    """While the kernels are jitted: the folder numba caches them in, set as its cache
    folder and yielded -- one for the version of ``sim.kernels`` this process imported
    (the hash of its files), next to them (where the folders of earlier versions are
    removed) or, where that is not writable, under ``$XDG_CACHE_HOME/specsim``
    (``~/.cache/specsim``) -- or None, to compile without a cache: ``cache`` false, no
    writable folder, or the files changed on disk since this process imported them."""
    config = getattr(numba, "config", None)
    if not cache or config is None or _source_version() != _IMPORTED:
        yield None
        return
    here = Path(kernels.__file__).parent
    name = f"numba-{_IMPORTED}"
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specsim"
    folder = None
    for candidate in (here / "__pycache__" / name, user / name):
        try:
            candidate.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(candidate, os.W_OK):
            folder = candidate
            break
    if folder is None:  # numba's own default folder is keyed per file: no cache
        yield None
        return
    if folder.parent == here / "__pycache__":
        for old in folder.parent.glob("numba-*"):  # earlier versions' kernels: never read
            if old != folder:
                shutil.rmtree(old, ignore_errors=True)
        # the kernels' files from before they moved to sim/kernels (cached per file here)
        for old in (Path(__file__).parent / "__pycache__").glob("steady_kernel.*.nb[ci]"):
            with contextlib.suppress(OSError):
                old.unlink()
    before = config.CACHE_DIR
    config.CACHE_DIR = str(folder)
    try:
        yield folder
    finally:
        config.CACHE_DIR = before


_V1 = np.zeros(rules.N_V1, dtype=np.int64)  # the warm-ups' vLLM v1 rules
_GRID = np.array([1.0, 1e9])  # the warm-ups' timing: two grid points, one second per token
_PARAMS = (np.zeros(len(PARAM_NAMES)), _GRID, _GRID, np.zeros(0), np.zeros(0),
           np.zeros((0, 1)), np.ones(1), np.ones(1))


def _jit_stretch(numba, cache: bool):
    """``stretch`` jitted and run once on a one-row stretch with the argument types
    ``sim.steady`` passes."""
    kernel = _jitted(numba, cache, stretch)
    st = np.zeros((1, base.slots.N_COLS), dtype=np.int64)
    st[0, OUTPUT] = 1
    kernel(st, np.zeros(1), 1, 1, 16, _V1, 0.0, 1.0, 1, False, True, True, 1,
           np.zeros(0, dtype=np.int64), 0.0, 0.0, 0, *_PARAMS)
    return kernel


def _jit_walk(numba, cache: bool, draws: bool):
    """``walk`` jitted and run once, as ``sim.steady_walk`` calls it for a replica whose
    acceptance is drawn (``draws``: speculating) or not (not speculating): one waiting
    request of two prompt and two output tokens."""
    kernel = _jitted(numba, cache, walk)
    st = np.zeros((1, base.slots.N_COLS + 1), dtype=np.int64)  # (SCHEDULED last)
    st[0, TARGET] = st[0, OUTPUT] = 2
    kernel(st, 0, 1, np.full(1, -np.inf), np.inf, np.zeros(1, dtype=np.int64),
           np.zeros(1, dtype=np.int64), 1, np.zeros(0), 4, 4, 16, _V1, 4, 4, True, 1, 1, 0.0,
           1.0,
           2, False, False, True, np.empty(4), *NO_LOOP, np.full(1, 2, dtype=np.int64),
           np.zeros(1, dtype=np.int64), 0, *walk_shape(draws), _PARAMS, _PARAMS,
           _NO_SPEC,
           *NO_PREFIX, stage_list((), _PARAMS), 0.0, 0.0, np.zeros(0),
           np.zeros((1, 2), dtype=np.int64), np.zeros((1, 4)), np.zeros((1, 8), dtype=np.int64),
           0)
    return kernel


def stage_list(stages, like):
    """``walk``'s ``stages``: a pipeline's stages' ``kernel_params`` (none for one stage) as
    numba takes them whatever their number (a typed list of tuples of the type of
    ``like``, a stage's: one specialisation), or a tuple without numba."""
    try:
        from numba import typed, typeof
    except ImportError:
        return tuple(stages)
    return typed.List(stages) if len(stages) else typed.List.empty_list(typeof(like))


# walk's closed-loop arguments without one (loop, sub_at, think, filled, tail)
NO_LOOP = (False, np.zeros(0), np.zeros(0), 0, 0)

# walk's prefix-cache arguments without a prefix cache (mem, keys, starts, the prompts'
# tokens, the undo log; then a CPU tier's mem, undo log, counts and the slots' offers)
NO_PREFIX = tuple(np.zeros(0, dtype=np.int64) for _ in range(9))


def walk_shape(spec: bool, row=None, feeds=None, tri=None, rng=None, tables=None,
               reps: int = 1, one_pass: bool = False, smoothing: float | None = None,
               ladder: tuple | None = None, propose: float | None = None, prng=None,
               host_s: float = 0.0, sticky: bool = False,
               per_sequence: bool = False, width: int = 1, ahead: bool = False) -> tuple:
    """``walk``'s arguments from ``row`` to ``host_s``: the defaults without speculation (no
    draft, ``rng`` None), else the ones given (``tri`` None: a chain; ``tables``:
    the acceptance model's ``kernel_tables`` for each of its tasks and its task bits, as
    ``stack_tables`` takes them, whose kinds decide whether ``rng`` is used;
    ``smoothing``: an adaptive policy's, its α̂ then given per walk: 0.0 here, with
    ``per_sequence`` a γ per sequence (``ADAPTIVE_SEQ``), with ``width`` > 1 (its
    ``max_width``) trees widened at the root tried too; ``ladder``:
    a batch ladder's γ by batch size and what the size counts (``BatchLadder.key``, one of
    ``LADDER_KEYS``), ``sticky`` whether a request it once gives γ = 0 never drafts again
    (vLLM v0's; the walk's rows carry ``SPEC_OFF``);
    ``propose``: a lookup drafter's proposal rate, with ``prng`` the generator its matches
    are drawn from and ``host_s`` its host seconds per decoder; None: a draft drafts
    every step, and ``prng`` is a generator never drawn from, so that the walk is
    compiled for one type of it; ``ahead``: a draft on its own GPU drafts ahead during the
    verify, what its last drafting ahead outlasted its verify by then given per walk: 0.0
    here)."""
    lookup = (-1.0, _NEVER_DRAWN, 0.0) if propose is None else \
        (float(propose), prng, float(host_s))
    lookup = (*lookup, bool(ahead), 0.0)
    if not spec:
        return (_NO_ROW, 0, _NO_ROW, -1.0, 1, False, 0, 0.0, 0.0, 1, _NO_ROW, 0, False, None,
                *stack_tables(((acceptance.KERNEL_RUNS, 0.0, np.zeros(1, dtype=np.int64),
                                np.zeros(1, dtype=np.uint8), 1, np.zeros((1, 1))),), 0),
                *lookup)
    if row is None:  # a chain of one guess, always accepted (the warm-up)
        row, feeds, rng = np.ones(1, dtype=np.int64), np.ones(1, dtype=np.int64), \
            np.random.default_rng(0)
        tables = ((acceptance.KERNEL_LEVELS, 0.0, _NO_ROW, np.zeros(2, dtype=np.uint8), 1,
                   np.ones((1, 2))),), 0
    nodes = int(np.cumprod(row).sum())
    stack = stack_tables(*tables)
    draws = bool((stack[0][:, base.KIND] != acceptance.KERNEL_RUNS).any())
    mode = (ADAPTIVE_SEQ if per_sequence else ADAPTIVE) if smoothing is not None \
        else LADDER if ladder is not None else 0
    steps, key = ladder if ladder is not None else (_NO_ROW, LADDER_KEYS[0])
    return (row, nodes, feeds, -1.0 if tri is None else float(tri), int(reps),
            bool(one_pass), mode, 0.0, 0.0 if smoothing is None else float(smoothing),
            int(width), np.asarray(steps, dtype=np.int64), LADDER_KEYS.index(key), bool(sticky),
            rng if draws else None,
            *stack, *lookup)


def stack_tables(tasks, bits: int) -> tuple:
    """``walk``'s acceptance arguments from ``meta`` to ``bits``: the ``kernel_tables``
    of each task of an acceptance model (``tasks``, in task order; one for a model without
    tasks, ``bits`` 0), stacked -- ``meta`` int64 [T, 5] (per task its kind, its tape and
    where its runs, its ring and its table's rows start: ``base.KIND`` ...), ``p_geo``
    float64 [T] and the runs (int64), rings (uint8) and tables (float64 [R, C], each task's
    padded with zeros to the widest) one after another -- and ``bits``, the stream's low
    bits that hold its task (``workloads.task_mix.TASK_BITS``)."""
    meta = np.zeros((len(tasks), 5), dtype=np.int64)
    width = max(t[5].shape[1] for t in tasks)
    at = np.zeros(3, dtype=np.int64)  # where the next task's runs, ring and rows start
    for i, (kind, _, runs, ring, tape, table) in enumerate(tasks):
        meta[i] = kind, tape, *at
        at += len(runs), len(ring), len(table)
    tables = [np.pad(np.asarray(t[5], dtype=np.float64), ((0, 0), (0, width - t[5].shape[1])))
              for t in tasks]
    return (meta, np.array([t[1] for t in tasks], dtype=np.float64),
            np.concatenate([np.asarray(t[2], dtype=np.int64) for t in tasks]),
            np.concatenate([np.asarray(t[3], dtype=np.uint8) for t in tasks]),
            np.ascontiguousarray(np.concatenate(tables)), int(bits))


_NO_ROW = np.zeros(0, dtype=np.int64)
# the matches' generator of a walk without a lookup drafter: passed, never drawn from
_NEVER_DRAWN = np.random.default_rng(0)
_NO_SPEC = np.zeros(len(spec_cost.SPEC_FIELDS))  # round_seconds' parameters: nothing more
_BUILT: dict = {}  # "stretch", "walk", "walk+rng": the compiled kernels (None: not to be had)
