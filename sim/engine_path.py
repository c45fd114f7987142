"""How a run computes its iterations: by the reference scheduler one at a time, or by the
compiled kernels several at once. Never *what* they are: every path gives the same
records, and tests run the hand-checked semantic tests on each.

A path is an input of one run (``sim.runner.simulate(..., path=...)``, ``specsim run
--engine-path``), held by each replica. Its switches:

- ``fast``: whether a replica may take the compiled kernels at all -- steady stretches
  of plain decoding (``sim.steady``) and walks of vLLM v1 iterations (``sim.steady_walk``);
  where they cannot form an iteration (``sim.gate`` says why) the reference scheduler
  does;
- ``kernels_after``: how many times a replica looks for a stretch or a walk, taking the
  reference path meanwhile, before it loads the kernels (``sim.steady.use_kernels``): 0
  from the start; None (``auto``): from the start in a run of ``steady.KERNEL_REQUESTS``
  requests or more, else once this process has looked ``steady.KERNEL_AFTER`` times (the
  one process-wide count: a sweep's small runs share the kernels' load; it decides how
  fast a run goes, never its records).

Without numba (or with ``SPECSIM_NUMBA=0``) there are no compiled kernels: every path is
then the reference path.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EnginePath:
    """Whether a run may take the compiled kernels (``auto``, ``compiled``) or not
    (``reference``), and when."""

    fast: bool = True
    kernels_after: int | None = None  # 0: compiled from the start; None: auto


AUTO = EnginePath()
PATHS = {
    "auto": AUTO,
    "reference": EnginePath(fast=False),
    "compiled": EnginePath(kernels_after=0),
}
HELP = {
    "auto": "the compiled kernels once they pay for themselves (default)",
    "reference": "the reference scheduler, one iteration at a time (slowest)",
    "compiled": "the compiled kernels from the first iteration",
}
